"""Autograd from derivative formulas (`codegen.formulas`): a `torch.autograd.Function` per op
(forward below autograd, setup_context saving only what the formulas read, backward from the
formulas) and an `Autograd` kernel applying it (Note [Generated autograd]); ops whose Tensor
lists cannot pass through it flat use `torch.library.register_autograd`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Callable

from codegen import formulas as F
from codegen import layout, reserved
from codegen.api import python as P
from codegen.dest import cpp_autograd
from codegen.dest.py_common import (PLAIN, Class, Function, Reach, Section, camel, op_attr,
                                    op_name, q, qualname, reg_module_names)
from codegen.expr import Prec, PyPrinter
from codegen.model import (Argument, FunctionSchema, ListType, Op, Return, is_tensor_like,
                           is_tensor_list, strip_optional)

if TYPE_CHECKING:
    from codegen.dest.py_common import ModuleScope


@dataclass
class Names:
    """How backward spells each thing a formula reads."""
    inputs: dict[str, str]                  # input -> local name (whole value)
    meta: set[str]                          # inputs whose metadata only is on ctx
    grads: list[str]                        # per output
    results: list[str]                      # per output (locals; unused ones unset)
    ops: dict[F.OpRef, Op]                  # library references -> ops
    ctx: str = "ctx"                        # backward's ctx parameter
    locals: dict[str, str] = field(default_factory=dict)    # binding -> local name
    meta_attrs: dict[tuple[str, str], str] = field(default_factory=dict)  # CtxAttributes.meta


class FormulaEmitter(PyPrinter):
    """Renders formulas as Python statements of the generated backward."""

    def __init__(self, op: Op, names: Names, helpers: set[str], reach: Reach):
        self.op = op
        self.names = names
        self.helpers = helpers
        self.r = reach

    def _meta(self, name: str, what: str) -> str:
        return f"{self.names.ctx}.{self.names.meta_attrs[name, what]}"

    def form(self, e: F.Expr) -> tuple[str, int]:  # type: ignore[override]
        n = self.names
        match e:
            case F.Const(value=v):
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    return repr(v), Prec.UNARY    # `(1).sum()`: `1.sum()` does not parse
                return (q(v) if isinstance(v, str) else repr(v)), Prec.ATOM
            case F.EllipsisLit():
                return "...", Prec.ATOM
            case F.InputRef(name=name):
                assert name not in n.meta, "metadata-only inputs are read through their metadata"
                return n.inputs[name], Prec.ATOM
            case F.GradRef(index=i):
                return n.grads[i], Prec.ATOM
            case F.GradsRef():
                return "(" + ", ".join(n.grads) + ("," if len(n.grads) == 1 else "") + ")", Prec.ATOM
            case F.ResultRef(index=i):
                return n.results[i], Prec.ATOM
            case F.ResultsRef():
                return ("(" + ", ".join(n.results) + ("," if len(n.results) == 1 else "") + ")",
                        Prec.ATOM)
            case F.TorchRef(path=path):
                return ".".join((self.r.torch,) + path), Prec.POSTFIX
            case F.BuiltinRef(name=name):
                raise AssertionError(f"builtin {name} outside a call")
            case F.PyBuiltinRef(name=name):
                return getattr(self.r, name), Prec.ATOM
            case F.LoopVar(name=name):
                return name, Prec.ATOM
            case F.LocalRef(name=name):
                return n.locals[name], Prec.ATOM
            case F.ListComp(elem=elem, names=names, iterable=it, cond=cond):
                test = f" if {self.expr(cond, Prec.COND + 1)}" if cond is not None else ""
                return (f"[{self.expr(elem)} for {', '.join(names)} in "
                        f"{self.expr(it, Prec.COND + 1)}{test}]", Prec.ATOM)
            case F.OpRef():
                return f"{self.r._ops}.{op_attr(n.ops[e])}", Prec.POSTFIX
            case F.Attr(obj=F.InputRef(name=name), name=attr) if name in n.meta:
                if attr == "ndim":
                    return f"{self.r.len}({self._meta(name, 'shape')})", Prec.POSTFIX
                return self._meta(name, F.META_ATTRS[attr]), Prec.POSTFIX
            case F.Attr(obj=obj, name=attr):
                return f"{self.expr(obj, Prec.POSTFIX)}.{attr}", Prec.POSTFIX
            case F.Star(value=v):
                return f"*{self.expr(v, Prec.POSTFIX)}", Prec.ATOM
            case F.Call():
                return self._call(e), Prec.POSTFIX
            case F.Slice(lo=lo, hi=hi, step=step):
                lo_t = self.expr(lo) if lo is not None else ""
                hi_t = self.expr(hi) if hi is not None else ""
                step_t = f":{self.expr(step)}" if step is not None else ""
                return f"{lo_t}:{hi_t}{step_t}", Prec.ATOM
            case F.Subscript(obj=obj, items=items):
                return (f"{self.expr(obj, Prec.POSTFIX)}[{', '.join(self.expr(i) for i in items)}]",
                        Prec.POSTFIX)
            case F.TupleLit(items=items):
                inner = ", ".join(self.expr(i) for i in items)
                return f"({inner}{',' if len(items) == 1 else ''})", Prec.ATOM
            case F.ListLit(items=items):
                return "[" + ", ".join(self.expr(i) for i in items) + "]", Prec.ATOM
            case F.BinOp(op=op, left=a, right=b):
                return self.binary(op.value, a, b)
            case F.UnaryOp(op=op, operand=o):
                return self.unary(op.value, o)
            case F.IfExp(cond=c, then=t, orelse=o):
                return self.conditional(t, c, o)
        raise TypeError(f"not a formula node: {e!r}")

    def formula(self, f: F.Formula, targets: list[str]) -> list[str]:
        """The statements computing `f` into `targets`: its bindings, then the assignment."""
        lines = [f"{self.names.locals[name]} = {self.expr(value)}" for name, value in f.bindings]
        lines.append(f"{', '.join(targets)} = {self.expr(f.expr)}")
        return lines

    def _call(self, e: F.Call) -> str:
        n = self.names
        func = e.func
        if isinstance(func, F.BuiltinRef):
            if func.name == "unbroadcast":
                grad, like = e.args
                if isinstance(like, F.InputRef) and like.name in n.meta:
                    shape = self._meta(like.name, "shape")
                else:
                    shape = f"{self.expr(like, Prec.POSTFIX)}.shape"
                return f"{self.expr(grad, Prec.POSTFIX)}.sum_to_size({shape})"
            if func.name == "not_implemented":
                self.helpers.add("not_implemented")
                return (f"{self.r._not_implemented}({q(qualname(self.op))}, "
                        f"{self.expr(e.args[0])})")
            raise AssertionError(func.name)
        if isinstance(func, F.Attr) and isinstance(func.obj, F.InputRef) and \
                func.obj.name in n.meta and func.name in F.META_METHODS:
            shape = self._meta(func.obj.name, "shape")
            if func.name == "dim":
                return f"{self.r.len}({shape})"
            if not e.args and not e.kwargs:
                return shape
            index = self.expr(e.args[0]) if e.args else self.expr(e.kwargs[0][1])
            return f"{shape}[{index}]"
        args = [self.expr(a) for a in e.args] + [f"{k}={self.expr(v)}" for k, v in e.kwargs]
        return f"{self.expr(func, Prec.POSTFIX)}({', '.join(args)})"


# --------------------------------------------------------------------------------------------------
# The autograd.Function and its registration


def autograd(m: ModuleScope, op: Op, api: str, sec: Section) -> None:
    """An Autograd kernel and the `torch.autograd.Function` it applies, from the formulas.

    Note [Generated autograd]
    `torch.library.register_autograd` applies an autograd.Function from the op's Autograd
    kernel; under torch.func that Function goes to functorch's custom_function_call, which
    has no kernel at the Autograd key the dispatcher is already at (pytorch#168393), and
    every call pays for a metadata object and signature binding. The generated Function has
    `forward(*inputs)` calling the op below autograd with grad mode on (as C++ autograd
    kernels do, so that torch.func's lower levels record the call), `setup_context(ctx,
    inputs, output)` saving only what the formulas read, and `backward` from the formulas.
    The op's Autograd kernel calls the op below autograd at once when no gradient can be
    asked for, and otherwise applies the Function plainly (`_apply`), as a C++ autograd
    kernel records an op on the current torch.func level's tensors: grad, vjp and jacrev
    work, and vmap reaches the op's batching rule through the dispatcher below (the Function
    itself is never vmapped). Formulas are reverse-mode only: the Function's jvp raises.
    Tensor[] inputs are passed flat (autograd tracks Tensor arguments only), after one count
    per list.
    """
    d = op.derivatives
    if not isinstance(d, F.Derivatives):
        return
    if cpp_autograd.uses_cpp(m.lib, op):
        return  # its Autograd kernel is C++ (Note [C++ autograd] in codegen/dest/cpp_autograd.py)
    refs = _library_refs(m, d)
    if refs is None:
        return  # reported by formulas.check_library
    plan = F.saved(d, op.schema)
    list_returns = [r for r in op.schema.returns if is_tensor_list(r.type)]
    if F.uses_register_autograd(op.schema):
        # Several Tensor[] outputs, or an optional Tensor[] input, do not pass through an
        # autograd.Function as flat Tensors: torch.library wraps it (no torch.func then).
        if len(list_returns) > 1:
            m.diags.warning(d.loc or op.loc, f"torch.func transforms (grad, vjp, jacrev) "
                            f"cannot differentiate {op.name}: it returns several Tensor[]; "
                            "autograd works",
                            "return one Tensor[] (and Tensors) for torch.func support",
                            name="no-torch-func", suppress=op.suppress)
        register_autograd(m, op, api, sec, d, refs, plan)
        return
    flat = FlatFunction(op.schema, m.reach(op))
    backward_decorators = ["staticmethod"]
    why = first_order_reason(m, op)
    if why:
        backward_decorators.append(f"_first_order({q(why)})")
    forward_params, forward = flat.forward(op)
    singles, saved_lists, attrs, setup = flat.setup_context(plan, d)
    body = flat.backward(op, d, plan, refs, m.helpers, singles, saved_lists, attrs)
    own = flat.own
    grads = f"{own.ctx}, " + (", ".join(own.grads) if flat.at is None else f"*{own.flat_grads}")
    cls = Class(
        m.define(f"_{camel(api)}Function"), "torch.autograd.Function",
        f"{qualname(op)} under autograd, from its derivative formulas.",
        [Function("forward", forward_params, forward, decorators=["staticmethod"]),
         Function("setup_context", "ctx, inputs, output", setup, decorators=["staticmethod"]),
         Function("backward", grads, body, _formulas_doc(d), decorators=backward_decorators),
         _no_jvp(op)])
    sec.functions.append(cls)

    # The Autograd kernel: the Function only when a gradient may be asked for.
    m.helpers.add("apply")
    name = m.define(f"_{api}_autograd")
    sec.functions.append(Function(name, ", ".join(P.parameters(op.schema)),
                                  flat.kernel(op, cls.name),
                                  f"Autograd kernel: {cls.name} when differentiating."))
    sec.registrations.append(f"_lib.impl({q(op_name(op))}, {name}, \"Autograd\")")


def _library_refs(m: ModuleScope, d: F.Derivatives) -> dict[F.OpRef, Op] | None:
    """The library op each reference of the formulas calls; None when one names none."""
    refs: dict[F.OpRef, Op] = {}
    for ref in layout.library_calls(d):
        target = F.resolve(m.lib, ref)
        if target is None:
            return None
        refs[ref] = target
    return refs


def _no_jvp(op: Op) -> Function:
    """The Function's jvp: formulas are reverse-mode only."""
    why = (f"{qualname(op)} has no forward-mode derivative: its derivative formulas "
           "are reverse-mode (torch.func.jvp, jacfwd and forward_ad are not supported)")
    return Function("jvp", "ctx, *tangents", [f"raise NotImplementedError({q(why)})"],
                    decorators=["staticmethod"])


class FlatFunction:
    """How an op's arguments and returns pass through its autograd.Function as flat Tensors
    (Note [Generated autograd]), and the Function's methods and Autograd kernel in that layout.

    The Function's inputs are one slot per argument (a count for a Tensor[]), then the elements
    of the Tensor[] arguments. With one Tensor[] output, the Function returns every output Tensor
    flat, and the Autograd kernel puts the list back together; the list's length is what the
    other returns leave."""

    def __init__(self, schema: FunctionSchema, reach: Reach = PLAIN):
        self.schema = schema
        self.r = reach
        self.args = list(schema.arguments)
        list_returns = [i for i, r in enumerate(schema.returns) if is_tensor_list(r.type)]
        self.at = list_returns[0] if list_returns else None    # the Tensor[] return
        self.n_returns = len(schema.returns)
        self.tail = self.n_returns - 1 - self.at if self.at is not None else 0
        self.lists = [a for a in self.args if is_tensor_list(a.type)]
        self.own = own = OwnNames(schema, self.args, self.lists, self.at is not None)
        self.slot_names = [own.lens[a.name] if is_tensor_list(a.type) else a.name
                           for a in self.args]
        self.slot = {a.name: i for i, a in enumerate(self.args)}
        self.n_slots = len(self.args)
        self.flat = self.lists[0].name if len(self.lists) == 1 else own.flat

    # -- where things are in the flat inputs and outputs

    def list_slice(self, seq: str, k: int, count: Callable[[str], str], base: int) -> str:
        """The elements of the k-th Tensor[] argument in `seq`, which holds the elements of
        them all from index `base` on; `count(name)` spells a list's length."""
        lists = self.lists
        parts = ([str(base)] if base else []) + [count(a.name) for a in lists[:k]]
        start = " + ".join(parts)
        if k == len(lists) - 1:
            return f"{seq}[{start}:]" if start else seq
        return f"{seq}[{start}:{' + '.join(parts + [count(lists[k].name)])}]"

    def input_count(self, name: str) -> str:
        return f"inputs[{self.slot[name]}]"

    def source(self, a_name: str) -> str:
        """Where setup_context finds the input `a_name`."""
        arg = self.schema.argument(a_name)
        assert arg is not None
        if is_tensor_list(arg.type):
            return self.list_slice("inputs", self.lists.index(arg), self.input_count,
                                   self.n_slots)
        return f"inputs[{self.slot[a_name]}]"

    def flat_output(self, seq: str, i: int, r: Reach | None = None) -> str:
        """Return `i` in the flat outputs `seq` (a slice for the Tensor[] one), in a function
        reaching builtins as `r` does (by default, one with the op's arguments)."""
        at, tail, n_returns = self.at, self.tail, self.n_returns
        r = r or self.r
        if at is None:
            return seq if n_returns == 1 else f"{seq}[{i}]"
        if i == at:
            if not tail:
                return f"{seq}[{at}:]" if at else seq
            return f"{seq}[{at}:{r.len}({seq}) - {tail}]"
        return f"{seq}[{i}]" if i < at else f"{seq}[-{n_returns - i}]"

    def output(self, i: int) -> str:
        """Return `i` in setup_context, whose parameters are its own."""
        return self.flat_output("output", i, PLAIN)

    def needs(self, a_name: str) -> str:
        """Whether backward must compute the gradient of input `a_name`."""
        arg = self.schema.argument(a_name)
        assert arg is not None
        if is_tensor_list(arg.type):
            elements = self.list_slice(self.own.needs, self.lists.index(arg),
                                       self.own.lens.__getitem__, self.n_slots)
            return f"{self.r.any}({elements})"
        return f"{self.own.needs}[{self.slot[a_name]}]"

    # -- the Function's methods

    def call(self, op: Op) -> str:
        """The op below autograd."""
        return f"{self.r._ops}.{op_attr(op)}({', '.join(P.call_arguments(self.schema))})"

    def forward(self, op: Op) -> tuple[str, list[str]]:
        """forward's parameters and body: the op below autograd."""
        lists, flat, at, r = self.lists, self.flat, self.at, self.r
        forward: list[str] = []
        if len(lists) > 1:
            for k, a in enumerate(lists):
                elements = self.list_slice(flat, k, self.own.lens.__getitem__, 0)
                forward.append(f"{a.name} = {r.list}({elements})")
        elif lists:
            forward.append(f"{flat} = {r.list}({flat})")
        call = self.call(op)
        # Grad mode on, as in a C++ autograd kernel (apply turns it off): under torch.func the
        # op then records at the transform levels below this one.
        forward.append(f"with {r.torch}.enable_grad(), {r.torch}._C._AutoDispatchBelowAutograd():")
        if at is None:
            forward.append(f"    return {call}")
        elif self.n_returns == 1:
            forward.append(f"    return {r.tuple}({call})")
        else:
            outputs = self.own.outputs
            forward.append(f"    {outputs} = {call}")
            forward.append(f"    return (*{outputs}[:{at}], *{outputs}[{at}], "
                           f"*{outputs}[{at + 1}:])")
        return ", ".join(self.slot_names + ([f"*{flat}"] if lists else [])), forward

    def setup_context(self, plan: F.Saved, d: F.Derivatives) -> tuple[
            list[tuple[str, str]], list[tuple[str, str]], CtxAttributes, list[str]]:
        """The Tensors saved (local, source), the Tensor lists saved, the attributes kept on
        ctx, and setup_context's body."""
        at, results, output = self.at, self.own.results, self.output
        kept = _value_results(self.schema, plan)
        singles = [(n, self.source(n)) for n in plan.tensors] + \
            [(results[i], output(i)) for i in plan.results if i != at and i not in kept]
        saved_lists = [(n, self.source(n)) for n in plan.tensor_lists] + \
            [(results[i], output(i)) for i in plan.results if i == at]
        attrs = CtxAttributes(plan, _counted(saved_lists),
                              [self.own.lens[a.name] for a in self.lists[:-1]],
                              [results[i] for i in kept])
        setup = _save_tensors(singles, saved_lists, attrs)
        setup += [f"ctx.{attrs.results[results[i]]} = {output(i)}" for i in kept]
        for a in self.lists[:-1]:
            setup.append(f"ctx.{attrs.lens[self.own.lens[a.name]]} = "
                         f"{self.input_count(a.name)}")
        setup += _save_context(plan, d, self.schema, self.source,
                               lambda i: f"*{output(i)}" if i == at else output(i), attrs)
        return singles, saved_lists, attrs, setup or ["pass"]

    def backward(self, op: Op, d: F.Derivatives, plan: F.Saved, refs: dict[F.OpRef, Op],
                 helpers: set[str], singles: list[tuple[str, str]],
                 saved_lists: list[tuple[str, str]], attrs: CtxAttributes) -> list[str]:
        """backward's body: what setup_context saved, back in locals, then the formulas."""
        args, lists, n_slots, own, r = self.args, self.lists, self.n_slots, self.own, self.r
        lens = own.lens
        body = _restore_saved(singles, saved_lists, attrs, own, r)
        if self.at is not None:
            # The gradients of the flat outputs, regrouped: the Tensor[] return's is a list.
            for i, g in enumerate(own.grads):
                value = self.flat_output(own.flat_grads, i)
                body.append(f"{g} = " + (f"{r.list}({value})" if i == self.at else value))
        if lists:
            # Counts of the Tensor[] inputs: the last one's is what remains of `needs`.
            for a in lists[:-1]:
                body.append(f"{lens[a.name]} = {own.ctx}.{attrs.lens[lens[a.name]]}")
            rest = " - ".join([f"{r.len}({own.needs}) - {n_slots}"]
                              + [lens[a.name] for a in lists[:-1]])
            body.append(f"{lens[lists[-1].name]} = {rest}")

        meta_only = {a for a, _ in plan.meta}
        emit_names = Names(inputs={a.name: a.name for a in args}, meta=meta_only,
                           grads=own.grads, results=own.results, ops=refs, ctx=own.ctx,
                           meta_attrs=attrs.meta)
        emitter = FormulaEmitter(op, emit_names, helpers, r)
        grad_vars = own.grad_vars
        for a in args:
            if a.name in grad_vars:
                # A Tensor[] input's gradient is a list of the same length.
                body.append(f"{grad_vars[a.name]} = "
                            + (f"[None] * {lens[a.name]}" if is_tensor_list(a.type) else "None"))
        _emit_formulas(body, d, self.schema, emitter, emit_names, grad_vars, self.needs,
                       own.taken, lens.__getitem__, r)
        returns = [grad_vars[a.name] if a.name in grad_vars and not is_tensor_list(a.type)
                   else "None" for a in args] + [f"*{grad_vars[a.name]}" for a in lists]
        ret = ", ".join(returns) + ("," if len(returns) == 1 else "")
        body.append(f"return {ret}")
        return body

    def kernel(self, op: Op, function: str) -> list[str]:
        """The Autograd kernel's body: the Function `function` when a gradient may be asked
        for, else the op below autograd."""
        args, lists, at, r = self.args, self.lists, self.at, self.r
        tensors = [a.name for a in args if is_tensor_like(a.type)]
        applied = [f"{r.len}({a.name})" if is_tensor_list(a.type) else a.name for a in args] + \
            [f"*{a.name}" for a in lists]
        applying = f"{r._apply}({function}, {', '.join(applied)})"
        if at is None:
            differentiating = [f"    return {applying}"]
        elif self.n_returns == 1:
            differentiating = [f"    return {r.list}({applying})"]
        else:
            outputs = self.own.outputs
            differentiating = [f"    {outputs} = {applying}",
                               f"    return (*{outputs}[:{at}], {r.list}("
                               f"{self.flat_output(outputs, at)}), "
                               + (f"*{outputs}[{r.len}({outputs}) - {self.tail}:])" if self.tail
                                  else ")")]
        return [
            f"if {r._differentiating}({', '.join(tensors)}):",
            *differentiating,
            f"with {r.torch}._C._AutoDispatchBelowAutograd():",
            f"    return {self.call(op)}",
        ]


def first_order_reason(m: ModuleScope, op: Op) -> str | None:
    """Why `op`'s backward cannot be differentiated again, or None when it can."""
    once = layout.first_order_only(m.lib, op)
    constants = layout.constant_reads(m.lib, op)
    if not once and not constants:
        return None
    m.helpers.add("first_order")
    if once:
        return (f"{qualname(op)}'s backward calls " + ", ".join(qualname(o) for o in once)
                + ", which has no derivatives; give it `derivatives:` in the op file to "
                "differentiate twice")
    read = sorted({i for _, i, _ in constants})
    return (f"{qualname(op)}'s backward reads "
            + ", ".join(F.output_words(op.schema.returns, i) for i in read)
            + ", which output_differentiability marks non-differentiable, as a constant; "
            "compute the gradient from differentiable outputs and inputs to differentiate twice")


def register_autograd(m: ModuleScope, op: Op, api: str, sec: Section, d: F.Derivatives,
                       refs: dict[F.OpRef, Op], plan: F.Saved) -> None:
    """torch.library.register_autograd, for ops whose Tensor lists cannot be passed flat."""
    schema = op.schema
    positional = schema.positional
    kw_only = bool(schema.kwarg_only)
    has_lists = any(isinstance(strip_optional(t), ListType) and is_tensor_like(t)
                    for t in [a.type for a in schema.arguments]
                    + [r.type for r in schema.returns])

    def source(a_name: str) -> str:
        arg = schema.argument(a_name)
        assert arg is not None
        if arg.kwarg_only:
            return f"keyword_only_inputs[{q(a_name)}]"
        return f"inputs[{positional.index(arg)}]"

    def output(i: int) -> str:
        return "output" if len(schema.returns) == 1 else f"output[{i}]"

    # Names of backward's own, and how it reaches the module's names and builtins.
    own = OwnNames(schema, positional, [])
    grads, results, r = own.grads, own.results, m.reach(op)

    # setup_context
    kept = _value_results(schema, plan)
    singles = [(n, source(n)) for n in plan.tensors] + \
        [(results[i], output(i)) for i in plan.results
         if not isinstance(strip_optional(schema.returns[i].type), ListType) and i not in kept]
    lists = [(n, source(n)) for n in plan.tensor_lists] + \
        [(results[i], output(i)) for i in plan.results
         if isinstance(strip_optional(schema.returns[i].type), ListType)]
    # Tensor[]? inputs and returns saved, which may be None (Note [None for a Tensor[]?]).
    optional = {n for n in plan.tensor_lists if _is_optional(schema.argument(n))} | \
        {results[i] for i in plan.results if _is_optional(schema.returns[i])
         and isinstance(strip_optional(schema.returns[i].type), ListType)}
    attrs = CtxAttributes(plan, _counted(lists, optional), [], [results[i] for i in kept])
    setup = (_save_tensors(singles, lists, attrs, optional)
             + [f"ctx.{attrs.results[results[i]]} = {output(i)}" for i in kept]
             + _save_context(plan, d, schema, source, output, attrs) or ["pass"])
    setup_params = "ctx, inputs, keyword_only_inputs, output" if kw_only \
        else "ctx, inputs, output"

    # backward
    body = _restore_saved(singles, lists, attrs, own, r, optional)
    meta_only = {a for a, _ in plan.meta}
    emit_names = Names(inputs={a.name: a.name for a in schema.arguments}, meta=meta_only,
                       grads=grads, results=results, ops=refs, ctx=own.ctx,
                       meta_attrs=attrs.meta)
    emitter = FormulaEmitter(op, emit_names, m.helpers, r)
    needs_ = own.needs

    def needs(a_name: str) -> str:
        arg = schema.argument(a_name)
        assert arg is not None
        i = positional.index(arg)
        is_list = isinstance(strip_optional(arg.type), ListType)
        if not is_list:
            test = f"{needs_}[{i}]"
        elif _is_optional(arg):
            test = f"{r.any}({needs_}[{i}] or ())"   # a bool, False, for None
        else:
            test = f"{r.any}({needs_}[{i}])"
        # The dispatcher leaves trailing arguments equal to their defaults out of the call.
        return f"{r.len}({needs_}) > {i} and {test}" if arg.default is not None else test

    grad_vars = own.grad_vars
    for a in positional:
        if a.name in grad_vars:
            if isinstance(strip_optional(a.type), ListType):
                # A Tensor[] input's gradient is a list of the same length; a Tensor[]?
                # passed as None gets None.
                i = positional.index(a)
                value = f"[None] * {r.len}({needs_}[{i}])"
                given = ([f"{r.len}({needs_}) > {i}"] if a.default is not None else []) + \
                    ([f"{needs_}[{i}] is not False"] if _is_optional(a) else [])
                if given:
                    value += f" if {' and '.join(given)} else None"
                body.append(f"{grad_vars[a.name]} = {value}")
            else:
                body.append(f"{grad_vars[a.name]} = None")
    _emit_formulas(body, d, schema, emitter, emit_names, grad_vars, needs, own.taken,
                   lambda n: f"{r.len}({needs_}[{positional.index(schema.argument(n))}])", r)
    returns = [grad_vars.get(a.name, "None") for a in positional]
    ret = ", ".join(returns) + ("," if len(returns) == 1 else "")
    if has_lists and any(a.default is not None for a in positional):
        body.append(f"return ({ret})[:{r.len}({needs_})]")
    else:
        body.append(f"return {ret}")

    setup_name = m.define(f"_{api}_setup_context")
    backward_name = m.define(f"_{api}_backward")
    sec.functions.append(Function(setup_name, setup_params, setup))
    sec.functions.append(Function(backward_name, f"{own.ctx}, " + ", ".join(grads), body,
                                  _formulas_doc(d)))
    backward = backward_name
    why = first_order_reason(m, op)
    if why:
        backward = f"_first_order({q(why)})({backward_name})"
    sec.registrations.append(f"torch.library.register_autograd({q(qualname(op))}, "
                             f"{backward}, setup_context={setup_name}, lib=_lib)")


class OwnNames:
    """The names the generated autograd functions give their own parameters and locals: each
    its usual one (`ctx`, `needs`, `x_grad`) unless an input of the op has it, then made fresh
    (`ctx_`). An input's name is part of the op's API and stays; the generated names move.
    `inputs`: those with a gradient local (`<input>_grad`); `lists`: the Tensor[] inputs, whose
    lengths have locals (`<input>_len`); `flat_outputs`: whether the outputs pass flat (with a
    Tensor[] among them)."""

    def __init__(self, schema: FunctionSchema, inputs: Sequence[Argument],
                 lists: list[Argument], flat_outputs: bool = False):
        self.taken = {a.name for a in schema.arguments}
        self.grads = _grad_names(schema)
        self.taken.update(self.grads)
        if len(schema.returns) == 1:
            self.results = [self.fresh("result")]
        else:
            self.results = [self.fresh(f"result_{r.name}" if r.name else f"result{i}")
                            for i, r in enumerate(schema.returns)]
        self.ctx = self.fresh("ctx")
        self.needs = self.fresh("needs")
        self.saved = self.fresh("saved")
        # Only the names a Function uses are given out: the others stay free for bindings.
        self.outputs = self.fresh("outputs") if flat_outputs else ""
        self.flat_grads = self.fresh("flat_grads") if flat_outputs else ""
        self.flat = self.fresh("flat") if len(lists) > 1 else ""
        self.grad_vars = {a.name: self.fresh(f"{a.name}_grad") for a in inputs
                          if is_tensor_like(a.type)}
        self.lens = {a.name: self.fresh(f"{a.name}_len") for a in lists}

    def fresh(self, base: str) -> str:
        name = reserved.fresh(base, self.taken)
        self.taken.add(name)
        return name


def _is_optional(a: Argument | Return | None) -> bool:
    assert a is not None
    return a.type != strip_optional(a.type)


def _save_tensors(singles: list[tuple[str, str]], lists: list[tuple[str, str]],
                  attrs: CtxAttributes, optional: Collection[str] = ()) -> list[str]:
    """setup_context lines saving Tensors (local, source) and Tensor lists; every list but the
    last records its length, so backward can split them again (`_restore_saved`).

    Note [None for a Tensor[]?]
    A `Tensor[]?` (the locals in `optional`) may be None, which torch.library's
    register_autograd passes as it is: setup_context saves no element for it and records its
    length as None, even when it is the last list, so that backward restores None and not [];
    its `needs_input_grad` entry is then the bool False, not a list, and its gradient None."""
    lines = []
    saved_args = [src for _, src in singles] + \
        [f"*({src} or ())" if local in optional else f"*{src}" for local, src in lists]
    if saved_args:
        lines.append(f"ctx.save_for_backward({', '.join(saved_args)})")
    for local, src in lists:
        if local in optional:
            lines.append(f"ctx.{attrs.counts[local]} = None if {src} is None else len({src})")
        elif local in attrs.counts:
            lines.append(f"ctx.{attrs.counts[local]} = len({src})")
    return lines


def _value_results(schema: FunctionSchema, plan: F.Saved) -> list[int]:
    """The outputs the formulas read that are not Tensors: kept on ctx, not saved."""
    return [i for i in plan.results if not is_tensor_like(schema.returns[i].type)]


def _counted(lists: list[tuple[str, str]], optional: Collection[str] = ()) -> list[str]:
    """The saved Tensor lists (locals) whose length setup_context records (`_save_tensors`)."""
    return [local for k, (local, _) in enumerate(lists)
            if local in optional or k < len(lists) - 1]


def _save_context(plan: F.Saved, d: F.Derivatives, schema: FunctionSchema,
                  source: Callable[[str], str], output: Callable[[int], str],
                  attrs: CtxAttributes) -> list[str]:
    """The rest of setup_context: metadata and non-Tensor values the formulas read, and the
    outputs marked non-differentiable."""
    lines = []
    for a_name, what in plan.meta:
        src = source(a_name)
        arg = schema.argument(a_name)
        assert arg is not None
        value = f"{src}.{what}"
        if arg.type != strip_optional(arg.type):
            value = f"None if {src} is None else {value}"
        lines.append(f"ctx.{attrs.meta[a_name, what]} = {value}")
    for a_name, attr in attrs.values.items():
        lines.append(f"ctx.{attr} = {source(a_name)}")
    non_diff = [i for i, flag in enumerate(d.output_differentiability)
                if not flag and is_tensor_like(schema.returns[i].type)]
    if non_diff:
        lines.append("ctx.mark_non_differentiable("
                     + ", ".join(output(i) for i in non_diff) + ")")
    return lines


class CtxAttributes:
    """The attributes setup_context keeps on ctx for backward, each named after what it holds,
    and all apart from each other and from autograd's own (`needs_input_grad`, `name`):
    `values`, each non-Tensor value the formulas read: its input's name, or `<name>_value` (made
    fresh) when ctx has an attribute of that name; then, made fresh against those, `meta`,
    (input, "shape" | "dtype" | "device") -> `<input>_<what>`; `lens`, the length of a Tensor[]
    input the outputs pass flat after (its local in backward) -> `<local>`; `counts`, the length
    of a saved Tensor list (its local) -> `<local>_count`. A value `x_shape` beside the shape of
    an input `x` keeps its name: the shape moves to `x_shape_`. `results`: each non-Tensor
    output the formulas read (its local in backward) -> `<local>`: save_for_backward takes
    Tensors only (xformers' `-> (..., SymInt max_seqlen_batch_q, ...)`)."""

    def __init__(self, plan: F.Saved, counted: Sequence[str], lens: Sequence[str],
                 results: Sequence[str] = ()):
        own = reserved.autograd_ctx_attributes()
        self.taken = set(own) | set(plan.values)
        self.values = {a: self.fresh(f"{a}_value") if a in own else a for a in plan.values}
        self.meta = {(a, what): self.fresh(f"{a}_{what}") for a, what in plan.meta}
        self.lens = {local: self.fresh(local) for local in lens}
        self.counts = {local: self.fresh(f"{local}_count") for local in counted}
        self.results = {local: self.fresh(local) for local in results}

    def fresh(self, base: str) -> str:
        name = reserved.fresh(base, self.taken)
        self.taken.add(name)
        return name


def _restore_saved(singles: list[tuple[str, str]], lists: list[tuple[str, str]],
                   attrs: CtxAttributes, own: OwnNames, r: Reach,
                   optional: Collection[str] = ()) -> list[str]:
    """The opening lines of backward: what `_save_tensors` and `_save_context` stored, back in
    locals, and `needs` (ctx.needs_input_grad). A Tensor[]? in `optional` comes back None
    where it was None (Note [None for a Tensor[]?])."""
    body = []
    ctx, saved = own.ctx, own.saved

    def restore(local: str, value: str) -> str:
        if local in optional:
            return (f"{local} = None if {ctx}.{attrs.counts[local]} is None "
                    f"else {r.list}({value})")
        return f"{local} = {r.list}({value})"

    if singles or lists:
        targets = [local for local, _ in singles]
        if not lists:
            body.append(f"{', '.join(targets)}{',' if len(targets) == 1 else ''} "
                        f"= {ctx}.saved_tensors")
        elif not targets and len(lists) == 1:
            body.append(restore(lists[0][0], f"{ctx}.saved_tensors"))
        else:
            body.append(f"{saved} = {ctx}.saved_tensors")
            for i, local in enumerate(targets):
                body.append(f"{local} = {saved}[{i}]")
            offset = str(len(targets))
            for local, _ in lists[:-1]:
                count = f"{ctx}.{attrs.counts[local]}"
                end = f"{offset} + " + (f"({count} or 0)" if local in optional else count)
                body.append(restore(local, f"{saved}[{offset}:{end}]"))
                offset = end
            body.append(restore(lists[-1][0], f"{saved}[{offset}:]"))
    for a_name, attr in attrs.values.items():
        body.append(f"{a_name} = {ctx}.{attr}")
    for local, attr in attrs.results.items():
        body.append(f"{local} = {ctx}.{attr}")
    body.append(f"{own.needs} = {ctx}.needs_input_grad")
    return body


def _grad_names(schema: FunctionSchema) -> list[str]:
    """Parameters of backward: one per output gradient, clear of the op's inputs (a backward
    op's own `grad` input keeps its name in the formulas, which say `grads[0]` for the output's
    gradient)."""
    inputs = {a.name for a in schema.arguments}
    if len(schema.returns) == 1:
        return [reserved.fresh("grad", inputs)]
    return [reserved.fresh(f"grad_{r.name}" if r.name else f"grad{i}", inputs)
            for i, r in enumerate(schema.returns)]


def _emit_formulas(body: list[str], d, schema, emitter, emit_names, grad_vars: dict[str, str],
                   needs, taken: set[str], list_len: Callable[[str], str], r: Reach) -> None:
    """Each formula under `if <its inputs need a gradient>:`, its bindings' locals chosen apart
    from everything the backward already holds. A Tensor[] input's gradient is checked to be a
    list of its length (`list_len(name)`), or None for none, with the C++ path's message: autograd's own ('returned
    an incorrect number of gradients (expected 5, got 4)') named neither the op nor the input,
    and a Tensor given for the list was unpacked into its rows."""
    emit_names.locals = _binding_locals(d, taken | set(body_locals(body)) | {
        a.name for a in schema.arguments})
    qual = str(schema.name)
    for f in d.formulas:
        targets = [grad_vars[n] for n in f.inputs]
        cond = " or ".join(needs(n) for n in f.inputs)
        body.append(f"if {cond}:")
        body.extend(f"    {line}" for line in emitter.formula(f, targets))
        for name in f.inputs:
            arg = schema.argument(name)
            if arg is None or not is_tensor_list(arg.type):
                continue
            g, count = grad_vars[name], list_len(name)
            # None (in a tuple formula) is no gradient for any element, as for a Tensor input.
            body.append(f"    if {g} is None:")
            body.append(f"        {g} = [None] * {count}")
            body.append(f"    elif {r.torch}.is_tensor({g}) or {r.len}({g}) != {count}:")
            body.append(f"        raise {r.RuntimeError}("
                        f"{q(f'{qual}: the formula for {name!r} gives ')} "
                        f"+ ('a Tensor, not a list,' if {r.torch}.is_tensor({g}) else "
                        f"f'{{{r.len}({g})}} gradients') + f' for {{{count}}} tensors')")


def _binding_locals(d: F.Derivatives, taken: set[str]) -> dict[str, str]:
    """The local each formula binding is written as: its own name unless backward already has
    that local, or it is a keyword or a name generated code reads (a local `any` would hide the
    builtin from the whole function); the checker keeps bindings clear of every name the formula
    language defines."""
    taken = taken | reserved.PY_BUILTINS | reserved.PY_KEYWORDS | reg_module_names()
    out: dict[str, str] = {}
    for f in d.formulas:
        for name, _ in f.bindings:
            if name not in out:
                out[name] = reserved.fresh(name, taken)
    return out


def body_locals(body: list[str]) -> list[str]:
    """Names assigned by the lines of a generated body so far (`a, b = ...`)."""
    out: list[str] = []
    for line in body:
        head, sep, _ = line.strip().partition(" = ")
        if sep:
            out.extend(t.strip() for t in head.split(","))
    return out


def _formulas_doc(d: F.Derivatives) -> str:
    lines = [f"{', '.join(f.inputs)}: {f.text}" for f in d.formulas]
    lines += [f"{n}: non_differentiable" for n in d.non_differentiable]
    return "\n".join(lines)
