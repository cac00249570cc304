"""Property tests: generated schemas round-trip and agree with torch's parser; mutated schemas
produce only located SchemaSyntaxErrors."""

from __future__ import annotations

import math
import random

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codegen import SchemaSyntaxError, parse_schema
from codegen.model import (
    FRESH,
    Annotation,
    Argument,
    BaseTy,
    BaseType,
    BoolDefault,
    FloatDefault,
    FunctionSchema,
    IntDefault,
    ListDefault,
    ListType,
    NoneDefault,
    OperatorName,
    OptionalType,
    Return,
    StrDefault,
    number_fresh_sets,
)
from codegen.schema_errors import explain

# Words c10's tokenizer reserves (TorchScript keywords) cannot name anything in its schemas.
_RESERVED = {"None", "True", "False", "if", "else", "elif", "for", "while", "in", "not", "and",
             "or", "is", "def", "return", "pass", "break", "continue", "with", "as", "global",
             "assert", "del", "import", "from", "raise", "try", "except", "finally", "lambda",
             "class", "nonlocal", "yield", "inf", "nan"}
IDENT = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda s: s not in _RESERVED)
SCALARS = [BaseTy.int, BaseTy.SymInt, BaseTy.float, BaseTy.bool, BaseTy.str, BaseTy.Scalar,
           BaseTy.ScalarType, BaseTy.Layout, BaseTy.Device, BaseTy.MemoryFormat, BaseTy.Generator]


# A bare `!`: a fresh alias set, numbered per schema by number_fresh_sets.
BANG = Annotation((FRESH,), True)
ANNOTATIONS = st.one_of(st.none(), st.just(BANG), st.builds(
    lambda s, w: Annotation((s,), w), st.sampled_from(["a", "b", "c"]), st.booleans()))


@st.composite
def tensor_types(draw):
    ann = draw(ANNOTATIONS)
    t = BaseType(BaseTy.Tensor, ann)
    shape = draw(st.sampled_from(["plain", "opt", "list", "optlist", "list!"]))
    if shape == "opt":
        return OptionalType(t)
    if shape == "list":
        return ListType(t)
    if shape == "list!":   # the annotation on the list: Tensor[](a!), Tensor[]!, Tensor![]!
        return ListType(t, None, draw(st.sampled_from([BANG, Annotation(("d",), True)])))
    if shape == "optlist":
        return ListType(OptionalType(BaseType(BaseTy.Tensor)))
    return t


@st.composite
def scalar_types_with_default(draw):
    base = draw(st.sampled_from(SCALARS))
    t = BaseType(base)
    default = None
    if base in (BaseTy.int, BaseTy.SymInt) and draw(st.booleans()):
        kind = draw(st.sampled_from(["one", "list", "sized"]))
        if kind == "one":
            default = IntDefault(draw(st.integers(-1000, 1000)))
        else:
            size = draw(st.integers(1, 3)) if kind == "sized" else None
            t = ListType(t, size)
            default = ListDefault(tuple(IntDefault(i) for i in draw(
                st.lists(st.integers(-9, 9), min_size=size or 0, max_size=size or 3))))
    elif base is BaseTy.float and draw(st.booleans()):
        value = draw(st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=False))
        default = FloatDefault(value if math.isfinite(value) else 0.0)
    elif base is BaseTy.bool and draw(st.booleans()):
        default = BoolDefault(draw(st.booleans()))
    elif base is BaseTy.str and draw(st.booleans()):
        default = StrDefault(draw(st.text(
            alphabet=st.characters(codec="ascii", exclude_characters="\x00"), max_size=8)))
    if default is None and draw(st.booleans()):
        # torch reads `!` on any type (`int!? x`, from vLLM); ours keeps it.
        bang = not isinstance(t, ListType) and draw(st.booleans())
        t = OptionalType(BaseType(base, BANG) if bang else t)
        default = draw(st.sampled_from([None, NoneDefault()]))
    return t, default


