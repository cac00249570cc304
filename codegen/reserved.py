"""Names the generated code owns, in one place, derived from what the generators emit.

User names (namespaces, op and argument names, kernel names) share scopes with generated names.
The generators keep them apart by construction:

- C++: generated helpers, Meta kernels and kernel pointers of a registration unit live in the
  namespace `opgen` (CPP_NAMESPACE), which user C++ names may not use; generated identifiers made
  from user names (call-API functions, parameters) that would hit a keyword or a macro get a
  trailing underscore (`cpp_identifier`); generated locals are chosen fresh (`fresh`).
- Python: generated module-level names of `runtime._reg_<ns>` are allocated against everything
  the module defines or calls (`codegen.dest.py_common.reg_module_names`, builtins, every argument name); user functions
  imported under a taken name are imported under a mangled one; `runtime.ops` names that would
  hit a name the module or its stub owns (`codegen.dest.py_ops.ops_module_names`) get a trailing underscore.
  Arguments are parameters of the generated functions under their own names (callers pass them
  by keyword): the functions' locals are chosen fresh around them, and what an argument hides
  (`torch`, `len`, `_ops`) they reach through a module-level alias (`py_common.Reach`).

What cannot be made safe is refused by `codegen.verify`, naming the clash:
- C and C++ macros (`EOF`, `NULL`, `INT_MAX`, `errno`, `TORCH_CHECK`) as namespaces or kernel
  names: the user's own C++ must spell them. The macros are those the headers the generated code
  includes define, recorded in `reserved.json` from the pinned torch and this compiler
  (`python -m codegen.reserved --refresh`, which needs both; tests check the record);
- names torch's op registry owns (`torch.ops.load_library`, `torch.ops.<ns>.name`,
  `torch.ops.<ns>.<op>.overloads`): torch.ops, FX graphs and the generated Python reach ops by
  attribute, and those attributes are torch's (also recorded in `reserved.json`).
"""

from __future__ import annotations

import ast
import builtins
import json
import keyword
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

RECORD_FILE = "reserved.json"

# The C++ namespace of everything a registration unit defines for itself.
CPP_NAMESPACE = "opgen"

# Macros the build defines on the command line (generated/build.ninja, codegen.toolchain).
COMMAND_LINE_MACROS = ("OPGEN_TORCH_VERSION", "OPGEN_WITH_CUDA")

PY_KEYWORDS = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)
PY_BUILTINS = frozenset(dir(builtins))


# --------------------------------------------------------------------------------------------------
# Recorded from the toolchain and torch


@lru_cache(maxsize=1)
def _record() -> dict[str, frozenset[str]]:
    text = resources.files("codegen").joinpath(RECORD_FILE).read_text(encoding="utf-8")
    return {k: frozenset(v) for k, v in json.loads(text).items()}


@lru_cache(maxsize=1)
def object_macros() -> frozenset[str]:
    """Object-like macros: any use of the name expands."""
    return _record()["cpp_object_macros"] | frozenset(COMMAND_LINE_MACROS)


def function_macros() -> frozenset[str]:
    """Function-like macros: a use followed by `(` expands (a declared function's name)."""
    return _record()["cpp_function_macros"]


def torch_ops_attributes() -> frozenset[str]:
    """Attributes of `torch.ops` itself: `torch.ops.<name>` is never a namespace of ops."""
    return _record()["torch_ops"]


def op_namespace_attributes() -> frozenset[str]:
    """Attributes of a `torch.ops.<ns>` namespace: `torch.ops.<ns>.<name>` is never an op."""
    return _record()["op_namespace"]


def op_packet_attributes() -> frozenset[str]:
    """Attributes of an op's `torch.ops.<ns>.<op>`: never one of its overloads."""
    return _record()["op_packet"]


def autograd_ctx_attributes() -> frozenset[str]:
    """Attributes autograd's `ctx` has itself (`needs_input_grad`, `saved_tensors`, `name`, ...):
    the generated setup_context keeps no value of its own under them."""
    return _record()["autograd_ctx"]


# --------------------------------------------------------------------------------------------------
# C++


