"""Explain why a schema does not parse: the construct that broke, the token that broke it, a hint.

The fast parser (`codegen.parse`, Lark LALR over big tokens: Note [Big tokens]) knows only that a
big token did not match, which is not where the user went wrong: in `f(Tensor& x)` the whole
argument fails to lex. So when it fails, this module reads the schema again, one small token at a
time, with a recursive-descent reader of the same language that tracks the construct it is in
(operator name, argument, type, alias annotation, default value, return, ...). It stops at the
first token that cannot continue the construct and says what was expected there; common mistakes
(C++ or Python type spellings, `Tensor&`, a trailing comma, a missing `->`, a default on a
return) get a hint.

It runs only on the error path, so it is written for clarity, not speed. It checks syntax only:
what the parser refuses later (unknown escapes, numbers out of range, annotations on `T?`, ...)
is reported by `codegen.parse` itself. tests/test_parse.py checks that it accepts every schema of
the corpora, so that it never reports an error before the real one.
"""

from __future__ import annotations

import re
from typing import NamedTuple, NoReturn

from codegen.model import BASE_TYPES, Generic

# --------------------------------------------------------------------------------------------------
# Foreign type spellings: what a C++ or Python author writes, and the schema type they mean


_CPP_INTS = {"int64_t", "int32_t", "int16_t", "int8_t", "uint64_t", "uint32_t", "uint16_t",
             "uint8_t", "long", "size_t", "ssize_t", "short", "unsigned", "c10::SymInt"}
_FOREIGN = {
    **{n: "int" for n in _CPP_INTS},
    "double": "float",
    "string": "str", "std::string": "str", "c10::string_view": "str", "std::string_view": "str",
    "string_view": "str",
    "at::Tensor": "Tensor", "torch::Tensor": "Tensor", "torch.Tensor": "Tensor",
    "at::Scalar": "Scalar", "c10::Scalar": "Scalar",
    "at::ScalarType": "ScalarType", "c10::ScalarType": "ScalarType", "torch.dtype": "ScalarType",
    "dtype": "ScalarType",
    "at::Device": "Device", "c10::Device": "Device", "torch.device": "Device",
    "at::Layout": "Layout", "torch.layout": "Layout",
    "at::MemoryFormat": "MemoryFormat", "torch.memory_format": "MemoryFormat",
    "at::Generator": "Generator", "torch.Generator": "Generator",
    "at::IntArrayRef": "int[]", "c10::IntArrayRef": "int[]", "at::TensorList": "Tensor[]",
    "torch.SymInt": "SymInt", "torch.types.Number": "Scalar",
}
# Template and subscript forms: Outer<T> / Outer[T] -> the schema spelling around T.
_WRAPPERS = {
    "std::optional": "{}?", "c10::optional": "{}?", "Optional": "{}?", "typing.Optional": "{}?",
    "std::vector": "{}[]", "c10::ArrayRef": "{}[]", "at::ArrayRef": "{}[]", "c10::List": "{}[]",
    "List": "{}[]", "list": "{}[]", "Sequence": "{}[]", "typing.List": "{}[]",
    "Tuple": "({})", "tuple": "({})", "std::tuple": "({})",
    "Dict": "Dict({})", "dict": "Dict({})", "std::map": "Dict({})", "c10::Dict": "Dict({})",
}


def schema_spelling(name: str, inner: list[str] | None = None) -> str | None:
    """The schema type a foreign spelling means (`int64_t` -> `int`, `Optional` [Tensor] ->
    `Tensor?`), or None when there is none to suggest."""
    if inner is not None:
        form = _WRAPPERS.get(name)
        if form is None:
            return None
        parts = [schema_spelling(x) or x for x in inner]
        return form.format(", ".join(parts))
    if name in BASE_TYPES:
        return name
    return _FOREIGN.get(name)


def foreign_type_hint(name: str) -> str | None:
    """A hint for a type name that is C++ or Python rather than the schema language."""
    spelled = _FOREIGN.get(name)
    if spelled is None:
        return None
    lang = "Python" if "." in name else "C++"
    return f"'{name}' is {lang}; the schema type is {spelled}"


