"""The enum types of the schema language as torch numbers them: `ScalarType`, `Layout`,
`MemoryFormat`.

torch stores an enum default as its number (`torch._C.parse_schema("f(ScalarType t=float32) -> ()")`
prints `t=6`), and op libraries write it that way too (`ScalarType dst_type=39`). These tables turn
a number back into what the generated code spells: the C++ enumerator and the Python object.
tests/test_enums.py checks them against the installed torch (its headers and its Python module).
"""

from __future__ import annotations

from typing import NamedTuple


class EnumValue(NamedTuple):
    cpp: str        # C++ expression: `at::ScalarType::Int3`
    python: str     # Python expression: `torch.int3`


def _scalar_type_pairs() -> list[tuple[str, str]]:
    # (C++ enumerator, torch dtype name), in c10's order:
    # AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS in torch/headeronly/core/ScalarType.h
    pairs = [("Byte", "uint8"), ("Char", "int8"), ("Short", "int16"), ("Int", "int32"),
             ("Long", "int64"), ("Half", "float16"), ("Float", "float32"), ("Double", "float64"),
             ("ComplexHalf", "complex32"), ("ComplexFloat", "complex64"),
             ("ComplexDouble", "complex128"), ("Bool", "bool"), ("QInt8", "qint8"),
             ("QUInt8", "quint8"), ("QInt32", "qint32"), ("BFloat16", "bfloat16"),
             ("QUInt4x2", "quint4x2"), ("QUInt2x4", "quint2x4"), ("Bits1x8", "bits1x8"),
             ("Bits2x4", "bits2x4"), ("Bits4x2", "bits4x2"), ("Bits8", "bits8"),
             ("Bits16", "bits16"), ("Float8_e5m2", "float8_e5m2"),
             ("Float8_e4m3fn", "float8_e4m3fn"), ("Float8_e5m2fnuz", "float8_e5m2fnuz"),
             ("Float8_e4m3fnuz", "float8_e4m3fnuz"), ("UInt16", "uint16"), ("UInt32", "uint32"),
             ("UInt64", "uint64")]
    pairs += [(f"UInt{i}", f"uint{i}") for i in range(1, 8)]
    pairs += [(f"Int{i}", f"int{i}") for i in range(1, 8)]
    pairs += [("Float8_e8m0fnu", "float8_e8m0fnu"), ("Float4_e2m1fn_x2", "float4_e2m1fn_x2")]
    return pairs


# torch dtype name -> c10 ScalarType enumerator (`int32` -> `Int`).
C10_SCALAR_TYPES: dict[str, str] = {p: c for c, p in _scalar_type_pairs()}

# Number -> value, per enum type (the index is the number).
SCALAR_TYPES: tuple[EnumValue, ...] = tuple(
    EnumValue(f"at::ScalarType::{c}", f"torch.{p}") for c, p in _scalar_type_pairs())
LAYOUTS: tuple[EnumValue, ...] = tuple(EnumValue(f"at::Layout::{c}", f"torch.{p}") for c, p in [
    ("Strided", "strided"), ("Sparse", "sparse_coo"), ("SparseCsr", "sparse_csr"),
    ("Mkldnn", "_mkldnn"), ("SparseCsc", "sparse_csc"), ("SparseBsr", "sparse_bsr"),
    ("SparseBsc", "sparse_bsc"), ("Jagged", "jagged")])
MEMORY_FORMATS: tuple[EnumValue, ...] = tuple(
    EnumValue(f"at::MemoryFormat::{c}", f"torch.{p}") for c, p in [
        ("Contiguous", "contiguous_format"), ("Preserve", "preserve_format"),
        ("ChannelsLast", "channels_last"), ("ChannelsLast3d", "channels_last_3d")])

# Schema base type name -> its table.
BY_TYPE: dict[str, tuple[EnumValue, ...]] = {
    "ScalarType": SCALAR_TYPES, "Layout": LAYOUTS, "MemoryFormat": MEMORY_FORMATS,
}


