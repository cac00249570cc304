"""Batching rules: `pointwise`, `leading`, or Python functions, registered with
`torch.library.register_vmap`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen import reserved
from codegen.api import python as P
from codegen.dest.py_common import Function, Section, op_attr, q, qualname
from codegen.dest.py_sources import check_signature
from codegen.model import ListType, Op, PyRef, is_tensor_like, strip_optional

if TYPE_CHECKING:
    from codegen.dest.py_common import ModuleScope


def vmap(m: ModuleScope, op: Op, api: str, sec: Section) -> None:
    spec = op.vmap
    if spec is None:
        return
    if isinstance(spec.kind, PyRef):
        check_signature(spec.kind, op.schema, m.diags, "batching rule", leading=2,
                        sources=m.sources)
        sec.registrations.append(f"torch.library.register_vmap({q(qualname(op))}, "
                                 f"{m.ref_expr(spec.kind)}, lib=_lib)")
        return
    schema = op.schema
    if schema.mutable_arguments:
        m.diags.error(spec.loc, f"a '{spec.kind}' batching rule is for functional ops; "
                         f"{op.name} mutates its arguments",
                         "write a Python batching rule: `vmap: package.module:function`")
        return
    positional = schema.positional
    tensors = [(i, a) for i, a in enumerate(positional) if is_tensor_like(a.type)]
    lists = [a.name for _, a in tensors if isinstance(strip_optional(a.type), ListType)]
    if lists:
        m.diags.error(spec.loc, f"a '{spec.kind}' batching rule cannot batch the Tensor[] "
                         f"argument '{lists[0]}'",
                         "write a Python batching rule: `vmap: package.module:function`")
        return
    if not tensors:
        m.diags.error(spec.loc, f"{op.name} takes no Tensor to batch")
        return
    if not all(is_tensor_like(r.type) for r in schema.returns) or not schema.returns:
        m.diags.error(spec.loc, f"a '{spec.kind}' batching rule needs Tensor outputs")
        return
    names = [a.name for _, a in tensors]
    # The rule's own parameters and locals, clear of the op's argument names.
    taken = {a.name for a in schema.arguments}
    info, in_dims, outputs = (reserved.fresh(n, taken) for n in ("info", "in_dims", "outputs"))
    dims = [f"{in_dims}[{i}]" for i, _ in tensors]
    body: list[str] = []
    call = f"_ops.{op_attr(op)}({', '.join(P.call_arguments(schema))})"
    n_out = len(schema.returns)
    out_dims = "0" if n_out == 1 else "(" + ", ".join(["0"] * n_out) + ")"
    if spec.kind == "pointwise":
        m.helpers.add("pointwise_batch")
        lhs = ", ".join(names) + ("," if len(names) == 1 else "")
        pairs = ", ".join(f"({n}, {d})" for n, d in zip(names, dims))
        body.append(f"{lhs} = _pointwise_batch({info}.batch_size, {pairs})")
        body.append(f"return {call}, {out_dims}")
    elif spec.kind == "leading":
        # Rows at dim 0 of the first Tensor (or of the named ones); others are shared by every
        # row, so a batched shared operand (a weight per batch element) cannot be folded: the op
        # then runs once per batch element.
        rows = list(spec.rows) or names[:1]
        bad = [r for r in rows if r not in names]
        if bad:
            m.diags.error(spec.loc, f"leading({', '.join(spec.rows)}) names '{bad[0]}', which is "
                          f"not a Tensor input of {op.name}", "Tensor inputs: " + ", ".join(names))
            return
        m.helpers.add("fold_leading")
        shared = [(n, d) for n, d in zip(names, dims) if n not in rows]
        if shared:
            m.helpers.add("loop_batch")
            pairs = ", ".join(f"({n}, {d})" for n, d in zip(names, dims))
            body.append("if " + " or ".join(f"({n} is not None and {d} is not None)"
                                             for n, d in shared) + ":")
            body.append(f"    return _loop_batch(lambda {', '.join(names)}: {call}, "
                        f"{info}.batch_size, {pairs}), {out_dims}")
        for n, d in zip(names, dims):
            if n in rows:
                body.append(f"{n} = _fold_leading({n}, {d}, {info}.batch_size)")
        if n_out == 1:
            body.append(f"return {call}.unflatten(0, ({info}.batch_size, -1)), 0")
        else:
            body.append(f"{outputs} = {call}")
            body.append(f"return tuple(o.unflatten(0, ({info}.batch_size, -1)) for o in "
                        f"{outputs}), {out_dims}")
    else:
        raise AssertionError(f"unknown vmap kind {spec.kind!r}")
    name = m.define(f"_{api}_vmap")
    sec.functions.append(Function(name, ", ".join([info, in_dims]
                                                  + P.parameters(schema)), body,
                                  f"vmap: {spec.kind}"))
    sec.registrations.append(f"torch.library.register_vmap({q(qualname(op))}, {name}, "
                             "lib=_lib)")
