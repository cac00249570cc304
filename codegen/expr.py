"""What the two expression languages of an op file share: the fake-rule language
(`codegen.shape`) and derivative formulas (`codegen.formulas`).

Each language owns its grammar, its syntax and IR node types, its checker and its semantics. This
module owns the plumbing under them:

- `Node`, the base of their syntax and IR nodes (frozen dataclasses; syntax nodes carry a `span`
  into the text they were parsed from), with `children` and `walk` over any of them;
- `Prec`, Python's precedence of expression forms, and `PyPrinter`, the base of the printers that
  turn an IR into Python source (`codegen.dest.py_fake`, `codegen.dest.py_autograd`), which
  parenthesizes by precedence;
- `ExprParser`, a Lark LALR parser that builds a language's syntax nodes while it parses (no parse
  tree), with the located syntax errors and the nesting limit both languages report.
"""

from __future__ import annotations

import enum
from dataclasses import fields
from functools import cached_property, partial
from importlib import resources
from typing import Callable, Iterator, Mapping

from lark import Lark, Token, Tree
from lark.parse_tree_builder import (ChildFilterLALR, ChildFilterLALR_NoPlaceholders,
                                     ExpandSingleChild)
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from codegen.lalr import FIRST, lalr_parse
from codegen.model import Span

# --------------------------------------------------------------------------------------------------
# Nodes


class Node:
    """A syntax or IR node of an expression language: a frozen dataclass whose sub-expressions are
    fields holding a Node, or tuples of them (nested tuples too: a call's `(name, value)`
    keywords)."""

    __slots__ = ()


_NODE_FIELDS: dict[type, tuple[str, ...]] = {}


def _collect(value: tuple, out: list[Node]) -> None:
    for v in value:
        if isinstance(v, Node):
            out.append(v)
        elif type(v) is tuple:
            _collect(v, out)


def children(node: Node) -> tuple[Node, ...]:
    """The sub-expressions of `node`, in the order of its fields."""
    names = _NODE_FIELDS.get(type(node))
    if names is None:
        names = _NODE_FIELDS[type(node)] = tuple(f.name for f in fields(node))  # type: ignore
    out: list[Node] = []
    for name in names:
        v = getattr(node, name)
        if isinstance(v, Node):
            out.append(v)
        elif type(v) is tuple:
            _collect(v, out)
    return tuple(out)


def walk(*roots: Node) -> Iterator[Node]:
    """Every node under `roots`, each before its sub-expressions, left to right."""
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


# --------------------------------------------------------------------------------------------------
# Printing Python


class Prec(enum.IntEnum):
    """Python's precedence of expression forms, loosest first (the language reference's table)."""

    LOWEST = 0
    COND = 1            # a if c else b
    OR = 2
    AND = 3
    NOT = 4
    COMPARE = 5         # == != < <= > >= is, is not (never chained by the printers)
    BITOR = 6
    BITXOR = 7
    BITAND = 8
    SHIFT = 9
    ADD = 10            # + -
    MUL = 11            # * / // % @
    UNARY = 12          # -x +x ~x
    POW = 13
    POSTFIX = 14        # calls, attributes, subscripts
    ATOM = 15


# Binary operators by spelling: both languages' operator enums take their spelling as value.
BINARY_PREC: dict[str, Prec] = {
    "or": Prec.OR, "and": Prec.AND,
    **dict.fromkeys(("==", "!=", "<", "<=", ">", ">=", "is", "is not", "in", "not in"),
                    Prec.COMPARE),
    "|": Prec.BITOR, "^": Prec.BITXOR, "&": Prec.BITAND, "<<": Prec.SHIFT, ">>": Prec.SHIFT,
    "+": Prec.ADD, "-": Prec.ADD,
    **dict.fromkeys(("*", "/", "//", "%", "@"), Prec.MUL),
    "**": Prec.POW,
}


