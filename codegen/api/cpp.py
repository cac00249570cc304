"""Schema IR types -> the C++ types the PyTorch dispatcher binds for a custom op's kernel.

A kernel registered with `m.impl("op", TORCH_FN(f))` must take exactly these types: c10 infers a
schema from `f`'s signature and checks it against the declared one, and the boxed calling
convention converts each IValue to exactly this type. The mapping follows torchgen's dispatcher
API (`torchgen/api/cpp.py` with `symint=True`), restricted to what c10's boxing layer can bind
for an operator registered outside ATen.

Types that have no C++ binding (TorchScript-only types, type variables, tuples, generics, named
dimensions, TorchBind classes) raise `Unsupported`, which names the offending type node; the
generators turn it into a located diagnostic. Nothing here produces text that is not valid C++.
"""

from __future__ import annotations

import functools

import math
import re
from dataclasses import dataclass
from typing import Union

from codegen import enums, escape, reserved
from codegen.model import (
    SCRIPT_ONLY_BASE,
    Argument,
    BaseTy,
    BaseType,
    BoolDefault,
    ClassType,
    ComplexDefault,
    Default,
    EnumDefault,
    FloatDefault,
    FunctionSchema,
    Generic,
    GenericType,
    IntDefault,
    ListDefault,
    ListType,
    NoneDefault,
    OptionalType,
    Return,
    Span,
    StrDefault,
    TupleType,
    Type,
    TypeVar,
)

# --------------------------------------------------------------------------------------------------
# C++ type algebra (structure, printed by `cpp()`; no C++ is ever assembled from loose strings)


@dataclass(frozen=True)
class BaseC:
    name: str                       # fully qualified: `at::Tensor`, `int64_t`

    def cpp(self) -> str:
        return self.name


@dataclass(frozen=True)
class ConstRefC:
    elem: CType

    def cpp(self) -> str:
        return f"const {self.elem.cpp()}&"


@dataclass(frozen=True)
class MutRefC:
    elem: CType

    def cpp(self) -> str:
        return f"{self.elem.cpp()}&"


@dataclass(frozen=True)
class OptionalC:
    elem: CType

    def cpp(self) -> str:
        return f"std::optional<{self.elem.cpp()}>"


@dataclass(frozen=True)
class ArrayRefC:
    elem: CType

    def cpp(self) -> str:
        return f"at::ArrayRef<{self.elem.cpp()}>"


@dataclass(frozen=True)
class ListC:
    """`c10::List<T>`: an owning, boxed list (the only binding for `Tensor?[]` and `bool[]`)."""

    elem: CType

    def cpp(self) -> str:
        return f"c10::List<{self.elem.cpp()}>"


@dataclass(frozen=True)
class VectorC:
    elem: CType

    def cpp(self) -> str:
        return f"std::vector<{self.elem.cpp()}>"


@dataclass(frozen=True)
class ArrayC:
    elem: CType
    size: int

    def cpp(self) -> str:
        return f"std::array<{self.elem.cpp()}, {self.size}>"


@dataclass(frozen=True)
class TupleC:
    elems: tuple[CType, ...]

    def cpp(self) -> str:
        return "std::tuple<" + ", ".join(e.cpp() for e in self.elems) + ">"


@dataclass(frozen=True)
class DictC:
    """`c10::Dict<K, V>`: what c10 binds `Dict(K, V)` to (pyg-lib's `Dict(str, Tensor)`)."""

    key: CType
    value: CType

    def cpp(self) -> str:
        return f"c10::Dict<{self.key.cpp()}, {self.value.cpp()}>"


CType = Union[BaseC, ConstRefC, MutRefC, OptionalC, ArrayRefC, ListC, VectorC, ArrayC, TupleC,
              DictC]

# c10::Dict keys: what c10's IValue can hash.
_DICT_KEYS = frozenset({BaseTy.str, BaseTy.int, BaseTy.float, BaseTy.bool, BaseTy.complex,
                        BaseTy.Tensor})


def is_dict(t: Type) -> bool:
    return isinstance(t, GenericType) and t.kind is Generic.Dict


def dict_type(t: GenericType) -> DictC:
    key, value = t.args
    if not (isinstance(key, BaseType) and key.name in _DICT_KEYS and key.alias is None):
        raise Unsupported(t, f"'{key}' cannot be a Dict key",
                          "keys are str, int, float, bool, complex or Tensor")
    return DictC(owned_type(key), owned_type(value))

