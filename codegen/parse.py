"""Schema text -> `codegen.model.FunctionSchema`.

The grammar is `grammar/schema.lark` (LALR, contextual lexer). The transformer below runs inside
the parser (no parse tree is ever built) and is the only code that sees Lark's tokens.

Note [Type tokens]
A named type with its suffixes (`Tensor(a!)?`, `int[2]`, `Tensor(a)[](b)`) is lexed as a single
TYPE token. Decoding that text into a Type is a pure function of the spelling, so it is memoised:
a corpus repeats a few dozen spellings thousands of times. Spans therefore live on Arguments and
Returns (`type_span`), never inside the shared Type objects.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import NoReturn

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from codegen.lalr import lalr_parse
from codegen.literals import INT64_MAX, INT64_MIN, LiteralError, float_literal, shorten
from codegen.model import (
    BASE_TYPES,
    CUSTOM_CLASS_PREFIX,
    FRESH,
    GENERIC_ARITY,
    Annotation,
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
    OperatorName,
    OptionalType,
    Return,
    Span,
    StrDefault,
    TupleType,
    Type,
    TypeVar,
    number_fresh_sets,
    with_annotation,
)


class SchemaSyntaxError(Exception):
    """A schema that does not parse. `offset`/`length` locate the problem in the parsed text."""

    def __init__(self, message: str, offset: int, length: int = 1, hint: str | None = None):
        # Messages quote user text; keep them on one line whatever that text holds.
        message = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
        super().__init__(message)
        self.message = message
        self.offset = offset
        self.length = max(1, length)
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (at offset {self.offset})"


def _fail(message: str, offset: int, length: int = 1, hint: str | None = None) -> NoReturn:
    raise SchemaSyntaxError(message, offset, length, hint)


# --------------------------------------------------------------------------------------------------
# Pieces decoded from token text

_SUFFIX_RE = re.compile(r"\s*(\?|!|\[\s*(\d*)\s*\]|\(([^()]*)\))")
_OPNAME_RE = re.compile(r"([A-Za-z_]\w*)(?:\s*::\s*([A-Za-z_]\w*))?(?:\s*\.\s*(\w+))?")
_ALIAS_NAME_RE = re.compile(r"\*|[A-Za-z_]\w*\Z")


def _annotation(text: str, offset: int) -> Annotation:
    """`a|b! -> c` (the text between the parentheses) -> Annotation."""
    before, arrow, after = text.partition("->")
    before = before.strip()
    is_write = before.endswith("!")
    if is_write:
        before = before[:-1].rstrip()
    alias_set = tuple(s.strip() for s in before.split("|"))
    alias_after = tuple(s.strip() for s in after.split("|")) if arrow else ()
    for name in alias_set + alias_after:
        if not _ALIAS_NAME_RE.match(name):
            _fail(f"malformed alias annotation '({text})'", offset, len(text) + 2,
                  "write alias annotations as (a), (a!), (a -> *) or (a|b)")
    return Annotation(alias_set, is_write, alias_after)


# Numbered per schema by model.number_fresh_sets (Note [Fresh alias sets]).
_FRESH = Annotation((FRESH,), True)


def _with_alias(t: Type, ann: Annotation, offset: int, length: int) -> Type:
    if isinstance(t, OptionalType):
        _fail("an alias annotation cannot follow '?'", offset, length,
              f"write the annotation before the '?', as in Tensor{ann}?")
    if t.alias is not None:
        _fail("this type already has an alias annotation", offset, length,
              "a type carries one annotation: Tensor(a!) or Tensor!, not both")
    # c10 reads no annotation right after these types (only on a list of them).
    if isinstance(t, (TupleType, ClassType)) or (
            isinstance(t, GenericType) and t.kind is not Generic.Dict
            and t.kind is not Generic.Union):
        what = "a tuple type" if isinstance(t, TupleType) else f"type '{t}'"
        _fail(f"{what} cannot carry an alias annotation", offset, length,
              f"torch reads annotations on a list of them: {t}[]{ann}")
    return with_annotation(t, ann)


# Types nest at most this deep (`int[][]` is 2): everything after parsing walks types recursively,
# and no type that deep can be bound by a custom op anyway.
MAX_TYPE_DEPTH = 16


def _type_depth(t: Type) -> int:
    """Nesting depth of `t`; its parts were checked already, so this recursion is bounded."""
    if isinstance(t, (OptionalType, ListType)):
        return 1 + _type_depth(t.elem)
    if isinstance(t, TupleType):
        return 1 + max((_type_depth(e) for e in t.elems), default=0)
    if isinstance(t, GenericType):
        return 1 + max((_type_depth(e) for e in t.args), default=0)
    return 1


def _check_depth(t: Type, offset: int, length: int) -> Type:
    if _type_depth(t) > MAX_TYPE_DEPTH:
        _fail(f"type nested more than {MAX_TYPE_DEPTH} levels deep", offset, length)
    return t


def _apply_suffixes(t: Type, text: str, pos: int, base_offset: int) -> Type:
    """Fold `?`, `[N]` and `(alias)` suffixes in `text[pos:]` onto `t`, left to right."""
    depth = _type_depth(t)
    while pos < len(text):
        m = _SUFFIX_RE.match(text, pos)
        assert m is not None, text  # the lexer only produces well-formed suffixes
        tok = m.group(1)
        if tok in ("?", "[") or tok[0] == "[":
            depth += 1
            if depth > MAX_TYPE_DEPTH:
                _fail(f"type nested more than {MAX_TYPE_DEPTH} levels deep",
                      base_offset + m.start(1), len(tok))
        if tok == "?":
            t = OptionalType(t)
        elif tok[0] == "[":
            size = m.group(2)
            t = ListType(t, _list_size(size, base_offset + m.start(2)) if size else None)
        elif tok == "!":
            t = _with_alias(t, _FRESH, base_offset + m.start(1), 1)
        else:
            t = _with_alias(t, _annotation(m.group(3), base_offset + m.start(1)),
                            base_offset + m.start(1), len(tok))
        pos = m.end()
    return t


@lru_cache(maxsize=4096)
def _named_type(text: str) -> Type:
    """A TYPE token's text -> Type (offsets in errors are relative to the token)."""
    end = 0
    while end < len(text) and (text[end].isalnum() or text[end] in "_."):
        end += 1
    name = text[:end]
    base = BASE_TYPES.get(name) if name != "None" else BaseTy.NoneType  # c10 reads None so
    t: Type
    if base is not None:
        t = BaseType(base)
    elif name.startswith(CUSTOM_CLASS_PREFIX) and name.count(".") == 4:
        t = ClassType(name)
    elif "." in name and not name[0].islower():
        # c10 reads a dotted name as a type variable only when it starts in lower case
        # (`torch.distributed.device_mesh.DeviceMesh`, as torch.distributed declares ops).
        _fail(f"unknown type '{name}'", 0, end,
              f"custom classes are written {CUSTOM_CLASS_PREFIX}<namespace>.<Class>")
    else:
        t = TypeVar(name)
    return _apply_suffixes(t, text, end, 0)


