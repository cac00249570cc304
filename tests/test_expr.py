"""codegen.expr: what the fake-rule and formula languages share (nodes and their walk, the Python
printer's parentheses, the tree-less parser)."""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass

import pytest
from lark import Lark, Token, Tree

from codegen import formulas as F
from codegen import shape as S
from codegen.expr import (BINARY_PREC, MAX_DEPTH, ExprParser, ExprSyntaxError, Node, Prec,
                          PyPrinter, children, walk)
from codegen.model import Span

# --------------------------------------------------------------------------------------------------
# A small expression IR of the test's own


@dataclass(frozen=True)
class Name(Node):
    id: str


@dataclass(frozen=True)
class Bin(Node):
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Unary(Node):
    op: str
    operand: Node


@dataclass(frozen=True)
class If(Node):
    then: Node
    cond: Node
    orelse: Node


@dataclass(frozen=True)
class Call(Node):
    func: Node
    args: tuple[Node, ...]
    kwargs: tuple[tuple[str, Node], ...]


class Printer(PyPrinter):
    def form(self, e):
        match e:
            case Name(id=n):
                return n, Prec.ATOM
            case Bin(op=op, left=a, right=b):
                return self.binary(op, a, b)
            case Unary(op=op, operand=o):
                return self.unary(op, o)
            case If(then=t, cond=c, orelse=o):
                return self.conditional(t, c, o)
            case Call(func=f, args=args, kwargs=kwargs):
                inner = [self.expr(a) for a in args] + [f"{k}={self.expr(v)}" for k, v in kwargs]
                return f"{self.expr(f, Prec.POSTFIX)}({', '.join(inner)})", Prec.POSTFIX
        raise TypeError(e)


_AST_BIN = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
            ast.Mod: "%", ast.MatMult: "@", ast.Pow: "**", ast.BitOr: "|", ast.BitXor: "^",
            ast.BitAnd: "&", ast.LShift: "<<", ast.RShift: ">>"}
_AST_CMP = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
            ast.GtE: ">=", ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}
_AST_UNARY = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~", ast.Not: "not"}


def from_ast(node: ast.expr) -> Node:
    """Python's reading of printed text, in the test IR."""
    match node:
        case ast.Name(id=n):
            return Name(n)
        case ast.BinOp(op=op, left=a, right=b):
            return Bin(_AST_BIN[type(op)], from_ast(a), from_ast(b))
        case ast.BoolOp(op=op, values=values):
            spelled = "and" if isinstance(op, ast.And) else "or"
            out = from_ast(values[0])
            for v in values[1:]:
                out = Bin(spelled, out, from_ast(v))
            return out
        case ast.Compare(left=a, ops=[op], comparators=[b]):
            return Bin(_AST_CMP[type(op)], from_ast(a), from_ast(b))
        case ast.UnaryOp(op=op, operand=o):
            return Unary(_AST_UNARY[type(op)], from_ast(o))
        case ast.IfExp(test=c, body=t, orelse=o):
            return If(from_ast(t), from_ast(c), from_ast(o))
        case ast.Call(func=f, args=args, keywords=kws):
            return Call(from_ast(f), tuple(from_ast(a) for a in args),
                        tuple((k.arg, from_ast(k.value)) for k in kws))
    raise AssertionError(ast.dump(node))


def random_tree(rng: random.Random, depth: int) -> Node:
    if depth == 0 or rng.random() < 0.15:
        return Name(rng.choice("abcxyz"))
    kind = rng.randrange(10)
    if kind < 6:
        op = rng.choice(sorted(BINARY_PREC))
        return Bin(op, random_tree(rng, depth - 1), random_tree(rng, depth - 1))
    if kind < 8:
        return Unary(rng.choice(["-", "+", "~", "not"]), random_tree(rng, depth - 1))
    if kind < 9:
        return If(*(random_tree(rng, depth - 1) for _ in range(3)))
    return Call(random_tree(rng, depth - 1), (random_tree(rng, depth - 1),),
                (("k", random_tree(rng, depth - 1)),))