tensorT = BaseC("at::Tensor")
scalarT = BaseC("at::Scalar")
voidT = BaseC("void")

# Value types: passed by value, returned by value, wrapped in std::optional when optional.
_VALUE_TYPES: dict[BaseTy, BaseC] = {
    BaseTy.int: BaseC("int64_t"),
    BaseTy.SymInt: BaseC("c10::SymInt"),
    BaseTy.SymBool: BaseC("c10::SymBool"),
    BaseTy.float: BaseC("double"),
    BaseTy.bool: BaseC("bool"),
    # c10::string_view is std::string_view since torch 2.7 and its own class before: this name
    # binds on every supported torch.
    BaseTy.str: BaseC("c10::string_view"),
    BaseTy.ScalarType: BaseC("at::ScalarType"),
    BaseTy.Layout: BaseC("at::Layout"),
    BaseTy.Device: BaseC("at::Device"),
    BaseTy.DeviceIndex: BaseC("at::DeviceIndex"),
    BaseTy.MemoryFormat: BaseC("at::MemoryFormat"),
    BaseTy.Generator: BaseC("at::Generator"),
    BaseTy.Storage: BaseC("at::Storage"),
    BaseTy.Stream: BaseC("at::Stream"),
}

# Base types the schema language has but a C++ custom-op kernel cannot receive, and why.
_NO_CPP_BINDING: dict[BaseTy, tuple[str, str | None]] = {
    BaseTy.Dimname: ("named dimensions ('Dimname') cannot be bound by a custom op kernel",
                     "pass dimensions as 'int' or 'int[]'"),
    BaseTy.GraphModule: ("'GraphModule' is a Python-only type; it has no C++ binding",
                         "implement this op with a Python kernel"),
    BaseTy.ConstQuantizerPtr: ("'ConstQuantizerPtr' is internal to ATen's quantized kernels",
                               None),
    # c10 binds it in C++, but torch's Python argument parser cannot convert torch.qscheme
    # values for a custom op, so such an op could never be called from Python.
    BaseTy.QScheme: ("'QScheme' arguments cannot be passed to a custom op from Python",
                     "pass the quantization scheme as a 'str' or 'int'"),
}


class Unsupported(Exception):
    """A type (or schema feature) that this back end cannot bind.

    `span` locates it in the schema text: the type's own span when the parser recorded one, else
    the span of the argument or return that holds it (filled in by `signature`).
    """

    def __init__(self, node: object, message: str, hint: str | None = None,
                 span: Span | None = None) -> None:
        super().__init__(message)
        self.node = node
        self.message = message
        self.hint = hint
        self.span = span if span is not None else getattr(node, "span", None)

    def located(self, span: Span | None) -> Unsupported:
        return self if self.span is not None else Unsupported(self.node, self.message, self.hint,
                                                              span)


def _refuse_base(t: BaseType, *, optional: bool = False) -> None:
    if t.name in SCRIPT_ONLY_BASE:
        raise Unsupported(t, f"'{t.name.value}' is a TorchScript-only type; custom op kernels "
                             "cannot take or return it",
                          "use a concrete type: Tensor, int, float, bool, str, Scalar, ...")
    if t.name in _NO_CPP_BINDING:
        msg, hint = _NO_CPP_BINDING[t.name]
        raise Unsupported(t, msg, hint)
    if t.name is BaseTy.Generator and not optional:
        # c10 infers `Generator?` from at::Generator (an empty one means "the default"), so a
        # required Generator can never match its kernel's inferred schema.
        raise Unsupported(t, "a custom op kernel can only bind an optional generator",
                          "declare it 'Generator?'")


def _refuse_other(t: Type) -> None:
    """Raise for every type that is not a BaseType/OptionalType/ListType/TupleType."""
    if isinstance(t, TypeVar):
        raise Unsupported(t, f"type variable '{t.name}' is TorchScript-only; custom op kernels "
                             "need concrete types")
    if isinstance(t, GenericType):
        raise Unsupported(t, f"'{t.kind.value}(...)' is a TorchScript-only type; custom op kernels "
                             "cannot bind it")
    if isinstance(t, ClassType):
        raise Unsupported(t, f"TorchBind class '{t.qualname}' is not supported by the C++ back end",
                          "pass its state as tensors, or register this op by hand")
    raise AssertionError(f"unhandled type node {t!r}")


