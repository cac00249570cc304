"""Schema IR types -> Python: type annotations (stubs) and default-value expressions.

What the dispatcher hands a Python function registered for an op (a fake kernel, a Python kernel,
a vmap rule) and what `runtime.ops.<name>(...)` accepts: Tensors, Python numbers, `torch.SymInt`
under dynamic shapes, `torch.dtype`/`torch.device`/`torch.layout`/`torch.memory_format` objects,
sequences for lists. Annotations are written for a `.pyi` stub that imports `torch`, `Tensor`,
`Sequence` and `Number` (see `STUB_IMPORTS`).

Types no Python custom op can take (TorchScript-only types, type variables, tuples, generics) raise
`Unsupported` with the offending node; the generators turn it into a located diagnostic.
"""

from __future__ import annotations

from codegen import enums
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
    StrDefault,
    TupleType,
    Type,
    TypeVar,
)

STUB_IMPORTS = (
    "from collections.abc import Sequence",
    "",
    "import torch",
    "from torch import Tensor",
    "from torch.types import Number",
)


class Unsupported(Exception):
    """A type with no Python binding; `node` is the type (its span locates it, when recorded)."""

    def __init__(self, node: object, message: str) -> None:
        super().__init__(message)
        self.node = node
        self.message = message


# Argument annotations: what a caller may pass.
_ARG_BASE: dict[BaseTy, str] = {
    BaseTy.Tensor: "Tensor",
    BaseTy.int: "int",
    BaseTy.SymInt: "int | torch.SymInt",
    BaseTy.SymBool: "bool | torch.SymBool",
    BaseTy.float: "float",
    BaseTy.bool: "bool",
    BaseTy.str: "str",
    BaseTy.Scalar: "Number | complex",   # torch.types.Number has no complex; a Scalar takes one
    BaseTy.ScalarType: "torch.dtype",
    BaseTy.Layout: "torch.layout",
    BaseTy.Device: "torch.device | str | int",
    BaseTy.DeviceIndex: "int",
    BaseTy.MemoryFormat: "torch.memory_format",
    BaseTy.QScheme: "torch.qscheme",
    BaseTy.Generator: "torch.Generator",
    BaseTy.Storage: "torch.UntypedStorage",
    BaseTy.Stream: "torch.Stream",
    BaseTy.Dimname: "str",
    BaseTy.GraphModule: "torch.fx.GraphModule",
}

# Return annotations: what the op gives back.
_RET_BASE: dict[BaseTy, str] = _ARG_BASE | {
    BaseTy.Device: "torch.device",
    BaseTy.SymInt: "int | torch.SymInt",
    # An op returning one of these enums gives back torch's number for it (ScalarType 6 is
    # float32), not a torch.dtype: the dispatcher's return path does not convert it.
    BaseTy.ScalarType: "int",
    BaseTy.Layout: "int",
    BaseTy.MemoryFormat: "int",
}

# Every annotation the stubs can hold is made of these (codegen.reserved keeps op names off the
# names they use).
ANNOTATIONS = (*_ARG_BASE.values(), *_RET_BASE.values(), "Sequence[int]", "list[int]",
               "tuple[int]", "dict[str, int]", "torch.ScriptObject")


def _base(t: BaseType, table: dict[BaseTy, str]) -> str:
    if t.name in SCRIPT_ONLY_BASE or t.name not in table:
        raise Unsupported(t, f"'{t.name.value}' has no Python binding for a custom op")
    return table[t.name]


def _refuse(t: Type) -> str:
    if isinstance(t, TypeVar):
        raise Unsupported(t, f"type variable '{t.name}' is TorchScript-only")
    if isinstance(t, GenericType):
        raise Unsupported(t, f"'{t.kind.value}(...)' is a TorchScript-only type")
    if isinstance(t, ClassType):
        return "torch.ScriptObject"
    raise AssertionError(f"unhandled type node {t!r}")


def argument_annotation(t: Type) -> str:
    """The annotation of a parameter of schema type `t`."""
    if isinstance(t, OptionalType):
        return f"{argument_annotation(t.elem)} | None"
    if isinstance(t, ListType):
        elem = argument_annotation(t.elem)
        seq = f"Sequence[{elem}]"
        # `int[2] stride` also takes a single int, as in the schema language.
        if t.size is not None and isinstance(t.elem, BaseType) and \
                t.elem.name in (BaseTy.int, BaseTy.SymInt):
            return f"{elem} | {seq}"
        return seq
    if isinstance(t, BaseType):
        return _base(t, _ARG_BASE)
    if isinstance(t, TupleType):
        return "tuple[" + ", ".join(argument_annotation(e) for e in t.elems) + "]"
    if isinstance(t, GenericType) and t.kind is Generic.Dict:
        return "dict[" + ", ".join(argument_annotation(e) for e in t.args) + "]"
    return _refuse(t)


def return_annotation(t: Type) -> str:
    if isinstance(t, OptionalType):
        return f"{return_annotation(t.elem)} | None"
    if isinstance(t, ListType):
        return f"list[{return_annotation(t.elem)}]"
    if isinstance(t, BaseType):
        return _base(t, _RET_BASE)
    if isinstance(t, TupleType):
        return "tuple[" + ", ".join(return_annotation(e) for e in t.elems) + "]"
    if isinstance(t, GenericType) and t.kind is Generic.Dict:
        return "dict[" + ", ".join(return_annotation(e) for e in t.args) + "]"
    return _refuse(t)


