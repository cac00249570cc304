"""Batching rules: `pointwise`, `leading`, or Python functions, registered with
`torch.library.register_vmap`; and, for an op without `vmap:` whose schema torch's own loop
fallback refuses, or that is CompositeImplicitAutograd (Note [Generated batching rules]), a
generated one.

Note [Generated batching rules]
functorch runs an op without a batching rule through its C++ loop fallback, which refuses
(`Batching rule not implemented for ns::op. We could not generate a fallback.`) an op with a
`Tensor[]` or `Tensor?[]` argument, or any return that is not a plain `Tensor` (`Tensor[]`,
`Tensor?`, `int`, ...), or no return at all, and (`... doesn't work on out= or view ops`) an op
with an alias annotation, unless in-place as it reads it (one return, written like the first
argument, which is written, no other argument annotated: `soft_shrink_(Tensor(a!) self) ->
Tensor(a!)`). So that `vmap`, `vmap(grad(...))` and `jacrev` work on such an op, it gets a rule
here when it is functional (no alias annotation: a per-sample copy would lose a view's aliasing)
or writes to its Tensor arguments, returning nothing, new values, or what it writes (an out= op's
`-> Tensor(a!)`), and takes a Tensor (else vmap never reaches it):
- a CompositeImplicitAutograd op gets a kernel at vmap's key (`FuncTorchBatched`) that runs its
  decomposition (`OpOverload.decompose`) on the batched Tensors, so the ops it is made of batch
  them with their own rules, as functorch's decompositions do. It gets one also where the
  fallback would take it (a functional op returning Tensors): functorch does not decompose a
  custom op, and its fallback runs the whole decomposition once per batch element, warning
  "There is a performance drop";
- any other op runs once per batch element, its outputs stacked at dim 0, as torch's fallback
  does; the elements' outputs must then agree in what cannot be batched (a list's length, a
  non-Tensor value, a Tensor's shape, dtype and device), else the rule raises. An op that writes
  gets each element's slice of a batched Tensor (a view, so the writes land in the batch; where
  the slice is not contiguous, as at a batch dim other than 0, a contiguous copy copied back
  after the call: kernels writing through their output's data pointer assume it contiguous); a
  return that is a written argument is the batch it was given (written, at its in_dim), the
  others are stacked. A written argument must be batched whenever another one is (every batch
  element would write to the same Tensor), as torch's in-place rules require, else the rule
  raises.

Note [Positional twins]
`torch.library.register_vmap` refuses an op with keyword-only Tensors (`fill_out(Tensor x, *,
Tensor(a!) out) -> ()`): the wrapper it puts around a rule unwraps only the positional
arguments from vmap's batch. Such an op's loop rule is registered instead on its twin, an op of the same name in the
namespace `opgen_vmap_<ns>` (no op file can name a namespace starting with `opgen_`) that takes
every argument positionally, without defaults (each call passes them all). The op's kernel at
vmap's key (`FuncTorchBatched`) calls the twin, so vmap reaches the rule, which gets every
argument unwrapped with its in_dims; the loop passes the keyword-only ones to the op by keyword.
The twin needs no other kernel: it is called with a Tensor batched at some vmap level, and torch
passes a call with nothing batched at the current level down to the next one, so the call
reaches the rule at the level of its outermost batched Tensor. Public torch.library calls only:
`define`, `impl`, `register_vmap`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from codegen import reserved
from codegen.api import python as P
from codegen.dest.py_common import (Function, Section, op_attr, op_name, q, qualname,
                                    twin_namespace)
from codegen.dest.py_sources import check_signature
from codegen.model import (Annotation, BaseTy, DispatchKey, FunctionSchema, ListType, Op,
                           OperatorName, PyRef, Return, Type, is_base, is_tensor_like,
                           is_tensor_list, strip_optional)

if TYPE_CHECKING:
    from codegen.dest.py_common import ModuleScope



def _alias(t: Type) -> Annotation | None:
    """The alias annotation torch reads on an argument or return (of any type)."""
    return strip_optional(t).alias


def _in_place(schema: FunctionSchema) -> bool:
    """The in-place ops torch's fallback loops over: one return, written like the first argument,
    which is written, and no other argument annotated (`soft_shrink_(Tensor(a!) self) ->
    Tensor(a!)`)."""
    args = schema.arguments
    first = _alias(args[0].type) if args else None
    ret = _alias(schema.returns[0].type) if len(schema.returns) == 1 else None
    return (first is not None and first.is_write and ret is not None and ret.is_write
            and all(_alias(a.type) is None for a in args[1:]))


def fallback_refuses(op: Op) -> bool:
    """Whether functorch's loop fallback refuses the op's schema (Note [Generated batching
    rules])."""
    schema = op.schema
    if (not schema.returns or not all(is_base(r.type, BaseTy.Tensor) for r in schema.returns)
            or any(is_tensor_list(a.type) for a in schema.arguments)):
        return True
    # "the fallback path doesn't work on out= or view ops": any annotation but an in-place op's
    types = [a.type for a in schema.arguments] + [r.type for r in schema.returns]
    return not _in_place(schema) and any(_alias(t) is not None for t in types)


def returned_argument(schema: FunctionSchema, ret: Return) -> int | None:
    """The position of the written Tensor argument that a return is (`-> Tensor(a!)` of `Tensor(a!)
    out`), or None."""
    r = ret.annotation
    if r is None or not r.is_write:
        return None
    for i, a in enumerate(schema.arguments):
        w = a.annotation
        if w is not None and w.is_write and is_base(a.type, BaseTy.Tensor) and \
                w.alias_set == r.alias_set:
            return i
    return None


def generated_rule(op: Op) -> str | None:
    """The batching rule generated for an op without `vmap:`: `decompose`, `loop`, or None
    (Note [Generated batching rules])."""
    schema = op.schema
    if op.vmap is not None or schema.is_vararg or schema.is_varret:
        return None
    # A decomposition batches once for the whole batch; torch's fallback would loop, and warn.
    decomposes = op.kernel(DispatchKey.CompositeImplicitAutograd) is not None
    if not decomposes and not fallback_refuses(op):
        return None
    if any(a.annotation is not None and not (a.is_write and is_tensor_like(a.type))
           for a in schema.arguments):
        return None
    if any(r.annotation is not None and returned_argument(schema, r) is None
           for r in schema.returns):
        return None
    if not any(is_tensor_like(a.type) for a in schema.arguments):
        return None
    return "decompose" if decomposes else "loop"


def needs_twin(op: Op) -> bool:
    """Whether the op's loop rule is registered on its positional twin (Note [Positional
    twins]): it has keyword-only Tensors."""
    return any(a.kwarg_only and is_tensor_like(a.type) for a in op.schema.arguments)


def twin_schema(op: Op) -> FunctionSchema:
    """The twin's schema, without namespace: every argument positional, without defaults."""
    n = op.name
    return FunctionSchema(OperatorName(None, n.name, n.overload),
                          tuple(replace(a, default=None, kwarg_only=False)
                                for a in op.schema.arguments),
                          op.schema.returns)