# The type is the longest run of a name and suffixes: the lexer checked the spelling already.
_ARG_RE = re.compile(r"([A-Za-z_][\w.]*(?:\s*(?:\?|!|\[\s*\d*\s*\]|\([^()]*\)))*)\s*"
                     r"([A-Za-z_]\w*)(?:(\s*=\s*)(.+))?\Z", re.S)


@lru_cache(maxsize=8192)
def _decode_arg(text: str):
    """ARG/RET token text -> (type, type_end, name, name_start, default, default_start)."""
    m = _ARG_RE.match(text)
    assert m is not None, text
    type_text, name, dtext = m.group(1), m.group(2), m.group(4)
    t = _named_type(type_text)
    default = None if dtext is None else _default_text(dtext, m.start(4), _is_float(t))
    return t, len(type_text), name, m.start(2), default, m.start(4) if dtext else -1


# Exactly c10's escapes: no \r, no \x, octal always three digits. c10 reads a string default as
# bytes (an octal escape is one byte, a raw character its UTF-8 bytes), and torch hands the value
# to Python decoded as UTF-8.
_ESCAPES = {"n": "\n", "t": "\t", "a": "\a", "b": "\b", "f": "\f", "v": "\v",
            "\\": "\\", "'": "'", '"': '"'}
_ESCAPE_RE = re.compile(r"\\([0-7]{3}|.)", re.S)
_NUL_HINT = "the generated C++ passes strings as C strings, which end at NUL"


