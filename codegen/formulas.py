"""Derivative formulas: the `derivatives:` section of an op -> checked `Derivatives` IR.

`codegen.dest.py_reg` turns the IR into an autograd.Function applied by the op's Autograd kernel
(Note [Generated autograd] there), saving for backward only what the formulas read.

Language reference
==================

In the spirit of PyTorch's derivatives.yaml: one entry per differentiable input, mapping the input's
name to a Python expression for its gradient.

    - func: scaled_mul(Tensor self, Tensor other, *, float alpha=1.0) -> Tensor
      derivatives:
        self: unbroadcast(grad * other * alpha, self)
        other: exops.scaled_mul_backward(grad, self, other, alpha)   # an op of this library
    - func: minmax(Tensor self) -> (Tensor min, Tensor max)
      derivatives:
        self: grad_min * (self == min) + grad_max * (self == max)
    - func: lookup(Tensor table, Tensor index) -> Tensor
      derivatives:
        table, index: (torch.zeros_like(table).index_add(0, index, grad), None)
        # equivalently: `table: ...` and `index: non_differentiable`

Keys
----
- `<input>: <formula>`: the gradient of one Tensor input (`Tensor`, `Tensor?`, `Tensor[]`, whose
  formula gives a list of gradients, one per tensor, `None` for one without:
  `[unbroadcast(grad * w, t) if w != 0 else None for t, w in zip(tensors, weights)]`).
- `<a>, <b>: <formula>`: one formula returning a tuple, one gradient per named input (`None` for
  no gradient).
- `<input>: non_differentiable`: the input gets no gradient (integer indices, masks, ...).
  A keyword-only Tensor input takes this only (none at all where `register_autograd` is used).
  Every Tensor input needs a formula or `non_differentiable`; no gradient is ever silently zero.
- `output_differentiability: [true, false]`: one flag per return; a `false` output is marked
  non-differentiable (default: every Tensor return is differentiable).

Names in a formula
------------------
- `grad`: the gradient of the output (when exactly one output is differentiable);
  `grad_<name>` for a named return, `grads[i]` for the i-th return's gradient. The gradient of
  a `Tensor[]` return is a list of tensors, one per element (as is its value, `result`): index it
  or loop over it (`grad[0]`, `[g * 2 for g in grad]`); treating it as a tensor (`grad * 2`,
  `grad.sum()`, `unbroadcast(grad, x)`) is an error, as it is for a `Tensor[]` input.
- An input named like one of these (a backward op's `Tensor grad`) is the input: the output's
  gradient is then `grads[0]` (or `grad_<name>`), and the input may have a formula of its own.
- The op's inputs by name; `result` (one return), a return's name, or `results[i]`.
- `unbroadcast(g, t)`: `g` summed down to the shape of `t` (the gradient of a broadcasting op).
- `not_implemented("why")`: the gradient raises a clear error when it is needed.
- The public functions, classes and constants of the modules `torch`, `torch.nn`,
  `torch.nn.functional`, `torch.linalg`, `torch.special`, `torch.fft`, `torch.autograd`, and of
  `torch.Tensor` (`torch.where`, `torch.nn.functional.gelu`, `torch.float32`, `torch.pi`), named
  through those modules only: not other modules (`torch.os`, `torch.jit`), not attributes of a
  torch function or object (`torch.ops.aten.mul`, `torch.where.__globals__`), not torch's file
  I/O and global settings (`torch.load`, `torch.save`, `torch.from_file`, `torch.compile`,
  `torch.set_*`, `torch.manual_seed`). The recorded list is `codegen/torch_names.json`. A call
  of a torch function or tensor method must fit one of its Python signatures (keywords, number of
  arguments; `codegen/torch_signatures.json`); torch.linalg, torch.fft and torch.special go
  unchecked.
- Attributes and methods of values: those of tensors (`grad.sum_to_size(...)`, `self.shape`),
  and of dtypes, `torch.finfo`/`iinfo` and sizes (`eps`, `tiny`, `bits`, `count`, ...). No name
  starting with `_` anywhere (`__class__`, `_base`).
- Python operators (not the bitwise `& | ^ ~`: `torch.logical_and(a, b)`, ...), conditionals,
  literals, slices with steps (`x[::2]`, `x[1:-1:2]`), list comprehensions with an optional
  condition (the gradient of `self` of `spread(Tensor self, float[] weights) -> Tensor[]`:
  `sum([g * w for g, w in zip(grad, weights) if w != 0], torch.zeros_like(self))`) and the
  builtins `abs enumerate float int len list max min range sum tuple zip`. `unbroadcast` and
  `not_implemented` are only called.
- Ops of this library: `<namespace>.<name>(...)` (`exops.scaled_mul_backward`), with an overload
  `<namespace>.<name>.<overload>(...)`, or a bare name that names an op of the same namespace.

Bindings
--------
A formula may name values before its expression, Python style, separated by `;`:

    self: t = torch.tanh(self / limit); grad * (1 - t * t)

Each binding is computed once, in order, when the formula runs; later bindings and the
expression may use it. A binding's name is new: not an input, not a name the language defines
(`grad`, `result`, `torch`, builtins, return names), not starting with `_`. Bindings belong to
their formula; another formula of the op writes its own.

Conditions
----------
A conditional's condition, a comprehension's `if`, the operands of `and`, `or` and `not`, and
what `max` and `min` compare are tested in Python when the formula runs. They may read sizes
(`x.dim()`, `x.size(0)`, `x.shape`, `x.numel()`), dtypes, devices, `x is None`, `x.requires_grad`
and non-Tensor arguments, not tensor values (`x.sum() > 0`, `x.any()`, `x.item()`, `float(x)`,
the truth of a `Tensor?` input, a Tensor a library op returns: `exops.norm(x).sum() > 0`, an
`int` return its fake rule makes with `dynamic()`; one made of sizes is a size): torch.compile
cannot trace a branch on them and C++ autograd cannot take one. Select elementwise instead:
`torch.where(x.sum() > 0, grad, -grad)`, `torch.logical_and(a, b)`, `torch.maximum(a, b)`.

Literals
--------
Python's, within what generated code can carry: integers are decimal, without leading zeros, and
64-bit (up to 9223372036854775807); floats are finite doubles (`1e999` is an error); strings are
quoted with `'` or `"` and take Python's escapes (`\\n`, `\\x41`, `\\u00e9`, `\\N{BULLET}`,
...), but no NUL, no lone surrogate and no raw control character (write `\\t`, not a
tab). `x is <literal>` (use `==`), calling a literal and indexing a number are errors, as Python
warns about them. A formula nests at most 100 levels deep.

Saving for backward
-------------------
An input used only through `.shape`, `.size()`, `.dim()`, `.ndim`, `.dtype`, `.device` or as the
second argument of `unbroadcast` has only that metadata saved, never the tensor. Other Tensor
inputs and used results go through `ctx.save_for_backward`; other arguments are kept on `ctx`.

Double backward
---------------
A backward built from differentiable ops (torch functions, library ops that have derivatives or
a CompositeImplicitAutograd kernel) is itself differentiable. A formula that calls a library op
without derivatives makes its op differentiable once: differentiating the gradient again raises an
error naming the op and the missing formula.

Checks
------
Formulas are parsed (LALR, `grammar/formula.lark`) and checked when the op file is loaded:
unknown names, names outside the vocabulary above, literals, inputs without formulas, formulas
for non-Tensor inputs, `grad` where several outputs are differentiable, out-of-range `grads[i]`,
Tensor lists used as tensors, binding names the language owns, slice steps of zero, conditions on
tensor values, numbers given to torch functions taking tensors only (`torch.maximum(x, 0.5)`),
floats as indices or slice bounds (`x[:x.size(0) / 2]`: sizes divide with `//`; a `float?` too,
unless a condition around tells it is None: `x[:m] if m is None else ...`);
calls to library ops are checked against their schemas (unknown op, too many arguments, unknown
keywords, missing required arguments, an argument its parameter surely cannot take: a number or
shape for a Tensor, a shape (`x.shape`, `x.size()`) for an int, SymInt, float, bool or Scalar
where one size is `x.size(i)`, a number for a list such as `SymInt[]`, a Tensor or Tensor list
for any of these, whose value torch.ops would read at backward, which neither torch.compile nor
vmap can; a float for an int, SymInt, ScalarType, Layout or MemoryFormat, or as an item of an
`int[]` (`x.size(0) / 2` is a float: sizes divide with `//`), and a Scalar argument there, which
may hold one, or a `float[]` or `Scalar[]` argument, or a list holding a float or a Scalar
(`[n, 0.5]`, `[v / 2 for v in dims]`), for an `int[]` (its items are floats, even whole ones);
a value torch.ops refuses for a str, ScalarType, Device, Layout, MemoryFormat or
number parameter (a number for a str, a string for an int, a dtype for a float); None (`None`,
an optional input or a binding that may be None, `n if c else None`) for a parameter that is
not optional, a bool or a Tensor, or as an item of a list other than a `bool[]` or `Tensor?[]`,
unless a condition around the call tells it is not (`ex.f(grad, n) if n is not None else
grad`, `n is not None and ...`, a comprehension's `if`, a binding `has = n is not None` tested);
besides None, an optional input is checked as a value of its type is. What torch.ops converts
passes: an int or a bool for any number, a float for a bool, a dtype, layout or memory
format for an `int`, an int for a ScalarType, a string for a Device) once the whole library is
loaded (`check` given some op files knows their ops only: a call of another file's op is unknown
there, and its error says so).

A formula's mistakes are all reported where they are in parts that do not depend on each other:
its bindings and expression, a call's function and arguments, an operator's operands, items,
branches, slice bounds; of a call of a library op, its first wrong argument only (arguments out
of order make several wrong at once), and every call.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache, partial
from importlib import resources
from typing import Callable, Iterator, Sequence, Union

from codegen.diagnostics import Diagnostics, Loc, closest, did_you_mean, with_article as _a
from codegen.enums import DTYPE_NAMES, LAYOUTS, MEMORY_FORMATS, SCALAR_TYPE_NAMES, is_floating
from codegen.model import (
    Argument,
    BaseTy,
    BaseType,
    DerivativesSpec,
    DispatchKey,
    FunctionSchema,
    ListType,
    Located,
    Op,
    OpLibrary,
    OptionalType,
    Return,
    Span,
    is_base,
    is_tensor_like,
    strip_optional,
    is_tensor_list,
)
from codegen.expr import ExprParser, ExprSyntaxError, Node, children, token_span, walk
from codegen.literals import LiteralError, float_literal, int_literal, string_literal
from codegen.shape import FakeRule, fake_of
from codegen.tags import shape_tag
from codegen import torch_signatures

NON_DIFFERENTIABLE = "non_differentiable"
BUILTINS = ("unbroadcast", "not_implemented")
# Python builtins a formula may call.
PY_BUILTINS = ("abs", "enumerate", "float", "int", "len", "list", "max", "min", "range", "sum",
               "tuple", "zip")
# Tensor attributes and methods that read metadata only (see "Saving for backward").
META_ATTRS = {"shape": "shape", "ndim": "shape", "dtype": "dtype", "device": "device"}
META_METHODS = {"size": "shape", "dim": "shape"}

# --------------------------------------------------------------------------------------------------
# The IR


@dataclass(frozen=True)
class Const(Node):
    """A literal: number, string, True, False, None (`value` is the Python value)."""
    value: object


@dataclass(frozen=True)
class EllipsisLit(Node):
    pass


@dataclass(frozen=True)
class InputRef(Node):
    name: str


@dataclass(frozen=True)
class GradRef(Node):
    """The gradient of return `index`."""
    index: int


@dataclass(frozen=True)
class GradsRef(Node):
    """`grads`: every output gradient, as a tuple."""


@dataclass(frozen=True)
class ResultRef(Node):
    index: int


@dataclass(frozen=True)
class ResultsRef(Node):
    """`results`: every output, as a tuple."""


@dataclass(frozen=True)
class TorchRef(Node):
    """`torch.<path>`; an empty path is the module itself."""
    path: tuple[str, ...]


@dataclass(frozen=True)
class BuiltinRef(Node):
    name: str                       # one of BUILTINS


@dataclass(frozen=True)
class PyBuiltinRef(Node):
    name: str                       # one of PY_BUILTINS


@dataclass(frozen=True)
class LoopVar(Node):
    """A name bound by a list comprehension."""
    name: str


@dataclass(frozen=True)
class LocalRef(Node):
    """A name bound before the formula's expression (`t = torch.tanh(self); ...`)."""
    name: str


@dataclass(frozen=True)
class ListComp(Node):
    """`[elem for a, b in iterable if cond]`."""
    elem: Expr
    names: tuple[str, ...]
    iterable: Expr
    cond: Expr | None = None


@dataclass(frozen=True)
class OpRef(Node):
    """An op of the library: `ns.name[.overload]`, or a bare `name` (`bare`) of the op's namespace.

    Which op it is gets settled against the whole library (`check_library`, `resolve`)."""
    namespace: str
    name: str
    overload: str | None            # None: not given ("" is the default overload)
    bare: bool = False
    loc: Loc | None = field(default=None, compare=False, hash=False, repr=False)


@dataclass(frozen=True)
class Attr(Node):
    obj: Expr
    name: str


@dataclass(frozen=True)
class Star(Node):
    value: Expr


@dataclass(frozen=True)
class Call(Node):
    func: Expr
    args: tuple[Expr, ...]          # may hold Star
    kwargs: tuple[tuple[str, Expr], ...]
    loc: Loc | None = field(default=None, compare=False, hash=False, repr=False)
    # Where each keyword is (errors about one point there); () when unknown.
    kwarg_locs: tuple[Loc, ...] = field(default=(), compare=False, hash=False, repr=False)
    # Where each positional argument is, and each keyword's value; () when unknown.
    arg_locs: tuple[Loc, ...] = field(default=(), compare=False, hash=False, repr=False)
    kwarg_value_locs: tuple[Loc, ...] = field(default=(), compare=False, hash=False, repr=False)


@dataclass(frozen=True)
class Slice(Node):
    lo: Expr | None
    hi: Expr | None
    step: Expr | None = None


@dataclass(frozen=True)
class Subscript(Node):
    obj: Expr
    items: tuple[Expr, ...]         # Slices, EllipsisLit, expressions


@dataclass(frozen=True)
class TupleLit(Node):
    items: tuple[Expr, ...]
    # Where each item is; () when unknown.
    item_locs: tuple[Loc, ...] = field(default=(), compare=False, hash=False, repr=False)


@dataclass(frozen=True)
class ListLit(Node):
    items: tuple[Expr, ...]
    item_locs: tuple[Loc, ...] = field(default=(), compare=False, hash=False, repr=False)


