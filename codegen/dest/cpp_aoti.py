"""AOTInductor C shims for full-ABI namespaces, and the Python helper that tells inductor.

Note [AOTInductor C shims]
A model that AOTInductor compiles calls a custom op through its boxed proxy executor (arguments
serialized, the op looked up and unboxed per call) unless
`torch._inductor.config.aot_inductor.custom_ops_to_c_shims` maps the op to the declaration of a C
function. The wrapper then declares that function `extern "C"` and calls it directly, with the
argument conventions of torch's own shims (torchgen/gen_aoti_c_shim.py):

- Tensor -> AtenTensorHandle, Tensor? -> AtenTensorHandle* (nullptr for None), int and SymInt ->
  int64_t, float and Scalar -> double, bool -> int32_t, an optional scalar -> a pointer to it,
  int[] / SymInt[] / float[] -> a pointer and an int64_t length, Tensor[] -> const
  AtenTensorHandle* and a length, str -> const char*;
- ScalarType, Layout, MemoryFormat -> int32_t, the enum's number (the wrapper passes
  `cached_torch_dtype_float32` and the like); Device -> int32_t, its DeviceType's number, and an
  int32_t `<name>_index_`; ScalarType? and the others -> int32_t* (Device?: the index stays a
  value);
- each returned Tensor -> a trailing AtenTensorHandle* the shim fills with a new handle;
- the function returns AOTITorchError, an exception becoming an error code
  (AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE).

Inductor names the function `aoti_torch_<device>_<op name>` (cpp_wrapper_cpu.get_c_shim_func_name:
the schema name after `::`, without namespace or overload), so one name per op name and device.
`<generated>/cpp/<ns>/aoti.cpp` (compiled into the namespace's library) defines it for `cpu` and
`cuda`; each calls the op through the dispatcher, so every kernel, autocast and the rest apply as
in eager. `<python dir>/_aoti.py` holds the declarations and `use_c_shims()`.

An op gets no shim, and keeps the proxy executor, when: its namespace is on the stable ABI (the
library links no libtorch C++), it mutates an argument (inductor functionalizes those), it returns
anything but Tensors, an argument's type is outside the list above (Generator, Tensor?[], ...),
two of its C parameters would share a name (`a` beside an int[] `a`'s `a_len_`), it is not its
name's default overload, or its op name is taken by another namespace's op of this library or by
an aten op (the shim names would collide). The
generated module's docstring lists them with the reason. Across libraries, `use_c_shims()` refuses
an op name another namespace's shim already has in inductor's config.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from codegen.abi import namespace_abi
from codegen.api import cpp
from codegen.config import Project
from codegen.diagnostics import Diagnostics
from codegen.escape import cpp_comment, py_string
from codegen.layout import cached_signature, library_file, per_object, shards
from codegen.model import BaseTy, BaseType, ListType, Op, OpLibrary, OptionalType
from codegen.torch_namespaces import recorded
from codegen.rendering import banner, output_dir, python_dir, render

DEVICES = ("cpu", "cuda")

# base type -> (C type, expression turning the C parameter `{}` into the op's argument)
_BASE: dict[BaseTy, tuple[str, str]] = {
    BaseTy.Tensor: ("AtenTensorHandle", "resolve_tensor_dispatch_flags({})"),
    BaseTy.int: ("int64_t", "{}"),
    BaseTy.SymInt: ("int64_t", "c10::SymInt({})"),
    BaseTy.float: ("double", "{}"),
    BaseTy.Scalar: ("double", "c10::Scalar({})"),
    BaseTy.bool: ("int32_t", "static_cast<bool>({})"),
    BaseTy.str: ("const char*", "c10::string_view({})"),
    BaseTy.ScalarType: ("int32_t", "static_cast<c10::ScalarType>({})"),
    BaseTy.Layout: ("int32_t", "static_cast<c10::Layout>({})"),
    BaseTy.MemoryFormat: ("int32_t", "static_cast<c10::MemoryFormat>({})"),
}
# list element -> (C element type, the op's list expression from `{p}`, `{n}` (pointer, length))
_LIST: dict[BaseTy, tuple[str, str]] = {
    BaseTy.int: ("int64_t", "c10::IntArrayRef({p}, {n})"),
    BaseTy.SymInt: ("int64_t", "c10::fromIntArrayRefSlow(c10::IntArrayRef({p}, {n}))"),
    BaseTy.float: ("double", "c10::ArrayRef<double>({p}, {n})"),
    BaseTy.Tensor: ("AtenTensorHandle", "resolve_tensor_list_dispatch_flags({p}, {n})"),
}
# optional scalars: the C pointer's pointee, the op's optional, its value from the pointee `{}`
_OPTIONAL: dict[BaseTy, tuple[str, str, str]] = {
    BaseTy.int: ("int64_t", "int64_t", "int64_t({})"),
    BaseTy.SymInt: ("int64_t", "c10::SymInt", "c10::SymInt({})"),
    BaseTy.float: ("double", "double", "double({})"),
    BaseTy.bool: ("int32_t", "bool", "bool({})"),
    BaseTy.ScalarType: ("int32_t", "c10::ScalarType", "static_cast<c10::ScalarType>({})"),
    BaseTy.Layout: ("int32_t", "c10::Layout", "static_cast<c10::Layout>({})"),
    BaseTy.MemoryFormat: ("int32_t", "c10::MemoryFormat", "static_cast<c10::MemoryFormat>({})"),
}
# Device: from its type's number `{v}` and the parameter `{n}_index_`
_DEVICE = ("c10::Device(static_cast<c10::DeviceType>({v}), "
           "static_cast<c10::DeviceIndex>({n}_index_))")


@dataclass(frozen=True)
class Param:
    decls: tuple[str, ...]      # C parameter declarations
    expr: str                   # the op's argument, from them


def _param(arg: str, t) -> Param | str:
    name = f"a_{arg}"     # no argument name meets a C++ keyword or a name of the shim's body
    if isinstance(t, BaseType) and t.alias is None and t.name in _BASE:
        ctype, expr = _BASE[t.name]
        return Param((f"{ctype} {name}",), expr.format(name))
    if isinstance(t, BaseType) and t.alias is None and t.name is BaseTy.Device:
        return Param((f"int32_t {name}", f"int32_t {name}_index_"), _DEVICE.format(v=name, n=name))
    if isinstance(t, OptionalType) and isinstance(t.elem, BaseType):
        if t.elem.name is BaseTy.Tensor:
            return Param((f"AtenTensorHandle* {name}",), f"resolve_tensor_dispatch_flags({name})")
        if t.elem.name is BaseTy.Device:
            device = _DEVICE.format(v=f"*{name}", n=name)
            return Param((f"int32_t* {name}", f"int32_t {name}_index_"),
                         f"({name} ? std::optional<c10::Device>({device}) : std::nullopt)")
        if t.elem.name in _OPTIONAL:
            ctype, otype, value = _OPTIONAL[t.elem.name]
            return Param((f"{ctype}* {name}",), f"({name} ? std::optional<{otype}>("
                                                f"{value.format('*' + name)}) : std::nullopt)")
    if isinstance(t, ListType) and isinstance(t.elem, BaseType) and t.elem.name in _LIST:
        ctype, expr = _LIST[t.elem.name]
        n = f"{name}_len_"
        return Param((f"const {ctype}* {name}", f"int64_t {n}"), expr.format(p=name, n=n))
    return f"argument '{arg}' has type {t}, which the C shim ABI does not carry"


@dataclass(frozen=True)
class Shim:
    op: Op
    params: tuple[Param, ...]
    returns: int                # how many Tensors it returns


def _shim_or_reason(lib: OpLibrary, op: Op, namespaces: dict[str, set[str]]) -> Shim | str:
    s = op.schema
    if namespace_abi(lib, op.namespace) is not None:
        return "its namespace is on the stable ABI"
    if s.mutable_arguments:
        return "it mutates an argument"
    if op.name.overload:
        return "shims are named per op name, and this is not the default overload"
    if not s.returns:
        return "it returns nothing"
    if any(not (isinstance(r.type, BaseType) and r.type.alias is None
                                 and r.type.name is BaseTy.Tensor) for r in s.returns):
        return "it returns something other than Tensors"
    if op.name.name in _torch_shim_names():
        return "torch's own AOTInductor shims use its shim name (an aten op of that name)"
    others = sorted(namespaces[op.name.name] - {op.namespace})
    if others:
        return f"namespace {others[0]} has an op of the same name (the shim names would collide)"
    params = []
    for a in s.arguments:
        p = _param(a.name, a.type)
        if isinstance(p, str):
            return p
        params.append(p)
    names = [d.rpartition(" ")[2] for p in params for d in p.decls]
    clash = next((n for n in names if names.count(n) > 1), None)
    if clash is not None:   # `a` and `a_len_`, or a Device `d` and `d_index_`
        return f"two of its arguments would both be the C parameter '{clash}'"
    return Shim(op, tuple(params), len(s.returns))


@lru_cache(maxsize=1)
def _torch_shim_names() -> frozenset[str]:
    """The op-name parts of torch's own shims, `aoti_torch_<device>_<name>[_<overload>]`."""
    names: set[str] = set()
    for qual in recorded().get("aten", ()):
        base, _, overload = qual.partition(".")
        names.add(base)
        if overload:
            names.add(f"{base}_{overload}")
    return frozenset(names)


