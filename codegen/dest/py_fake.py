"""Fake kernels: from shape rules (`codegen.shape`), from the schema alone (in-place, out=,
`-> ()`), or Python functions, registered with `torch.library.register_fake`. Rules that
`codegen.dest.cpp_meta` translates are C++ Meta kernels instead, with no Python fake.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen import shape as S
from codegen.api import python as P
from codegen.dest import cpp_meta, cpp_stable
from codegen.dest.py_common import PLAIN, Function, Reach, Section, q, qualname
from codegen.expr import Prec, PyPrinter
from codegen.dest.py_sources import check_signature
from codegen.model import BaseTy, BaseType, DispatchKey, FunctionSchema, Op, PyRef

if TYPE_CHECKING:
    from codegen.dest.py_common import ModuleScope


def needs_fake(op: Op) -> bool:
    """Whether torch.compile/export need a fake kernel from us: the op has a kernel, and none that
    runs on fake tensors already (Meta, or a composite kernel, which decomposes or runs on Meta)."""
    keys = {k for k, _ in op.dispatch}
    if not keys:
        return False
    return not keys & {DispatchKey.Meta, DispatchKey.CompositeImplicitAutograd,
                       DispatchKey.CompositeExplicitAutograd}


def uses_cpp_meta(op: Op) -> bool:
    """Whether the op's fake kernel is a generated C++ Meta kernel (then Python registers none)."""
    if op.abi is not None:
        return cpp_stable.translate_meta(op) is not None
    return cpp_meta.translate(op)[0] is not None


# --------------------------------------------------------------------------------------------------
# Python expressions from the fake-rule IR


def _is_size(e: S.Expr) -> bool:
    """Whether `e` is a torch.Size in the fake: a tensor's shape, or a slice of one."""
    if isinstance(e, S.SliceOf):
        return _is_size(e.seq)
    return isinstance(e, S.TensorProp) and e.prop is S.Prop.shape


