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
    5: ("cli", "toolchain", "build_notes"),
    4: ("gen",),
    2: ("layout", "rendering"),
    1: ("load", "load_samples", "yaml_source", "verify", "shape", "formulas", "parse", "schema_errors", "api", "api.cpp",
        "api.cpp_stable", "api.python", "abi", "tags", "torch_namespaces", "pysource",
        "contract", "compat", "sample_failures"),
    0: ("model", "diagnostics", "escape", "literals", "enums", "config", "files", "loader",
        "reserved", "expr", "lalr", "jobs", "torch_signatures"),
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


# --------------------------------------------------------------------------------------------------
# The project configuration reaches code generation as an argument (codegen.gen.render): the
# generators and the back end's floor never read the active project (config.current, config.use).

# What code generation is made of: every generator, the back end's floor, and the orchestrator.
GENERATION = ("codegen.gen", "codegen.layout", "codegen.rendering", "codegen.torch_namespaces")
_PROJECT_GLOBALS = {"current", "use", "_current"}


def project_global_reads(path: Path) -> list[str]:
    """`line: what` for each read of the active project in the module at `path`: an attribute
    `current`/`use`/`_current` of the codegen.config module under any name it is imported as,
    or those names imported from it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules = {"codegen.config"}     # how the module spells codegen.config
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module in ("codegen", ""):   # `from codegen import config`, `from . import config`
                modules.update(a.asname or a.name for a in node.names if a.name == "config")
            elif module == "codegen.config" or module == "config" or module.endswith(".config"):
                out += [f"{node.lineno}: from {module} import {a.name}" for a in node.names
                        if a.name in _PROJECT_GLOBALS or a.name == "*"]
        elif isinstance(node, ast.Import):
            modules.update(a.asname for a in node.names if a.name == "codegen.config" and a.asname)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _PROJECT_GLOBALS \
                and ast.unparse(node.value) in modules:
            out.append(f"{node.lineno}: {ast.unparse(node)}")
    return sorted(out)


def generation_modules(root: Path = CODEGEN) -> dict[str, Path]:
    paths = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    return {m: p for m, p in paths.items() if m.startswith("codegen.dest") or m in GENERATION}


def test_generators_read_no_active_project():
    modules = generation_modules()
    assert "codegen.dest.py_reg" in modules and "codegen.layout" in modules
    found = [f"{m}:{r}" for m, p in modules.items() for r in project_global_reads(p)]
    assert found == [], "take the project as an argument instead: " + "; ".join(found)


def test_the_check_sees_a_read_of_the_active_project(tmp_path):
    # A check that could pass vacuously: every spelling of a read is found, in every module of
    # code generation, and the orchestrating layers may read it.
    pkg = tmp_path / "codegen"
    (pkg / "dest").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text("def current(): ...\n")
    (pkg / "dest" / "a.py").write_text(
        "from codegen import config\ndef out():\n    return config.current().generated\n")
    (pkg / "dest" / "b.py").write_text(
        "def out():\n    from codegen.config import current\n    return current().build\n")
    (pkg / "dest" / "c.py").write_text(
        "import codegen.config as cfg\nfrom codegen import config as c\n"
        "X = cfg.current\ndef f(p):\n    with c.use(p):\n        pass\n")
    (pkg / "layout.py").write_text("from . import config\nP = config._current.get()\n")
    (pkg / "rendering.py").write_text("from codegen.config import Project\n"
                                      "def out(project: Project):\n    return project.generated\n")
    (pkg / "build.py").write_text("from codegen import config\nP = config.current()\n")
    found = {m: project_global_reads(p) for m, p in generation_modules(pkg).items()}
    assert found == {
        "codegen.dest.a": ["3: config.current"],
        "codegen.dest.b": ["2: from codegen.config import current"],
        "codegen.dest.c": ["3: cfg.current", "5: c.use"],
        "codegen.layout": ["2: config._current"],
        "codegen.rendering": [],
    }
