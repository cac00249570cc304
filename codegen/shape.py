"""The fake-rule language: `fake:` strings of the op file -> checked `FakeRule` IR.

A fake rule says what each output of an op looks like (shape, dtype, device) without computing it.
`codegen.dest.cpp_meta` compiles every rule it can express in C++ into the op's Meta kernel (free
at import, no Python at trace time); `codegen.dest.py_reg` turns the others (data-dependent sizes,
Device arguments, comprehensions, ...) into Python fake kernels registered with
`torch.library.register_fake`. Either is what `torch.compile`, `torch.export` and FakeTensor run.

Language reference
==================

A rule is an expression over the op's argument names, written in Python syntax. Most rules are one
call:

    fake: like(self)                            # shape, dtype and device of `self`
    fake: like(self, dtype=int64)               # ... with another dtype
    fake: broadcast(self, other)                # broadcast shapes, promoted dtype, common device
    fake: reduce(self, dim, keepdim)            # `self` reduced over the `dim` argument
    fake: empty([self.size(0), n * 2])          # an explicit shape from sizes and int arguments
    fake: empty(size, dtype=dtype, device=device)   # a factory op
    fake: empty([dynamic()], dtype=int64)       # a data-dependent length
    fake: (like(self), reduce(self, dim, keepdim, dtype=int64))   # one item per output
    fake: k = dynamic(); (empty([k]), empty([k], dtype=int64))     # outputs sharing a size
    fake: broadcast(input, target) if reduction == "none" else reduce(broadcast(input, target), None)
    fake: empty(self.shape[:self.dim() - len(pad)] + [s + p for s, p in zip(self.shape[self.dim() - len(pad):], pad)])
    fake: check(input.shape == target.shape, "input and target differ"); like(input, dtype=promote_types(input.dtype, float32))
    fake: [like(t) for t in tensors]                                  # a Tensor[] return
    fake: empty([self.numel() * self.element_size()], dtype=uint8)    # the bytes of `self`

Every output a rule makes is a new contiguous tensor. For other layouts, views, or anything the
language cannot say, name a Python function instead (`fake: package.module:function`, called with
the op's arguments, like a `register_fake` function).

Outputs
-------
`like(t, dtype=None, device=None)`
    A tensor shaped like the Tensor `t`, with `t`'s dtype and device unless given.
`broadcast(a, b, ..., dtype=None)`
    The broadcast shape of the Tensor operands; the dtype is PyTorch's type promotion over every
    operand (Tensors, and number arguments as Python scalars, exactly like `torch.add(a, b)`); the
    device is the operands' common device. `Tensor?` operands that are None are left out;
    `*tensors` spreads a `Tensor[]` argument.
`reduce(t, dims, keepdim=False, dtype=None)`
    `t` reduced over `dims`: an `int`, `int[]` or optional argument, or a literal (`1`, `[0, 1]`).
    None or `[]` reduces every dimension, negative dims count from the end, as in `torch.sum`.
`empty(shape, dtype=None, device=None)`
    A tensor of the given shape. dtype and device default to those of the op's first `Tensor`
    argument; an op without one (a factory op) gets PyTorch's default dtype and device.
`empty_strided(shape, stride, dtype=None, device=None)`
    `empty` with the given strides, one per size, for a kernel whose outputs are not contiguous
    (a column-major scale tensor: `empty_strided([m, k], [1, m])`).

A tensor made by one of these may feed `like`, `reduce` or `.shape`/`.dtype` of another
(`reduce(broadcast(a, b), None)`). `broadcast` also takes number literals: `broadcast(*ts, 1.0)`
promotes integer tensors to the default floating dtype, as multiplying by a Python float does.

A `dtype=`/`device=` value that is None at run time (an optional argument) means the default.
For an op with several returns, the rule is a tuple with one item per return; a `Tensor?` return
may be `None`, and an `int`/`SymInt` return is a size expression (`self.numel()`); a
data-dependent one (`dynamic()`) needs a `SymInt` return, as torch makes an `int` a Python int.

A `Tensor[]` return is a list of new tensors: a list literal `[like(a), like(b)]`, or a
comprehension making one per element of a list argument or of `range(n)`:
`[like(t) for t in tensors]`, `[empty([s, d]) for s in sizes]`, `[empty([dynamic()]) for i in
range(n)]` (a data-dependent length each: `dynamic()` is new per element). The number of outputs
is fixed when the op is traced, so `n` is an `int` argument (not `SymInt`), a literal or
`len(...)`; a count that depends on the data needs a Python fake function. Either may be a
branch of `a if cond else b` (`[like(v), like(w)] if w is not None else [like(v)]`).

Values
------
- Argument names of the schema. `Tensor`, `Tensor?`, `Tensor[]`, `int`/`SymInt` (and lists and
  optionals of them), `bool`, `float`/`Scalar`, `ScalarType`, `Device`; a `bool[]` for its
  `len()` and its items, which are conditions like a `bool` argument (NATTEN's
  `is_causal[0]`, at an index fixed when traced: a literal, an `int` argument); any other list
  (`float[]`, `str[]`, `Tensor?[]`, optional or not) for its `len()` only.
- Sizes (symbolic under dynamic shapes): integer literals (decimal, no leading zeros, 64-bit),
  `int`/`SymInt` arguments,
  `t.size(d)`, `t.shape[d]`, `t.numel()`, `t.dim()` / `t.ndim`, `sizes[i]`, `len(xs)` of any
  list argument (fixed when the op is traced: torchcodec's `n = len(timestamps)` of a `float[]`),
  the byte size of an element of a dtype, `d.itemsize` (a `ScalarType` argument, `t.dtype`, a
  dtype name, `promote_types(...)`, `(dtype or float32)`; `t.element_size()` and `t.itemsize`
  are `t.dtype.itemsize`, as in torch): `(n + 1) // (quant_storage.itemsize * 2)`. It is fixed
  when the op is traced, so an `if` may compare it and a `range()` count may be it; a
  `ScalarType?` needs a None test or a default first,
  `a + b`, `a - b`, `a * b`, `a // b`, `a % b`, `-a`, `max(a, b, ...)`, `min(a, b, ...)`, and
  `dynamic(min=0, max=None)`: a fresh data-dependent size
  (`torch.library.get_ctx().new_dynamic_size()`).
- Shapes: list literals `[a, b, *sizes]`, `t.shape`, `t.size()`, an `int[]`/`SymInt[]` argument,
  slices `t.shape[1:]`, slices with a constant nonzero step `t.shape[::2]`, `sizes[::-1]`, and
  concatenation `a + b`.
- dtypes: `float32`, `int64`, `bool`, ... (torch's names), a `ScalarType` argument, `t.dtype`,
  and `promote_types(a, b, ...)`: PyTorch's promotion of dtypes (`torch.promote_types`). "At
  least float32" is `promote_types(x.dtype, float32)` (float16 and bfloat16 become float32,
  float64 stays, integers become float32); "promote with the weight" is
  `promote_types(x.dtype, weight.dtype)`.
- devices: a `Device` argument, `t.device`.
- `tensors[i]`: an element of a `Tensor[]` argument. `True`, `False`, `None`.
- Number literals for `broadcast` (finite doubles); string literals to compare with `str`
  arguments, quoted with `'` or `"`, with Python's escapes but no NUL, lone surrogate or raw
  control character.
- An optional argument where a None test around it tells it is not None, as type checkers
  narrow it: `like(out) if out is not None else empty(...)`, the right side of
  `out is None or ...` and of `out is not None and ...` (unless the left side compares sizes,
  which evaluates both sides).
- `x or y`: the optional value `x`, or `y` when `x` is None (`dtype or float32`); between
  conditions, Python's boolean `or`.
- `a if cond else b`, where `cond` is fixed when the op is traced: a `bool` argument, `not c`,
  `c1 and c2`, `c1 or c2` (Python's precedence: `not`, then `and`, then `or`), `==`/`!=`
  between `str`, `bool`, `int` or `ScalarType` arguments and literals (`reduction == "none"`),
  between dtypes, which are never symbolic (`t.dtype == uint8`),
  between devices (`t.device`, `Device` arguments: fake tensors carry their real device),
  `<`/`<=`/`>`/`>=` between `int` arguments and integer literals (`k < 0`), ranks and list
  lengths, which are plain ints too (`w.size(3) if w.dim() == 4 else 1`, `len(sizes) > 1`), or
  `x is None` / `x is not None` for an optional argument. An optional `bool`, `str`, `int` or
  `ScalarType` argument is one of these where a None test tells it is given (apex's
  `per_tensor_python is not None and per_tensor_python`). Sizes are never compared: that would
  specialize them.
- `x in (a, b, ...)` and `x not in [a, b, ...]`, a tuple or list written out: `x == a or x == b
  ...` and `x != a and x != b ...`, wherever those comparisons may stand
  (`check(quant_type in ("nf4", "fp4"))`, `check(A.dtype in (float16, bfloat16, float32))`).
- List comprehensions over int lists and `Tensor[]`: `[s + p for s, p in zip(xs, pad)]`,
  `[t.size(0) for t in tensors]`, and `sum(sizes)`.

Sizes are computed with SymInt-friendly arithmetic only (no `int()`, no branching on a size), so
a fake kernel never specializes a dynamic shape.

Bindings `name = expr;` before the outputs name a value; each `dynamic()` call is a new size, so
outputs that share a data-dependent size bind it once.
torch finds a data-dependent size from an output size that is that size or a multiple of it
(`empty([n])`, `empty([2 * n])`), never inside a sum: a `dynamic()` size the outputs have only
in sums (`empty([idx.size(0) + n])`) is an error, since tracing would refuse the fake kernel.

Preconditions
-------------
`check(condition, "message");` before the outputs states what the kernel requires of its
arguments, so that a wrong call fails under torch.compile and export too, not only when the kernel
runs. The condition is anything an `if` takes, and also comparisons of sizes (`==`, `!=`, `<`,
`<=`, `>`, `>=`: `check(a.size(-1) == head_size)`), of shapes and of dtypes (`==`, `!=`:
`check(a.shape == b.shape)`, `check(w.dtype == float32)`), of `float` and `Scalar` arguments
with numbers (torchao's `check(dropout_p == 0.0)`, `check(alpha > 0)`), and of devices like an `if`
(`check(a.device == b.device)`); a check asserts and never branches, so sizes stay symbolic.
`and`/`or` join them: `check(a and b)` is `check(a); check(b)`, and `or` evaluates its right side
only when a left side fixed at trace time does not decide (`check(not causal or q.size(1) ==
k.size(1))`); after a comparison of sizes, too, when the sizes are known when traced (an
empty tensor's: `check(g.numel() == 0 or k // g.size(0) == 128)` divides by no zero size), and
else both sides are evaluated, as SymBools. It
becomes `torch._check` in a Python fake and `TORCH_SYM_CHECK` (sizes) or `TORCH_CHECK` in a C++
Meta kernel (a thrown `std::runtime_error` on the stable ABI), failing with "<ns>::<op>: message"
(without a message, the condition as written). A device check keeps the rule a Python fake: a
Meta kernel sees every tensor on `meta`.

What needs no rule
------------------
In-place and out= ops return their mutated arguments, ops returning `()` return nothing: their fake
kernels follow from the schema. Their rule may still state preconditions, checks alone
(`check(out.dtype == int32, "out must be int32"); check(out.shape == A.shape[:-1] + [B.size(0)])`),
which the fake kernel runs before it returns what the schema says. An out= op may also give a
rule, one item per out argument: the shape its kernel resizes that argument to
(`fake: like(self)`). An op with both mutated-argument
returns and new ones writes rule items for the new ones only. A returned optional argument
(FlashAttention's `Tensor(out!)? out -> (Tensor(out!), Tensor)`) is a new tensor when it is None:
it takes an item too, the output in that case, and the rule stays a Python fake. Ops with a
`Meta` or `CompositeImplicitAutograd` kernel need no fake; one with a `CompositeExplicitAutograd`
kernel runs it on fake tensors unless it has a rule (give one when the kernel reads data).

Checks
------
Rules are parsed (LALR, `grammar/shape.lark`) and checked against the schema when the op file is
loaded (`make check`): unknown names, wrong argument counts, wrong argument kinds (a `bool` where a
Tensor is expected), outputs that do not match the returns, literals out of range, constant sizes
that are negative or overflow int64 (`empty([-1])`, `empty([9223372036854775807 + 1])`), `//` or `%`
by zero, nesting deeper than 100 levels; each error points into the rule. The language names
nothing but the above: the op's arguments, the rule functions, the tensor attributes and methods
listed, dtype names and the rule's own bindings. Checks, step slices, `promote_types` and
`Tensor[]` outputs are checked the same way (a size compared in an `if`, a step that is not a
nonzero literal, a count that could be symbolic, a `Tensor[]` return given one tensor).
"""