class BinOpKind(enum.Enum):
    add = "+"
    sub = "-"
    mul = "*"
    div = "/"
    floordiv = "//"
    mod = "%"
    matmul = "@"
    pow = "**"
    eq = "=="
    ne = "!="
    lt = "<"
    le = "<="
    gt = ">"
    ge = ">="
    is_ = "is"
    is_not = "is not"
    and_ = "and"
    or_ = "or"


class UnaryKind(enum.Enum):
    neg = "-"
    pos = "+"
    invert = "~"
    not_ = "not "


@dataclass(frozen=True)
class BinOp(Node):
    op: BinOpKind
    left: Expr
    right: Expr


@dataclass(frozen=True)
class UnaryOp(Node):
    op: UnaryKind
    operand: Expr


@dataclass(frozen=True)
class IfExp(Node):
    cond: Expr
    then: Expr
    orelse: Expr


Expr = Union[Const, EllipsisLit, InputRef, GradRef, GradsRef, ResultRef, ResultsRef, TorchRef,
             BuiltinRef, PyBuiltinRef, LoopVar, LocalRef, OpRef, Attr, Star, Call, Slice, Subscript,
             TupleLit, ListLit, ListComp, BinOp, UnaryOp, IfExp]


@dataclass(frozen=True)
class Formula:
    inputs: tuple[str, ...]         # the inputs it gives gradients for (a tuple when several)
    expr: Expr
    text: str = ""
    bindings: tuple[tuple[str, Expr], ...] = ()     # `name = value;` before `expr`, in order
    loc: Loc | None = field(default=None, compare=False, hash=False, repr=False)
    # The text as read from the op file: `check_library` checks it again knowing the library.
    source: Located | None = field(default=None, compare=False, hash=False, repr=False)

    def exprs(self) -> tuple[Expr, ...]:
        """The binding values, then the expression: everything the formula evaluates."""
        return tuple(v for _, v in self.bindings) + (self.expr,)


@dataclass(frozen=True)
class Derivatives:
    formulas: tuple[Formula, ...]
    non_differentiable: tuple[str, ...]
    output_differentiability: tuple[bool, ...]      # one per return
    loc: Loc | None = field(default=None, compare=False, hash=False, repr=False)

    def formula_for(self, name: str) -> Formula | None:
        for f in self.formulas:
            if name in f.inputs:
                return f
        return None


def walk_all(d: Derivatives) -> Iterator[Expr]:
    for f in d.formulas:
        yield from walk_all_of(f)


# --------------------------------------------------------------------------------------------------
# What backward needs (read by the generator)


@dataclass(frozen=True)
class Saved:
    """What setup_context keeps for backward."""
    tensors: tuple[str, ...]                    # inputs through save_for_backward
    tensor_lists: tuple[str, ...]               # Tensor[] inputs through save_for_backward
    meta: tuple[tuple[str, str], ...]           # (input, "shape" | "dtype" | "device")
    values: tuple[str, ...]                     # non-Tensor inputs, kept on ctx
    results: tuple[int, ...]                    # outputs through save_for_backward


def meta_uses(e: Expr) -> tuple[set[str], dict[str, set[str]]]:
    """Inputs read as whole values, and inputs read only for metadata -> which metadata."""
    whole: set[str] = set()
    meta: dict[str, set[str]] = {}

    def visit(node: Expr) -> None:
        match node:
            case Attr(obj=InputRef(name=n), name=a) if a in META_ATTRS:
                meta.setdefault(n, set()).add(META_ATTRS[a])
                return
            case Call(func=Attr(obj=InputRef(name=n), name=m), args=args, kwargs=kwargs) \
                    if m in META_METHODS:
                meta.setdefault(n, set()).add(META_METHODS[m])
                for sub in (*args, *(v for _, v in kwargs)):
                    visit(sub)
                return
            case Call(func=BuiltinRef(name="unbroadcast"), args=(g, InputRef(name=n)), kwargs=()):
                meta.setdefault(n, set()).add("shape")
                visit(g)
                return
            case InputRef(name=n):
                whole.add(n)
                return
        for c in children(node):
            visit(c)

    visit(e)
    return whole, meta


def saved(d: Derivatives, schema: FunctionSchema) -> Saved:
    whole: set[str] = set()
    meta: dict[str, set[str]] = {}
    results: set[int] = set()
    for f in d.formulas:
        for e in f.exprs():
            w, m = meta_uses(e)
            whole |= w
            for k, v in m.items():
                meta.setdefault(k, set()).update(v)
        for node in walk_all_of(f):
            if isinstance(node, ResultRef):
                results.add(node.index)
            elif isinstance(node, ResultsRef):
                results.update(range(len(schema.returns)))
    tensors: list[str] = []
    lists: list[str] = []
    values: list[str] = []
    metas: list[tuple[str, str]] = []
    for a in schema.arguments:
        tensor_like = is_tensor_like(a.type)
        is_list = isinstance(strip_optional(a.type), ListType)
        if a.name in whole:
            if tensor_like and is_list:
                lists.append(a.name)
            elif tensor_like:
                tensors.append(a.name)
            else:
                values.append(a.name)
        elif a.name in meta:
            if tensor_like and not is_list:
                metas.extend((a.name, m) for m in ("shape", "dtype", "device") if m in meta[a.name])
            elif tensor_like:
                lists.append(a.name)
            else:
                values.append(a.name)
    return Saved(tuple(tensors), tuple(lists), tuple(metas), tuple(values), tuple(sorted(results)))


def walk_all_of(f: Formula) -> Iterator[Expr]:
    for e in f.exprs():
        yield from walk(e)


def library_calls(d: Derivatives) -> list[OpRef]:
    return [n for n in walk_all(d) if isinstance(n, OpRef)]


# --------------------------------------------------------------------------------------------------
# Syntax -> IR


class _Bad(Exception):
    """Raised after an error was reported; abandons the formula."""


@dataclass(frozen=True)
class _Name(Node):
    id: str
    span: Span


@dataclass(frozen=True)
class _Node(Node):
    """A syntax node: `kind` names the grammar alternative; `parts` its children."""
    kind: str
    parts: tuple
    span: Span


class _ToSyntax:
    """Grammar alternatives -> `_Node`s, as the parser reduces them (codegen.expr.ExprParser).
    The only code that sees the grammar's shapes."""

    def default(self, kind, span, children):
        return _Node(kind, tuple(children), span if span is not None else Span(0, 0))

    def start(self, span, *parts):
        return _Node("start", tuple(p for p in parts if p is not None), span)

    def name(self, span, tok):
        return _Name(str(tok), token_span(tok))


@lru_cache(maxsize=1)
def _parser() -> ExprParser:
    # No bitwise operators: a mask written as Python does (`(x > a) & (x < b)`) needs the
    # named function.
    return ExprParser("grammar/formula.lark", _ToSyntax(), "formula", char_hints={
        c: f"formulas have no bitwise operators: write torch.{f}"
        for c, f in (("&", "logical_and(a, b)"), ("|", "logical_or(a, b)"),
                     ("~", "logical_not(a)"), ("^", "logical_xor(a, b)"))})


_CONDITION = ("this condition", "branch on sizes, dtypes and non-Tensor arguments only, or "
              "select elementwise: torch.where(cond, a, b)")
_COMPREHENSION = ("this comprehension condition", "filter on sizes, dtypes and non-Tensor "
                  "arguments only, or select inside the element: [torch.where(cond, a, b) for ...]")