# --------------------------------------------------------------------------------------------------
# Tokens


class Tok(NamedTuple):
    kind: str       # "ident", "number", "string", "end", or the punctuation itself
    text: str
    pos: int


_TOKEN_RE = re.compile(r"""
    (?P<ident>[A-Za-z_]\w*)
  | (?P<number>0[xX][\w.]*|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?j?[\w.]*)
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<punct>::|->|\.\.\.|\S)
""", re.X)


def tokenize(text: str) -> list[Tok]:
    toks = []
    pos = 0
    n = len(text)
    while True:
        while pos < n and text[pos].isspace():
            pos += 1
        if pos >= n:
            toks.append(Tok("end", "", n))
            return toks
        m = _TOKEN_RE.match(text, pos)
        assert m is not None  # \S matches any character left
        kind = m.lastgroup
        word = m.group(0)
        if kind == "punct":
            if word in "\"'":
                raise _Error("unterminated string", pos, 1,
                             "a string default ends with the quote it starts with, on one line")
            kind = word
        toks.append(Tok(kind, word, pos))  # type: ignore[arg-type]
        pos = m.end()


# --------------------------------------------------------------------------------------------------
# The reader


class _Error(Exception):
    def __init__(self, message: str, offset: int, length: int = 1, hint: str | None = None):
        super().__init__(message)
        self.message, self.offset, self.length, self.hint = message, offset, length, hint


_GENERICS = {g.value for g in Generic}
_WORD_RE = re.compile(r"\w+")
_NUMBER_OK = re.compile(r"0[xX][0-9a-fA-F]*(\.[0-9a-fA-F]*)?([pP][-+]?\d*)?j?\Z"
                        r"|(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?j?\Z")
_DEFAULTS_HINT = ("defaults are None, True, False, numbers, quoted strings, [lists] or names "
                  "such as contiguous_format")
_ANNOTATION_HINT = "alias annotations read (a), (a!), (a -> *), (a|b) or a bare !"
_SCHEMA_HINT = "a schema reads 'ns::name.overload(Tensor self) -> Tensor'"
_NO_RETURNS_HINT = "write '-> ()' for an op that returns nothing"