def by_number(type_name: str, number: int) -> EnumValue | None:
    """The value numbered `number` of enum type `type_name`, or None when there is none."""
    table = BY_TYPE.get(type_name)
    if table is None or not 0 <= number < len(table):
        return None
    return table[number]


# ScalarType names the schema language knows besides torch's canonical dtype names.
_SCALAR_TYPE_ALIASES = {"half": 5, "float": 6, "double": 7, "long": 4, "int": 3, "short": 2,
                        "chalf": 8, "cfloat": 9, "cdouble": 10, "bit": 30}

# Every name a ScalarType default may be written with (torch's schema parser reads each).
SCALAR_TYPE_NAMES: frozenset[str] = frozenset(
    v.python.removeprefix("torch.") for v in SCALAR_TYPES) | frozenset(_SCALAR_TYPE_ALIASES)


def scalar_type_number(name: str) -> int | None:
    """The number of a ScalarType default written by name (`float32`, `long`), or None."""
    if name in _SCALAR_TYPE_ALIASES:
        return _SCALAR_TYPE_ALIASES[name]
    for i, v in enumerate(SCALAR_TYPES):
        if v.python == f"torch.{name}":
            return i
    return None


# torch's other names of dtypes (`torch.long` is `torch.int64`), as op files and Python defaults
# may spell them.
DTYPE_ALIASES = {"half": "float16", "float": "float32", "double": "float64", "short": "int16",
                 "int": "int32", "long": "int64", "cfloat": "complex64", "cdouble": "complex128",
                 "chalf": "complex32"}

# The dtypes of tensors that op files name (samples, autocast, fake rules, formulas): torch's
# ordinary ones, without the quantized, bit and sub-byte types.
TENSOR_DTYPES: tuple[str, ...] = (
    "bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
    "float16", "bfloat16", "float32", "float64", "complex32", "complex64", "complex128",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
)
# Every name op files may give those dtypes -> torch's canonical name (`long` -> `int64`).
DTYPE_NAMES: dict[str, str] = {n: n for n in TENSOR_DTYPES} | {
    a: c for a, c in DTYPE_ALIASES.items() if c in TENSOR_DTYPES}


def names_of(*canonical: str) -> frozenset[str]:
    """Every name of the given dtypes, aliases included (`float32` -> float32, float)."""
    return frozenset(n for n, c in DTYPE_NAMES.items() if c in canonical)


def is_floating(dtype: str) -> bool:
    """A floating or complex dtype, by any of its names (`half`, `float8_e4m3fn`, `cfloat`)."""
    return DTYPE_NAMES.get(dtype, dtype).startswith(("float", "bfloat", "complex"))


# The device type names c10::Device's string constructor knows (parse_type in
# c10/core/Device.cpp), in its order; tests/test_enums.py holds it to the installed torch.
DEVICE_TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve",
                "fpga", "maia", "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia",
                "privateuseone")


def device_string_problem(text: str) -> str | None:
    """Why c10::Device(text) would throw, or None when it reads it. c10 reads a Device default
    when the library's TORCH_LIBRARY block runs (`m.def`), where a throw aborts the process."""
    name, colon, index = text.partition(":")
    if not name or not all(c.isascii() and (c.isalpha() or c == "_") for c in name) or (
            colon and not (index.isascii() and index.isdigit())) or (
            len(index) > 1 and index[0] == "0"):
        return ("a device string is a device type and an optional index, e.g. \"cpu\" or "
                "\"cuda:0\"; torch would refuse this one when the library loads")
    if name not in DEVICE_TYPES:
        return (f"'{name}' is not a device type torch knows (" + ", ".join(DEVICE_TYPES)
                + "); torch would refuse it when the library loads")
    # c10::DeviceIndex is int8_t: c10 casts a wider number (cuda:255 is read as cuda:-1, the
    # current device) or throws past int's range.
    if index and int(index) > 127:
        return (f"device index {index} is beyond c10's 8-bit DeviceIndex (at most 127): torch "
                "would read another device")
    return None