class FakeEmitter(PyPrinter):
    """Renders one fake rule as Python statements over the op's parameters."""

    def __init__(self, helpers: set[str], reach: Reach = PLAIN):
        self.helpers = helpers
        self.r = reach

    def _as_list(self, e: S.Expr) -> str:
        if isinstance(e, (S.ListLit, S.Concat, S.ListComp)):
            return self.expr(e, Prec.COMPARE + 1)
        return f"{self.r.list}({self.expr(e)})"

    def form(self, e: S.Expr) -> tuple[str, int]:  # type: ignore[override]
        match e:
            case S.Arg(name=n) | S.Given(arg=S.Arg(name=n)) | S.Local(name=n) | S.LoopVar(name=n):
                return n, Prec.ATOM
            case S.IntLit(value=v):
                return str(v), Prec.ATOM
            case S.FloatLit(value=v):
                return repr(v), Prec.ATOM
            case S.StrLit(value=v):
                return q(v), Prec.ATOM
            case S.BoolLit(value=v):
                return ("True" if v else "False"), Prec.ATOM
            case S.NoneLit():
                return "None", Prec.ATOM
            case S.DtypeLit(name=n):
                return f"{self.r.torch}.{n}", Prec.POSTFIX
            case S.TensorProp(tensor=t, prop=p):
                obj = self.expr(t, Prec.POSTFIX)
                if p in (S.Prop.ndim, S.Prop.numel):
                    return f"{obj}.{p.value}()", Prec.POSTFIX
                return f"{obj}.{p.value}", Prec.POSTFIX
            case S.ItemSize(dtype=d):
                return f"{self.expr(d, Prec.POSTFIX)}.itemsize", Prec.POSTFIX
            case S.TensorSize(tensor=t, dim=d):
                return f"{self.expr(t, Prec.POSTFIX)}.size({self.expr(d)})", Prec.POSTFIX
            case S.Item(seq=s, index=i):
                return f"{self.expr(s, Prec.POSTFIX)}[{self.expr(i)}]", Prec.POSTFIX
            case S.SliceOf(seq=s, lo=lo, hi=hi, step=st):
                lo_t = self.expr(lo) if lo is not None else ""
                hi_t = self.expr(hi) if hi is not None else ""
                st_t = f":{self.expr(st)}" if st is not None else ""
                return f"{self.expr(s, Prec.POSTFIX)}[{lo_t}:{hi_t}{st_t}]", Prec.POSTFIX
            case S.Len(seq=s):
                return f"{self.r.len}({self.expr(s)})", Prec.POSTFIX
            case S.Spread(seq=s):
                return f"*{self.expr(s, Prec.POSTFIX)}", Prec.ATOM
            case S.ListLit(items=items) | S.OutList(items=items):
                return "[" + ", ".join(self.expr(i) for i in items) + "]", Prec.ATOM
            case S.Range(count=c):
                return f"{self.r.range}({self.expr(c)})", Prec.POSTFIX
            case S.PromoteTypes(items=items):
                text = self.expr(items[-1])
                for item in reversed(items[:-1]):
                    text = f"{self.r.torch}.promote_types({self.expr(item)}, {text})"
                return text, Prec.POSTFIX
            case S.ListComp(elem=elem, names=names, seqs=seqs):
                seq = (self.expr(seqs[0]) if len(seqs) == 1
                       else f"{self.r.zip}({', '.join(self.expr(x) for x in seqs)})")
                return f"[{self.expr(elem)} for {', '.join(names)} in {seq}]", Prec.ATOM
            case S.Sum(seq=seq):
                return f"{self.r.sum}({self.expr(seq)})", Prec.POSTFIX
            case S.Compare(op=op, left=a, right=b) if a.ty == S.INT_LIST and not (
                    _is_size(a) and _is_size(b)):
                # A torch.Size never equals a list: such shapes compare as lists.
                return f"{self._as_list(a)} {op.value} {self._as_list(b)}", Prec.COMPARE
            case S.Compare(op=op, left=a, right=b):
                return self.binary(op.value, a, b)
            case S.Not(operand=o) if S.compares_sizes(o):
                return f"{self.r.torch}.sym_not({self.expr(o)})", Prec.POSTFIX
            case S.Not(operand=o):
                return self.unary("not", o)
            case S.BoolOp(op=op, left=a, right=b):
                # A SymBool on the left stays one: `&`/`|` evaluate both sides without bool().
                # Sizes known when traced compare to a plain bool, which decides alone as in
                # Python, so `n == 0 or k // n == 2` divides by no zero size.
                if S.compares_sizes(a):
                    joined, _ = self.binary("&" if op == "and" else "|", a, b)
                    decided = "False" if op == "and" else "True"
                    return (f"{decided} if {self.expr(a, Prec.COMPARE + 1)} is {decided} "
                            f"else {joined}"), Prec.COND
                return self.binary(op, a, b)
            case S.Cond(cond=c, then=a, orelse=b):
                return self.conditional(a, c, b)
            case S.Concat(left=a, right=b):
                return f"[*{self.expr(a, Prec.POSTFIX)}, *{self.expr(b, Prec.POSTFIX)}]", Prec.ATOM
            case S.Arith(op=op, left=a, right=b):
                return self.binary(op.value, a, b)
            case S.Neg(operand=o):
                return self.unary("-", o)
            case S.MinMax(fn=fn, items=items):
                # torch.sym_max/sym_min keep sizes symbolic; Python's max() would specialize.
                text = self.expr(items[-1])
                for item in reversed(items[:-1]):
                    text = f"{self.r.torch}.sym_{fn}({self.expr(item)}, {text})"
                return text, Prec.POSTFIX
            case S.Dynamic(min=lo, max=hi):
                kwargs = []
                if lo is not None:
                    kwargs.append(f"min={self.expr(lo)}")
                if hi is not None:
                    kwargs.append(f"max={self.expr(hi)}")
                return (f"{self.r.torch}.library.get_ctx().new_dynamic_size({', '.join(kwargs)})",
                        Prec.POSTFIX)
            case S.Fallback(value=v, default=d):
                value = self.expr(v, Prec.ADD)
                return f"{value} if {value} is not None else {self.expr(d, Prec.ADD)}", Prec.COND
            case S.Like(tensor=t, dtype=dt, device=dv):
                obj = self.expr(t, Prec.POSTFIX)
                return (f"{obj}.new_empty({obj}.shape{self._options(dt, dv)})", Prec.POSTFIX)
            case S.Broadcast(operands=ops, dtype=dt):
                self.helpers.add("broadcast")
                args = ", ".join(self.expr(o) for o in ops)
                return f"{self.r._broadcast}({args}{self._options(dt, None)})", Prec.POSTFIX
            case S.Reduce(tensor=t, dims=dims, keepdim=k, dtype=dt):
                self.helpers.add("reduce")
                return (f"{self.r._reduce}({self.expr(t)}, {self.expr(dims)}, {self.expr(k)}"
                        f"{self._options(dt, None)})", Prec.POSTFIX)
            case S.Empty(shape=shape, dtype=dt, device=dv, like=like, stride=None):
                # `x.new_empty` takes dtype/device from `x` when they are None; `torch.empty`
                # takes torch's defaults: exactly the rule's defaults.
                func = f"{like}.new_empty" if like is not None else f"{self.r.torch}.empty"
                return f"{func}({self.expr(shape)}{self._options(dt, dv)})", Prec.POSTFIX
            case S.Empty(shape=shape, dtype=dt, device=dv, like=like, stride=stride):
                func = f"{like}.new_empty_strided" if like is not None else \
                    f"{self.r.torch}.empty_strided"
                return (f"{func}({self.expr(shape)}, {self.expr(stride)}{self._options(dt, dv)})",
                        Prec.POSTFIX)
        raise TypeError(f"not a fake-rule node: {e!r}")

    def _options(self, dtype: S.Expr | None, device: S.Expr | None) -> str:
        out = ""
        if dtype is not None:
            out += f", dtype={self.expr(dtype)}"
        if device is not None:
            out += f", device={self.expr(device)}"
        return out

    def check(self, c: S.Check) -> str:
        # The message is built only when the check fails.
        return f"{self.r.torch}._check({self.expr(c.cond)}, lambda: {q(c.message)})"

    def output(self, o: S.Output) -> str:
        if not isinstance(o, S.ReturnArg):
            return self.expr(o)
        if o.otherwise is None:
            return o.name
        # A returned optional argument: a new tensor when it is None, as the kernel returns.
        return f"{o.name} if {o.name} is not None else {self.expr(o.otherwise, Prec.COND)}"

    def body(self, rule: S.FakeRule, schema: FunctionSchema) -> list[str]:
        lines = [self.check(s) if isinstance(s, S.Check) else f"{s.name} = {self.expr(s.value)}"
                 for s in rule.steps()]
        for o in rule.outputs:
            if isinstance(o, S.ReturnArg) and o.resize is not None:
                # As an out= kernel resizes its out argument (a no-op when the shape matches).
                lines.append(f"{o.name}.resize_({self.expr(o.resize, Prec.POSTFIX)}.shape)")
        outs = [self.output(o) for o in rule.outputs]
        if not schema.returns:
            lines.append("return None")
        elif len(schema.returns) == 1:
            lines.append(f"return {outs[0]}")
        else:
            lines.append(f"return {', '.join(outs)}")
        return lines