class _Checker:
    """Resolves the names of one formula against the op's schema."""

    def __init__(self, text: Located, schema: FunctionSchema, diff_outputs: tuple[bool, ...],
                 diags: Diagnostics, lib: OpLibrary | None = None):
        self.text = text
        self.schema = schema
        self.diags = diags
        self.diff_outputs = diff_outputs
        self.namespace = schema.name.namespace or ""
        self.returns = schema.returns
        self.loop_vars: set[str] = set()
        self.locals: dict[str, bool] = {}      # binding -> whether it holds a Tensor list
        self.kinds = _Kinds(schema, {}, lib)
        # The and/or/not making up a condition (syntax node ids): their operands are its parts.
        self.conditions: dict[int, tuple[str, str]] = {}
        # The inputs and bindings a condition around the node being checked tells are None.
        self.none: frozenset[str] = frozenset()

    def error(self, span: Span, message: str, hint: str | None = None) -> _Bad:
        self.diags.error(self.text.at(span.start, max(1, span.end - span.start)), message, hint)
        return _Bad()

    def all_of(self, *parts: Callable[[], object]) -> list:
        """What each of `parts` gives, each run though an earlier one failed: the mistakes of
        independent parts of a formula (a call's arguments, an operator's operands) are all
        reported in one run. Raises _Bad after them where any failed."""
        out, bad = [], False
        for part in parts:
            try:
                out.append(part())
            except _Bad:
                bad = True
        if bad:
            raise _Bad()
        return out

    def src(self, span: Span) -> str:
        return self.text.text[span.start:span.end]

    def loc(self, span: Span) -> Loc:
        return self.text.at(span.start, max(1, span.end - span.start))

    # -- names

    def name(self, node: _Name) -> Expr:
        n = node.id
        if n in self.loop_vars:
            return LoopVar(n)
        if n in self.locals:
            return LocalRef(n)
        if self.schema.argument(n) is not None:
            return InputRef(n)
        if n in ("True", "False", "None"):
            return Const({"True": True, "False": False, "None": None}[n])
        if n == "grad":
            diff = [i for i, d in enumerate(self.diff_outputs) if d]
            if len(diff) == 1:
                return GradRef(diff[0])
            if not diff:
                raise self.error(node.span, "no output of this op is differentiable, so there is "
                                 "no 'grad'")
            raise self.error(node.span, f"'grad' is ambiguous: {len(diff)} outputs are "
                             "differentiable", self._grad_names_hint())
        if n.startswith("grad_"):
            index = self._return_index(n[len("grad_"):])
            if index is not None:
                return self._grad(index, node.span)
        index = self._return_index(n)     # a return's own name wins over `result`, `grads`
        if index is not None:
            return ResultRef(index)
        if n == "grads":
            return GradsRef()
        if n == "result":
            if len(self.returns) == 1:
                return ResultRef(0)
            raise self.error(node.span, f"'result' names the only output, but this op has "
                             f"{len(self.returns)}", self._result_names_hint())
        if n == "results":
            return ResultsRef()
        if n == "torch":
            return TorchRef(())
        if n in BUILTINS:
            return BuiltinRef(n)
        if n in PY_BUILTINS:
            return PyBuiltinRef(n)
        if n == self.namespace:
            raise self.error(node.span, f"'{n}' is this library's namespace; call one of its ops: "
                             f"`{n}.<op>(...)`")
        # Anything else may be an op of the library; `check_library` settles it.
        return OpRef(self.namespace, n, None, bare=True, loc=self.loc(node.span))

    def _return_index(self, name: str) -> int | None:
        for i, r in enumerate(self.returns):
            if r.name == name:
                return i
        return None

    def _grad(self, index: int, span: Span) -> Expr:
        if not self.diff_outputs[index]:
            raise self.error(span, f"{output_words(self.returns, index)} is not "
                             "differentiable, so it has no gradient",
                             "see output_differentiability, and the type of the return")
        return GradRef(index)

    def _grad_names_hint(self) -> str:
        names = [f"grad_{r.name}" if r.name else f"grads[{i}]"
                 for i, (r, d) in enumerate(zip(self.returns, self.diff_outputs)) if d]
        return "name one: " + ", ".join(names)

    def _result_names_hint(self) -> str:
        return "name one: " + ", ".join(r.name or f"results[{i}]"
                                        for i, r in enumerate(self.returns))

    # -- expressions

    def expr(self, node) -> Expr:
        """A value: never a bare builtin of the language or a module (`unbroadcast`, `torch.nn`)."""
        e = self.named(node)
        if isinstance(e, BuiltinRef):
            raise self.error(node.span, f"'{e.name}' is a function of the formula language; "
                             "call it", _BUILTIN_USAGE[e.name])
        if isinstance(e, TorchRef) and _is_module(e.path):
            name = ".".join(("torch",) + e.path)
            raise self.error(node.span, f"'{name}' is a module; a formula calls its functions",
                             f"write {name}.<function>(...)")
        return e

    def literal(self, tok) -> object:
        text = str(tok)
        try:
            if text[0] in "'\"":
                return string_literal(text)
            if any(c in text for c in ".eE"):
                return float_literal(text)
            return int_literal(text)
        except LiteralError as e:
            raise self.error(Span(tok.start_pos + e.offset, tok.start_pos + e.offset + e.length),
                             e.message, e.hint) from None

    def named(self, node) -> Expr:
        """Any expression, including what may only be called or have an attribute taken."""
        if isinstance(node, _Name):
            return self.name(node)
        assert isinstance(node, _Node), node
        k, p = node.kind, node.parts
        if k in ("number", "string"):
            return Const(self.literal(p[0]))
        if k == "attr":
            if isinstance(p[0], _Name) and p[0].id == self.namespace \
                    and self.schema.argument(self.namespace) is None:
                return OpRef(self.namespace, str(p[1]), None, loc=self.loc(node.span))
            return self.attr(node, self.named(p[0]), str(p[1]))
        if k == "call":
            return self.call(node)
        if k == "index":
            return self.index(node)
        if k in ("tuple", "list"):
            given = [x for x in p if x is not None]
            items = tuple(self.all_of(*(partial(self.expr, x) for x in given)))
            locs = tuple(self.loc(x.span) for x in given)
            return TupleLit(items, locs) if k == "tuple" else ListLit(items, locs)
        if k == "listcomp":
            elem, *names, iterable, cond_node = p
            bound = tuple(str(x) for x in names)
            try:
                it: Expr | None = self.expr(iterable)
            except _Bad:
                it = None   # the element and condition are checked all the same
            for tok in names:
                if self.schema.argument(str(tok)) is not None or str(tok) in self.loop_vars \
                        or str(tok) in self.locals:
                    raise self.error(Span(tok.start_pos, tok.end_pos),
                                     f"'{tok}' is already a name of the formula; pick another")
            saved = set(self.loop_vars)
            saved_kinds = dict(self.kinds.bound)
            self.loop_vars |= set(bound)
            self.kinds.bound.update(zip(bound, self.kinds.loop_kinds(it, len(bound)) if it
                                        is not None else [Kind.UNKNOWN] * len(bound)))
            try:
                body, cond = self.all_of(partial(self.expr, elem),
                                         partial(self.comprehension_condition, cond_node))
            finally:
                self.loop_vars = saved
                self.kinds.bound = saved_kinds
            if it is None:
                raise _Bad()
            return ListComp(body, bound, it, cond)
        if k == "ifexp":
            self.condition(p[1], *_CONDITION)
            cond = self.expr(p[1])
            _, then, orelse = self.all_of(
                partial(self.truth_test, p[1], cond, *_CONDITION),
                partial(self.where_none, _none_if(cond, True), p[0]),
                partial(self.where_none, _none_if(cond, False), p[2]))
            return IfExp(cond, then, orelse)
        if k == "compare":
            left, right = self.all_of(partial(self.expr, p[0]), partial(self.expr, p[2]))
            return BinOp(BinOpKind(str(p[1])), left, right)
        if k in ("neg", "pos", "invert", "not_"):
            operand = self.expr(p[0])
            if k != "not_":
                self.not_a_list(p[0], operand)
            else:
                self.truth_test(p[0], operand, *self.conditions.get(id(node), (
                    "the operand of 'not'", "negate a tensor elementwise: torch.logical_not(a)")))
            return UnaryOp(UnaryKind[k], operand)
        if k in ("is_", "is_not"):
            left, right = self.all_of(partial(self.expr, p[0]), partial(self.expr, p[1]))
            for side, e in ((p[0], left), (p[1], right)):
                if _literal(e):
                    # Python warns ("is" with a literal) and the answer depends on interning.
                    raise self.error(side.span, f"'{'is' if k == 'is_' else 'is not'}' with a "
                                     "literal: it tests identity, not equality",
                                     "compare values with '==', and use 'is' for None only")
            return BinOp(BinOpKind[k], left, right)
        if k in ("and_", "or_", "add", "sub", "mul", "div", "floordiv", "mod",
                 "matmul", "pow"):
            if k not in ("and_", "or_"):
                left, right = self.all_of(partial(self.expr, p[0]), partial(self.expr, p[1]))
                self.all_of(partial(self.not_a_list, p[0], left),
                            partial(self.not_a_list, p[1], right))
            else:
                left = self.expr(p[0])
                # Python tests the left operand's truth; the right one's only where the result's is.
                word = k.rstrip("_")
                what = self.conditions.get(id(node), (
                    f"the left operand of '{word}'",
                    f"combine tensors elementwise: torch.logical_{word}(a, b)"))
                # The right operand is evaluated where the left is true (`and`), false (`or`).
                _, right = self.all_of(partial(self.truth_test, p[0], left, *what),
                                       partial(self.where_none, _none_if(left, k == "and_"), p[1]))
            return BinOp(BinOpKind[k], left, right)
        if k in ("slice", "ellipsis"):
            raise self.error(node.span, "slices and '...' only go inside brackets: x[1:], x[..., 0]")
        if k in ("kwarg", "star"):
            raise self.error(node.span, "keyword and '*' arguments only go inside a call")
        raise TypeError(f"unexpected syntax node {k}")

    def attr(self, node: _Node, obj: Expr, name: str) -> Expr:
        self.not_a_list(node.parts[0], obj)
        if isinstance(obj, TorchRef):
            path = obj.path + (name,)
            if not _has_vocabulary(obj.path):
                raise self.error(node.span, f"'{self.src(node.span)}': a formula takes "
                                 f"attributes of torch's modules only, and "
                                 f"'torch.{'.'.join(obj.path)}' is not one",
                                 "modules: " + ", ".join(TORCH_MODULES))
            if name.startswith("_"):
                raise self.error(node.span, f"'torch.{'.'.join(path)}' is private; formulas "
                                 "name torch's public functions only")
            if not _torch_has(path):
                full = "torch." + ".".join(path)
                if _torch_exists(path):
                    raise self.error(node.span, f"'{full}' is outside the formula language",
                                     _TORCH_VOCABULARY)
                raise self.error(node.span, f"'{full}' does not exist", _torch_hint(path))
            return TorchRef(path)
        if isinstance(obj, (BuiltinRef, PyBuiltinRef)):
            raise self.error(node.span, f"'{self.src(node.span)}': '{obj.name}' has no "
                             "attributes in a formula")
        if isinstance(obj, OpRef):
            if obj.overload is not None:
                raise self.error(node.span, f"'{self.src(node.span)}': an op overload has no "
                                 "attributes")
            if obj.bare:
                # `foo.bar`: `foo` was not an input; it must be this library's op.
                return OpRef(obj.namespace, obj.name, "" if name == "default" else name,
                             bare=True, loc=self.loc(node.span))
            return OpRef(obj.namespace, obj.name, "" if name == "default" else name,
                         loc=self.loc(node.span))
        if name.startswith("_"):
            raise self.error(node.span, f"'{name}' is private; formulas use the public "
                             "attributes and methods of tensors only")
        if not (_tensor_has(name) or name in VALUE_ATTRS):
            tensor = isinstance(obj, (GradRef, ResultRef)) or (
                isinstance(obj, InputRef) and self._is_tensor(obj))
            raise self.error(node.span, f"torch.Tensor has no attribute '{name}'" if tensor else
                             f"'{name}' is not an attribute a formula can use",
                             _tensor_hint(name) or "formulas use the attributes and methods of "
                             "tensors (and of dtypes, devices, finfo and sizes)")
        return Attr(obj, name)

    def tensor_list(self, e: Expr) -> bool:
        """Whether `e` is a list of tensors: a Tensor[] input, the gradient or value of a
        Tensor[] return (`grad` is then a list, one tensor per element), or a binding of one."""
        match e:
            case GradRef(index=i) | ResultRef(index=i):
                return is_tensor_list(self.returns[i].type)
            case InputRef(name=n):
                arg = self.schema.argument(n)
                return arg is not None and is_tensor_list(arg.type)
            case LocalRef(name=n):
                return self.locals.get(n, False)
        return False

    def truth_test(self, node, e: Expr, what: str, hint: str) -> None:
        """Refuse a truth test (`e` as a condition) of a value read from tensor data (Note
        [Data-dependent conditions]); `what` names the place, `hint` what to write instead."""
        match e:
            case BinOp(op=BinOpKind.and_ | BinOpKind.or_, right=b):
                # The left operand was tested where it was parsed; the right one is the result.
                self.truth_test(node.parts[1], b, what, hint)
                return
            case UnaryOp(op=UnaryKind.not_):
                return      # its operand was tested where it was parsed
            case IfExp(then=a, orelse=b):
                self.truth_test(node.parts[0], a, what, hint)
                self.truth_test(node.parts[2], b, what, hint)
                return
        if self.kinds.of(e) not in _VALUES:
            return
        arg = self.schema.argument(e.name) if isinstance(e, InputRef) else None
        if arg is not None and isinstance(arg.type, OptionalType):
            hint = f"test whether '{e.name}' was given with `{e.name} is not None`"
        raise self.error(node.span, f"{what} depends on tensor values: neither torch.compile "
                         "nor C++ autograd can branch on them", hint)

    def comprehension_condition(self, node) -> Expr | None:
        if node is None:
            return None
        self.condition(node, *_COMPREHENSION)
        cond = self.expr(node)
        self.truth_test(node, cond, *_COMPREHENSION)
        return cond

    def condition(self, node, what: str, hint: str) -> None:
        """Mark the and/or/not making up the condition `node`, so that an error in an operand
        speaks of the condition."""
        if isinstance(node, _Node) and node.kind in ("and_", "or_", "not_"):
            self.conditions[id(node)] = (what, hint)
            for part in node.parts:
                self.condition(part, what, hint)

    def not_a_list(self, node, e: Expr) -> None:
        """Refuse a Tensor list where a formula treats it as a tensor (`grad * 2` would repeat
        the list, `grad.sum()` fail at backward)."""
        if not self.tensor_list(e):
            return
        src = self.src(node.span)
        what = "the gradient of a Tensor[] return" if isinstance(e, GradRef) else "a Tensor[]"
        raise self.error(node.span, f"'{src}' is a list of tensors ({what}), not a tensor",
                         f"index it or loop over it: `{src}[0]`, `[g * 2 for g in {src}]`")

    def binding(self, node: _Node) -> tuple[str, Expr]:
        """`name = value;`: a name of its own for a value the formula uses (see Bindings in the
        module docstring)."""
        tok, value_node = node.parts
        name, span = str(tok), Span(tok.start_pos, tok.end_pos)
        taken = self.schema.argument(name) is not None or name in self.locals
        own = (name in ("grad", "grads", "result", "results", "torch", "True", "False", "None",
                        self.namespace) or name in BUILTINS or name in PY_BUILTINS
               or self._return_index(name) is not None
               or (name.startswith("grad_") and self._return_index(name[5:]) is not None))

        def named() -> None:
            if name.startswith("_") or own:
                raise self.error(span, f"'{name}' is a name of the formula language; a binding "
                                 "needs another")
            if taken:
                raise self.error(span, f"'{name}' is already a name of the formula; pick another")

        try:
            _, value = self.all_of(named, partial(self.expr, value_node))
        except _Bad:
            # What follows means the binding by the name, its value unknown: nothing is said of it.
            self.locals[name] = False
            self.kinds.bound[name] = Kind.UNKNOWN
            raise
        self.locals[name] = self.tensor_list(value)
        self.kinds.bound[name] = self.kinds.of(value)
        form = self.kinds.form(value)
        if form is not None:
            self.kinds.forms[name] = form
        self.kinds.values[name] = value
        if self.kinds.may_be_none(value):
            self.kinds.maybe_none.add(name)
        self.kinds.guards[name] = (_not_none_if(value, True, self.kinds),
                                   _not_none_if(value, False, self.kinds))
        return name, value

    def _is_tensor(self, ref: InputRef) -> bool:
        arg = self.schema.argument(ref.name)
        assert arg is not None
        return is_base(strip_optional(arg.type), BaseTy.Tensor)

    def call(self, node: _Node) -> Expr:
        func_node, *arg_nodes = node.parts
        args: list[Expr] = []
        kwargs: list[tuple[str, Expr]] = []
        kwarg_locs: list[Loc] = []
        kwarg_value_locs: list[Loc] = []
        spans: list[Span] = []      # of args
        kwarg_spans: list[Span] = []    # of kwargs' values: what is wrong with one is its value
        key_spans: list[Span] = []      # of kwargs' names
        keys: list[str] = []        # given so far, their values' mistakes aside
        misplaced: list[bool] = []  # whether an argument after a keyword was reported

        def argument(a) -> None:
            if isinstance(a, _Node) and a.kind == "kwarg":
                key = str(a.parts[0])
                if key in keys:
                    raise self.error(token_span(a.parts[0]),
                                     f"keyword argument '{key}' given twice")
                keys.append(key)
                kwargs.append((key, self.expr(a.parts[1])))
                kwarg_locs.append(self.loc(token_span(a.parts[0])))
                key_spans.append(token_span(a.parts[0]))
                kwarg_spans.append(a.parts[1].span)
                kwarg_value_locs.append(self.loc(a.parts[1].span))
                return
            star = isinstance(a, _Node) and a.kind == "star"
            if keys and not misplaced:
                misplaced.append(True)      # once: the others are out of place with it
                raise self.error(a.span, "'*' arguments go before keyword arguments" if star
                                 else "positional arguments go before keyword arguments")
            args.append(Star(self.expr(a.parts[0])) if star else self.expr(a))
            spans.append(a.span)

        func, *_ = self.all_of(partial(self.named, func_node),
                               *(partial(argument, a) for a in arg_nodes if a is not None))
        if misplaced:
            raise _Bad()
        if isinstance(func, (InputRef, GradRef, ResultRef, GradsRef, ResultsRef, Const, LoopVar,
                             TupleLit, ListLit, ListComp)) or _folds(func):
            raise self.error(func_node.span, f"'{self.src(func_node.span)}' is not callable")
        if isinstance(func, BuiltinRef):
            self.builtin(node, func.name, args, kwargs)
        if isinstance(func, PyBuiltinRef) and func.name in ("max", "min"):
            # Python's max and min compare their arguments (or elements) with `>`, `<`.
            for span, arg in zip(spans, args):
                value = arg.value if isinstance(arg, Star) else arg
                if self.kinds.of(value) in (Kind.TENSOR, Kind.TENSORS, Kind.DATA):
                    elementwise = "maximum" if func.name == "max" else "minimum"
                    raise self.error(span, f"{func.name}() compares tensor values: "
                                     "neither torch.compile nor C++ autograd can branch on them",
                                     f"compare elementwise: torch.{elementwise}(a, b); reduce "
                                     f"one tensor: x.{func.name}()")
        if isinstance(func, TorchRef) and _is_module(func.path):
            raise self.error(func_node.span, f"the module '{self.src(func_node.span)}' is not "
                             "callable")
        self.tensor_operands(func, list(zip(spans, args)) + list(zip(kwarg_spans, kwargs)))
        self.torch_signature(node, func, args, list(zip((k for k, _ in kwargs), key_spans)))
        return Call(func, tuple(args), tuple(kwargs), loc=self.loc(node.span),
                    kwarg_locs=tuple(kwarg_locs), arg_locs=tuple(self.loc(s) for s in spans),
                    kwarg_value_locs=tuple(kwarg_value_locs))

    def tensor_operands(self, func: Expr,
                        given: list[tuple[Span, Expr | tuple[str, Expr]]]) -> None:
        """Refuse a number (or another non-Tensor value) where a torch function of
        `_TENSOR_OPERANDS` takes a Tensor: torch has no overload for it, so the formula would
        fail at backward in Python and not compile in C++. `given`: (span, positional argument
        or (keyword, value))."""
        match func:
            case TorchRef(path=(name,)) if name in _TENSOR_OPERANDS:
                params, what = ("input", "other"), f"torch.{name}()"
            case Attr(obj=obj, name=name) if name in _TENSOR_OPERANDS and \
                    self.kinds.of(obj) is Kind.TENSOR:
                params, what = ("other",), f"Tensor.{name}()"
            case _:
                return
        for i, (span, arg) in enumerate(given):
            key, value = arg if isinstance(arg, tuple) else (
                params[i] if i < len(params) else None, arg)
            if key not in params or isinstance(value, Star):
                continue
            if self.kinds.of(value) in (Kind.META, Kind.NONE, Kind.DATA):
                hint = (f"clamp instead: x.clamp({'min' if name in ('maximum', 'fmax') else 'max'}"
                        "=value)" if name in ("maximum", "minimum", "fmax", "fmin")
                        else "make it a tensor: torch.full_like(x, value)")
                raise self.error(span, f"{what} takes a Tensor as '{key}', and this is not one: "
                                 "torch has no overload taking a number", hint)

    def torch_signature(self, node: _Node, func: Expr, args: list[Expr],
                        keys: list[tuple[str, Span]]) -> None:
        """Refuse a call of a torch function or tensor method that none of its signatures takes
        (Note [Torch signatures] in codegen/torch_signatures.py): a misspelled keyword, too many
        or too few arguments. Python would raise a TypeError at backward, C++ not compile."""
        match func:
            case TorchRef(path=path) if path[0] != "Tensor" and not _is_module(path):
                module, name = ".".join(("torch",) + path[:-1]), path[-1]
                shown = f"torch.{'.'.join(path)}()"
            case Attr(obj=obj, name=name) if self.kinds.of(obj) is Kind.TENSOR:
                module, shown = "torch.Tensor", f"Tensor.{name}()"
            case _:
                return
        sigs = torch_signatures.signatures(module, name)
        positional = None if any(isinstance(a, Star) for a in args) else len(args)
        if sigs is None or torch_signatures.binds(sigs, module, name, positional,
                                                  [k for k, _ in keys]):
            return
        shown_sigs = list(dict.fromkeys(s.show(name) for s in sigs))
        hint = ("its signatures: " if len(shown_sigs) > 1 else "its signature: ") + "; ".join(
            shown_sigs[:4]) + ("; ..." if len(shown_sigs) > 4 else "")
        known = set().union(*(s.names() for s in sigs))
        unknown = [(k, span) for k, span in keys if k not in known]
        if unknown and not any(s.varkw for s in sigs):
            for key, span in unknown:
                self.error(span, f"{shown} has no argument '{key}'",
                           _suggest(key, known) or hint)
            raise _Bad()
        given = (f"{positional} positional argument{'s' if positional != 1 else ''}"
                 if positional is not None and not keys else "these arguments")
        raise self.error(node.span, f"no signature of {shown} takes {given}", hint)

    def where_none(self, names: frozenset[str], node) -> Expr:
        """`self.expr(node)` where a condition tells `names` are None."""
        saved = self.none
        self.none = saved | names
        try:
            return self.expr(node)
        finally:
            self.none = saved

    def float_number(self, e: Expr) -> bool:
        """Whether `e` is a Python float where it is not None, and no condition around tells it
        is None (`grad[:m] if m is None else grad`); not a Tensor (`_Kinds.form`)."""
        return self.kinds.form(e) is Form.FLOAT and not (
            isinstance(e, (InputRef, LocalRef)) and e.name in self.none)

    def not_a_float_index(self, node, e: Expr | None, what: str) -> None:
        """Refuse a float as an index or slice bound: Python raises a TypeError at backward
        (`x[:x.size(0) / 2]`), and C++ autograd cannot take one either."""
        if node is None or e is None or not self.float_number(e):
            return
        divides = isinstance(e, LocalRef) or "/" in self.src(node.span)
        raise self.error(node.span, f"{what} must be an integer, and this is a float: torch "
                         "refuses it when the formula runs",
                         "`/` gives a float even of two ints; divide sizes with //: "
                         "x[:x.size(0) // 2]" if divides else None)

    def builtin(self, node: _Node, name: str, args: list[Expr], kwargs) -> None:
        if name == "unbroadcast":
            if len(args) != 2 or kwargs or any(isinstance(a, Star) for a in args):
                raise self.error(node.span, "unbroadcast() takes 2 arguments: "
                                 "unbroadcast(grad, input)")
            for arg_node, arg in zip(node.parts[1:], args):
                self.not_a_list(arg_node, arg)
        elif name == "not_implemented":
            if len(args) != 1 or kwargs or not (isinstance(args[0], Const)
                                                and isinstance(args[0].value, str)):
                raise self.error(node.span, 'not_implemented() takes one string: '
                                 'not_implemented("why")')

    def subscript(self, node) -> Expr:
        """One item between brackets: a slice, `...`, or an index (checked as one by `index`)."""
        if isinstance(node, _Node) and node.kind == "ellipsis":
            return EllipsisLit()
        if not (isinstance(node, _Node) and node.kind == "slice"):
            return self.expr(node)

        def bound(part, step: bool = False) -> Expr | None:
            if part is None:
                return None
            e = self.expr(part)
            if step and isinstance(e, Const) and e.value == 0 and type(e.value) is int:
                raise self.error(part.span, "a slice step cannot be zero")
            self.not_a_float_index(part, e, "a slice bound")
            return e

        lo, hi, *step = node.parts
        return Slice(*self.all_of(partial(bound, lo), partial(bound, hi),
                                  partial(bound, step[0] if step else None, True)))

    def index(self, node: _Node) -> Expr:
        obj_node, *subs = node.parts
        given = [s for s in subs if s is not None]
        obj, *items = self.all_of(partial(self.expr, obj_node),
                                  *(partial(self.subscript, s) for s in given))
        if not isinstance(obj, (GradsRef, ResultsRef)):     # their own error below
            self.all_of(*(partial(self.not_a_float_index, s, e, "an index")
                          for s, e in zip(given, items) if not isinstance(e, (Slice, EllipsisLit))))
        if isinstance(obj, (GradsRef, ResultsRef)):
            n = len(self.returns)
            what = "grads" if isinstance(obj, GradsRef) else "results"
            if len(items) != 1 or not (isinstance(items[0], Const) and type(items[0].value) is int):
                raise self.error(node.span, f"{what}[i] takes an integer literal")
            i = items[0].value
            assert isinstance(i, int)
            if not -n <= i < n:
                raise self.error(node.span, f"{what}[{i}] is out of range: the op has "
                                 f"{n} output{'s' if n != 1 else ''}")
            i %= n
            return self._grad(i, node.span) if what == "grads" else ResultRef(i)
        if _folds(obj) and not (isinstance(obj, Const) and isinstance(obj.value, str)) \
                and not isinstance(obj, TupleLit):
            raise self.error(obj_node.span, f"'{self.src(obj_node.span)}' is a constant that "
                             "cannot be indexed")
        if isinstance(obj, (Const, TupleLit, ListLit, ListComp)) and not _int_index(tuple(items)):
            # Python warns at compile time ("indices must be integers"); it would fail anyway.
            raise self.error(node.span, f"'{self.src(node.span)}': a sequence is indexed by "
                             "integers and slices")
        return Subscript(obj, tuple(items))