from __future__ import annotations

import enum
import operator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Iterator, Union


from codegen import enums
from codegen.diagnostics import Diagnostics, did_you_mean
from codegen.expr import ExprParser, ExprSyntaxError, Node, children, token_span, walk
from codegen.literals import INT64_MAX, INT64_MIN, LiteralError, float_literal, int_literal, \
    string_literal
from codegen.model import (
    BaseTy,
    BaseType,
    DispatchKey,
    FunctionSchema,
    ListType,
    Located,
    Op,
    OptionalType,
    PyRef,
    Return,
    Span,
    Type,
    strip_optional,
    without_alias,
)

# --------------------------------------------------------------------------------------------------
# Value types of the language


class T(enum.Enum):
    TENSOR = "Tensor"
    TENSOR_LIST = "Tensor[]"
    INT = "int"
    INT_LIST = "int[]"
    LIST = "list"      # any other list (float[], bool[], str[], Tensor?[]): len() reads it,
    #                    and a bool[] is indexed (`_Checker.bool_list`)
    BOOL = "bool"
    SCALAR = "number"
    DTYPE = "dtype"
    DEVICE = "device"
    STR = "str"
    NONE = "None"
    OUT = "output tensor"
    OUT_LIST = "list of output tensors"
    OTHER = "unsupported"


@dataclass(frozen=True)
class Ty:
    base: T
    optional: bool = False
    # How messages name a T.LIST (`float[]`); types compare by kind alone.
    written: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return (self.written or self.base.value) + ("?" if self.optional else "")


_BASE_TY: dict[BaseTy, T] = {
    BaseTy.Tensor: T.TENSOR,
    BaseTy.int: T.INT,
    BaseTy.SymInt: T.INT,
    BaseTy.bool: T.BOOL,
    BaseTy.float: T.SCALAR,
    BaseTy.Scalar: T.SCALAR,
    BaseTy.ScalarType: T.DTYPE,
    BaseTy.Device: T.DEVICE,
    BaseTy.str: T.STR,
}


def arg_ty(t: Type) -> Ty:
    """The language type of an argument of schema type `t`."""
    optional = isinstance(t, OptionalType)
    base = strip_optional(t)
    if isinstance(base, BaseType):
        kind = _BASE_TY.get(base.name, T.OTHER)
        # messages name a float and a Scalar as the schema does, not both "number"
        return Ty(kind, optional, base.name.name if kind == T.SCALAR else None)
    if isinstance(base, ListType) and isinstance(base.elem, BaseType):
        elem = base.elem.name
        if elem is BaseTy.Tensor:
            return Ty(T.TENSOR_LIST, optional)
        if elem in (BaseTy.int, BaseTy.SymInt):
            return Ty(T.INT_LIST, optional)
    if isinstance(base, ListType):
        return Ty(T.LIST, optional, str(without_alias(base)))
    return Ty(T.OTHER, optional)


INT = Ty(T.INT)
INT_LIST = Ty(T.INT_LIST)
TENSOR = Ty(T.TENSOR)
OUT = Ty(T.OUT)
OUT_LIST = Ty(T.OUT_LIST)
DTYPE = Ty(T.DTYPE)

# torch dtype names the language knows (`torch.<name>`), with the usual aliases.
DTYPES: dict[str, str] = enums.DTYPE_NAMES


# --------------------------------------------------------------------------------------------------
# The IR: resolved, typed expressions (what the generators read)


@dataclass(frozen=True)
class Arg(Node):
    """A reference to the op's argument `name`."""
    name: str
    ty: Ty


@dataclass(frozen=True)
class Given(Node):
    """An optional argument where a condition around it tells it is not None
    (`like(out) if out is not None else ...`)."""
    arg: Arg

    @property
    def ty(self) -> Ty:
        return Ty(self.arg.ty.base, written=self.arg.ty.written)


@dataclass(frozen=True)
class Local(Node):
    """A reference to a binding (`n = ...;`)."""
    name: str
    ty: Ty


@dataclass(frozen=True)
class IntLit(Node):
    value: int
    ty: Ty = INT


@dataclass(frozen=True)
class BoolLit(Node):
    value: bool
    ty: Ty = Ty(T.BOOL)


@dataclass(frozen=True)
class NoneLit(Node):
    ty: Ty = Ty(T.NONE)


@dataclass(frozen=True)
class FloatLit(Node):
    """A number literal: a `broadcast` operand promoting like a Python float."""
    value: float
    ty: Ty = Ty(T.SCALAR)


@dataclass(frozen=True)
class StrLit(Node):
    value: str
    ty: Ty = Ty(T.STR)


@dataclass(frozen=True)
class DtypeLit(Node):
    name: str                       # attribute of torch: "float32"
    ty: Ty = Ty(T.DTYPE)


class Prop(enum.Enum):
    shape = "shape"                 # int[]
    dtype = "dtype"
    device = "device"
    ndim = "dim"                    # int, static
    numel = "numel"                 # int


_PROP_TY = {Prop.shape: INT_LIST, Prop.dtype: Ty(T.DTYPE), Prop.device: Ty(T.DEVICE),
            Prop.ndim: INT, Prop.numel: INT}


@dataclass(frozen=True)
class TensorProp(Node):
    tensor: Expr
    prop: Prop

    @property
    def ty(self) -> Ty:
        return _PROP_TY[self.prop]


@dataclass(frozen=True)
class ItemSize(Node):
    """`d.itemsize` of a dtype (`t.dtype.itemsize`, `t.element_size()`): the bytes of one
    element, an int fixed when the op is traced."""
    dtype: Expr
    ty: Ty = INT


@dataclass(frozen=True)
class TensorSize(Node):
    """`t.size(d)` / `t.shape[d]`."""
    tensor: Expr
    dim: Expr
    ty: Ty = INT


@dataclass(frozen=True)
class Item(Node):
    """`seq[i]` of an int list (an int), a Tensor list (a Tensor) or a bool list (a bool)."""
    seq: Expr
    index: Expr
    ty: Ty = INT


@dataclass(frozen=True)
class SliceOf(Node):
    seq: Expr
    lo: Expr | None
    hi: Expr | None
    ty: Ty = INT_LIST
    step: Expr | None = None        # a nonzero constant


@dataclass(frozen=True)
class Len(Node):
    seq: Expr
    ty: Ty = INT


@dataclass(frozen=True)
class Spread(Node):
    """`*x` inside a list literal (int list) or a `broadcast` call (Tensor list)."""
    seq: Expr

    @property
    def ty(self) -> Ty:
        return self.seq.ty


@dataclass(frozen=True)
class ListLit(Node):
    items: tuple[Expr, ...]         # ints and Spreads of int lists
    ty: Ty = INT_LIST


@dataclass(frozen=True)
class Concat(Node):
    left: Expr
    right: Expr
    ty: Ty = INT_LIST


class ArithOp(enum.Enum):
    add = "+"
    sub = "-"
    mul = "*"
    floordiv = "//"
    mod = "%"


@dataclass(frozen=True)
class Arith(Node):
    op: ArithOp
    left: Expr
    right: Expr
    ty: Ty = INT


@dataclass(frozen=True)
class Neg(Node):
    operand: Expr
    ty: Ty = INT


@dataclass(frozen=True)
class MinMax(Node):
    fn: str                         # "max" | "min"
    items: tuple[Expr, ...]
    ty: Ty = INT


@dataclass(frozen=True)
class Dynamic(Node):
    """A fresh data-dependent size: `torch.library.get_ctx().new_dynamic_size(min=, max=)`."""
    min: Expr | None
    max: Expr | None
    ty: Ty = INT


@dataclass(frozen=True)
class Fallback(Node):
    """`value or default`: `value` unless it is None."""
    value: Expr
    default: Expr

    @property
    def ty(self) -> Ty:
        return self.default.ty


@dataclass(frozen=True)
class LoopVar(Node):
    """A name bound by a list comprehension."""
    name: str
    ty: Ty


@dataclass(frozen=True)
class ListComp(Node):
    """`[elem for a, b in zip(x, y)]` (one name and no zip for a single list): sizes, or the
    outputs of a `Tensor[]` return."""
    elem: Expr
    names: tuple[str, ...]
    seqs: tuple[Expr, ...]
    ty: Ty = INT_LIST


@dataclass(frozen=True)
class Range(Node):
    """`range(n)` looped over by a comprehension: `n` is fixed when the op is traced."""
    count: Expr
    ty: Ty = INT_LIST


@dataclass(frozen=True)
class OutList(Node):
    """`[like(a), like(b)]`: the outputs of a `Tensor[]` return."""
    items: tuple[Expr, ...]
    ty: Ty = OUT_LIST


@dataclass(frozen=True)
class PromoteTypes(Node):
    """`promote_types(a, b, ...)`: torch.promote_types over dtypes."""
    items: tuple[Expr, ...]
    ty: Ty = DTYPE


@dataclass(frozen=True)
class Sum(Node):
    seq: Expr
    ty: Ty = INT


class CompareOp(enum.Enum):
    eq = "=="
    ne = "!="
    lt = "<"
    le = "<="
    gt = ">"
    ge = ">="
    is_ = "is"
    is_not = "is not"


@dataclass(frozen=True)
class Compare(Node):
    """A condition on arguments that are fixed at trace time (str, bool, int, dtype), or a
    None test of an optional argument. Never on sizes, which would specialize them."""
    op: CompareOp
    left: Expr
    right: Expr
    ty: Ty = Ty(T.BOOL)


@dataclass(frozen=True)
class Not(Node):
    operand: Expr
    ty: Ty = Ty(T.BOOL)


@dataclass(frozen=True)
class BoolOp(Node):
    """`left and right`, `left or right`: Python's, `right` evaluated only when `left` does not
    decide, except where `left` compares sizes (a check's condition): then both sides are
    evaluated and combined as SymBools (`&`, `|`, `sym_and`), which a size left symbolic needs."""
    op: str                         # "and" | "or"
    left: Expr
    right: Expr
    ty: Ty = Ty(T.BOOL)


@dataclass(frozen=True)
class Cond(Node):
    """`then if cond else orelse`."""
    cond: Expr
    then: Expr
    orelse: Expr

    @property
    def ty(self) -> Ty:
        return self.then.ty if self.then.ty.base is not T.NONE else self.orelse.ty


@dataclass(frozen=True)
class Like(Node):
    tensor: Expr
    dtype: Expr | None
    device: Expr | None
    ty: Ty = OUT


@dataclass(frozen=True)
class Broadcast(Node):
    operands: tuple[Expr, ...]      # Tensors, Tensor?s, numbers, Spreads of Tensor lists
    dtype: Expr | None
    ty: Ty = OUT


@dataclass(frozen=True)
class Reduce(Node):
    tensor: Expr
    dims: Expr                      # int, int[], their optionals, ListLit or NoneLit
    keepdim: Expr                   # bool
    dtype: Expr | None
    ty: Ty = OUT


@dataclass(frozen=True)
class Empty(Node):
    shape: Expr
    dtype: Expr | None
    device: Expr | None
    like: str | None                # the op's first Tensor argument: its dtype/device are defaults
    ty: Ty = OUT
    stride: Expr | None = None      # empty_strided(): the strides; None: contiguous


Expr = Union[Arg, Given, Local, LoopVar, IntLit, FloatLit, StrLit, BoolLit, NoneLit, DtypeLit, TensorProp,
             ItemSize, TensorSize, Item, SliceOf, Len, Spread, ListLit, ListComp, Range, OutList,
             PromoteTypes, Sum, Concat, Arith, Neg, MinMax, Dynamic, Fallback, Compare, Not, BoolOp,
             Cond,
             Like, Broadcast, Reduce, Empty]