# --------------------------------------------------------------------------------------------------
# Note [Owned element types]
#
# Inside a nested list, a list of optionals or a tuple, c10 binds owning C++ types: the kernel of
# `int[][]` takes `std::vector<std::vector<int64_t>>` (as vLLM's `register_graph_buffers` does;
# `str[][]` is `std::vector<c10::List<std::string>>`, see owned_type),
# `(str, str, str)[]` a `std::vector<std::tuple<std::string, std::string, std::string>>` (pyg-lib's
# `hetero_neighbor_sample`), `(Tensor, Tensor, Tensor)?` a
# `std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>>` (torchcodec). Views such as
# `at::IntArrayRef` or `c10::string_view` are only bound at the top level of an argument.
# tests/test_cpp_types.py registers and calls a kernel for each of these forms.


def owned_type(t: Type, *, optional: bool = False) -> CType:
    """The owning C++ type a value of `t` has inside a container (Note [Owned element types]);
    `optional`: `t` is the element of an optional type."""
    if isinstance(t, BaseType):
        _refuse_base(t, optional=optional)
        if t.name is BaseTy.Tensor:
            return tensorT
        if t.name is BaseTy.Scalar:
            return scalarT
        if t.name is BaseTy.str:
            return BaseC("std::string")
        return _VALUE_TYPES[t.name]
    if isinstance(t, OptionalType):
        if isinstance(t.elem, OptionalType):
            raise Unsupported(t, "nested optional types have no C++ binding")
        return OptionalC(owned_type(t.elem, optional=True))
    if isinstance(t, ListType):
        if is_plain(t.elem, BaseTy.str):
            # GCC 12 at -O3 warns (a false -Wstringop-overflow inside c10's IValue conversion)
            # for a std::vector<std::string> taken out of a list; c10::List is bound as well.
            return ListC(BaseC("std::string"))
        return VectorC(owned_type(t.elem))
    if isinstance(t, TupleType):
        return TupleC(tuple(owned_type(e) for e in t.elems))
    if is_dict(t):
        return dict_type(t)  # type: ignore[arg-type]
    _refuse_other(t)
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------------------------------
# Arguments


def valuetype_type(t: Type, *, optional: bool = False) -> CType | None:
    """The by-value C++ type of `t`, or None when `t` is passed by reference/view. `optional`:
    `t` is the element of an optional type."""
    if isinstance(t, BaseType):
        _refuse_base(t, optional=optional)
        if t.name in (BaseTy.Tensor, BaseTy.Scalar):
            return None
        return _VALUE_TYPES[t.name]
    if isinstance(t, OptionalType):
        elem = valuetype_type(t.elem, optional=True)
        return None if elem is None else OptionalC(elem)
    if isinstance(t, ListType):
        if is_plain(t.elem, BaseTy.bool) and t.size is not None:
            return ArrayC(BaseC("bool"), t.size)
        return None
    if isinstance(t, TupleType) or is_dict(t):
        return None
    _refuse_other(t)
    raise AssertionError("unreachable")


def is_plain(t: Type, name: BaseTy) -> bool:
    return isinstance(t, BaseType) and t.name is name