# Note [Constant folding]
# Python folds constant expressions (`-1`, `2 * 3`, `(1, "a")`, `(1, 2)[0]`) before compiling, then
# warns at compile time about `x is <constant>`, calling a constant, indexing a number, and indexing
# a literal sequence with a non-integer. Generated code must compile without warnings, and each of
# these is a mistake in a formula, so the checker refuses them, erring on the side of refusing.

_FOLDED_OPS = (BinOpKind.add, BinOpKind.sub, BinOpKind.mul, BinOpKind.div, BinOpKind.floordiv,
               BinOpKind.mod, BinOpKind.pow, BinOpKind.matmul)


def _folds(e: Expr) -> bool:
    """Whether Python may fold `e` into a constant (Note [Constant folding])."""
    match e:
        case Const() | EllipsisLit():
            return True
        case UnaryOp(operand=o):
            return _folds(o)
        case BinOp(op=op, left=a, right=b) if op in _FOLDED_OPS:
            return _folds(a) and _folds(b)
        case TupleLit(items=items):
            return all(_folds(i) for i in items)
        case Subscript(obj=o, items=items):
            return _folds(o) and all(_folds(i) for i in items)
    return False


def _literal(e: Expr) -> bool:
    """A constant `is` warns about: anything folded but None, True and False."""
    return _folds(e) and not (isinstance(e, Const) and (e.value is None or e.value is True
                                                        or e.value is False))


def _int_index(items: tuple[Expr, ...]) -> bool:
    """Whether indexing a literal sequence with `items` compiles without a warning."""
    if len(items) != 1:
        return False
    i = items[0]
    if isinstance(i, UnaryOp) and i.op in (UnaryKind.neg, UnaryKind.pos):
        i = i.operand
    if isinstance(i, Const):
        return isinstance(i.value, int)
    return isinstance(i, Slice) or not _folds(i) and not isinstance(i, (ListLit, ListComp))


# Note [Data-dependent conditions]
# A formula runs at backward, which torch.compile traces with symbolic values: a Python truth test
# of a tensor (a conditional's or a comprehension's condition, an operand of `and`, `or`, `not`,
# `max`/`min` comparing tensors) needs its value, which tracing does not have
# (GuardOnDataDependentSymNode), and C++ autograd cannot branch on it either. So the checker
# refuses a truth test of a value read from tensor data, and keeps those of what the trace knows:
# sizes, dtypes, devices, `is None`, non-Tensor arguments and literals. `_Kinds` tells them apart;
# where it cannot tell (an unusual call), it accepts.
#
# A call of a library op is known once the whole library is (`check_library` checks formulas
# calling one again, with the library): its Tensor returns are tensors, `()` is None, and an
# `int`/`SymInt` return that a fake rule makes is a size (a trace guards on it, as on
# `x.size(0)`) or, made with `dynamic()`, read from the data (an unbacked symbol: no branch).
# Other non-Tensor returns (a Python fake, a Meta kernel, a `bool` or `float`) may be either,
# and are accepted.


class Kind(enum.Enum):
    TENSOR = "tensor"
    TENSORS = "tensors"     # a sequence of tensors: its truth is its length
    DATA = "data"           # a Python value read from tensor values (`x.item()`, `float(x)`)
    META = "meta"           # reads no tensor's values: sizes, dtypes, arguments, literals
    NONE = "none"           # the literal None
    UNKNOWN = "unknown"


_VALUES = (Kind.TENSOR, Kind.DATA)      # what a truth test refuses
# Tensor attributes and methods that read metadata only; any other `is_*` does too, but for
# `is_nonzero`.
_META_TENSOR_ATTRS = frozenset({"shape", "ndim", "dtype", "device", "layout", "requires_grad",
                                "is_leaf", "names", "itemsize", "nbytes", "retains_grad",
                                "grad_fn", "output_nr"})
_META_TENSOR_METHODS = frozenset({"dim", "ndimension", "size", "numel", "nelement", "stride",
                                  "storage_offset", "element_size", "get_device", "has_names",
                                  "dim_order", "data_ptr"})
_DATA_TENSOR_METHODS = frozenset({"item", "tolist", "is_nonzero", "equal", "allclose"})
# torch functions (and Tensor methods) whose `input` and `other` are Tensors only: no overload
# takes a number (torch.maximum(x, 0.5) is a TypeError).
_TENSOR_OPERANDS = frozenset({"maximum", "minimum", "fmax", "fmin", "atan2", "arctan2",
                              "logical_and", "logical_or", "logical_xor", "hypot", "nextafter",
                              "ldexp", "igamma", "igammac", "heaviside"})
_TENSORS_FUNCTIONS = frozenset({"unbind", "split", "chunk", "tensor_split", "split_with_sizes",
                                "unsafe_split", "unsafe_chunk", "hsplit", "vsplit", "dsplit",
                                "broadcast_tensors", "meshgrid", "grad"})
# torch functions of tensors or dtypes that give metadata (besides `is_*`).
_META_TORCH_FUNCTIONS = frozenset({"numel", "result_type", "can_cast", "promote_types", "finfo",
                                   "iinfo", "typename", "Size", "device", "get_device",
                                   "broadcast_shapes"})


def _join(a: Kind, b: Kind) -> Kind:
    """The kind of a value that is either `a` or `b`."""
    if a is b or b is Kind.NONE:
        return a
    return b if a is Kind.NONE else Kind.UNKNOWN


def _arith(kinds) -> Kind:
    """The kind of what an operator computes from operands of `kinds`."""
    kinds = set(kinds)
    for k in (Kind.TENSOR, Kind.DATA, Kind.UNKNOWN, Kind.TENSORS):
        if k in kinds:
            return k
    return Kind.META


def _elements(k: Kind) -> Kind:
    """The kind of what iterating a value of kind `k` gives."""
    if k in (Kind.TENSOR, Kind.TENSORS):
        return Kind.TENSOR
    return k if k in (Kind.META, Kind.DATA) else Kind.UNKNOWN


def _sequence(items) -> Kind:
    kinds = {Kind.TENSOR if k is Kind.NONE else k for k in items}
    if kinds <= {Kind.TENSOR}:
        return Kind.TENSORS
    return Kind.META if kinds == {Kind.META} else Kind.UNKNOWN


def _list_form(items) -> Form:
    """The form of a list whose items have the numeric forms `items`: one float makes it a list
    of floats, as one Scalar (which may hold a float) makes it a list of Scalars."""
    items = set(items)
    return Form.FLOATS if Form.FLOAT in items else Form.SCALARS if Form.SCALAR in items \
        else Form.SHAPE


def _join_forms(a: Form | None, b: Form | None) -> Form | None:
    """The form of a value that is either `a` or `b`."""
    if a is b:
        return a
    return Form.NUMBER if a in _NUMERIC and b in _NUMERIC else None


def _not_none_if(cond: Expr, truth: bool, kinds: _Kinds) -> frozenset[str]:
    """The inputs and bindings that are not None where `cond` has the truth `truth`."""
    match cond:
        case BinOp(op=BinOpKind.is_not | BinOpKind.is_ as op, left=a, right=b):
            named = a if isinstance(b, Const) and b.value is None else \
                b if isinstance(a, Const) and a.value is None else None
            if isinstance(named, (InputRef, LocalRef)) and truth == (op is BinOpKind.is_not):
                return frozenset({named.name})
        case UnaryOp(op=UnaryKind.not_, operand=o):
            return _not_none_if(o, not truth, kinds)
        case BinOp(op=BinOpKind.and_ | BinOpKind.or_ as op, left=a, right=b) \
                if truth == (op is BinOpKind.and_):
            # both operands have that truth
            return _not_none_if(a, truth, kinds) | _not_none_if(b, truth, kinds)
        case InputRef(name=n) if truth:
            return frozenset({n})    # None is falsy
        case LocalRef(name=n):
            told = kinds.guards.get(n, (frozenset(), frozenset()))[0 if truth else 1]
            return told | {n} if truth else told
    return frozenset()


def _none_if(cond: Expr, truth: bool) -> frozenset[str]:
    """The inputs and bindings that are None where `cond` has the truth `truth`."""
    match cond:
        case BinOp(op=BinOpKind.is_not | BinOpKind.is_ as op, left=a, right=b):
            named = a if isinstance(b, Const) and b.value is None else \
                b if isinstance(a, Const) and a.value is None else None
            if isinstance(named, (InputRef, LocalRef)) and truth == (op is BinOpKind.is_):
                return frozenset({named.name})
        case UnaryOp(op=UnaryKind.not_, operand=o):
            return _none_if(o, not truth)
        case BinOp(op=BinOpKind.and_ | BinOpKind.or_ as op, left=a, right=b) \
                if truth == (op is BinOpKind.and_):
            return _none_if(a, truth) | _none_if(b, truth)
    return frozenset()