@dataclass(frozen=True)
class Check:
    """`check(cond, "message");`: a precondition, after the first `after` bindings."""
    cond: Expr
    message: str                    # the op's name, then the rule's message or the condition
    after: int
    text: str = field(default="", compare=False)    # the condition as written


@dataclass(frozen=True)
class Binding:
    name: str
    value: Expr


@dataclass(frozen=True)
class ReturnArg(Node):
    """An output that is the mutated argument `name` itself (in-place and out= ops). An out=
    argument with a rule is resized to the shape of `resize` first, as out= kernels do. A
    `Tensor(a!)?` argument returned as `Tensor(a!)` is the output only when given: `otherwise`
    is the new tensor the kernel returns when it is None."""
    name: str
    resize: Expr | None = None
    otherwise: Expr | None = None


Output = Union[Expr, ReturnArg]


@dataclass(frozen=True)
class FakeRule:
    """One op's fake kernel: bindings, then one output per return of the schema."""

    bindings: tuple[Binding, ...]
    outputs: tuple[Output, ...]
    text: str = ""                  # the rule as written ("" when it follows from the schema)
    checks: tuple[Check, ...] = ()
    # The `fake:` value, and each IR node with the span of the text it was made from (found by
    # identity, which pickling keeps): what a later stage refuses in a rule is located there.
    located: Located | None = field(default=None, compare=False, hash=False, repr=False)
    spans: tuple[tuple[Node, Span], ...] = field(default=(), compare=False, hash=False,
                                                 repr=False)

    def span_of(self, node: Node) -> Span | None:
        """The span of the rule's text `node` was made from, when known."""
        return next((span for n, span in self.spans if n is node), None)

    def loc_of(self, node: Node):
        """Where `node` of this rule is written; the whole rule, or None, when not known."""
        if self.located is None:
            return None
        span = self.span_of(node)
        if span is None:
            return self.located.loc
        return self.located.at(span.start, max(1, span.end - span.start))

    def steps(self) -> Iterator[Binding | Check]:
        """The bindings and checks in the rule's order: each check after the bindings it
        follows (`after`), before the next one."""
        for i, b in enumerate(self.bindings):
            yield from (c for c in self.checks if c.after == i)
            yield b
        yield from (c for c in self.checks if c.after == len(self.bindings))

    def nodes(self) -> Iterator[Node]:
        """Every IR node of the rule: bindings, checks, outputs."""
        return walk(*(b.value for b in self.bindings), *(c.cond for c in self.checks),
                    *self.outputs)

    @property
    def uses_dynamic(self) -> bool:
        return any(isinstance(n, Dynamic) for n in self.nodes())

    def output_uses_dynamic(self, i: int) -> bool:
        """Whether output `i` is made with `dynamic()`, itself or through the bindings it reads:
        an `int` return made so is read from the data, one made of sizes is known to a trace."""
        return _made_with_dynamic(self.outputs[i], self.bindings)


def _made_with_dynamic(e: Node, bindings: Iterable[Binding]) -> bool:
    """Whether `e` calls `dynamic()`, itself or through the bindings it reads."""
    values = {b.name: b.value for b in bindings}
    todo, seen = [e], set()
    while todo:
        for n in walk(todo.pop()):
            if isinstance(n, Dynamic):
                return True
            if isinstance(n, Local) and n.name in values and n.name not in seen:
                seen.add(n.name)
                todo.append(values[n.name])
    return False


# --------------------------------------------------------------------------------------------------
# Syntax: what the grammar produces (spans are offsets into the rule text)


@dataclass(frozen=True)
class _Name(Node):
    id: str
    span: Span


@dataclass(frozen=True)
class _Lit(Node):
    """A number or string literal, as written: the checker decodes it (codegen.literals)."""
    kind: str                       # "int" | "float" | "string"
    text: str
    span: Span


@dataclass(frozen=True)
class _IfExp(Node):
    then: _Syn
    cond: _Syn
    orelse: _Syn
    span: Span


@dataclass(frozen=True)
class _Compare(Node):
    op: str                         # "==", "!=", "is", "is not"
    left: _Syn
    right: _Syn
    span: Span
    written: str | None = None      # "in" or "not in" for an item of `_In`, for messages


@dataclass(frozen=True)
class _In(Node):
    """`x in (a, b)`, `x not in [a, b]`: the checker reads it as `x == a or x == b`."""
    negated: bool
    left: _Syn
    right: _Syn
    span: Span


@dataclass(frozen=True)
class _Not(Node):
    operand: _Syn
    span: Span


@dataclass(frozen=True)
class _ListComp(Node):
    elem: _Syn
    names: tuple[tuple[str, Span], ...]
    seq: _Syn
    span: Span


@dataclass(frozen=True)
class _Attr(Node):
    obj: _Syn
    name: str
    span: Span


@dataclass(frozen=True)
class _Kwarg(Node):
    name: str
    value: _Syn
    span: Span


@dataclass(frozen=True)
class _Call(Node):
    func: _Syn
    args: tuple[_Syn, ...]
    kwargs: tuple[_Kwarg, ...]
    span: Span


@dataclass(frozen=True)
class _Index(Node):
    obj: _Syn
    index: _Syn
    span: Span


@dataclass(frozen=True)
class _Slice(Node):
    obj: _Syn
    lo: _Syn | None
    hi: _Syn | None
    span: Span
    step: _Syn | None = None


@dataclass(frozen=True)
class _Bin(Node):
    op: str
    left: _Syn
    right: _Syn
    span: Span


@dataclass(frozen=True)
class _Neg(Node):
    operand: _Syn
    span: Span


@dataclass(frozen=True)
class _Or(Node):
    left: _Syn
    right: _Syn
    span: Span


@dataclass(frozen=True)
class _And(Node):
    left: _Syn
    right: _Syn
    span: Span


@dataclass(frozen=True)
class _List(Node):
    items: tuple[_Syn, ...]
    span: Span


@dataclass(frozen=True)
class _Tuple(Node):
    items: tuple[_Syn, ...]
    span: Span


@dataclass(frozen=True)
class _Spread(Node):
    value: _Syn
    span: Span


@dataclass(frozen=True)
class _Binding:
    name: str
    name_span: Span
    value: _Syn


@dataclass(frozen=True)
class _Rule:
    bindings: tuple[_Binding | _Syn, ...]   # bindings and check(...) calls, in order
    body: _Syn | _Binding


_Syn = Union[_Name, _Lit, _IfExp, _Compare, _In, _Not, _ListComp, _Attr, _Call, _Index, _Slice,
             _Bin, _Neg, _Or, _And, _List, _Tuple, _Spread, _Kwarg]


def _join(a: Span, b: Span) -> Span:
    return Span(min(a.start, b.start), max(a.end, b.end))


def _binary_method(op: str):
    """A builder method making `_Bin(op, ...)` (one per arithmetic alternative)."""
    def method(self, span, left, right):
        return _Bin(op, left, right, span)
    return method


def _compare_method(op: str):
    def method(self, span, left, right):
        return _Compare(op, left, right, span)
    return method


class _ToSyntax:
    """Grammar alternatives -> syntax nodes, as the parser reduces them (codegen.expr.ExprParser).
    The only code that sees the grammar's shapes."""

    def start(self, span, *parts):
        parts = [p for p in parts if p is not None]
        return _Rule(tuple(parts[:-1]), parts[-1])

    def binding(self, span, name, value):
        return _Binding(str(name), token_span(name), value)

    def name(self, span, tok):
        return _Name(str(tok), token_span(tok))

    def int(self, span, tok):
        return _Lit("int", str(tok), token_span(tok))

    def float(self, span, tok):
        return _Lit("float", str(tok), token_span(tok))

    def string(self, span, tok):
        return _Lit("string", str(tok), token_span(tok))

    def ifexp(self, span, then, cond, orelse):
        return _IfExp(then, cond, orelse, span)

    eq = _compare_method("==")
    ne = _compare_method("!=")
    lt = _compare_method("<")
    le = _compare_method("<=")
    gt = _compare_method(">")
    ge = _compare_method(">=")
    is_ = _compare_method("is")
    is_not = _compare_method("is not")

    def in_(self, span, left, right):
        return _In(False, left, right, span)

    def not_in(self, span, left, right):
        return _In(True, left, right, span)

    def not_(self, span, operand):
        return _Not(operand, span)

    def listcomp(self, span, elem, *rest):
        *names, seq = rest
        return _ListComp(elem, tuple((str(n), token_span(n)) for n in names), seq, span)

    def attr(self, span, obj, name):
        return _Attr(obj, str(name), span)

    def call(self, span, func, *args):
        args = [a for a in args if a is not None]
        pos = tuple(a for a in args if not isinstance(a, _Kwarg))
        kws = tuple(a for a in args if isinstance(a, _Kwarg))
        return _Call(func, pos, kws, span)

    def kwarg(self, span, name, value):
        return _Kwarg(str(name), value, _join(token_span(name), value.span))

    def spread(self, span, value):
        return _Spread(value, span)

    def index(self, span, obj, index):
        return _Index(obj, index, span)

    def slice(self, span, obj, lo, hi, step=None):
        return _Slice(obj, lo, hi, span, step)

    add = _binary_method("+")
    sub = _binary_method("-")
    mul = _binary_method("*")
    floordiv = _binary_method("//")
    mod = _binary_method("%")

    def neg(self, span, operand):
        return _Neg(operand, span)

    def or_(self, span, left, right):
        return _Or(left, right, span)

    def and_(self, span, left, right):
        return _And(left, right, span)

    def list(self, span, *items):
        return _List(tuple(i for i in items if i is not None), span)

    def tuple(self, span, *items):
        return _Tuple(tuple(i for i in items if i is not None), span)


@lru_cache(maxsize=1)
def _parser() -> ExprParser:
    # Sizes are integers: a rule has no true division (`x.size(0) / 2` would be a float).
    return ExprParser("grammar/shape.lark", _ToSyntax(), "fake rule",
                      depth_hint="name parts first: `n = ...; empty([n])`",
                      char_hints={"/": "sizes are integers: divide them with // "
                                       "(`x.size(0) // 2`)"})


def _is_check(node: _Syn) -> bool:
    return isinstance(node, _Call) and isinstance(node.func, _Name) and node.func.id == "check"


def _is_condition(node: _Syn) -> bool:
    """Whether `node` is written as a condition (a comparison, `not`, `and`, a boolean `or`)."""
    if isinstance(node, _Or):
        return _is_condition(node.left)
    return isinstance(node, (_Compare, _In, _Not, _And))


def _not_none(cond: Expr, holds: bool) -> frozenset[str]:
    """The optional arguments that are not None wherever `cond` evaluates to `holds`."""
    match cond:
        case Compare(op=CompareOp.is_not | CompareOp.is_ as op, left=Arg(name=n)):
            return frozenset([n]) if (op is CompareOp.is_not) == holds else frozenset()
        case Not(operand=c):
            return _not_none(c, not holds)
        case BoolOp(op=op, left=a, right=b) if (op == "and") == holds:
            return _not_none(a, holds) | _not_none(b, holds)
    return frozenset()


_DYNAMIC = "dynamic()"


def _surely(e: Node) -> set[str]:
    """The bindings `e` surely reads, whichever branches run, and `_DYNAMIC` when it surely
    calls dynamic()."""
    match e:
        case Local(name=n):
            return {n}
        case Dynamic():
            return {_DYNAMIC}
        case Cond(cond=c, then=a, orelse=b):
            return _surely(c) | (_surely(a) & _surely(b))
        case Fallback(value=v):
            return _surely(v)
        case BoolOp(left=a, right=b):
            # A SymBool on the left evaluates both sides (py_fake); else `b` may not run.
            return _surely(a) | (_surely(b) if compares_sizes(a) else set())
        case ReturnArg(resize=r):
            return _surely(r) if r is not None else set()   # `otherwise` runs on None only
    out: set[str] = set()
    for c in children(e):
        out |= _surely(c)
    return out


