"""Number and string literals of the op-file languages, decoded without Python's compiler.

Formulas and fake rules are written in Python syntax, and schema defaults are read by c10 at
`m.def`. Handing their literals to `ast.literal_eval`, `int()` or `float()` raw lets user text
raise whatever those raise (leading zeros, a null byte, `\\N{nope}`, 5,000 digits); a literal
c10 cannot read (an integer beyond int64, a float that overflows or underflows) aborts the
process at import. Every literal goes through here instead: either a value, or a `LiteralError`
whose offset and length (relative to the literal's text) locate the problem.
"""

from __future__ import annotations

import re
import sys
import unicodedata

INT64_MIN = -(2 ** 63)
INT64_MAX = 2 ** 63 - 1
# The smallest positive normal double: c10's stod (errno ERANGE) refuses anything smaller but 0.
DOUBLE_MIN_NORMAL = sys.float_info.min


class LiteralError(Exception):
    """A literal that cannot be read; `offset`/`length` are relative to the literal's text."""

    def __init__(self, message: str, offset: int = 0, length: int = 1, hint: str | None = None):
        super().__init__(message)
        self.message, self.offset, self.length, self.hint = message, offset, max(1, length), hint


def int_literal(text: str, what: str = "integer") -> int:
    """Decimal digits -> an int that fits int64. Leading zeros are refused, as Python does."""
    digits = text.lstrip("0")
    if digits and len(digits) != len(text):
        raise LiteralError(f"{what} '{text}' has leading zeros", 0, len(text),
                           f"write {digits} (octal literals are not supported)")
    # Compare lengths before converting: int() refuses more than 4,300 digits with a ValueError.
    if len(digits) > len(str(INT64_MAX)) or int(digits or "0") > INT64_MAX:
        raise LiteralError(f"{what} '{shorten(text)}' is out of range: integers are 64-bit",
                           0, len(text), f"the largest is {INT64_MAX}")
    return int(digits or "0")


def float_literal(text: str, *, underflow: bool = True) -> float:
    """A decimal float literal -> float, refusing overflow to infinity. `underflow=False` also
    refuses a nonzero literal that reads as 0 or a subnormal number (c10's stod does)."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise LiteralError(f"number '{shorten(text)}' is out of range for a double", 0, len(text),
                           "the largest double is about 1.8e308")
    if not underflow and abs(value) < DOUBLE_MIN_NORMAL and _nonzero(text):
        raise LiteralError(f"number '{shorten(text)}' is too small for a double", 0, len(text),
                           f"write 0.0, or a magnitude of at least {DOUBLE_MIN_NORMAL!r}")
    return value


def _nonzero(text: str) -> bool:
    mantissa = re.split(r"[eE]", text, maxsplit=1)[0]
    return any(c in "123456789" for c in mantissa)


def shorten(text: str) -> str:
    """A long literal as messages quote it: its start and its end."""
    return text if len(text) <= 40 else text[:20] + "..." + text[-8:]


# --------------------------------------------------------------------------------------------------
# Strings: Python's quoted literals, minus what cannot mean anything in a generated file

_SIMPLE_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f", "n": "\n",
                   "r": "\r", "t": "\t", "v": "\v"}
_ESCAPE_RE = re.compile(r"\\(N\{[^{}]*\}|N|x[0-9A-Fa-f]{0,2}|u[0-9A-Fa-f]{0,4}|U[0-9A-Fa-f]{0,8}"
                        r"|[0-7]{1,3}|.)", re.S)
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}
_NUL = "a string literal cannot hold NUL (U+0000)"
_NUL_HINT = "generated C++ passes strings as C strings, which end at NUL"
_ESCAPES_HINT = ("escapes: \\\\ \\' \\\" \\a \\b \\f \\n \\r \\t \\v \\ooo \\xhh \\uXXXX "
                 "\\UXXXXXXXX \\N{name}")


def string_literal(text: str) -> str:
    """A quoted literal (`'...'` or `"..."`, as the grammars lex it) -> its value.

    Python's escapes, minus what generated code cannot carry: raw control and other non-printable
    characters (write an escape), NUL (C strings end at it), lone surrogates (no UTF-8 form)."""
    body = text[1:-1]
    out: list[str] = []
    pos = 0
    while pos < len(body):
        ch = body[pos]
        if ch != "\\":
            if ch == "\0":
                raise LiteralError(_NUL, 1 + pos, 1, _NUL_HINT)
            if not ch.isprintable():
                raise LiteralError(f"{_name(ch)} in a string literal", 1 + pos, 1,
                                   f"write it as an escape: {_escape_of(ch)}")
            out.append(ch)
            pos += 1
            continue
        m = _ESCAPE_RE.match(body, pos)
        assert m is not None  # a lone backslash cannot end a lexed string
        out.append(_escape(m.group(1), 1 + pos, m.end() - pos))
        pos = m.end()
    return "".join(out)


def _escape(e: str, offset: int, length: int) -> str:
    def bad(message: str, hint: str | None = _ESCAPES_HINT) -> LiteralError:
        return LiteralError(message, offset, length, hint)

    if e in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[e]
    if e[0] in "01234567":
        if int(e, 8) == 0:
            raise LiteralError(_NUL, offset, length, _NUL_HINT)
        return chr(int(e, 8))
    if e[0] in _HEX_DIGITS:
        if len(e) - 1 != _HEX_DIGITS[e[0]]:
            raise bad(f"truncated escape '\\{e}': \\{e[0]} takes {_HEX_DIGITS[e[0]]} hex digits")
        cp = int(e[1:], 16)
        if cp == 0:
            raise LiteralError(_NUL, offset, length, _NUL_HINT)
        return _code_point(cp, e, bad)
    if e[0] == "N":
        if not e.startswith("N{"):
            raise bad("malformed escape '\\N': write \\N{NAME}, a Unicode character name")
        try:
            value = unicodedata.lookup(e[2:-1])
        except KeyError:
            raise bad(f"unknown Unicode character name '{e[2:-1]}' in '\\{e}'", None) from None
        if "\0" in value:
            raise LiteralError(_NUL, offset, length, _NUL_HINT)
        return value
    raise bad(f"unknown escape sequence '\\{e}'" if e.isprintable()
              else f"unknown escape sequence: '\\' before {_name(e)}")


def _code_point(cp: int, e: str, bad) -> str:
    if cp > sys.maxunicode:
        raise bad(f"escape '\\{e}' is beyond the last Unicode code point (U+10FFFF)", None)
    if 0xD800 <= cp <= 0xDFFF:
        raise bad(f"escape '\\{e}' is a lone surrogate, which has no UTF-8 form",
                  "write a character beyond U+FFFF as \\U0001F600, not as a surrogate pair")
    return chr(cp)


def _name(ch: str) -> str:
    return f"character U+{ord(ch):04X}" + (f" ({unicodedata.name(ch)})"
                                          if unicodedata.name(ch, "") else "")


def _escape_of(ch: str) -> str:
    for k, v in _SIMPLE_ESCAPES.items():
        if v == ch and k not in "\\'\"":
            return "\\" + k
    cp = ord(ch)
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"