def not_none_where(f: Formula, kinds: _Kinds) -> dict[int, frozenset[str]]:
    """For each call (by id) of the formula `f`, the names the conditions around it tell are
    not None there (`ex.g(grad, n) if n is not None else grad`)."""
    out: dict[int, frozenset[str]] = {}

    def visit(e: Expr, known: frozenset[str]) -> None:
        if isinstance(e, Call):
            out[id(e)] = known
        match e:
            case IfExp(cond=c, then=a, orelse=b):
                visit(c, known)
                visit(a, known | _not_none_if(c, True, kinds))
                visit(b, known | _not_none_if(c, False, kinds))
            case BinOp(op=BinOpKind.and_ | BinOpKind.or_ as op, left=a, right=b):
                visit(a, known)
                visit(b, known | _not_none_if(a, op is BinOpKind.and_, kinds))
            case ListComp(elem=elem, iterable=it, cond=c) if c is not None:
                visit(it, known)
                visit(c, known)
                visit(elem, known | _not_none_if(c, True, kinds))
            case _:
                for child in children(e):
                    visit(child, known)

    for e in f.exprs():
        visit(e, frozenset())
    return out


def _tensor_method(name: str) -> Kind:
    if name in _DATA_TENSOR_METHODS:
        return Kind.DATA
    if name in _META_TENSOR_METHODS or name.startswith("is_"):
        return Kind.META
    return Kind.TENSORS if name in _TENSORS_FUNCTIONS else Kind.TENSOR


class Form(enum.Enum):
    """What a value surely is where a library op's parameter takes it (`_Kinds.form`): finer
    than Kind.META, which holds numbers, shapes, dtypes and strings alike."""
    TENSOR = "a Tensor"
    TENSORS = "a list of Tensors"
    SHAPE = "a shape"       # sizes: `x.shape`, `x.size()`, an `int[]` argument, `(n, 2)`
    FLOATS = "a list of floats"     # a `float[]` argument, a slice of one, `[0.5, n]`
    SCALARS = "a list of Scalars"   # a `Scalar[]` argument: its items may be floats
    # an int or a bool (one size: `x.size(0)`, `x.numel()`; `n > 1`), or a number that may be
    # either or a float (`x.item()`, `2 ** n`)
    NUMBER = "a number"
    FLOAT = "a float"       # `0.5`, `x.size(0) / 2`, `float(...)`, a `float` argument
    SCALAR = "a Scalar"     # a `Scalar` argument, or arithmetic with one: it may hold a float
    STRING = "a string"
    DTYPE = "a dtype"
    DEVICE = "a device"
    LAYOUT = "a layout"
    MEMORY_FORMAT = "a memory format"


_NUMERIC = (Form.NUMBER, Form.FLOAT, Form.SCALAR)
_LISTS = (Form.SHAPE, Form.FLOATS, Form.SCALARS)
# The form of an item of a list of each form.
_ITEM_FORMS = {Form.SHAPE: Form.NUMBER, Form.FLOATS: Form.FLOAT, Form.SCALARS: Form.SCALAR}
_NUMBERS = (BaseTy.int, BaseTy.SymInt, BaseTy.float, BaseTy.bool)
# The forms of arguments of other types, and of torch's constants.
_ARGUMENT_FORMS = {BaseTy.float: Form.FLOAT, BaseTy.Scalar: Form.SCALAR, BaseTy.str: Form.STRING,
                   BaseTy.ScalarType: Form.DTYPE, BaseTy.Device: Form.DEVICE,
                   BaseTy.Layout: Form.LAYOUT, BaseTy.MemoryFormat: Form.MEMORY_FORMAT}
_TORCH_CONSTANTS = {
    **{name: Form.DTYPE for name in SCALAR_TYPE_NAMES},
    **{v.python.removeprefix("torch."): Form.LAYOUT for v in LAYOUTS},
    **{v.python.removeprefix("torch."): Form.MEMORY_FORMAT for v in MEMORY_FORMATS},
    "pi": Form.FLOAT, "e": Form.FLOAT, "inf": Form.FLOAT, "nan": Form.FLOAT}
_TENSOR_ATTR_FORMS = {"shape": Form.SHAPE, "ndim": Form.NUMBER, "dtype": Form.DTYPE,
                      "device": Form.DEVICE, "layout": Form.LAYOUT, "requires_grad": Form.NUMBER,
                      "is_leaf": Form.NUMBER, "itemsize": Form.NUMBER, "nbytes": Form.NUMBER}
# Tensor methods giving one number, and those giving sizes when called without an argument.
_NUMBER_METHODS = frozenset({"dim", "ndimension", "numel", "nelement", "element_size",
                             "storage_offset", "get_device", "item"})
_SIZES_METHODS = frozenset({"size", "stride"})
_ARITH_OPS = (BinOpKind.add, BinOpKind.sub, BinOpKind.mul, BinOpKind.div, BinOpKind.floordiv,
              BinOpKind.mod, BinOpKind.pow)


class _Kinds:
    """What each value of a formula is (Note [Data-dependent conditions]): `bound` holds the
    kinds of its bindings and loop variables."""

    def __init__(self, schema: FunctionSchema, bound: dict[str, Kind],
                 lib: OpLibrary | None = None):
        self.schema = schema
        self.bound = bound
        self.lib = lib      # where calls of library ops are looked up; None: they are unknown
        self.forms: dict[str, Form] = {}    # of the bindings whose form is known
        self.values: dict[str, Expr] = {}   # the bindings' values
        self.maybe_none: set[str] = set()   # bindings that may hold None
        # The names a binding's truth, and its falsity, tell are not None (`has = n is not None`).
        self.guards: dict[str, tuple[frozenset[str], frozenset[str]]] = {}

    def _type(self, t) -> Kind:
        if is_tensor_list(t):
            return Kind.TENSORS
        return Kind.TENSOR if is_tensor_like(t) else Kind.META

    def _return(self, i: int) -> Kind:
        t = self.schema.returns[i].type
        return self._type(t) if is_tensor_like(t) else Kind.UNKNOWN

    def of(self, e: Expr) -> Kind:
        match e:
            case Const(value=None):
                return Kind.NONE
            case Const() | EllipsisLit() | Slice() | TorchRef():
                return Kind.META
            case InputRef(name=n):
                arg = self.schema.argument(n)
                assert arg is not None
                return self._type(arg.type)
            case GradRef(index=i) | ResultRef(index=i):
                return self._return(i)
            case GradsRef():
                return Kind.TENSORS
            case ResultsRef():
                tensors = all(is_tensor_like(r.type) for r in self.schema.returns)
                return Kind.TENSORS if tensors else Kind.UNKNOWN
            case LocalRef(name=n) | LoopVar(name=n):
                return self.bound.get(n, Kind.UNKNOWN)
            case Attr(obj=obj, name=name):
                k = self.of(obj)
                if k is Kind.TENSOR:
                    meta = name in _META_TENSOR_ATTRS or name.startswith("is_")
                    return Kind.META if meta else Kind.TENSOR
                return k if k in (Kind.META, Kind.DATA) else Kind.UNKNOWN
            case Call():
                return self._call(e)
            case BinOp(op=BinOpKind.is_ | BinOpKind.is_not):
                return Kind.META
            case BinOp(op=BinOpKind.and_ | BinOpKind.or_, left=a, right=b):
                return _join(self.of(a), self.of(b))
            case BinOp(op=op, left=a, right=b):
                kinds = {self.of(a), self.of(b)}
                if op in _COMPARISONS and Kind.TENSORS in kinds:
                    return Kind.DATA    # sequences compare their tensors
                return _arith(Kind.META if k is Kind.NONE else k for k in kinds)
            case UnaryOp(op=UnaryKind.not_, operand=o):
                k = self.of(o)
                return Kind.DATA if k in _VALUES else Kind.UNKNOWN if k is Kind.UNKNOWN \
                    else Kind.META
            case UnaryOp(operand=o):
                return self.of(o)
            case IfExp(then=a, orelse=b):
                return _join(self.of(a), self.of(b))
            case Subscript(obj=obj, items=items):
                k = self.of(obj)
                if k is Kind.TENSORS:
                    return Kind.TENSORS if any(isinstance(i, Slice) for i in items) \
                        else Kind.TENSOR
                if k is Kind.META and any(self.of(i) in _VALUES for i in items):
                    return Kind.DATA
                returns = self._library_returns(obj)
                if returns is not None and len(returns) > 1 and len(items) == 1 \
                        and isinstance(items[0], Const) and type(items[0].value) is int \
                        and -len(returns) <= items[0].value < len(returns):
                    return returns[items[0].value]     # one output of several
                return k if k is not Kind.NONE else Kind.UNKNOWN
            case TupleLit(items=items) | ListLit(items=items):
                return _sequence(self.of(i) for i in items)
            case ListComp(elem=elem, names=names, iterable=it):
                saved = dict(self.bound)
                self.bound.update(zip(names, self.loop_kinds(it, len(names))))
                try:
                    return _sequence([self.of(elem)])
                finally:
                    self.bound = saved
        return Kind.UNKNOWN

    def form(self, e: Expr) -> Form | None:
        """What `e` surely is (Form) where it is not None, None where it cannot be told: a
        library op's parameter is refused only what it surely cannot take. Whether `e` may be
        None is `may_be_none`'s."""
        k = self.of(e)
        if k is Kind.TENSOR:
            return Form.TENSOR
        if k is Kind.TENSORS:
            # `[]` and `[None]` are of this kind too, and fit a list of numbers.
            literal = isinstance(e, (TupleLit, ListLit))
            if literal and not any(self.of(i) is Kind.TENSOR for i in e.items):
                return None
            return Form.TENSORS
        match e:
            case Const(value=v):
                return {int: Form.NUMBER, bool: Form.NUMBER, float: Form.FLOAT,
                        str: Form.STRING}.get(type(v))
            case InputRef(name=n):
                t = strip_optional(self.schema.argument(n).type)
                if is_base(t, BaseTy.int, BaseTy.SymInt, BaseTy.bool, BaseTy.SymBool):
                    return Form.NUMBER
                if isinstance(t, BaseType):
                    return _ARGUMENT_FORMS.get(t.name)
                if isinstance(t, ListType) and is_base(t.elem, BaseTy.float):
                    return Form.FLOATS
                if isinstance(t, ListType) and is_base(t.elem, BaseTy.Scalar):
                    return Form.SCALARS
                if isinstance(t, ListType) and is_base(t.elem, *_NUMBERS):
                    return Form.SHAPE
            case LocalRef(name=n):
                return self.forms.get(n)
            case TorchRef(path=(name,)):
                return _TORCH_CONSTANTS.get(name)
            case Attr(obj=obj, name=name) if self.of(obj) is Kind.TENSOR:
                return _TENSOR_ATTR_FORMS.get(name, Form.NUMBER if name.startswith("is_")
                                              else None)
            case Call(func=Attr(obj=obj, name=name), args=args, kwargs=()) \
                    if self.of(obj) is Kind.TENSOR:
                if name in _SIZES_METHODS:
                    return Form.SHAPE if not args else Form.NUMBER if len(args) == 1 else None
                if name.startswith("is_"):
                    return Form.NUMBER     # a bool
                return Form.NUMBER if name in _NUMBER_METHODS and not args else None
            case Call(func=PyBuiltinRef(name="len" | "int")):
                return Form.NUMBER
            case Call(func=PyBuiltinRef(name="float")):
                return Form.FLOAT
            case Call(func=PyBuiltinRef(name="abs"), args=(a,)) \
                    if (inner := self.form(a)) in _NUMERIC:
                return inner
            case Call(func=TorchRef(path=("device",))):
                return Form.DEVICE
            case Call(func=TorchRef(path=("promote_types" | "result_type",))):
                return Form.DTYPE
            case Call(func=PyBuiltinRef(name="list" | "tuple"), args=(a,)) \
                    if (inner := self.form(a)) in _LISTS:
                return inner
            case Subscript(obj=obj, items=(i,)) if (listed := self.form(obj)) in _LISTS:
                if isinstance(i, Slice):
                    return listed
                if self.form(i) is not Form.NUMBER or listed is None:
                    return None
                if isinstance(obj, (TupleLit, ListLit)):
                    # `[n, 0.5][i]` may be either item
                    item_forms = {self.form(x) for x in obj.items}
                    return item_forms.pop() if len(item_forms) == 1 else Form.NUMBER
                return _ITEM_FORMS[listed]
            case BinOp(op=op) if (op in _COMPARISONS or op in (BinOpKind.is_, BinOpKind.is_not)) \
                    and self.of(e) in (Kind.META, Kind.DATA):
                return Form.NUMBER  # a bool
            case BinOp(op=BinOpKind.and_ | BinOpKind.or_, left=a, right=b):
                return _join_forms(self.form(a), self.form(b))     # one of them
            case BinOp(op=op, left=a, right=b) if op in _ARITH_OPS:
                forms = (self.form(a), self.form(b))
                if forms[0] in _NUMERIC and forms[1] in _NUMERIC:
                    # Python's `/` gives a float even of two ints, as do operators with one
                    if op is BinOpKind.div or Form.FLOAT in forms:
                        return Form.FLOAT
                    return Form.SCALAR if Form.SCALAR in forms else Form.NUMBER
                # lists concatenate (holding floats if either does), and repeat times an int
                if op is BinOpKind.add and forms[0] in _LISTS and forms[1] in _LISTS:
                    return _list_form(_ITEM_FORMS[f] for f in forms if f is not None)
                if op is BinOpKind.mul and Form.NUMBER in forms \
                        and (forms[0] in _LISTS or forms[1] in _LISTS):
                    return forms[0] if forms[0] in _LISTS else forms[1]
                # Of values that are no Tensor (`max(a, b) / 2`), `/` or a float operand gives a
                # float, or Python raises (a shape, a dtype).
                if (op is BinOpKind.div or Form.FLOAT in forms) \
                        and self.of(a) in (Kind.META, Kind.DATA) \
                        and self.of(b) in (Kind.META, Kind.DATA):
                    return Form.FLOAT
            case UnaryOp(op=UnaryKind.neg | UnaryKind.pos, operand=o) \
                    if (inner := self.form(o)) in _NUMERIC:
                return inner
            case UnaryOp(op=UnaryKind.not_) if self.of(e) in (Kind.META, Kind.DATA):
                return Form.NUMBER  # a bool
            case IfExp(then=a, orelse=b):
                return _join_forms(self.form(a), self.form(b))
            case TupleLit(items=items) | ListLit(items=items) if items:
                of_items = [self.form(i) for i in items]
                return _list_form(of_items) if all(f in _NUMERIC for f in of_items) else None
            case ListComp(elem=elem, names=names, iterable=it):
                saved = dict(self.bound)
                self.bound.update(zip(names, self.loop_kinds(it, len(names))))
                try:
                    item = self.form(elem)
                finally:
                    self.bound = saved
                return _list_form([item]) if item in _NUMERIC else None
        return None

    def may_be_none(self, e: Expr, not_none: frozenset[str] = frozenset()) -> bool:
        """Whether `e` may be None: the literal, an optional input or a binding of one, unless
        a condition around it (`n if n is not None else 0`) tells otherwise; `not_none`: the
        names those conditions tell are not None where `e` is."""
        match e:
            case Const(value=None):
                return True
            case InputRef(name=n):
                return n not in not_none and isinstance(self.schema.argument(n).type,
                                                        OptionalType)
            case LocalRef(name=n):
                return n not in not_none and n in self.maybe_none
            case IfExp(cond=c, then=a, orelse=b):
                return (self.may_be_none(a, not_none | _not_none_if(c, True, self))
                        or self.may_be_none(b, not_none | _not_none_if(c, False, self)))
            case BinOp(op=BinOpKind.and_, left=a, right=b):
                # `a and b` is `a` where `a` is falsy: None is
                return self.may_be_none(a, not_none) or \
                    self.may_be_none(b, not_none | _not_none_if(a, True, self))
            case BinOp(op=BinOpKind.or_, right=b):
                return self.may_be_none(b, not_none)
        return False

    def divides(self, e: Expr) -> bool:
        """Whether `e` is a true division of numbers, or computed from one."""
        for node in walk(e):
            if isinstance(node, BinOp) and node.op is BinOpKind.div \
                    and self.form(node) is Form.FLOAT:
                return True
            if isinstance(node, LocalRef) and node.name in self.values \
                    and self.divides(self.values[node.name]):
                return True
        return False

    def loop_kinds(self, it: Expr, n: int) -> list[Kind]:
        """The kinds of the `n` names a comprehension binds by iterating `it`."""
        match it:
            case Call(func=PyBuiltinRef(name="zip"), args=args) \
                    if len(args) == n and not any(isinstance(a, Star) for a in args):
                return [_elements(self.of(a)) for a in args]
            case Call(func=PyBuiltinRef(name="enumerate"), args=(seq,)) if n == 2:
                return [Kind.META, _elements(self.of(seq))]
        k = _elements(self.of(it))
        return [k] * n if n == 1 or k is Kind.TENSOR else [Kind.UNKNOWN] * n

    def _call(self, e: Call) -> Kind:
        args = [self.of(a.value if isinstance(a, Star) else a) for a in e.args]
        kinds = args + [self.of(v) for _, v in e.kwargs]
        match e.func:
            case BuiltinRef(name="unbroadcast"):
                return Kind.TENSOR
            case PyBuiltinRef(name="len" | "range"):
                return Kind.META
            case PyBuiltinRef(name="int" | "float"):
                k = _arith(kinds)
                return Kind.DATA if k in _VALUES else k
            case PyBuiltinRef(name="abs" | "sum" | "max" | "min"):
                k = _arith(kinds)
                if len(args) == 1 and k in (Kind.TENSOR, Kind.TENSORS):
                    return Kind.TENSOR if e.func.name in ("abs", "sum") else Kind.DATA
                return Kind.TENSOR if k is Kind.TENSORS else k
            case PyBuiltinRef(name="list" | "tuple"):
                return _sequence([_elements(args[0])]) if len(args) == 1 else Kind.META
            case TorchRef(path=("Tensor", name)):
                return _tensor_method(name)
            case TorchRef(path=path) if path:
                name = path[-1]
                if name == "is_nonzero" or name in _DATA_TENSOR_METHODS:
                    return Kind.DATA
                if name in _META_TORCH_FUNCTIONS or name.startswith("is_"):
                    return Kind.META
                if name in _TENSORS_FUNCTIONS:
                    return Kind.TENSORS
                # Other functions give tensors: of tensors, values read from them.
                tensors = {Kind.TENSOR, Kind.TENSORS, Kind.DATA} & set(kinds)
                return Kind.TENSOR if tensors else Kind.UNKNOWN
            case Attr(obj=obj, name=name):
                k = self.of(obj)
                if k is Kind.TENSOR:
                    return _tensor_method(name)
                return k if k in (Kind.META, Kind.DATA) else Kind.UNKNOWN
            case OpRef():
                returns = self._library_returns(e)
                if returns is None:
                    return Kind.UNKNOWN
                if not returns:
                    return Kind.NONE
                return returns[0] if len(returns) == 1 else _sequence(returns)
        return Kind.UNKNOWN

    def _library_returns(self, e: Expr) -> list[Kind] | None:
        """The kind of each output of `e` where it calls an op of the library (Note
        [Data-dependent conditions]); None for any other value, or without the library."""
        if self.lib is None or not (isinstance(e, Call) and isinstance(e.func, OpRef)):
            return None
        target = resolve(self.lib, e.func)
        if target is None:
            return None
        fake = fake_of(target)
        out: list[Kind] = []
        for i, r in enumerate(target.schema.returns):
            if is_tensor_like(r.type):
                out.append(self._type(r.type))
            elif is_base(r.type, BaseTy.int) or is_base(r.type, BaseTy.SymInt):
                if not isinstance(fake, FakeRule):
                    out.append(Kind.UNKNOWN)
                elif fake.output_uses_dynamic(i):
                    out.append(Kind.DATA)
                else:
                    # A size of the arguments: of Tensors, their sizes only.
                    given = [self.of(a.value if isinstance(a, Star) else a)
                             for a in (*e.args, *(v for _, v in e.kwargs))]
                    out.append(_arith(Kind.META if k in (Kind.TENSOR, Kind.TENSORS, Kind.NONE)
                                      else k for k in given))
            else:
                out.append(Kind.UNKNOWN)
        return out