def _unquote(text: str, start: int) -> str:
    """A string default's value, as c10 reads it. Raw characters are kept, whatever they are
    (c10 reads a tab, NEL or U+2028 as it is; the canonical text escapes them, see
    `model.quote_string`), except NUL, which a C string cannot hold, and lone surrogates, which
    have no UTF-8 form. (A raw line feed ends the token before this.)"""
    body = text[1:-1]
    for i, c in enumerate(body):
        if c == "\0":
            _fail("a string default cannot hold NUL (U+0000)", start + 1 + i, 1, _NUL_HINT)
        if "\ud800" <= c <= "\udfff":
            _fail(f"character U+{ord(c):04X} in a string default is a lone surrogate, which has "
                  "no UTF-8 form", start + 1 + i, 1)
    if "\\" not in body:
        return body
    out = bytearray()
    escapes: list[tuple[int, int, int]] = []     # (byte index, offset in body, length)
    last = 0
    for m in _ESCAPE_RE.finditer(body):
        out += body[last:m.start()].encode("utf-8")
        e = m.group(1)
        at, length = start + 1 + m.start(), m.end() - m.start()
        if len(e) == 3:
            byte = int(e, 8)
            if byte > 0o377:
                _fail(f"octal escape '\\{e}' is beyond a byte: c10 reads \\000 to \\377",
                      at, length, "an octal escape is one byte of the string's UTF-8 form")
            if byte == 0:
                _fail("a string default cannot hold NUL (\\000)", at, length, _NUL_HINT)
            escapes.append((len(out), m.start(), length))
            out.append(byte)
        elif e in _ESCAPES:
            out += _ESCAPES[e].encode()
        else:
            _fail(f"unsupported escape sequence '\\{e}' in string", at, 2,
                  "supported escapes: \\n \\t \\a \\b \\f \\v \\\\ \\' \\\" and octal "
                  "\\ooo (three digits)")
        last = m.end()
    out += body[last:].encode("utf-8")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as err:
        # Only octal escapes make bytes that are not UTF-8: point at the one where decoding
        # failed (a lead byte, or a continuation byte without one).
        _, offset, length = max(e for e in escapes if e[0] <= err.start)
        _fail("octal escapes in a string default spell bytes of its UTF-8 form, and these "
              "are not UTF-8: torch could not read the default back in Python",
              start + 1 + offset, length,
              "write the character itself, or every byte of its UTF-8 form (é is \\303\\251)")


_NUMBER_RE = re.compile(r"-?\s*(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?j?\Z")
_LIST_ITEM_RE = re.compile(r"\s*([^,\s][^,]*?)\s*(?:,|\Z)")


def _list_size(text: str, offset: int) -> int:
    """The N of `T[N]`: c10 reads it with stoll, and a list that long cannot be passed."""
    if len(text.lstrip("0")) > len(str(INT64_MAX)) or int(text) > INT64_MAX:
        _fail(f"list size '{text[:20]}{'...' if len(text) > 20 else ''}' is out of range",
              offset, len(text), "sizes of sized lists are small numbers: int[2]")
    return int(text)


def _int64(num: str, text: str, start: int) -> int:
    """c10 reads every integer default with stoll: beyond int64, `m.def` aborts the process."""
    digits = num.lstrip("-").lstrip("0")
    # Compare lengths before int(): it refuses more than 4,300 digits with a ValueError.
    value = int(num) if len(digits) <= len(str(INT64_MAX)) else None
    if value is None or not INT64_MIN <= value <= INT64_MAX:
        _fail(f"integer '{shorten(text)}' is out of range: schema integers are 64-bit", start,
              len(text),
              f"they go from {INT64_MIN} to {INT64_MAX}; a large float default is written with an "
              "exponent (1e+23)")
    return value


def _is_float(t: Type) -> bool:
    """Whether c10 reads a number default for type `t` as a double whatever its spelling."""
    while isinstance(t, (OptionalType, ListType)):
        t = t.elem
    return isinstance(t, BaseType) and t.name is BaseTy.float


_HEX_RE = re.compile(r"(-?)\s*0[xX]([0-9a-fA-F]+)\Z")


def _hex(text: str, start: int, float_type: bool) -> NoReturn:
    """Refuse a hexadecimal default, saying what torch makes of it.

    c10 lexes `0x2F` as a number and then reads it with stoll (base 10) for every type but float:
    `int m=0x2F` silently becomes 0. This is the one place where opgen refuses what torch accepts.
    """
    m = _HEX_RE.match(text)
    if m is None:
        _fail(f"hexadecimal default '{text}' is not supported", start, len(text),
              "torch reads hexadecimal defaults as 0, or as floats, depending on their digits; "
              "write the value in decimal")
    value = int(m.group(2), 16) * (-1 if m.group(1) else 1)
    if float_type:
        # stod reads hexadecimal, so a float argument gets the value; an int would get 0.
        _fail(f"hexadecimal default '{text}': torch reads it as {float(value)!r} for a float, "
              "but as 0 for an int argument", start, len(text),
              f"write it in decimal: {float(value)!r}")
    if "e" in m.group(2):
        # c10 takes a number holding 'e' for a double, which stod reads as hexadecimal.
        reading = f"the float {float(value)!r}"
    else:
        reading = "0 (it reads the leading 0 and ignores the rest)"
    _fail(f"hexadecimal default '{text}' is {value}, but torch reads it as {reading}",
          start, len(text), f"write it in decimal: {value}")