class PyPrinter:
    """Prints an expression IR as Python source with the parentheses precedence needs, and no
    others. A subclass spells each node in `form`, building on the forms below."""

    def form(self, e: Node) -> tuple[str, Prec]:
        """The text of `e` and the precedence of its outermost form."""
        raise NotImplementedError

    def expr(self, e: Node, need: int = Prec.LOWEST) -> str:
        """`e` as an operand of a form that needs precedence `need` there."""
        text, prec = self.form(e)
        return paren(text, prec, need)

    def binary(self, op: str, left: Node, right: Node) -> tuple[str, Prec]:
        prec = BINARY_PREC[op]
        if prec is Prec.POW:        # right-associative; binds tighter than a unary on its left
            return f"{self.expr(left, prec + 1)} ** {self.expr(right, Prec.UNARY)}", prec
        if prec is Prec.COMPARE:    # never a chain: `(a == b) == c`
            return f"{self.expr(left, prec + 1)} {op} {self.expr(right, prec + 1)}", prec
        return f"{self.expr(left, prec)} {op} {self.expr(right, prec + 1)}", prec

    def unary(self, op: str, operand: Node) -> tuple[str, Prec]:
        """`-x`, `+x`, `~x` or `not x`."""
        if op.strip() == "not":
            return f"not {self.expr(operand, Prec.NOT)}", Prec.NOT
        return f"{op}{self.expr(operand, Prec.UNARY)}", Prec.UNARY

    def conditional(self, then: Node, cond: Node, orelse: Node) -> tuple[str, Prec]:
        return (f"{self.expr(then, Prec.COND + 1)} if {self.expr(cond, Prec.COND + 1)} else "
                f"{self.expr(orelse, Prec.COND)}", Prec.COND)


def paren(text: str, prec: int, need: int) -> str:
    """`text`, a form of precedence `prec`, where precedence `need` is needed."""
    return f"({text})" if prec < need else text


# --------------------------------------------------------------------------------------------------
# Parsing


class ExprSyntaxError(Exception):
    """Text that is not in the language: a message about the span of the text that broke."""

    def __init__(self, message: str, span: Span, hint: str | None = None):
        super().__init__(message)
        self.message, self.span, self.hint = message, span, hint


# Nesting deeper than this is refused: the checkers and the code generators recurse over the tree
# (Python's stack), and generated code must stay within what Python and C++ compilers accept.
MAX_DEPTH = 100


class _Reduced:
    """A syntax node on the parser's stack: its height (nested nodes, itself included) and the
    text it covers, parentheses around it included."""

    __slots__ = ("node", "height", "start", "end")

    def __init__(self, node: object, height: int, start: int, end: int):
        self.node, self.height, self.start, self.end = node, height, start, end


class _Spliced:
    """The children of a helper rule Lark makes for `(...)*` (`__start_star_0`), which its
    child filter splices into the parent's."""

    __slots__ = ("children", "start", "end")

    def __init__(self, children: list, start: int, end: int):
        self.children, self.start, self.end = children, start, end


def _position(items: list) -> tuple[int, int]:
    """Where the children of a reduction start and end (-1: nowhere), punctuation included,
    as Lark's `propagate_positions` says (a parenthesized child starts at its parenthesis)."""
    start = end = -1
    for c in items:
        if c is not None:
            if type(c) is Token:
                start = c.start_pos
                break
            if c.start >= 0:
                start = c.start
                break
    for c in reversed(items):
        if c is not None:
            if type(c) is Token:
                end = c.end_pos
                break
            if c.end >= 0:
                end = c.end
                break
    return start, end


def _passes_through(rule) -> bool:
    """Whether the grammar rule is a `?rule`'s alternative of one child (`?sum: product`),
    which is that child, wherever it is: most reductions are these."""
    if not rule.options.expand1 or rule.alias or len(rule.expansion) != 1 \
            or any(rule.options.empty_indices or ()):
        return False
    sym = rule.expansion[0]
    return not (sym.is_term and sym.filter_out) and not (
        not sym.is_term and sym.name.startswith("_"))


