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
from codegen.diagnostics import Diagnostics
from codegen.rendering import banner, render
from codegen.model import DispatchKey, OpLibrary
from codegen.torch_namespaces import is_torch_namespace


def impl_blocks(shard: L.Shard, diags: Diagnostics) -> list[dict]:
    return group_impls(L.bound_kernels(shard, diags))


def group_impls(bound: Iterable) -> list[dict]:
    """The TORCH_LIBRARY_IMPL blocks of a shard's bound kernels (full or stable ABI: each has
    `op`, `key`, `sig`, `cpp_namespace`, `fn`), one per dispatch key, each kernel behind a
    function-pointer variable of its own."""
    by_key: dict[DispatchKey, list[dict]] = {}
    used: set[str] = set()
    for b in bound:
        # In namespace opgen (reserved.CPP_NAMESPACE), apart from every user name.
        pointer = base = reserved.cpp_identifier(
            f"{L.impl_name(b.op).replace('.', '_')}_{b.key.value}")
        n = 2
        while pointer in used:      # `f.a` and `f_a` must not share a variable
            pointer, n = f"{base}_{n}", n + 1
        used.add(pointer)
        by_key.setdefault(b.key, []).append({
            "op": L.impl_name(b.op),
            "schema": str(b.op.schema),
            "pointer": pointer,
            "pointer_decl": b.sig.pointer_decl(pointer),
            "kernel": f"{b.cpp_namespace}::{b.fn}" if b.cpp_namespace else f"::{b.fn}",
        })
    # Keys in the order of the DispatchKey enum: output must not depend on YAML key order.
    return [{"key": key.value, "guard": L.KEY_GUARDS[key], "impls": by_key[key]}
            for key in DispatchKey if key in by_key]


def def_entries(shard: L.Shard, diags: Diagnostics) -> list[dict]:
    out = []
    for op in shard.ops:
        if L.signature(op, diags) is None:
            continue
        out.append({"schema": L.def_schema(op), "tags": [f"at::Tag::{t}" for t in op.tags]})
    return out


def shard_context(shard: L.Shard) -> dict:
    """What a registration unit's template needs of its shard, on either ABI."""
    return dict(banner=banner("//", [shard.file.path]), ns=shard.namespace,
                cpp_ns=reserved.CPP_NAMESPACE, source=shard.file.path, include=shard.include,
                is_library=shard.is_library, torch_namespace=is_torch_namespace(shard.namespace))


def generate(lib: OpLibrary, diags: Diagnostics) -> dict[str, str]:
    out = {}
    for ns, shs in L.shards(lib).items():
        if namespace_abi(lib, ns) is not None:
            continue    # stable ABI: codegen.dest.cpp_stable
        for shard in shs:
            out[shard.registration] = render(
                "cpp_register.cpp.j2",
                **shard_context(shard),
                python_module=L.python_module(ns),
                defs=def_entries(shard, diags),
                blocks=impl_blocks(shard, diags),
                meta=cpp_meta.meta_context(shard, diags),
            )
    return out
