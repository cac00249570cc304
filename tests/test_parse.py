"""Unit tests of the schema parser: the IR it builds, positions, and every syntax error's message.

Syntax error messages are pinned in tests/parse_errors.expected; refresh with
`EXPECTTEST_ACCEPT=1 pytest tests/test_parse.py` (or `make golden`) after an intended change.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen import SchemaSyntaxError, parse_schema
from codegen.model import (
    Annotation,
    BaseTy,
    BaseType,
    BoolDefault,
    ClassType,
    ComplexDefault,
    EnumDefault,
    FloatDefault,
    Generic,
    GenericType,
    IntDefault,
    ListDefault,
    ListType,
    NoneDefault,
    OptionalType,
    StrDefault,
    TupleType,
    TypeVar,
    strip_optional,
)
from tests import expect

T = BaseType(BaseTy.Tensor)


def test_operator_name_parts():
    s = parse_schema("myns::fused_add_.out(Tensor(a!) self) -> Tensor(a!)")
    assert (s.name.namespace, s.name.name, s.name.overload) == ("myns", "fused_add_", "out")
    assert s.name.inplace and s.name.base == "fused_add"
    assert str(s.name) == "myns::fused_add_.out"
    bare = parse_schema("f() -> ()")
    assert bare.name.namespace is None and bare.name.overload == ""
    assert bare.returns == () and bare.arguments == ()


def test_whitespace_is_free():
    a = parse_schema("ns :: f . ov ( Tensor ( a ! ) ? x = None ,int y=  -  1 , * , float z = 1e-5 ) -> ( Tensor a , int )")
    b = parse_schema("ns::f.ov(Tensor(a!)? x=None, int y=-1, *, float z=1e-05) -> (Tensor a, int)")
    assert a == b
    assert str(a) == "ns::f.ov(Tensor(a!)? x=None, int y=-1, *, float z=1e-05) -> (Tensor a, int)"


def test_types_compose():
    s = parse_schema("f(int[1]? a, Tensor?[] b, SymInt[]? c, Tensor(a!)[] d, Tensor[](b) e) -> ()")
    a, b, c, d, e = (x.type for x in s.arguments)
    assert a == OptionalType(ListType(BaseType(BaseTy.int), 1))
    assert b == ListType(OptionalType(T))
    assert c == OptionalType(ListType(BaseType(BaseTy.SymInt)))
    assert d == ListType(BaseType(BaseTy.Tensor, Annotation(("a",), True)))
    assert e == ListType(T, None, Annotation(("b",)))
    assert s.arguments[3].is_write and not s.arguments[4].is_write


def test_every_base_type_parses():
    names = ["Tensor", "int", "SymInt", "SymBool", "float", "bool", "str", "Scalar", "ScalarType",
             "Layout", "Device", "DeviceIndex", "MemoryFormat", "QScheme", "Generator", "Storage",
             "Stream", "Dimname", "GraphModule", "Any", "number", "complex"]
    text = "f(" + ", ".join(f"{n} a{i}" for i, n in enumerate(names)) + ") -> ()"
    s = parse_schema(text)
    assert [str(a.type) for a in s.arguments] == names
    assert all(isinstance(a.type, BaseType) for a in s.arguments)


def test_torchscript_forms():
    s = parse_schema("f(Dict(str, Tensor) d, (int, int) p, Future(t) fu, t x, "
                     "__torch__.torch.classes.ns.Cls c) -> t[]")
    d, p, fu, x, c = (a.type for a in s.arguments)
    assert d == GenericType(Generic.Dict, (BaseType(BaseTy.str), T))
    assert p == TupleType((BaseType(BaseTy.int), BaseType(BaseTy.int)))
    assert fu == GenericType(Generic.Future, (TypeVar("t"),))
    assert x == TypeVar("t")
    assert c == ClassType("__torch__.torch.classes.ns.Cls")
    assert s.returns[0].type == ListType(TypeVar("t"))


def test_alias_annotations():
    s = parse_schema("f(Tensor(a) x, Tensor(a!) y, Tensor(a -> *) z, Tensor(a|b) w, "
                     "Tensor(a|b! -> b|c) v) -> Tensor(a)")
    anns = [a.annotation for a in s.arguments]
    assert anns == [Annotation(("a",)), Annotation(("a",), True), Annotation(("a",), False, ("*",)),
                    Annotation(("a", "b")), Annotation(("a", "b"), True, ("b", "c"))]
    assert str(s.arguments[4].type) == "Tensor(a|b! -> b|c)"


def test_bare_bang_is_a_fresh_alias_set():
    """`Tensor!` writes a set of its own (c10: `$0`, `$1`, ... in order, elements first); the
    canonical text keeps the `!`, and torch reads it back with the same sets."""
    import torch

    text = "f(Tensor! a, Tensor(a!) b, Tensor!? c, Tensor![]! d, int!? n) -> (Tensor!, Tensor(a!))"
    s = parse_schema(text)
    # The IR keeps `int!?`'s annotation on the type; an argument that is not a Tensor has none
    # (nothing to alias or write: the generators treat it as plain).
    anns = [x.annotation or strip_optional(x.type).alias for x in s.arguments + s.returns]
    assert s.arguments[4].annotation is None
    assert [a.alias_set for a in anns] == [("$0",), ("a",), ("$1",), ("$3",), ("$4",), ("$5",),
                                           ("a",)]
    assert s.arguments[3].type == ListType(BaseType(BaseTy.Tensor, Annotation(("$2",), True)),
                                           None, Annotation(("$3",), True))
    assert all(a.is_write for a in anns)
    assert [a.is_fresh for a in anns] == [True, False, True, True, True, True, False]
    assert s.arguments[0].annotation != s.arguments[2].type.elem.alias   # two sets, not one
    assert str(s) == text
    assert parse_schema(str(s)) == s
    assert str(torch._C.parse_schema(str(s))) == str(torch._C.parse_schema(text))


@pytest.mark.parametrize("text,canonical", [
    ("f(Tensor(a)x, Tensor?amax=None, int[2]k=[1, 1]) -> ()",
     "f(Tensor(a) x, Tensor? amax=None, int[2] k=[1, 1]) -> ()"),
    ("f(Tensor !x, Tensor [] idx, Tensor []y) -> Tensor!out",
     "f(Tensor! x, Tensor[] idx, Tensor[] y) -> Tensor! out"),
    ("f(Tensor x) -> (Tensor?a, Tensor(b)b)", "f(Tensor x) -> (Tensor? a, Tensor(b) b)"),
    # c10 reads a dotted lower-case name as a type variable, and None as NoneType.
    ("f(torch.distributed.Mesh m, None n) -> None",
     "f(torch.distributed.Mesh m, NoneType n) -> NoneType"),
])
def test_spellings_torch_tolerates(text, canonical):
    import torch

    s = parse_schema(text)
    assert str(s) == canonical
    assert str(torch._C.parse_schema(canonical)) == str(torch._C.parse_schema(text))


def test_defaults_of_every_form():
    s = parse_schema(
        "f(Tensor? a=None, bool b=True, bool c=False, int d=-3, float e=1e-5, float f=-.5, "
        "str g='q\\'s', str h=\"t\\n\", int[] i=[1, -2], SymInt[2] j=1, "
        "MemoryFormat k=contiguous_format, int l=Mean, ScalarType m=long, complex n=2j, "
        "float[] o=[0.5, 1.0]) -> ()")
    got = [a.default for a in s.arguments]
    assert got == [NoneDefault(), BoolDefault(True), BoolDefault(False), IntDefault(-3),
                   FloatDefault(1e-5), FloatDefault(-0.5), StrDefault("q's"), StrDefault("t\n"),
                   ListDefault((IntDefault(1), IntDefault(-2))), IntDefault(1),
                   EnumDefault("contiguous_format"), EnumDefault("Mean"), EnumDefault("long"),
                   ComplexDefault(2.0), ListDefault((FloatDefault(0.5), FloatDefault(1.0)))]
    assert str(s.arguments[6].default) == '"q\'s"'


def test_kwarg_only_and_varargs():
    s = parse_schema("f(Tensor a, *, Tensor b, Tensor(a!) out) -> Tensor(a!)")
    assert [a.kwarg_only for a in s.arguments] == [False, True, True]
    assert s.is_out_fn
    v = parse_schema("f(Tensor a, ...) -> (Tensor, ...)")
    assert v.is_vararg and v.is_varret and len(v.returns) == 1


def test_returns():
    assert str(parse_schema("f() -> (Tensor)")) == "f() -> Tensor"
    s = parse_schema("f() -> (Tensor values, Tensor indices)")
    assert [r.name for r in s.returns] == ["values", "indices"]
    one_tuple = parse_schema("f() -> ((int, int))")
    assert len(one_tuple.returns) == 1 and isinstance(one_tuple.returns[0].type, TupleType)
    assert str(one_tuple) == "f() -> ((int, int))"


def test_spans_point_at_source():
    text = "ns::op(Tensor  self, *, int[2] k=[1, 2], Dict(str, t) d) -> (Tensor out, int)"
    s = parse_schema(text)
    spans = [(text[a.span.start:a.span.end], text[a.type_span.start:a.type_span.end],
              text[a.name_span.start:a.name_span.end],
              text[a.default_span.start:a.default_span.end] if a.default_span else None)
             for a in s.arguments]
    assert spans == [("Tensor  self", "Tensor", "self", None),
                     ("int[2] k=[1, 2]", "int[2]", "k", "[1, 2]"),
                     ("Dict(str, t) d", "Dict(str, t)", "d", None)]
    assert [text[r.span.start:r.span.end] for r in s.returns] == ["Tensor out", "int"]
    assert text[s.name.span.start:s.name.span.end] == "ns::op"
    for t in ("f() -> ()", "f() -> (Tensor a, int)", "f() -> ...", "f() -> Dict(str, t) x"):
        whole = parse_schema(t + "  ").span
        assert (whole.start, whole.end) == (0, len(t))


def test_equality_ignores_positions():
    assert parse_schema("f(Tensor x) -> Tensor") == parse_schema("  f( Tensor   x )->Tensor")
    assert hash(parse_schema("f(int x=1) -> ()")) == hash(parse_schema("f(int x = 1)->()"))


# --------------------------------------------------------------------------------------------------
# Syntax errors, pinned

ERROR_CASES = [
    "",
    "(Tensor x) -> Tensor",
    "foo bar(Tensor x) -> Tensor",
    "f(Tensor) -> Tensor",
    "f(Tensor x, Tensor) -> Tensor",
    "f(Tensor x)",
    "f(Tensor x) Tensor",
    "f(Tensor x,) -> ()",
    "f(int x int y) -> ()",
    "f(Tensor x=) -> ()",
    "f(float x=-inf) -> ()",
    "f(int x, int y",
    "f(int x) ->",
    "f(int x) -> Tensor Tensor Tensor",
    "f(int x) -> (Tensor a Tensor b)",
    "f(int x) -> (Tensor a,)",
    "f(int x) -> (Tensor a, Tensor b",
    "f(Tensor?(a) x) -> ()",
    "f(Tensor(a!|b) x) -> ()",
    "f(Tensor(a)(b) x) -> ()",
    "f(Tensor x, ..., int y) -> ()",
    "f(*, *, int x) -> ()",
    "f(Tensor x) -> (Tensor, ..., Tensor)",
    "f(Dict(int) x) -> ()",
    "f(Future(int, int) x) -> ()",
    "f(Foo.bar x) -> ()",
    'f(str s="\\x41") -> ()',
    "f(float x=1e400) -> ()",
    "f(int x) -> () junk",
    # Numbers c10 reads with stoll/stod, which throw (inside m.def: the process aborts).
    "f(int x=9223372036854775808) -> ()",
    "f(int[] x=[0, -9223372036854775809]) -> ()",
    "f(float x=1e-400) -> ()",
    "f(float x=-2.225073858507201e-308) -> ()",
    "f(Scalar x=1e-400j) -> ()",
    "f(int[99999999999999999999] x) -> ()",
    # What broke, and the construct it broke (the caret is on the token that broke the parse).
    "f(Tensor& x) -> ()",
    "f(Tensor* x) -> ()",
    "f(const at::Tensor& x) -> Tensor",
    "f(std::string s, std::vector<int64_t> v) -> ()",
    "f(Optional[Tensor] x) -> ()",
    "f(Tensor x, List[int] dims) -> ()",
    "f(Tensor x) -> Tuple[Tensor, Tensor]",
    "f(Dict[str, Tensor] d) -> ()",
    "f(x: Tensor) -> Tensor",
    "f(x, y) -> ()",
    "f(Tensor x) : Tensor",
    "f(Tensor x) - > Tensor",
    "f(Tensor x -> Tensor",
    "f(Tensor x) -> Tensor y=None",
    "f(Tensor x) -> (Tensor y, Tensor z=None)",
    "f(Tensor x) -> Tensor&",
    "f(Tensor x) -> (Tensor,, Tensor)",
    "f(Tensor x) -> (Tensor a) (Tensor b)",
    "f(Tensor x,, Tensor y) -> ()",
    "ns::(Tensor x) -> ()",
    "ns::f.(Tensor x) -> ()",
    "f(Tensor() x) -> ()",
    "f(Tensor(a -> ) x) -> ()",
    "f(int[a] x) -> ()",
    "f(Tensor x, int y=1_000) -> ()",
    "f(Tensor x, ScalarType? dtype=torch.float16) -> Tensor",  # Python's spelling of a dtype
    "f(Tensor x, int[] y=[1, [2]]) -> ()",
    'f(Tensor x, str s="abc) -> ()',
    "f(Tensor!! x) -> ()",
    "f(Tensor?! x) -> ()",
    "f((int, int)! x) -> ()",
    "f(Future(Tensor)(a) x) -> ()",
    "f(int m=0x) -> ()",
    # Hexadecimal defaults: c10 reads them as 0 (or as a float), so they are refused; see below.
    "f(Tensor a, int info_B_mask=0x2FFFFFF) -> Tensor",
    "f(Tensor a, float m=0x2F) -> Tensor",
    "f(Tensor a, int m=0xe1) -> Tensor",
    # Stricter than c10, below.
    "f(float x=99999999999999999999999) -> ()",
    'f(str x="a\\000b") -> ()',
    "f(Tensor" + "[]" * 17 + " x) -> ()",
]

# Where our parser is deliberately stricter than c10's.
STRICTER_THAN_TORCH = {
    "foo bar(Tensor x) -> Tensor",  # c10 reads the name as 'foo' and ignores 'bar'
    "f(Tensor(a)(b) x) -> ()",      # c10 silently keeps one of the two annotations
    "f(*, *, int x) -> ()",         # c10 accepts a repeated '*'
    # c10 reads an integer as a double for float; ours are all 64-bit integers (write 1e+23).
    "f(float x=99999999999999999999999) -> ()",
    'f(str x="a\\000b") -> ()',       # generated C++ takes strings as C strings, ending at NUL
    "f(Tensor" + "[]" * 17 + " x) -> ()",  # every pass after parsing recurses over types
    # c10 reads a hexadecimal integer default as 0 (`int m=0x2F` is m=0), and as a double when its
    # digits hold an 'e' (0xe1 is 225.0): refused, the message saying so (FBGEMM's info_B_mask).
    # For a float c10 gets the value, but the same text means 0 in an int: refused as well.
    "f(Tensor a, int info_B_mask=0x2FFFFFF) -> Tensor",
    "f(Tensor a, float m=0x2F) -> Tensor",
    "f(Tensor a, int m=0xe1) -> Tensor",
}

EXPECTED = Path(__file__).with_name("parse_errors.expected")


def _render(text: str) -> str:
    try:
        parse_schema(text)
    except SchemaSyntaxError as e:
        assert 0 <= e.offset <= len(text), (text, e.offset)
        out = [f"schema: {text}", f"        {' ' * e.offset}{'^' * e.length}", f"error: {e.message}"]
        if e.hint:
            out.append(f"hint: {e.hint}")
        return "\n".join(out)
    raise AssertionError(f"accepted: {text!r}")


def test_syntax_errors_are_pinned():
    rendered = "\n\n".join(_render(t) for t in ERROR_CASES) + "\n"
    expect.check_file(EXPECTED, rendered)


@pytest.mark.parametrize("text", ERROR_CASES)
def test_torch_rejects_what_we_reject(text):
    import torch

    if text in STRICTER_THAN_TORCH:
        pytest.skip("torch accepts this; we refuse it on purpose")
    with pytest.raises((RuntimeError, IndexError)):  # c10 reports a bad float as IndexError
        torch._C.parse_schema(text)


def test_numbers_at_the_limits_are_read_by_torch_too():
    """What we accept at the edges of int64 and double, c10 reads back from our canonical text."""
    import torch

    for text in ["f(int x=9223372036854775807, int y=-9223372036854775808) -> ()",
                 "f(int[] x=[0, 00000000000000000000000001]) -> ()",
                 "f(float x=2.2250738585072014e-308, float y=-1.7976931348623157e308) -> ()",
                 "f(float x=0e-400, Scalar y=0.0e-999j) -> ()",
                 "f(Tensor" + "[]" * 15 + " x) -> ()"]:
        schema = parse_schema(text)
        assert str(torch._C.parse_schema(str(schema))) == str(torch._C.parse_schema(text))


@pytest.mark.parametrize("text,message,offset", [
    ('f(str x="a\0b") -> ()', "a string default cannot hold NUL (U+0000)", 10),
    ("f(int x=" + "9" * 5000 + ") -> ()", "integer '99999999999999999999...99999999' is out of "
     "range: schema integers are 64-bit", 8),
])
def test_what_generated_code_cannot_carry_is_refused(text, message, offset):
    """A raw NUL and huge numbers (no pinned rendering: they do not print)."""
    with pytest.raises(SchemaSyntaxError) as e:
        parse_schema(text)
    assert (e.value.message, e.value.offset) == (message, offset)


# Raw characters torch reads in a string default (tab, CR, VT, DEL, C1 controls, NEL, the line and
# paragraph separators, format characters), and octal escapes that spell UTF-8 bytes.
RAW_STRING_DEFAULTS = ["a\tb", "a\rb", "\x0b\x0c\x1b\x7f", "a\x85b", "a\u2028b\u2029c",
                       "\u202e\ufeff\u200b", "caf\u00e9 \U0001f600", "x\x9fy"]


@pytest.mark.parametrize("value", RAW_STRING_DEFAULTS)
def test_raw_characters_torch_reads_in_string_defaults_are_accepted(value):
    """The value is torch's reading of the same text, and torch reads the canonical text (one
    printable line) back to it."""
    import torch

    text = f'ns::f(Tensor x, str s="{value}") -> Tensor'
    schema = parse_schema(text)
    (canonical,) = str(schema).splitlines()
    assert canonical.isprintable()
    assert schema.arguments[1].default.value == value
    assert torch._C.parse_schema(text).arguments[1].default_value == value
    assert torch._C.parse_schema(canonical).arguments[1].default_value == value


@pytest.mark.parametrize("text,value", [
    (r'"\303\251"', "\u00e9"),                 # octal escapes are bytes of the UTF-8 form
    (r'"\342\200\250"', "\u2028"),
    (r'"a\011\tb"', "a\t\tb"),
    (r'"\177"', "\x7f"),
])
def test_octal_escapes_are_utf8_bytes_as_c10_reads_them(text, value):
    import torch

    schema = parse_schema(f"ns::f(str s={text}) -> ()")
    assert schema.arguments[0].default.value == value
    assert torch._C.parse_schema(f"ns::f(str s={text}) -> ()").arguments[0].default_value == value
    assert torch._C.parse_schema(str(schema)).arguments[0].default_value == value
