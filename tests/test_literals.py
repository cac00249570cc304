"""Literal decoding shared by the schema, formula and fake-rule languages (codegen/literals.py):
Python's meaning for every literal it accepts, a located LiteralError for every other."""

from __future__ import annotations

import ast
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codegen.literals import (
    DOUBLE_MIN_NORMAL,
    INT64_MAX,
    LiteralError,
    float_literal,
    int_literal,
    string_literal,
)

# What a file can carry: printable text without NUL or lone surrogates.
CARRIED = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Cn", "Co", "Zl", "Zp")))


@given(CARRIED)
def test_repr_of_any_string_reads_back(value):
    assert string_literal(repr(value)) == value


@given(st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=20),
       st.sampled_from(["'", '"']))
def test_escaped_strings_mean_what_python_means(value, quote):
    escaped = value.encode("unicode_escape").decode("ascii").replace(quote, "\\" + quote)
    text = quote + escaped + quote
    assert string_literal(text) == ast.literal_eval(text) == value


@pytest.mark.parametrize("text,value", [
    (r"'\N{BULLET}'", "\u2022"), (r"'\x41\101\u00e9\U0001F600'", "AA\u00e9\U0001F600"),
    (r"'\777'", "\u01ff"), (r"'\a\b\f\n\r\t\v\\\'\"'", "\a\b\f\n\r\t\v\\'\""), ('""', ""),
])
def test_escapes(text, value):
    assert string_literal(text) == value


@pytest.mark.parametrize("text,message,offset,length", [
    (r"'\N{nope}'", "unknown Unicode character name 'nope' in '\\N{nope}'", 1, 8),
    (r"'\N{NULL}'", "a string literal cannot hold NUL (U+0000)", 1, 8),
    (r"'ab\N'", "malformed escape '\\N': write \\N{NAME}, a Unicode character name", 3, 2),
    (r"'\x4'", "truncated escape '\\x4': \\x takes 2 hex digits", 1, 3),
    (r"'\u12'", "truncated escape '\\u12': \\u takes 4 hex digits", 1, 4),
    (r"'\ud800'", "escape '\\ud800' is a lone surrogate, which has no UTF-8 form", 1, 6),
    (r"'\U00110000'", "escape '\\U00110000' is beyond the last Unicode code point (U+10FFFF)", 1,
     10),
    (r"'a\0b'", "a string literal cannot hold NUL (U+0000)", 2, 2),
    (r"'\x00'", "a string literal cannot hold NUL (U+0000)", 1, 4),
    ("'a\0b'", "a string literal cannot hold NUL (U+0000)", 2, 1),
    ("'a\rb'", "character U+000D in a string literal", 2, 1),
    ("'\u2028'", "character U+2028 (LINE SEPARATOR) in a string literal", 1, 1),
    ("'\ud800'", "character U+D800 in a string literal", 1, 1),
    (r"'\q'", "unknown escape sequence '\\q'", 1, 2),
])
def test_refused_strings_are_located(text, message, offset, length):
    with pytest.raises(LiteralError) as e:
        string_literal(text)
    assert (e.value.message, e.value.offset, e.value.length) == (message, offset, length)


def test_refused_control_characters_suggest_their_escape():
    with pytest.raises(LiteralError) as e:
        string_literal("'\t'")
    assert e.value.hint == "write it as an escape: \\t"


def test_integers_fit_int64():
    assert int_literal(str(INT64_MAX)) == INT64_MAX
    assert int_literal("0") == 0 and int_literal("000") == 0
    for text in (str(INT64_MAX + 1), "9" * 5000):
        with pytest.raises(LiteralError, match="out of range") as e:
            int_literal(text)
        assert (e.value.offset, e.value.length) == (0, len(text))
    with pytest.raises(LiteralError, match="leading zeros"):
        int_literal("0777")


def test_floats_overflow_and_optionally_underflow():
    assert float_literal("1e308") == 1e308
    assert float_literal("1e-400") == 0.0      # Python's reading, where nothing reads it again
    assert float_literal("0e-400", underflow=False) == 0.0
    assert float_literal(repr(DOUBLE_MIN_NORMAL), underflow=False) == sys.float_info.min
    for text in ("1e999", "9" * 400 + ".0"):
        with pytest.raises(LiteralError, match="out of range for a double"):
            float_literal(text)
    for text in ("1e-400", "5e-324", "-2.225073858507201e-308"):
        with pytest.raises(LiteralError, match="too small for a double"):
            float_literal(text, underflow=False)