CPP_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
co_return co_yield decltype default delete do double dynamic_cast else enum explicit export extern
false float for friend goto if inline int long mutable namespace new noexcept not not_eq nullptr
operator or or_eq private protected public register reinterpret_cast requires return short signed
sizeof static static_assert static_cast struct switch template this thread_local throw true try
typedef typeid typename union unsigned using virtual void volatile wchar_t while xor xor_eq
""".split())


# What the generated C++ spells unqualified besides keywords (`int64_t n`, codegen.api.cpp): a
# call-API function or parameter of that name would hide the type from the declarations after it.
CPP_UNQUALIFIED_TYPES = frozenset({"int64_t"})


@lru_cache(maxsize=1)
def cpp_unusable() -> frozenset[str]:
    """Names a generated C++ identifier must not be: keywords, the types the generated code
    names unqualified, and every macro."""
    return CPP_KEYWORDS | CPP_UNQUALIFIED_TYPES | object_macros() | function_macros()


def cpp_identifier(name: str) -> str:
    """A generated C++ identifier made from a user name: a trailing underscore until it is neither
    a keyword, an unqualified type of the generated code, nor a macro."""
    bad = cpp_unusable()
    while name in bad:
        name += "_"
    return name


def is_cpp_reserved(name: str) -> bool:
    """Whether a user C++ name (namespace, kernel function or its namespaces) is the generated
    code's: `opgen`, `opgen_*` or `OPGEN_*`."""
    return name == CPP_NAMESPACE or name.startswith(("opgen_", "OPGEN_"))


def fresh(base: str, taken: set[str] | frozenset[str]) -> str:
    """`base`, or `base_`, `base__`, ...: the first that is not taken (a generated local that
    cannot collide with user names in its scope)."""
    while base in taken:
        base += "_"
    return base


# --------------------------------------------------------------------------------------------------
# Python


def bound_names(source: str) -> frozenset[str]:
    """The module-level names a Python module binds (imports, assignments, defs, classes)."""
    out: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                out.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return frozenset(out)


# --------------------------------------------------------------------------------------------------
# Recording


def _included_headers() -> list[str]:
    """Every `#include <...>` of the C++ templates: what generated code sees."""
    headers: list[str] = []
    for path in sorted((Path(__file__).parent / "templates").glob("cpp_*.j2")):
        for m in re.finditer(r"^#include <([^>{}]+)>", path.read_text(encoding="utf-8"), re.M):
            if m.group(1) not in headers:
                headers.append(m.group(1))
    return headers


def record() -> dict[str, list[str]]:
    """What `reserved.json` holds, from the installed torch and C++ compiler."""
    import os
    import shlex
    import subprocess

    import torch
    from torch.utils import cpp_extension

    ext_source = Path(cpp_extension.__file__).read_text(encoding="utf-8")
    std = "c++20" if "-std=c++20" in ext_source else "c++17"
    cxx = shlex.split(os.environ.get("CXX", "c++"))
    source = "".join(f"#include <{h}>\n" for h in _included_headers())
    flags = [f"-std={std}", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    if torch.backends.openmp.is_available():
        flags.append("-fopenmp")
    flags += [f for inc in cpp_extension.include_paths("cpu") for f in ("-isystem", inc)]
    out = subprocess.run([*cxx, *flags, "-dM", "-E", "-x", "c++", "-"], input=source,
                         capture_output=True, text=True, check=True).stdout
    objects, functions = set(), set()
    for m in re.finditer(r"^#define (\w+)(\(?)", out, re.M):
        (functions if m.group(2) else objects).add(m.group(1))

    ns = torch._ops._OpNamespace("opgen_probe")
    packet = torch.ops.aten.add
    return {
        "cpp_object_macros": sorted(objects),
        "cpp_function_macros": sorted(functions),
        "torch_ops": sorted(set(dir(type(torch.ops))) | {
            k for k, v in vars(torch.ops).items() if not isinstance(v, torch._ops._OpNamespace)}),
        "op_namespace": sorted(set(dir(type(ns))) | set(vars(ns))),
        "op_packet": sorted(set(dir(type(packet))) | {
            k for k, v in vars(packet).items() if not isinstance(v, torch._ops.OpOverload)}),
        "autograd_ctx": sorted(dir(torch.autograd.function.BackwardCFunction)),
    }


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--refresh"]:
        sys.exit("usage: python -m codegen.reserved --refresh")
    target = Path(__file__).resolve().parent / RECORD_FILE
    target.write_text(json.dumps(record(), indent=0, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {target}")