def _sizes_in_sums(e: Node, in_sum: bool) -> Iterator[tuple[Node, bool]]:
    """Each binding read and dynamic() call of `e`, and whether it is inside a `+` or `-`."""
    if isinstance(e, (Local, Dynamic)):
        yield e, in_sum
    if isinstance(e, Arith) and e.op in (ArithOp.add, ArithOp.sub):
        in_sum = True
    for c in children(e):
        yield from _sizes_in_sums(c, in_sum)


def compares_sizes(e: Expr) -> bool:
    """Whether the condition `e` compares sizes: traced, it is a SymBool, which Python's `and`,
    `or` and `not` would turn into a bool (a guard, specializing the size)."""
    return any(isinstance(n, Compare) and n.left.ty == INT and n.right.ty == INT for n in walk(e))


# --------------------------------------------------------------------------------------------------
# Checking: syntax -> IR, against the schema


class _Bad(Exception):
    """Raised inside the checker after an error was reported; unwinds to the rule's top."""


_FUNCTIONS = ("like", "broadcast", "reduce", "empty", "empty_strided", "dynamic", "len", "max",
              "min", "sum", "promote_types")
_CHECK_USAGE = 'check(condition, "message"); before the outputs'

_METHODS = {"size": Prop.shape, "dim": Prop.ndim, "numel": Prop.numel, "element_size": None}
_ATTRS = {"shape": Prop.shape, "dtype": Prop.dtype, "device": Prop.device, "ndim": Prop.ndim,
          "itemsize": None}
_CONSTANTS = ("True", "False", "None")

# torch's factories as Python fake functions spell them (ExecuTorch's Meta kernels:
# `torch.empty_like(query)`, `torch.empty((1,), dtype=value.dtype, device="meta")`), and the rule
# function each is.
_TORCH_LIKE = ("empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like")
_TORCH_EMPTY = ("empty", "zeros", "ones", "full", "rand", "randn", "new_empty", "new_zeros")


def _torch_spelling_hint(name: str) -> str | None:
    """How a rule says what torch's `name` says, for a name torch's fake functions use."""
    if name in _TORCH_LIKE:
        return ("write like(t), or like(t, dtype=...): a rule gives only the shape, dtype and "
                "device of each output")
    if name in _TORCH_EMPTY:
        return ("write empty([sizes], dtype=...), the sizes as a list (`empty([1], "
                "dtype=value.dtype)`): a rule gives only the shape, dtype and device of each "
                "output")
    if name in DTYPES:
        return f"write {name}: a rule names dtypes without `torch.`"
    return None


