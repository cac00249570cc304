"""Schema IR types -> the C++ types a kernel takes on torch's stable ABI (Note [ABI choice] in
codegen/abi.py), as `TORCH_BOX` unboxes them at torch 2.13 (torch/csrc/stable/library.h and
stableivalue_conversions.h):

- `Tensor` -> `torch::stable::Tensor` (`const&`; `&` when the schema writes it), `Tensor?` ->
  `std::optional<torch::stable::Tensor>`;
- `int`, `float`, `bool` -> `int64_t`, `double`, `bool`; `ScalarType`, `Layout`, `MemoryFormat` ->
  the `torch::headeronly` enums; `Device` -> `torch::stable::Device`; `Generator` ->
  `torch::stable::Generator` (torch >= 2.13); `str` -> `std::string_view` (TORCH_BOX unboxes a
  `std::string` and passes a view of it);
- `int[]`, `float[]`, `Tensor[]` -> `torch::headeronly::HeaderOnlyArrayRef<T>` (TORCH_BOX unboxes
  a `std::vector<T>` and passes a view), `bool[]` -> `std::vector<bool>` (which has no view);
- `T?` -> `std::optional<T>` of the above (`std::optional<std::string>` for `str?`: TORCH_BOX
  maps no optional view);
- returns: `torch::stable::Tensor` (also for a mutated argument: the handle is returned by
  value), `int64_t`, `double`, `bool`, `std::vector<torch::stable::Tensor>`, a `std::tuple` of
  them, or `void`.

What the stable ABI cannot box at the namespace's `min_torch` raises `cpp.Unsupported` with a
hint; `Scalar` above all (torch 2.13 has no stable Scalar). The C++ type algebra and the
signature record are codegen.api.cpp's.
"""

from __future__ import annotations

import dataclasses

from codegen.abi import STABLE_FEATURES, Abi, version_text
from codegen.api import cpp
from codegen.api.cpp import (BaseC, ConstRefC, CppSignature, CType, MutRefC, OptionalC, TupleC,
                             Unsupported, VectorC, is_plain)
from codegen.model import (Argument, BaseTy, BaseType, FunctionSchema, ListType, OptionalType,
                           Return, Type)

tensorT = BaseC("torch::stable::Tensor")

_VALUES: dict[BaseTy, BaseC] = {
    BaseTy.int: BaseC("int64_t"),
    BaseTy.float: BaseC("double"),
    BaseTy.bool: BaseC("bool"),
    BaseTy.ScalarType: BaseC("torch::headeronly::ScalarType"),
    BaseTy.Layout: BaseC("torch::headeronly::Layout"),
    BaseTy.MemoryFormat: BaseC("torch::headeronly::MemoryFormat"),
    BaseTy.Device: BaseC("torch::stable::Device"),
    BaseTy.Generator: BaseC("torch::stable::Generator"),
}

# List elements TORCH_BOX converts, and the C++ element type.
_LIST_ELEMENTS: dict[BaseTy, BaseC] = {
    BaseTy.int: BaseC("int64_t"),
    BaseTy.float: BaseC("double"),
    BaseTy.Tensor: tensorT,
}

_FULL_API = "or build the namespace on the full libtorch API (remove 'abi: stable')"

# Base types the schema language has and the full API binds, but the stable ABI cannot box: the
# message, the types to declare instead, and the hint where there are none.
_NOT_BOXED: dict[BaseTy, tuple[str, tuple[BaseTy, ...], str]] = {
    BaseTy.Scalar: ("'Scalar' cannot be boxed by torch's stable ABI (torch 2.13 has no stable "
                    "Scalar type)", (BaseTy.float, BaseTy.int), ""),
    BaseTy.SymInt: ("'SymInt' cannot be boxed by torch's stable ABI (it has no symbolic "
                    "integers)", (BaseTy.int,), ""),
    BaseTy.SymBool: ("'SymBool' cannot be boxed by torch's stable ABI", (BaseTy.bool,), ""),
    BaseTy.DeviceIndex: ("'DeviceIndex' cannot be boxed by torch's stable ABI", (BaseTy.int,),
                         ""),
    BaseTy.Storage: ("'Storage' cannot be boxed by torch's stable ABI", (), _FULL_API),
    BaseTy.Stream: ("'Stream' cannot be boxed by torch's stable ABI", (),
                    f"take the stream from torch::stable::accelerator in the kernel, {_FULL_API}"),
}


def _rebased(t: Type, base: BaseTy) -> Type:
    """`t` with `base` for its base type (`SymInt[]` -> `int[]`, `SymInt?` -> `int?`)."""
    if isinstance(t, BaseType):
        return BaseType(base)
    assert isinstance(t, (ListType, OptionalType)), t
    return dataclasses.replace(t, elem=_rebased(t.elem, base))


def _not_boxed(t: BaseType, written: Type) -> Unsupported:
    """The refusal of `t`, found in the `written` type: the hint says what to declare instead
    in the written shape, so that a list stays a list and an optional stays optional."""
    msg, instead, hint = _NOT_BOXED[t.name]
    if instead:
        names = [f"'{_rebased(written, b)}'" for b in instead]
        hint = f"declare it {' (or '.join(names)}{')' * (len(names) - 1)}, {_FULL_API}"
    return Unsupported(t, msg, hint)


