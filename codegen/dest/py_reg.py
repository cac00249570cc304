"""Op library IR -> `generated/runtime/_reg_<ns>.py`: the Python side of namespace `<ns>`.

`import runtime` imports `runtime._reg_<ns>` right after loading the C++ library (the module named
by its `m.set_python_module`). It registers, on one `torch.library.Library(ns, "FRAGMENT")`:
- Python kernels (dispatch values `package.module:function`), with `Library.impl`: the op calls
  the function through the dispatcher with no wrapper in between;
- fake kernels, from shape rules (`codegen.shape`), from the schema alone (in-place, out=, `-> ()`),
  or Python functions, with `torch.library.register_fake`;
  rules that `codegen.dest.cpp_meta` translates are C++ Meta kernels instead, with no Python fake;
- autograd, from derivative formulas (`codegen.formulas`): a `torch.autograd.Function` per op
  (forward below autograd, setup_context saving only what the formulas read, backward from the
  formulas, vmap support) and an `Autograd` kernel applying it, so that torch.func (`grad`,
  `vmap`, `jacrev`) works on the op and a call costs less than through
  `torch.library.register_autograd` (Note [Generated autograd]);
- `Functionalize` kernels for in-place and out= ops, as their functional variant plus copies
  (Note [Functionalizing mutable ops]), so torch.compile and export take them;
- batching rules (`pointwise`, `leading`, or Python functions) with `torch.library.register_vmap`;
- autocast policies with `torch.library.register_autocast`.

Everything is rendered as readable Python; the helpers a module needs are written into it (see
`HELPERS`), so the generated module depends on torch alone.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar

import jinja2

from codegen import escape
from codegen import formulas as F
from codegen import reserved
from codegen import shape as S
from codegen.api import python as P
from codegen.dest import cpp_library, cpp_meta
from codegen.diagnostics import Diagnostics, Loc
from codegen.gen import OUTPUT_DIR, banner, template_environment
from codegen.model import (
    Argument,
    DispatchKey,
    FunctionSchema,
    ListType,
    Op,
    OpLibrary,
    PyRef,
    is_tensor_like,
    strip_optional,
    without_alias,
)


# Helper functions a generated module may need, and the helpers each one calls.
HELPERS: dict[str, tuple[str, ...]] = {
    "broadcast": ("result_type", "common_device"),
    "result_type": (),
    "common_device": (),
    "reduce": (),
    "pointwise_batch": (),
    "fold_leading": (),
    "loop_batch": (),
    "not_implemented": (),
    "first_order": (),
    "apply": (),
}

# Dispatch keys a Python kernel is registered under, as `Library.impl` spells them.
_PY_KERNEL_KEYS = {
    DispatchKey.CPU: "CPU",
    DispatchKey.CUDA: "CUDA",
    DispatchKey.Meta: "Meta",
    DispatchKey.CompositeImplicitAutograd: "CompositeImplicitAutograd",
    DispatchKey.CompositeExplicitAutograd: "CompositeExplicitAutograd",
}

def environment() -> jinja2.Environment:
    return template_environment()


# Every string literal of the generated Python is written by codegen.escape.
q = escape.py_string


def wrap_call(line: str, width: int = 100) -> str:
    """A call statement, one argument per line when it is wider than `width`."""
    if len(line) <= width or not line.endswith(")"):
        return line
    start = line.index("(")
    args, depth, quote, current, escaped = [], 0, None, "", False
    for ch in line[start + 1:-1]:
        if quote:
            # Inside a literal: a backslash escapes the next character, quotes included.
            quote = None if ch == quote and not escaped else quote
            escaped = ch == "\\" and not escaped
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(current.strip())
            current = ""
            continue
        current += ch
    args.append(current.strip())
    return line[:start + 1] + "\n" + "".join(f"    {a},\n" for a in args) + ")"


def module_name(ns: str) -> str:
    """`runtime._reg_<ns>`, the module `m.set_python_module` names."""
    return f"runtime._reg_{ns}"


def qualname(op: Op) -> str:
    """`ns::name` or `ns::name.overload`, as torch.library's registration functions take it."""
    n = op.name
    return f"{n.namespace}::{n.name}" + (f".{n.overload}" if n.overload else "")


def op_attr(op: Op) -> str:
    """The op's OpOverload below `_ops` (`torch.ops.<ns>`): `name.overload`."""
    return f"{op.name.name}.{op.name.overload_or_default}"


# --------------------------------------------------------------------------------------------------
# What an op needs


def needs_fake(op: Op) -> bool:
    """Whether torch.compile/export need a fake kernel from us: the op has a kernel, and none that
    runs on fake tensors already (Meta, or a composite kernel, which decomposes or runs on Meta)."""
    keys = {k for k, _ in op.dispatch}
    if not keys:
        return False
    return not keys & {DispatchKey.Meta, DispatchKey.CompositeImplicitAutograd,
                       DispatchKey.CompositeExplicitAutograd}


def fake_of(op: Op) -> S.FakeRule | PyRef | None:
    """The op's fake kernel: its rule or Python function, else what follows from its schema."""
    if isinstance(op.fake, (S.FakeRule, PyRef)):
        return op.fake
    keys = {k for k, _ in op.dispatch}
    if keys & {DispatchKey.Meta, DispatchKey.CompositeImplicitAutograd} or not keys:
        return None
    return S.schema_fake(op.schema)


# --------------------------------------------------------------------------------------------------
# Python expressions from the fake-rule IR

# Precedence of Python expression forms, loosest first.
_P_COND, _P_NOT, _P_COMPARE, _P_ADD, _P_MUL, _P_UNARY, _P_POSTFIX, _P_ATOM = 1, 4, 5, 9, 10, 11, 13, 14
_ARITH_PREC = {S.ArithOp.add: _P_ADD, S.ArithOp.sub: _P_ADD, S.ArithOp.mul: _P_MUL,
               S.ArithOp.floordiv: _P_MUL, S.ArithOp.mod: _P_MUL}


def _paren(text: str, prec: int, need: int) -> str:
    return f"({text})" if prec < need else text