def argumenttype_type(t: Type, *, mutable: bool) -> CType:
    """The C++ parameter type for an argument of schema type `t`."""
    r = valuetype_type(t)
    if r is not None:
        return r
    if isinstance(t, BaseType):
        if t.name is BaseTy.Tensor:
            return MutRefC(tensorT) if mutable else ConstRefC(tensorT)
        if t.name is BaseTy.Scalar:
            return ConstRefC(scalarT)
        raise AssertionError(f"base type {t} should be a value type")
    if isinstance(t, OptionalType):
        e = t.elem
        if is_plain(e, BaseTy.Tensor):
            # Also for `Tensor(a!)?`: c10 binds optional tensors only by const reference.
            return ConstRefC(OptionalC(tensorT))
        if is_plain(e, BaseTy.Scalar):
            return ConstRefC(OptionalC(scalarT))
        if isinstance(e, ListType) and is_plain(e.elem, BaseTy.int):
            return BaseC("at::OptionalIntArrayRef")
        if isinstance(e, ListType) and is_plain(e.elem, BaseTy.SymInt):
            return BaseC("at::OptionalSymIntArrayRef")
        if isinstance(e, OptionalType):
            raise Unsupported(t, "nested optional types have no C++ binding")
        inner = argumenttype_type(e, mutable=mutable)
        if isinstance(inner, ConstRefC):
            # `std::optional<const T&>` is not C++: the optional itself is the reference.
            return ConstRefC(OptionalC(inner.elem))
        return OptionalC(inner)
    if isinstance(t, ListType):
        e = t.elem
        if is_plain(e, BaseTy.int):
            return BaseC("at::IntArrayRef")
        if is_plain(e, BaseTy.SymInt):
            return BaseC("c10::SymIntArrayRef")
        if is_plain(e, BaseTy.Tensor):
            return BaseC("at::TensorList")
        if isinstance(e, OptionalType) and is_plain(e.elem, BaseTy.Tensor):
            return ConstRefC(ListC(OptionalC(tensorT)))
        if is_plain(e, BaseTy.bool):
            # Unsized: std::vector<bool> has no ArrayRef view, so c10 hands over its own list.
            return ConstRefC(ListC(BaseC("bool")))
        if is_plain(e, BaseTy.Scalar):
            return ArrayRefC(scalarT)
        if isinstance(e, (ListType, OptionalType, TupleType)):
            return ConstRefC(VectorC(owned_type(e)))
        elem = argumenttype_type(e, mutable=False)
        return ArrayRefC(elem)
    if isinstance(t, TupleType) or is_dict(t):
        return ConstRefC(owned_type(t))
    _refuse_other(t)
    raise AssertionError("unreachable")


def argument_type(a: Argument) -> CType:
    return argumenttype_type(a.type, mutable=a.is_write)


# --------------------------------------------------------------------------------------------------
# Returns


def returntype_type(t: Type, *, mutable: bool) -> CType:
    if isinstance(t, OptionalType):
        if isinstance(t.elem, OptionalType):
            raise Unsupported(t, "nested optional types have no C++ binding")
        r = None if is_plain(t.elem, BaseTy.str) else valuetype_type(t)
        return r if r is not None else OptionalC(returntype_type(t.elem, mutable=False))
    if is_plain(t, BaseTy.str):
        # A returned view would outlive what it points into: strings are returned by value.
        return BaseC("std::string")
    r = valuetype_type(t)
    if r is not None:
        if isinstance(r, ArrayC):
            raise Unsupported(t, f"fixed-size list returns ('{t}') have no C++ binding",
                              "return 'bool[]' or a Tensor")
        return r
    if isinstance(t, BaseType):
        if t.name is BaseTy.Tensor:
            # Note [Tensor returns]: a return that writes an alias set is the argument itself,
            # handed back by reference (unless the argument is optional, `_returns_optional`);
            # every other Tensor return is a new handle.
            return MutRefC(tensorT) if mutable else tensorT
        if t.name is BaseTy.Scalar:
            return scalarT
        raise AssertionError(f"base type {t} should be a value type")
    if isinstance(t, ListType):
        if mutable:
            raise Unsupported(t, "a mutable tensor list cannot be returned",
                              "return '()' and let the caller keep its list")
        if t.size is not None:
            raise Unsupported(t, f"fixed-size list returns ('{t}') have no C++ binding")
        if is_plain(t.elem, BaseTy.bool):
            return ListC(BaseC("bool"))
        if isinstance(t.elem, OptionalType):
            return VectorC(owned_type(t.elem))
        return VectorC(returntype_type(t.elem, mutable=False))
    if isinstance(t, TupleType):
        return TupleC(tuple(returntype_type(e, mutable=False) for e in t.elems))
    if is_dict(t):
        return owned_type(t)
    _refuse_other(t)
    raise AssertionError("unreachable")


def return_type(r: Return) -> CType:
    return returntype_type(r.type, mutable=r.is_write)


def _returns_optional(r: Return, schema: FunctionSchema | None) -> bool:
    """`r` writes the alias set of a `Tensor(a!)?` argument: with the argument None, the kernel
    returns a new tensor, so there is no argument to hand back by reference."""
    if schema is None or not r.is_write or r.annotation is None:
        return False
    return any(a.annotation is not None and a.annotation.alias_set == r.annotation.alias_set
               and isinstance(a.type, OptionalType) for a in schema.arguments)