_COMPARISONS = (BinOpKind.eq, BinOpKind.ne, BinOpKind.lt, BinOpKind.le, BinOpKind.gt,
                BinOpKind.ge)


# The torch a formula can name (Note [Formula vocabulary]), recorded from the pinned torch
# (`python -m codegen.formulas --refresh`): checking a formula against the record needs
# no `import torch` (seconds). A name the record lacks is looked up in the installed torch, under
# the same rule, before it is an error, so a newer torch's additions still pass.
#
# Note [Formula vocabulary]
# A formula runs at backward with the generated module's globals, so what it can name is what an op
# file can run. It names: the public functions, classes and constants of TORCH_MODULES (reached
# only through those modules: no attribute of a function, class or other object of torch), the
# public attributes and methods of tensors (and VALUE_ATTRS), this library's ops, and the builtins
# of the language. Never a private or dunder name (every Python sandbox escape goes through one),
# another module (`torch.os`), or torch's functions that read or write files, load code or change
# global state (FORBIDDEN).
TORCH_NAMES_FILE = "torch_names.json"
TORCH_MODULES = ("torch", "torch.nn", "torch.nn.functional", "torch.linalg", "torch.special",
                 "torch.fft", "torch.autograd", "torch.Tensor")
# Attributes of what formulas compute besides tensors: dtypes, finfo/iinfo, torch.Size.
VALUE_ATTRS = frozenset({"bits", "count", "eps", "resolution", "smallest_normal", "tiny",
                         "to_complex", "to_real"})
FORBIDDEN = re.compile(r"(load|save|from_file|get_file_path|import_ir_module\w*|compile|set_\w+"
                       r"|use_deterministic_algorithms|manual_seed|seed|init_num_threads"
                       r"|prepare_multiprocessing_environment)\Z")
_TORCH_VOCABULARY = ("formulas name functions, classes and constants of " +
                     ", ".join(TORCH_MODULES[:-1]) + ", except file I/O and global settings")
_BUILTIN_USAGE = {"unbroadcast": "unbroadcast(grad, input)",
                  "not_implemented": 'not_implemented("why")'}


def _in_vocabulary(module: str, obj: object, name: str) -> bool:
    """Whether `name` of torch's module `module` (the object `obj`) may appear in a formula."""
    import types

    if name.startswith("_"):
        return False
    try:
        value = getattr(obj, name)
    except Exception:
        return False
    if isinstance(value, types.ModuleType):     # torch.ops and torch.classes are modules too
        return f"{module}.{name}" in TORCH_MODULES
    if module == "torch.Tensor":
        return True
    return FORBIDDEN.match(name) is None and (callable(value) or _is_constant(value))


def _is_constant(value: object) -> bool:
    import torch

    return isinstance(value, (bool, int, float, torch.dtype, torch.layout, torch.memory_format))


@lru_cache(maxsize=1)
def _recorded_names() -> dict[str, frozenset[str]]:
    text = resources.files("codegen").joinpath(TORCH_NAMES_FILE).read_text()
    return {k: frozenset(v) for k, v in json.loads(text).items()}


def _module(name: str) -> object:
    import importlib

    import torch

    return torch.Tensor if name == "torch.Tensor" else importlib.import_module(name)


def torch_names() -> dict[str, list[str]]:
    """The vocabulary of TORCH_MODULES in the installed torch (what the JSON file records)."""
    out: dict[str, list[str]] = {}
    for mod in TORCH_MODULES:
        obj = _module(mod)
        out[mod] = sorted(n for n in dir(obj) if _in_vocabulary(mod, obj, n))
    return out


def _has_vocabulary(path: tuple[str, ...]) -> bool:
    """Whether `torch.<path>` is one of TORCH_MODULES, whose attributes a formula may name."""
    return ".".join(("torch",) + path) in TORCH_MODULES


def _is_module(path: tuple[str, ...]) -> bool:
    """Whether `torch.<path>` is a module (not a value: `torch.Tensor` is a class)."""
    return _has_vocabulary(path) and path != ("Tensor",)


def _torch_has(path: tuple[str, ...]) -> bool:
    """Whether `torch.<path>` is in the vocabulary; `path[:-1]` names one of TORCH_MODULES."""
    module = ".".join(("torch",) + path[:-1])
    if path[-1] in _recorded_names()[module]:
        return True
    return _in_vocabulary(module, _module(module), path[-1])


def _torch_exists(path: tuple[str, ...]) -> bool:
    return hasattr(_module(".".join(("torch",) + path[:-1])), path[-1])


def _torch_hint(path: tuple[str, ...]) -> str | None:
    module = ".".join(("torch",) + path[:-1])
    return _suggest(path[-1], _recorded_names()[module])


def _tensor_has(name: str) -> bool:
    if name in _recorded_names()["torch.Tensor"]:
        return True
    import torch

    return _in_vocabulary("torch.Tensor", torch.Tensor, name)


# derivatives.yaml's C++ spellings -> what a formula (Python) writes; difflib suggested
# 'sum_to_size' for `sym_size` and 'storage_type' for `scalar_type`.
_CPP_SPELLINGS = {
    "sym_size": "size(d)", "sym_sizes": "shape", "sizes": "shape", "sym_numel": "numel()",
    "sym_stride": "stride(d)", "sym_strides": "stride()", "strides": "stride()",
    "sym_storage_offset": "storage_offset()", "scalar_type": "dtype",
}


# `ns::op` as C++ and schemas name an op, where the parser stopped (at the first ':').
_QUALIFIED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)::([A-Za-z_][A-Za-z0-9_.]*)")


def _qualified_name_hint(text: str, at: int) -> str | None:
    """The hint for `ns::op(...)` in a formula, which is Python and names library ops with a
    dot; the parser only sees an unexpected ':'."""
    for m in _QUALIFIED.finditer(text):
        if m.end(1) == at:
            return (f"a formula is Python: call the library op as '{m[1]}.{m[2]}(...)' "
                    f"('{m[1]}::{m[2]}' is how C++ names it)")
    return None


def _tensor_hint(name: str) -> str | None:
    if name in _CPP_SPELLINGS:
        return (f"'{name}' is derivatives.yaml's C++; a formula is Python: write "
                f"'.{_CPP_SPELLINGS[name]}'" + ("" if name == "scalar_type" else
                                               " (sizes stay symbolic under torch.compile)"))
    return _suggest(name, _recorded_names()["torch.Tensor"] | VALUE_ATTRS)


def _suggest(name: str, choices) -> str | None:
    # difflib compares every choice; no torch name is longer than this, a pasted blob may be.
    return did_you_mean(name, choices) if len(name) <= 64 else None


# --------------------------------------------------------------------------------------------------
# The derivatives section



def _differentiable_returns(schema: FunctionSchema) -> tuple[bool, ...]:
    return tuple(is_tensor_like(r.type) for r in schema.returns)


def uses_register_autograd(schema: FunctionSchema) -> bool:
    """Whether the op's autograd is registered with torch.library.register_autograd: its Tensor
    lists (several Tensor[] returns, a Tensor[]? input) cannot pass an autograd.Function flat
    (Note [Generated autograd] in codegen/dest/py_autograd.py)."""
    return (sum(is_tensor_list(r.type) for r in schema.returns) > 1
            or any(is_tensor_list(a.type) and a.type != strip_optional(a.type)
                   for a in schema.arguments))


