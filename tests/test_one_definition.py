"""One definition each, read from the source: the AI functions' names and kinds, the internal UDFs, the
decode calls' default lengths and the default model's shape are written once on the Python side
(gpu_worker.ai_calls, gpu_worker.config) and reach the Java rules through the jar's contract
(quail_spark/extension.py ``contract()``, Contract.java), never as a second copy in Java."""
from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JAVA = sorted((REPO / "quail_spark" / "java").rglob("*.java"))
PRODUCT = [p for pkg in ("quail_spark", "gpu_worker", "quail_kernels") for p in sorted((REPO / pkg).rglob("*.py"))]


def code(path: Path) -> str:
    """A Java file without its comments (javadoc and // lines), string literals kept."""
    text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
    return re.sub(r"(?m)//.*$", "", text)


def test_java_names_no_ai_function_and_no_internal_udf_outside_the_contract():
    from gpu_worker import ai_calls

    names = set(ai_calls.FUNCTIONS) | set(ai_calls.INTERNAL) | {ai_calls.EXTRACT_UDF}
    found = []
    for f in JAVA:
        for m in re.finditer(r'"([a-z_]+)"', code(f)):
            if m.group(1) in names and not code(f)[max(0, m.start() - 18):m.start()].endswith("Contract.internal("):
                found.append(f"{f.name}: {m.group(0)}")
    assert not found, f"AI function names written in Java instead of read from the contract: {found}"


def test_java_holds_no_model_shape_or_decode_default():
    shape = {str(v) for v in (106_168_320, 576, 1536)}
    found = [f"{f.name}: {m.group(0)}" for f in JAVA
             for m in re.finditer(r"\b\d[\d_]*\b", code(f)) if m.group(0).replace("_", "") in shape]
    found += [f"{f.name}: {m.group(0)}" for f in JAVA
              for m in re.finditer(r"(GENERATE_TOKENS|FIELD_TOKENS|SUMMARY_WORDS)\s*=\s*\d+", code(f))]
    assert not found, f"numbers of the Python side's definitions copied into Java: {found}"


def test_the_jar_carries_the_contract_the_python_side_makes():
    from quail_spark import extension

    with zipfile.ZipFile(extension.jar_path()) as z:
        assert json.loads(z.read(extension.CONTRACT)) == json.loads(extension.contract())
    got = json.loads(extension.contract())
    assert got["functions"]["ai_filter"] == "if" and got["default_model"]["n_lin"] == "106168320"


def test_python_writes_the_function_table_and_the_model_shapes_once():
    tables = [p.relative_to(REPO).as_posix() for p in PRODUCT if re.search(r"""["']ai_filter["']\s*:""", p.read_text())]
    assert tables == ["gpu_worker/ai_calls.py"], tables
    # the internal UDFs' names listed (a tuple or list of them): once
    lists = [p.relative_to(REPO).as_posix() for p in PRODUCT
             if re.search(r"""[(\[]\s*["']quail_\w+\(?["']\s*,\s*["']quail_""", p.read_text())]
    assert lists == ["gpu_worker/ai_calls.py"], lists
    shapes = [p.relative_to(REPO).as_posix() for p in PRODUCT
              if re.search(r"hidden_size=576|\b576\s*,\s*9\s*,|\b2560\s*,\s*32\s*,", p.read_text())]
    assert shapes == ["gpu_worker/config.py"], shapes


def test_the_smollm2_shape_is_the_gguf_files():
    import pytest

    from gpu_worker.config import MODEL_SHAPES, ModelConfig
    from gpu_worker.weights import resolve

    try:
        src = resolve("smollm2-135m")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    gguf = ModelConfig.from_hf_config(json.loads((src.folder / "config.json").read_text()))
    want = MODEL_SHAPES["smollm2-135m"]
    keys = ("arch", "vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
            "intermediate_size", "rope_theta", "rms_eps", "tie_embeddings", "max_position")
    assert {k: getattr(gguf, k) for k in keys} == {k: getattr(want, k) for k in keys}


def test_java_makes_and_reads_json_with_jackson_only():
    """No JSON text assembled from string pieces (an escaped key in a literal) and no regex over a spec."""
    found = [f"{f.name}: {m.group(0)}" for f in JAVA for m in re.finditer(r'\\"[a-z_]+\\"\s*:', code(f))]
    found += [f"{f.name}: regex over a spec" for f in JAVA if re.search(r'Pattern\.compile\("[^"]*\\"', code(f))]
    assert not found, found


def test_the_counters_names_are_listed_once():
    """The engine's counters are named by gpu_worker.counters (`Counters`, `REPORTED`); no other product
    file lists several of them (a tuple, list, set or dict literal of four or more)."""
    import ast

    from gpu_worker.counters import Counters

    names = set(Counters())
    lists = []
    for p in PRODUCT:
        for node in ast.walk(ast.parse(p.read_text())):
            items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None) \
                if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else None
            hits = [x.value for x in items or () if isinstance(x, ast.Constant) and x.value in names]
            if len(hits) >= 4:
                lists.append(p.relative_to(REPO).as_posix())
    assert set(lists) == {"gpu_worker/counters.py"}, lists