class _Checker:
    def __init__(self, text: Located, schema: FunctionSchema, diags: Diagnostics):
        self.text = text
        self.schema = schema
        self.diags = diags
        self.locals: dict[str, Ty] = {}
        self.bad_locals: set[str] = set()   # bindings that failed: their uses say nothing more
        self.unknown: set[Span] = set()     # names reported unknown before checking
        self.loop_vars: dict[str, Ty] = {}
        self.first_tensor = next((a.name for a in schema.arguments
                                  if arg_ty(a.type) == TENSOR), None)
        self.spans: list[tuple[Node, Span]] = []
        self.given: frozenset[str] = frozenset()  # optional arguments not None here

    def made(self, out: Expr, node: _Syn) -> Expr:
        span = getattr(node, "span", None)
        if span is not None:
            self.spans.append((out, span))
        return out

    # -- reporting

    def error(self, span: Span, message: str, hint: str | None = None) -> _Bad:
        self.diags.error(self.text.at(span.start, max(1, span.end - span.start)), message, hint)
        return _Bad()

    # -- names

    def name(self, node: _Name) -> Expr:
        if node.id in self.loop_vars:
            return LoopVar(node.id, self.loop_vars[node.id])
        if node.id in self.locals:
            return Local(node.id, self.locals[node.id])
        if node.id in self.bad_locals:
            raise _Bad()
        arg = self.schema.argument(node.id)
        if arg is not None:
            ty = arg_ty(arg.type)
            if ty.base is T.OTHER:
                raise self.error(node.span, f"argument '{node.id}' of type '{arg.type}' cannot be "
                                 "used in a fake rule",
                                 "write a Python fake function: `fake: package.module:function`")
            if ty.optional and node.id in self.given:
                return Given(Arg(node.id, ty))
            return Arg(node.id, ty)
        if node.id in ("True", "False"):
            return BoolLit(node.id == "True")
        if node.id == "None":
            return NoneLit()
        if node.id in DTYPES:
            return DtypeLit(DTYPES[node.id])
        if node.id in _FUNCTIONS:
            raise self.error(node.span, f"'{node.id}' is a function; call it: {node.id}(...)")
        if node.span in self.unknown:
            raise _Bad()    # reported with every other unknown name of the rule
        raise self.unknown_name(node, list(self.locals))

    def unknown_name(self, node: _Name, bound: list[str]) -> _Bad:
        known = [a.name for a in self.schema.arguments] + bound
        hint = did_you_mean(node.id, known + list(DTYPES) + list(_FUNCTIONS))
        if hint is None:
            hint = "arguments of this op: " + (", ".join(a.name for a in self.schema.arguments)
                                               or "none")
        return self.error(node.span, f"unknown name '{node.id}'", hint)

    def unknown_names(self, syn: _Rule) -> None:
        """Report every name that nothing in the rule can resolve, all at once: checking stops
        at the first error of each statement, and a misspelling rarely comes alone."""
        roots = [b.value if isinstance(b, _Binding) else b for b in (*syn.bindings, syn.body)]
        nodes = list(walk(*roots))
        bound = [b.name for b in syn.bindings if isinstance(b, _Binding)]
        bound += [n for node in nodes if isinstance(node, _ListComp) for n, _ in node.names]
        called = {id(node.func) for node in nodes if isinstance(node, _Call)}
        called |= {id(node.obj) for node in nodes if isinstance(node, _Attr)
                   and self.torch_module(node.obj, bound)}
        for node in nodes:
            if isinstance(node, _Name) and id(node) not in called and node.id not in bound \
                    and self.schema.argument(node.id) is None and node.id not in _CONSTANTS \
                    and node.id not in DTYPES and node.id not in _FUNCTIONS:
                self.unknown_name(node, bound)
                self.unknown.add(node.span)

    def torch_module(self, node: _Syn, bound: list[str] | None = None) -> bool:
        """Whether `node` is `torch` naming the module (no argument or binding of that name),
        or an attribute of it (`torch.ops.aten`)."""
        while isinstance(node, _Attr):
            node = node.obj
        return (isinstance(node, _Name) and node.id == "torch"
                and self.schema.argument("torch") is None
                and "torch" not in (self.locals if bound is None else bound))

    def torch_attribute(self, node: _Attr) -> _Bad:
        """`torch.<name>`, which a rule does not name: one error, saying what to write."""
        hint = _torch_spelling_hint(node.name) or (
            "rule functions: " + ", ".join(_FUNCTIONS) + "; or a Python fake function "
            "`fake: package.module:function`")
        return self.error(node.span, f"a fake rule names no module: '{_syn_text(self, node)}'",
                          hint)

    # -- expressions

    def expr(self, node: _Syn) -> Expr:
        return self.made(self._expr(node), node)

    def _expr(self, node: _Syn) -> Expr:
        match node:
            case _Name():
                return self.name(node)
            case _Lit():
                return self.literal(node)
            case _IfExp():
                return self.ifexp(node)
            case _Compare() | _In() | _Not() | _And():
                return self.condition(node)
            case _ListComp():
                return self.listcomp(node)
            case _Attr():
                return self.attribute(node)
            case _Call():
                return self.call(node)
            case _Index():
                return self.index(node)
            case _Slice():
                return self.slice(node)
            case _Bin():
                return self.binop(node)
            case _Neg(operand=o):
                return self.in_range(Neg(self.want(o, INT, "the operand of '-'")), node)
            case _Or():
                return self.or_(node)
            case _List(items=items):
                out: list[Expr] = []
                for item in items:
                    if isinstance(item, _Spread):
                        out.append(Spread(self.want(item.value, INT_LIST, "a '*' in a shape")))
                    else:
                        out.append(self.want(item, INT, "a shape element"))
                return ListLit(tuple(out))
            case _Tuple():
                raise self.error(node.span, "a tuple lists the outputs of an op; it cannot be "
                                 "nested in an expression")
            case _Spread():
                raise self.error(node.span, "'*' spreads a list inside a shape `[*sizes]` or a "
                                 "Tensor[] inside broadcast(*tensors)")
            case _Kwarg():
                raise self.error(node.span, "keyword arguments go inside a call")
        raise TypeError(f"unexpected syntax node {node!r}")

    def literal(self, node: _Lit) -> Expr:
        try:
            if node.kind == "int":
                return IntLit(int_literal(node.text))
            if node.kind == "float":
                return FloatLit(float_literal(node.text))
            return StrLit(string_literal(node.text))
        except LiteralError as e:
            start = node.span.start + e.offset
            raise self.error(Span(start, start + e.length), e.message, e.hint) from None

    def want(self, node: _Syn, ty: Ty, role: str, *, optional: bool = False,
             also: tuple[Ty, ...] = ()) -> Expr:
        """Check `node` and require type `ty` (or one of `also`); `optional` admits `ty?`."""
        e = self.expr(node)
        ok = e.ty == ty or e.ty in also or (optional and e.ty == Ty(ty.base, True))
        if not ok:
            got = describe(e)
            hint = None
            if e.ty.optional and e.ty.base is ty.base:
                hint = f"it may be None: give a default with `or`, e.g. `{_syn_text(self, node)} or ...`"
            elif e.ty.base is T.TENSOR and ty == INT_LIST:
                hint = f"the shape of a tensor is `{_syn_text(self, node)}.shape`"
            elif e.ty.base is T.TENSOR and ty == INT:
                hint = f"a size of a tensor is `{_syn_text(self, node)}.size(d)`"
            elif ty.base is T.DEVICE and isinstance(node, _Lit):
                hint = ("fake tensors keep the device they run on: leave `device=` out, or "
                        "give a Device argument or `t.device`")
            raise self.error(node.span, f"{role} must be {_a(ty)}, got {got}", hint)
        return e

    def attribute(self, node: _Attr) -> Expr:
        if self.torch_module(node.obj):
            raise self.torch_attribute(node)
        if node.name == "itemsize":
            return self.itemsize(node)
        if node.name in _METHODS:
            raise self.error(node.span, f"'{node.name}' is a method; call it: "
                             f"{_syn_text(self, node)}()")
        prop = _ATTRS.get(node.name)
        if prop is None:
            raise self.error(node.span, f"unknown tensor attribute '{node.name}'",
                             did_you_mean(node.name, list(_ATTRS) + list(_METHODS))
                             or "a tensor has: " + ", ".join(list(_ATTRS) + [m + "()" for m in _METHODS]))
        return TensorProp(self.tensor(node.obj, f"the object of '.{node.name}'"), prop)

    def itemsize(self, node: _Attr) -> Expr:
        """`d.itemsize`: the bytes of one element of the dtype `d`; a tensor's too, as torch's
        `Tensor.itemsize` is `t.dtype.itemsize`."""
        e = self.expr(node.obj)
        if e.ty == TENSOR or e.ty == OUT:
            return ItemSize(self.made(TensorProp(e, Prop.dtype), node.obj))
        if e.ty == DTYPE:
            return ItemSize(e)
        obj = _syn_text(self, node.obj)
        if e.ty == Ty(T.DTYPE, True):
            raise self.error(node.obj.span, f"'.itemsize' of {describe(e)}, which may be None",
                             f"test it first (`... if {obj} is not None else ...`) or give a "
                             f"default: `({obj} or float32).itemsize`")
        raise self.error(node.obj.span, f"'.itemsize' is the byte size of a dtype, got "
                         f"{describe(e)}",
                         "a ScalarType argument, `t.dtype`, a dtype name (`float32`), or "
                         "`t.element_size()` of a tensor")

    def tensor(self, node: _Syn, role: str) -> Expr:
        """A Tensor argument, or a tensor the rule made (`reduce(broadcast(a, b), None)`)."""
        e = self.expr(node)
        if e.ty != TENSOR and e.ty != OUT:
            hint = None
            if e.ty == Ty(T.TENSOR, True):
                hint = "an optional tensor may be None; only broadcast() accepts one"
            raise self.error(node.span, f"{role} must be a Tensor, got {describe(e)}", hint)
        return e

    # -- conditions

    def condition(self, node: _Syn, in_check: bool = False) -> Expr:
        """A bool that is fixed when the op is traced: never a comparison of sizes."""
        return self.made(self._condition(node, in_check), node)

    def membership(self, node: _In) -> _Syn:
        """`x in (a, b)` as `x == a or x == b`, `x not in (a, b)` as `x != a and x != b`: each
        item is compared as `==` compares, and `x` is evaluated once per item (it names an
        argument or a property, so that is free)."""
        word = "not in" if node.negated else "in"
        items = node.right.items if isinstance(node.right, (_Tuple, _List)) else ()
        if not items or any(isinstance(i, _Spread) for i in items):
            raise self.error(node.right.span, f"'{word}' tests membership in a tuple or list "
                             "written out, of one item or more",
                             f'`quant_type {word} ("nf4", "fp4")`, '
                             f"`dtype {word} (float16, bfloat16)`")
        op, join = ("!=", _And) if node.negated else ("==", _Or)
        out: _Syn | None = None
        for item in items:
            c = _Compare(op, node.left, item, item.span, word)
            out = c if out is None else join(out, c, node.span)
        assert out is not None
        return out

    def _condition(self, node: _Syn, in_check: bool = False) -> Expr:
        if isinstance(node, _In):
            node = self.membership(node)
        if isinstance(node, _Not):
            return Not(self.condition(node.operand, in_check))
        if isinstance(node, (_And, _Or)):
            op = "and" if isinstance(node, _And) else "or"
            left = self.condition(node.left, in_check)
            with self.narrowed(left, op == "and"):
                return BoolOp(op, left, self.condition(node.right, in_check))
        if isinstance(node, _Compare):
            shown = node.written or node.op
            left = self.expr(node.left)
            right = self.expr(node.right)
            if node.op in ("is", "is not"):
                if isinstance(left, Given):     # tested again inside a branch that knows
                    left = left.arg
                if right.ty.base is not T.NONE:
                    raise self.error(node.right.span, f"'{node.op}' only tests for None: "
                                     f"`x {node.op} None`")
                if not left.ty.optional:
                    raise self.error(node.left.span, f"{describe(left)} is never None")
                return Compare(CompareOp(node.op), left, right)
            if node.op in ("<", "<=", ">", ">="):
                # A plain `int` argument is fixed when the op is traced (torch specializes it),
                # so ordering it is no guard on a size: `min(M + k, N) if k < 0 else ...`.
                if not (left.ty == INT and right.ty == INT
                        and self.static(left) and self.static(right)):
                    raise self.error(node.span, f"'{node.op}' compares sizes, which only a "
                                     "check may do: an 'if' on sizes would specialize them",
                                     f"state a precondition with {_CHECK_USAGE}")
                return Compare(CompareOp(node.op), left, right)
            for side, e in ((node.left, left), (node.right, right)):
                # A device is fixed when the op is traced: fake tensors carry their real device.
                if not (self.static(e) or e.ty == Ty(T.DEVICE)):
                    if in_check:
                        raise self.error(side.span, f"'{shown}' in check() compares sizes, "
                                         "shapes, dtypes, devices, str, bool and int "
                                         "arguments with literals, and float and Scalar "
                                         f"arguments with numbers, got {describe(e)}")
                    hint = ("sizes and shapes compare only in check(...): an 'if' on them "
                            "would specialize them under dynamic shapes"
                            if e.ty.base in (T.INT, T.INT_LIST) else None)
                    if e.ty == Ty(T.DEVICE, True):
                        hint = "an optional device may be None; compare devices that are given"
                    raise self.error(side.span, f"'{shown}' in an 'if' compares str, bool, "
                                     "int and dtype arguments with literals, and devices with "
                                     f"devices, got {describe(e)}", hint)
            if left.ty.base is not right.ty.base:
                raise self.error(node.span, f"'{shown}' of {describe(left)} and "
                                 f"{describe(right)}: they are never equal")
            return Compare(CompareOp("==" if node.op == "==" else "!="), left, right)
        return self.fixed_bool(self.expr(node), node)

    @contextmanager
    def narrowed(self, cond: Expr, holds: bool, branch: bool = False) -> Iterator[None]:
        """Optional arguments known not None where `cond` is `holds`, as Python's type checkers
        narrow them. A SymBool on the left of `and`/`or` does not short-circuit (both sides
        are evaluated, py_fake), so it narrows nothing there. In a `branch` of `a if cond else
        b`, `cond` was evaluated whole (and compares no sizes but fixed ints: `k > 2`)."""
        saved = self.given
        if branch or not compares_sizes(cond):
            self.given = saved | _not_none(cond, holds)
        try:
            yield
        finally:
            self.given = saved

    def fixed_bool(self, e: Expr, node: _Syn) -> Expr:
        """`e`, the value of `node`, as a condition: a bool known when tracing."""
        if e.ty != Ty(T.BOOL) or not self.static(e):
            hint = None
            if e.ty.optional:   # Python's `if out:`
                hint = f"test whether it is given: `{_syn_text(self, node)} is not None`"
            raise self.error(node.span, f"a condition must be a bool argument or a comparison, "
                             f"got {describe(e)}", hint)
        return e

    def static(self, e: Expr) -> bool:
        """Whether `e` is known when tracing (an argument that cannot be symbolic, a literal)."""
        if isinstance(e, (StrLit, BoolLit, IntLit, DtypeLit, ItemSize)) or e.ty == DTYPE:
            return True     # a dtype, and so its itemsize, is never symbolic
        if isinstance(e, Item) and e.ty == Ty(T.BOOL):
            return True     # an item of a bool list, at an index `index` made static
        if e.ty == INT and isinstance(e, (TensorProp, Len, Arith, Neg, MinMax)):
            # A rank and a list's length are plain ints (torchao's `weight.dim() == 4`).
            return self.plain_int(e)
        if isinstance(e, (Arg, Given)):     # an optional one where a test tells it is given
            arg = self.schema.argument(e.name if isinstance(e, Arg) else e.arg.name)
            assert arg is not None
            base = strip_optional(arg.type)
            return not e.ty.optional and isinstance(base, BaseType) and base.name in (
                BaseTy.str, BaseTy.bool, BaseTy.int, BaseTy.ScalarType)
        return False

    def check_condition(self, node: _Syn) -> Expr:
        """The condition of check(...): sizes, shapes and dtypes may be compared here (a check
        asserts, it does not branch), besides what `if` conditions take."""
        return self.made(self._check_condition(node), node)

    def _check_condition(self, node: _Syn) -> Expr:
        if isinstance(node, _In):
            node = self.membership(node)
        if isinstance(node, _Not):
            return Not(self.check_condition(node.operand))
        if isinstance(node, (_And, _Or)):
            op = "and" if isinstance(node, _And) else "or"
            left = self.check_condition(node.left)
            with self.narrowed(left, op == "and"):
                return BoolOp(op, left, self.check_condition(node.right))
        if isinstance(node, _Compare) and node.op not in ("is", "is not"):
            left, right = self.expr(node.left), self.expr(node.right)
            if self.float_value(left) and self.float_value(right) and \
                    (isinstance(left, (Arg, Given)) or isinstance(right, (Arg, Given))):
                # torchao's `check(dropout_p == 0.0)`: a float argument with a number
                return Compare(CompareOp(node.op), left, right)
            kinds = {INT: "ints", INT_LIST: "shapes", DTYPE: "dtypes"}
            if left.ty in kinds and left.ty == right.ty:
                if left.ty != INT and node.op not in ("==", "!="):
                    raise self.error(node.span, f"{kinds[left.ty]} compare with '==' and '!=' "
                                     f"only, not '{node.op}'")
                return Compare(CompareOp(node.op), left, right)
            if left.ty.base in (T.INT, T.INT_LIST, T.DTYPE) or \
                    right.ty.base in (T.INT, T.INT_LIST, T.DTYPE):
                raise self.error(node.span, f"'{node.written or node.op}' of "
                                 f"{describe(left)} and {describe(right)}: check() compares "
                                 "sizes with sizes, shapes "
                                 "with shapes and dtypes with dtypes")
        return self.condition(node, in_check=True)

    def float_value(self, e: Expr) -> bool:
        """A `float` or `Scalar` argument (a number, never a size) or a number literal."""
        if isinstance(e, (IntLit, FloatLit)):
            return True
        if isinstance(e, Arg) and not e.ty.optional or isinstance(e, Given):
            arg = self.schema.argument(e.name if isinstance(e, Arg) else e.arg.name)
            return arg is not None and strip_optional(arg.type) in (BaseType(BaseTy.float),
                                                                    BaseType(BaseTy.Scalar))
        return False

    def statement(self, node: _Syn, after: int) -> list[Check]:
        """A `check(condition, "message")` statement before the outputs."""
        if not (isinstance(node, _Call) and isinstance(node.func, _Name)
                and node.func.id == "check"):
            raise self.error(node.span, "before the outputs, a rule has bindings `n = ...;` "
                             "and checks `check(condition, \"message\");` only",
                             "the outputs come last")
        if node.kwargs or not 1 <= len(node.args) <= 2:
            raise self.error(node.span, "check() takes a condition and an optional message: "
                             'check(a.size(0) == b.size(0), "a and b need as many rows")')
        cond = self.check_condition(node.args[0])
        text = _syn_text(self, node.args[0])
        message = f"expected {text}"
        if len(node.args) == 2:
            m = node.args[1]
            if not (isinstance(m, _Lit) and m.kind == "string"):
                raise self.error(m.span, "the message of check() is a string literal")
            message = self.literal(m).value     # type: ignore[union-attr]
        # `check(a and b)` is `check(a); check(b)`: b is evaluated only when a holds, as in
        # Python, and neither is turned into a bool.
        parts: list[Expr] = []
        todo = [cond]
        while todo:
            c = todo.pop()
            if isinstance(c, BoolOp) and c.op == "and":
                todo += [c.right, c.left]
            else:
                parts.append(c)
        return [Check(c, f"{self.schema.name}: {message}", after, text) for c in parts]

    def ifexp(self, node: _IfExp) -> Expr:
        cond = self.condition(node.cond)
        with self.narrowed(cond, True, branch=True):
            then = self.expr(node.then)
        with self.narrowed(cond, False, branch=True):
            orelse = self.expr(node.orelse)
        if then.ty != orelse.ty and T.NONE not in (then.ty.base, orelse.ty.base):
            raise self.error(node.span, f"the branches of 'if' differ: {describe(then)} and "
                             f"{describe(orelse)}")
        return Cond(cond, then, orelse)

    def listcomp(self, node: _ListComp, outputs: bool = False) -> Expr:
        seq_node = node.seq
        if isinstance(seq_node, _Call) and isinstance(seq_node.func, _Name) \
                and seq_node.func.id == "zip":
            if seq_node.kwargs or len(seq_node.args) < 2:
                raise self.error(seq_node.span, "zip() takes two or more lists")
            seq_nodes = list(seq_node.args)
        else:
            seq_nodes = [seq_node]
        if len(seq_nodes) != len(node.names):
            raise self.error(node.span, f"{_count(len(node.names), 'name')} for "
                             f"{_count(len(seq_nodes), 'list')}",
                             "`[a + b for a, b in zip(xs, ys)]`, or one name for one list")
        seqs = []
        for sn in seq_nodes:
            if isinstance(sn, _Call) and isinstance(sn.func, _Name) and sn.func.id == "range":
                seqs.append(self.range(sn))
                continue
            seq = self.expr(sn)
            if seq.ty not in (INT_LIST, Ty(T.TENSOR_LIST)):
                raise self.error(sn.span, f"a comprehension loops over int lists, Tensor[] and "
                                 f"range(n), got {describe(seq)}")
            seqs.append(seq)
        saved = dict(self.loop_vars)
        for (name, span), seq in zip(node.names, seqs):
            if self.schema.argument(name) is not None or name in self.locals:
                raise self.error(span, f"'{name}' is already a name of the rule; pick another")
            self.loop_vars[name] = INT if seq.ty == INT_LIST else TENSOR
        try:
            if outputs:
                elem = self.expr(node.elem)
                if elem.ty != OUT:
                    raise self.error(node.elem.span, f"each output of a Tensor[] return is a new "
                                     f"tensor (like, broadcast, reduce, empty), got "
                                     f"{describe(elem)}")
            else:
                elem = self.want(node.elem, INT, "a shape element")
        finally:
            self.loop_vars = saved
        return ListComp(elem, tuple(n for n, _ in node.names), tuple(seqs),
                        OUT_LIST if outputs else INT_LIST)

    def range(self, node: _Call) -> Expr:
        """`range(n)` in a comprehension: `n` an int fixed at trace time (a Tensor[] return's
        length is never symbolic)."""
        if node.kwargs or len(node.args) != 1:
            raise self.error(node.span, "range() takes one argument here: range(n)")
        n = self.want(node.args[0], INT, "the argument of range()")
        if not (self.static(n) or isinstance(n, Len) or constant(n) is not None):
            raise self.error(node.args[0].span, f"range() needs a count fixed when the op is "
                             f"traced (an int argument, a literal, len(...)), got {describe(n)}",
                             "a SymInt count would make the number of outputs symbolic")
        return Range(n)

    def index(self, node: _Index) -> Expr:
        seq = self.expr(node.obj)
        if seq.ty == INT_LIST:
            return Item(seq, self.want(node.index, INT, "an index"))
        if seq.ty == Ty(T.TENSOR_LIST):
            return Item(seq, self.want(node.index, INT, "an index"), TENSOR)
        if self.bool_list(seq):
            # NATTEN's `bool[] is_causal`, one flag per dim: fixed when traced, as a bool is.
            index = self.want(node.index, INT, "an index")
            if not self.static(index):
                raise self.error(node.index.span, f"a bool list is indexed by an int fixed "
                                 f"when the op is traced (a literal, an int argument), got "
                                 f"`{_syn_text(self, node.index)}`",
                                 "its items are conditions: an index that is a size would "
                                 "specialize it")
            return Item(seq, index, Ty(T.BOOL))
        if seq.ty == TENSOR:
            raise self.error(node.span, "a tensor cannot be indexed in a fake rule",
                             f"its sizes are `{_syn_text(self, node.obj)}.shape[i]`")
        raise self.error(node.obj.span, f"only int lists, bool lists and Tensor[] can be "
                         f"indexed, got {describe(seq)}")

    def bool_list(self, e: Expr) -> bool:
        """Whether `e` is a `bool[]` argument (`bool[]?` where a None test tells it is given)."""
        if not isinstance(e, (Arg, Given)) or e.ty.optional:
            return False
        arg = self.schema.argument(e.name if isinstance(e, Arg) else e.arg.name)
        assert arg is not None
        base = strip_optional(arg.type)
        return isinstance(base, ListType) and base.elem == BaseType(BaseTy.bool)

    def slice(self, node: _Slice) -> Expr:
        seq = self.want(node.obj, INT_LIST, "a sliced value")
        lo = self.want(node.lo, INT, "a slice bound") if node.lo is not None else None
        hi = self.want(node.hi, INT, "a slice bound") if node.hi is not None else None
        step = None
        if node.step is not None:
            step = self.want(node.step, INT, "a slice step")
            if constant(step) in (None, 0):
                raise self.error(node.step.span, "a slice step is a nonzero integer literal",
                                 "for example `t.shape[::2]`, `sizes[::-1]`")
        return SliceOf(seq, lo, hi, step=step)

    def binop(self, node: _Bin) -> Expr:
        left = self.expr(node.left)
        right = self.expr(node.right)
        if node.op == "+" and left.ty == INT_LIST and right.ty == INT_LIST:
            return Concat(left, right)
        if left.ty == INT and right.ty == INT:
            e = Arith(ArithOp(node.op), left, right)
            if node.op in ("//", "%") and constant(right) == 0:
                raise self.error(node.right.span, f"'{node.op}' by zero")
            return self.in_range(e, node)
        if left.ty == INT_LIST or right.ty == INT_LIST:
            raise self.error(node.span, f"'{node.op}' of {describe(left)} and {describe(right)}: "
                             "lists only concatenate with '+'",
                             "shapes are built element by element: `[a * 2, *b.shape[1:]]`")
        bad, bad_node = (left, node.left) if left.ty != INT else (right, node.right)
        hint = None
        if bad.ty == Ty(T.INT, True):
            hint = f"it may be None: give a default with `or`, e.g. `{_syn_text(self, bad_node)} or 0`"
        raise self.error(bad_node.span, f"the operands of '{node.op}' must be ints, got "
                         f"{describe(bad)}", hint)

    def in_range(self, e: Expr, node: _Syn) -> Expr:
        """`e`, unless it is a constant beyond int64 (C++ would overflow, silently)."""
        value = constant(e)
        if value is not None and not INT64_MIN <= value <= INT64_MAX:
            raise self.error(node.span, "the value of this expression is out of range: integers "
                             "are 64-bit", f"the largest is {INT64_MAX}")
        return e

    def or_(self, node: _Or) -> Expr:
        if _is_condition(node.left):
            return self.condition(node)
        value = self.expr(node.left)
        if value.ty == Ty(T.BOOL):      # a bool: the boolean `or` of two conditions
            return self.made(BoolOp("or", self.fixed_bool(value, node.left),
                                    self.condition(node.right)), node)
        if not value.ty.optional:
            raise self.error(node.left.span, f"'or' gives a default to an optional value, or "
                             f"joins two conditions; {describe(value)} is neither")
        default = self.expr(node.right)
        if default.ty.base is not value.ty.base:
            raise self.error(node.right.span, f"the default of {describe(value)} must be "
                             f"{_a(Ty(value.ty.base))}, got {describe(default)}")
        return Fallback(value, default)

    # -- calls

    def bind(self, node: _Call, fname: str, params: tuple[str, ...], required: int,
             variadic: bool = False) -> tuple[list[_Syn], dict[str, _Syn]]:
        """Match a call's arguments to `params` (the first `required` are required)."""
        pos = list(node.args)
        for a in pos:
            if isinstance(a, _Spread) and not (variadic and fname == "broadcast"):
                raise self.error(a.span, f"'*' is not allowed in the arguments of {fname}()")
        if not variadic and len(pos) > len(params):
            raise self.error(node.args[len(params)].span,
                             f"{fname}() takes {_count(len(params), 'argument')} but "
                             f"{len(pos)} were given")
        named: dict[str, _Syn] = {}
        for i, a in enumerate(pos if not variadic else []):
            named[params[i]] = a
        for kw in node.kwargs:
            if kw.name not in params or (variadic and kw.name == params[0]):
                choices = [p for p in params if not (variadic and p == params[0])]
                raise self.error(kw.span, f"{fname}() has no argument '{kw.name}'",
                                 did_you_mean(kw.name, choices)
                                 or ("its keyword arguments: " + ", ".join(choices)
                                     if choices else f"{fname}() takes no keyword arguments"))
            if kw.name in named:
                raise self.error(kw.span, f"{fname}() got argument '{kw.name}' twice")
            named[kw.name] = kw.value
        if variadic:
            if len(pos) < required:
                raise self.error(node.span, f"{fname}() needs at least "
                                 f"{_count(required, 'argument')}")
            return pos, named
        missing = [p for p in params[:required] if p not in named]
        if missing:
            raise self.error(node.span, f"{fname}() is missing its argument '{missing[0]}'",
                             f"{fname}({', '.join(params[:required])}, ...)")
        return pos, named

    def call(self, node: _Call) -> Expr:
        if isinstance(node.func, _Attr):
            return self.method(node, node.func)
        if not isinstance(node.func, _Name):
            raise self.error(node.func.span, "only the rule functions and tensor methods can be "
                             "called")
        fname = node.func.id
        if fname == "check" and self.schema.argument(fname) is None and fname not in self.locals:
            raise self.error(node.span, "check() is a statement, not a value",
                             f"write {_CHECK_USAGE}")
        if fname not in _FUNCTIONS:
            if self.schema.argument(fname) is not None or fname in self.locals:
                raise self.error(node.func.span, f"'{fname}' is not a function")
            raise self.error(node.func.span, f"unknown function '{fname}'",
                             _torch_spelling_hint(fname) or did_you_mean(fname, _FUNCTIONS) or
                             "rule functions: " + ", ".join(_FUNCTIONS))
        return getattr(self, "fn_" + fname)(node)

    def method(self, node: _Call, func: _Attr) -> Expr:
        if self.torch_module(func.obj):
            raise self.torch_attribute(func)
        if func.name not in _METHODS:
            if func.name in _ATTRS:
                raise self.error(func.span, f"'{func.name}' is an attribute, not a method",
                                 f"write `{_syn_text(self, func)}` without parentheses")
            if func.name.startswith("new_") and func.name[4:] in _TORCH_EMPTY:
                # torch-harmonics' layout fakes: `x.new_empty((B, H, W, C))`.
                obj = _syn_text(self, func.obj)
                raise self.error(func.span, f"unknown tensor method '{func.name}'",
                                 f"write empty([sizes], dtype={obj}.dtype), the sizes as a list: "
                                 "a rule gives only the shape, dtype and device of each output")
            raise self.error(func.span, f"unknown tensor method '{func.name}'",
                             did_you_mean(func.name, _METHODS)
                             or "tensor methods: " + ", ".join(m + "()" for m in _METHODS))
        t = self.tensor(func.obj, f"the object of '.{func.name}()'")
        if func.name == "element_size":
            self.bind(node, func.name, (), 0)
            return ItemSize(self.made(TensorProp(t, Prop.dtype), func))
        if func.name == "size":
            _, named = self.bind(node, "size", ("dim",), 0)
            if "dim" in named:
                return TensorSize(t, self.want(named["dim"], INT, "a dimension"))
            return TensorProp(t, Prop.shape)
        self.bind(node, func.name, (), 0)
        prop = _METHODS[func.name]
        assert prop is not None
        return TensorProp(t, prop)

    def sizes(self, node: _Syn, shape: Expr, what: str = "size") -> None:
        """Refuse shape elements that are negative constants (`empty([-1])`)."""
        if isinstance(node, _List) and isinstance(shape, ListLit):
            for item_node, item in zip(node.items, shape.items):
                value = constant(item)
                if value is not None and value < 0:
                    raise self.error(item_node.span, f"a {what} is never negative, got {value}")
        elif isinstance(node, _Bin) and isinstance(shape, Concat):
            self.sizes(node.left, shape.left, what)
            self.sizes(node.right, shape.right, what)
        elif isinstance(node, _IfExp) and isinstance(shape, Cond):
            self.sizes(node.then, shape.then, what)
            self.sizes(node.orelse, shape.orelse, what)

    def opt_kw(self, named: dict[str, _Syn], key: str, ty: Ty) -> Expr | None:
        if key not in named:
            return None
        return self.want(named[key], ty, f"the {key}", optional=True)

    def fn_like(self, node: _Call) -> Expr:
        _, named = self.bind(node, "like", ("tensor", "dtype", "device"), 1)
        return Like(self.tensor(named["tensor"], "the argument of like()"),
                    self.opt_kw(named, "dtype", Ty(T.DTYPE)),
                    self.opt_kw(named, "device", Ty(T.DEVICE)))

    def fn_broadcast(self, node: _Call) -> Expr:
        pos, named = self.bind(node, "broadcast", ("operands", "dtype"), 1, variadic=True)
        operands: list[Expr] = []
        for a in pos:
            if isinstance(a, _Spread):
                operands.append(Spread(self.want(a.value, Ty(T.TENSOR_LIST),
                                                 "a '*' in broadcast()")))
                continue
            e = self.expr(a)
            if e.ty.base not in (T.TENSOR, T.INT, T.BOOL, T.SCALAR) or \
                    (e.ty.optional and e.ty.base is not T.TENSOR):
                raise self.error(a.span, f"broadcast() operands are Tensors and numbers, got "
                                 f"{describe(e)}")
            operands.append(e)
        if not any(o.ty.base in (T.TENSOR, T.TENSOR_LIST) for o in operands):
            raise self.error(node.span, "broadcast() needs at least one Tensor operand")
        return Broadcast(tuple(operands), self.opt_kw(named, "dtype", Ty(T.DTYPE)))

    def fn_reduce(self, node: _Call) -> Expr:
        _, named = self.bind(node, "reduce", ("tensor", "dims", "keepdim", "dtype"), 2)
        t = self.tensor(named["tensor"], "the argument of reduce()")
        dims_node = named["dims"]
        dims = self.expr(dims_node)
        if dims.ty.base not in (T.INT, T.INT_LIST, T.NONE):
            raise self.error(dims_node.span, f"the dims of reduce() must be an int, an int list "
                             f"or None, got {describe(dims)}")
        keepdim: Expr = BoolLit(False)
        if "keepdim" in named:
            keepdim = self.want(named["keepdim"], Ty(T.BOOL), "keepdim")
        return Reduce(t, dims, keepdim, self.opt_kw(named, "dtype", Ty(T.DTYPE)))

    def no_tuple(self, fname: str, what: str, arg: _Syn) -> None:
        """torch's factories take a tuple for a shape (torch-harmonics' fakes build `out_shape =
        (...)`); a rule's tuples list outputs, so it takes lists."""
        if isinstance(arg, _Tuple):
            inner = _syn_text(self, arg).strip()[1:-1].strip().rstrip(",")
            raise self.error(arg.span, f"{what} of {fname}() is a list, not a tuple",
                             f"write `[{inner}]`")

    def fn_empty(self, node: _Call) -> Expr:
        return self.empty(node, "empty", ("shape", "dtype", "device"))

    def fn_empty_strided(self, node: _Call) -> Expr:
        return self.empty(node, "empty_strided", ("shape", "stride", "dtype", "device"))

    def empty(self, node: _Call, fname: str, params: tuple[str, ...]) -> Expr:
        """`empty(shape, ...)`, and `empty_strided(shape, stride, ...)` with its strides."""
        _, named = self.bind(node, fname, params, len(params) - 2)
        strided = "stride" in params
        for key in ("shape", "stride") if strided else ("shape",):
            self.no_tuple(fname, f"the {key}", named[key])
        shape = self.want(named["shape"], INT_LIST, "the shape")
        self.sizes(named["shape"], shape)
        stride = self.want(named["stride"], INT_LIST, "the stride") if strided else None
        if stride is not None:
            self.strides(named["stride"], stride, shape)
        return Empty(shape, self.opt_kw(named, "dtype", Ty(T.DTYPE)),
                     self.opt_kw(named, "device", Ty(T.DEVICE)), self.first_tensor,
                     stride=stride)

    def strides(self, node: _Syn, stride: Expr, shape: Expr) -> None:
        """Refuse strides that no kernel can give: negative, from dynamic(), or not one per
        size."""
        self.sizes(node, stride, "stride")
        if any(isinstance(n, Dynamic) for n in walk(stride)):
            raise self.error(node.span, "dynamic() in a stride is a new "
                             "data-dependent size, which no size of the shape is",
                             "bind a data-dependent size to a name, and use it in both: "
                             "`n = dynamic(); empty_strided([n, 4], [1, n])`")
        if isinstance(shape, ListLit) and isinstance(stride, ListLit) and \
                len(shape.items) != len(stride.items):
            n, k = len(shape.items), len(stride.items)
            raise self.error(node.span, f"empty_strided() has {n} size"
                             f"{'s' if n != 1 else ''} but {k} stride{'s' if k != 1 else ''}",
                             "give one stride per size")

    def fn_dynamic(self, node: _Call) -> Expr:
        _, named = self.bind(node, "dynamic", ("min", "max"), 0)
        lo = self.want(named["min"], INT, "min") if "min" in named else None
        hi = self.want(named["max"], INT, "max") if "max" in named else None
        for key, e in (("min", lo), ("max", hi)):
            if e is not None and (constant(e) or 0) < 0:
                raise self.error(named[key].span, f"the {key} of a size is never negative, got "
                                 f"{constant(e)}")
            if e is not None and not self.plain_int(e):
                raise self.error(named[key].span, f"the {key} of dynamic() must be known when the "
                                 "op is traced: a literal, an `int` argument, len() or dim()",
                                 "torch.compile passes tensor sizes and SymInt arguments as "
                                 "symbols, and new_dynamic_size() takes plain ints; leave it out")
        low = constant(lo) if lo is not None else None
        high = constant(hi) if hi is not None else None
        if low is not None and high is not None and low > high:
            # torch fails only when the op is traced, with no pointer to the rule.
            raise self.error(named["max"].span, f"the max of dynamic() ({high}) is below its min "
                             f"({low})")
        return Dynamic(lo, hi)

    def plain_int(self, e: Expr) -> bool:
        """Whether `e` is a plain int when the op is traced (never a symbol)."""
        match e:
            case IntLit() | Len() | ItemSize():
                return True
            case TensorProp(prop=prop):
                return prop is Prop.ndim
            case Arg(name=name):
                arg = self.schema.argument(name)
                return arg is not None and strip_optional(arg.type) == BaseType(BaseTy.int)
            case Arith() | Neg() | MinMax():
                return all(self.plain_int(c) for c in children(e))
        return False

    def fn_promote_types(self, node: _Call) -> Expr:
        pos, _ = self.bind(node, "promote_types", ("dtypes",), 2, variadic=True)
        return PromoteTypes(tuple(self.want(a, DTYPE, "an argument of promote_types()")
                                  for a in pos))

    def fn_sum(self, node: _Call) -> Expr:
        _, named = self.bind(node, "sum", ("sizes",), 1)
        return Sum(self.want(named["sizes"], INT_LIST, "the argument of sum()"))

    def fn_len(self, node: _Call) -> Expr:
        _, named = self.bind(node, "len", ("seq",), 1)
        seq = self.expr(named["seq"])
        if seq.ty not in (INT_LIST, Ty(T.TENSOR_LIST), Ty(T.LIST)):
            hint = None
            if seq.ty.optional and seq.ty.base in (T.INT_LIST, T.TENSOR_LIST, T.LIST):
                text = _syn_text(self, named["seq"])
                hint = f"an optional list may be None: `len({text}) if {text} is not None else 0`"
            raise self.error(named["seq"].span, f"len() takes a list, got {describe(seq)}", hint)
        return Len(seq)

    def _minmax(self, node: _Call, fn: str) -> Expr:
        pos, _ = self.bind(node, fn, ("values",), 2, variadic=True)
        return MinMax(fn, tuple(self.want(a, INT, f"an argument of {fn}()") for a in pos))

    def fn_max(self, node: _Call) -> Expr:
        return self._minmax(node, "max")

    def fn_min(self, node: _Call) -> Expr:
        return self._minmax(node, "min")

    # -- the rule

    def rule(self, syn: _Rule, returns: list[Return | str]) -> FakeRule | None:
        """`returns`: each return of the schema, or the name of the argument it returns."""
        bindings: list[Binding] = []
        checks: list[Check] = []
        ok = True
        self.unknown_names(syn)
        if isinstance(syn.body, _Binding):
            self.error(syn.body.name_span, "a rule ends with its outputs, not a binding",
                       f"write the outputs after it: `{syn.body.name} = ...; like(...)`")
            return None
        for b in syn.bindings:
            if not isinstance(b, _Binding):
                try:
                    checks.extend(self.statement(b, len(bindings)))
                except _Bad:
                    ok = False
                continue
            try:
                if self.schema.argument(b.name) is not None:
                    raise self.error(b.name_span, f"'{b.name}' is an argument of the op; a "
                                     "binding needs another name")
                if b.name in self.locals:
                    raise self.error(b.name_span, f"'{b.name}' is bound twice")
                if b.name in _FUNCTIONS or b.name in DTYPES or b.name in _CONSTANTS \
                        or b.name == "torch" or b.name.startswith("_"):
                    raise self.error(b.name_span, f"'{b.name}' cannot be a binding name")
                value = self.expr(b.value)
                if value.ty.base is T.OUT:
                    raise self.error(b.value.span, "outputs are written in the last expression, "
                                     "not bound", "bind sizes and shapes, e.g. `n = dynamic();`")
                self.locals[b.name] = value.ty
                bindings.append(Binding(b.name, value))
            except _Bad:
                self.bad_locals.add(b.name)
                ok = False
        optional = [r for r in returns if optional_return_arg(self.schema, r) is not None]
        fresh = [ret for r, ret in zip(returns, self.schema.returns)
                 if isinstance(r, Return) or r in optional]
        items = list(syn.body.items) if isinstance(syn.body, _Tuple) else [syn.body]
        if not fresh and _is_check(syn.body):
            # Checks alone: the outputs follow from the schema (bitsandbytes' `.out` fakes
            # check `out` before the kernel writes it).
            try:
                checks.extend(self.statement(syn.body, len(bindings)))
            except _Bad:
                ok = False
            if not ok:
                return None
            return FakeRule(tuple(bindings), tuple(ReturnArg(r) for r in returns
                                                   if isinstance(r, str)),
                            self.text.text, tuple(checks), self.text, tuple(self.spans))
        if not fresh:
            outs = [r for r in returns if isinstance(r, str)
                    and self.schema.argument(r).kwarg_only]  # type: ignore[union-attr]
            if not outs or len(outs) != len(returns):
                what = ("returns nothing" if not returns else
                        "returns only the arguments it mutates in place")
                self.error(syn.body.span, f"this op {what}, so its fake kernel follows from the "
                           "schema", "remove the `fake:` key, or keep only its checks: "
                           '`check(out.dtype == int32, "out must be int32")`')
                return None
            # An out= op: the rule gives the shape each out argument is resized to.
            if len(items) != len(outs):
                self.error(syn.body.span, f"the rule gives {_count(len(items), 'output')} but the "
                           f"op has {_count(len(outs), 'out argument')}")
                return None
            resized: list[Output] = []
            for name, item in zip(outs, items):
                try:
                    e = self.expr(item)
                    if e.ty != OUT:
                        raise self.error(item.span, f"the shape of out argument '{name}' is "
                                         f"given as a new tensor (like, empty, ...), got "
                                         f"{describe(e)}")
                    resized.append(ReturnArg(name, e))
                except _Bad:
                    ok = False
            if not ok or not self.dynamic_reaches_outputs(syn, bindings, resized):
                return None
            return FakeRule(tuple(bindings), tuple(resized), self.text.text,
                            tuple(checks), self.text, tuple(self.spans))
        if len(items) != len(fresh):
            extra = "" if len(fresh) == len(returns) else " (mutated-argument returns excluded)"
            if optional:
                names = ", ".join(f"'{n}'" for n in optional)
                one = len(optional) == 1
                extra += (f" (the returned optional {'argument' if one else 'arguments'} {names} "
                          f"{'takes an item' if one else 'take items'}: the output when it is "
                          "None)")
            hint = self.outputs_hint(fresh) if len(fresh) > 1 \
                else "write a single output, without a tuple"
            self.error(syn.body.span, f"the rule gives {_count(len(items), 'output')} but the op "
                       f"returns {len(fresh)}{extra}", hint)
            return None
        outputs: list[Output] = []
        it = iter(items)
        for i, r in enumerate(returns):
            if isinstance(r, str) and optional_return_arg(self.schema, r) is None:
                outputs.append(ReturnArg(r))
                continue
            item = next(it)
            try:
                if isinstance(r, str):
                    # The output when the optional argument `r` is None.
                    ret = self.schema.returns[i]
                    outputs.append(ReturnArg(r, otherwise=self.output(item, ret)))
                else:
                    outputs.append(self.output(item, r))
                    self.int_return_fixed(item, r, outputs[-1], bindings)
            except _Bad:
                ok = False
        if not ok or not self.dynamic_reaches_outputs(syn, bindings, outputs):
            return None
        return FakeRule(tuple(bindings), tuple(outputs), self.text.text, tuple(checks),
                        self.text, tuple(self.spans))

    def dynamic_reaches_outputs(self, syn: _Rule, bindings: list[Binding],
                                outputs: list[Output]) -> bool:
        """Every binding that makes a `dynamic()` size is in the outputs whichever branch runs:
        bindings are evaluated up front, and torch refuses a fake that makes a data-dependent
        size its outputs do not have (PendingUnbackedSymbolNotFound, when tracing)."""
        reached: set[str] = set()
        for o in outputs:
            reached |= _surely(o)
        for b in reversed(bindings):
            if b.name in reached:
                reached |= _surely(b.value)
        used = {n.name for n in walk(*outputs, *(b.value for b in bindings))
                if isinstance(n, Local)}
        spans = {b.name: b.name_span for b in syn.bindings if isinstance(b, _Binding)}
        ok = True
        for b in bindings:
            if _DYNAMIC in _surely(b.value) and b.name not in reached:
                if b.name in used:
                    which = "only some branches of the outputs use it"
                    hint = ("call dynamic() in the branch that needs it: "
                            "`empty([n]) if n is not None else empty([dynamic()])`")
                else:
                    which, hint = "no output uses it", f"remove the binding '{b.name}'"
                self.error(spans[b.name], f"'{b.name}' is a dynamic() size, but {which}: torch "
                           "refuses a fake kernel that makes a data-dependent size its outputs do "
                           "not have", hint)
                ok = False
        if not ok:
            return False
        # torch finds a data-dependent size in an output size that is the size itself (or a
        # multiple of it), never inside a sum: `idx.size(0) + n` leaves `n` unbound when tracing.
        dynamic = {b.name for b in bindings if isinstance(b.value, Dynamic)}
        read_by_bindings = {n.name for b in bindings for n in walk(b.value) if isinstance(n, Local)}
        seen: dict[str, bool] = {}      # binding -> whether an occurrence is outside any sum
        inline: list[Node] = []
        for o in outputs:
            for node, in_sum in _sizes_in_sums(o, False):
                if isinstance(node, Local) and node.name in dynamic:
                    seen[node.name] = seen.get(node.name, False) or not in_sum
                elif isinstance(node, Dynamic) and in_sum:
                    inline.append(node)
        for b in bindings:
            if b.name in seen and not seen[b.name] and b.name not in read_by_bindings:
                self.error(spans[b.name], f"'{b.name}' is a dynamic() size, but the outputs have "
                           "it only inside sums: torch binds a data-dependent size only from an "
                           "output size that is that size (or a multiple of it), and refuses this "
                           "fake kernel when tracing (pending unbacked symbols)",
                           f"give one output the size alone, or make each size that adds to "
                           f"'{b.name}' a dynamic() size of its own")
                ok = False
        for node in inline:
            self.error(self.span_of(node) or syn.body.span, "a dynamic() size inside a sum: torch "
                       "binds a data-dependent size only from an output size that is that size "
                       "(or a multiple of it), and refuses this fake kernel when tracing (pending "
                       "unbacked symbols)", "make the whole size dynamic(): `empty([dynamic()])`")
            ok = False
        return ok

    def span_of(self, node: Node) -> Span | None:
        return next((span for n, span in self.spans if n is node), None)

    def outputs_hint(self, fresh: list[Return]) -> str:
        """An example rule with one item per return of `fresh`, each of its return's kind."""
        t = self.first_tensor
        tensors = next((a.name for a in self.schema.arguments
                        if arg_ty(a.type) == Ty(T.TENSOR_LIST)), None)
        items = []
        for r in fresh:
            ty = arg_ty(r.type)
            if ty == Ty(T.TENSOR_LIST):
                items.append(f"[like(t) for t in {tensors}]" if tensors else
                             f"[like({t})]" if t else "[empty([n]) for i in range(k)]")
            elif ty.base is T.TENSOR:
                items.append(f"like({t})" if t else "empty([n])")
            elif ty == INT:
                items.append(f"{t}.numel()" if t else "dynamic()")
            else:
                return (f"write one item per output; a rule cannot describe a {r.type} return, "
                        "a Python fake function can: `fake: package.module:function`")
        return f"write one item per output: `({', '.join(items)})`"

    def output(self, item: _Syn, ret: Return) -> Expr:
        ty = arg_ty(ret.type)
        what = f"return '{ret.name}'" if ret.name else f"return type '{ret.type}'"
        if ty == Ty(T.TENSOR_LIST):
            return self.list_output(item, what)
        e = self.expr(item)
        if ty.base is T.TENSOR:
            if e.ty == OUT or (ty.optional and e.ty.base is T.NONE):
                return e
            hint = None
            if e.ty.base is T.TENSOR:
                hint = (f"an output is a new tensor: `like({_syn_text(self, item)})`; a fake "
                        "kernel returning its input would alias it")
            raise self.error(item.span, f"the output for {what} must be a new tensor "
                             f"(like, broadcast, reduce, empty), got {describe(e)}", hint)
        if ty == INT:
            if e.ty == INT:
                return e
            raise self.error(item.span, f"the output for {what} must be a size, got {describe(e)}")
        raise self.error(item.span, f"a fake rule cannot describe {what}",
                         "write a Python fake function: `fake: package.module:function`")


    def int_return_fixed(self, item: _Syn, ret: Return, out: Expr,
                         bindings: list[Binding]) -> None:
        """An `int` return is guarded to a Python int when the op is traced (torch's binding of
        the return type), which a data-dependent size cannot be: torch.compile and torch.export
        would fail on every call ("Could not extract specialized integer")."""
        if strip_optional(ret.type) == BaseType(BaseTy.int) and _made_with_dynamic(out, bindings):
            what = f"return '{ret.name}'" if ret.name else f"return type '{ret.type}'"
            symint = "SymInt?" if isinstance(ret.type, OptionalType) else "SymInt"
            raise self.error(item.span, f"the output for {what} is a dynamic() size, but torch "
                             "makes an int return a Python int when tracing, which a "
                             "data-dependent size cannot be: torch.compile and torch.export "
                             "would fail on every call",
                             f"declare the return `{symint}`, which may hold a data-dependent "
                             "size")

    def list_output(self, item: _Syn, what: str) -> Expr:
        """The outputs of a Tensor[] return: a list of new tensors, or a comprehension making
        one per element of a list argument or of `range(n)`."""
        if isinstance(item, _ListComp):
            return self.listcomp(item, outputs=True)
        if isinstance(item, _IfExp):
            # Each branch is a list of outputs (FBGEMM's `[values, lengths, weights] if
            # weights is not None else [values, lengths]`), not a shape.
            cond = self.condition(item.cond)
            with self.narrowed(cond, True, branch=True):
                then = self.list_output(item.then, what)
            with self.narrowed(cond, False, branch=True):
                orelse = self.list_output(item.orelse, what)
            return Cond(cond, then, orelse)
        if isinstance(item, _List):
            outs = []
            for i in item.items:
                e = self.expr(i) if not isinstance(i, _Spread) else None
                if e is None or e.ty != OUT:
                    raise self.error(i.span, f"each output of {what} is a new tensor (like, "
                                     f"broadcast, reduce, empty), got "
                                     f"{describe(e) if e is not None else 'a spread'}")
                outs.append(e)
            return OutList(tuple(outs))
        e = self.expr(item)
        raise self.error(item.span, f"the output for {what} is a list of new tensors (the "
                         f"return is a Tensor[]), got {describe(e)}",
                         "`[like(t) for t in tensors]`, `[empty([n]) for i in range(k)]` or "
                         "`[like(a), like(b)]`")