def _base(t: BaseType, abi: Abi, written: Type | None = None) -> BaseC:
    if t.name in _NOT_BOXED:
        raise _not_boxed(t, written or t)
    if t.name is BaseTy.Generator and not abi.has("Generator"):
        need = version_text(STABLE_FEATURES["Generator"])
        raise Unsupported(t, f"'Generator' can be boxed by torch's stable ABI from torch {need} "
                             f"on, but this namespace's min_torch is {abi.min_text}",
                          f'set min_torch: "{need}", {_FULL_API}')
    if t.name in _VALUES:
        return _VALUES[t.name]
    # TorchScript-only and unbindable types: the full API's refusals and hints.
    cpp._refuse_base(t, optional=True)
    raise Unsupported(t, f"'{t.name.value}' cannot be boxed by torch's stable ABI", _FULL_API)


def _list(t: ListType, abi: Abi, written: Type) -> CType:
    e = t.elem
    if is_plain(e, BaseTy.bool):
        return VectorC(BaseC("bool"))
    if isinstance(e, BaseType) and e.name in _LIST_ELEMENTS:
        return BaseC(f"torch::headeronly::HeaderOnlyArrayRef<{_LIST_ELEMENTS[e.name].cpp()}>")
    if isinstance(e, BaseType) and e.name in _NOT_BOXED:
        raise _not_boxed(e, written)
    raise Unsupported(t, f"lists of '{e}' cannot be boxed by torch's stable ABI",
                      f"the stable ABI boxes int[], float[], bool[] and Tensor[]; {_FULL_API}")


def argument_type(t: Type, abi: Abi, *, mutable: bool, written: Type | None = None) -> CType:
    """`written`: the whole type `t` is part of (`t` itself when None), for the hints."""
    written = written or t
    if isinstance(t, BaseType):
        if t.name is BaseTy.Tensor:
            return MutRefC(tensorT) if mutable else ConstRefC(tensorT)
        if t.name is BaseTy.str:
            return BaseC("std::string_view")
        return _base(t, abi, written)
    if isinstance(t, OptionalType):
        e = t.elem
        if isinstance(e, OptionalType):
            raise Unsupported(t, "nested optional types have no C++ binding")
        if is_plain(e, BaseTy.Tensor):
            return ConstRefC(OptionalC(tensorT))
        if is_plain(e, BaseTy.str):
            return ConstRefC(OptionalC(BaseC("std::string")))
        if isinstance(e, ListType) and is_plain(e.elem, BaseTy.bool):
            return ConstRefC(OptionalC(_list(e, abi, written)))
        return OptionalC(argument_type(e, abi, mutable=False, written=written))
    if isinstance(t, ListType):
        return ConstRefC(VectorC(BaseC("bool"))) if is_plain(t.elem, BaseTy.bool) \
            else _list(t, abi, written)
    cpp._refuse_other(t)
    raise AssertionError("unreachable")


def return_type(r: Return, abi: Abi) -> CType:
    t = r.type
    if isinstance(t, BaseType):
        if t.name is BaseTy.Tensor:
            return tensorT
        if t.name in (BaseTy.int, BaseTy.float, BaseTy.bool):
            return _VALUES[t.name]
    if isinstance(t, ListType) and is_plain(t.elem, BaseTy.Tensor) and not r.is_write:
        return VectorC(tensorT)
    if isinstance(t, (BaseType, ListType, OptionalType)):
        if isinstance(t, BaseType) and t.name in _NOT_BOXED:
            raise _not_boxed(t, t)
        raise Unsupported(t, f"'{t}' returns cannot be boxed by torch's stable ABI",
                          "return Tensor, Tensor[], int, float or bool (several as a tuple); "
                          + _FULL_API)
    cpp._refuse_other(t)
    raise AssertionError("unreachable")


def signature(schema: FunctionSchema, abi: Abi) -> CppSignature:
    """The kernel signature TORCH_BOX unboxes for `schema` at `abi.min_torch`; raises
    `Unsupported` (located at the offending argument or return) for what it cannot box."""
    if schema.is_vararg or schema.is_varret:
        raise Unsupported(schema, "variadic schemas ('...') are TorchScript-only; custom op "
                                  "kernels need a fixed signature")
    bindings = []
    for a in schema.arguments:
        try:
            ctype = argument_type(a.type, abi, mutable=a.is_write)
        except Unsupported as e:
            raise e.located(getattr(a, "type_span", None) or a.span) from None
        bindings.append(cpp.Binding(cpp.name(a.name), ctype, a))
    rets = []
    for r in schema.returns:
        try:
            rets.append(return_type(r, abi))
        except Unsupported as e:
            raise e.located(getattr(r, "type_span", None) or r.span) from None
    returns: CType = (cpp.voidT if not rets else rets[0] if len(rets) == 1
                      else TupleC(tuple(rets)))
    return CppSignature(schema, returns, tuple(bindings))


def uses(sig: CppSignature, name: str) -> bool:
    """Whether any parameter or return type of `sig` mentions `name` (for the includes)."""
    return name in sig.pointer_type()


__all__ = ["signature", "Argument", "tensorT", "uses"]