def _generated(m: ModuleScope, op: Op, api: str, sec: Section, kind: str) -> None:
    schema = op.schema
    params = ", ".join(P.parameters(schema))
    arguments = ", ".join(P.call_arguments(schema))
    name = m.define(f"_{api}_vmap")
    r = m.reach(op)
    if kind == "decompose":
        # A kernel at vmap's own key, as functorch's decompositions are: the decomposition gets
        # the batched Tensors, so the ops it calls batch them with their rules.
        sec.functions.append(Function(
            name, params, [f"return {r._ops}.{op_attr(op)}.decompose({arguments})"],
            "vmap: the decomposition, batched by the ops it calls (generated: no `vmap:`)"))
        sec.registrations.append(f"_lib.impl({q(op_name(op))}, {name}, \"FuncTorchBatched\")")
        return
    taken = {a.name for a in schema.arguments}
    info, in_dims = (reserved.fresh(n, taken) for n in ("info", "in_dims"))
    m.helpers.add("loop_samples")
    twin = needs_twin(op)
    # What the rule gets positionally: the twin's rule gets every argument.
    passed = schema.arguments if twin else schema.positional
    positional = [a.name for a in passed]
    operands = "(" + ", ".join(positional) + ("," if len(positional) == 1 else "") + ")"
    kwargs = "{" + ", ".join(f"{q(a.name)}: {a.name}" for a in schema.kwarg_only
                             if not twin) + "}"
    random = "nondeterministic_seeded" in op.tags or any(
        is_base(strip_optional(a.type), BaseTy.Generator) for a in schema.arguments)
    parts = [f"{r._ops}.{op_attr(op)}, {info}, {in_dims}, {operands}, {kwargs}, random={random}"]
    # written Tensors: their positions and names
    written = [(i, a.name) for i, a in enumerate(passed) if a.is_write]
    if written:
        parts.append("written=(" + ", ".join(f"({i}, {q(n)})" for i, n in written)
                     + ("," if len(written) == 1 else "") + ")")
        # What it returns: a written argument or a new Tensor. A written Tensor is passed
        # (keyword-only ones to the twin), at its position in the schema.
        returned = [returned_argument(schema, ret) for ret in schema.returns]
        if returned:
            parts.append("returned=(" + ", ".join(map(str, returned))
                         + ("," if len(returned) == 1 else "") + ")")
    if twin:
        names = [q(a.name) for a in schema.kwarg_only]
        parts.append("keywords=(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")")
    call = f"return {r._loop_samples}("
    line = f"{call}{', '.join(parts)})"
    if len(line) <= 96:
        body = [line]
    elif len(", ".join(parts)) <= 91:
        body = [call, f"    {', '.join(parts)})"]
    else:
        body = [call] + [f"    {p}," for p in parts[:-1]] + [f"    {parts[-1]})"]
    if not twin:
        sec.functions.append(Function(name, f"{info}, {in_dims}, {params}", body,
                                      "vmap: a loop over the batch (generated: no `vmap:`)"))
        sec.registrations.append(f"torch.library.register_vmap({q(qualname(op))}, {name}, "
                                 "lib=_lib)")
        return
    # Note [Positional twins]
    m.helpers.add("twins")
    batched = m.define(f"_{api}_vmap_batched")
    sec.functions.append(Function(
        batched, params, [f"return {r._vmap_ops}.{op_attr(op)}({', '.join(positional)})"],
        "vmap: the positional twin, which carries the batching rule (keyword-only Tensors)"))
    sec.functions.append(Function(name, f"{info}, {in_dims}, {', '.join(positional)}", body,
                                  "vmap: a loop over the batch (generated: no `vmap:`), the "
                                  "positional twin's rule"))
    twin_op = f"{twin_namespace(op.namespace)}::{op_name(op)}"
    sec.registrations.append(f"_vmap_lib.define({q(str(twin_schema(op)))})")
    sec.registrations.append(f"torch.library.register_vmap({q(twin_op)}, {name}, lib=_vmap_lib)")
    sec.registrations.append(f"_lib.impl({q(op_name(op))}, {batched}, \"FuncTorchBatched\")")