def _default_text(text: str, start: int, float_type: bool = False) -> Default:
    """Default-value text (already a single lexer token) -> Default. `start` locates errors;
    `float_type` tells whether the argument is a float (only hexadecimal defaults care)."""
    c = text[0]
    if c == '"' or c == "'":
        return StrDefault(_unquote(text, start))
    if c == "[":
        body = text[1:-1]
        items = []
        pos = 0
        while pos < len(body) and not body[pos:].strip() == "":
            m = _LIST_ITEM_RE.match(body, pos)
            if m is None:
                _fail("malformed list default", start, len(text))
            items.append(_default_text(m.group(1), start + 1 + m.start(1), float_type))
            pos = m.end()
        return ListDefault(tuple(items))
    if c.isdigit() or c in "-.":
        if "x" in text or "X" in text:
            _hex(text, start, float_type)
        if not _NUMBER_RE.match(text):
            _fail(f"malformed number '{text}'", start, len(text))
        num = "".join(text.split())
        try:
            if num.endswith("j"):
                return ComplexDefault(float_literal(num[:-1], underflow=False))
            if "." in num or "e" in num or "E" in num:
                return FloatDefault(float_literal(num, underflow=False))
        except LiteralError as e:
            _fail(e.message, start, len(text), e.hint)
        return IntDefault(_int64(num, text, start))
    if text == "None":
        return NoneDefault()
    if text == "True" or text == "False":
        return BoolDefault(text == "True")
    if not (c.isalpha() or c == "_") or not text.replace("_", "a").isalnum():
        _fail(f"malformed default value '{text}'", start, len(text))
    return EnumDefault(text)


def _default(node: Token | ListDefault) -> Default:
    if isinstance(node, ListDefault):
        return node
    return _default_text(str(node), node.start_pos)


# --------------------------------------------------------------------------------------------------
# The transformer: callbacks run as the LALR parser reduces.
#
# Note [Big tokens]
# Most of a schema arrives as a few big tokens: OPEN_ARG (`ns::op.ov(Tensor self`), NARG
# (`, Tensor other`), NKWARG (`, *, Scalar alpha=1`), CLOSE_RET (`) -> Tensor`). Lark's cost is per
# token, so this makes the parser several times faster than one token per word. A token's text
# decodes to the same IR wherever it appears, so decoding is memoised by spelling (`_decode_arg`,
# `_named_type`); offsets in the cached results are relative and made absolute per use. Spans
# therefore live on Arguments and Returns (`type_span`, ...), never inside shared Type objects.

_LEAD_RE = re.compile(r"[\s,*()\->]*")


def _lead(text: str) -> int:
    """Length of the punctuation a big token carries before its argument or type."""
    return _LEAD_RE.match(text).end()  # type: ignore[union-attr]


def _arg_from(text: str, start: int, kwarg_only: bool) -> Argument:
    """An ARG spelling at absolute offset `start` -> Argument."""
    try:
        t, type_end, name, name_start, default, default_start = _decode_arg(text)
    except SchemaSyntaxError as e:
        raise SchemaSyntaxError(e.message, start + e.offset, e.length, e.hint) from None
    return Argument(name, t, default, kwarg_only, Span(start, start + len(text)),
                    (type_end, name_start, default_start))


def _ret_from(text: str, start: int) -> Return:
    """A RET (`Tensor values`) or TYPE (`Tensor`) spelling at offset `start` -> Return."""
    if text[-1].isalnum() or text[-1] == "_":
        m = _RET_NAME_RE.search(text)
        if m is not None and m.start() > 0:
            type_text = text[: m.start()]
            try:
                t = _named_type(type_text.rstrip())
            except SchemaSyntaxError as e:
                raise SchemaSyntaxError(e.message, start + e.offset, e.length, e.hint) from None
            return Return(m.group(1), t, Span(start, start + len(text)),
                          Span(start, start + len(type_text.rstrip())))
    try:
        t = _named_type(text)
    except SchemaSyntaxError as e:
        raise SchemaSyntaxError(e.message, start + e.offset, e.length, e.hint) from None
    return Return(None, t, Span(start, start + len(text)), Span(start, start + len(text)))