_ARITH = {ArithOp.add: operator.add, ArithOp.sub: operator.sub, ArithOp.mul: operator.mul,
          ArithOp.floordiv: operator.floordiv, ArithOp.mod: operator.mod}


def constant(e: Expr) -> int | None:
    """The value of an int expression made of literals only (Python's arithmetic), else None."""
    match e:
        case IntLit(value=v):
            return v
        case Neg(operand=o):
            inner = constant(o)
            return None if inner is None else -inner
        case Arith(op=op, left=a, right=b):
            x, y = constant(a), constant(b)
            if x is None or y is None or (op in (ArithOp.floordiv, ArithOp.mod) and y == 0):
                return None
            return _ARITH[op](x, y)
        case MinMax(fn=fn, items=items):
            values = [constant(i) for i in items]
            if any(v is None for v in values):
                return None
            return (max if fn == "max" else min)(values)  # type: ignore[type-var]
    return None


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _a(ty: Ty) -> str:
    names = {T.TENSOR: "a Tensor", T.TENSOR_LIST: "a Tensor[]", T.INT: "an int",
             T.INT_LIST: "an int list", T.LIST: "a list", T.BOOL: "a bool", T.SCALAR: "a number",
             T.DTYPE: "a dtype", T.DEVICE: "a device", T.STR: "a string", T.NONE: "None",
             T.OUT: "an output tensor", T.OUT_LIST: "a list of output tensors",
             T.OTHER: "a supported value"}
    return names[ty.base] + (" or None" if ty.optional else "")


