"""Op library IR -> C++ headers per op name, `generated/cpp/<ns>/<shard>/<name>.h`, and one per
schema file and namespace, `generated/cpp/<ns>/<shard>.h`, that includes those of its ops (see
Note [Shards] in codegen/layout.py). An op name's header holds, for its overloads:

- a declaration of every C++ kernel named in the file's `dispatch:` entries, with the exact types
  the dispatcher binds for the op's schema (codegen.api.cpp). Kernel sources include the header and
  are compiled with `-Werror=missing-declarations`, so a kernel defined with any other signature is
  a compile error naming it; `python -m codegen.build` then adds the expected declaration.
- `<ns>::ops::<name>(...)`: a typed call through the dispatcher for every op of the file, for
  kernels built from other ops (CompositeImplicitAutograd kernels keep autograd that way).

Note [Headers that change only with C++]
A header changes only when a fact C++ sees changes: a schema, a kernel name, a dispatch key. It
names no op-file line (editing a doc, a sample or a formula above an op would otherwise rewrite
every header below it and recompile every kernel source), and a kernel source that includes only
the headers of the ops it defines (`#include <exops/core/scaled_add.h>`) recompiles only when one
of those ops changes. `codegen.build_notes` finds an op's line in the op file when an error needs it.
"""

from __future__ import annotations

from dataclasses import dataclass

from codegen import layout as L
from codegen import reserved
from codegen.config import Project
from codegen.diagnostics import Diagnostics
from codegen.rendering import banner, render
from codegen.abi import namespace_abi
from codegen.model import Op


@dataclass(frozen=True)
class KernelDecl:
    cpp_namespace: str        # "" for the global namespace
    name: str                 # unqualified function name
    decl: str                 # `R name(args)`
    comments: tuple[str, ...]  # one per use: "CPU kernel of exops::f"
    schema: str


def kernel_decls(bound: list[L.BoundKernel]) -> list[KernelDecl]:
    """Every distinct C++ kernel of `bound`, in op order; a function used by several ops (or
    keys) with the same signature is declared once. No line numbers: Note [Headers that change
    only with C++]."""
    decls: dict[tuple[str, str], KernelDecl] = {}
    for b in bound:
        comment = f"{b.key.value} kernel of {b.op.name}"
        ident = (f"{b.cpp_namespace}::{b.fn}", b.sig.pointer_type())
        if ident in decls:
            prev = decls[ident]
            decls[ident] = KernelDecl(prev.cpp_namespace, prev.name, prev.decl,
                                      prev.comments + (comment,), prev.schema)
        else:
            decls[ident] = KernelDecl(b.cpp_namespace, b.fn, b.sig.decl(b.fn), (comment,),
                                      str(b.op.schema))
    return list(decls.values())


def header_decls(shard: L.Shard, diags: Diagnostics) -> dict[str, list[KernelDecl]]:
    """Op name -> `kernel_decls` of its header, once per shard (the headers and the kernel index
    ask)."""
    def compute(d: Diagnostics) -> dict[str, list[KernelDecl]]:
        bound = L.bound_kernels(shard, d)
        out = {}
        for name, ops in L.ops_by_name(shard).items():
            ids = {id(op) for op in ops}
            out[name] = kernel_decls([b for b in bound if id(b.op) in ids])
        return out
    return L.reported(shard, header_decls, diags, compute)


def group_by_namespace(decls: list[KernelDecl]) -> list[tuple[str, list[KernelDecl]]]:
    groups: dict[str, list[KernelDecl]] = {}
    for d in decls:
        groups.setdefault(d.cpp_namespace, []).append(d)
    return list(groups.items())


def call_entries(ops: list[Op], names: dict[str, str], diags: Diagnostics) -> list[dict]:
    out = []
    for op in ops:
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


def generate(lib, diags: Diagnostics, project: Project) -> dict[str, str]:
    out = {}
    for ns, shs in L.shards(lib).items():
        if namespace_abi(lib, ns) is not None:
            continue    # stable ABI: codegen.dest.cpp_stable
        names = L.api_names([op for s in shs for op in s.ops], diags,
                          reserved=reserved.cpp_unusable())
        for shard in shs:
            decls = header_decls(shard, diags)
            by_name = L.ops_by_name(shard)
            for name, ops in by_name.items():
                out[shard.op_header(project, name)] = render(
                    "cpp_kernels.h.j2",
                    banner=banner("//", [shard.file.path]),
                    ns=ns,
                    source=shard.file.path,
                    what=f"{ns}::{name}",
                    includes=[],
                    groups=group_by_namespace(decls[name]),
                    calls=call_entries(ops, names, diags),
                )
            out[shard.header(project)] = render(
                "cpp_kernels.h.j2",
                banner=banner("//", [shard.file.path]),
                ns=ns,
                source=shard.file.path,
                what="the ops",
                includes=[shard.op_include(name) for name in by_name],
                groups=[],
                calls=[],
            )
    return out