# A return name follows its type after whitespace (`Tensor(a) values`) or right after a suffix
# (`Tensor?values`); a TYPE token never ends that way, so this tells RET from TYPE spellings.
_RET_NAME_RE = re.compile(r"(?:(?<=[?!\])])\s*|\s+)([A-Za-z_]\w*)\Z")


class _ToIR(Transformer):
    # Callbacks receive the reduced children: Tokens of named terminals and the results of inner
    # callbacks. Single-token alternatives (`?rule: TOKEN`) arrive as the token itself.

    def start(self, c):
        head: Token = c[0]
        text = str(head)
        paren = text.index("(")
        name = _operator_name(text[:paren], head.start_pos)
        args: list[Argument] = []
        kw = False
        vararg_pos = -1
        items = c[1:-1]
        if head.type == "OPEN_ARG":
            lead = _lead(text[paren:]) + paren
            args.append(_arg_from(text[lead:], head.start_pos + lead, False))
        for p in items:
            if vararg_pos >= 0:
                _fail("'...' must be the last element of the argument list", vararg_pos, 3)
            if isinstance(p, Token):
                kind = p.type
                ptext = str(p)
                if kind == "NARG" or kind == "NKWARG":
                    if kind == "NKWARG":
                        if kw:
                            _fail("'*' appears twice in the argument list",
                                  p.start_pos + ptext.index("*"))
                        kw = True
                    lead = _lead(ptext)
                    args.append(_arg_from(ptext[lead:], p.start_pos + lead, kw))
                elif kind == "NSTAR" or kind == "STAR":
                    if kw:
                        _fail("'*' appears twice in the argument list", p.end_pos - 1)
                    kw = True
                else:
                    assert kind == "NELLIPSIS" or kind == "ELLIPSIS", kind
                    vararg_pos = p.end_pos - 3
            else:
                if kw:
                    p = Argument(p.name, p.type, p.default, True, p.span, p.layout)
                args.append(p)
        tail = c[-1]
        if isinstance(tail, Token):  # CLOSE_RET: `) -> Type [name]`
            rtext = str(tail).rstrip()
            lead = _lead(rtext)
            rets, is_varret = [_ret_from(rtext[lead:], tail.start_pos + lead)], False
        else:
            rets, is_varret, end = tail
        if isinstance(tail, Token):
            end = tail.end_pos
        return FunctionSchema(name, tuple(args), tuple(rets), vararg_pos >= 0, is_varret,
                              Span(head.start_pos, end))

    def tail(self, c):
        return c[1]

    def argument(self, c):
        ty, name, dv = c
        t, type_span = ty
        default = None if dv is None else _default(dv)
        default_span = None if dv is None else _span_of(dv)
        start = type_span.start
        end = default_span.end if default_span else name.end_pos
        layout = (type_span.end - start, name.start_pos - start,
                  default_span.start - start if default_span else -1)
        return Argument(str(name), t, default, False, Span(start, end), layout)

    def generic_type(self, c):
        head: Token = c[0]
        kind = Generic(head[: head.index("(")].rstrip())
        args = []
        last_end = head.end_pos
        suffixes = []
        for x in c[1:]:
            if isinstance(x, Token) and x.type == "TSUF":
                suffixes.append(x)
            elif isinstance(x, Token):
                args.append(_type_of(x))
                last_end = x.end_pos
            else:
                args.append(x[0])
                last_end = x[1].end
        arity = GENERIC_ARITY[kind]
        if arity is not None and len(args) != arity:
            _fail(f"{kind.value}(...) takes {arity} type argument{'s' if arity > 1 else ''}, "
                  f"got {len(args)}", head.start_pos, len(head))
        # The closing ")" is dropped by Lark; the span stops after the last argument's ")".
        t = _check_depth(GenericType(kind, tuple(args)), head.start_pos, len(head))
        return _suffixed(t, suffixes, Span(head.start_pos, last_end + 1))

    def tuple_type(self, c):
        elems = []
        suffixes = []
        start = c[0].start_pos
        end = start + 1
        for x in c[1:]:
            if x is None:
                continue
            if isinstance(x, Token) and x.type == "TSUF":
                suffixes.append(x)
            elif isinstance(x, Token):
                elems.append(_type_of(x))
                end = x.end_pos
            else:
                elems.append(x[0])
                end = x[1].end
        t = _check_depth(TupleType(tuple(elems)), start, 1)
        return _suffixed(t, suffixes, Span(start, end + 1))

    def ret(self, c):
        ty, name = c
        t, type_span = ty
        end = name.end_pos if name is not None else type_span.end
        return Return(None if name is None else str(name), t, Span(type_span.start, end), type_span)

    def ret_list(self, c):
        rets = []
        varret_pos = -1
        close: Token = c[-1]
        for r in c[:-1]:
            if r is None:
                continue
            if varret_pos >= 0:
                _fail("'...' must be the last element of the return list", varret_pos, 3)
            if isinstance(r, Token):
                if r.type == "ELLIPSIS" or r.type == "NELLIPSIS":
                    varret_pos = r.end_pos - 3
                    continue
                text = str(r)
                lead = _lead(text)
                r = _ret_from(text[lead:], r.start_pos + lead)
            rets.append(r)
        return rets, varret_pos >= 0, close.end_pos

    def ret_bare(self, c):
        r = c[0]
        if isinstance(r, Token):
            if r.type == "ELLIPSIS":
                return [], True, r.end_pos
            ret = _ret_from(str(r), r.start_pos)
        else:
            ret = self.ret(c)
        return [ret], False, ret.span.end

    def dlist(self, c):
        items = tuple(_default(x) for x in c if x is not None)
        return ListDefault(items)