class ExprParser:
    """An LALR parser for the grammar `codegen/<grammar>` that builds a language's syntax while it
    parses, with no parse tree in between.

    `builder` has a method per grammar alternative (its alias, or its rule's name) taking the span
    of text it covers and its children: Tokens of named terminals, the nodes built for its rules,
    None for an absent `[optional]` part; `default(kind, span, children)` takes the others."""

    def __init__(self, grammar: str, builder: object, what: str, depth_hint: str | None = None,
                 char_hints: Mapping[str, str] | None = None):
        self.grammar = grammar
        self.what = what                # how messages name the text: "fake rule", "formula"
        self.depth_hint = depth_hint
        self.char_hints = char_hints or {}     # an unexpected character -> a hint for it
        self.builder = builder
        self.lark = Lark(self._grammar_text(), parser="lalr", lexer="contextual",
                         maybe_placeholders=True, cache=True)
        self.terminal_names = terminal_names(self.lark)
        # Lark's tree builder wraps each rule's callback in its child filter (punctuation out,
        # None for absent optionals) and single-child inlining of `?rule`s; the callbacks below
        # do what those wrappers do, and take the place of the tree nodes it would make and of
        # `propagate_positions`. (Lark's own `transformer=` option would, but it gives no
        # positions.)
        callbacks = self.lark._callbacks
        for rule, chain in self.lark._parse_tree_builder.rule_builders:
            if _passes_through(rule):
                callbacks[rule] = FIRST
                continue
            callbacks[rule] = self._reduction(
                rule.origin.name if rule.origin.name.startswith("_")
                else rule.alias or rule.options.template_source or rule.origin.name, chain)

    def _reduction(self, kind: str, chain: list) -> Callable[[list], object]:
        """The callback of the alternative `kind`, over every child of the reduction (punctuation
        included), in one call: Lark's wrappers in `chain` (its ChildFilterLALR*, then
        ExpandSingleChild), then the node built."""
        expand_single = False
        include: list[tuple[int, bool, int]] | None = None   # (child, splice it, Nones before)
        nones_after = 0
        for wrap in chain:
            if wrap is ExpandSingleChild and include is None:
                expand_single = True
            elif isinstance(wrap, partial) and wrap.func is ChildFilterLALR_NoPlaceholders:
                include = [(i, expand, 0) for i, expand in wrap.args[0]]
            elif isinstance(wrap, partial) and wrap.func is ChildFilterLALR:
                include, nones_after = list(wrap.args[0]), wrap.args[1]
            else:
                raise TypeError(f"Lark's tree builder wraps '{kind}' in {wrap!r}, which "
                                "codegen.expr does not know")
        splice = kind.startswith("_")
        method: Callable[..., object] | None = None if splice else getattr(self.builder, kind, None)
        if not splice and not callable(method):
            default = getattr(self.builder, "default", None)

            def method(span, *kept):
                if default is None:     # a `?rule`'s alternatives pass their child through
                    raise TypeError(f"{type(self.builder).__name__} builds no '{kind}'")
                return default(kind, span, kept)

        def reduce(items: list) -> object:
            start, end = _position(items)
            if include is None:
                children = items
            else:
                children = []
                for i, expand, nones in include:
                    if nones:
                        children += [None] * nones
                    if expand:
                        children += items[i].children
                    else:
                        children.append(items[i])
                if nones_after:
                    children += [None] * nones_after
            if expand_single and len(children) == 1:
                out = children[0]
                if type(out) is _Reduced and (out.start, out.end) != (start, end):
                    # `"(" expr ")"`: the expression itself, now covering its parentheses.
                    return _Reduced(out.node, out.height, start, end)
                return out
            if splice:
                return _Spliced(children, start, end)
            kept = []
            height = 0
            for c in children:
                if type(c) is _Reduced:
                    kept.append(c.node)
                    if c.height > height:
                        height = c.height
                else:
                    kept.append(c)
            return _Reduced(method(Span(start, end) if start >= 0 else None,  # type: ignore[misc]
                                   *kept), height + 1, start, end)

        return reduce

    def _grammar_text(self) -> str:
        return resources.files("codegen").joinpath(self.grammar).read_text()

    def parse(self, text: str) -> object:
        """The syntax of `text`; raises ExprSyntaxError."""
        try:
            top: _Reduced = lalr_parse(self.lark, text)  # type: ignore[assignment]
        except UnexpectedInput as e:
            raise syntax_error(text, e, self.terminal_names, self.what,
                               self.char_hints) from None
        if top.height > MAX_DEPTH:
            raise self._too_deep(text)
        return top.node

    @cached_property
    def _tree_parser(self) -> Lark:
        """The same grammar building a parse tree: on the error path only, to find the node
        nested too deep exactly where a walk of the tree finds it."""
        return Lark(self._grammar_text(), parser="lalr", lexer="contextual",
                    propagate_positions=True, maybe_placeholders=True, cache=True)

    def _too_deep(self, text: str) -> ExprSyntaxError:
        stack = [(self._tree_parser.parse(text), 1)]
        while stack:
            node, depth = stack.pop()
            if depth > MAX_DEPTH:
                meta = node.meta
                span = Span(0, 1) if meta.empty else Span(meta.start_pos, meta.end_pos)
                return ExprSyntaxError(f"{self.what}: nested more than {MAX_DEPTH} levels deep",
                                       span, self.depth_hint)
            stack.extend((c, depth + 1) for c in node.children if isinstance(c, Tree))
        raise AssertionError("the tree is not as deep as its parse")