def vmap(m: ModuleScope, op: Op, api: str, sec: Section) -> None:
    spec = op.vmap
    if spec is None:
        kind = generated_rule(op)
        if kind is not None:
            _generated(m, op, api, sec, kind)
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
    r = m.reach(op)
    dims = [f"{in_dims}[{i}]" for i, _ in tensors]
    body: list[str] = []
    # The dispatcher leaves out trailing arguments equal to their defaults, and in_dims with
    # them: a `Tensor? bias=None` left out has no entry to read.
    if P.python_defaults(schema)[tensors[-1][0]]:
        body.append(f"{in_dims} = (*{in_dims}, *(None,) * ({len(positional)} - "
                    f"{r.len}({in_dims})))"
                    "  # defaults left out")
    call = f"{r._ops}.{op_attr(op)}({', '.join(P.call_arguments(schema))})"
    n_out = len(schema.returns)
    out_dims = "0" if n_out == 1 else "(" + ", ".join(["0"] * n_out) + ")"
    if spec.kind == "pointwise":
        m.helpers.add("pointwise_batch")
        lhs = ", ".join(names) + ("," if len(names) == 1 else "")
        pairs = ", ".join(f"({n}, {d})" for n, d in zip(names, dims))
        body.append(f"{lhs} = {r._pointwise_batch}({info}.batch_size, {pairs})")
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
            body.append(f"    return {r._loop_batch}(lambda {', '.join(names)}: {call}, "
                        f"{info}.batch_size, {pairs}), {out_dims}")
        for n, d in zip(names, dims):
            if n in rows:
                body.append(f"{n} = {r._fold_leading}({n}, {d}, {info}.batch_size)")
        if n_out == 1:
            body.append(f"return {call}.unflatten(0, ({info}.batch_size, -1)), 0")
        else:
            body.append(f"{outputs} = {call}")
            body.append(f"return {r.tuple}(o.unflatten(0, ({info}.batch_size, -1)) for o in "
                        f"{outputs}), {out_dims}")
    else:
        raise AssertionError(f"unknown vmap kind {spec.kind!r}")
    name = m.define(f"_{api}_vmap")
    sec.functions.append(Function(name, ", ".join([info, in_dims]
                                                  + P.parameters(schema)), body,
                                  f"vmap: {spec.kind}"))
    sec.registrations.append(f"torch.library.register_vmap({q(qualname(op))}, {name}, "
                             "lib=_lib)")