class FakeEmitter:
    """Renders one fake rule as Python statements over the op's parameters."""

    def __init__(self, helpers: set[str]):
        self.helpers = helpers

    def expr(self, e: S.Expr, need: int = 0) -> str:
        text, prec = self._expr(e)
        return _paren(text, prec, need)

    def _expr(self, e: S.Expr) -> tuple[str, int]:
        match e:
            case S.Arg(name=n) | S.Local(name=n) | S.LoopVar(name=n):
                return n, _P_ATOM
            case S.IntLit(value=v):
                return str(v), _P_ATOM
            case S.FloatLit(value=v):
                return repr(v), _P_ATOM
            case S.StrLit(value=v):
                return q(v), _P_ATOM
            case S.BoolLit(value=v):
                return ("True" if v else "False"), _P_ATOM
            case S.NoneLit():
                return "None", _P_ATOM
            case S.DtypeLit(name=n):
                return f"torch.{n}", _P_POSTFIX
            case S.TensorProp(tensor=t, prop=p):
                obj = self.expr(t, _P_POSTFIX)
                if p in (S.Prop.ndim, S.Prop.numel):
                    return f"{obj}.{p.value}()", _P_POSTFIX
                return f"{obj}.{p.value}", _P_POSTFIX
            case S.TensorSize(tensor=t, dim=d):
                return f"{self.expr(t, _P_POSTFIX)}.size({self.expr(d)})", _P_POSTFIX
            case S.Item(seq=s, index=i):
                return f"{self.expr(s, _P_POSTFIX)}[{self.expr(i)}]", _P_POSTFIX
            case S.SliceOf(seq=s, lo=lo, hi=hi):
                lo_t = self.expr(lo) if lo is not None else ""
                hi_t = self.expr(hi) if hi is not None else ""
                return f"{self.expr(s, _P_POSTFIX)}[{lo_t}:{hi_t}]", _P_POSTFIX
            case S.Len(seq=s):
                return f"len({self.expr(s)})", _P_POSTFIX
            case S.Spread(seq=s):
                return f"*{self.expr(s, _P_POSTFIX)}", _P_ATOM
            case S.ListLit(items=items):
                return "[" + ", ".join(self.expr(i) for i in items) + "]", _P_ATOM
            case S.ListComp(elem=elem, names=names, seqs=seqs):
                seq = (self.expr(seqs[0]) if len(seqs) == 1
                       else f"zip({', '.join(self.expr(x) for x in seqs)})")
                return f"[{self.expr(elem)} for {', '.join(names)} in {seq}]", _P_ATOM
            case S.Sum(seq=seq):
                return f"sum({self.expr(seq)})", _P_POSTFIX
            case S.Compare(op=op, left=a, right=b):
                return f"{self.expr(a, _P_COMPARE + 1)} {op.value} {self.expr(b, _P_COMPARE + 1)}", \
                    _P_COMPARE
            case S.Not(operand=o):
                return f"not {self.expr(o, _P_NOT)}", _P_NOT
            case S.Cond(cond=c, then=a, orelse=b):
                return (f"{self.expr(a, _P_COND + 1)} if {self.expr(c, _P_COND + 1)} else "
                        f"{self.expr(b, _P_COND)}", _P_COND)
            case S.Concat(left=a, right=b):
                return f"[*{self.expr(a, _P_POSTFIX)}, *{self.expr(b, _P_POSTFIX)}]", _P_ATOM
            case S.Arith(op=op, left=a, right=b):
                prec = _ARITH_PREC[op]
                return f"{self.expr(a, prec)} {op.value} {self.expr(b, prec + 1)}", prec
            case S.Neg(operand=o):
                return f"-{self.expr(o, _P_UNARY)}", _P_UNARY
            case S.MinMax(fn=fn, items=items):
                # torch.sym_max/sym_min keep sizes symbolic; Python's max() would specialize.
                text = self.expr(items[-1])
                for item in reversed(items[:-1]):
                    text = f"torch.sym_{fn}({self.expr(item)}, {text})"
                return text, _P_POSTFIX
            case S.Dynamic(min=lo, max=hi):
                kwargs = []
                if lo is not None:
                    kwargs.append(f"min={self.expr(lo)}")
                if hi is not None:
                    kwargs.append(f"max={self.expr(hi)}")
                return (f"torch.library.get_ctx().new_dynamic_size({', '.join(kwargs)})",
                        _P_POSTFIX)
            case S.Fallback(value=v, default=d):
                value = self.expr(v, _P_ADD)
                return f"{value} if {value} is not None else {self.expr(d, _P_ADD)}", _P_COND
            case S.Like(tensor=t, dtype=dt, device=dv):
                obj = self.expr(t, _P_POSTFIX)
                return (f"{obj}.new_empty({obj}.shape{self._options(dt, dv)})", _P_POSTFIX)
            case S.Broadcast(operands=ops, dtype=dt):
                self.helpers.add("broadcast")
                args = ", ".join(self.expr(o) for o in ops)
                return f"_broadcast({args}{self._options(dt, None)})", _P_POSTFIX
            case S.Reduce(tensor=t, dims=dims, keepdim=k, dtype=dt):
                self.helpers.add("reduce")
                return (f"_reduce({self.expr(t)}, {self.expr(dims)}, {self.expr(k)}"
                        f"{self._options(dt, None)})", _P_POSTFIX)
            case S.Empty(shape=shape, dtype=dt, device=dv, like=like):
                # `x.new_empty` takes dtype/device from `x` when they are None; `torch.empty`
                # takes torch's defaults: exactly the rule's defaults.
                func = f"{like}.new_empty" if like is not None else "torch.empty"
                return f"{func}({self.expr(shape)}{self._options(dt, dv)})", _P_POSTFIX
        raise TypeError(f"not a fake-rule node: {e!r}")

    def _options(self, dtype: S.Expr | None, device: S.Expr | None) -> str:
        out = ""
        if dtype is not None:
            out += f", dtype={self.expr(dtype)}"
        if device is not None:
            out += f", device={self.expr(device)}"
        return out

    def body(self, rule: S.FakeRule, schema: FunctionSchema) -> list[str]:
        lines = [f"{b.name} = {self.expr(b.value)}" for b in rule.bindings]
        for o in rule.outputs:
            if isinstance(o, S.ReturnArg) and o.resize is not None:
                # As an out= kernel resizes its out argument (a no-op when the shape matches).
                lines.append(f"{o.name}.resize_({self.expr(o.resize, _P_POSTFIX)}.shape)")
        outs = [o.name if isinstance(o, S.ReturnArg) else self.expr(o) for o in rule.outputs]
        if not schema.returns:
            lines.append("return None")
        elif len(schema.returns) == 1:
            lines.append(f"return {outs[0]}")
        else:
            lines.append(f"return {', '.join(outs)}")
        return lines


# --------------------------------------------------------------------------------------------------
# Python expressions from the formula IR

_F_PREC = {
    F.BinOpKind.or_: 2, F.BinOpKind.and_: 3,
    F.BinOpKind.eq: 5, F.BinOpKind.ne: 5, F.BinOpKind.lt: 5, F.BinOpKind.le: 5,
    F.BinOpKind.gt: 5, F.BinOpKind.ge: 5, F.BinOpKind.is_: 5, F.BinOpKind.is_not: 5,
    F.BinOpKind.add: 9, F.BinOpKind.sub: 9,
    F.BinOpKind.mul: 10, F.BinOpKind.div: 10, F.BinOpKind.floordiv: 10, F.BinOpKind.mod: 10,
    F.BinOpKind.matmul: 10, F.BinOpKind.pow: 12,
}


@dataclass
class Names:
    """How backward spells each thing a formula reads."""
    inputs: dict[str, str]                  # input -> local name (whole value)
    meta: set[str]                          # inputs whose metadata only is on ctx
    grads: list[str]                        # per output
    results: list[str]                      # per output (locals; unused ones unset)
    ops: dict[F.OpRef, Op]                  # library references -> ops