def _found(t: Tok) -> str:
    return "the end of the schema" if t.kind == "end" else f"'{t.text}'"


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = tokenize(text)
        self.i = 0

    # -- helpers -----------------------------------------------------------------------------------

    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def take(self) -> Tok:
        t = self.tok
        self.i = min(self.i + 1, len(self.toks) - 1)
        return t

    def at(self, kind: str) -> bool:
        return self.tok.kind == kind

    def fail(self, message: str, hint: str | None = None, tok: Tok | None = None,
             end: int | None = None) -> NoReturn:
        t = tok or self.tok
        length = (end - t.pos) if end is not None else max(1, len(t.text))
        raise _Error(message, t.pos, length, hint)

    def expected(self, what: str, hint: str | None = None) -> NoReturn:
        t = self.tok
        if t.kind == "end":
            self.fail(f"unexpected end of schema; expected {what}", hint)
        self.fail(f"expected {what}, found {_found(t)}", hint)

    # -- schema ------------------------------------------------------------------------------------

    def schema(self) -> None:
        if self.at("end"):
            self.fail("empty schema", "a schema reads 'ns::name(Tensor self) -> Tensor'")
        self.operator_name()
        self.arguments()
        if not self.at("->"):
            hint = _NO_RETURNS_HINT
            if self.at(":"):
                hint = "the returns follow '->', not ':'"
            elif self.at("-") and self.peek().kind == ">":
                hint = "write '->' without a space inside"
            self.fail("expected '->' and the return types after the argument list", hint)
        self.take()
        listed = self.at("(")
        self.returns()
        if not self.at("end"):
            t = self.tok
            if t.kind == "=":
                self.fail("a return has no default value", "defaults belong to arguments")
            after: str | None = None
            if t.kind in ("ident", "(", ",") and not listed:
                after = "several returns are written as a list: (Tensor a, Tensor b)"
            elif t.kind == "(":
                after = "write every return in one list: (Tensor a, Tensor b)"
            self.fail(f"unexpected {_found(t)} after the return types", after)

    def operator_name(self) -> None:
        if not self.at("ident"):
            self.expected("an operator name", _SCHEMA_HINT)
        self.take()
        if self.at("::"):
            self.take()
            if not self.at("ident"):
                self.expected("the operator name after the namespace's '::'", _SCHEMA_HINT)
            self.take()
        if self.at("."):
            self.take()
            # An overload name is any run of word characters (`.out`, `.2`, `.Scalar_mode`).
            m = _WORD_RE.match(self.text, self.tok.pos)
            if m is None:
                self.expected("an overload name after '.'", _SCHEMA_HINT)
            while self.tok.pos < m.end() and self.tok.pos + len(self.tok.text) <= m.end():
                self.take()
        if not self.at("("):
            if self.at("ident"):
                self.fail("expected '(' after the operator name", _SCHEMA_HINT,
                          end=self.tok.pos + 1)
            if self.at("::") or self.at("."):
                self.fail(f"unexpected {_found(self.tok)} in the operator name",
                          "an operator name reads ns::name.overload")
            self.expected("'(' and the argument list after the operator name", _SCHEMA_HINT)

    # -- arguments ---------------------------------------------------------------------------------

    def arguments(self) -> None:
        self.take()  # (
        if self.at(")"):
            self.take()
            return
        while True:
            name = self.argument()
            t = self.tok
            if t.kind == ",":
                self.take()
                if self.at(")"):
                    self.fail("expected an argument after ','", "remove the trailing ','")
                continue
            if t.kind == ")":
                self.take()
                return
            where = "after '*'" if name == "" else "after '...'" if name is None else \
                f"after argument '{name}'"
            hint = None
            if t.kind == "ident":
                hint = "separate arguments with ','"
            elif t.kind == "->":
                hint = "close the argument list with ')' before '->'"
            elif t.kind == "=":
                hint = "write the default right after the name: int x=1"
            if t.kind == "end":
                self.fail("unexpected end of schema; expected ')' to close the argument list")
            self.fail(f"expected ',' or ')' {where}, found {_found(t)}", hint)

    def argument(self) -> str | None:
        """One parameter; returns its name ("" for '*', None for '...')."""
        if self.at("*"):
            self.take()
            return ""
        if self.at("..."):
            self.take()
            return None
        if self.at(")") or self.at(",") or self.at("end") or self.at("->"):
            self.expected("an argument", "an argument reads 'Type name' or 'Type name=default'")
        type_start = self.tok
        type_text = self.type("argument")
        t = self.tok
        if t.kind != "ident":
            self.argument_name_error(type_start, type_text)
        self.take()
        if self.at("="):
            self.take()
            self.default(t.text)
        return t.text

    def argument_name_error(self, type_start: Tok, type_text: str) -> NoReturn:
        t = self.tok
        if t.kind in (",", ")", "=", "end"):
            plain = type_text.isidentifier() and type_text not in BASE_TYPES and \
                type_text not in _FOREIGN
            unnamed = (f"'{type_text}' reads as a type here; an argument has a type and a name: "
                       f"Tensor {type_text}") if plain else \
                f"every argument needs a name, as in '{type_text} x'"
            self.fail(f"argument of type '{type_text}' has no name", unnamed, tok=type_start,
                      end=type_start.pos + len(type_text))
        hint: str | None = None
        if t.kind == "&":
            hint = (f"'&' is C++: write {type_text}(a!) or {type_text}! for an argument the op "
                    f"writes, plain {type_text} otherwise") if type_text == "Tensor" else \
                f"'&' is C++: write {type_text}"
        elif t.kind == "*":
            hint = "'*' is C++; a schema type has no pointers"
        elif t.kind == ":":
            hint = "the schema language writes the type first: Tensor x, not x: Tensor"
        elif t.kind == "(":
            hint = _ANNOTATION_HINT
        self.fail(f"expected the argument's name after type '{type_text}', found {_found(t)}",
                  hint)

    # -- types -------------------------------------------------------------------------------------

    def type(self, role: str) -> str:
        """A type with its suffixes; returns its text as written (for messages)."""
        start = self.tok
        if start.kind == "(":
            self.take()
            if not self.at(")"):
                while True:
                    self.type("tuple element")
                    if self.at(","):
                        self.take()
                        continue
                    if not self.at(")"):
                        self.expected("',' or ')' in the tuple type")
                    break
            self.take()
        elif start.kind == "ident":
            self.type_name(role)
        else:
            what = "an argument" if role == "argument" else f"a type for the {role}"
            hint = None
            if start.kind in ("&", "*"):
                hint = "a schema type has no C++ qualifiers"
            self.expected(what, hint)
        self.suffixes()
        end = self.toks[self.i - 1]
        return self.text[start.pos:end.pos + len(end.text)]

    def type_name(self, role: str) -> None:
        first = self.i
        start = self.take()
        if start.text in _GENERICS and self.at("("):
            self.take()
            while True:
                self.type(f"{start.text}(...) type argument")
                if self.at(","):
                    self.take()
                    continue
                if not self.at(")"):
                    self.expected(f"',' or ')' in {start.text}(...)")
                self.take()
                return
        while self.at(".") and self.peek().kind == "ident":
            self.take()
            self.take()
        last = self.toks[self.i - 1]
        name = self.text[start.pos:last.pos + len(last.text)]
        if self.at("::") or self.at("<") or (start.text == "const" and self.at("ident")) or (
                self.at("[") and name in _WRAPPERS and self.peek().kind not in ("]", "number")):
            self.foreign_type(first)

    def foreign_type(self, first: int) -> NoReturn:
        """A C++ (`std::vector<int64_t>`, `const at::Tensor&`) or Python (`Optional[Tensor]`)
        type starting at token `first`: refuse it whole, suggesting the schema spelling."""
        toks = self.toks
        i = first
        if toks[i].text == "const" and toks[i + 1].kind == "ident":
            i += 1
        while toks[i + 1].kind in ("::", ".") and toks[i + 2].kind == "ident":
            i += 2
        i += 1
        if toks[i].kind in ("<", "["):
            depth = 0
            while toks[i].kind != "end":
                if toks[i].kind in ("<", "["):
                    depth += 1
                elif toks[i].kind in (">", "]"):
                    depth -= 1
                    if depth == 0:
                        i += 1
                        break
                i += 1
        while toks[i].kind in ("&", "*"):
            i += 1
        start, last = toks[first], toks[i - 1]
        end = last.pos + len(last.text)
        spelled = self.text[start.pos:end]
        suggestion = _translate(spelled)
        hint = f"write {suggestion}" if suggestion else \
            "schema types are Tensor, int, float, bool, str, Scalar, ... with ?, [] and [N]"
        lang = "Python" if "[" in spelled or "." in spelled else "C++"
        self.fail(f"'{spelled}' is a {lang} type, not a schema type", hint, tok=start, end=end)

    def suffixes(self) -> None:
        while True:
            t = self.tok
            if t.kind == "?" or t.kind == "!":
                self.take()
            elif t.kind == "[":
                self.take()
                if self.at("number") and self.tok.text.isdigit():
                    self.take()
                if not self.at("]"):
                    self.expected("']' to close the list type", "list types read T[] or T[N]")
                self.take()
            elif t.kind == "(" and self.peek().kind in ("ident", "*", ")", "!", "|", "->"):
                self.annotation()
            else:
                return

    def annotation(self) -> None:
        self.take()  # (
        self.alias_set("alias annotation")
        if self.at("!"):
            self.take()
        if self.at("->"):
            self.take()
            self.alias_set("alias annotation after '->'")
        if not self.at(")"):
            hint = _ANNOTATION_HINT
            if self.at("|") and self.toks[self.i - 1].kind == "!":
                hint = "'!' goes after the whole set: (a|b!)"
            self.expected("')' to close the alias annotation", hint)
        self.take()

    def alias_set(self, where: str) -> None:
        while True:
            if not (self.at("ident") or self.at("*")):
                self.expected(f"an alias set name in the {where}", _ANNOTATION_HINT)
            self.take()
            if not self.at("|"):
                return
            self.take()

    # -- defaults ----------------------------------------------------------------------------------

    def default(self, name: str) -> None:
        what = f"a default value for argument '{name}'"
        t = self.tok
        if t.kind == "[":
            self.take()
            if self.at("]"):
                self.take()
                return
            while True:
                if not self.scalar_default():
                    self.expected("a number, a name or ']' in the list default", _DEFAULTS_HINT)
                if self.at(","):
                    self.take()
                    continue
                if not self.at("]"):
                    self.expected("',' or ']' in the list default")
                self.take()
                return
        if t.kind == "string":
            self.take()
            return
        if not self.scalar_default():
            if t.kind in (",", ")", "end"):
                self.fail(f"missing default value for argument '{name}'", _DEFAULTS_HINT)
            self.expected(what, _DEFAULTS_HINT)

    def scalar_default(self) -> bool:
        t = self.tok
        if t.kind == "-":
            self.take()
            if not self.at("number"):
                self.expected("a number after '-'", _DEFAULTS_HINT)
            t = self.tok
        if t.kind == "number":
            if not _NUMBER_OK.match(t.text):
                self.fail(f"malformed number '{t.text}'",
                          "numbers are written in decimal: 10, -3, 0.5, 1e-05")
            self.take()
            return True
        if t.kind == "ident":
            dot, attr = self.peek(), self.peek(2)
            if t.text == "torch" and dot.kind == "." and dot.pos == t.pos + len(t.text) \
                    and attr.kind == "ident" and attr.pos == dot.pos + 1:
                # Python's spelling (torch.float16): c10 says only "invalid numeric default".
                self.fail(f"'torch.{attr.text}' is a Python value, not a schema default",
                          f"write {attr.text}", end=attr.pos + len(attr.text))
            self.take()
            return True
        return False

    # -- returns -----------------------------------------------------------------------------------

    def returns(self) -> None:
        if self.at("..."):
            self.take()
            return
        if not self.at("("):
            if self.at("end"):
                self.fail("expected the return types after '->'", _NO_RETURNS_HINT)
            self.ret()
            return
        self.take()
        if self.at(")"):
            self.take()
            return
        while True:
            if self.at("..."):
                self.take()
            else:
                self.ret()
            t = self.tok
            if t.kind == ",":
                self.take()
                if self.at(")"):
                    self.fail("expected a return after ','", "remove the trailing ','")
                continue
            if t.kind == ")":
                self.take()
                return
            if t.kind == "=":
                self.fail("a return has no default value", "defaults belong to arguments")
            if t.kind == "end":
                self.fail("unexpected end of schema; expected ')' to close the returns")
            self.fail(f"expected ',' or ')' in the return list, found {_found(t)}",
                      "separate returns with ','" if t.kind == "ident" else None)

    def ret(self) -> None:
        if self.at(")") or self.at(","):
            self.expected("a return type")
        self.type("return")
        if self.at("ident"):
            self.take()
        elif self.at("&"):
            self.fail("'&' is C++; a return is written as its schema type",
                      "write Tensor; an argument 'Tensor(a!) x' that the op mutates and returns "
                      "is returned as Tensor(a!)")


def _translate(spelled: str) -> str | None:
    """`std::vector<int64_t>` -> `int[]`, `Optional[torch.Tensor]` -> `Tensor?`, `const at::Tensor&`
    -> `Tensor`; None when some part has no schema spelling."""
    text = spelled.replace("const ", "").replace("&", "").replace("*", "").strip()
    m = re.fullmatch(r"([\w:.]+)\s*[<\[](.*)[>\]]", text)
    if m:
        inner = _split_top(m.group(2))
        parts = [_translate(x) for x in inner]
        if any(p is None for p in parts):
            return None
        return schema_spelling(m.group(1), parts)  # type: ignore[arg-type]
    return schema_spelling(text)


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "<[":
            depth += 1
        elif ch in ">]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    return parts


def explain(text: str) -> tuple[str, int, int, str | None] | None:
    """(message, offset, length, hint) for the first syntax error in `text`, or None when this
    reader finds none."""
    try:
        _Reader(text).schema()
    except _Error as e:
        return e.message, e.offset, e.length, e.hint
    return None
