"""What the generators of `_reg_<ns>.py` share (codegen.dest.py_reg composes them): the pieces a
section is made of, names of ops as the registrations spell them, and Python's precedence for
emitted expressions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from codegen import escape
from codegen import shape as S
from codegen.dest.cpp_library import locate as locate_in_func
from codegen.diagnostics import Loc
from codegen.model import BaseTy, BaseType, Op, Span

TENSOR = BaseType(BaseTy.Tensor)


def returns_loc(op: Op) -> Loc:
    """Where the op's returns are written (its `func:` when that is unknown)."""
    spans = [r.span for r in op.schema.returns]
    if not spans or any(sp is None for sp in spans):
        return op.loc
    return locate_in_func(op, Span(spans[0].start, spans[-1].end))  # type: ignore[union-attr]


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
    """`<package>._reg_<ns>`, the module `m.set_python_module` names."""
    from codegen.dest.cpp_library import python_module

    return python_module(ns)


def qualname(op: Op) -> str:
    """`ns::name` or `ns::name.overload`, as torch.library's registration functions take it."""
    n = op.name
    return f"{n.namespace}::{n.name}" + (f".{n.overload}" if n.overload else "")


def op_attr(op: Op) -> str:
    """The op's OpOverload below `_ops` (`torch.ops.<ns>`): `name.overload`."""
    return f"{op.name.name}.{op.name.overload_or_default}"


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


def op_name(op: Op) -> str:
    """The op's name inside its namespace, as `Library.impl` takes it."""
    return op.name.name + (f".{op.name.overload}" if op.name.overload else "")


def camel(name: str) -> str:
    """`smooth_clamp` -> `SmoothClamp` (an empty part, from `__` or a trailing `_`, stays `_`)."""
    return "".join(p[:1].upper() + p[1:] if p else "_" for p in name.split("_"))


# Precedence of Python expression forms, loosest first.
_P_COND, _P_NOT, _P_COMPARE, _P_ADD, _P_MUL, _P_UNARY, _P_POSTFIX, _P_ATOM = 1, 4, 5, 9, 10, 11, 13, 14
_ARITH_PREC = {S.ArithOp.add: _P_ADD, S.ArithOp.sub: _P_ADD, S.ArithOp.mul: _P_MUL,
               S.ArithOp.floordiv: _P_MUL, S.ArithOp.mod: _P_MUL}


def _paren(text: str, prec: int, need: int) -> str:
    return f"({text})" if prec < need else text