def _type_of(tok: Token) -> Type:
    try:
        return _named_type(str(tok))
    except SchemaSyntaxError as e:
        raise SchemaSyntaxError(e.message, tok.start_pos + e.offset, e.length, e.hint) from None


def _span_of(x) -> Span | None:
    if isinstance(x, Token):
        return Span(x.start_pos, x.end_pos)
    if isinstance(x, tuple):
        return x[1]
    if isinstance(x, ListDefault):
        return x.span
    return None


def _suffixed(t: Type, suffixes: list[Token], span: Span):
    for s in suffixes:
        t = _apply_suffixes(t, str(s), 0, s.start_pos)
        span = Span(span.start, s.end_pos)
    return (t, span)


def _operator_name(text: str, start: int) -> OperatorName:
    m = _OPNAME_RE.fullmatch(text.rstrip())
    assert m is not None, text
    first, second, overload = m.groups()
    ns, name = (first, second) if second else (None, first)
    return OperatorName(ns, name, overload or "", Span(start, start + len(text.rstrip())))


# --------------------------------------------------------------------------------------------------
# Errors from the parser, in words a user knows


def _syntax_error(text: str, e: UnexpectedInput) -> SchemaSyntaxError:
    """Lark's error, explained: `codegen.schema_errors` reads the schema again token by token and
    says which construct broke where (Lark's big tokens only know that a whole argument failed)."""
    from codegen.schema_errors import explain

    found = explain(text)
    if found is not None:
        return SchemaSyntaxError(*found)
    # The two readers disagree (tests/test_parse_properties.py looks for such inputs): say what
    # Lark saw, at its position.
    pos = len(text)
    if isinstance(e, UnexpectedCharacters) and e.pos_in_stream is not None:
        pos = e.pos_in_stream
    elif isinstance(e, UnexpectedToken) and e.token.type != "$END" and \
            e.token.start_pos is not None:
        pos = e.token.start_pos
    while pos < len(text) and text[pos].isspace():
        pos += 1
    what = f"'{text[pos]}'" if pos < len(text) else "end of schema"
    return SchemaSyntaxError(f"unexpected {what}", pos, 1)


@lru_cache(maxsize=1)
def _parser() -> Lark:
    grammar = resources.files("codegen").joinpath("grammar/schema.lark").read_text()
    return Lark(grammar, parser="lalr", lexer="contextual", transformer=_ToIR(),
                maybe_placeholders=True, propagate_positions=False, cache=True)


def parse_schema(text: str) -> FunctionSchema:
    """Parse one function schema; raise SchemaSyntaxError with an offset into `text`."""
    try:
        schema: FunctionSchema = lalr_parse(_parser(), text)  # type: ignore[assignment]
    except UnexpectedInput as e:
        raise _syntax_error(text, e) from None
    # Types are decoded once per spelling, so fresh alias sets are numbered per schema here.
    return number_fresh_sets(schema) if "!" in text else schema
