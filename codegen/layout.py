"""What the generators share about the library's layout: per-namespace grouping into shards, the
paths and names of generated files and built libraries, and kernel signatures.

Note [Shards]
The C++ side of a namespace is split by schema file: `schemas/a.yaml` gets its own kernel header
`generated/cpp/<ns>/a.h` and registration unit `generated/cpp/<ns>/register_a.cpp`. Editing one
schema file therefore rewrites (and ninja recompiles) only that file's registration unit and the
kernel sources that include its header. Below that, each op name of the file has a header of its
own, `generated/cpp/<ns>/<file>/<name>.h`, which the file's header includes: a kernel source that
includes just the headers of its ops recompiles only when one of them changes (Note [Headers that
change only with C++] in cpp_kernels). The first file of a namespace holds `TORCH_LIBRARY`,
claiming the namespace (a second package defining the same namespace is refused at load time, see
runtime.loader); the others use `TORCH_LIBRARY_FRAGMENT`. A namespace torch already defines gets
fragments only (Note [Torch namespaces] in codegen/torch_namespaces.py).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Iterable

from codegen import formulas as F
from codegen.api import cpp
from codegen.config import Project
from codegen.diagnostics import Diagnostics, Loc
from codegen.rendering import output_dir
from codegen.model import (CppKernel, DispatchKey, FunctionSchema, Op, OperatorName, OpFile,
                           OpLibrary, Span)
from codegen.torch_namespaces import is_torch_namespace


# Dispatch keys whose kernels are compiled only when torch has the matching device support.
KEY_GUARDS: dict[DispatchKey, str | None] = {
    DispatchKey.CPU: None,
    DispatchKey.CUDA: "OPGEN_WITH_CUDA",
    DispatchKey.Meta: None,
    DispatchKey.CompositeImplicitAutograd: None,
    DispatchKey.CompositeExplicitAutograd: None,
}


def per_object(fn):
    """Memoizes the one-argument `fn` on its argument, an IR object (frozen, so the answer never
    changes): every generator asks the same questions of each op (its signature, its Meta
    kernel). Stored in the object's `__dict__`, as functools.cached_property does, so it lives
    exactly as long as the object; equality and hashing ignore it."""
    attr = f"_memo_{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(obj):
        try:
            return obj.__dict__[attr]
        except KeyError:
            value = obj.__dict__[attr] = fn(obj)
            return value

    return wrapper


def memo(obj, key: object, compute):
    """`compute()`, computed once per IR object `obj` (frozen) and hashable `key`: `per_object`
    for answers that take a second argument. Kept in the object's `__dict__`, as there."""
    table = obj.__dict__.setdefault("_memo", {})
    try:
        return table[key]
    except KeyError:
        value = table[key] = compute()
        return value


def reported(obj, key: object, diags: Diagnostics, compute):
    """`compute(diags)`, computed once per IR object `obj` (frozen) and `key`: later calls get
    the same value, and the diagnostics the first call reported are reported again to their own
    `diags` (each render and check has a fresh one). `compute` must not read `diags`."""
    def first() -> tuple:
        scratch = Diagnostics()
        value = compute(scratch)
        return value, tuple(scratch.items)

    value, items = memo(obj, (reported, key), first)
    diags.items.extend(items)
    return value


# --------------------------------------------------------------------------------------------------
# Grouping


@dataclass(frozen=True)
class Shard:
    """The ops of one schema file that live in one namespace."""

    namespace: str
    name: str                 # file-derived identifier: `core` for schemas/core.yaml
    file: OpFile
    ops: tuple[Op, ...]
    is_library: bool          # holds TORCH_LIBRARY (first shard of a namespace not torch's)

    def header(self, project: Project) -> str:
        return f"{output_dir(project)}/cpp/{self.namespace}/{self.name}.h"

    @property
    def include(self) -> str:
        """How kernel sources include the header (`-I generated/cpp`)."""
        return f"{self.namespace}/{self.name}.h"

    def op_header(self, project: Project, name: str) -> str:
        """The header of the ops named `name` (every overload) of this shard."""
        return f"{output_dir(project)}/cpp/{self.namespace}/{self.name}/{name}.h"

    def op_include(self, name: str) -> str:
        return f"{self.namespace}/{self.name}/{name}.h"

    def registration(self, project: Project) -> str:
        return f"{output_dir(project)}/cpp/{self.namespace}/register_{self.name}.cpp"


