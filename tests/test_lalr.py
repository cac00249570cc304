"""codegen.lalr: Lark's LALR parse run over Lark's own tables gives what `Lark.parse` gives --
the same tokens (type, text, every position), reductions and results -- and where the text is
not in the language, Lark's own exception."""

from __future__ import annotations

import random

import pytest
from lark import Lark, Token, Transformer, Tree
from lark.exceptions import UnexpectedInput

from codegen import formulas as F
from codegen import lalr
from codegen import parse as P
from codegen import shape as S

# Keywords the NAME terminal also matches (Lark's UnlessCallback), tokens spanning lines (the line
# counter), an ignored terminal, a rule inlined by `?`, an optional and a repetition.
GRAMMAR = r"""
start: stmt (";" stmt)* [";"]
?stmt: NAME "=" expr -> bind
     | expr
?expr: atom
     | expr "+" atom -> add
     | "if" expr "then" expr "else" expr -> cond
?atom: NAME | INT | STRING | "(" expr ")" | "[" [expr ("," expr)*] "]" -> lst
NAME: /[a-z_]+/
INT: /[0-9]+/
STRING: /"[^"]*"/
%ignore /[ \t\n]+/
"""


class _Tokens(Transformer):
    """Every reduction as (rule, children), every token with all of its positions."""

    def __default__(self, data, children, meta):
        return Tree(data, [_token(c) if isinstance(c, Token) else c for c in children])


def _token(t: Token) -> tuple:
    return (t.type, str(t), t.start_pos, t.line, t.column, t.end_line, t.end_column, t.end_pos)


ALPHABET = ["a", "b", "if", "then", "else", "iff", "x_", "1", "23", '"s"', '"a\nb"', "=", "+",
            ";", "(", ")", "[", "]", ",", " ", "\n", "\t", "?", '"']


def _sentence(rng: random.Random, depth: int = 0) -> str:
    """A random text of the grammar's language, spaced and broken across lines at random."""
    sp = lambda: rng.choice(["", " ", "\n  ", "\t"])  # noqa: E731
    pick = rng.randrange(7 if depth < 4 else 3)
    if pick == 0:
        return rng.choice(["a", "iff", "x_", "then_"])
    if pick == 1:
        return rng.choice(["1", "23"])
    if pick == 2:
        return rng.choice(['"s"', '"a\nb"', '""'])
    if pick == 3:
        return f"{_sentence(rng, depth + 1)}{sp()}+{sp()}{_sentence(rng, depth + 1)}"
    if pick == 4:
        return f"if {_sentence(rng, depth + 1)} then{sp()}{_sentence(rng, depth + 1)} else " \
            f"{_sentence(rng, depth + 1)}"
    if pick == 5:
        return f"({sp()}{_sentence(rng, depth + 1)}{sp()})"
    items = [_sentence(rng, depth + 1) for _ in range(rng.randrange(3))]
    return "[" + f"{sp()},{sp()}".join(items) + "]"


def _outcome(f, text: str):
    try:
        return "ok", f(text)
    except UnexpectedInput as e:
        return "error", type(e).__name__, str(e), getattr(e, "pos_in_stream", None), \
            getattr(e, "expected", None)


def test_same_tokens_results_and_errors_as_lark():
    parser = Lark(GRAMMAR, parser="lalr", lexer="contextual", transformer=_Tokens(),
                  maybe_placeholders=True)
    rng = random.Random(0)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(4000):
        if rng.random() < 0.5:
            stmts = [rng.choice(["", "b = "]) + _sentence(rng) for _ in range(rng.randint(1, 3))]
            text = " ;\n".join(stmts) + rng.choice(["", ";", "\n"])
        else:
            text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 14)))
        want = _outcome(parser.parse, text)
        assert _outcome(lambda t: lalr.lalr_parse(parser, t), text) == want, text
        outcomes[want[0]] += 1
    # Both paths were exercised, many times each.
    assert min(outcomes.values()) > 500, outcomes


def test_lark_parses_only_on_the_error_path(monkeypatch):
    parser = Lark(GRAMMAR, parser="lalr", lexer="contextual", transformer=_Tokens(),
                  maybe_placeholders=True)
    want = parser.parse("a = if b then 1 else c")
    bad = "a = = b"
    with pytest.raises(UnexpectedInput) as raised:
        parser.parse(bad)
    calls = []
    real = parser.parse
    monkeypatch.setattr(parser, "parse", lambda text: calls.append(text) or real(text))
    assert lalr.lalr_parse(parser, "a = if b then 1 else c") == want
    assert calls == []
    with pytest.raises(UnexpectedInput) as again:
        lalr.lalr_parse(parser, bad)
    assert calls == [bad] and str(again.value) == str(raised.value)


@pytest.mark.parametrize("module, texts", [
    (S, ["like(self)", "n = dynamic(); (empty([n]), empty([n], dtype=int64))",
         "broadcast(a, b) if reduction == 'none' else\n  reduce(broadcast(a, b), None)",
         "[x for x in self.shape]", "like(self[1:], dtype=float32)"]),
    (F, ["grad * other", "grad.sum(dim) if keepdim else grad", "-grad * self.sin()",
         "mul_tensor_backward(grad, other, self.scalar_type())"]),
])
def test_the_expression_parsers_agree_with_lark(module, texts):
    p = module._parser()
    for text in texts:
        fast = lalr.lalr_parse(p.lark, text)
        slow = p.lark.parse(text)
        assert (repr(fast.node), fast.height, fast.start, fast.end) == \
            (repr(slow.node), slow.height, slow.start, slow.end)


def test_the_schema_parser_agrees_with_lark():
    for text in ["f(Tensor x, *, Scalar alpha=1) -> Tensor",
                 "ns::g.out(Tensor(a!) out, int[2] size, float? eps=1e-5) -> Tensor(a!)",
                 "h(Tensor[] xs, str mode='x') -> (Tensor, Tensor values)"]:
        assert lalr.lalr_parse(P._parser(), text) == P._parser().parse(text)


EXPR_ALPHABET = ["a", "self", "x", "1", "2.5", "'s'", "(", ")", "[", "]", ",", ";", "=", "==", "<",
                 "is", "not", "if", "else", "for", "in", "or", "+", "-", "*", "//", ".", ":", " ",
                 "\n", "like", "grad", "?"]


@pytest.mark.parametrize("module", [S, F])
def test_random_expressions_agree_with_lark(module):
    # The expression parsers' `?rule` alternatives of one child (lalr.FIRST) take the loop's
    # shortcut; Lark calls them.
    p = module._parser()
    rng = random.Random(1)

    def node(f):
        return lambda t: (lambda r: (repr(r.node), r.height, r.start, r.end))(f(t))

    ok = 0
    for _ in range(3000):
        text = rng.choice(["like(self)", "grad * x", "f(a, b=1)[0]", "(a, (b))", "[x for x in y]",
                           "a if b else c", ""]) + rng.choice(["", " + ", " * ", "; ", "."]) + \
            "".join(rng.choice(EXPR_ALPHABET) for _ in range(rng.randint(0, 6)))
        want = _outcome(node(p.lark.parse), text)
        assert _outcome(node(lambda t: lalr.lalr_parse(p.lark, t)), text) == want, text
        ok += want[0] == "ok"
    assert ok > 300, ok