def describe(e: Expr) -> str:
    """How a message names the value `e`: "int argument 'n'", "an int list", ..."""
    if isinstance(e, Arg):
        return f"{e.ty} argument '{e.name}'"
    if isinstance(e, Given):
        return f"{e.arg.ty} argument '{e.arg.name}' (not None here)"
    if isinstance(e, Local):
        return f"'{e.name}' ({e.ty})"
    return _a(e.ty)


def _syn_text(checker: _Checker, node: _Syn) -> str:
    return checker.text.text[node.span.start:node.span.end]


# --------------------------------------------------------------------------------------------------
# Entry points


def mutated_returns(schema: FunctionSchema) -> list[Return | str]:
    """Each return, or the name of the mutated argument it returns (same alias set, written)."""
    out: list[Return | str] = []
    for r in schema.returns:
        ann = r.annotation
        target = None
        if ann is not None and ann.is_write:
            for a in schema.arguments:
                if a.annotation is not None and a.annotation.alias_set == ann.alias_set:
                    target = a.name
                    break
        out.append(target if target is not None else r)
    return out


def optional_return_arg(schema: FunctionSchema, returned: Return | str) -> str | None:
    """`returned` when it names a `Tensor(a!)?` argument: the op then returns that argument
    when it is given and a new tensor when it is None (FlashAttention's `out`)."""
    if not isinstance(returned, str):
        return None
    a = schema.argument(returned)
    return returned if a is not None and isinstance(a.type, OptionalType) else None