def parse_derivatives(spec: DerivativesSpec, schema: FunctionSchema,
                      diags: Diagnostics) -> Derivatives | None:
    """Parse and check the `derivatives:` of the op `schema`; errors go to `diags` (then None)."""
    n_errors = len(diags.items)
    if schema.mutable_arguments:
        if shape_tag(schema) is not None:
            diags.error(spec.loc, f"'{schema.name}' mutates its arguments; derivatives go on its "
                        "functional variant",
                        "autograd reaches a mutating op through its functional variant")
        else:
            # Note [Autograd of mutating ops] in codegen/dest/cpp_autograd.py
            diags.error(spec.loc, f"'{schema.name}' writes to its arguments and is neither "
                        "in-place nor out=, so it takes no derivatives: autograd raises when one "
                        "of its arguments requires grad",
                        "declare an op that returns what this one writes, give it the "
                        "derivatives, and call it where gradients are needed")
        return None
    # A keyword-only Tensor may be non_differentiable (aten's _flash_attention_forward has
    # `*, Tensor? seqused_k=None`): the generated Function takes every argument in order. A
    # gradient for one, or one at all where torch.library.register_autograd (which refuses
    # keyword-only Tensors) registers the op's autograd, is refused.
    kw_tensors = [a.name for a in schema.kwarg_only if is_tensor_like(a.type)]
    if kw_tensors and uses_register_autograd(schema):
        keyed = [spec.keys[i][names.index(kw_tensors[0])]
                 for i, (names, _) in enumerate(spec.formulas)
                 if kw_tensors[0] in names and i < len(spec.keys)]
        diags.error(keyed[0] if keyed else spec.loc,
                    f"derivatives cannot cover keyword-only Tensor arguments "
                    f"('{kw_tensors[0]}') of an op with a Tensor[]? argument or several "
                    "Tensor[] returns",
                    "its autograd goes through torch.library.register_autograd, which refuses "
                    "keyword-only Tensors; make them positional")
        return None
    for i, (names, text) in enumerate(spec.formulas):
        if text.text.strip() == NON_DIFFERENTIABLE:
            continue
        for j, n in enumerate(names):
            if n in kw_tensors:
                diags.error(spec.keys[i][j] if i < len(spec.keys) else text.loc,
                            f"keyword-only Tensor argument '{n}' cannot have a gradient",
                            f"make '{n}' positional, or write `{n}: non_differentiable`")

    diff_outputs = _differentiable_returns(schema)
    if spec.output_differentiability is not None:
        flags = spec.output_differentiability
        if len(flags) != len(schema.returns):
            diags.error(spec.output_differentiability_loc or spec.loc,
                        f"output_differentiability has {len(flags)} entries but the op "
                        f"has {len(schema.returns)} output{'s' if len(schema.returns) != 1 else ''}",
                        "one true or false per return, in order")
            return None
        for i, (flag, r) in enumerate(zip(flags, schema.returns)):
            if flag and not is_tensor_like(r.type):
                at = spec.output_differentiability_locs
                diags.error(at[i] if i < len(at) else spec.loc,
                            f"output {i} ({r.type}) is not a Tensor and cannot be "
                            "differentiable", "write false for it")
                return None
        diff_outputs = tuple(flags)

    formulas: list[Formula] = []
    non_diff: list[str] = []
    seen: dict[str, Loc] = {}
    meant: set[str] = set()     # inputs a misspelled key was taken for (no "no formula" then)
    for i, (names, text) in enumerate(spec.formulas):
        bad_name = False
        for j, n in enumerate(names):
            key = spec.keys[i][j] if i < len(spec.keys) else text.loc
            arg = schema.argument(n)
            if arg is None:
                guess = closest(n, [a.name for a in schema.arguments])
                if guess is not None:
                    meant.add(guess)
                diags.error(key, f"derivatives name '{n}', which is not an input of "
                            f"{schema.name}",
                            f"did you mean '{guess}'?" if guess is not None
                            else _tensor_inputs_hint(schema))
                bad_name = True
            elif not is_tensor_like(arg.type):
                article = "an" if str(arg.type)[:1] in "aeiouAEIOU" else "a"   # an int, a float
                diags.error(key, f"'{n}' is {article} {arg.type}, not a Tensor; only Tensor "
                            "inputs have gradients")
                bad_name = True
            elif n in seen:
                diags.error(key, f"input '{n}' has two derivative formulas",
                            f"the first is at {seen[n]}")
                bad_name = True
            else:
                seen[n] = key
        if bad_name:
            continue
        if text.text.strip() == NON_DIFFERENTIABLE:
            non_diff.extend(names)
            continue
        try:
            syn = _parser().parse(text.text)
        except ExprSyntaxError as err:
            diags.error(text.at(err.span.start, err.span.end - err.span.start), err.message,
                        _qualified_name_hint(text.text, err.span.start) or err.hint)
            continue
        try:
            bindings, expr, kinds = _check_formula(syn, text, schema, diff_outputs, diags)
        except _Bad:
            continue
        if len(names) > 1 and _one_tensor(expr, kinds):
            diags.error(text.loc, f"the formula for {', '.join(names)} gives 1 gradient for "
                        f"{len(names)} inputs",
                        f"give one per input: `({', '.join(f'g_{n}' for n in names)})`")
            continue
        if len(names) > 1 and isinstance(expr, TupleLit) and len(expr.items) != len(names):
            given = len(expr.items)
            diags.error(text.loc, f"the formula for {', '.join(names)} gives {given} "
                        f"gradient{'s' if given != 1 else ''} for {len(names)} inputs")
            continue
        # One Tensor's gradient is one tensor: a tuple would reach autograd as the gradient.
        one = schema.argument(names[0]) if len(names) == 1 else None
        if one is not None and isinstance(expr, TupleLit) and not is_tensor_list(one.type):
            given = len(expr.items)
            diags.error(text.loc, f"the formula for {names[0]} gives {given} "
                        f"gradient{'s' if given != 1 else ''} for 1 input",
                        f"'{names[0]}' is a {one.type}: give it one gradient, or name the "
                        "inputs the others are for (`x, y: (gx, gy)`)")
            continue
        formulas.append(Formula(names, expr, text.text, bindings, loc=text.loc, source=text))

    for a in schema.arguments:
        if not is_tensor_like(a.type) or a.name in seen or a.name in meant:
            continue
        if not any(diff_outputs):
            # No gradient flows back through the op (torchgen's `output_differentiability:
            # [False]` alone): its inputs have none.
            non_diff.append(a.name)
        else:
            diags.error(spec.loc, f"input '{a.name}' has no derivative formula",
                        f"add `{a.name}: <formula>`, or `{a.name}: non_differentiable` if it has "
                        "no gradient")
    if len(diags.items) != n_errors:
        return None
    return Derivatives(tuple(formulas), tuple(non_diff), diff_outputs, loc=spec.loc)


def _check_formula(syn, text: Located, schema: FunctionSchema, diff_outputs: tuple[bool, ...],
                   diags: Diagnostics, lib: OpLibrary | None = None
                   ) -> tuple[tuple[tuple[str, Expr], ...], Expr, _Kinds]:
    """The bindings and expression of the parsed formula `syn`, and what its values are;
    raises _Bad after an error.
    `lib`: the library its op calls are looked up in (None: what they return is unknown)."""
    checker = _Checker(text, schema, diff_outputs, diags, lib)
    *bindings, expr = checker.all_of(*(partial(checker.binding, b) for b in syn.parts[:-1]),
                                     partial(checker.expr, syn.parts[-1]))
    return tuple(bindings), expr, checker.kinds


def _one_tensor(e: Expr, kinds: _Kinds) -> bool:
    """Whether `e` is surely one Tensor: unpacked into several gradients, it would be split
    along its first dimension. Calls are left out (torch.sort, torch.var_mean give tuples)."""
    match e:
        case InputRef() | GradRef() | ResultRef() | LocalRef() | BinOp() | UnaryOp():
            return kinds.of(e) is Kind.TENSOR
        case IfExp(then=a, orelse=b):
            return _one_tensor(a, kinds) or _one_tensor(b, kinds)
    return False


def _tensor_inputs_hint(schema: FunctionSchema) -> str:
    names = [a.name for a in schema.arguments if is_tensor_like(a.type)]
    return "Tensor inputs: " + (", ".join(names) if names else "none")


# --------------------------------------------------------------------------------------------------
# Across the library: library op calls


def lookup(lib: OpLibrary, ref: OpRef) -> list[Op]:
    """The library ops `ref` can mean (several overloads when none is named)."""
    return [op for op in lib.named(ref.namespace, ref.name)
            if ref.overload is None or op.name.overload == ref.overload]


def resolve(lib: OpLibrary, ref: OpRef) -> Op | None:
    """The one op a reference calls: the named overload, else the only or the default one."""
    ops = lookup(lib, ref)
    if len(ops) == 1:
        return ops[0]
    default = [op for op in ops if op.name.overload == ""]
    return default[0] if ref.overload is None and default else None


def check_library(lib: OpLibrary, diags: Diagnostics) -> bool:
    """Check every library op call of every formula; True when all are fine."""
    ok = True
    names_by_ns: dict[str, list[str]] = {}
    for op in lib.ops:
        names_by_ns.setdefault(op.namespace, []).append(op.name.name)
    for op in lib.ops:
        d = op.derivatives
        if not isinstance(d, Derivatives):
            continue
        for f in d.formulas:
            nodes = list(walk_all_of(f))
            called = {id(n.func) for n in nodes if isinstance(n, Call)}
            fine = True
            calls = []      # the calls of library ops that match their schemas
            for node in nodes:
                if isinstance(node, Call) and isinstance(node.func, OpRef):
                    if _check_call(lib, op, node, node.func, diags, names_by_ns):
                        calls.append(node)
                    else:
                        fine = False
                elif isinstance(node, OpRef) and id(node) not in called:
                    fine = _check_ref(lib, op, node, diags, names_by_ns) and fine
            # What a call that does not match returns is unknown (Kind.UNKNOWN): nothing said of
            # the other calls follows from its error.
            kinds = _check_knowing_library(lib, op, f, diags) if calls else None
            if calls and kinds is None:
                fine = False
            elif kinds is not None:
                not_none = not_none_where(f, kinds)
                for node in calls:    # each call, whatever the others are given
                    fine = _check_argument_types(lib, node, node.func, kinds, diags,
                                                 not_none[id(node)]) and fine
            if fine and isinstance(f.expr, Call) and isinstance(f.expr.func, OpRef):
                fine = _check_gradient_count(lib, op, f, f.expr, f.expr.func, diags)
            ok = ok and fine
    return ok


def warn_constants_in_backward(lib: OpLibrary, diags: Diagnostics) -> None:
    """`constant-in-backward` for every formula of the library (once per run: py_reg asks,
    after check_library found the library calls fine)."""
    for op in lib.ops:
        for f, i, source in constant_reads(lib, op):
            diags.warning(
                f.loc or op.loc, f"the formula reads {output_words(op.schema.returns, i)}, "
                "which output_differentiability marks non-differentiable although it has the "
                f"dtype of '{source}': the backward takes it as a constant, so {op.name} is "
                "differentiable once only (a second derivative raises)",
                "compute the gradient from differentiable outputs and inputs to differentiate "
                "twice", name="constant-in-backward", suppress=op.suppress)


def constant_reads(lib: OpLibrary, op: Op) -> list[tuple[Formula, int, str]]:
    """(formula, output index, input) for each output that a formula of `op` reads, that
    output_differentiability marks non-differentiable, and that the fake rule gives the dtype of a
    differentiable input (torchaudio's rnnt_loss returns the gradients it computes): the backward
    takes it as a constant, so only a first derivative through it is right. Index and mask
    outputs (an integer or bool dtype, or a non-differentiable input's) are constants, and a read
    inside a call of a library op without autograd is covered there: a second derivative raises
    naming that op."""
    return constant_reads_of(op, lambda ref: resolve(lib, ref) in first_order_only(lib, op))


def constant_reads_of(op: Op, covered: Callable[[OpRef], bool]) -> list[tuple[Formula, int, str]]:
    """`constant_reads`, where `covered` tells the library calls whose own lack of autograd
    stops a second derivative."""
    from codegen import shape as S

    d, rule = op.derivatives, op.fake
    if not isinstance(d, Derivatives) or not isinstance(rule, FakeRule) \
            or all(d.output_differentiability):
        return []
    out: list[tuple[Formula, int, str]] = []
    for f in d.formulas:
        read: set[int] = set()

        def visit(node: Node) -> None:
            if isinstance(node, Call) and isinstance(node.func, OpRef) and covered(node.func):
                return
            if isinstance(node, ResultRef):
                read.add(node.index)
            for c in children(node):
                visit(c)

        for e in f.exprs():
            visit(e)
        for i in sorted(read):
            if i >= len(d.output_differentiability) or d.output_differentiability[i] \
                    or i >= len(rule.outputs):
                continue
            match rule.outputs[i]:
                case S.Like(dtype=None, tensor=S.Arg(name=source)) | \
                        S.Reduce(dtype=None, tensor=S.Arg(name=source)) | \
                        S.Empty(dtype=None, like=str() as source):
                    pass
                case _:
                    continue
            if d.formula_for(source) is not None:
                out.append((f, i, source))
    return out


def output_words(returns: Sequence[Return], i: int) -> str:
    """`output 1 ('gradients')`: how messages name an op's output."""
    name = returns[i].name
    return f"output {i}" + (f" ('{name}')" if name else "")


def _check_knowing_library(lib: OpLibrary, op: Op, f: Formula,
                           diags: Diagnostics) -> _Kinds | None:
    """Check `f` again now that what its library op calls return is known: a condition on a
    Tensor one is refused as one on `x.sum()` is (Note [Data-dependent conditions]). Returns
    what the formula's values are, its bindings' included; None after an error."""
    assert isinstance(op.derivatives, Derivatives) and f.source is not None
    try:
        return _check_formula(_parser().parse(f.source.text), f.source, op.schema,
                              op.derivatives.output_differentiability, diags, lib)[2]
    except _Bad:
        return None


def _check_argument_types(lib: OpLibrary, call: Call, ref: OpRef, kinds: _Kinds,
                          diags: Diagnostics, not_none: frozenset[str] = frozenset()) -> bool:
    """No parameter of a library op is given what it surely cannot take, as when arguments are
    out of order: torch.ops would refuse it at backward, or read a Tensor's value there. The
    first argument refused only: arguments out of order make several wrong at once.
    `not_none`: the names the conditions around the call tell are not None."""
    target = resolve(lib, ref)
    assert target is not None
    schema = target.schema
    positional = []
    for a in call.args:
        if isinstance(a, Star):
            break   # what follows a spread lands on parameters known only at run time
        positional.append(a)
    given = [(arg, value, call.arg_locs[i] if i < len(call.arg_locs) else call.loc,
              f"argument {i + 1} ('{arg.name}')")
             for i, (arg, value) in enumerate(zip(schema.positional, positional))]
    given += [(schema.argument(key), value,
               call.kwarg_value_locs[i] if i < len(call.kwarg_value_locs) else call.loc,
               f"argument '{key}'")
              for i, (key, value) in enumerate(call.kwargs)]
    for arg, value, loc, what in given:
        if arg is None:
            continue
        if is_tensor_like(arg.type) and kinds.of(value) is Kind.META:
            message = (f"{what} of {schema.name} is {_a(arg.type)}, but is given a value that "
                       "is not a Tensor (a number, size, shape, dtype or string)")
            diags.error(loc, message, f"its schema: {schema}")
            return False
        t = strip_optional(arg.type)
        # a literal list for a list of one type: (its items, where they are, their type)
        items = (value.items, value.item_locs, t.elem) if isinstance(t, ListType) \
            and isinstance(t.elem, BaseType) and isinstance(value, (ListLit, TupleLit)) else None
        form = None if is_tensor_like(arg.type) else kinds.form(value)
        if items and form in (Form.FLOATS, Form.SCALARS):
            form = None     # the item that makes it one is refused below, where it is
        why = _refusal(arg.type, form) if form is not None else None
        if why is not None:
            diags.error(loc, f"{what} of {schema.name} is {_a(arg.type)}, but is given "
                        f"{form.value}: {why}", _hint(value, form, kinds, schema))
            return False
        # what is not None passes: then None must too
        if not _takes_none(arg.type) and kinds.may_be_none(value, not_none):
            diags.error(loc, f"{what} of {schema.name} is {_a(arg.type)}, but is given "
                        f"{_none(value, 'a value that')}: torch.ops refuses None for "
                        f"{_a(arg.type)} at backward", _none_hint(value, arg))
            return False
        if items:
            values, locs, elem = items
            for i, item in enumerate(values):
                at = locs[i] if i < len(locs) else loc
                if not _takes_none(elem, element=True) and kinds.may_be_none(item, not_none):
                    diags.error(at, f"{what} of {schema.name} is {_a(arg.type)}, but its item "
                                f"at index {i} is {_none(item, 'a value that')}: torch.ops "
                                f"refuses None for {_a(elem)} at backward",
                                _none_hint(item, None))
                    return False
                form = kinds.form(item)
                why = _refusal(elem, form, element=True) if form is not None else None
                if why is not None:
                    diags.error(at, f"{what} of {schema.name} is {_a(arg.type)}, but its item "
                                f"at index {i} is {form.value}: {why}",
                                _hint(item, form, kinds, schema))
                    return False
    return True