def returns_annotation(schema: FunctionSchema) -> str:
    rets: tuple[Return, ...] = schema.returns
    if not rets:
        return "None"
    if len(rets) == 1:
        return return_annotation(rets[0].type)
    return "tuple[" + ", ".join(return_annotation(r.type) for r in rets) + "]"


# --------------------------------------------------------------------------------------------------
# Defaults

# Enum-valued defaults as the schema language spells them -> Python expressions (ScalarType names
# come from codegen.enums).
_ENUM_DEFAULTS: dict[str, str] = {
    # Layout
    "strided": "torch.strided", "sparse_coo": "torch.sparse_coo", "jagged": "torch.jagged",
    # MemoryFormat
    "contiguous_format": "torch.contiguous_format", "preserve_format": "torch.preserve_format",
    "channels_last": "torch.channels_last", "channels_last_3d": "torch.channels_last_3d",
    # at::Reduction, an int in the dispatcher
    "Mean": "1", "Sum": "2",
}


def default_expr(d: Default, t: Type) -> str:
    """A Python expression for default `d` of an argument of type `t`."""
    base = t.elem if isinstance(t, OptionalType) else t
    if isinstance(d, NoneDefault):
        return "None"
    if isinstance(base, ListType) and not isinstance(d, ListDefault):
        # `int[2] stride=1` means [1, 1], `float[2] a=1.5` [1.5, 1.5], `bool[3] b=True` ...
        return _tuple([default_expr(d, base.elem)] * (base.size or 1))
    if isinstance(d, BoolDefault):
        return "True" if d.value else "False"
    if isinstance(d, IntDefault):
        if isinstance(base, BaseType) and base.name.value in enums.BY_TYPE:
            value = enums.by_number(base.name.value, d.value)  # `ScalarType t=6`
            if value is None:
                raise Unsupported(d, f"{base.name.value} default {d.value} names no value")
            return value.python
        if isinstance(base, BaseType) and base.name is BaseTy.float:
            return repr(float(d.value))
        return str(d.value)
    if isinstance(d, FloatDefault):
        return repr(d.value)
    if isinstance(d, ComplexDefault):
        return f"{d.imag!r}j"
    if isinstance(d, StrDefault):
        return repr(d.value)
    if isinstance(d, EnumDefault):
        expr = _ENUM_DEFAULTS.get(d.name)
        if expr is None and isinstance(base, BaseType) and base.name is BaseTy.ScalarType:
            number = enums.scalar_type_number(d.name)
            expr = enums.SCALAR_TYPES[number].python if number is not None else None
        if expr is None:
            raise Unsupported(d, f"default '{d.name}' has no Python spelling")
        return expr
    if isinstance(d, ListDefault):
        elem = base.elem if isinstance(base, ListType) else base
        # A tuple, not a list: a default is shared between calls and must not be mutable.
        return _tuple([default_expr(i, elem) for i in d.items])
    raise AssertionError(f"unhandled default {d!r}")


def _tuple(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def parameter(a: Argument, *, annotate: bool, with_default: bool = True) -> str:
    """`name`, `name=default`, or `name: annotation = default`."""
    text = a.name
    if annotate:
        text += ": " + argument_annotation(a.type)
    if a.default is not None and with_default:
        text += (" = " if annotate else "=") + default_expr(a.default, a.type)
    return text


def python_defaults(schema: FunctionSchema) -> list[bool]:
    """Per argument: whether its Python parameter can carry its default. torch lets a list
    argument without a default follow positional ones with defaults (`Tensor? bias=None, int[]
    stride`); Python does not, so the positional defaults before the last positional argument
    without one are left out (the dispatcher passes every argument anyway)."""
    last_required = max((i for i, a in enumerate(schema.arguments)
                         if not a.kwarg_only and a.default is None), default=-1)
    return [a.kwarg_only or i > last_required for i, a in enumerate(schema.arguments)]


def parameters(schema: FunctionSchema, *, annotate: bool = False) -> list[str]:
    """The parameter list of a Python function with the op's signature (with `*` for kwarg-only
    arguments), as the dispatcher calls Python kernels and fake kernels."""
    # Once per schema (frozen): fake kernels, autograd, batching rules and the stubs ask.
    memo = schema.__dict__.setdefault("_memo_python_parameters", {})
    if annotate not in memo:
        memo[annotate] = _parameters(schema, annotate)
    return list(memo[annotate])


def _parameters(schema: FunctionSchema, annotate: bool) -> tuple[str, ...]:
    out: list[str] = []
    star = False
    for a, with_default in zip(schema.arguments, python_defaults(schema)):
        if a.kwarg_only and not star:
            out.append("*")
            star = True
        out.append(parameter(a, annotate=annotate, with_default=with_default))
    return tuple(out)


def call_arguments(schema: FunctionSchema) -> list[str]:
    """Arguments forwarding every parameter of `parameters(schema)` to the op."""
    return [a.name if not a.kwarg_only else f"{a.name}={a.name}" for a in schema.arguments]
