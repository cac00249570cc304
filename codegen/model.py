"""The schema IR: frozen dataclasses for PyTorch function schemas.

Translates nothing itself; `codegen.parse` builds these from text and every generator reads them.
Each class's `__str__` prints the canonical schema spelling, so `parse(str(x)) == x` holds and
`torch._C.parse_schema` agrees on the meaning (see tests/test_roundtrip.py).

Source positions ride along in `span` fields that take no part in equality or hashing: two schemas
are equal when they mean the same thing, wherever they were written.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Union

# --------------------------------------------------------------------------------------------------
# Positions


class Span(NamedTuple):
    """Half-open character range [start, end) in the text a node was parsed from.

    A NamedTuple, not a dataclass: the parser makes one per argument and construction cost shows.
    """

    start: int
    end: int


def _span() -> Span | None:
    return field(default=None, compare=False, hash=False, repr=False)  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------------
# Alias annotations: Tensor(a), Tensor(a!), Tensor(a -> *), Tensor(a|b -> b|c), Tensor(*), Tensor!
#
# Note [Fresh alias sets]
# A bare `!` (`Tensor! out`, `Tensor!? x`, `Tensor[]! xs`) is c10's shorthand for a write to an
# alias set of its own, one that no other argument or return names. c10 names these sets `$0`,
# `$1`, ... in the order its parser meets them (an element's before its list's: `Tensor![]!` is
# `$0` then `$1`), and so does the IR: `Annotation(("$0",), True)`. No name in the language starts
# with `$`, so a fresh set never equals a named one, and two bare `!` are two sets, as in c10.
# The canonical text keeps the bare `!`: c10 prints `Tensor($0! -> )`, which its own parser
# refuses, while `Tensor!` reads back as the same fresh set. Naming the set instead (`Tensor(a!)`)
# would change what torch compares. The parser decodes each type spelling once wherever it
# appears, so `number_fresh_sets` numbers the sets per schema afterwards.

FRESH = "$"


@dataclass(frozen=True)
class Annotation:
    alias_set: tuple[str, ...]
    is_write: bool = False
    alias_set_after: tuple[str, ...] = ()
    span: Span | None = _span()

    @property
    def is_fresh(self) -> bool:
        """Written as a bare `!` (Note [Fresh alias sets])."""
        return self.alias_set[:1] != () and self.alias_set[0][:1] == FRESH

    def __str__(self) -> str:
        if self.is_fresh:
            return "!"
        text = "|".join(self.alias_set) + ("!" if self.is_write else "")
        if self.alias_set_after:
            text += " -> " + "|".join(self.alias_set_after)
        return f"({text})"


# --------------------------------------------------------------------------------------------------
# Types


class BaseTy(enum.Enum):
    """Every named base type of the schema language (c10's table plus torchgen's extras)."""

    Tensor = "Tensor"
    int = "int"
    SymInt = "SymInt"
    SymBool = "SymBool"
    float = "float"
    bool = "bool"
    str = "str"
    Scalar = "Scalar"
    ScalarType = "ScalarType"
    Layout = "Layout"
    Device = "Device"
    DeviceIndex = "DeviceIndex"
    MemoryFormat = "MemoryFormat"
    QScheme = "QScheme"
    Generator = "Generator"
    Storage = "Storage"
    Stream = "Stream"
    Dimname = "Dimname"
    GraphModule = "GraphModule"
    ConstQuantizerPtr = "ConstQuantizerPtr"
    # TorchScript-only: representable, refused later by code generation.
    Any = "Any"
    number = "number"
    complex = "complex"
    NoneType = "NoneType"
    Capsule = "Capsule"
    AnyEnumType = "AnyEnumType"
    AnyClassType = "AnyClassType"


BASE_TYPES: dict[str, BaseTy] = {t.value: t for t in BaseTy}

# TorchScript types that the schema language accepts but custom op back ends cannot bind.
SCRIPT_ONLY_BASE = frozenset(
    {BaseTy.Any, BaseTy.number, BaseTy.complex, BaseTy.NoneType, BaseTy.Capsule,
     BaseTy.AnyEnumType, BaseTy.AnyClassType, BaseTy.ConstQuantizerPtr}
)

CUSTOM_CLASS_PREFIX = "__torch__.torch.classes."


@dataclass(frozen=True)
class BaseType:
    name: BaseTy
    alias: Annotation | None = None
    span: Span | None = _span()

    def __str__(self) -> str:
        return self.name.value + (str(self.alias) if self.alias else "")


@dataclass(frozen=True)
class ClassType:
    """A TorchBind class, `__torch__.torch.classes.<ns>.<Class>`."""

    qualname: str
    alias: Annotation | None = None
    span: Span | None = _span()

    def __str__(self) -> str:
        return self.qualname + (str(self.alias) if self.alias else "")


@dataclass(frozen=True)
class TypeVar:
    """A TorchScript type variable (`t`, `tVal`, ...): any name that is not a known type."""

    name: str
    alias: Annotation | None = None
    span: Span | None = _span()

    def __str__(self) -> str:
        return self.name + (str(self.alias) if self.alias else "")


@dataclass(frozen=True)
class OptionalType:
    elem: Type
    span: Span | None = _span()

    # `T?` carries no annotation of its own in the language; the element's is the argument's.
    alias = None

    def __str__(self) -> str:
        return f"{self.elem}?"


@dataclass(frozen=True)
class ListType:
    elem: Type
    size: int | None = None
    alias: Annotation | None = None
    span: Span | None = _span()

    def __str__(self) -> str:
        size = "" if self.size is None else str(self.size)
        return f"{self.elem}[{size}]" + (str(self.alias) if self.alias else "")


@dataclass(frozen=True)
class TupleType:
    elems: tuple[Type, ...]
    alias: Annotation | None = None
    span: Span | None = _span()

    def __str__(self) -> str:
        return "(" + ", ".join(map(str, self.elems)) + ")" + (str(self.alias) if self.alias else "")


class Generic(enum.Enum):
    """Parametric TorchScript types written `Name(T, ...)`."""

    Dict = "Dict"
    Future = "Future"
    Await = "Await"
    RRef = "RRef"
    Union = "Union"


GENERIC_ARITY: dict[Generic, int | None] = {
    Generic.Dict: 2, Generic.Future: 1, Generic.Await: 1, Generic.RRef: 1, Generic.Union: None,
}


@dataclass(frozen=True)
class GenericType:
    kind: Generic
    args: tuple[Type, ...]
    alias: Annotation | None = None
    span: Span | None = _span()

    def __str__(self) -> str:
        inner = ", ".join(map(str, self.args))
        return f"{self.kind.value}({inner})" + (str(self.alias) if self.alias else "")


Type = Union[BaseType, ClassType, TypeVar, OptionalType, ListType, TupleType, GenericType]


def strip_optional(t: Type) -> Type:
    return t.elem if isinstance(t, OptionalType) else t


def is_base(t: Type, *names: BaseTy) -> bool:
    return isinstance(t, BaseType) and t.name in names


def is_tensor_like(t: Type) -> bool:
    """Tensor, Tensor?, Tensor[], Tensor?[] and their optional forms."""
    t = strip_optional(t)
    if isinstance(t, ListType):
        t = strip_optional(t.elem)
    return is_base(t, BaseTy.Tensor)


def is_tensor_list_list(t: Type) -> bool:
    """`Tensor[][]`: Tensors in a list of lists (apex's `tensor_lists`)."""
    return without_alias(t) == ListType(ListType(BaseType(BaseTy.Tensor), None), None)


def holds_dict(t: Type) -> bool:
    return any(isinstance(p, GenericType) and p.kind is Generic.Dict for p in iter_types(t))


def holds_str_or_device(t: Type) -> bool:
    return any(is_base(p, BaseTy.str) or is_base(p, BaseTy.Device) for p in iter_types(t))


def untraceable_return(returns: Sequence[Return]) -> Return | None:
    """A return that keeps torch.compile from putting the op in a graph: Dynamo graph-breaks on
    an op returning a Dict anywhere among its returns ("Unsupported torch.* op returned
    non-Tensor"), a str or a Device anywhere among several returns (torchaudio's
    `sox_io_get_info(...) -> (int, int, int, int, str)`), or a lone int, SymInt, bool, str,
    Scalar, dtype, device (optional or not) or str[]; a float, a list of numbers or several
    returns of Tensors, numbers, dtypes and lists of them trace (tests/test_traceable_returns.py
    holds the rule to torch)."""
    for r in returns:
        if holds_dict(r.type):
            return r
    if len(returns) != 1:
        return next((r for r in returns if holds_str_or_device(r.type)), None)
    t = strip_optional(returns[0].type)
    if isinstance(t, BaseType) and t.name not in (BaseTy.Tensor, BaseTy.float, BaseTy.NoneType):
        return returns[0]
    if isinstance(t, ListType) and is_base(strip_optional(t.elem), BaseTy.str):
        return returns[0]
    return None


class ExportLoss(enum.Enum):
    """Where a program torch.export makes of a call loses what the op returns (torch 2.13)."""

    TRACE = "trace"     # a str or a Device among several returns
    SAVE = "save"       # a Dict, a str, a Device, a list but Tensor[], a tuple inside a return
    LOAD = "load"       # a bool among several returns: the saved program does not load


def unexported_return(returns: Sequence[Return]) -> tuple[Return, ExportLoss] | None:
    """The first return (by the stage that fails first: tracing, saving, loading) that a
    program torch.export makes of a call of the op does not carry back: torch serializes no
    Dict, str, Device, list other than `Tensor[]` (`int[]`, `bool[]`, `float[]`, `SymInt[]`,
    `Tensor?[]`, `Tensor[]?`) or tuple nested in a return, and loads no program with a bool
    among several returns. Tensors, numbers, a lone bool, `Tensor[]` and dtypes go through (a
    returned ScalarType is its number through torch.ops, eagerly as exported;
    tests/test_traceable_returns.py holds the rule to torch)."""
    def unsaved(t: Type) -> bool:
        return holds_dict(t) or holds_str_or_device(t) or any(
            isinstance(p, TupleType)
            or (isinstance(p, ListType) and not is_base(p.elem, BaseTy.Tensor))
            or (isinstance(p, OptionalType) and isinstance(p.elem, ListType))
            for p in iter_types(t))

    several = len(returns) > 1
    stages = ((ExportLoss.TRACE, lambda t: several and holds_str_or_device(t)),
              (ExportLoss.SAVE, unsaved),
              (ExportLoss.LOAD, lambda t: several and is_base(strip_optional(t), BaseTy.bool)))
    for loss, loses in stages:
        r = next((r for r in returns if loses(r.type)), None)
        if r is not None:
            return r, loss
    return None


def untraceable_argument(arguments: Sequence[Argument]) -> Argument | None:
    """The first argument holding Tensors inside a tuple or a Dict (`(Tensor, Tensor)?`,
    `Dict(str, Tensor)`): functionalization does not unwrap them, so torch.compile fails in
    AOTAutograd (inductor, aot_eager), and torch.export specializes the sizes of those inside a
    tuple (tests/test_traceable_returns.py holds the rule to torch)."""
    def container(t: Type) -> bool:
        # A Dict keyed by an optional or a list is refused elsewhere, with its own error.
        return isinstance(t, TupleType) or (isinstance(t, GenericType) and t.kind is Generic.Dict
                                            and isinstance(t.args[0], BaseType))

    for a in arguments:
        if any(container(p) and any(is_base(q, BaseTy.Tensor) for q in iter_types(p))
               for p in iter_types(a.type)):
            return a
    return None


def is_tensor_list(t: Type) -> bool:
    """Tensor[], Tensor?[] and their optional forms."""
    return is_tensor_like(t) and isinstance(strip_optional(t), ListType)


def annotation_of(t: Type) -> Annotation | None:
    """The annotation that describes an argument of type `t`: on the type, else on its element.

    `Tensor(a!)[]` and `Tensor[](a!)` both mean "this argument writes alias set a".
    """
    t = strip_optional(t)
    if t.alias is not None:
        # On other types (vLLM's `int!? n`) torch keeps the annotation, but nothing can alias or
        # write a value that is not a Tensor: the generators treat the argument as plain.
        return t.alias if is_tensor_like(t) else None
    if isinstance(t, ListType):
        return annotation_of(t.elem)
    return None


def without_alias(t: Type) -> Type:
    """The same type with every alias annotation removed (for type mapping)."""
    if isinstance(t, OptionalType):
        return OptionalType(without_alias(t.elem))
    if isinstance(t, ListType):
        return ListType(without_alias(t.elem), t.size)
    if isinstance(t, TupleType):
        return TupleType(tuple(map(without_alias, t.elems)))
    if isinstance(t, GenericType):
        return GenericType(t.kind, tuple(map(without_alias, t.args)))
    if isinstance(t, BaseType):
        return BaseType(t.name)
    if isinstance(t, ClassType):
        return ClassType(t.qualname)
    return TypeVar(t.name)


def iter_types(t: Type):
    """`t` and every type nested in it, outermost first."""
    yield t
    if isinstance(t, (OptionalType, ListType)):
        yield from iter_types(t.elem)
    elif isinstance(t, TupleType):
        for e in t.elems:
            yield from iter_types(e)
    elif isinstance(t, GenericType):
        for e in t.args:
            yield from iter_types(e)


# --------------------------------------------------------------------------------------------------
# Default values


@dataclass(frozen=True)
class NoneDefault:
    span: Span | None = _span()

    def __str__(self) -> str:
        return "None"


@dataclass(frozen=True)
class BoolDefault:
    value: bool
    span: Span | None = _span()

    def __str__(self) -> str:
        return "True" if self.value else "False"


@dataclass(frozen=True)
class IntDefault:
    value: int
    span: Span | None = _span()

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class FloatDefault:
    value: float
    span: Span | None = _span()

    def __str__(self) -> str:
        # repr is the shortest text that reads back to the same double.
        assert math.isfinite(self.value)
        return repr(self.value)


@dataclass(frozen=True)
class ComplexDefault:
    """An imaginary literal such as `1j` (the language has no complex literal with a real part)."""

    imag: float
    span: Span | None = _span()

    def __str__(self) -> str:
        return f"{self.imag!r}j"


# The escapes c10 reads back; any other control character is written in octal.
_STR_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t",
                "\a": "\\a", "\b": "\\b", "\f": "\\f", "\v": "\\v"}