def token_span(tok: Token) -> Span:
    return Span(tok.start_pos or 0, tok.end_pos or 0)


def terminal_names(parser: Lark) -> dict[str, str]:
    """Terminal name -> how a message spells it (`RPAR` -> `')'`, `NAME` -> `a name`)."""
    names = {"NAME": "a name", "INT": "an integer", "NUMBER": "a number", "STRING": "a string",
             "$END": "end of text"}
    for t in parser.terminals:
        if t.name not in names and t.pattern.type == "str":
            names[t.name] = f"'{t.pattern.value}'"
    return names


def unclosed_bracket(text: str) -> tuple[int, str] | None:
    """The offset of the first bracket left open at the end of `text`, and its character."""
    stack: list[tuple[int, str]] = []
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            stack.append((i, ch))
        elif ch in ")]}" and stack:
            stack.pop()
    return stack[0] if stack else None


def syntax_error(text: str, e: UnexpectedInput, names: dict[str, str], what: str,
                 char_hints: Mapping[str, str] | None = None) -> ExprSyntaxError:
    """A located message for a Lark parse failure of `text` (a `what`: "fake rule", ...);
    `char_hints`: the language's hint for an unexpected character."""
    if isinstance(e, UnexpectedCharacters):
        pos = e.pos_in_stream or 0
        return ExprSyntaxError(f"{what}: unexpected character {text[pos]!r}", Span(pos, pos + 1),
                               (char_hints or {}).get(text[pos]))
    if isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken) and e.token.type == "$END"):
        opened = unclosed_bracket(text)
        if opened is not None:
            pos, ch = opened
            return ExprSyntaxError(f"{what}: '{ch}' was never closed", Span(pos, pos + 1))
        end = len(text.rstrip())
        return ExprSyntaxError(f"{what}: unexpected end of text", Span(max(0, end - 1), end),
                               _expected_hint(getattr(e, "expected", ()), names))
    assert isinstance(e, UnexpectedToken)
    tok = e.token
    return ExprSyntaxError(f"{what}: unexpected {names.get(tok.type, repr(str(tok)))}"
                           if tok.type not in ("NAME", "INT", "NUMBER", "STRING")
                           else f"{what}: unexpected {str(tok)!r}",
                           token_span(tok), _expected_hint(e.expected, names))


def _expected_hint(expected, names: dict[str, str]) -> str | None:
    spelled = sorted({names.get(t, t) for t in expected})
    if not spelled or len(spelled) > 6:
        return None
    return "expected " + (spelled[0] if len(spelled) == 1 else "one of: " + ", ".join(spelled))