# --------------------------------------------------------------------------------------------------
# The printer


def test_printed_expressions_read_back_as_the_same_tree():
    rng = random.Random(15)
    for _ in range(3000):
        tree = random_tree(rng, 5)
        text = Printer().expr(tree)
        assert from_ast(ast.parse(text, mode="eval").body) == tree, text


def test_the_printer_adds_only_the_parentheses_python_needs():
    # Python's own unparser parenthesizes minimally too; it differs in spelling unary operands
    # of `**` and comparison chains, which the printer never writes.
    rng = random.Random(7)
    checked = 0
    for _ in range(2000):
        tree = random_tree(rng, 4)
        text = Printer().expr(tree)
        if "**" in text or any(op in text for op in ("==", "!=", "<", ">", " is ", " in ")):
            continue
        assert ast.unparse(ast.parse(text, mode="eval")) == text
        checked += 1
    assert checked > 200


@pytest.mark.parametrize("tree, text", [
    (Bin("-", Name("a"), Bin("-", Name("b"), Name("c"))), "a - (b - c)"),
    (Bin("-", Bin("-", Name("a"), Name("b")), Name("c")), "a - b - c"),
    (Bin("**", Bin("**", Name("a"), Name("b")), Name("c")), "(a ** b) ** c"),
    (Bin("**", Name("a"), Bin("**", Name("b"), Name("c"))), "a ** b ** c"),
    (Bin("**", Unary("-", Name("a")), Name("b")), "(-a) ** b"),
    (Unary("-", Bin("**", Name("a"), Name("b"))), "-a ** b"),
    (Bin("==", Bin("==", Name("a"), Name("b")), Name("c")), "(a == b) == c"),
    (Bin("==", Unary("not", Name("a")), Name("b")), "(not a) == b"),
    (Unary("not", Bin("==", Name("a"), Name("b"))), "not a == b"),
    (If(Name("a"), Name("c"), If(Name("b"), Name("d"), Name("e"))), "a if c else b if d else e"),
    (If(If(Name("a"), Name("c"), Name("b")), Name("d"), Name("e")),
     "(a if c else b) if d else e"),
    (Bin("and", Name("a"), Bin("or", Name("b"), Name("c"))), "a and (b or c)"),
])
def test_parentheses_by_precedence(tree, text):
    assert Printer().expr(tree) == text


def test_the_precedence_table_is_pythons():
    # Each operator, between two looser ones of either side, reads back as written.
    for op, prec in BINARY_PREC.items():
        text = Printer().expr(Bin(op, Name("a"), Name("b")))
        assert from_ast(ast.parse(text, mode="eval").body) == Bin(op, Name("a"), Name("b"))
        for other, other_prec in BINARY_PREC.items():
            if other_prec < prec and other_prec is not Prec.COMPARE:
                nested = Bin(op, Bin(other, Name("a"), Name("b")), Name("c"))
                printed = Printer().expr(nested)
                assert printed.startswith("("), printed
                assert from_ast(ast.parse(printed, mode="eval").body) == nested


# --------------------------------------------------------------------------------------------------
# Nodes


def test_children_follow_the_fields_through_nested_tuples():
    a, b, c, f = Name("a"), Name("b"), Name("c"), Name("f")
    call = Call(f, (a, b), (("k", c),))
    assert children(call) == (f, a, b, c)
    assert children(a) == ()


def test_walk_is_preorder_left_to_right():
    a, b, c, d = Name("a"), Name("b"), Name("c"), Name("d")
    left = Bin("+", a, b)
    right = Unary("-", c)
    top = Bin("*", left, right)
    assert list(walk(top)) == [top, left, a, b, right, c]
    assert list(walk(left, d)) == [left, a, b, d]


def test_the_languages_walk_their_own_nodes():
    syn = F._parser().parse("unbroadcast(grad * other, self)")
    kinds = [n.kind if isinstance(n, F._Node) else n.id for n in walk(syn)]
    assert kinds == ["start", "call", "unbroadcast", "mul", "grad", "other", "self"]


