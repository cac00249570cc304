"""Op library IR -> `generated/runtime/ops.py` (the `runtime.ops` module),
`generated/runtime/_manifest.py` (what `import runtime` loads), and the run-time loader
`generated/runtime/_loader.py`. Paths and module names are those of opgen's example; a project
names its own (`<package>.ops`, codegen.config.Project.module_prefix and python_out).

`runtime.ops.<name>` is the op's `torch._ops.OpOverload` itself, not a wrapper, so calling it
costs exactly what `torch.ops.<ns>.<op>.<overload>(...)` costs. The module resolves each name on
first access (PEP 562 `__getattr__`) and caches it as a module attribute, so importing it costs
nothing per op.

Note [API names]
Every op gets one name in the Python API (and, within its namespace, in the C++ call API
`<ns>::ops::<name>` of the kernel headers). `api_names` decides it, deterministically:
  1. an op whose base name (`scaled_add` of `exops::scaled_add.out`) is unique gets that name;
  2. ops sharing a base name are told apart by their overload: `shrink` and `shrink_out`;
  3. names still shared across namespaces are prefixed with the namespace: `ns1_add`, `ns2_add`;
  4. a name that is a keyword of the target language, or a name the module or its stub owns
     (codegen.reserved: `_OPS`, `Tensor`, `__doc__`; in C++, macros) gets a trailing underscore:
     `lambda_`, `Tensor_`;
  5. anything still ambiguous (`foo_bar` vs `foo.bar`) is a located error asking for a rename.
"""

from __future__ import annotations

import ast
import posixpath
import types
from functools import lru_cache
from pathlib import Path, PurePosixPath

from codegen import reserved
from codegen.abi import namespace_abi
from codegen.api import python as P
from codegen.config import Project
from codegen import layout as L
from codegen.dest import cpp_stamp
from codegen.diagnostics import Diagnostics
from codegen.rendering import banner, python_dir, render
from codegen.model import Op, OpLibrary, PyRef
from codegen.dest.py_vmap import generated_rule
from codegen.tags import effect_only


@lru_cache(maxsize=1)
def ops_module_names() -> frozenset[str]:
    """Names an op cannot have in `runtime.ops` and `ops.pyi`: what ops.py binds for itself, the
    attributes every module has, and what the stub imports or names in its annotations."""
    ops_py = reserved.bound_names(render("py_ops.py.j2", banner="#", entries=[], module="ops"))
    stub_imports = reserved.bound_names("\n".join(P.STUB_IMPORTS))
    annotations = {n.id for text in P.ANNOTATIONS for n in ast.walk(ast.parse(text))
                   if isinstance(n, ast.Name)}
    module_attrs = set(dir(types.ModuleType("m"))) | {"__file__", "__cached__", "__builtins__",
                                                      "__path__", "__annotations__"}
    return frozenset(ops_py | stub_imports | annotations | module_attrs | {"__all__"})


def python_reserved() -> frozenset[str]:
    """Names no op can have in runtime.ops: keywords, and what ops.py and ops.pyi own."""
    return reserved.PY_KEYWORDS | ops_module_names()


def python_names(lib: OpLibrary, diags: Diagnostics) -> dict[str, str]:
    """str(op.name) -> its attribute name in `runtime.ops` (for ops.py and its stubs)."""
    # Once per library: ops.py, its stubs and the registrations ask.
    return dict(L.reported(lib, python_names, diags,
                           lambda d: L.api_names(lib.ops, d, reserved=python_reserved())))


def has_python_side(op: Op) -> bool:
    """Whether the op needs `runtime._reg_<ns>`: anything registered from Python."""
    return (op.fake is not None or op.derivatives is not None or op.vmap is not None
            or op.autocast is not None or any(isinstance(k, PyRef) for _, k in op.dispatch)
            or generated_rule(op) is not None or effect_only(op.schema))


def generate_ops(lib: OpLibrary, diags: Diagnostics, project: Project) -> dict[str, str]:
    names = python_names(lib, diags)
    entries = [
        {"name": names[str(op.name)], "ns": op.namespace, "op": op.name.name,
         "overload": op.name.overload_or_default, "schema": str(op.schema)}
        for op in lib.ops
    ]
    entries.sort(key=lambda e: e["name"])
    text = render("py_ops.py.j2", banner=banner("#", [f.path for f in lib.files]),
                    entries=entries, module=f"{project.module_prefix}.ops")
    return {f"{python_dir(project)}/ops.py": text}


def generate_manifest(lib: OpLibrary, diags: Diagnostics,
                      project: Project) -> dict[str, str]:
    namespaces = []
    for ns, shs in L.shards(lib).items():
        ops = [op for s in shs for op in s.ops]
        namespaces.append({
            "ns": ns,
            "library": L.library_file(ns),
            "schema_hash": cpp_stamp.schema_hash(lib, ns),
            "python_module": L.python_module(project, ns),
            "python_required": any(has_python_side(op) for op in ops),
            "ops": len(ops),
            "claims_namespace": shs[0].is_library,
            "op_names": [L.impl_name(op) for op in ops],
            "sources": sorted({s.file.path for s in shs}),
            "stamp_prefix": L.stamp_prefix(ns),
            # Note [ABI choice] in codegen/abi.py: a stable library loads on torch >= min_torch.
            "min_torch": (a.min_text if (a := namespace_abi(lib, ns)) is not None else None),
        })
    here = python_dir(project)
    text = render("py_manifest.py.j2", banner=banner("#", [f.path for f in lib.files]),
                    namespaces=namespaces, package=project.package,
                    library_dir=_relpath(project.libraries, here),
                    project_root=_relpath(".", here), python_dir=here,
                    build_command=project.build_command,
                    codegen_command=project.codegen_command)
    return {f"{here}/_manifest.py": text}


def _relpath(target: str, start: str) -> str:
    """`target` relative to `start`, both project-relative: a path that holds no machine's
    directories, so the generated package can be moved or installed anywhere."""
    return PurePosixPath(posixpath.relpath(target, start)).as_posix()


# The loader every generated package carries (codegen/loader.py, copied unchanged).
LOADER_SOURCE = Path(__file__).resolve().parent.parent / "loader.py"


def generate_loader(lib: OpLibrary, diags: Diagnostics, project: Project) -> dict[str, str]:
    """`<python dir>/_loader.py`: the run-time loader, so the package needs torch alone."""
    text = LOADER_SOURCE.read_text(encoding="utf-8")
    return {f"{python_dir(project)}/_loader.py": banner("#", [f.path for f in lib.files]) + "\n" + text}


def generate_init(lib: OpLibrary, diags: Diagnostics, project: Project) -> dict[str, str]:
    """`<generated>/__init__.py` when the generated directory is a subpackage of the project's
    package: importing it loads the libraries and binds `ops` (the package's `__init__.py`
    has the one line `from <package>.<generated> import ops`), also as the module `<package>.ops`
    where the package has none of its own. Opgen's own example keeps its generated modules outside
    the package, and runtime/__init__.py does this by hand (`runtime.ops` is then a module of
    the package itself)."""
    if not project.generated_in_package:
        return {}
    text = render("py_init.py.j2", banner=banner("#", [f.path for f in lib.files]),
                    package=project.package, prefix=project.module_prefix)
    return {f"{python_dir(project)}/__init__.py": text}
