"""Fake rules (`codegen.shape`) -> C++ Meta kernels, in the op's registration shard.

FakeTensor (torch.compile, torch.export) runs an op's Python fake impl when one is registered, else
its Meta kernel. Registering a Python fake costs ~1 ms per op at `import runtime`; a Meta kernel
compiled into the library costs nothing at import. So every rule this module can translate becomes
a `TORCH_LIBRARY_IMPL(ns, Meta, m)` kernel in `register_<shard>.cpp`, and `codegen.dest.py_reg`
registers no Python fake for that op (`translate(op) is not None`): never both.

The choice is made per op, at generation time. A rule becomes C++ when it is made of:
- outputs `like(t, dtype=)`, `broadcast(..., dtype=)`, `reduce(t, dims, keepdim, dtype=)`,
  `empty(shape, dtype=)` of an op with a Tensor argument, nested (`reduce(broadcast(a, b), None)`),
  and `a if cond else b` over conditions on bool/str/int/dtype arguments and None tests;
- `a if cond else b` between sizes or shapes, on those same conditions (PyG's
  `min(M + k, N) if k < 0 else min(M, N - k)`, `out.shape if out is not None else [...]`): a C++
  conditional of `c10::SymInt`, `std::vector<c10::SymInt>`, or `int64_t` where both branches are
  fixed at trace time; only the chosen branch is evaluated, and no size is specialized (a
  condition comparing sizes keeps the Python fake);
- optional `Tensor`, `int`, `SymInt` and `int[]` arguments where a None test tells they are
  given (`like(out) if out is not None else ...`), dereferenced there, and the `len()` of any
  optional list there;
- sizes from int literals, `int`/`SymInt` arguments, `t.size(d)`, `t.shape[d]`, `t.numel()`,
  `t.dim()`, `len(...)`, a dtype's `.itemsize` (`c10::elementSize`), `+`, `-`, `*`, unary `-`,
  `max`, `min`, and `//` and `%` with Python's semantics (`meta_floordiv`, `meta_mod`: known
  values floored, the remainder with the divisor's sign; a symbolic operand goes to
  c10::SymInt's `/` and `%`, whose SymNode methods are Python's FloorDiv and PythonMod; by zero
  a TORCH_CHECK naming the op and the expression, where the Python fake raises
  ZeroDivisionError); dims and slice bounds may use `int` arguments; shapes from list literals with
  `*` spreads, `t.shape`, int-list arguments, slices with static bounds, and `+` concatenation;
- dtypes from literals, `ScalarType` arguments, `t.dtype`, `x or y` and `promote_types(...)`
  (`c10::promoteTypes`);
- no rule at all for an op that returns nothing or only the arguments it mutates (in-place,
  out=): its Meta kernel returns them, an out= argument resized first to its rule item's shape;
- `check(...)` preconditions: `TORCH_SYM_CHECK` on comparisons of sizes and shapes (asserted,
  never specialized), `TORCH_CHECK` on conditions fixed at trace time;
- bindings `name = expr;` of sizes and shapes: const locals in the rule's order among the
  checks, `int64_t` where the value is fixed at trace time (PyG's `d = dim % src.dim()`, usable
  as a dim), else `c10::SymInt` or `std::vector<c10::SymInt>`; each named by
  `reserved.cpp_identifier` apart from the parameters, the helpers, `at`, `c10` and `std`; one
  that nothing reads is still evaluated (`[[maybe_unused]]`), as the Python fake evaluates it.
Everything else keeps its Python fake kernel, exactly as before:
- `dynamic()` sizes (they need `torch.library.get_ctx()`), Python functions (`fake: pkg.mod:fn`);
- device comparisons (`check(a.device == b.device)`): while a Meta kernel runs, FakeTensor shows
  every tensor on `meta`, so only a Python fake sees the devices it compares;
- `device=` (FakeTensor places a Meta kernel's output on the inputs' common device or the call's
  `device` keyword, not on a positional Device argument) and factory ops (no Tensor argument);
- list comprehensions, slices with a step, `Tensor[]` returns,
  `sum`, bindings of other values (dtypes), `tensors[i]`, int returns, a mix of new and mutated-argument returns, ops
  with a Meta or CompositeImplicitAutograd kernel of their own.

Sizes are `c10::SymInt` throughout (`sym_sizes()`, `sym_size(d)`, `at::empty_symint`,
`at::infer_size_symint`), so a Meta kernel never specializes a dynamic shape; dtypes follow
c10's `ResultTypeState`, the promotion `torch.add` uses, with number arguments as Python scalars.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from codegen import enums
from codegen import shape as S
from codegen.api import cpp
from codegen import layout as L
from codegen import reserved
from codegen.diagnostics import Diagnostics
from codegen.model import (BaseTy, BaseType, DispatchKey, Op, OptionalType, is_base,
                           strip_optional)

# torch dtype names (codegen.shape.DTYPES values) -> c10 ScalarType enumerators.
SCALAR_TYPES: dict[str, str] = {n: enums.C10_SCALAR_TYPES[n] for n in enums.TENSOR_DTYPES}

# C++ helpers (in cpp_meta.cpp.j2) and the helpers each one calls.
HELPERS: dict[str, tuple[str, ...]] = {
    "like": (), "empty": (), "empty_strided": (), "broadcast": (), "reduce": (), "cat": (),
    "slice": (), "at": (), "bool_at": (), "opt": (), "dims": (), "same": (), "floordiv_int": (),
    "mod_int": (),
    "floordiv": ("floordiv_int",), "mod": ("mod_int",), "or": (), "and": (),
}


def where(op: Op, rule: S.FakeRule | None, e: S.Expr) -> str:
    """The op and `e` as written in its rule, two C++ string literals: what a helper that can
    fail (`//` by zero) names in its message, on either ABI."""
    assert rule is not None
    span = rule.span_of(e)
    text = rule.text[span.start:span.end] if span is not None else rule.text
    return (f"{cpp.string_literal(str(op.schema.name))}, "
            f"{cpp.string_literal(' '.join(text.split()))}")


class NoCpp(Exception):
    """The rule uses something this translation leaves to Python."""


@dataclass(frozen=True)
class MetaKernel:
    op: str                         # `name.overload`, as m.impl takes it
    schema: str
    rule: str
    function: str                   # the C++ function's name
    decl: str                       # `R function(params)`, unused parameters unnamed
    body: tuple[str, ...]           # statements


def _has_own_fake(op: Op) -> bool:
    keys = {k for k, _ in op.dispatch}
    return not keys or bool(keys & {DispatchKey.Meta, DispatchKey.CompositeImplicitAutograd})


@L.per_object
def translate(op: Op) -> tuple[MetaKernel | None, frozenset[str]]:
    """The op's Meta kernel and the helpers it uses, or (None, ...) when its fake stays Python.
    Cached: four generators ask for each op's."""
    kernel, helpers = _translate(op)
    return kernel, frozenset(helpers)