# What a parameter of each type takes, besides None where it is optional, as torch.ops converts
# a Python value (tests/test_formulas.py probes torch for each): floats and Scalars (which may
# hold one) are no int, dtypes, layouts and memory formats are ints to an `int` (not to a
# SymInt, nor in a list), a device is a string or a device.
_TAKES: dict[BaseTy, frozenset[Form]] = {
    BaseTy.int: frozenset({Form.NUMBER, Form.DTYPE, Form.LAYOUT, Form.MEMORY_FORMAT}),
    BaseTy.SymInt: frozenset({Form.NUMBER}),
    BaseTy.float: frozenset(_NUMERIC),
    BaseTy.bool: frozenset(_NUMERIC),
    BaseTy.Scalar: frozenset({*_NUMERIC, Form.DTYPE, Form.LAYOUT}),
    BaseTy.str: frozenset({Form.STRING}),
    BaseTy.ScalarType: frozenset({Form.NUMBER, Form.DTYPE}),
    BaseTy.Layout: frozenset({Form.NUMBER, Form.LAYOUT}),
    BaseTy.MemoryFormat: frozenset({Form.NUMBER, Form.MEMORY_FORMAT}),
    BaseTy.Device: frozenset({Form.STRING, Form.DEVICE}),
}
# The same of an item of a list (and of `int[2] k` given one value for both).
_ITEM_TAKES: dict[BaseTy, frozenset[Form]] = {
    BaseTy.int: frozenset({Form.NUMBER}), BaseTy.SymInt: frozenset({Form.NUMBER}),
    BaseTy.float: frozenset(_NUMERIC), BaseTy.bool: frozenset(_NUMERIC)}
_ONE_VALUE = frozenset(Form) - {Form.TENSOR, Form.TENSORS, *_LISTS}


def _refusal(t, form: Form, element: bool = False) -> str | None:
    """Why a parameter of type `t` (an item of a list one: `element`) cannot take a value of
    `form`; None where it may."""
    t = strip_optional(t)   # None aside, an optional parameter takes what its type takes
    # torch.ops reads a one-element Tensor as a number, and a Tensor as a SymInt[], eagerly.
    values = ("torch.ops would read {} at backward, which neither torch.compile, vmap nor C++ "
              "autograd can, and no gradient flows through {}")
    if isinstance(t, BaseType) and t.name in _TAKES:
        takes = (_ITEM_TAKES if element else _TAKES).get(t.name)
        if takes is None or form in takes:
            return None
        if form is Form.SHAPE:
            return "one size is x.size(i) or x.shape[i]" if t.name in _ITEM_TAKES or \
                t.name is BaseTy.Scalar else "a list is not one value"
        if form is Form.TENSOR:
            if t.name in (BaseTy.str, BaseTy.Device, BaseTy.Scalar):
                return "torch.ops refuses it at backward"
            return values.format("its value", "it")
        if form in (Form.TENSORS, Form.FLOATS, Form.SCALARS):
            return "a list is not one number" if t.name in _ITEM_TAKES or \
                t.name is BaseTy.Scalar else "a list is not one value"
        if form is Form.FLOAT:
            return f"torch.ops refuses a float for {_a(t)} at backward, even a whole one (2.0)"
        if form is Form.SCALAR:
            return f"a Scalar may hold a float, which torch.ops refuses for {_a(t)} at backward"
        return "torch.ops refuses it at backward"
    if isinstance(t, ListType) and is_base(t.elem, *_NUMBERS):
        if form in _ONE_VALUE:
            if t.size is None:
                return "it takes a list: [n], or all of a tensor's sizes, x.shape"
            # `int[2] k` takes one number for both elements, as torch.ops does
            return _refusal(t.elem, form, element=True)
        if form in (Form.TENSOR, Form.TENSORS):
            return values.format("their values", "them")
        if form in _LISTS:
            return _refusal(t.elem, _ITEM_FORMS[form], element=True)
    return None


def _takes_none(t, element: bool = False) -> bool:
    """Whether torch.ops takes None for a parameter of type `t` (an item of a list one:
    `element`), as it does for an optional one, a bool (False) and a Tensor that is no list's
    item (an undefined one); tests/test_formulas.py probes torch."""
    return isinstance(t, OptionalType) or is_base(t, BaseTy.bool) or \
        (not element and is_base(t, BaseTy.Tensor))


def _none(value: Expr, other: str) -> str:
    """`value`, which may be None, as a message names it."""
    if isinstance(value, Const):
        return "None"
    if isinstance(value, (InputRef, LocalRef)):
        return f"'{value.name}', which may be None"
    return f"{other} may be None"


def _none_hint(value: Expr, arg: Argument | None) -> str:
    """What to write instead of `value`, which may be None, given to `arg` (None: an item)."""
    optional = f", or declare the parameter optional: {arg.type}? {arg.name}" if arg else ""
    if isinstance(value, (InputRef, LocalRef)):
        return f"test it first, `... if {value.name} is not None else ...`" + optional
    return "pass a value" + optional


def _hint(value: Expr, form: Form, kinds: _Kinds, schema: FunctionSchema) -> str:
    """What to write instead of `value`, refused as `form`."""
    if form is Form.FLOAT and kinds.divides(value):
        return "`/` gives a float even of two ints; use // for an integer: x.size(0) // 2"
    if form in (Form.FLOATS, Form.SCALARS):
        if isinstance(value, InputRef):
            return (f"pass [int(v) for v in {value.name}], which truncates, or declare "
                    f"'{value.name}' an int[]")
        return "convert each item with int(...), which truncates: [int(v) for v in values]"
    if form is Form.SCALAR:
        if isinstance(value, InputRef):
            return f"pass int({value.name}), which truncates, or declare '{value.name}' an int"
        return "convert it with int(...), which truncates, or declare the Scalar an int"
    return f"its schema: {schema}"


def _check_gradient_count(lib: OpLibrary, op: Op, f: Formula, call: Call, ref: OpRef,
                          diags: Diagnostics) -> bool:
    """A formula that is a library op's call gives one gradient per return of that op: the
    generated backward unpacks them into the formula's inputs (a lone Tensor would be unpacked
    along its first dimension), or takes a tuple for one gradient."""
    target = resolve(lib, ref)
    assert target is not None
    returns = target.schema.returns
    given, wanted = len(returns), len(f.inputs)
    if given == wanted or (wanted > 1 and given == 1 and is_tensor_list(returns[0].type)):
        return True     # a Tensor[] return unpacks into as many gradients as it holds
    if wanted == 1 and given == 0:
        return True     # None: no gradient
    diags.error(call.loc or f.loc or op.loc,
                f"the formula for {', '.join(f.inputs)} gives {given} "
                f"gradient{'s' if given != 1 else ''} for {wanted} input{'s' if wanted != 1 else ''}",
                f"its schema: {target.schema}")
    return False


# `check PATHS` loads only the files named: a library op of another file is unknown there.
_ELSEWHERE = ("if an op file not checked this time defines it, check that file too: "
              "`opgen check` without paths checks every op file of the project ([tool.opgen] "
              "schemas)")


def _check_ref(lib: OpLibrary, op: Op, ref: OpRef, diags: Diagnostics,
               names_by_ns: dict[str, list[str]], called: bool = False) -> bool:
    """Whether `ref` names one op of the library; `called`: it is called (`ref(...)`), so
    most likely meant as an op."""
    loc = ref.loc or op.loc
    ops = lookup(lib, ref)
    if ops and resolve(lib, ref) is not None:
        return True
    if ops:
        diags.error(loc, f"'{ref.namespace}.{ref.name}' has several overloads and no default one",
                    "name one: " + ", ".join(f"{ref.namespace}.{ref.name}.{o.name.overload}"
                                             for o in ops))
        return False
    if ref.bare:
        if ref.overload is None:
            inputs = [a.name for a in op.schema.arguments]
            returns = op.schema.returns
            # `result` names the only output; with several, results[i] or a return's name.
            outputs = ["result"] if len(returns) == 1 else \
                ["results"] + [r.name for r in returns if r.name]
            # `grad` is ambiguous with several outputs: `grad_z` was told 'did you mean grad?'.
            flags = op.derivatives.output_differentiability if isinstance(
                op.derivatives, Derivatives) else _differentiable_returns(op.schema)
            grads = ["grad"] if sum(flags) == 1 else []
            grads += (["grads"] if len(returns) > 1 else []) + [
                f"grad_{r.name}" for r, d in zip(returns, flags) if r.name and d]
            choices = inputs + names_by_ns.get(ref.namespace, []) + [*grads, *outputs, "torch"] \
                + sorted(BUILTINS)
            m = re.fullmatch(r"result([0-9]+)", ref.name)
            if m and len(returns) > 1 and int(m.group(1)) < len(returns):
                # derivatives.yaml's spelling of an unnamed output (torchgen's `result1`).
                hint: str | None = f"output {int(m.group(1))} is 'results[{int(m.group(1))}]'"
            else:
                hint = did_you_mean(ref.name, choices)
            diags.error(loc, f"unknown name '{ref.name}'",
                        hint or (_ELSEWHERE if called else "formulas name inputs, grad, result, "
                                 "torch, and ops of this library"))
        else:
            diags.error(loc, f"unknown name '{ref.name}'", _ELSEWHERE if called else None)
        return False
    same = lib.named(ref.namespace, ref.name)
    if same:
        diags.error(loc, f"'{ref.namespace}.{ref.name}' has no overload '{ref.overload}'",
                    "overloads: " + ", ".join(o.name.overload or "default" for o in same))
    else:
        known = names_by_ns.get(ref.namespace, [])
        listed = (f"ops of {ref.namespace}: " + ", ".join(known[:8])
                  + (", ..." if len(known) > 8 else "") + "; ") if known else ""
        diags.error(loc, f"the library has no op '{ref.namespace}::{ref.name}'",
                    did_you_mean(ref.name, known) or listed + _ELSEWHERE)
    return False


def _check_call(lib: OpLibrary, op: Op, call: Call, ref: OpRef, diags: Diagnostics,
                names_by_ns: dict[str, list[str]]) -> bool:
    if not _check_ref(lib, op, ref, diags, names_by_ns, called=True):
        return False
    target = resolve(lib, ref)
    assert target is not None
    loc = call.loc or op.loc
    schema = target.schema
    if any(isinstance(a, Star) for a in call.args):
        return True  # a spread's length is known only at run time
    positional = schema.positional
    if len(call.args) > len(positional):
        diags.error(loc, f"{schema.name} takes {len(positional)} positional argument"
                    f"{'s' if len(positional) != 1 else ''} but {len(call.args)} were given",
                    f"its schema: {schema}")
        return False
    given = {a.name for a in positional[:len(call.args)]}
    ok = True
    meant: set[str] = set()     # arguments a misspelled keyword was taken for
    # Every wrong keyword, each at its own name, then what is missing: one run says it all.
    for i, (key, _) in enumerate(call.kwargs):
        at = call.kwarg_locs[i] if i < len(call.kwarg_locs) else loc
        arg = schema.argument(key)
        if arg is None:
            guess = closest(key, [a.name for a in schema.arguments])
            if guess is not None:
                meant.add(guess)
            diags.error(at, f"{schema.name} has no argument '{key}'",
                        f"did you mean '{guess}'?" if guess is not None
                        else f"its schema: {schema}")
            ok = False
        elif key in given:
            diags.error(at, f"{schema.name} got argument '{key}' twice")
            ok = False
        given.add(key)
    missing = [a.name for a in schema.arguments
               if a.default is None and a.name not in given and a.name not in meant]
    if missing:
        diags.error(loc, f"{schema.name} is missing argument '{missing[0]}'",
                    f"its schema: {schema}")
        return False
    return ok


def first_order_only(lib: OpLibrary, op: Op) -> list[Op]:
    """The library ops called by `op`'s formulas that have no autograd of their own: with any,
    `op` can be differentiated once only."""
    d = op.derivatives
    if not isinstance(d, Derivatives):
        return []
    out: list[Op] = []
    for ref in library_calls(d):
        target = resolve(lib, ref)
        if target is None or target in out:
            continue
        if isinstance(target.derivatives, Derivatives):
            continue
        if target.kernel(DispatchKey.CompositeImplicitAutograd) is not None:
            continue
        if indices_only(target):
            continue
        out.append(target)
    return out


def indices_only(op: Op) -> bool:
    """Whether every output of `op` has an integer or bool dtype by its fake rule (torch_sparse's
    `ptr2ind`): no gradient flows through it, so a formula calling it is differentiable twice;
    its not-implemented Autograd kernel records nothing for such outputs."""
    from codegen import shape as S

    def integral(e) -> bool:
        match e:
            case S.Cond(then=a, orelse=b):
                return integral(a) and integral(b)
            case S.Like(dtype=S.DtypeLit(name=n)) | S.Broadcast(dtype=S.DtypeLit(name=n)) | \
                    S.Reduce(dtype=S.DtypeLit(name=n)) | S.Empty(dtype=S.DtypeLit(name=n)):
                return n in DTYPE_NAMES and not is_floating(n)
        return False

    rule = op.fake
    return isinstance(rule, FakeRule) and bool(rule.outputs) and all(map(integral, rule.outputs))


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if sys.argv[1:] != ["--refresh"]:
        sys.exit("usage: python -m codegen.formulas --refresh  (writes torch_names.json and "
                 "torch_signatures.json)")
    names = torch_names()
    for file, record in ((TORCH_NAMES_FILE, names),
                         (torch_signatures.RECORD_FILE, torch_signatures.current(names))):
        target = Path(__file__).resolve().parent / file
        target.write_text(json.dumps(record, indent=0, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {target}")