class FormulaEmitter:
    def __init__(self, op: Op, names: Names, helpers: set[str]):
        self.op = op
        self.names = names
        self.helpers = helpers

    def expr(self, e: F.Expr, need: int = 0) -> str:
        text, prec = self._expr(e)
        return _paren(text, prec, need)

    def _meta(self, name: str, what: str) -> str:
        return f"ctx.{name}_{what}"

    def _expr(self, e: F.Expr) -> tuple[str, int]:
        n = self.names
        match e:
            case F.Const(value=v):
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    return repr(v), _P_UNARY    # `(1).sum()`: `1.sum()` does not parse
                return (q(v) if isinstance(v, str) else repr(v)), _P_ATOM
            case F.EllipsisLit():
                return "...", _P_ATOM
            case F.InputRef(name=name):
                assert name not in n.meta, "metadata-only inputs are read through their metadata"
                return n.inputs[name], _P_ATOM
            case F.GradRef(index=i):
                return n.grads[i], _P_ATOM
            case F.GradsRef():
                return "(" + ", ".join(n.grads) + ("," if len(n.grads) == 1 else "") + ")", _P_ATOM
            case F.ResultRef(index=i):
                return n.results[i], _P_ATOM
            case F.ResultsRef():
                return ("(" + ", ".join(n.results) + ("," if len(n.results) == 1 else "") + ")",
                        _P_ATOM)
            case F.TorchRef(path=path):
                return ".".join(("torch",) + path), _P_POSTFIX
            case F.BuiltinRef(name=name):
                raise AssertionError(f"builtin {name} outside a call")
            case F.PyBuiltinRef(name=name) | F.LoopVar(name=name):
                return name, _P_ATOM
            case F.ListComp(elem=elem, names=names, iterable=it):
                return (f"[{self.expr(elem)} for {', '.join(names)} in "
                        f"{self.expr(it, _P_COND + 1)}]", _P_ATOM)
            case F.OpRef():
                return f"_ops.{op_attr(n.ops[e])}", _P_POSTFIX
            case F.Attr(obj=F.InputRef(name=name), name=attr) if name in n.meta:
                if attr == "ndim":
                    return f"len({self._meta(name, 'shape')})", _P_POSTFIX
                return self._meta(name, F.META_ATTRS[attr]), _P_POSTFIX
            case F.Attr(obj=obj, name=attr):
                return f"{self.expr(obj, _P_POSTFIX)}.{attr}", _P_POSTFIX
            case F.Star(value=v):
                return f"*{self.expr(v, _P_POSTFIX)}", _P_ATOM
            case F.Call():
                return self._call(e), _P_POSTFIX
            case F.Slice(lo=lo, hi=hi):
                lo_t = self.expr(lo) if lo is not None else ""
                hi_t = self.expr(hi) if hi is not None else ""
                return f"{lo_t}:{hi_t}", _P_ATOM
            case F.Subscript(obj=obj, items=items):
                return (f"{self.expr(obj, _P_POSTFIX)}[{', '.join(self.expr(i) for i in items)}]",
                        _P_POSTFIX)
            case F.TupleLit(items=items):
                inner = ", ".join(self.expr(i) for i in items)
                return f"({inner}{',' if len(items) == 1 else ''})", _P_ATOM
            case F.ListLit(items=items):
                return "[" + ", ".join(self.expr(i) for i in items) + "]", _P_ATOM
            case F.BinOp(op=op, left=a, right=b):
                prec = _F_PREC[op]
                if op is F.BinOpKind.pow:   # right-associative, binds tighter than unary on its left
                    return f"{self.expr(a, prec + 1)} ** {self.expr(b, _P_UNARY)}", prec
                if prec == _P_COMPARE:      # never chain comparisons
                    return f"{self.expr(a, prec + 1)} {op.value} {self.expr(b, prec + 1)}", prec
                return f"{self.expr(a, prec)} {op.value} {self.expr(b, prec + 1)}", prec
            case F.UnaryOp(op=op, operand=o):
                if op is F.UnaryKind.not_:
                    return f"not {self.expr(o, _P_NOT)}", _P_NOT
                return f"{op.value}{self.expr(o, _P_UNARY)}", _P_UNARY
            case F.IfExp(cond=c, then=t, orelse=o):
                return (f"{self.expr(t, _P_COND + 1)} if {self.expr(c, _P_COND + 1)} else "
                        f"{self.expr(o, _P_COND)}", _P_COND)
        raise TypeError(f"not a formula node: {e!r}")

    def _call(self, e: F.Call) -> str:
        n = self.names
        func = e.func
        if isinstance(func, F.BuiltinRef):
            if func.name == "unbroadcast":
                grad, like = e.args
                if isinstance(like, F.InputRef) and like.name in n.meta:
                    shape = self._meta(like.name, "shape")
                else:
                    shape = f"{self.expr(like, _P_POSTFIX)}.shape"
                return f"{self.expr(grad, _P_POSTFIX)}.sum_to_size({shape})"
            if func.name == "not_implemented":
                self.helpers.add("not_implemented")
                return f"_not_implemented({q(qualname(self.op))}, {self.expr(e.args[0])})"
            raise AssertionError(func.name)
        if isinstance(func, F.Attr) and isinstance(func.obj, F.InputRef) and \
                func.obj.name in n.meta and func.name in F.META_METHODS:
            shape = self._meta(func.obj.name, "shape")
            if func.name == "dim":
                return f"len({shape})"
            if not e.args and not e.kwargs:
                return shape
            index = self.expr(e.args[0]) if e.args else self.expr(e.kwargs[0][1])
            return f"{shape}[{index}]"
        args = [self.expr(a) for a in e.args] + [f"{k}={self.expr(v)}" for k, v in e.kwargs]
        return f"{self.expr(func, _P_POSTFIX)}({', '.join(args)})"


# --------------------------------------------------------------------------------------------------
# Per-op sections


@dataclass
class Function:
    name: str
    params: str
    body: list[str]
    doc: str | None = None
    decorators: list[str] = field(default_factory=list)
    kind: ClassVar[str] = "function"


@dataclass
class Class:
    """A class of static methods (a torch.autograd.Function)."""
    name: str
    base: str
    doc: str
    methods: list[Function]
    kind: ClassVar[str] = "class"


@dataclass
class Section:
    """Everything the module holds for one op: functions and classes, then registration
    statements."""
    schema: str
    functions: list[Function | Class] = field(default_factory=list)
    registrations: list[str] = field(default_factory=list)