def view_return(schema: FunctionSchema) -> Return | None:
    """A return that aliases an input without writing it (a view), which rules cannot make."""
    for r in schema.returns:
        if r.annotation is not None and not r.annotation.is_write:
            return r
    return None


def schema_fake(schema: FunctionSchema) -> FakeRule | None:
    """The fake kernel that follows from the schema alone: every return is a mutated argument,
    or there are none. None when the op needs a rule."""
    returns = mutated_returns(schema)
    if any(isinstance(r, Return) or optional_return_arg(schema, r) for r in returns):
        return None
    return FakeRule((), tuple(ReturnArg(r) for r in returns if isinstance(r, str)))


def parse_fake_rule(text: Located, schema: FunctionSchema, diags: Diagnostics) -> FakeRule | None:
    """Parse and check the rule `text` of the op `schema`; errors go to `diags` (then None)."""
    try:
        syn = _parser().parse(text.text)
    except ExprSyntaxError as err:
        diags.error(text.at(err.span.start, err.span.end - err.span.start), err.message, err.hint)
        return None
    view = view_return(schema)
    if view is not None:
        diags.error(text.loc, f"'{schema.name}' returns a view of an input ({view.type}); a fake "
                    "rule makes new tensors only",
                    "write a Python fake function: `fake: package.module:function`")
        return None
    checker = _Checker(text, schema, diags)
    return checker.rule(syn, mutated_returns(schema))


def fake_of(op: Op) -> FakeRule | PyRef | None:
    """The op's fake kernel: its rule or Python function, else what follows from its schema."""
    if isinstance(op.fake, (FakeRule, PyRef)):
        return op.fake
    keys = {k for k, _ in op.dispatch}
    if keys & {DispatchKey.Meta, DispatchKey.CompositeImplicitAutograd} or not keys:
        return None
    return schema_fake(op.schema)