@st.composite
def schemas(draw):
    names = draw(st.lists(IDENT, min_size=0, max_size=6, unique=True))
    args = []
    kw_from = draw(st.integers(0, len(names)))
    seen_default = False
    for i, n in enumerate(names):
        if draw(st.booleans()):
            t, d = draw(tensor_types()), None
        else:
            t, d = draw(scalar_types_with_default())
        # torch: a positional argument without a default cannot follow one with a default.
        if seen_default and d is None and i < kw_from:
            kw_from = i
        seen_default = seen_default or d is not None
        args.append(Argument(n, t, d, i >= kw_from))
    rets = tuple(Return(draw(st.one_of(st.none(), IDENT)), draw(tensor_types()))
                 for _ in range(draw(st.integers(0, 3))))
    name = OperatorName(draw(st.one_of(st.none(), IDENT)), draw(IDENT),
                        draw(st.one_of(st.just(""), IDENT)))
    return number_fresh_sets(FunctionSchema(name, tuple(args), rets))


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas())
def test_generated_schemas_round_trip_and_agree_with_torch(ir):
    text = str(ir)
    parsed = parse_schema(text)
    assert parsed == ir
    assert str(parsed) == text
    assert torch._C.parse_schema(str(parsed)) == torch._C.parse_schema(text)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(), st.randoms(use_true_random=False))
def test_whitespace_between_tokens_changes_nothing(ir, rnd):
    text = str(ir)
    # Spaces may go around any punctuation; both parsers must read the same schema.
    out = []
    quoted = escaped = False
    for ch in text:
        if quoted:
            quoted = escaped or ch != '"'
            escaped = not escaped and ch == "\\"
            out.append(ch)
        elif ch == '"':
            quoted = True
            out.append(ch)
        elif ch in "(),=[]?*!" and rnd.random() < 0.5:
            out.append(f"{' ' * rnd.randint(0, 2)}{ch}{' ' * rnd.randint(0, 2)}")
        elif ch == " " and out and out[-1][-1:] in ("?", "]", ")", "!") and rnd.random() < 0.5:
            pass  # `Tensor?x`, `int[2]y`, `Tensor!out`: no space is needed after a suffix
        else:
            out.append(ch)
    spaced = "".join(out)
    spaced = spaced.replace("- >", "->").replace("-  >", "->")
    assert parse_schema(spaced) == ir
    assert torch._C.parse_schema(spaced) == torch._C.parse_schema(text)


_CORPUS: list[str] = []


def _corpus() -> list[str]:
    """native_functions.yaml and the custom-op corpus (bare `!`, odd spacing, hex defaults)."""
    if not _CORPUS:
        from tests.test_corpus import corpus
        from tests.test_roundtrip import native_schemas

        _CORPUS.extend(native_schemas() + [row[0] for row in corpus()])
    return _CORPUS


def _mutate(text: str, rnd: random.Random) -> str:
    chars = list(text)
    for _ in range(rnd.randint(1, 3)):
        op = rnd.choice(["del", "ins", "sub", "dup"])
        i = rnd.randrange(len(chars) + 1)
        junk = rnd.choice(list("()[],=?!*|-> .'\"\\x0aZ_:@\t\n\u00e9\u4e2d"))
        if op == "del" and i < len(chars):
            del chars[i]
        elif op == "ins":
            chars.insert(i, junk)
        elif op == "sub" and i < len(chars):
            chars[i] = junk
        elif op == "dup" and i < len(chars):
            chars.insert(i, chars[i])
    return "".join(chars)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_mutated_schemas_give_only_located_errors(rnd):
    corpus = _corpus()
    text = _mutate(rnd.choice(corpus), rnd)
    try:
        parse_schema(text)
    except SchemaSyntaxError as e:
        assert 0 <= e.offset <= len(text)
        assert e.length >= 1
        assert e.message and "\n" not in e.message
    _readers_agree(text)


def _readers_agree(text: str) -> None:
    """The error explainer (codegen.schema_errors) finds an error exactly where the grammar does,
    so the message never falls back to Lark's position, nor blames a token of a valid schema."""
    from lark.exceptions import UnexpectedInput

    from codegen.parse import _parser

    try:
        _parser().parse(text)
    except UnexpectedInput:
        assert explain(text) is not None, text
        return
    except SchemaSyntaxError:
        return  # refused after the syntax was read (a number out of range, ...)
    assert explain(text) is None, (text, explain(text))


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=60))
def test_arbitrary_text_gives_only_located_errors(text):
    try:
        parse_schema(text)
    except SchemaSyntaxError as e:
        assert 0 <= e.offset <= len(text)
    _readers_agree(text)