def quote_string(value: str) -> str:
    """A string default as the canonical text spells it, which c10 reads back as `value`:
    printable characters as they are, the others (control characters, NEL, U+2028, format
    characters) as c10's escapes, octal ones spelling their UTF-8 bytes, so the text stays one
    printable line wherever it is shown."""
    out = []
    for ch in value:
        if ch in _STR_ESCAPES:
            out.append(_STR_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        else:
            out.extend(f"\\{b:03o}" for b in ch.encode("utf-8"))
    return '"' + "".join(out) + '"'


@dataclass(frozen=True)
class StrDefault:
    value: str
    span: Span | None = _span()

    def __str__(self) -> str:
        return quote_string(self.value)


@dataclass(frozen=True)
class EnumDefault:
    """A bare name: `contiguous_format`, `Mean`, `long`, `strided`, ..."""

    name: str
    span: Span | None = _span()

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ListDefault:
    items: tuple[Default, ...]
    span: Span | None = _span()

    def __str__(self) -> str:
        return "[" + ", ".join(map(str, self.items)) + "]"


Default = Union[NoneDefault, BoolDefault, IntDefault, FloatDefault, ComplexDefault, StrDefault,
                EnumDefault, ListDefault]


# --------------------------------------------------------------------------------------------------
# Arguments, returns, names, schemas


@dataclass(frozen=True)
class Argument:
    name: str
    type: Type
    default: Default | None = None
    kwarg_only: bool = False
    span: Span | None = _span()
    # Offsets of the name and default inside `span`, relative to its start:
    # (type_end, name_start, default_start or -1). Spans below are derived from it on demand.
    layout: tuple[int, int, int] | None = _span()

    @property
    def type_span(self) -> Span | None:
        if self.span is None or self.layout is None:
            return None
        return Span(self.span.start, self.span.start + self.layout[0])

    @property
    def name_span(self) -> Span | None:
        if self.span is None or self.layout is None:
            return None
        start = self.span.start + self.layout[1]
        return Span(start, start + len(self.name))

    @property
    def default_span(self) -> Span | None:
        if self.span is None or self.layout is None or self.layout[2] < 0:
            return None
        return Span(self.span.start + self.layout[2], self.span.end)

    @property
    def annotation(self) -> Annotation | None:
        return annotation_of(self.type)

    @property
    def is_write(self) -> bool:
        a = self.annotation
        return a is not None and a.is_write

    def __str__(self) -> str:
        text = f"{self.type} {self.name}"
        if self.default is not None:
            text += f"={self.default}"
        return text


@dataclass(frozen=True)
class Return:
    name: str | None
    type: Type
    span: Span | None = _span()
    type_span: Span | None = _span()

    @property
    def annotation(self) -> Annotation | None:
        return annotation_of(self.type)

    @property
    def is_write(self) -> bool:
        a = self.annotation
        return a is not None and a.is_write

    def __str__(self) -> str:
        return str(self.type) if self.name is None else f"{self.type} {self.name}"


# The `__i<name>__` dunders that are in-place (PEP 203's augmented assignments, as torchgen's).
AUGMENTED_ASSIGNMENT_NAMES = frozenset(
    ("add", "sub", "mul", "div", "mod", "pow", "lshift", "rshift", "and", "xor", "or"))


@dataclass(frozen=True)
class OperatorName:
    namespace: str | None
    name: str
    overload: str = ""
    span: Span | None = _span()

    @property
    def is_dunder(self) -> bool:
        return self.name.startswith("__") and self.name.endswith("__") and len(self.name) > 4

    @property
    def inplace(self) -> bool:
        """`add_` is in-place; `__iadd__` is the dunder spelling of the same idea (an augmented
        assignment, as torchgen reads it: `__init__` and `__invert__` are not in-place)."""
        if self.is_dunder:
            return self.name.startswith("__i") and self.name[3:-2] in AUGMENTED_ASSIGNMENT_NAMES
        return self.name.endswith("_") and not self.name.endswith("__")

    @property
    def base(self) -> str:
        """The name without its in-place underscore (`add_` -> `add`)."""
        if self.inplace and not self.is_dunder:
            return self.name[:-1]
        return self.name

    @property
    def qualified(self) -> str:
        """`ns::name` (no overload)."""
        return f"{self.namespace}::{self.name}" if self.namespace else self.name

    @property
    def overload_or_default(self) -> str:
        return self.overload or "default"

    def __str__(self) -> str:
        text = self.qualified
        return f"{text}.{self.overload}" if self.overload else text


@dataclass(frozen=True)
class FunctionSchema:
    name: OperatorName
    arguments: tuple[Argument, ...]
    returns: tuple[Return, ...]
    is_vararg: bool = False
    is_varret: bool = False
    span: Span | None = _span()

    @property
    def positional(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if not a.kwarg_only)

    @property
    def kwarg_only(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if a.kwarg_only)

    @property
    def mutable_arguments(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if a.is_write)

    def argument(self, name: str) -> Argument | None:
        for a in self.arguments:
            if a.name == name:
                return a
        return None

    @property
    def is_out_fn(self) -> bool:
        """out= convention: mutable keyword-only arguments that the op returns."""
        return any(a.kwarg_only and a.is_write for a in self.arguments)

    @property
    def is_inplace(self) -> bool:
        return self.name.inplace

    def with_name(self, name: OperatorName) -> FunctionSchema:
        return FunctionSchema(name, self.arguments, self.returns, self.is_vararg, self.is_varret,
                              self.span)

    def signature_str(self) -> str:
        """`(args) -> returns`, without the name."""
        parts: list[str] = []
        kw_marked = False
        for a in self.arguments:
            if a.kwarg_only and not kw_marked:
                kw_marked = True
                parts.append("*")
            parts.append(str(a))
        if self.is_vararg:
            parts.append("...")
        rets = [str(r) for r in self.returns]
        if self.is_varret:
            rets.append("...")
        # A lone return is written bare unless it would read as a return list: `((int, t))`.
        if len(rets) == 1 and not rets[0].startswith("("):
            ret_text = rets[0]
        else:
            ret_text = "(" + ", ".join(rets) + ")"
        return "(" + ", ".join(parts) + ") -> " + ret_text

    def __str__(self) -> str:
        return self._canonical

    @functools.cached_property
    def _canonical(self) -> str:
        # Every generator prints each schema several times; it is frozen, so print it once.
        return str(self.name) + self.signature_str()


def _number_fresh(t: Type, n: list[int]) -> Type:
    """`t` with each fresh alias set numbered from n[0] on, in c10's order (parts first)."""
    if isinstance(t, OptionalType):
        return OptionalType(_number_fresh(t.elem, n), t.span)
    alias = t.alias
    if alias is not None and alias.is_fresh:
        # Parts are numbered before the type around them: `Tensor![]!` is $0 inside, $1 outside.
        inner = _number_fresh_parts(t, n)
        alias = Annotation((f"{FRESH}{n[0]}",), True, (), alias.span)
        n[0] += 1
        return with_annotation(inner, alias)
    return _number_fresh_parts(t, n)


def _number_fresh_parts(t: Type, n: list[int]) -> Type:
    if isinstance(t, ListType):
        return ListType(_number_fresh(t.elem, n), t.size, t.alias, t.span)
    if isinstance(t, TupleType):
        return TupleType(tuple(_number_fresh(e, n) for e in t.elems), t.alias, t.span)
    if isinstance(t, GenericType):
        return GenericType(t.kind, tuple(_number_fresh(e, n) for e in t.args), t.alias, t.span)
    return t


def with_annotation(t: Type, alias: Annotation) -> Type:
    """`t` (not Optional) carrying alias annotation `alias` in place of its own."""
    if isinstance(t, BaseType):
        return BaseType(t.name, alias, t.span)
    if isinstance(t, ClassType):
        return ClassType(t.qualname, alias, t.span)
    if isinstance(t, TypeVar):
        return TypeVar(t.name, alias, t.span)
    if isinstance(t, ListType):
        return ListType(t.elem, t.size, alias, t.span)
    if isinstance(t, TupleType):
        return TupleType(t.elems, alias, t.span)
    assert isinstance(t, GenericType), t
    return GenericType(t.kind, t.args, alias, t.span)


def _has_fresh(t: Type) -> bool:
    # Runs on every schema that holds a '!', (a!) included: no generator, no property.
    while type(t) is OptionalType:
        t = t.elem
    a = t.alias
    if a is not None and a.alias_set[0][:1] == FRESH:
        return True
    if type(t) is BaseType:
        return False
    if isinstance(t, ListType):
        return _has_fresh(t.elem)
    if isinstance(t, (TupleType, GenericType)):
        return any(map(_has_fresh, t.elems if isinstance(t, TupleType) else t.args))
    return False


def number_fresh_sets(schema: FunctionSchema) -> FunctionSchema:
    """`schema` with its fresh alias sets (bare `!`) numbered $0, $1, ... in order of appearance,
    arguments before returns, as c10 numbers them (Note [Fresh alias sets]).

    The numbers depend only on the order, so numbering an already numbered schema changes nothing.
    """
    for x in schema.arguments:
        if _has_fresh(x.type):
            break
    else:
        if not any(_has_fresh(r.type) for r in schema.returns):
            return schema
    n = [0]
    args = tuple(Argument(a.name, _number_fresh(a.type, n), a.default, a.kwarg_only, a.span,
                          a.layout) for a in schema.arguments)
    rets = tuple(Return(r.name, _number_fresh(r.type, n), r.span, r.type_span)
                 for r in schema.returns)
    return FunctionSchema(schema.name, args, rets, schema.is_vararg, schema.is_varret,
                          schema.span)


# --------------------------------------------------------------------------------------------------
# The op library: what an op file declares around each schema.
#
# These records come from `codegen.load`; positions are `diagnostics.Loc`s into the YAML file.
# Fields whose text has a language of its own (fake rules, derivative formulas) arrive as `Located`
# text and are parsed into their own IR by `codegen.shape` and `codegen.formulas`.

from codegen.diagnostics import Diagnostics, Loc  # noqa: E402  (kept beside the records that use it)


class DispatchKey(enum.Enum):
    CPU = "CPU"
    CUDA = "CUDA"
    Meta = "Meta"
    CompositeImplicitAutograd = "CompositeImplicitAutograd"
    CompositeExplicitAutograd = "CompositeExplicitAutograd"


@dataclass(frozen=True)
class Located:
    """A piece of text from the op file and a way to point into it."""

    text: str
    loc: Loc
    # offset, length -> Loc of that slice of `text` in the file
    locate: object = field(default=None, compare=False, hash=False, repr=False)

    def at(self, offset: int, length: int = 1) -> Loc:
        if self.locate is None:
            return self.loc
        return self.locate(offset, length)  # type: ignore[operator]


@dataclass(frozen=True)
class CppKernel:
    """A C++ function; unqualified names live in the op's namespace (`ns::name`)."""

    name: str
    loc: Loc = field(compare=False, hash=False)

    def qualified(self, namespace: str) -> str:
        return self.name if "::" in self.name else f"{namespace}::{self.name}"


@dataclass(frozen=True)
class PyRef:
    """A Python callable written `package.module:function` (entry-point syntax)."""

    module: str
    name: str
    loc: Loc = field(compare=False, hash=False)

    def __str__(self) -> str:
        return f"{self.module}:{self.name}"


Kernel = Union[CppKernel, PyRef]


@dataclass(frozen=True)
class GradcheckSpec:
    """`gradcheck:` of an op or a sample: the dtype gradients are checked in (float64 unless the
    kernels take only another one) and tolerances (torch.autograd.gradcheck's, where None). A
    sample's given fields override the op's."""

    dtype: str | None = None
    atol: float | None = None
    rtol: float | None = None
    eps: float | None = None
    loc: Loc | None = field(default=None, compare=False, hash=False)


@dataclass(frozen=True)
class SymDim:
    """A named size of a sample (`N`, or `N=6` where its value is given): the same size wherever
    the sample names it, and symbolic (varied, marked dynamic) in the compile check."""

    name: str


@dataclass(frozen=True)
class TensorSample:
    shape: tuple[int | SymDim, ...]
    dtype: str = "float32"          # a torch dtype name: float32, float64, int64, bool, ...
    # None: as the check decides (differentiable inputs require grad); False: never, not even in
    # the gradient checks (an input whose gradient is not to be checked on this sample).
    requires_grad: bool | None = None
    low: float | SymDim | None = None   # value range for random contents
    high: float | SymDim | None = None
    values: tuple | None = None     # explicit nested-list contents instead of random ones


@dataclass(frozen=True)
class OpOutput:
    """A tensor of a sample made by another op of the same op file, called on arguments of its
    own (`{output_of: pack, args: {w: {shape: [8, 32]}}, output: 1}`): prepared operands such as
    packed weights and their scales. A constant: it never requires grad. Within one sample, the
    same op on the same arguments is called once, so two of its outputs come from one call."""

    schema: FunctionSchema          # the op that makes it
    args: tuple[tuple[str, "SampleValue"], ...]
    output: int = 0                 # which of its returns


SampleValue = Union[TensorSample, OpOutput, SymDim, tuple, int, float, bool, str, None]


@dataclass(frozen=True)
class Sample:
    """One declarative call: argument name -> value (tensor lists are tuples of TensorSample)."""

    args: tuple[tuple[str, SampleValue], ...]
    loc: Loc = field(compare=False, hash=False)
    name: str | None = None
    dims: tuple[tuple[str, int], ...] = ()      # each named size -> its value in this sample
    gradcheck: GradcheckSpec | None = None      # this sample's, over the op's


@dataclass(frozen=True)
class AutocastSpec:
    device_type: str                # "cuda" | "cpu"
    cast_inputs: str                # torch dtype name, e.g. "float16", or AUTOCAST_DTYPE
    loc: Loc = field(compare=False, hash=False)


# `cast_inputs: autocast_dtype`: the autocast dtype in effect at the call (torch.autocast's
# `dtype=`), as aten's lower-precision ops cast, rather than one fixed dtype.
AUTOCAST_DTYPE = "autocast_dtype"


@dataclass(frozen=True)
class VmapSpec:
    """`pointwise` (broadcasting elementwise op), `leading` (rows at dim 0 of the first Tensor
    input, or of the `rows` named by `leading(x, y)`, and of every output; other Tensor inputs
    are shared by all rows) or a Python batching rule."""

    kind: str | PyRef
    loc: Loc = field(compare=False, hash=False)
    rows: tuple[str, ...] = ()


@dataclass(frozen=True)
class DerivativesSpec:
    """Raw `derivatives:` section; `codegen.formulas` parses it into formula IR."""

    # ("self",) or ("self", "other") for a formula giving several input grads -> formula text
    formulas: tuple[tuple[tuple[str, ...], Located], ...]
    output_differentiability: tuple[bool, ...] | None
    loc: Loc = field(compare=False, hash=False)
    # Where each name of each formula's key is (errors about the names point there); () when
    # unknown.
    keys: tuple[tuple[Loc, ...], ...] = field(default=(), compare=False, hash=False)
    # Where `output_differentiability`'s list and each of its entries are (None, () when
    # unknown): errors about them point there rather than at the whole section.
    output_differentiability_loc: Loc | None = field(default=None, compare=False, hash=False)
    output_differentiability_locs: tuple[Loc, ...] = field(default=(), compare=False, hash=False)


@dataclass(frozen=True)
class DeclaredBreak:
    """An intended incompatible change, with its reason: an op's `breaks: {reason: ...}`, or an
    entry `<op>: {reason: ...}` of a file's `removed:` (codegen.compat)."""

    reason: str
    loc: Loc = field(compare=False, hash=False)
    op: str = ""                    # `removed:` only: the removed op, `ns::name[.overload]`


@dataclass(frozen=True)
class Op:
    schema: FunctionSchema
    loc: Loc = field(compare=False, hash=False)       # the `func:` value
    func: Located | None = field(default=None, compare=False, hash=False)
    dispatch: tuple[tuple[DispatchKey, Kernel], ...] = ()
    tags: tuple[str, ...] = ()
    # Where each tag the op file writes is (errors about a tag point there); tags opgen adds
    # (codegen.tags.implied_tags) have none.
    tag_locs: tuple[tuple[str, Loc], ...] = field(default=(), compare=False, hash=False)
    doc: str = ""
    fake: object = None             # codegen.shape.FakeRule | PyRef | None
    derivatives: object = None      # codegen.formulas.Derivatives | None
    samples: tuple[Sample, ...] = ()
    autocast: AutocastSpec | None = None
    vmap: VmapSpec | None = None
    gradcheck: GradcheckSpec | None = None
    # Warning names silenced for this op: its own `suppress:` and its file's.
    suppress: frozenset[str] = frozenset()
    abi: object = None              # codegen.abi.Abi for `abi: stable`, None for the full API
    # Its `abi:`/`min_torch:` was refused: which ABI it meant is unknown, so it is left out of
    # the check that a namespace's files agree (it would be taken for a full-API file).
    abi_refused: bool = False
    breaks: DeclaredBreak | None = None     # an intended break of the snapshot's contract
    # CUDA kernels run under a device guard for the first tensor argument and check that every
    # tensor argument is on one device (Note [CUDA device guard] in codegen/dest/cpp_register.py).
    device_guard: bool = True
    device_check: bool = True

    @property
    def name(self) -> OperatorName:
        return self.schema.name

    @property
    def namespace(self) -> str:
        assert self.schema.name.namespace is not None
        return self.schema.name.namespace

    @property
    def path(self) -> str:
        return self.loc.path

    def kernel(self, key: DispatchKey) -> Kernel | None:
        for k, v in self.dispatch:
            if k is key:
                return v
        return None


@dataclass(frozen=True)
class OpFile:
    path: str                       # as given on the command line, relative to the repo root
    namespace: str | None           # file-level default namespace
    ops: tuple[Op, ...]
    # The file's text as diagnostics show it, so checks after loading never read it again.
    source: str = field(default="", compare=False, hash=False, repr=False)
    # Where the file's `namespace:` value is (checks about a whole namespace point there).
    namespace_loc: Loc | None = field(default=None, compare=False, hash=False, repr=False)
    # The file's `suppress:` (warning names) and its `conventions:` (None, or "aten").
    suppress: frozenset[str] = frozenset()
    conventions: str | None = None
    # Warnings found while loading it, for `diagnostics()` to report with the later ones.
    warnings: tuple = field(default=(), compare=False, hash=False, repr=False)
    abi: object = None              # codegen.abi.Abi for `abi: stable`, None for the full API
    # Its `abi:`/`min_torch:` was refused: which ABI it meant is unknown, so it is left out of
    # the check that a namespace's files agree (it would be taken for a full-API file).
    abi_refused: bool = False
    autograd: str | None = None     # `autograd:` ("cpp", "python"); None: not given (cpp)
    removed: tuple[DeclaredBreak, ...] = ()     # ops removed on purpose (codegen.compat)
    # The first line of every op entry, those that did not load too: where each entry ends, so
    # that an error in an entry that failed is not taken for one of the op before it.
    entries: tuple[int, ...] = field(default=(), compare=False, hash=False, repr=False)


@dataclass(frozen=True)
class OpLibrary:
    files: tuple[OpFile, ...]

    # Computed once: the library is frozen, and generators ask for these per op (a list rebuilt
    # or scanned on every access made check and generate quadratic in the number of ops).
    @functools.cached_property
    def ops(self) -> tuple[Op, ...]:
        return tuple(op for f in self.files for op in f.ops)

    @functools.cached_property
    def namespaces(self) -> tuple[str, ...]:
        return tuple(sorted({op.namespace for op in self.ops}))

    @functools.cached_property
    def _by_name(self) -> dict[tuple[str | None, str], tuple[Op, ...]]:
        index: dict[tuple[str | None, str], list[Op]] = {}
        for op in self.ops:
            index.setdefault((op.schema.name.namespace, op.schema.name.name), []).append(op)
        return {k: tuple(v) for k, v in index.items()}

    def named(self, namespace: str | None, name: str) -> tuple[Op, ...]:
        """Every overload of `namespace::name`, in library order."""
        return self._by_name.get((namespace, name), ())

    @functools.cached_property
    def _by_namespace(self) -> dict[str, tuple[Op, ...]]:
        index: dict[str, list[Op]] = {}
        for op in self.ops:
            index.setdefault(op.namespace, []).append(op)
        return {k: tuple(v) for k, v in index.items()}

    def in_namespace(self, namespace: str) -> tuple[Op, ...]:
        """The ops of `namespace`, in library order."""
        return self._by_namespace.get(namespace, ())

    def diagnostics(self) -> Diagnostics:
        """A Diagnostics that can show the source lines of every file of the library, holding the
        warnings found while loading it."""
        diags = Diagnostics()
        for f in self.files:
            diags.add_source(f.path, f.source)
            diags.items.extend(f.warnings)
        return diags
