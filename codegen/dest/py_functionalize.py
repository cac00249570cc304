"""`Functionalize` kernels for in-place and out= ops: their functional variant plus copies into
the mutated arguments (Note [Functionalizing mutable ops]), so torch.compile and export take them;
warnings for mutating ops torch cannot functionalize; the Autograd kernels of mutating ops where
they are not C++ (Note [Autograd of mutating ops] in codegen/dest/cpp_autograd.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen import reserved
from codegen import shape as S
from codegen import tags as T
from codegen.api import python as P
from codegen.contract import unfunctionalizable_in_backward
from codegen.diagnostics import Diagnostics
from codegen.dest.cpp_autograd import (mutating_in_cpp, no_forward_message, no_gradient_doc,
                                       no_gradient_message, not_differentiable_in_python,
                                       refuses_gradient, saves_self)
from codegen.dest.py_common import (TENSOR, Function, Reach, Section, op_attr, op_name, q,
                                    returns_loc)
from codegen.layout import locate as locate_in_func
from codegen.model import (ListType, Op, OpLibrary, OptionalType, is_tensor_like,
                           is_tensor_list_list, without_alias)
from codegen.tags import (FUNCTIONALIZING_TAGS, copies_back, functional_variant,
                          through_functional)

if TYPE_CHECKING:
    from codegen.dest.py_common import ModuleScope


def functionalize(m: ModuleScope, op: Op, api: str, sec: Section) -> None:
    """In-place and out= ops that return their mutated arguments: PyTorch cannot functionalize
    such a custom op by itself (torch.compile, export), so it is registered as its functional
    variant plus copies into the mutated arguments. See Note [Functionalizing mutable ops].
    Without one, an op tagged `inplace` or `out` (Note [Tags from the schema's shape]) is left
    to torch's auto_functionalize; any other gets a `not-functionalizable` warning."""
    schema = op.schema
    kind = T.unfunctionalizable(op, m.lib.named(op.namespace, op.name.base))
    if kind is None:
        returns = S.mutated_returns(schema)
        functional = functional_variant(m.lib, op)
        # Returning what it mutates, it is functionalizable through its functional variant
        # (the kernel copies each result into a mutated Tensor), or torch's auto_functionalize.
        if any(isinstance(r, str) for r in returns) and functional is not None and \
                copies_back(schema) and not T.only_decomposes(op):
            functionalize_as(m, op, api, sec, functional, returns)
        return
    if kind == T.VIEW:
        view = next(r for r in schema.returns if r.annotation is not None)
        # torch functionalizes aten's views with their view_copy and inverse; a custom op
        # has neither, so FunctionalTensorMode refuses it (torch.compile, export's
        # run_decompositions) with "Found a custom (non-ATen) operator whose output has
        # alias annotations".
        m.diags.warning(
            returns_loc(op), f"{op.name} returns a view of its input ('{view.type}'), so "
            "torch.compile and torch.export (run_decompositions) cannot functionalize it: "
            "torch functionalizes no custom op whose output aliases an input",
            "return a new Tensor (drop the alias annotation and copy), or make the op "
            "CompositeImplicitAutograd over torch's own view ops",
            name="not-functionalizable", suppress=op.suppress)
        return
    if kind == T.NESTED_WRITE:
        arg = T.nested_write(op)
        assert arg is not None
        span = arg.type_span or arg.span
        m.diags.warning(
            locate_in_func(op, span) if span is not None else op.loc,
            f"{op.name} writes to '{arg.name}' ('{arg.type}'), Tensors inside a nested list, "
            "so torch.compile and torch.export cannot functionalize it (torch "
            "auto-functionalizes written Tensor, Tensor?, Tensor[] and Tensor?[] arguments "
            "only)", "pass each list it writes as an argument of its own (`Tensor(a!)[] out`)",
            name="not-functionalizable", suppress=op.suppress)
        return
    if kind == T.OTHER_RETURN:
        other = next(r for r in schema.returns if without_alias(r.type) != TENSOR)
        m.diags.warning(
            returns_loc(op), f"{op.name} mutates its inputs and returns '{other.type}', so "
            "torch.compile and torch.export cannot functionalize it (torch "
            "auto-functionalizes mutating ops that return nothing or new Tensors only)",
            "return Tensors, or nothing and let the caller read the mutated inputs",
            name="not-functionalizable", suppress=op.suppress)
        return
    if kind == T.STABLE_TAG:
        unregistered = sorted(FUNCTIONALIZING_TAGS.intersection(op.tags))
        why = (f"torch's stable ABI (2.13) cannot register the '{unregistered[0]}' tag that "
               "torch's auto_functionalize needs, and the library declares no functional "
               "variant")
        hint = (f"declare `{op.name.base}(...)` with the same inputs returning new tensors (its "
                "Functionalize kernel is then generated), or return ()")
    elif kind == T.NEW_VALUES:
        why = "it also returns new values, which no functionalization kernel can produce"
        hint = "return only the new values; the caller keeps the mutated tensors"
    elif kind == T.NO_COPY_BACK:
        why = "it mutates a Tensor list or an optional Tensor"
        hint = "return () and let the caller keep the mutated tensors"
    else:
        shape = ("it is neither in-place (mutating and returning its first argument, tag "
                 "'inplace') nor out= (returning its mutable keyword-only arguments, tag "
                 "'out')")
        near = T.near_variant(op, m.lib.named(op.namespace, op.name.base))
        if near is not None and copies_back(schema):
            # An op by that name exists: saying the library declares none would be wrong.
            written = [a.name for a in schema.mutable_arguments]
            near_writes = [a.name for a in near.schema.mutable_arguments]
            n = len(near.schema.returns)
            what = (f"it writes {', '.join(near_writes)} too" if near_writes else
                    f"it returns {n} value{'' if n == 1 else 's'}, not a new Tensor for each "
                    f"of the {len(written)} arguments {op.name} writes")
            why = (f"{shape}, and {near.name}, which takes its inputs, is not its functional "
                   f"variant: {what}")
            rets = "Tensor" if len(written) == 1 else f"({', '.join(['Tensor'] * len(written))})"
            hint = (f"return () and let the caller keep the mutated tensors, or declare an "
                    f"overload taking the same inputs, writing none of them, and returning a "
                    f"new Tensor for each of {', '.join(written)}, in that order "
                    f"(`{op.name.base}.functional(...) -> {rets}`)")
        else:
            why = f"{shape}, and the library declares no functional variant"
            hint = (f"return () and let the caller keep the mutated tensors, or declare "
                    f"`{op.name.base}(...)` with the same inputs returning new tensors")
    # A returned `Tensor(a!)?` left as None is a new tensor: the caller has none of its own.
    optional = [n for n in S.mutated_returns(schema) if S.optional_return_arg(schema, n)]
    if optional and kind in (T.NEW_VALUES, T.NO_COPY_BACK, T.NO_VARIANT):
        names = " and ".join(f"'{n}'" for n in optional)
        one = len(optional) == 1
        hint = (f"{'return only the new values' if kind == T.NEW_VALUES else 'return ()'} and "
                f"make {names} required: when {names if one else 'one'} is None the caller "
                f"has no tensor to keep; or drop {names if one else 'them'} and return "
                f"{'its value as a new Tensor' if one else 'their values as new Tensors'}")
    m.diags.warning(
        returns_loc(op), f"{op.name} returns arguments it mutates, so torch.compile and "
        f"torch.export cannot functionalize it: {why}", hint,
        name="not-functionalizable", suppress=op.suppress)


def functionalize_as(m: ModuleScope, op: Op, api: str, sec: Section, functional: Op,
                     returns: list) -> None:
    """The Functionalize kernel: `functional`, then a copy into each mutated argument."""
    schema = op.schema
    mutated = [a.name for a in schema.mutable_arguments]
    r = m.reach(op)
    call = _functional_call(r, op, functional)
    body: list[str] = []
    taken = {a.name for a in schema.arguments}
    results = [reserved.fresh("result", taken)] if len(mutated) == 1 else \
        [reserved.fresh(f"result{i}", taken) for i in range(len(mutated))]
    body.append(f"{', '.join(results)} = {call}")
    for name, result in zip(mutated, results):
        arg = schema.argument(name)
        assert arg is not None
        if arg.kwarg_only:
            # An out= argument: functionalization cannot resize it (sizes may be symbolic).
            body.append(f"if {name}.shape != {result}.shape:")
            message = (f"{op.name}: under torch.compile and torch.export, '{name}' must "
                       "have the result's shape ")
            raise_ = f"    raise {r.RuntimeError}("
            body.append(f"{raise_}{q(message)}")
            body.append(" " * len(raise_) + f"f\"{{{r.list}({result}.shape)}}, got "
                        f"{{{r.list}({name}.shape)}}\")")
        body.append(f"{name}.copy_({result})")
    outs = list(returns)  # every return is a mutated argument (the caller checked)
    if len(outs) == 1:
        body.append(f"return {outs[0]}")
    elif outs:
        body.append(f"return {', '.join(outs)}")
    name = m.define(f"_{api}_functionalize")
    doc = (f"Under functionalization (torch.compile, torch.export): {functional.name}, "
           f"copied into {', '.join(mutated)}.")
    sec.functions.append(Function(name, ", ".join(P.parameters(schema)), body, doc))
    sec.registrations.append(f"_lib.impl({q(op_name(op))}, {name}, \"Functionalize\")")
    # Note [Autograd of mutating ops] in codegen/dest/cpp_autograd.py; here where it is not C++.
    through = through_functional(m.lib, op)
    if through is not None and not mutating_in_cpp(m.lib, op):
        if through[0] == "inplace":
            _autograd_as(m, op, api, sec, functional, results[0])
        else:
            _out_autograd(m, op, api, sec)


def _functional_call(r: Reach, op: Op, functional: Op, first: str | None = None) -> str:
    """The call of `op`'s functional variant on `op`'s inputs (its out= arguments left out);
    `first`: what to pass for the first input instead of itself."""
    inputs = [a for a in op.schema.arguments if not (a.kwarg_only and a.is_write)]
    args = [first if i == 0 and first is not None else mine.name for i, mine in enumerate(inputs)]
    return f"{r._ops}.{op_attr(functional)}(" + ", ".join(
        f"{theirs.name}={arg}" if theirs.kwarg_only else arg
        for arg, theirs in zip(args, functional.schema.arguments)) + ")"


def _autograd_as(m: ModuleScope, op: Op, api: str, sec: Section, functional: Op,
                 result: str) -> None:
    """An in-place op's Autograd kernel: its differentiable functional variant copied into
    `self`, as torchgen differentiates `mul_` with `mul`'s formulas. Without it, torch's
    autograd fallback ran the kernel and recorded nothing for it, so gradients through the
    in-place op were silently wrong (eager, and under torch.compile)."""
    schema = op.schema
    self_ = schema.positional[0].name
    tensors = _tensor_args(schema)
    # The functional op's backward may read `self`, which the copy then overwrites: it gets a
    # clone (torchgen's `original_self`) unless its formulas read no more than its metadata.
    r = m.reach(op)
    call = _functional_call(r, op, functional,
                            f"{self_}.clone()" if saves_self(functional) else None)
    below = ", ".join(P.call_arguments(schema))
    # Forward-mode AD goes through the functional variant too: its jvp raises (or its
    # decomposition carries the tangent); below autograd the tangent of `self` stayed as it was.
    m.helpers.add("has_tangent")
    body = [_recording(r, tensors),
            f"    {result} = {call}",
            f"    {self_}.copy_({result})",
            f"    return {self_}",
            f"with {r.torch}._C._AutoDispatchBelowADInplaceOrView():",
            f"    {r._ops}.{op_attr(op)}({below})",
            # what torch's autograd fallback did for the op: autograd sees the write
            _bump(m, r, op),
            f"return {self_}"]
    _register_autograd(m, op, api, sec, body,
                       f"Under autograd: {functional.name}, which has the derivatives, copied "
                       f"into {self_}; below autograd when no gradient is recorded.")
    _inplace_or_view(m, op, api, sec)


def list_autograd(m: ModuleScope, op: Op, api: str, sec: Section) -> None:
    """The Autograd kernel of an in-place op on a Tensor list (`_foreach_mul_(Tensor(a!)[] self,
    Scalar scalar) -> ()`) beside a differentiable functional variant, where it is not C++: the
    variant, copied into each tensor of `self`, as torchgen differentiates aten's foreach ops.
    Without it, the op raised that it has no derivatives."""
    through = through_functional(m.lib, op)
    if through is None or through[0] != "inplace_list" or mutating_in_cpp(m.lib, op):
        return
    functional = through[1]
    schema = op.schema
    self_ = schema.positional[0].name
    tensors = _tensor_args(schema)
    r = m.reach(op)
    taken = {a.name for a in schema.arguments}
    result = reserved.fresh("result", taken)
    t, new = reserved.fresh("t", taken), reserved.fresh("new", taken)
    # The functional op's backward may read `self`, which the copies then overwrite.
    call = _functional_call(r, op, functional,
                            f"[{t}.clone() for {t} in {self_}]" if saves_self(functional)
                            else None)
    m.helpers.add("has_tangent")
    body = [_recording(r, tensors),
            f"    {result} = {call}",
            f"    for {t}, {new} in {r.zip}({self_}, {result}, strict=True):",
            f"        {t}.copy_({new})",
            "    return",
            *_below_then_bump(m, r, op, f"{r._ops}.{op_attr(op)}"
                              f"({', '.join(P.call_arguments(schema))})", taken)]
    _register_autograd(m, op, api, sec, body,
                       f"Under autograd: {functional.name}, which has the derivatives, copied "
                       f"into each tensor of {self_}; below autograd when no gradient is "
                       "recorded.")
    _inplace_or_view(m, op, api, sec)


def _recording(r: Reach, tensors: list[str]) -> str:
    """The test that autograd records a call: grad mode on and an argument requiring grad, or a
    tangent (forward-mode AD)."""
    return (f"if ({r.torch}._C.is_grad_enabled() and "
            f"{r.torch}._C._any_requires_grad({', '.join(tensors)})) or "
            f"{r._has_tangent}({', '.join(tensors)}):")


def _register_autograd(m: ModuleScope, op: Op, api: str, sec: Section, body: list[str],
                       doc: str) -> None:
    """Defines the op's Autograd kernel, `body`, and registers it."""
    name = m.define(f"_{api}_autograd")
    sec.functions.append(Function(name, ", ".join(P.parameters(op.schema)), body, doc))
    sec.registrations.append(f"_lib.impl({q(op_name(op))}, {name}, \"Autograd\")")


def _out_autograd(m: ModuleScope, op: Op, api: str, sec: Section) -> None:
    """An out= op's Autograd kernel: aten's error when a gradient would be recorded. Without it,
    torch's autograd fallback returned `out` detached from a differentiable input, and the
    error came later, at backward, as "element 0 of tensors does not require grad"."""
    _refusing_autograd(m, op, api, sec)


def side_effect(op: Op, sec: Section) -> None:
    """An op called for an effect its schema does not show is registered as having a side effect,
    so that torch.compile keeps its calls (Note [Ops called for an effect] in codegen/tags.py)."""
    if T.effect_only(op.schema):
        sec.registrations.append(f"torch.fx.node.has_side_effect(_ops.{op_attr(op)})")


def no_gradient(m: ModuleScope, op: Op, api: str, sec: Section) -> None:
    """The Autograd kernel of an op that writes to Tensor arguments and that nothing
    differentiates (vLLM's `rms_norm(Tensor! result, ...) -> ()`), where it is not C++: an error
    when an argument requires grad. Without it, torch's autograd fallback recorded nothing for the
    write: torch.func.grad gave zeros, backward through the written tensor skipped the op."""
    if refuses_gradient(m.lib, op) and not mutating_in_cpp(m.lib, op):
        _refusing_autograd(m, op, api, sec)


def not_implemented(m: ModuleScope, op: Op, api: str, sec: Section) -> None:
    """The Autograd kernel of a functional op without derivatives, where it is not C++ (Note [C++
    autograd] in codegen/dest/cpp_autograd.py): the op below autograd; where an input requires
    grad, its outputs get a node whose backward raises, as torch's not-implemented kernel does."""
    if not not_differentiable_in_python(m.lib, op):
        return
    schema = op.schema
    tensors = _tensor_args(schema)
    r = m.reach(op)
    result = reserved.fresh("result", {a.name for a in schema.arguments})
    call = f"{r._ops}.{op_attr(op)}({', '.join(P.call_arguments(schema))})"
    m.helpers.add("no_derivative")
    body = [f"with {r.torch}._C._AutoDispatchBelowAutograd():",
            f"    {result} = {call}",
            f"if {r.torch}._C.is_grad_enabled() and "
            f"{r.torch}._C._any_requires_grad({', '.join(tensors)}):",
            f"    {result} = {r._no_derivative}({q(f'derivative for {op.name} is not implemented')}"
            f", {result}, {', '.join(tensors)})",
            f"return {result}"]
    _register_autograd(m, op, api, sec, body, "Under autograd: no derivatives, so a backward "
                       "through the outputs raises.")


def _refusing_autograd(m: ModuleScope, op: Op, api: str, sec: Section) -> None:
    """An Autograd kernel raising no_gradient_message when grad mode is on and an argument
    requires grad; else the op below autograd, the written tensors' versions bumped."""
    schema = op.schema
    tensors = _tensor_args(schema)
    r = m.reach(op)
    call = f"{r._ops}.{op_attr(op)}({', '.join(P.call_arguments(schema))})"
    m.helpers.add("has_tangent")
    body = [f"if {r.torch}._C.is_grad_enabled() and "
            f"{r.torch}._C._any_requires_grad({', '.join(tensors)}):",
            f"    raise {r.RuntimeError}({q(no_gradient_message(op))})",
            # forward-mode AD: below autograd the written tensors' tangents stayed as they were
            f"if {r._has_tangent}({', '.join(tensors)}):",
            f"    raise {r.NotImplementedError}({q(no_forward_message(op))})",
            *_below_then_bump(m, r, op, call, {a.name for a in schema.arguments})]
    _register_autograd(m, op, api, sec, body, no_gradient_doc(op) + ".")
    _inplace_or_view(m, op, api, sec)


def _inplace_or_view(m: ModuleScope, op: Op, api: str, sec: Section) -> None:
    """The ADInplaceOrView kernel of an op with a generated Autograd kernel above: the op below
    it, then the written tensors' versions bumped (Note [ADInplaceOrView kernels] in
    codegen/dest/cpp_autograd.py)."""
    schema = op.schema
    r = m.reach(op)
    taken = {a.name for a in schema.arguments}
    keyset = reserved.fresh("keyset", taken)
    call = (f"{r._ops}.{op_attr(op)}.redispatch({keyset} & "
            f"{r.torch}._C._after_ADInplaceOrView_keyset, {', '.join(P.call_arguments(schema))})")
    body = _below_then_bump(m, r, op, call, taken | {keyset})
    name = m.define(f"_{api}_inplace_or_view")
    sec.functions.append(Function(
        name, ", ".join([keyset, *P.parameters(schema)]), body,
        "Below autograd (inference mode): the op, then what it writes has its version bumped."))
    sec.registrations.append(
        f"_lib.impl({q(op_name(op))}, {name}, \"ADInplaceOrView\", with_keyset=True)")


def _below_then_bump(m: ModuleScope, r: Reach, op: Op, call: str, taken: set[str]) -> list[str]:
    """`call` of `op` below ADInplaceOrView, then the written tensors' versions bumped, its result
    (a name not in `taken`) returned."""
    if not op.schema.returns:
        return [f"with {r.torch}._C._AutoDispatchBelowADInplaceOrView():", f"    {call}",
                _bump(m, r, op)]
    result = reserved.fresh("result", taken)
    return [f"with {r.torch}._C._AutoDispatchBelowADInplaceOrView():", f"    {result} = {call}",
            _bump(m, r, op), f"return {result}"]


def _bump(m: ModuleScope, r: Reach, op: Op) -> str:
    """The statement bumping the versions of what `op` wrote (the `bump` helper)."""
    m.helpers.add("bump")
    return f"{r._bump}({q(str(op.name))}, {_written(op)})"


def _tensor_args(schema) -> list[str]:
    """The Tensor arguments of `schema` as the requires-grad and tangent tests take them: a
    Tensor list of lists (`Tensor[][]`) spread into its lists."""
    return [a.name if is_tensor_like(a.type) else f"*{a.name}" for a in schema.arguments
            if is_tensor_like(a.type) or is_tensor_list_list(a.type)]


def _written(op: Op) -> str:
    """The list of the Tensors `op` writes to, for increment_version (None: nothing written)."""
    parts: list[str] = []
    optional = False
    for a in op.schema.mutable_arguments:
        if is_tensor_list_list(a.type):
            names = {b.name for b in op.schema.arguments}
            inner, t = reserved.fresh("inner", names), reserved.fresh("t", names)
            parts.append(f"*({t} for {inner} in {a.name} for {t} in {inner})")
            continue
        if not is_tensor_like(a.type):
            continue
        parts.append(f"*{a.name}" if isinstance(a.type, ListType) else a.name)
        optional = optional or isinstance(a.type, OptionalType) or (
            isinstance(a.type, ListType) and isinstance(a.type.elem, OptionalType))
    if not optional:
        return f"[{', '.join(parts)}]"
    taken = {a.name for a in op.schema.arguments}
    t = reserved.fresh("t", taken)
    return f"[{t} for {t} in ({', '.join(parts)},) if {t} is not None]"


def warn_unfunctionalizable_backwards(lib: OpLibrary, diags: Diagnostics) -> None:
    """`backward-not-functionalizable` for each op whose formulas call a library op torch
    cannot functionalize: AOTAutograd functionalizes the backward it traces, so a compiled model
    differentiating the op fails where eager autograd works."""
    for op in lib.ops:
        found = unfunctionalizable_in_backward(op, lib)
        if found is None:
            continue
        ref, callee = found
        diags.warning(
            ref.loc or op.loc, f"the backward of {op.name} calls {callee.name}, which torch "
            "cannot functionalize (its not-functionalizable warning): torch.compile cannot "
            f"differentiate {op.name} (AOTAutograd functionalizes the backward), eager "
            "autograd can",
            f"make {callee.name} functionalizable (return only new Tensors, or nothing), or "
            "call a functional op from the formula",
            name="backward-not-functionalizable", suppress=op.suppress)