@per_object
def plan(lib: OpLibrary) -> tuple[dict[str, list[Shim]], list[tuple[Op, str]]]:
    """namespace -> its shims, and (op, why it has none) for the rest (full-ABI ops only).
    Once per library: both generators, ninja and cmake ask."""
    namespaces: dict[str, set[str]] = {}     # op name -> the namespaces with an op of that name
    for op in lib.ops:
        namespaces.setdefault(op.name.name, set()).add(op.namespace)
    shims: dict[str, list[Shim]] = {}
    skipped: list[tuple[Op, str]] = []
    for ns, shs in shards(lib).items():
        for sh in shs:
            for op in sh.ops:
                r = _shim_or_reason(lib, op, namespaces)
                if isinstance(r, str):
                    if namespace_abi(lib, ns) is None:
                        skipped.append((op, r))
                else:
                    shims.setdefault(ns, []).append(r)
    return shims, skipped


def aoti_path(project: Project, ns: str) -> str:
    return f"{output_dir(project)}/cpp/{ns}/aoti.cpp"


def shim_name(device: str, op: Op) -> str:
    return f"aoti_torch_{device}_{op.name.name}"


def _c_params(sh: Shim) -> list[str]:
    return [d for p in sh.params for d in p.decls] + [f"AtenTensorHandle* r{i}"
                                                       for i in range(sh.returns)]