def shard_names(files: tuple[OpFile, ...]) -> dict[str, str]:
    """Schema file path -> identifier, unique across the library.

    The stem (`core`), or the path below the files' common directory when stems collide
    (`a/core.yaml`, `b/core.yaml` -> `a_core`, `b_core`).
    """
    paths = [PurePosixPath(f.path) for f in files]
    stems = [p.stem for p in paths]
    if len(set(stems)) == len(stems):
        raw = stems
    else:
        common = _common_parent(paths)
        raw = ["_".join(p.relative_to(common).with_suffix("").parts) for p in paths]
    out: dict[str, str] = {}
    used: set[str] = set()
    for f, r in zip(files, raw):
        ident = re.sub(r"\W", "_", r, flags=re.ASCII) or "ops"
        if ident[0].isdigit():
            ident = "_" + ident
        base, n = ident, 2
        while ident in used:
            ident, n = f"{base}_{n}", n + 1
        used.add(ident)
        out[f.path] = ident
    return out


def _common_parent(paths: list[PurePosixPath]) -> PurePosixPath:
    parts = [p.parent.parts for p in paths]
    common: list[str] = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return PurePosixPath(*common) if common else PurePosixPath(".")


def shards(lib: OpLibrary) -> dict[str, list[Shard]]:
    """namespace -> its shards, in file order (namespaces sorted)."""
    return {ns: list(shs) for ns, shs in _shards(lib).items()}


@per_object
def _shards(lib: OpLibrary) -> dict[str, tuple[Shard, ...]]:
    # One pass over the ops, once per library: every generator asks, some once per namespace.
    names = shard_names(lib.files)
    out: dict[str, list[Shard]] = {}
    for f in lib.files:
        by_ns: dict[str, list[Op]] = {}
        for op in f.ops:
            by_ns.setdefault(op.namespace, []).append(op)
        for ns, ops in by_ns.items():
            first = ns not in out and not is_torch_namespace(ns)
            out.setdefault(ns, []).append(Shard(ns, names[f.path], f, tuple(ops), first))
    return {ns: tuple(out[ns]) for ns in sorted(out)}


def ops_by_name(shard: Shard) -> dict[str, list[Op]]:
    """The shard's ops grouped by name (overloads together), in op order: one header each."""
    out: dict[str, list[Op]] = {}
    for op in shard.ops:
        out.setdefault(op.name.name, []).append(op)
    return out


def library_file(ns: str) -> str:
    return f"lib{ns}_ops.so"


def python_module(project: Project, ns: str) -> str:
    """The module `m.set_python_module` names: the Python-side registrations of `ns`
    (`<package>._reg_<ns>`, see codegen.config.Project.module_prefix)."""
    return f"{project.module_prefix}._reg_{ns}"


def unqualified(op: Op) -> OperatorName:
    return OperatorName(None, op.name.name, op.name.overload)


@per_object
def def_schema(op: Op) -> str:
    """The schema text `m.def` takes: canonical, without the namespace."""
    return str(op.schema.with_name(unqualified(op)))


@per_object
def impl_name(op: Op) -> str:
    """`name` or `name.overload`, as `m.impl` takes it."""
    return str(unqualified(op))


def cpp_kernels(op: Op) -> list[tuple[DispatchKey, CppKernel]]:
    return [(k, v) for k, v in op.dispatch if isinstance(v, CppKernel)]


def check_formulas(lib: OpLibrary, diags: Diagnostics) -> bool:
    """`formulas.check_library(lib, diags)`, checked once per library (check and two generators
    ask)."""
    return reported(lib, check_formulas, diags, lambda d: F.check_library(lib, d))


@per_object
def library_calls(d: F.Derivatives) -> tuple[F.OpRef, ...]:
    """`formulas.library_calls`, once per op's derivatives (C++ and Python autograd ask)."""
    return tuple(F.library_calls(d))


def first_order_only(lib: OpLibrary, op: Op) -> list[Op]:
    """`formulas.first_order_only`, once per op of a library (C++ and Python autograd ask). Keyed
    by the op's identity, and the op kept with the answer so that its id is not reused."""
    return memo(lib, (first_order_only, id(op)), lambda: (op, F.first_order_only(lib, op)))[1]


def constant_reads(lib: OpLibrary, op: Op) -> list[tuple[F.Formula, int, str]]:
    """`formulas.constant_reads`, once per op of a library (both autograd paths ask)."""
    return memo(lib, (constant_reads, id(op)), lambda: (op, F.constant_reads(lib, op)))[1]


# --------------------------------------------------------------------------------------------------
# Signatures, with refusals turned into located diagnostics


def locate(op: Op, span: Span | None) -> Loc:
    if span is None or op.func is None:
        return op.loc
    return op.func.at(span.start, max(1, span.end - span.start))


def signature(op: Op, diags: Diagnostics) -> cpp.CppSignature | None:
    """The op's dispatcher signature, or None after reporting why C++ cannot bind it."""
    sig = cached_signature(op.schema)
    if isinstance(sig, cpp.Unsupported):
        diags.error(locate(op, sig.span), f"{sig.message} (in op {op.name})", sig.hint)
        return None
    return sig