def _translate(op: Op) -> tuple[MetaKernel | None, set[str]]:
    if op.abi is not None:
        return None, set()      # stable ABI: codegen.dest.cpp_stable.translate_meta
    # An op returning nothing or only what it mutates has its fake from the schema.
    rule = op.fake if isinstance(op.fake, S.FakeRule) else (
        S.schema_fake(op.schema) if op.fake is None else None)
    if rule is None or _has_own_fake(op):
        return None, set()
    sig = L.cached_signature(op.schema)
    if isinstance(sig, cpp.Unsupported):
        return None, set()
    try:
        return _Emitter(op, sig).kernel(rule)
    except NoCpp:
        return None, set()


class _Emitter:
    def __init__(self, op: Op, sig: cpp.CppSignature):
        self.op = op
        self.rule: S.FakeRule | None = None
        self.sig = sig
        self.args = {b.argument.name: b for b in sig.arguments}
        self.used: set[str] = set()
        self.helpers: set[str] = set()
        # Bindings: the C++ local of each, and what it holds ("static", "size" or "shape").
        self.locals: dict[str, tuple[str, str]] = {}

    def kernel(self, rule: S.FakeRule) -> tuple[MetaKernel, set[str]]:
        self.rule = rule
        if rule.uses_dynamic:
            raise NoCpp("dynamic sizes")
        returns = self.op.schema.returns
        mutated = S.mutated_returns(self.op.schema)
        # A binding's local may not hide a parameter, a helper or a namespace the body names.
        taken = {b.name for b in self.sig.arguments} | {f"meta_{h}" for h in HELPERS} | {
            "at", "c10", "std"}
        # Every binding is evaluated, as in the Python fake (`//` by zero fails there too).
        read = {n.name for n in rule.nodes() if isinstance(n, S.Local)}
        checks = [self.check(s) if isinstance(s, S.Check) else
                  ("" if s.name in read else "[[maybe_unused]] ") + self.binding(s, taken)
                  for s in rule.steps()]
        resizes: list[str] = []
        outs: list[str] = []
        returns_arguments = all(isinstance(m, str) for m in mutated)
        if returns_arguments:
            if any(not is_base(r.type, BaseTy.Tensor) for r in returns):
                raise NoCpp("a mutated return that is not a Tensor")
            # In-place and out= ops return their arguments, `-> ()` nothing; an out= argument
            # with a rule item is resized to that item's shape first, as its kernel does.
            for o in rule.outputs:
                assert isinstance(o, S.ReturnArg)
                if o.otherwise is not None:
                    raise NoCpp("a returned optional argument")
                name = self.arg(S.Arg(o.name, S.TENSOR))[0]
                if o.resize is not None:
                    shape = f"{self.tensor(o.resize)}.sym_sizes()"
                    resizes.append(f"{name}.resize__symint({shape});")
            outs = [self.arg(S.Arg(m, S.TENSOR))[0] for m in mutated]  # type: ignore[arg-type]
        else:
            if len(rule.outputs) != len(returns):
                raise NoCpp("returns")
            for r in returns:
                if r.type != BaseType(BaseTy.Tensor) or r.annotation is not None:
                    raise NoCpp("a return that is not a new Tensor")
            for o in rule.outputs:
                if isinstance(o, S.ReturnArg):
                    raise NoCpp("mutated-argument return")
                outs.append(self.tensor(o))
        if not outs:
            body = (*checks, *resizes)
        elif len(outs) == 1:
            body = (*checks, *resizes, f"return {outs[0]};")
        elif returns_arguments:
            body = (*checks, *resizes, f"return std::tie({', '.join(outs)});")
        else:
            body = (*checks, f"return {{{', '.join(outs)}}};")
        params = ", ".join(f"{b.type.cpp()} {b.name}" if b.argument.name in self.used
                           else f"{b.type.cpp()} /*{b.name}*/" for b in self.sig.arguments)
        fn = "meta_" + L.impl_name(self.op).replace(".", "_")
        decl = f"{self.sig.returns.cpp()} {fn}({params})"
        return MetaKernel(L.impl_name(self.op), str(self.op.schema), rule.text or "(schema)",
                          fn, decl, body), self.helpers

    def binding(self, b: S.Binding, taken: set[str]) -> str:
        """`name = value;` as a const local: an `int64_t` when the value is fixed at trace time
        (`d = dim % src.dim()`), a `c10::SymInt` for other sizes, a vector for shapes."""
        name = reserved.fresh(reserved.cpp_identifier(b.name), taken)
        taken.add(name)
        v = b.value
        if v.ty == S.INT and (fixed := self.try_static(v, True)) is not None:
            decl, kind = f"const int64_t {name} = {fixed};", "static"
        elif v.ty == S.INT:
            decl, kind = f"const c10::SymInt {name} = {self.size(v)};", "size"
        elif v.ty == S.INT_LIST:
            decl = (f"const std::vector<c10::SymInt> {name} = "
                    f"c10::SymIntArrayRef({self.shape(v)}).vec();")
            kind = "shape"
        else:
            raise NoCpp(f"a binding of {v.ty}")
        self.locals[b.name] = (name, kind)
        return decl

    def local(self, e: S.Local, kind: str) -> str:
        name, k = self.locals[e.name]
        if k != kind:
            raise NoCpp(f"a {k} binding as a {kind}")
        return name

    # -- values

    def arg(self, a: S.Arg) -> tuple[str, object]:
        b = self.args.get(a.name)
        if b is None:
            raise NoCpp("unknown argument")
        self.used.add(a.name)
        return b.name, b.argument.type

    def tensor(self, e: S.Expr) -> str:
        """An `at::Tensor` expression."""
        match e:
            case S.Arg(ty=ty) if ty == S.TENSOR:
                return self.arg(e)[0]
            case S.Given(arg=a) if e.ty == S.TENSOR:
                return f"(*{self.arg(a)[0]})"    # a condition around it tested has_value()
            case S.Like(tensor=t, dtype=dt, device=None):
                self.helpers.add("like")
                return f"meta_like({self.tensor(t)}, {self.dtype(dt)})"
            case S.Empty(shape=shape, dtype=dt, device=None, like=like, stride=None) \
                    if like is not None:
                self.helpers.add("empty")
                return (f"meta_empty({self.shape(shape)}, {self.tensor(S.Arg(like, S.TENSOR))}, "
                        f"{self.dtype(dt)})")
            case S.Empty(shape=shape, dtype=dt, device=None, like=like, stride=stride) \
                    if like is not None:
                self.helpers.add("empty_strided")
                return (f"meta_empty_strided({self.shape(shape)}, {self.shape(stride)}, "
                        f"{self.tensor(S.Arg(like, S.TENSOR))}, {self.dtype(dt)})")
            case S.Broadcast(operands=ops, dtype=dt):
                self.helpers.add("broadcast")
                groups, scalars = [], []
                for o in ops:
                    groups_or_scalar = self.operand(o)
                    (groups if groups_or_scalar[0] else scalars).append(groups_or_scalar[1])
                return (f"meta_broadcast({{{', '.join(groups)}}}, {{{', '.join(scalars)}}}, "
                        f"{self.dtype(dt)})")
            case S.Reduce(tensor=t, dims=dims, keepdim=k, dtype=dt):
                self.helpers.add("reduce")
                return (f"meta_reduce({self.tensor(t)}, {self.dims(dims)}, {self.cond(k)}, "
                        f"{self.dtype(dt)})")
            case S.Cond(cond=c, then=a, orelse=b):
                return f"({self.cond(c)} ? {self.tensor(a)} : {self.tensor(b)})"
        raise NoCpp(f"tensor {type(e).__name__}")

    def check(self, c: S.Check) -> str:
        """`check(cond, msg)`: TORCH_SYM_CHECK over sizes (it asserts without specializing
        them), TORCH_CHECK over what is fixed at trace time."""
        sym = self.sym_cond(c.cond)
        if sym is not None:
            return f"TORCH_SYM_CHECK({sym}, {cpp.string_literal(c.message)});"
        return f"TORCH_CHECK({self.cond(c.cond)}, {cpp.string_literal(c.message)});"

    def sym_cond(self, e: S.Expr) -> str | None:
        """A `c10::SymBool` for a condition on sizes or shapes, or None for other conditions."""
        match e:
            case S.Not(operand=o):
                inner = self.sym_cond(o)
                return None if inner is None else f"{inner}.sym_not()"
            case S.BoolOp(op=op, left=a, right=b):
                left, right = self.sym_cond(a), self.sym_cond(b)
                if left is None and right is None:
                    return None
                if left is None:
                    # A fixed left side decides first, as Python's `and`/`or` do.
                    return (f"({self.cond(a)} ? {right} : c10::SymBool(false))" if op == "and"
                            else f"({self.cond(a)} ? c10::SymBool(true) : {right})")
                if right is None:
                    right = f"c10::SymBool({self.cond(b)})"
                self.helpers.add(op)
                return f"meta_{op}({left}, [&] {{ return {right}; }})"
            case S.Compare(op=op, left=a, right=b) if a.ty == S.INT and b.ty == S.INT:
                return f"{self.size(a)}.sym_{op.name}({self.size(b)})"
            case S.Compare(op=S.CompareOp.eq | S.CompareOp.ne as op, left=a, right=b) \
                    if a.ty == S.INT_LIST:
                self.helpers.add("same")
                same = (f"meta_same(c10::SymIntArrayRef({self.shape(a)}), "
                        f"c10::SymIntArrayRef({self.shape(b)}))")
                return same if op is S.CompareOp.eq else f"{same}.sym_not()"
        return None

    def operand(self, e: S.Expr) -> tuple[bool, str]:
        """A broadcast operand: (True, an `at::TensorList`) or (False, an `at::Scalar`)."""
        match e:
            case S.Spread(seq=S.Arg(ty=ty) as a) if ty == S.Ty(S.T.TENSOR_LIST):
                return True, self.arg(a)[0]
            case S.Arg(ty=ty) if ty == S.Ty(S.T.TENSOR, True):
                self.helpers.add("opt")
                return True, f"meta_opt({self.arg(e)[0]})"
            case S.Arg(ty=ty) if ty.base in (S.T.INT, S.T.BOOL, S.T.SCALAR) and not ty.optional:
                return False, f"at::Scalar({self.arg(e)[0]})"
            case S.FloatLit(value=v):
                if not math.isfinite(v):
                    raise NoCpp("a non-finite literal")
                return False, f"at::Scalar({float(v)!r})"
            case S.IntLit(value=v):
                return False, f"at::Scalar(int64_t{{{v}}})"
            case S.BoolLit(value=v):
                return False, f"at::Scalar({'true' if v else 'false'})"
        if e.ty == S.OUT or e.ty == S.TENSOR:
            return True, f"at::TensorList({self.tensor(e)})"
        raise NoCpp(f"broadcast operand {type(e).__name__}")

    def dtype(self, e: S.Expr | None) -> str:
        """An `at::ScalarType` or `std::optional<at::ScalarType>` (None: the default)."""
        match e:
            case None | S.NoneLit():
                return "std::nullopt"
            case S.DtypeLit(name=n):
                return f"at::ScalarType::{SCALAR_TYPES[n]}"
            case S.Arg(ty=ty) if ty.base is S.T.DTYPE:
                return self.arg(e)[0]
            case S.Given(arg=a) if e.ty.base is S.T.DTYPE:
                return f"(*{self.arg(a)[0]})"
            case S.TensorProp(tensor=t, prop=S.Prop.dtype):
                return f"{self.tensor(t)}.scalar_type()"
            case S.Fallback(value=v, default=d):
                return f"{self.dtype(v)}.value_or({self.dtype(d)})" \
                    if isinstance(v, S.Arg) and v.ty.optional else self.dtype(v)
            case S.PromoteTypes(items=items):
                text = self.dtype(items[0])
                for item in items[1:]:
                    text = f"c10::promoteTypes({text}, {self.dtype(item)})"
                return text
        raise NoCpp(f"dtype {type(e).__name__}")

    def dims(self, e: S.Expr) -> str:
        """An `at::OptionalIntArrayRef` (nullopt or empty: every dimension)."""
        match e:
            case S.NoneLit():
                return "std::nullopt"
            case S.ListLit(items=items) if all(isinstance(i, S.IntLit) for i in items):
                return f"at::IntArrayRef({{{', '.join(str(i.value) for i in items)}}})" \
                    if items else "at::IntArrayRef()"
            case S.IntLit(value=v):
                return f"at::IntArrayRef({{{v}}})"
            case S.Arg():
                name, ty = self.arg(e)
                base = strip_optional(ty)
                if base == BaseType(BaseTy.int):
                    if isinstance(ty, OptionalType):
                        self.helpers.add("dims")
                        return f"meta_dims({name})"
                    return f"at::IntArrayRef({name})"
                if cpp.argumenttype_type(ty, mutable=False).cpp() in (
                        "at::IntArrayRef", "at::OptionalIntArrayRef"):
                    return name
        raise NoCpp(f"dims {type(e).__name__}")

    def cond(self, e: S.Expr) -> str:
        match e:
            case S.BoolLit(value=v):
                return "true" if v else "false"
            case S.Arg(ty=ty) if ty == S.Ty(S.T.BOOL):
                return self.arg(e)[0]
            case S.Given(arg=a) if e.ty == S.Ty(S.T.BOOL):
                return f"(*{self.arg(a)[0]})"
            case S.Item(seq=s, index=i) if e.ty == S.Ty(S.T.BOOL):
                return self.bool_item(s, i)
            case S.Not(operand=o):
                return f"!({self.cond(o)})"
            case S.BoolOp(op=op, left=a, right=b):
                return f"({self.cond(a)} {'&&' if op == 'and' else '||'} {self.cond(b)})"
            case S.Compare(op=S.CompareOp.is_ | S.CompareOp.is_not as op, left=S.Arg() as a,
                           right=S.NoneLit()):
                return ("!" if op is S.CompareOp.is_ else "") + f"{self.arg(a)[0]}.has_value()"
            case S.Compare(left=a) if a.ty.base is S.T.DEVICE:
                raise NoCpp("a device comparison")
            case S.Compare(op=S.CompareOp.eq | S.CompareOp.ne as op, left=a, right=b) \
                    if a.ty.base is S.T.DTYPE and b.ty.base is S.T.DTYPE:
                return f"({self.dtype(a)} {op.value} {self.dtype(b)})"
            case S.Compare(op=S.CompareOp.eq | S.CompareOp.ne as op, left=a, right=b):
                return f"({self.value(a)} {op.value} {self.value(b)})"
            case S.Compare(op=S.CompareOp.lt | S.CompareOp.le | S.CompareOp.gt
                           | S.CompareOp.ge as op, left=a, right=b):
                return f"({self.value(a)} {op.value} {self.value(b)})"
        raise NoCpp(f"condition {type(e).__name__}")

    def value(self, e: S.Expr) -> str:
        """A side of `==`: a str, bool, int or dtype argument or literal."""
        match e:
            case S.StrLit(value=v):
                return cpp.string_literal(v)
            case S.IntLit(value=v):
                return f"int64_t{{{v}}}"
            case S.FloatLit(value=v) if math.isfinite(v):
                return f"double{{{float(v)!r}}}"
            case S.BoolLit(value=v):
                return "true" if v else "false"
            case S.DtypeLit():
                return self.dtype(e)
            case S.ItemSize() | S.TensorProp(prop=S.Prop.ndim) | S.Len():
                return self.static(e)
            case S.Item(seq=s, index=i) if e.ty == S.Ty(S.T.BOOL):
                return self.bool_item(s, i)
            case S.Local():
                return self.local(e, "static")
            case S.Arg() | S.Given():
                name, ty = self.arg(e if isinstance(e, S.Arg) else e.arg)
                if strip_optional(ty) in (BaseType(BaseTy.str), BaseType(BaseTy.int),
                                          BaseType(BaseTy.bool), BaseType(BaseTy.ScalarType),
                                          BaseType(BaseTy.float)):
                    return name if isinstance(e, S.Arg) else f"(*{name})"
                if strip_optional(ty) == BaseType(BaseTy.Scalar):
                    # compared with a number only (shape.float_value): as a double, as Python's
                    # `==` compares an int, a float or a bool with a float
                    return f"{name}.toDouble()" if isinstance(e, S.Arg) else \
                        f"{name}->toDouble()"
        raise NoCpp(f"compared value {type(e).__name__}")

    def bool_item(self, seq: S.Expr, index: S.Expr) -> str:
        """`flags[i]` of a `bool[]` argument (a `c10::List<bool>`), indexed as Python does."""
        self.helpers.add("bool_at")
        name = self.arg(seq)[0] if isinstance(seq, S.Arg) else f"(*{self.arg(seq.arg)[0]})"
        return f"meta_bool_at({name}, {self.static(index, True)})"

    # -- sizes

    def static(self, e: S.Expr, args: bool = False) -> str:
        """An `int64_t` fixed when the op is traced: literals, `t.dim()`, `len(...)`, and with
        `args` the op's `int` (not `SymInt`) arguments: what indexes a shape (`t.size(d)`,
        `t.shape[:d]`)."""
        match e:
            case S.IntLit(value=v):
                return str(v) if -2 ** 31 < v < 2 ** 31 else f"int64_t{{{v}}}"
            case S.Arg(ty=ty) if args and ty == S.INT:
                name, t = self.arg(e)
                if t == BaseType(BaseTy.int):
                    return name
            case S.Given(arg=a) if args and e.ty == S.INT:
                name, t = self.arg(a)
                if strip_optional(t) == BaseType(BaseTy.int):
                    return f"(*{name})"
            case S.Local():
                return self.local(e, "static")
            case S.TensorProp(tensor=t, prop=S.Prop.ndim):
                return f"{self.tensor(t)}.dim()"
            case S.ItemSize(dtype=S.Given(arg=a)):
                return f"static_cast<int64_t>(c10::elementSize(*{self.arg(a)[0]}))"
            case S.ItemSize(dtype=d):
                return f"static_cast<int64_t>(c10::elementSize({self.dtype(d)}))"
            case S.Len(seq=s):
                if s.ty == S.INT_LIST:
                    return f"static_cast<int64_t>({self.shape(s)}.size())"
                if isinstance(s, S.Arg):
                    return f"static_cast<int64_t>({self.arg(s)[0]}.size())"
                if isinstance(s, S.Given):
                    return f"static_cast<int64_t>({self.arg(s.arg)[0]}->size())"
            case S.Arith(op=S.ArithOp.add | S.ArithOp.sub | S.ArithOp.mul as op, left=a, right=b):
                return f"({self.static(a, args)} {op.value} {self.static(b, args)})"
            case S.Arith(op=S.ArithOp.floordiv | S.ArithOp.mod as op, left=a, right=b):
                helper = f"{op.name}_int"
                self.helpers.add(helper)
                return (f"meta_{helper}({self.static(a, args)}, {self.static(b, args)}, "
                        f"{where(self.op, self.rule, e)})")
            case S.Neg(operand=o):
                return f"(-{self.static(o, args)})"
            case S.Cond(cond=c, then=a, orelse=b):
                return f"({self.cond(c)} ? {self.static(a, args)} : {self.static(b, args)})"
        raise NoCpp(f"static int {type(e).__name__}")

    def try_static(self, e: S.Expr, args: bool = False) -> str | None:
        """`static(e, args)`, or None where `e` is not fixed at trace time."""
        used, helpers = set(self.used), set(self.helpers)
        try:
            return self.static(e, args)
        except NoCpp:
            # What the failed attempt marked would leave unused parameters and helpers.
            self.used, self.helpers = used, helpers
            return None

    def size(self, e: S.Expr) -> str:
        """A `c10::SymInt`."""
        if (fixed := self.try_static(e)) is not None:
            return f"c10::SymInt({fixed})"
        match e:
            case S.Arg(ty=ty) if ty == S.INT:
                name, t = self.arg(e)
                return name if t == BaseType(BaseTy.SymInt) else f"c10::SymInt({name})"
            case S.Given(arg=a) if e.ty == S.INT:
                name, t = self.arg(a)
                return f"(*{name})" if strip_optional(t) == BaseType(BaseTy.SymInt) \
                    else f"c10::SymInt(*{name})"
            case S.Local():
                return self.local(e, "size")
            case S.TensorSize(tensor=t, dim=d):
                return f"{self.tensor(t)}.sym_size({self.static(d, True)})"
            case S.TensorProp(tensor=t, prop=S.Prop.numel):
                return f"{self.tensor(t)}.sym_numel()"
            case S.Item(seq=s, index=i) if s.ty == S.INT_LIST:
                self.helpers.add("at")
                return f"meta_at({self.shape(s)}, {self.static(i, True)})"
            case S.Arith(op=S.ArithOp.add | S.ArithOp.sub | S.ArithOp.mul as op, left=a, right=b):
                return f"({self.size(a)} {op.value} {self.size(b)})"
            case S.Arith(op=S.ArithOp.floordiv | S.ArithOp.mod as op, left=a, right=b):
                self.helpers |= {op.name, *HELPERS[op.name]}
                return (f"meta_{op.name}({self.size(a)}, {self.size(b)}, "
                        f"{where(self.op, self.rule, e)})")
            case S.Neg(operand=o):
                return f"(-{self.size(o)})"
            case S.MinMax(fn=fn, items=items):
                text = self.size(items[0])
                for item in items[1:]:
                    text = f"{text}.{fn}({self.size(item)})"
                return text
            case S.Cond(cond=c, then=a, orelse=b):
                # The condition is fixed at trace time (cond() refuses sizes), so choosing a
                # branch specializes nothing; only the chosen branch is evaluated, as in Python.
                return f"({self.cond(c)} ? {self.size(a)} : {self.size(b)})"
        raise NoCpp(f"size {type(e).__name__}")

    def shape(self, e: S.Expr) -> str:
        """Something that converts to `c10::SymIntArrayRef` for the full expression."""
        match e:
            case S.Local():
                return self.local(e, "shape")
            case S.TensorProp(tensor=t, prop=S.Prop.shape):
                return f"{self.tensor(t)}.sym_sizes()"
            case S.Arg(ty=ty) if ty == S.INT_LIST:
                name, t = self.arg(e)
                if cpp.argumenttype_type(t, mutable=False).cpp() == "at::IntArrayRef":
                    return f"c10::fromIntArrayRefSlow({name})"
                if cpp.argumenttype_type(t, mutable=False).cpp() == "c10::SymIntArrayRef":
                    return name
            case S.Given(arg=a) if e.ty == S.INT_LIST:
                name, t = self.arg(a)
                given = cpp.argumenttype_type(t, mutable=False).cpp()
                if given == "at::OptionalIntArrayRef":
                    return f"c10::fromIntArrayRefSlow(*{name})"
                if given == "at::OptionalSymIntArrayRef":
                    return f"(*{name})"
            case S.ListLit(items=items):
                if not any(isinstance(i, S.Spread) for i in items):
                    return f"std::vector<c10::SymInt>{{{', '.join(self.size(i) for i in items)}}}"
                self.helpers.add("cat")
                parts: list[str] = []
                sizes: list[str] = []       # consecutive sizes share one vector
                for i in items:
                    if isinstance(i, S.Spread):
                        if sizes:
                            parts.append(f"std::vector<c10::SymInt>{{{', '.join(sizes)}}}")
                            sizes = []
                        parts.append(self.shape(i.seq))
                    else:
                        sizes.append(self.size(i))
                if sizes:
                    parts.append(f"std::vector<c10::SymInt>{{{', '.join(sizes)}}}")
                return "meta_cat({" + ", ".join(f"c10::SymIntArrayRef({p})" for p in parts) + "})"
            case S.Concat(left=a, right=b):
                self.helpers.add("cat")
                return (f"meta_cat({{c10::SymIntArrayRef({self.shape(a)}), "
                        f"c10::SymIntArrayRef({self.shape(b)})}})")
            case S.SliceOf(seq=s, lo=lo, hi=hi, step=None):
                self.helpers.add("slice")
                lo_t = self.static(lo, True) if lo is not None else "std::nullopt"
                hi_t = self.static(hi, True) if hi is not None else "std::nullopt"
                return f"meta_slice({self.shape(s)}, {lo_t}, {hi_t})"
            case S.Cond(cond=c, then=a, orelse=b):
                return f"({self.cond(c)} ? {self.shape_vector(a)} : {self.shape_vector(b)})"
        raise NoCpp(f"shape {type(e).__name__}")

    def shape_vector(self, e: S.Expr) -> str:
        """A `std::vector<c10::SymInt>`: both branches of a conditional shape have this type."""
        text = self.shape(e)
        if isinstance(e, (S.ListLit, S.Concat, S.SliceOf, S.Cond)) or (
                isinstance(e, S.Local) and self.locals[e.name][1] == "shape"):
            return text     # already a vector (a literal, meta_cat, meta_slice, a local)
        return f"c10::SymIntArrayRef({text}).vec()"