def declaration(device: str, sh: Shim, params: list[str] | None = None) -> str:
    params = _c_params(sh) if params is None else params
    return f"AOTITorchError {shim_name(device, sh.op)}({', '.join(params)})"


def _context(sh: Shim) -> dict:
    op = sh.op
    sig = cached_signature(op.schema)
    assert isinstance(sig, cpp.CppSignature)    # every type a shim carries has a C++ binding
    params = _c_params(sh)
    return {
        "schema": cpp_comment(f"{op.namespace}::{op.name.name}"),   # defaults do not reach a shim
        "decls": {d: declaration(d, sh, params) for d in DEVICES},
        "params": ", ".join(params),
        "forward": ", ".join(d.rpartition(" ")[2] for d in params),
        "function_type": sig.function_type(),
        "qualname": f"{op.namespace}::{op.name.name}",
        "args": [p.expr for p in sh.params],
        "returns": sh.returns,
    }


def generate(lib: OpLibrary, diags: Diagnostics, project: Project) -> dict[str, str]:
    """`<generated>/cpp/<ns>/aoti.cpp` for each namespace with a shim."""
    shims, _ = plan(lib)
    out: dict[str, str] = {}
    for ns, shs in shims.items():
        sources = sorted({s.file.path for s in shards(lib)[ns]})
        out[aoti_path(project, ns)] = render("cpp_aoti.cpp.j2", banner=banner("//", sources), ns=ns,
                                    devices=DEVICES, shims=[_context(s) for s in shs])
    return out


def generate_helper(lib: OpLibrary, diags: Diagnostics, project: Project) -> dict[str, str]:
    """`<python dir>/_aoti.py`: the shims' declarations and `use_c_shims()`."""
    shims, skipped = plan(lib)
    ops = [{"ns": sh.op.namespace, "name": sh.op.name.name,
            "decls": [py_string(declaration(d, sh)) for d in DEVICES]}
           for shs in shims.values() for sh in shs]
    notes = [f"{op.name}: {why}" for op, why in skipped]
    return {f"{python_dir(project)}/_aoti.py": render(
        "py_aoti.py.j2", banner=banner("#", [f.path for f in lib.files]), ops=ops,
        skipped=notes, libraries=[py_string(library_file(ns)) for ns in sorted(shims)])}


def paths(lib: OpLibrary, project: Project) -> dict[str, str]:
    """namespace -> its generated shim source, for the namespaces that have one."""
    return {ns: aoti_path(project, ns) for ns in plan(lib)[0]}
