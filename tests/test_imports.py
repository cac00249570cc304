"""The house's shape (docs/DESIGN.md, "Module map"): imports inside `codegen/` run one way.

Every import of a `codegen` module counts, at module level or inside a function (a function-local
import dodges a cycle at import time but keeps it in the design), except those under
`if TYPE_CHECKING:`.
"""

from __future__ import annotations

import ast
from pathlib import Path

CODEGEN = Path(__file__).resolve().parent.parent / "codegen"


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_blocks(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def import_graph(root: Path = CODEGEN) -> dict[str, set[str]]:
    """codegen module -> the codegen modules it imports."""
    paths = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {m: set() for m in paths}
    for mod, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_blocks(tree)
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                subs = [f"{base}.{a.name}" for a in node.names]
                # `from pkg import mod` imports the module; `from pkg import name`, the package.
                names = subs if any(n in paths for n in subs) else [base]
            else:
                continue
            graph[mod].update(n for n in names if n in paths and n != mod)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_in_codegen():
    found = cycles(import_graph())
    assert found == [], "import cycles in codegen/: " + "; ".join(
        " <-> ".join(c) for c in found)


def test_generators_do_not_import_the_orchestrator():
    graph = import_graph()
    up = sorted(m for m, deps in graph.items()
                if m.startswith("codegen.dest") and deps & {"codegen.gen", "codegen.__main__",
                                                            "codegen.build"})
    assert up == []


# docs/DESIGN.md, "Module map": a module imports its own floor or those below. Every module of
# codegen/dest is on the generators' floor.
FLOORS: dict[int, tuple[str, ...]] = {
    6: ("codegen", "__main__", "build", "setuptools", "testing"),
    5: ("cli",),
    4: ("gen",),
    2: ("layout", "rendering"),
    1: ("load", "load_samples", "yaml_source", "verify", "shape", "formulas", "parse", "schema_errors", "api", "api.cpp",
        "api.cpp_stable", "api.python", "abi", "tags", "torch_namespaces", "pysource",
        "contract", "compat"),
    0: ("model", "diagnostics", "escape", "literals", "enums", "config", "files", "loader",
        "reserved", "expr"),
}
GENERATORS_FLOOR = 3


def floor_of(module: str) -> int | None:
    if module.startswith("codegen.dest"):
        return GENERATORS_FLOOR
    for floor, names in FLOORS.items():
        if module in {n if n == "codegen" else f"codegen.{n}" for n in names}:
            return floor
    return None


def test_imports_run_downward():
    graph = import_graph()
    assert [m for m in graph if floor_of(m) is None] == [], "add new modules to FLOORS"
    upward = [f"{m} -> {d}" for m, deps in sorted(graph.items()) for d in sorted(deps)
              if floor_of(d) > floor_of(m)]  # type: ignore[operator]
    assert upward == []


def test_leaves_import_no_generator():
    graph = import_graph()
    for leaf in ("codegen.rendering", "codegen.reserved", "codegen.layout", "codegen.model",
                 "codegen.diagnostics", "codegen.escape", "codegen.expr"):
        assert not any(d.startswith("codegen.dest") for d in graph[leaf]), leaf


def test_the_check_sees_a_cycle(tmp_path):
    # A check that could pass vacuously: two modules importing each other are found.
    pkg = tmp_path / "codegen"
    (pkg / "dest").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "dest" / "__init__.py").write_text("")
    (pkg / "gen.py").write_text("from codegen.dest import a\n")
    (pkg / "dest" / "a.py").write_text("def f():\n    from codegen.gen import x\n")
    (pkg / "dest" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from codegen import gen\n")
    graph = import_graph(pkg)
    assert cycles(graph) == [["codegen.dest.a", "codegen.gen"]]
    assert graph["codegen.dest.b"] == set()