@per_object
def cached_signature(schema: FunctionSchema) -> cpp.CppSignature | cpp.Unsupported:
    """`cpp.signature(schema)`, or the refusal it raised; computed once per schema."""
    try:
        return cpp.signature(schema)
    except cpp.Unsupported as e:
        return e.with_traceback(None)


def check_kernel_name(op: Op, kernel: CppKernel, diags: Diagnostics) -> bool:
    if cpp.is_valid_cpp_name(kernel.name):
        return True
    diags.error(kernel.loc, f"'{kernel.name}' is not a C++ function name",
                "write an identifier, optionally qualified: 'my_kernel' or 'other_ns::my_kernel'")
    return False


@dataclass(frozen=True)
class BoundKernel:
    """A C++ kernel of an op that C++ can bind: the op, its signature, the key, and the
    kernel's C++ namespace and function name."""

    op: Op
    sig: cpp.CppSignature
    key: DispatchKey
    kernel: CppKernel
    cpp_namespace: str
    fn: str


def bound_kernels(shard: Shard, diags: Diagnostics, signature_of=None) -> list[BoundKernel]:
    """Every C++ kernel of the shard's ops, in op order; ops C++ cannot bind and malformed kernel
    names are reported to `diags` and left out. `signature_of(op, diags)` binds an op's schema
    (the full API's `signature` by default; the stable ABI passes its own)."""
    # Headers, registrations and the kernel index each ask, per shard.
    signature_of = signature_of or signature
    return list(reported(shard, (bound_kernels, signature_of), diags,
                         lambda d: _bound_kernels(shard, d, signature_of)))


def _bound_kernels(shard: Shard, diags: Diagnostics, signature_of) -> tuple[BoundKernel, ...]:
    out = []
    for op in shard.ops:
        kernels = cpp_kernels(op)
        if not kernels:
            continue
        sig = signature_of(op, diags)
        if sig is None:
            continue
        for key, kernel in kernels:
            if check_kernel_name(op, kernel, diags):
                cpp_ns, _, fn = kernel.qualified(shard.namespace).rpartition("::")
                out.append(BoundKernel(op, sig, key, kernel, cpp_ns, fn))
    return tuple(out)


# --------------------------------------------------------------------------------------------------
# API names (the Python API's and the C++ call API's)


def api_names(ops: Iterable[Op], diags: Diagnostics, *, reserved: Iterable[str]) -> dict[str, str]:
    """str(op.name) -> API name. See Note [API names] in codegen/dest/py_ops.py."""
    # (op, str(op.name), op.name): each spelled once, for libraries of thousands of ops.
    ops = [(op, str(op.name), op.name) for op in ops]
    reserved = frozenset(reserved)
    by_base: dict[str, int] = {}
    for _, _, name in ops:
        by_base[name.name] = by_base.get(name.name, 0) + 1
    first: dict[str, str] = {}
    for _, key, name in ops:
        shared = by_base[name.name] > 1
        first[key] = f"{name.name}_{name.overload}" if shared and name.overload else name.name
    count: dict[str, int] = {}
    for n in first.values():
        count[n] = count.get(n, 0) + 1
    names: dict[str, str] = {}
    for op, key, _ in ops:
        n = first[key]
        if count[n] > 1:
            n = f"{op.namespace}_{n}"
        while n in reserved:
            n += "_"
        names[key] = n
    owner: dict[str, Op] = {}
    for op, key, _ in ops:
        n = names[key]
        if n in owner:
            diags.error(op.loc, f"op {op.name} and op {owner[n].name} would both be called "
                                f"'{n}' in the generated API",
                        "rename one of them")
        else:
            owner[n] = op
    return names


# --------------------------------------------------------------------------------------------------
# The build stamp's path (codegen.dest.cpp_stamp writes it)


def stamp_path(project: Project, ns: str) -> str:
    return f"{output_dir(project)}/cpp/{ns}/stamp.cpp"


def index_path(project: Project, ns: str) -> str:
    """What the build needs to know of a namespace's generated C++ (codegen.dest.cpp_kernel_index)."""
    return f"{output_dir(project)}/cpp/{ns}/index.json"


def stamp_prefix(ns: str) -> str:
    """What the runtime searches the built library for; see runtime.loader.read_stamp."""
    return f"@opgen-stamp ns={ns} "


# The stable ABI's headers (under torch's include directory) that a stable namespace may include:
# the build links them into a private include root (codegen.toolchain.write_stable_include), a CMake
# project names them (codegen.dest.cmake).
STABLE_HEADERS = ("torch/csrc/stable", "torch/headeronly", "torch/csrc/inductor/aoti_torch/c",
                  "torch/csrc/inductor/aoti_torch/generated/c_shim_aten.h")