# --------------------------------------------------------------------------------------------------
# The parser


@dataclass(frozen=True)
class Generic(Node):
    kind: str
    span: Span | None
    parts: tuple


class GenericBuilder:
    """Builds one generic node per grammar alternative: what a parse tree would hold."""

    def default(self, kind, span, parts):
        return Generic(kind, span, tuple(parts))


def tree_as_generic(t):
    if isinstance(t, Tree):
        span = None if t.meta.empty else Span(t.meta.start_pos, t.meta.end_pos)
        return Generic(t.data, span, tuple(tree_as_generic(c) for c in t.children))
    return t


def _tokens(node):
    """Tokens compare by text only: compare their kind and position too."""
    if isinstance(node, Generic):
        return (node.kind, node.span, tuple(_tokens(p) for p in node.parts))
    if isinstance(node, Token):
        return (node.type, str(node), node.start_pos, node.end_pos)
    return node


SHAPE_TEXTS = re.findall(r"^\s+fake: (.+?)(?:\s+#.*)?$", S.__doc__ or "", re.M) + [
    "(like(self))", "((a)).b", "[(x), *(y)]", "f((a), b=(c))[(1):(2):(3)]",
    "n = (dynamic()); (empty([(n)]),)", "x if (not (a == b)) else -(-(y))",
]
FORMULA_TEXTS = [
    "grad * other", "unbroadcast(grad, self)", "(grad * self, grad * other)",
    "t = torch.tanh(self / limit); grad * (1 - t * t)",
    "[g * 2 for g in grad if g is not None]", "[g for g in (grad)]", "x[..., 0, 1:2:-1, :]",
    "((a)).b(*(c), d=(e))", "-(a) ** ~b @ +c", "not (a) and (b or c) if d else ()",
]


@pytest.mark.parametrize("grammar, texts", [("grammar/shape.lark", SHAPE_TEXTS),
                                            ("grammar/formula.lark", FORMULA_TEXTS)])
def test_the_parser_builds_what_a_parse_tree_holds(grammar, texts):
    # Spans (parentheses around a child included, as propagate_positions says), children, None
    # for absent optional parts: each as Lark's parse tree has them.
    parser = ExprParser(grammar, GenericBuilder(), "text")
    tree_parser = Lark(parser._grammar_text(), parser="lalr", propagate_positions=True,
                       maybe_placeholders=True)
    assert len(texts) > 8
    for text in texts:
        assert _tokens(parser.parse(text)) == _tokens(tree_as_generic(tree_parser.parse(text))), \
            text


def test_nesting_is_limited_where_the_tree_is_too_deep():
    parser = ExprParser("grammar/formula.lark", GenericBuilder(), "formula", "a hint")
    for n in (MAX_DEPTH - 2, MAX_DEPTH - 1):     # `start` and the innermost name count too
        parser.parse(" + ".join(["x"] * n))
    with pytest.raises(ExprSyntaxError) as e:
        parser.parse(" + ".join(["x"] * MAX_DEPTH))
    assert (e.value.message, e.value.span, e.value.hint) == (
        "formula: nested more than 100 levels deep", Span(4, 5), "a hint")
    # (The second `x`: a walk of the parse tree meets it first.) Parentheses add no level.
    parser.parse("(" * 150 + "x" + ")" * 150)


def test_syntax_errors_are_located():
    parser = ExprParser("grammar/shape.lark", S._ToSyntax(), "fake rule")
    with pytest.raises(ExprSyntaxError) as e:
        parser.parse("like(self")
    assert (e.value.message, e.value.span) == ("fake rule: '(' was never closed", Span(4, 5))
    with pytest.raises(ExprSyntaxError) as e:
        parser.parse("like(self))")
    assert (e.value.message, e.value.span) == ("fake rule: unexpected ')'", Span(10, 11))