class _Module:
    """Builds the sections of one namespace's module."""

    def __init__(self, lib: OpLibrary, ns: str, names: dict[str, str], diags: Diagnostics,
                 sources: PySources | None = None):
        self.lib = lib
        self.sources = sources or PySources()
        self.ns = ns
        self.names = names
        self.diags = diags
        self.helpers: set[str] = set()
        self.imports: dict[tuple[str, str], str] = {}       # (module, name) -> local name
        self.sections: list[Section] = []
        # Module-level names given out so far, and those never to give: what the module defines
        # and calls before its sections, every builtin and keyword, and every argument name of
        # the namespace's ops (so no parameter of a generated function can hide one).
        self.taken: set[str] = set(reserved.reg_module_names() | reserved.PY_BUILTINS
                                   | reserved.PY_KEYWORDS)
        self.taken.update(a.name for op in lib.ops if op.namespace == ns
                          for a in op.schema.arguments)

    def define(self, name: str) -> str:
        """A new module-level name: `name`, or `name_`, ... when that is taken."""
        name = reserved.fresh(name, self.taken)
        self.taken.add(name)
        return name

    def local_name(self, ref: PyRef) -> str:
        """The module-level name a user function is imported as: its own, unless the module
        owns it (`len`, `functools`, `_ops`, a generated function's name), which gets the
        module's path as prefix (`_pkg_mod_len`)."""
        key = (ref.module, ref.name)
        if key not in self.imports:
            local = ref.name.split(".")[0]
            if local in self.taken or local.startswith("_"):
                local = "_" + ref.module.replace(".", "_") + "_" + local
            self.imports[key] = self.define(local)
        return self.imports[key]

    def ref_expr(self, ref: PyRef) -> str:
        """An expression for `ref` (`pkg.mod:Class.method` names an attribute of an import)."""
        local = self.local_name(ref)
        rest = ref.name.split(".")[1:]
        return ".".join([local] + rest)

    def op(self, op: Op) -> Section | None:
        api = self.names.get(str(op.name), op.name.name)
        sec = Section(str(op.schema))
        try:
            self.kernels(op, sec)
            self.functionalize(op, api, sec)
            self.fake(op, api, sec)
            self.autograd(op, api, sec)
            self.vmap(op, api, sec)
            self.autocast(op, sec)
        except P.Unsupported as e:
            self.diags.error(op.loc, f"{op.name}: {e.message}",
                             "register this op's Python side by hand")
            return None
        if not sec.functions and not sec.registrations:
            return None
        if sec.functions and not self._check_names(op):
            return None
        return sec

    def _check_names(self, op: Op) -> bool:
        """Arguments become parameters of the generated functions: they must not hide a name
        those call (the module's own, such as `torch` and `_ops`, or a builtin such as `len`).
        Per-op function names avoid every argument name (`define`), so only these can clash."""
        own = reserved.reg_module_names()
        for a in op.schema.arguments:
            if a.name == "torch":
                what = "the torch module"
            elif a.name in own:
                what = f"the module-level name '{a.name}'"
            elif a.name in reserved.PY_BODY_BUILTINS:
                what = f"the builtin '{a.name}'"
            else:
                continue
            span = a.name_span or a.span
            loc = op.func.at(span.start, span.end - span.start) if span and op.func else op.loc
            self.diags.error(loc, f"argument '{a.name}' of {op.name} would hide {what} in the "
                             "generated Python registrations", "rename it")
            return False
        return True

    # -- Python kernels

    def kernels(self, op: Op, sec: Section) -> None:
        for key, kernel in op.dispatch:
            if isinstance(kernel, PyRef):
                check_signature(kernel, op.schema, self.diags, "kernel", sources=self.sources)
                sec.registrations.append(
                    f"_lib.impl({q(_op_name(op))}, {self.ref_expr(kernel)}, "
                    f"{q(_PY_KERNEL_KEYS[key])})")

    # -- functionalization

    def functionalize(self, op: Op, api: str, sec: Section) -> None:
        """In-place and out= ops that return their mutated arguments: PyTorch cannot functionalize
        such a custom op by itself (torch.compile, export), so it is registered as its functional
        variant plus copies into the mutated arguments. See Note [Functionalizing mutable ops]."""
        schema = op.schema
        returns = S.mutated_returns(schema)
        if not schema.mutable_arguments or not any(isinstance(r, str) for r in returns):
            return
        if not {k for k, _ in op.dispatch} - {DispatchKey.CompositeImplicitAutograd}:
            return  # decomposes, or has no kernel to trace
        functional = functional_variant(self.lib, op)
        if functional is None:
            self.diags.error(op.loc, f"{op.name} returns the arguments it mutates, which "
                             "torch.compile and torch.export can only handle through the op's "
                             "functional variant, and the library has none",
                             f"declare `{op.name.base}(...)` with the same inputs returning new "
                             "tensors, or make this op return ()")
            return
        mutated = [a.name for a in schema.mutable_arguments]
        inputs = [a for a in schema.arguments if not (a.kwarg_only and a.is_write)]
        call_args = [mine.name if not theirs.kwarg_only else f"{theirs.name}={mine.name}"
                     for mine, theirs in zip(inputs, functional.schema.arguments)]
        call = f"_ops.{op_attr(functional)}({', '.join(call_args)})"
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
                body.append(f"    raise RuntimeError({q(message)}")
                body.append(f"                       f\"{{list({result}.shape)}}, got "
                            f"{{list({name}.shape)}}\")")
            body.append(f"{name}.copy_({result})")
        outs = [r if isinstance(r, str) else "None" for r in returns]
        if len(outs) == 1:
            body.append(f"return {outs[0]}")
        elif outs:
            body.append(f"return {', '.join(outs)}")
        name = self.define(f"_{api}_functionalize")
        doc = (f"Under functionalization (torch.compile, torch.export): {functional.name}, "
               f"copied into {', '.join(mutated)}.")
        sec.functions.append(Function(name, ", ".join(P.parameters(schema)), body, doc))
        sec.registrations.append(f"_lib.impl({q(_op_name(op))}, {name}, \"Functionalize\")")

    # -- fake

    def fake(self, op: Op, api: str, sec: Section) -> None:
        fake = fake_of(op)
        if fake is None:
            if needs_fake(op) and op.fake is None:
                self.diags.error(op.loc, f"{op.name} has no fake kernel, so torch.compile and "
                                 "torch.export cannot trace it",
                                 "add a shape rule such as `fake: like(self)` (see "
                                 "codegen/shape.py), or `fake: package.module:function`")
            return
        if isinstance(fake, PyRef):
            check_signature(fake, op.schema, self.diags, "fake kernel",
                            sources=self.sources)
            sec.registrations.append(f"torch.library.register_fake({q(qualname(op))}, "
                                     f"{self.ref_expr(fake)}, lib=_lib)")
            return
        name = self.define(f"_{api}_fake")
        body = FakeEmitter(self.helpers).body(fake, op.schema)
        doc = f"fake: {fake.text}" if fake.text else _schema_fake_doc(op.schema)
        sec.functions.append(Function(name, ", ".join(P.parameters(op.schema)), body, doc))
        register = f"torch.library.register_fake({q(qualname(op))}, {name}, lib=_lib)"
        if cpp_meta.uses_cpp_meta(op):
            # The built library has this rule as a C++ Meta kernel (codegen.dest.cpp_meta), which
            # FakeTensor runs only when no Python fake exists: register this one only where the
            # ops are defined without it (runtime.testing.load_python_library).
            sec.registrations.append(f"if not torch._C._dispatch_has_kernel_for_dispatch_key("
                                     f"{q(qualname(op))}, \"Meta\"):")
            register = "    " + register
        sec.registrations.append(register)

    # -- autograd

    def autograd(self, op: Op, api: str, sec: Section) -> None:
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
        refs: dict[F.OpRef, Op] = {}
        for ref in F.library_calls(d):
            target = F.resolve(self.lib, ref)
            if target is None:
                return  # reported by formulas.check_library
            refs[ref] = target
        schema = op.schema
        plan = F.saved(d, schema)
        args = list(schema.arguments)

        def is_list(a: Argument) -> bool:
            return is_tensor_like(a.type) and isinstance(strip_optional(a.type), ListType)

        list_returns = [i for i, r in enumerate(schema.returns)
                        if is_tensor_like(r.type) and isinstance(strip_optional(r.type), ListType)]
        if len(list_returns) > 1 or \
                any(is_list(a) and a.type != strip_optional(a.type) for a in args):
            # Several Tensor[] outputs, or an optional Tensor[] input, do not pass through an
            # autograd.Function as flat Tensors: torch.library wraps it (no torch.func then).
            if len(list_returns) > 1:
                self.diags.warning(d.loc or op.loc, f"torch.func transforms (grad, vjp, jacrev) "
                                   f"cannot differentiate {op.name}: it returns several "
                                   "Tensor[]; autograd works",
                                   "return one Tensor[] (and Tensors) for torch.func support")
            self._register_autograd(op, api, sec, d, refs, plan)
            return
        # One Tensor[] output: the Function returns every output Tensor flat, and the Autograd
        # kernel puts the list back together; the list's length is what the other returns leave.
        at = list_returns[0] if list_returns else None
        n_returns = len(schema.returns)
        tail = n_returns - 1 - at if at is not None else 0

        # The Function's inputs: one slot per argument (a count for a Tensor[]), then the
        # elements of the Tensor[] arguments.
        lists = [a for a in args if is_list(a)]
        slot_names = [f"{a.name}_len" if is_list(a) else a.name for a in args]
        slot = {a.name: i for i, a in enumerate(args)}
        n_slots = len(args)
        flat = lists[0].name if len(lists) == 1 else "flat"

        grads = _grad_names(schema)
        results = _result_names(schema)
        taken = {"ctx", "needs", "saved", *grads, *results,
                 *(("flat_grads", "outputs") if at is not None else ()),
                 *(f"{a.name}_grad" for a in args), *(f"{a.name}_len" for a in lists)}
        if len(lists) > 1:
            taken.add(flat)
        clash = [a.name for a in args if a.name in taken]
        if clash:
            self.diags.error(d.loc or op.loc, f"input '{clash[0]}' has the name of a local of the "
                             "generated backward", "rename it")
            return

        def list_slice(seq: str, k: int, count: Callable[[str], str], base: int) -> str:
            """The elements of the k-th Tensor[] argument in `seq`, which holds the elements of
            them all from index `base` on; `count(name)` spells a list's length."""
            parts = ([str(base)] if base else []) + [count(a.name) for a in lists[:k]]
            start = " + ".join(parts)
            if k == len(lists) - 1:
                return f"{seq}[{start}:]" if start else seq
            return f"{seq}[{start}:{' + '.join(parts + [count(lists[k].name)])}]"

        def input_count(name: str) -> str:
            return f"inputs[{slot[name]}]"

        def source(a_name: str) -> str:
            arg = schema.argument(a_name)
            assert arg is not None
            if is_list(arg):
                return list_slice("inputs", lists.index(arg), input_count, n_slots)
            return f"inputs[{slot[a_name]}]"

        def flat_output(seq: str, i: int) -> str:
            """Return `i` in the flat outputs `seq` (a slice for the Tensor[] one)."""
            if at is None:
                return seq if n_returns == 1 else f"{seq}[{i}]"
            if i == at:
                return f"{seq}[{at}:len({seq}) - {tail}]" if tail else f"{seq}[{at}:]"
            return f"{seq}[{i}]" if i < at else f"{seq}[-{n_returns - i}]"

        def output(i: int) -> str:
            return flat_output("output", i)

        # forward: the op below autograd.
        forward: list[str] = []
        if len(lists) > 1:
            for k, a in enumerate(lists):
                forward.append(f"{a.name} = list({list_slice('flat', k, lambda n: f'{n}_len', 0)})")
        elif lists:
            forward.append(f"{flat} = list({flat})")
        call = f"_ops.{op_attr(op)}({', '.join(P.call_arguments(schema))})"
        # Grad mode on, as in a C++ autograd kernel (apply turns it off): under torch.func the
        # op then records at the transform levels below this one.
        forward.append("with torch.enable_grad(), torch._C._AutoDispatchBelowAutograd():")
        if at is None:
            forward.append(f"    return {call}")
        elif n_returns == 1:
            forward.append(f"    return tuple({call})")
        else:
            forward.append(f"    outputs = {call}")
            forward.append(f"    return (*outputs[:{at}], *outputs[{at}], *outputs[{at + 1}:])")
        forward_params = ", ".join(slot_names + ([f"*{flat}"] if lists else []))

        # setup_context
        singles = [(n, source(n)) for n in plan.tensors] + \
            [(results[i], output(i)) for i in plan.results if i != at]
        saved_lists = [(n, source(n)) for n in plan.tensor_lists] + \
            [(results[i], output(i)) for i in plan.results if i == at]
        setup = _save_tensors(singles, saved_lists)
        for a in lists[:-1]:
            setup.append(f"ctx.{a.name}_len = {input_count(a.name)}")
        setup += _save_context(plan, d, schema, source,
                               lambda i: f"*{output(i)}" if i == at else output(i))
        setup = setup or ["pass"]

        # backward
        body = _restore_saved(singles, saved_lists, plan)
        if at is not None:
            # The gradients of the flat outputs, regrouped: the Tensor[] return's is a list.
            for i, g in enumerate(grads):
                value = flat_output("flat_grads", i)
                body.append(f"{g} = " + (f"list({value})" if i == at else value))
        if lists:
            # Counts of the Tensor[] inputs: the last one's is what remains of `needs`.
            for a in lists[:-1]:
                body.append(f"{a.name}_len = ctx.{a.name}_len")
            rest = " - ".join([f"len(needs) - {n_slots}"] + [f"{a.name}_len" for a in lists[:-1]])
            body.append(f"{lists[-1].name}_len = {rest}")

        meta_only = {a for a, _ in plan.meta}
        emit_names = Names(inputs={a.name: a.name for a in args}, meta=meta_only,
                           grads=grads, results=results, ops=refs)
        emitter = FormulaEmitter(op, emit_names, self.helpers)

        def needs(a_name: str) -> str:
            arg = schema.argument(a_name)
            assert arg is not None
            if is_list(arg):
                elements = list_slice("needs", lists.index(arg), lambda n: f"{n}_len", n_slots)
                return f"any({elements})"
            return f"needs[{slot[a_name]}]"

        grad_vars = {a.name: f"{a.name}_grad" for a in args if is_tensor_like(a.type)}
        for a in args:
            if a.name in grad_vars:
                # A Tensor[] input's gradient is a list of the same length.
                body.append(f"{grad_vars[a.name]} = "
                            + (f"[None] * {a.name}_len" if is_list(a) else "None"))
        for f in d.formulas:
            targets = [grad_vars[n] for n in f.inputs]
            cond = " or ".join(needs(n) for n in f.inputs)
            body.append(f"if {cond}:")
            body.append(f"    {', '.join(targets)} = {emitter.expr(f.expr)}")
        returns = [grad_vars[a.name] if a.name in grad_vars and not is_list(a) else "None"
                   for a in args] + [f"*{grad_vars[a.name]}" for a in lists]
        ret = ", ".join(returns) + ("," if len(returns) == 1 else "")
        body.append(f"return {ret}")

        why_no_jvp = (f"{qualname(op)} has no forward-mode derivative: its derivative formulas "
                      "are reverse-mode (torch.func.jvp, jacfwd and forward_ad are not supported)")
        backward_decorators = ["staticmethod"]
        why = self._first_order_reason(op)
        if why:
            backward_decorators.append(f"_first_order({q(why)})")
        cls = Class(
            self.define(f"_{_camel(api)}Function"), "torch.autograd.Function",
            f"{qualname(op)} under autograd, from its derivative formulas.",
            [Function("forward", forward_params, forward, decorators=["staticmethod"]),
             Function("setup_context", "ctx, inputs, output", setup, decorators=["staticmethod"]),
             Function("backward", "ctx, " + (", ".join(grads) if at is None else "*flat_grads"),
                      body, _formulas_doc(d), decorators=backward_decorators),
             Function("jvp", "ctx, *tangents",
                      [f"raise NotImplementedError({q(why_no_jvp)})"],
                      decorators=["staticmethod"])])
        sec.functions.append(cls)

        # The Autograd kernel: the Function only when a gradient may be asked for.
        self.helpers.add("apply")
        tensors = [a.name for a in args if is_tensor_like(a.type)]
        applied = [f"len({a.name})" if is_list(a) else a.name for a in args] + \
            [f"*{a.name}" for a in lists]
        applying = f"_apply({cls.name}, {', '.join(applied)})"
        if at is None:
            differentiating = [f"    return {applying}"]
        elif n_returns == 1:
            differentiating = [f"    return list({applying})"]
        else:
            differentiating = [f"    outputs = {applying}",
                               f"    return (*outputs[:{at}], list({flat_output('outputs', at)}), "
                               + (f"*outputs[len(outputs) - {tail}:])" if tail else ")")]
        kernel = [
            f"if _differentiating({', '.join(tensors)}):",
            *differentiating,
            "with torch._C._AutoDispatchBelowAutograd():",
            f"    return {call}",
        ]
        name = self.define(f"_{api}_autograd")
        sec.functions.append(Function(name, ", ".join(P.parameters(schema)), kernel,
                                      f"Autograd kernel: {cls.name} when differentiating."))
        sec.registrations.append(f"_lib.impl({q(_op_name(op))}, {name}, \"Autograd\")")

    def _first_order_reason(self, op: Op) -> str | None:
        """Why `op`'s backward cannot be differentiated again, or None when it can."""
        once = F.first_order_only(self.lib, op)
        if not once:
            return None
        self.helpers.add("first_order")
        return (f"{qualname(op)}'s backward calls " + ", ".join(qualname(o) for o in once)
                + ", which has no derivatives; give it `derivatives:` in the op file to "
                "differentiate twice")

    def _register_autograd(self, op: Op, api: str, sec: Section, d: F.Derivatives,
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

        # Locals of backward.
        grads = _grad_names(schema)
        results = _result_names(schema)

        # setup_context
        singles = [(n, source(n)) for n in plan.tensors] + \
            [(results[i], output(i)) for i in plan.results
             if not isinstance(strip_optional(schema.returns[i].type), ListType)]
        lists = [(n, source(n)) for n in plan.tensor_lists] + \
            [(results[i], output(i)) for i in plan.results
             if isinstance(strip_optional(schema.returns[i].type), ListType)]
        setup = (_save_tensors(singles, lists) + _save_context(plan, d, schema, source, output)
                 or ["pass"])
        setup_params = "ctx, inputs, keyword_only_inputs, output" if kw_only \
            else "ctx, inputs, output"

        # backward
        body = _restore_saved(singles, lists, plan)

        taken = {"ctx", "needs", "saved", *grads, *results, *(f"{a.name}_grad" for a in positional)}
        clash = [a.name for a in schema.arguments if a.name in taken]
        if clash:
            self.diags.error(d.loc or op.loc, f"input '{clash[0]}' has the name of a local of the "
                             "generated backward", "rename it")
            return
        meta_only = {a for a, _ in plan.meta}
        emit_names = Names(inputs={a.name: a.name for a in schema.arguments}, meta=meta_only,
                           grads=grads, results=results, ops=refs)
        emitter = FormulaEmitter(op, emit_names, self.helpers)

        def needs(a_name: str) -> str:
            arg = schema.argument(a_name)
            assert arg is not None
            i = positional.index(arg)
            is_list = isinstance(strip_optional(arg.type), ListType)
            test = f"any(needs[{i}])" if is_list else f"needs[{i}]"
            # The dispatcher leaves trailing arguments equal to their defaults out of the call.
            return f"len(needs) > {i} and {test}" if arg.default is not None else test

        grad_vars = {a.name: f"{a.name}_grad" for a in positional if is_tensor_like(a.type)}
        for a in positional:
            if a.name in grad_vars:
                if isinstance(strip_optional(a.type), ListType):
                    # A Tensor[] input's gradient is a list of the same length.
                    i = positional.index(a)
                    value = f"[None] * len(needs[{i}])"
                    if a.default is not None:
                        value += f" if len(needs) > {i} else None"
                    body.append(f"{grad_vars[a.name]} = {value}")
                else:
                    body.append(f"{grad_vars[a.name]} = None")
        for f in d.formulas:
            targets = [grad_vars[n] for n in f.inputs]
            cond = " or ".join(needs(n) for n in f.inputs)
            body.append(f"if {cond}:")
            body.append(f"    {', '.join(targets)} = {emitter.expr(f.expr)}")
        returns = [grad_vars.get(a.name, "None") for a in positional]
        ret = ", ".join(returns) + ("," if len(returns) == 1 else "")
        if has_lists and any(a.default is not None for a in positional):
            body.append(f"return ({ret})[:len(needs)]")
        else:
            body.append(f"return {ret}")

        setup_name = self.define(f"_{api}_setup_context")
        backward_name = self.define(f"_{api}_backward")
        sec.functions.append(Function(setup_name, setup_params, setup))
        sec.functions.append(Function(backward_name, "ctx, " + ", ".join(grads), body,
                                      _formulas_doc(d)))
        backward = backward_name
        why = self._first_order_reason(op)
        if why:
            backward = f"_first_order({q(why)})({backward_name})"
        sec.registrations.append(f"torch.library.register_autograd({q(qualname(op))}, "
                                 f"{backward}, setup_context={setup_name}, lib=_lib)")

    # -- vmap

    def vmap(self, op: Op, api: str, sec: Section) -> None:
        spec = op.vmap
        if spec is None:
            return
        if isinstance(spec.kind, PyRef):
            check_signature(spec.kind, op.schema, self.diags, "batching rule", leading=2,
                            sources=self.sources)
            sec.registrations.append(f"torch.library.register_vmap({q(qualname(op))}, "
                                     f"{self.ref_expr(spec.kind)}, lib=_lib)")
            return
        schema = op.schema
        if schema.mutable_arguments:
            self.diags.error(spec.loc, f"a '{spec.kind}' batching rule is for functional ops; "
                             f"{op.name} mutates its arguments",
                             "write a Python batching rule: `vmap: package.module:function`")
            return
        positional = schema.positional
        tensors = [(i, a) for i, a in enumerate(positional) if is_tensor_like(a.type)]
        lists = [a.name for _, a in tensors if isinstance(strip_optional(a.type), ListType)]
        if lists:
            self.diags.error(spec.loc, f"a '{spec.kind}' batching rule cannot batch the Tensor[] "
                             f"argument '{lists[0]}'",
                             "write a Python batching rule: `vmap: package.module:function`")
            return
        if not tensors:
            self.diags.error(spec.loc, f"{op.name} takes no Tensor to batch")
            return
        if not all(is_tensor_like(r.type) for r in schema.returns) or not schema.returns:
            self.diags.error(spec.loc, f"a '{spec.kind}' batching rule needs Tensor outputs")
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
            self.helpers.add("pointwise_batch")
            lhs = ", ".join(names) + ("," if len(names) == 1 else "")
            pairs = ", ".join(f"({n}, {d})" for n, d in zip(names, dims))
            body.append(f"{lhs} = _pointwise_batch({info}.batch_size, {pairs})")
            body.append(f"return {call}, {out_dims}")
        elif spec.kind == "leading":
            # Rows at dim 0 of the first Tensor (or of the named ones); others are shared by
            # every row, so a batched shared operand (a weight per batch element) cannot be
            # folded: the op then runs once per batch element.
            rows = list(spec.rows) or names[:1]
            bad = [r for r in rows if r not in names]
            if bad:
                self.diags.error(spec.loc, f"leading({', '.join(spec.rows)}) names '{bad[0]}', "
                                 f"which is not a Tensor input of {op.name}",
                                 "Tensor inputs: " + ", ".join(names))
                return
            self.helpers.add("fold_leading")
            shared = [(n, d) for n, d in zip(names, dims) if n not in rows]
            if shared:
                self.helpers.add("loop_batch")
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
        name = self.define(f"_{api}_vmap")
        sec.functions.append(Function(name, ", ".join([info, in_dims]
                                                      + P.parameters(schema)), body,
                                      f"vmap: {spec.kind}"))
        sec.registrations.append(f"torch.library.register_vmap({q(qualname(op))}, {name}, "
                                 "lib=_lib)")

    # -- autocast

    def autocast(self, op: Op, sec: Section) -> None:
        spec = op.autocast
        if spec is None:
            return
        if op.schema.kwarg_only:
            self.diags.error(spec.loc, "autocast rules cannot cover ops with keyword-only "
                             f"arguments ('{op.schema.kwarg_only[0].name}')",
                             "torch.library.register_autocast passes positional arguments only; "
                             "make them positional")
            return
        if op.schema.mutable_arguments:
            self.diags.error(spec.loc, f"autocast casts the inputs of functional ops; {op.name} "
                             "mutates its arguments")
            return
        sec.registrations.append(f"torch.library.register_autocast({q(qualname(op))}, "
                                 f"{q(spec.device_type)}, torch.{spec.cast_inputs}, lib=_lib)")


# --------------------------------------------------------------------------------------------------
# Python functions named in the op file


def find_module_source(module: str, roots: list[Path] | None = None) -> Path | None:
    """The source file of `module`, found on the import path without importing anything (an
    import could run a package's `__init__`, such as runtime's, which loads the built library)."""
    parts = module.split(".")
    for root in roots if roots is not None else [Path.cwd(), *map(Path, sys.path)]:
        base = root.joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


class PyModule:
    """What the checks read of a Python module's source: its top-level functions (the last
    definition of a name wins, as at import) and its constants, which a default may name."""

    def __init__(self, path: Path, text: str, tree: ast.Module) -> None:
        self.path = path
        self.text = text
        self.tree = tree
        self.functions = {n.name: n for n in tree.body
                          if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

    @functools.cached_property
    def constants(self) -> dict[str, ast.expr]:
        """Names bound exactly once in the whole module (any store, import, def, class or
        global counts), by a top-level `NAME = value`. Walks the whole tree: computed only when
        a default names something."""
        stores: dict[str, int] = {}
        for n in ast.walk(self.tree):
            names: list[str] = []
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                names = [n.id]
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                names = [(a.asname or a.name).split(".")[0] for a in n.names]
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [n.name]
            elif isinstance(n, (ast.Global, ast.Nonlocal)):
                names = n.names * 2
            for name in names:
                stores[name] = stores.get(name, 0) + 1
        constants = {}
        for n in self.tree.body:
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                if len(targets) == 1 and isinstance(targets[0], ast.Name) and \
                        stores.get(targets[0].id) == 1:
                    constants[targets[0].id] = n.value
        return constants


@functools.lru_cache(maxsize=256)
def _parse_module(path: str, text: str) -> PyModule:
    """A module parsed once per path and content: a library names the same kernel module once
    per op. Callers must not modify what it holds."""
    return PyModule(Path(path), text, ast.parse(text, filename=path))


class PySources:
    """Python modules named in the op files, looked up and parsed once per run."""

    def __init__(self) -> None:
        self._found: dict[str, Path | None] = {}

    def find(self, module: str) -> Path | None:
        if module not in self._found:
            self._found[module] = find_module_source(module)
        return self._found[module]

    def parse(self, path: Path) -> PyModule:
        """Raises SyntaxError, UnicodeDecodeError or OSError."""
        return _parse_module(str(path), path.read_text(encoding="utf-8"))


def check_signature(ref: PyRef, schema: FunctionSchema, diags: Diagnostics, what: str, *,
                    leading: int = 0, sources: PySources | None = None) -> None:
    """Check that the function `ref` can be called the way the dispatcher calls it: the op's
    positional arguments by position (those with defaults may be left out, so the function needs
    defaults there too), keyword-only ones by name, and that its defaults are the schema's.
    `leading` parameters come first (a batching rule's `info, in_dims`). Functions whose source
    cannot be read (compiled modules) pass."""
    sources = sources or PySources()
    path = sources.find(ref.module)
    if path is None:
        diags.error(ref.loc, f"cannot find Python module '{ref.module}' of {what} {ref}",
                    "it is looked up from the current directory and the import path "
                    "(sys.path), as `import` would")
        return
    try:
        module = sources.parse(path)
    except (SyntaxError, UnicodeDecodeError, OSError) as e:
        diags.error(ref.loc, f"cannot read {what} {ref}: {_shown(path)} does not parse ({e})")
        return
    if "." in ref.name:
        return  # a method of a class: its binding happens at run time
    fn = module.functions.get(ref.name)
    if fn is None:
        defined = any(isinstance(n, (ast.Assign, ast.ImportFrom, ast.Import, ast.ClassDef))
                      for n in module.tree.body)
        if not defined:
            diags.error(ref.loc, f"{_shown(path)} defines no function '{ref.name}'")
        return  # assigned or imported under that name: not checkable from source
    problem = _signature_problem(fn.args, schema, leading)
    if problem:
        diags.error(ref.loc, f"{what} {ref} cannot take the arguments of {schema.name}: {problem}",
                    f"expected a function like `def {ref.name}("
                    + ", ".join(["info", "in_dims"][:leading] + P.parameters(schema)) + ")`")
        return
    _check_defaults(ref, fn, module, schema, diags, what, leading)


def _shown(path: Path) -> str:
    """`path` relative to the current directory when it lies below it (as messages show files)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _signature_problem(args: ast.arguments, schema: FunctionSchema, leading: int) -> str | None:
    params = [*args.posonlyargs, *args.args]
    defaults_from = len(params) - len(args.defaults)
    positional = schema.positional
    need = leading + len(positional)
    if args.vararg is None and len(params) < need:
        return (f"it takes {len(params)} positional parameter{'s' if len(params) != 1 else ''}, "
                f"the op passes up to {need}")
    for i, a in enumerate(positional):
        j = leading + i
        if a.default is not None and j < len(params) and j < defaults_from:
            return (f"parameter '{params[j].arg}' needs a default: the dispatcher leaves out "
                    f"'{a.name}' when it equals its default ({a.default})")
    for p in params[need:defaults_from]:
        return f"parameter '{p.arg}' has no default and no argument of the op fills it"
    names = {p.arg for p in params[need:]} | {p.arg for p in args.kwonlyargs}
    for a in schema.kwarg_only:
        if a.name not in names and args.kwarg is None:
            return f"it has no parameter '{a.name}' for the keyword-only argument"
    kw_names = {a.name for a in schema.kwarg_only}
    for p, d in zip(args.kwonlyargs, args.kw_defaults):
        if d is None and p.arg not in kw_names:
            return f"keyword-only parameter '{p.arg}' is not an argument of the op"
    return None


# The spellings of one torch dtype: `torch.long` is `torch.int64`.
_DTYPE_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64",
                  "int": "int32", "short": "int16", "cfloat": "complex64",
                  "cdouble": "complex128", "chalf": "complex32"}


def _default_value(node: ast.expr, module: PyModule | None, depth: int = 0) -> tuple | None:
    """A comparable form of a default written in Python, or None when it is not one this check
    reads (a call, an expression): literals, tuples and lists of them (the same: the dispatcher
    hands a list to a function whichever was the default), `torch.<dtype, layout or memory
    format>`, `torch.device("...")` (a device default is its string), and module constants
    naming one of these. Numbers keep their type: 1 is not 1.0 and True is not 1, because the
    function computes with the value it gets, and `torch.full(size, 1)` is not
    `torch.full(size, 1.0)`."""
    if depth > 8:
        return None
    if isinstance(node, ast.Constant):
        return ("value", type(node.value).__name__, repr(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and \
            isinstance(node.operand, ast.Constant) and \
            type(node.operand.value) in (int, float, complex):
        number: int | float | complex = node.operand.value    # type: ignore[assignment]
        number = -number if isinstance(node.op, ast.USub) else number
        return ("value", type(number).__name__, repr(number))
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_default_value(e, module, depth + 1) for e in node.elts]
        return None if any(i is None for i in items) else ("sequence", tuple(items))
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
            node.value.id == "torch":
        return ("torch", _DTYPE_ALIASES.get(node.attr, node.attr))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            isinstance(node.func.value, ast.Name) and node.func.value.id == "torch" and \
            node.func.attr == "device" and len(node.args) == 1 and not node.keywords and \
            isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return ("value", "str", repr(node.args[0].value))
    if isinstance(node, ast.Name) and module is not None and node.id in module.constants:
        return _default_value(module.constants[node.id], module, depth + 1)
    return None


@functools.lru_cache(maxsize=1024)
def _expected_value(expr: str) -> tuple | None:
    """`_default_value` of a default as codegen.api.python writes it."""
    return _default_value(ast.parse(expr, mode="eval").body, None)


def _python_defaults(args: ast.arguments, schema: FunctionSchema,
                     leading: int) -> list[tuple[Argument, ast.arg, ast.expr]]:
    """(schema argument, the function's parameter for it, that parameter's default) for every
    argument whose parameter has a default."""
    params = [*args.posonlyargs, *args.args]
    defaults_from = len(params) - len(args.defaults)

    def default(j: int) -> ast.expr | None:
        return args.defaults[j - defaults_from] if j >= defaults_from else None

    out: list[tuple[Argument, ast.arg, ast.expr | None]] = []
    positional = schema.positional
    for i, a in enumerate(positional):
        if leading + i < len(params):
            out.append((a, params[leading + i], default(leading + i)))
    by_name = {p.arg: (p, default(j)) for j, p in enumerate(params)
               if j >= leading + len(positional)}
    by_name.update({p.arg: (p, d) for p, d in zip(args.kwonlyargs, args.kw_defaults)})
    for a in schema.kwarg_only:
        if a.name in by_name:
            out.append((a, *by_name[a.name]))
    return [(a, p, d) for a, p, d in out if d is not None]


def _check_defaults(ref: PyRef, fn: ast.FunctionDef | ast.AsyncFunctionDef, module: PyModule,
                    schema: FunctionSchema, diags: Diagnostics, what: str, leading: int) -> None:
    """Each default of the function must be the schema's: the dispatcher leaves out an argument
    that equals its schema default, and the function then runs with its own."""
    for arg, param, node in _python_defaults(fn.args, schema, leading):
        if arg.default is None:
            continue
        try:
            expected = P.default_expr(arg.default, arg.type)
        except P.Unsupported:
            continue
        want = _expected_value(expected)
        got = _default_value(node, module)
        if got is None or want is None or got == want:
            continue
        written = ast.get_source_segment(module.text, node) or ast.unparse(node)
        kinds = ""
        numbers = {"int": "an int", "float": "a float", "bool": "a bool", "complex": "a complex"}
        if got[0] == want[0] == "value" and got[1] != want[1] and \
                got[1] in numbers and want[1] in numbers:
            kinds = f" ({numbers[got[1]]}; the schema's is {numbers[want[1]]})"
        shown = _shown(module.path)
        diags.add_source(shown, "\n".join(_py_lines(module.text)).translate(_PY_NOT_BREAKS))
        diags.error(_py_loc(shown, module.text, node),
                    f"parameter '{param.arg}' of {what} {ref} defaults to {written}{kinds}, but "
                    f"{schema.name} declares {arg.name}={arg.default}",
                    f"a call that leaves out '{arg.name}' runs the function with its own default; "
                    f"write `{param.arg}={expected}` (the op file names this {what} at {ref.loc})")


# Python ends lines at \r\n, \r and \n only; str.splitlines, which draws the source lines of
# diagnostics, also at these, so they are shown as U+FFFD (columns do not move).
_PY_NOT_BREAKS = {c: "\ufffd" for c in (0x0B, 0x0C, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029)}


def _py_lines(text: str) -> list[str]:
    return re.split(r"\r\n|\r|\n", text)


def _py_loc(path: str, text: str, node: ast.expr) -> Loc:
    """Where `node` is in Python source `text` (ast columns count UTF-8 bytes; ours characters)."""
    lines = _py_lines(text)
    line = lines[node.lineno - 1].encode("utf-8") if node.lineno <= len(lines) else b""
    col = len(line[:node.col_offset].decode("utf-8", "replace"))
    length = 1
    if node.end_lineno == node.lineno and node.end_col_offset is not None:
        length = len(line[node.col_offset:node.end_col_offset].decode("utf-8", "replace"))
    return Loc(path, node.lineno, col + 1, max(1, length))


def functional_variant(lib: OpLibrary, op: Op) -> Op | None:
    """The functional op that `op` (in-place or out=) mutates its arguments with: same namespace
    and base name, the same argument types less the out= ones and less mutation annotations, and
    one return per mutated argument.

    Note [Functionalizing mutable ops]
    PyTorch functionalizes a custom op that mutates its inputs only when it returns nothing new
    that aliases them (auto_functionalize); `add_(Tensor(a!) self) -> Tensor(a!)` or an out= op is
    refused with "Found a custom (non-ATen) operator whose output has alias annotations". torchgen
    solves this for ATen by functionalizing `add_` as `add` followed by a copy into `self`; the
    generated `Functionalize` kernel does the same for this library's ops.
    """
    schema = op.schema
    wanted = tuple(_plain(a) for a in schema.arguments if not (a.kwarg_only and a.is_write))
    for other in lib.named(op.namespace, op.name.base):
        s = other.schema
        if other is op:
            continue
        if s.mutable_arguments or len(s.returns) != len(schema.mutable_arguments):
            continue
        if tuple(_plain(a) for a in s.arguments) == wanted:
            return other
    return None


def _plain(a: Argument) -> tuple:
    """An argument's type without alias annotations, default and kind (names may differ: an
    in-place op's first argument is always `self`)."""
    return (without_alias(a.type), a.default, a.kwarg_only)


def _op_name(op: Op) -> str:
    """The op's name inside its namespace, as `Library.impl` takes it."""
    return op.name.name + (f".{op.name.overload}" if op.name.overload else "")


def _camel(name: str) -> str:
    """`smooth_clamp` -> `SmoothClamp` (an empty part, from `__` or a trailing `_`, stays `_`)."""
    return "".join(p[:1].upper() + p[1:] if p else "_" for p in name.split("_"))


def _result_names(schema: FunctionSchema) -> list[str]:
    """Locals of backward naming the op's outputs."""
    if len(schema.returns) == 1:
        return ["result"]
    return [f"result_{r.name}" if r.name else f"result{i}" for i, r in enumerate(schema.returns)]


def _save_tensors(singles: list[tuple[str, str]], lists: list[tuple[str, str]]) -> list[str]:
    """setup_context lines saving Tensors (local, source) and Tensor lists; every list but the
    last records its length, so backward can split them again (`_restore_saved`)."""
    lines = []
    saved_args = [src for _, src in singles] + [f"*{src}" for _, src in lists]
    if saved_args:
        lines.append(f"ctx.save_for_backward({', '.join(saved_args)})")
    for local, src in lists[:-1]:
        lines.append(f"ctx.{local}_count = len({src})")
    return lines


def _save_context(plan: F.Saved, d: F.Derivatives, schema: FunctionSchema,
                  source: Callable[[str], str], output: Callable[[int], str]) -> list[str]:
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
        lines.append(f"ctx.{a_name}_{what} = {value}")
    for a_name in plan.values:
        lines.append(f"ctx.{a_name} = {source(a_name)}")
    non_diff = [i for i, flag in enumerate(d.output_differentiability)
                if not flag and is_tensor_like(schema.returns[i].type)]
    if non_diff:
        lines.append("ctx.mark_non_differentiable("
                     + ", ".join(output(i) for i in non_diff) + ")")
    return lines


def _restore_saved(singles: list[tuple[str, str]], lists: list[tuple[str, str]],
                   plan: F.Saved) -> list[str]:
    """The opening lines of backward: what `_save_tensors` and `_save_context` stored, back in
    locals, and `needs` (ctx.needs_input_grad)."""
    body = []
    if singles or lists:
        targets = [local for local, _ in singles]
        if not lists:
            body.append(f"{', '.join(targets)}{',' if len(targets) == 1 else ''} "
                        "= ctx.saved_tensors")
        elif not targets and len(lists) == 1:
            body.append(f"{lists[0][0]} = list(ctx.saved_tensors)")
        else:
            body.append("saved = ctx.saved_tensors")
            for i, local in enumerate(targets):
                body.append(f"{local} = saved[{i}]")
            offset = str(len(targets))
            for local, _ in lists[:-1]:
                end = f"{offset} + ctx.{local}_count"
                body.append(f"{local} = list(saved[{offset}:{end}])")
                offset = end
            body.append(f"{lists[-1][0]} = list(saved[{offset}:])")
    for a_name in plan.values:
        body.append(f"{a_name} = ctx.{a_name}")
    body.append("needs = ctx.needs_input_grad")
    return body


def _grad_names(schema: FunctionSchema) -> list[str]:
    if len(schema.returns) == 1:
        return ["grad"]
    return [f"grad_{r.name}" if r.name else f"grad{i}" for i, r in enumerate(schema.returns)]


def _schema_fake_doc(schema: FunctionSchema) -> str:
    if not schema.returns:
        return "Returns nothing (from the schema)."
    return "Returns the mutated arguments (from the schema)."


def _formulas_doc(d: F.Derivatives) -> str:
    lines = [f"{', '.join(f.inputs)}: {f.text}" for f in d.formulas]
    lines += [f"{n}: non_differentiable" for n in d.non_differentiable]
    return "\n".join(lines)


def _closure(names: set[str]) -> list[str]:
    out: set[str] = set()
    stack = list(names)
    while stack:
        n = stack.pop()
        if n not in out:
            out.add(n)
            stack.extend(HELPERS[n])
    return [h for h in HELPERS if h in out]


def generate_registrations(lib: OpLibrary, diags: Diagnostics) -> dict[str, str]:
    from codegen.dest.py_ops import python_names

    F.check_library(lib, diags)
    names = python_names(lib, diags)
    env = environment()
    py_sources = PySources()
    out: dict[str, str] = {}
    for ns in lib.namespaces:
        ops = lib.in_namespace(ns)
        module = _Module(lib, ns, names, diags, py_sources)
        for op in ops:
            sec = module.op(op)
            if sec is not None:
                sec.registrations = [wrap_call(r) for r in sec.registrations]
                module.sections.append(sec)
        sources = sorted({s.file.path for s in cpp_library.shards(lib)[ns]})
        by_module: dict[str, list[str]] = {}
        for (m, n), local in sorted(module.imports.items()):
            head = n.split(".")[0]
            by_module.setdefault(m, []).append(head if local == head else f"{head} as {local}")
        text = env.get_template("py_reg.py.j2").render(
            banner=banner("#", sources), ns=ns, module=module_name(ns),
            imports=[{"module": m, "names": sorted(set(names))} for m, names in by_module.items()],
            helpers=_closure(module.helpers), sections=module.sections)
        out[f"{OUTPUT_DIR}/runtime/_reg_{ns}.py"] = text
    return out

