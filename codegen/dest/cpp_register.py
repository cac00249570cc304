"""Op library IR -> one registration unit per schema file and namespace,
`generated/cpp/<ns>/register_<shard>.cpp` (see Note [Shards] in codegen/layout.py):

- `TORCH_LIBRARY` (first shard of the namespace, unless torch defines it) or
  `TORCH_LIBRARY_FRAGMENT`, naming the Python module that holds the namespace's fake kernels
  (`m.set_python_module`) and defining every op of the file with its canonical schema and tags;
- one `TORCH_LIBRARY_IMPL(ns, <key>, m)` block per dispatch key that has C++ kernels, each kernel
  bound through a function pointer of the exact dispatcher type (so even an overloaded kernel name
  resolves to the one with the op's signature). Python kernels are registered from Python;
- a `TORCH_LIBRARY_IMPL(ns, Meta, m)` block with the Meta kernels made from fake rules
  (codegen.dest.cpp_meta), in this same translation unit.
"""

from __future__ import annotations

from typing import Iterable

from codegen.abi import namespace_abi
from codegen import layout as L
from codegen.dest import cpp_meta
from codegen import reserved
from codegen.config import Project
from codegen.diagnostics import Diagnostics
from codegen.rendering import banner, render
from codegen.model import DispatchKey, OpLibrary
from codegen.torch_namespaces import is_torch_namespace


def impl_blocks(shard: L.Shard, diags: Diagnostics) -> list[dict]:
    # Once per shard: its registration unit and the kernel index ask.
    return L.reported(shard, impl_blocks, diags,
                      lambda d: group_impls(L.bound_kernels(shard, d)))


# Note [CUDA device guard]
# As torchgen does for aten's CUDA kernels (RegisterCUDA.cpp), each CUDA kernel is registered
# through a wrapper that first checks that its tensor arguments share one device
# (c10::impl::check_and_update_common_device, whose error names the op and the argument), then
# makes the first tensor argument's device current (c10::OptionalDeviceGuard) for the kernel's
# duration. An op opts out of either with `device_guard: false` / `device_check: false` (ops that
# take tensors on several devices on purpose). The stable ABI has no common-device helper: its
# wrapper compares device types and indices itself and guards with
# torch::stable::accelerator::DeviceGuard (codegen.dest.cpp_stable).
def _is_tensor(ctype: str) -> bool:
    return "Tensor" in ctype and "TensorOptions" not in ctype


def guard_wrapper(b, pointer: str, stable: bool) -> dict | None:
    """The wrapper of a CUDA kernel (Note [CUDA device guard]), or None when it needs none; the
    caller names it (`name`, `decl`)."""
    if b.key is not DispatchKey.CUDA:
        return None
    tensors = [a for a in b.sig.arguments if _is_tensor(a.type.cpp())]
    if stable:
        # Only Tensor and Tensor? arguments: a stable Tensor[] has no device query here.
        tensors = [a for a in tensors if "HeaderOnlyArrayRef" not in a.type.cpp()
                   and "std::vector" not in a.type.cpp()]
    guard = b.op.device_guard and bool(tensors)
    check = b.op.device_check and len(tensors) > 1
    if not (guard or check):
        return None
    return {
        "call": f"{pointer}({', '.join(a.name for a in b.sig.arguments)})",
        "checks": [{"name": a.name, "optional": "optional" in a.type.cpp()}
                   for a in tensors] if check else [],
        "guard": {"name": tensors[0].name, "optional": "optional" in tensors[0].type.cpp()}
        if guard else None,
        "op": str(b.op.name),
    }


def group_impls(bound: Iterable, *, stable: bool = False) -> list[dict]:
    """The TORCH_LIBRARY_IMPL blocks of a shard's bound kernels (full or stable ABI: each has
    `op`, `key`, `sig`, `cpp_namespace`, `fn`), one per dispatch key, each kernel behind a
    function-pointer variable of its own, CUDA kernels behind a device-guard wrapper."""
    by_key: dict[DispatchKey, list[dict]] = {}
    used: set[str] = set()

    def fresh(base: str) -> str:
        name, n = base, 2
        while name in used:      # `f.a` and `f_a` must not share a variable
            name, n = f"{base}_{n}", n + 1
        used.add(name)
        return name

    for b in bound:
        # In namespace opgen (reserved.CPP_NAMESPACE), apart from every user name.
        pointer = fresh(reserved.cpp_identifier(
            f"{L.impl_name(b.op).replace('.', '_')}_{b.key.value}"))
        wrapper = guard_wrapper(b, pointer, stable)
        if wrapper is not None:
            wrapper["name"] = fresh(f"{pointer}_guarded")
            wrapper["decl"] = b.sig.decl(wrapper["name"])
        by_key.setdefault(b.key, []).append({
            "op": L.impl_name(b.op),
            "schema": str(b.op.schema),
            "pointer": pointer,
            "pointer_decl": b.sig.pointer_decl(pointer),
            "kernel": f"{b.cpp_namespace}::{b.fn}" if b.cpp_namespace else f"::{b.fn}",
            "wrapper": wrapper,
            "registered": wrapper["name"] if wrapper else pointer,
        })
    # Keys in the order of the DispatchKey enum: output must not depend on YAML key order.
    return [{"key": key.value, "guard": L.KEY_GUARDS[key], "impls": by_key[key],
             "wrappers": [i for i in by_key[key] if i["wrapper"]]}
            for key in DispatchKey if key in by_key]


def registered(blocks: list[dict], meta: Iterable) -> list[tuple[str, str]]:
    """(op name, dispatch key) of every kernel a registration unit registers: its impl blocks
    and Meta kernels, the data its template renders (what codegen.dest.cpp_kernel_index records
    for the build)."""
    return [(i["op"], b["key"]) for b in blocks for i in b["impls"]] + \
        [(k.op, "Meta") for k in meta]


def registrations(shard: L.Shard, diags: Diagnostics) -> list[tuple[str, str]]:
    """`registered` of a full-ABI shard's unit."""
    return registered(impl_blocks(shard, diags), cpp_meta.meta_context(shard, diags)["kernels"])


def defined(shard: L.Shard, diags: Diagnostics) -> list:
    """The ops a shard's registration unit defines (`m.def`): those with a C++ binding."""
    return [op for op in shard.ops if L.signature(op, diags) is not None]


def def_entries(shard: L.Shard, diags: Diagnostics) -> list[dict]:
    out = []
    for op in defined(shard, diags):
        out.append({"schema": L.def_schema(op), "tags": [f"at::Tag::{t}" for t in op.tags]})
    return out


def shard_context(shard: L.Shard) -> dict:
    """What a registration unit's template needs of its shard, on either ABI."""
    return dict(banner=banner("//", [shard.file.path]), ns=shard.namespace,
                cpp_ns=reserved.CPP_NAMESPACE, source=shard.file.path, include=shard.include,
                is_library=shard.is_library, torch_namespace=is_torch_namespace(shard.namespace))


def generate(lib: OpLibrary, diags: Diagnostics, project: Project) -> dict[str, str]:
    out = {}
    for ns, shs in L.shards(lib).items():
        if namespace_abi(lib, ns) is not None:
            continue    # stable ABI: codegen.dest.cpp_stable
        for shard in shs:
            out[shard.registration(project)] = render(
                "cpp_register.cpp.j2",
                **shard_context(shard),
                python_module=L.python_module(project, ns),
                defs=def_entries(shard, diags),
                blocks=impl_blocks(shard, diags),
                meta=cpp_meta.meta_context(shard, diags),
            )
    return out
