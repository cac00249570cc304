"""Op library IR -> one C++ header per schema file and namespace, `generated/cpp/<ns>/<shard>.h`
(see Note [Shards] in cpp_library), holding:

- a declaration of every C++ kernel named in the file's `dispatch:` entries, with the exact types
  the dispatcher binds for the op's schema (codegen.api.cpp). Kernel sources include the header and
  are compiled with `-Werror=missing-declarations`, so a kernel defined with any other signature is
  a compile error naming it; `python -m codegen.build` then adds the expected declaration.
- `<ns>::ops::<name>(...)`: a typed call through the dispatcher for every op of the file, for
  kernels built from other ops (CompositeImplicitAutograd kernels keep autograd that way).
"""

from __future__ import annotations

from dataclasses import dataclass

from codegen.dest import cpp_library as L
from codegen.dest.py_ops import api_names
from codegen import reserved
from codegen.diagnostics import Diagnostics
from codegen.gen import banner
from codegen.abi import namespace_abi
from codegen.api import cpp


@dataclass(frozen=True)
class KernelDecl:
    cpp_namespace: str        # "" for the global namespace
    name: str                 # unqualified function name
    decl: str                 # `R name(args)`
    comments: tuple[str, ...]  # one per use: "CPU kernel of exops::f (schemas/x.yaml:3)"
    schema: str


def kernel_decls(shard: L.Shard, diags: Diagnostics) -> list[KernelDecl]:
    """Every distinct C++ kernel of the shard, in op order; a function used by several ops (or
    keys) with the same signature is declared once."""
    decls: dict[tuple[str, str], KernelDecl] = {}
    for b in L.bound_kernels(shard, diags):
        comment = f"{b.key.value} kernel of {b.op.name} ({b.kernel.loc.path}:{b.kernel.loc.line})"
        ident = (f"{b.cpp_namespace}::{b.fn}", b.sig.pointer_type())
        if ident in decls:
            prev = decls[ident]
            decls[ident] = KernelDecl(prev.cpp_namespace, prev.name, prev.decl,
                                      prev.comments + (comment,), prev.schema)
        else:
            decls[ident] = KernelDecl(b.cpp_namespace, b.fn, b.sig.decl(b.fn), (comment,),
                                      str(b.op.schema))
    return list(decls.values())


def group_by_namespace(decls: list[KernelDecl]) -> list[tuple[str, list[KernelDecl]]]:
    groups: dict[str, list[KernelDecl]] = {}
    for d in decls:
        groups.setdefault(d.cpp_namespace, []).append(d)
    return list(groups.items())


def call_entries(shard: L.Shard, names: dict[str, str], diags: Diagnostics) -> list[dict]:
    out = []
    for op in shard.ops:
        sig = L.signature(op, diags)
        if sig is None:
            continue
        fn = names[str(op.name)]
        out.append({
            "schema": str(op.schema),
            "decl": sig.decl(fn, with_defaults=True),
            "qualified": op.name.qualified,
            "overload": op.name.overload,
            "function_type": sig.function_type(),
            "args": ", ".join(b.name for b in sig.arguments),
            # The local holding the op's handle: any name the parameters leave free.
            "handle": reserved.fresh("op", {b.name for b in sig.arguments}),
        })
    return out


def generate(lib, diags: Diagnostics) -> dict[str, str]:
    out = {}
    for ns, shs in L.shards(lib).items():
        if namespace_abi(lib, ns) is not None:
            continue    # stable ABI: codegen.dest.cpp_stable
        names = api_names([op for s in shs for op in s.ops], diags,
                          reserved=reserved.cpp_unusable())
        for shard in shs:
            out[shard.header] = L.render(
                "cpp_kernels.h.j2",
                banner=banner("//", [shard.file.path]),
                ns=ns,
                source=shard.file.path,
                groups=group_by_namespace(kernel_decls(shard, diags)),
                calls=call_entries(shard, names, diags),
            )
    return out