def returns_type(rs: tuple[Return, ...], schema: FunctionSchema | None = None) -> CType:
    if not rs:
        return voidT
    # A write to an optional argument's alias set returns a new tensor where it is None.
    by_ref = not any(_returns_optional(r, schema) for r in rs)
    if len(rs) == 1:
        one = returntype_type(rs[0].type, mutable=rs[0].is_write and by_ref)
        # c10 reads a returned std::tuple as several returns: a lone tuple-typed return is a
        # one-element tuple holding it.
        return TupleC((one,)) if isinstance(rs[0].type, TupleType) else one
    if not by_ref or (any(r.is_write for r in rs) and not all(r.is_write for r in rs)):
        # Mutated inputs beside new values: c10's boxed call cannot return a tuple mixing
        # references and values, so every Tensor is a handle (the mutated one still aliases).
        return TupleC(tuple(returntype_type(r.type, mutable=False) for r in rs))
    return TupleC(tuple(return_type(r) for r in rs))


# --------------------------------------------------------------------------------------------------
# Signatures

def name(identifier: str) -> str:
    """A schema name as a C++ identifier: keywords and macros get a trailing underscore
    (codegen.reserved.cpp_identifier)."""
    return reserved.cpp_identifier(identifier)


@dataclass(frozen=True)
class Binding:
    name: str
    type: CType
    argument: Argument
    default: str | None = None      # C++ default expression, when one exists

    def decl(self, *, with_default: bool = False) -> str:
        text = f"{self.type.cpp()} {self.name}"
        if with_default and self.default is not None:
            text += f" = {self.default}"
        return text


@dataclass(frozen=True)
class CppSignature:
    """The C++ function type of a kernel for `schema`: `returns (*)(arguments...)`."""

    schema: FunctionSchema
    returns: CType
    arguments: tuple[Binding, ...]

    # The C++ spellings below are computed once per signature (codegen.layout.cached_signature
    # keeps one per schema, which every generator asks for).

    def decl(self, fn_name: str, *, with_defaults: bool = False) -> str:
        args = self._args_with_defaults if with_defaults else self._args
        return f"{self._returns_cpp} {fn_name}({args})"

    @functools.cached_property
    def _returns_cpp(self) -> str:
        return self.returns.cpp()

    @functools.cached_property
    def _args(self) -> str:
        return ", ".join(b.decl() for b in self.arguments)

    @functools.cached_property
    def _args_with_defaults(self) -> str:
        # C++ default arguments must be trailing: stop at the last argument without one.
        usable = len(self.arguments)
        while usable > 0 and self.arguments[usable - 1].default is not None:
            usable -= 1
        return ", ".join(b.decl(with_default=i >= usable) for i, b in enumerate(self.arguments))

    @functools.cached_property
    def _arg_types(self) -> str:
        return ", ".join(b.type.cpp() for b in self.arguments)

    def function_type(self) -> str:
        """`R(A, B)`: the template argument of `TypedOperatorHandle<...>`."""
        return f"{self._returns_cpp}({self._arg_types})"

    def pointer_type(self) -> str:
        return self.pointer_decl("")

    def pointer_decl(self, var: str) -> str:
        """`R (*var)(A, B)`: a function pointer variable of this type."""
        return f"{self._returns_cpp} (*{var})({self._arg_types})"


def signature(schema: FunctionSchema) -> CppSignature:
    """The dispatcher signature of `schema`; raises `Unsupported` for what C++ cannot bind."""
    if schema.is_vararg or schema.is_varret:
        raise Unsupported(schema, "variadic schemas ('...') are TorchScript-only; custom op "
                                  "kernels need a fixed signature")
    bindings = []
    for a in schema.arguments:
        try:
            ctype = argument_type(a)
        except Unsupported as e:
            raise e.located(getattr(a, "type_span", None) or a.span) from None
        default = default_expr(a.default, a.type) if a.default is not None else None
        bindings.append(Binding(name(a.name), ctype, a, default))
    for r in schema.returns:
        try:
            return_type(r)
        except Unsupported as e:
            raise e.located(getattr(r, "type_span", None) or r.span) from None
    return CppSignature(schema, returns_type(schema.returns, schema), tuple(bindings))


# --------------------------------------------------------------------------------------------------
# Default values -> C++ expressions (for the typed call API in ops.h)

# The dtypes the typed call API spells as c10's `at::k<Name>` constants; other ScalarType defaults
# are `at::ScalarType::<Name>` (codegen.enums.SCALAR_TYPES).
_K_CONSTANT_DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8",
                      "uint8", "bool", "complex64", "complex128")