def fake(m: ModuleScope, op: Op, api: str, sec: Section) -> None:
    fake = S.fake_of(op)
    if fake is None:
        if needs_fake(op) and op.fake is None:
            tensors = [a.name for a in op.schema.arguments if a.type == BaseType(BaseTy.Tensor)]
            rule = f"like({tensors[0]})" if tensors else "empty([...], dtype=...)"
            # torch registers it, and eager calls run: torch-harmonics' split_csr_rows, a
            # setup-time op returning ints computed from its inputs, is never traced.
            m.diags.warning(op.loc, f"{op.name} has no fake kernel, so torch.compile and "
                               "torch.export cannot trace it",
                               f"add a shape rule such as `fake: {rule}` (docs/FORMAT.md, "
                               "`fake`), or `fake: package.module:function`; for an op that "
                               "is never traced, `suppress: [no-fake]`",
                               name="no-fake", suppress=op.suppress)
        return
    if isinstance(fake, PyRef):
        check_signature(fake, op.schema, m.diags, "fake kernel",
                        sources=m.sources)
        sec.registrations.append(f"torch.library.register_fake({q(qualname(op))}, "
                                 f"{m.ref_expr(fake)}, lib=_lib)")
        return
    name = m.define(f"_{api}_fake")
    # The rule's bindings are locals too (`range = ...` would hide the builtin).
    reach = m.reach(op, *(b.name for b in fake.bindings))
    body = FakeEmitter(m.helpers, reach).body(fake, op.schema)
    doc = f"fake: {fake.text}" if fake.text else _schema_fake_doc(op.schema)
    sec.functions.append(Function(name, ", ".join(P.parameters(op.schema)), body, doc))
    register = f"torch.library.register_fake({q(qualname(op))}, {name}, lib=_lib)"
    if uses_cpp_meta(op):
        # The built library has this rule as a C++ Meta kernel (codegen.dest.cpp_meta), which
        # FakeTensor runs only when no Python fake exists: register this one only where the
        # ops are defined without it (runtime.testing.load_python_library).
        sec.registrations.append(f"if not torch._C._dispatch_has_kernel_for_dispatch_key("
                                 f"{q(qualname(op))}, \"Meta\"):")
        register = "    " + register
    sec.registrations.append(register)


def _schema_fake_doc(schema: FunctionSchema) -> str:
    if not schema.returns:
        return "Returns nothing (from the schema)."
    return "Returns the mutated arguments (from the schema)."