@L.per_object
def shard_kernels(shard: L.Shard) -> tuple[list[MetaKernel], list[str]]:
    """The Meta kernels of a shard's ops, and the helpers they use (in HELPERS order); once per
    shard (its registration unit and the kernel index ask)."""
    kernels: list[MetaKernel] = []
    helpers: set[str] = set()
    # Names of the helpers and of each other: `f.a` and `f_a`, or an op `like` and the helper
    # meta_like, must not share a function name.
    used: set[str] = {f"meta_{h}" for h in HELPERS}
    for op in shard.ops:
        k, h = translate(op)
        if k is None:
            continue
        base = reserved.cpp_identifier(k.function)
        fn, n = base, 2
        while fn in used:
            fn, n = f"{base}_{n}", n + 1
        used.add(fn)
        if fn != k.function:
            k = MetaKernel(k.op, k.schema, k.rule, fn, k.decl.replace(f" {k.function}(", f" {fn}(",
                                                                       1), k.body)
        kernels.append(k)
        helpers |= h
    return kernels, [h for h in HELPERS if h in helpers]


def meta_context(shard: L.Shard, diags: Diagnostics) -> dict:
    """What cpp_register.cpp.j2 renders the Meta block from."""
    kernels, helpers = shard_kernels(shard)
    return {"kernels": kernels, "helpers": helpers}