_ENUM_DEFAULTS: dict[str, str] = {
    # ScalarType names as torch's schema language spells them (aliases included)
    **{name: f"at::k{enums.C10_SCALAR_TYPES[dtype]}" for name, dtype in enums.DTYPE_NAMES.items()
       if dtype in _K_CONSTANT_DTYPES},
    # Layout, MemoryFormat, Reduction
    "strided": "at::kStrided", "sparse_coo": "at::kSparse", "jagged": "at::kJagged",
    "contiguous_format": "at::MemoryFormat::Contiguous",
    "preserve_format": "at::MemoryFormat::Preserve",
    "channels_last": "at::MemoryFormat::ChannelsLast",
    "channels_last_3d": "at::MemoryFormat::ChannelsLast3d",
    "Mean": "at::Reduction::Mean", "Sum": "at::Reduction::Sum",
}

_CPP_IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def string_literal(value: str) -> str:
    """A C++ string literal spelling `value` (codegen.escape.cpp_string)."""
    return escape.cpp_string(value)


def _float_literal(value: float) -> str | None:
    if not math.isfinite(value):
        return None
    text = repr(float(value))
    return text if ("." in text or "e" in text) else text + ".0"


def default_expr(d: Default, t: Type) -> str | None:
    """A C++ expression for default `d` of an argument of type `t`, or None when there is none
    (the argument is then required in the C++ call API)."""
    base = t.elem if isinstance(t, OptionalType) else t
    if isinstance(d, NoneDefault):
        return "std::nullopt" if isinstance(t, OptionalType) else None
    if isinstance(base, ListType) and not isinstance(d, ListDefault):
        # `float[2] a=1.5` means [1.5, 1.5]: spelled as that list (`= 1.5` would be ArrayRef's
        # one-element [1.5], and `std::array<bool, 3> b = true` does not compile).
        return default_expr(ListDefault((d,) * (base.size or 1)), t)
    if isinstance(d, BoolDefault):
        return "true" if d.value else "false"
    if isinstance(d, IntDefault):
        if isinstance(base, BaseType) and base.name.value in enums.BY_TYPE:
            value = enums.by_number(base.name.value, d.value)  # `ScalarType t=6`
            return value.cpp if value is not None else None
        if not -(2 ** 63) < d.value < 2 ** 63:
            return None
        if is_plain(base, BaseTy.float):
            return _float_literal(float(d.value))
        return str(d.value)
    if isinstance(d, FloatDefault):
        return _float_literal(d.value)
    if isinstance(d, ComplexDefault):
        return None
    if isinstance(d, StrDefault):
        if is_plain(base, BaseTy.Device):
            # `at::Device d = "cpu"` needs two user conversions (via std::string): construct it.
            return f"at::Device({string_literal(d.value)})"
        return string_literal(d.value)
    if isinstance(d, EnumDefault):
        if d.name in _ENUM_DEFAULTS:
            return _ENUM_DEFAULTS[d.name]
        number = enums.scalar_type_number(d.name) if is_plain(base, BaseTy.ScalarType) else None
        return enums.SCALAR_TYPES[number].cpp if number is not None else None
    if isinstance(d, ListDefault):
        if not d.items:
            return "{}"
        if isinstance(base, ListType) and is_plain(base.elem, BaseTy.bool) and base.size:
            items = [default_expr(i, base.elem) for i in d.items]
            if None in items:
                return None
            return "std::array<bool, " + str(base.size) + ">{" + ", ".join(items) + "}"
        if isinstance(t, ListType) and (is_plain(base.elem, BaseTy.int)
                                           or is_plain(base.elem, BaseTy.SymInt)
                                           or is_plain(base.elem, BaseTy.float)):
            # A braced list: the ArrayRef views a temporary that lives until the call returns.
            items = [default_expr(i, base.elem) for i in d.items]
            if None in items:
                return None
            return "{" + ", ".join(items) + "}"  # type: ignore[arg-type]
        return None
    raise AssertionError(f"unhandled default {d!r}")


def is_valid_cpp_name(qualified: str) -> bool:
    """`f`, `ns::f`, `::f`: what a kernel name in `dispatch:` may be."""
    parts = qualified[2:].split("::") if qualified.startswith("::") else qualified.split("::")
    return all(_CPP_IDENT.fullmatch(p) and p not in reserved.CPP_KEYWORDS for p in parts)
