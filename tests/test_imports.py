"""The import structure, read from the source (nothing imported): no circle among quail_spark's modules
(lazy imports inside functions count) nor between a subpackage and the modules outside it, no module
importing a package above it, and gpu_worker reading the environment only in config.py."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def modules(package: str) -> dict[str, Path]:
    """Dotted name -> file of every module of ``package`` (a package is named by its __init__.py)."""
    out = {}
    for f in sorted((REPO / package).rglob("*.py")):
        parts = f.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def imports(name: str, path: Path, known: dict) -> set[str]:
    """The modules of ``known`` that module ``name`` imports anywhere in its body."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in known else base)
    return (out & set(known)) - {name}


def graph(package: str) -> dict[str, set[str]]:
    mods = modules(package)
    return {m: imports(m, f, mods) for m, f in mods.items()}


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One circle of ``edges`` as a path (first node repeated at its end), or None."""
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == "open":
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        state[n] = "done"
        stack.pop()
        return None

    for n in sorted(edges):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_no_import_circle_among_quail_spark_modules():
    assert cycle(graph("quail_spark")) is None, cycle(graph("quail_spark"))


def test_no_import_circle_between_a_subpackage_and_the_rest():
    """Each subpackage (enrich/) as one node: it may use the top-level modules or be used by them, not both."""
    g = graph("quail_spark")
    subpackages = {m for m, f in modules("quail_spark").items() if f.name == "__init__.py" and "." in m}

    def unit(m):
        return next((p for p in subpackages if m == p or m.startswith(p + ".")), m)

    units: dict[str, set[str]] = {}
    for m, targets in g.items():
        units.setdefault(unit(m), set()).update(unit(t) for t in targets if unit(t) != unit(m))
    assert cycle(units) is None, cycle(units)


def test_no_module_imports_a_package_above_it():
    wrong = [(m, t) for m, targets in graph("quail_spark").items() for t in targets if m.startswith(t + ".")]
    assert not wrong, f"modules importing their own package's __init__ (import the module that defines it): {wrong}"


def environment_reads(path: Path) -> list[int]:
    """Lines of ``path`` that touch os.environ / os.getenv (or import them from os)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb", "getenvb") \
                and isinstance(node.value, ast.Name) and node.value.id == "os":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and \
                any(a.name in ("environ", "getenv", "environb", "getenvb") for a in node.names):
            lines.append(node.lineno)
    return lines


def test_gpu_worker_reads_the_environment_only_in_its_config_module():
    found = {str(f.relative_to(REPO)): environment_reads(f) for f in sorted((REPO / "gpu_worker").rglob("*.py"))
             if f.name != "config.py" or f.parent.name != "gpu_worker"}
    assert not {f: lines for f, lines in found.items() if lines}, \
        "engine settings are EngineConfig fields (defaults read in gpu_worker/config.py)"
    assert environment_reads(REPO / "gpu_worker" / "config.py"), "the check reads os.environ where it is"


def test_the_checks_see_a_circle_and_an_upward_import():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None
    g = graph("quail_spark")
    assert "quail_spark.executor" in g["quail_spark.enrich.job"]  # lazy and top-level imports are both read
    assert "quail_spark.enrich.spec" in g["quail_spark.enrich"]
