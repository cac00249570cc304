"""Lark's LALR parse, run faster: its parse loop and contextual lexer inlined over the parser's own
tables, scanners and callbacks (`lalr_parse`).

The grammar files stay the source of truth and Lark builds everything the loop runs on; only the
loop is ours. Per token Lark pays for a generator, a lexer state and line counter, and per
reduction a Python-level hash of its Rule to find the callback; the fake rules, formulas and
schemas of a library are thousands of small parses, where that is most of the time.
"""

from __future__ import annotations

import operator
import weakref

from lark import Lark, Token
from lark.parsers.lalr_analysis import Shift


_FAILED = object()

# The callback of a rule of one child that is that child (`?sum: product`): the loop only moves the
# child to the rule's state. An expression grammar's precedence levels make most reductions these.
FIRST = operator.itemgetter(0)
_TABLES: "weakref.WeakKeyDictionary[Lark, tuple]" = weakref.WeakKeyDictionary()


def lalr_parse(lark: Lark, text: str) -> object:
    """`lark.parse(text)` for an LALR parser with the contextual lexer (and no postlexer), run by
    `_drive` over the parser's own tables; where the text is not in the language, Lark's parse
    runs again and raises its exception, so errors are Lark's (its callbacks run again then:
    they must keep no state from one parse to the next)."""
    tables = _TABLES.get(lark)
    if tables is None:
        tables = _TABLES[lark] = _lalr_tables(lark)
    out = _drive(tables, text)
    return lark.parse(text) if out is _FAILED else out


def _lalr_tables(lark: Lark) -> tuple:
    """What `_drive` runs on, all of it Lark's: its LALR table with each reduction's rule
    replaced by what the loop needs of it (Lark hashes the Rule, in Python, to find its
    callback), the callbacks, and per parser state the contextual lexer's scanner."""
    frontend = lark.parser
    assert lark.options.parser == "lalr" and lark.options.lexer == "contextual" \
        and frontend.lexer_conf.postlex is None
    parser = frontend.parser.parser
    table = parser.parse_table
    callbacks = parser.callbacks
    reductions: dict[int, tuple] = {}
    states = {}
    for state, row in table.states.items():
        out = {}
        for symbol, (action, arg) in row.items():
            if action is Shift:
                out[symbol] = (True, arg)
            else:
                if id(arg) not in reductions:
                    size, callback = len(arg.expansion), callbacks[arg]
                    unit = size == 1 and callback is FIRST
                    reductions[id(arg)] = (size, callback, arg.origin.name, unit)
                out[symbol] = (False, reductions[id(arg)])
        states[state] = out
    token_callbacks = {k: v for k, v in callbacks.items() if isinstance(k, str)}
    lexers = {}
    for state, lexer in frontend.lexer.lexers.items():
        lexers[state] = (lexer.scanner._mres, lexer.ignore_types, lexer.newline_types,
                         lexer.callback)
    return (states, token_callbacks, table.start_states["start"], table.end_states["start"],
            lexers)


def _drive(tables: tuple, text: str) -> object:
    """`lark.parse(text)` where it succeeds, _FAILED where it would raise.

    Lark's LALR loop and contextual lexer (`ParserState.feed_token`, `BasicLexer.next_token`)
    inlined over Lark's own tables, scanners and callbacks: the same tokens, positions,
    reductions and callbacks in the same order, without a generator, lexer state and line
    counter object per token. Any error stops it."""
    states, token_callbacks, start_state, end_state, lexers = tables
    new_token = Token._future_new
    state_stack = [start_state]
    value_stack: list = []
    pos, n = 0, len(text)
    line, line_start = 1, 0
    token = None
    while True:
        # The next token, in the lexer of the parser's state (BasicLexer.next_token).
        tok = None
        if pos < n:
            mres, ignore_types, newline_types, lex_callbacks = lexers[state_stack[-1]]
            while pos < n:
                for mre in mres:
                    m = mre.match(text, pos, n)
                    if m:
                        break
                else:
                    return _FAILED
                value = m.group(0)
                type_ = m.lastgroup
                start, start_line, start_column = pos, line, pos - line_start + 1
                if type_ in newline_types:
                    newlines = value.count("\n")
                    if newlines:
                        line += newlines
                        line_start = pos + value.rindex("\n") + 1
                pos += len(value)
                ignored = type_ in ignore_types
                if not ignored or type_ in lex_callbacks:
                    t = new_token(type_, value, start, start_line, start_column, line,
                                  pos - line_start + 1, pos)
                    if type_ in lex_callbacks:
                        t = lex_callbacks[type_](t)
                    if not ignored:
                        tok = t
                        break
        is_end = tok is None
        if tok is None:
            tok = Token.new_borrow_pos("$END", "", token) if token else Token("$END", "", 0, 1, 1)
        else:
            token = tok
        # Feed it (ParserState.feed_token).
        ttype = tok.type
        while True:
            try:
                shift, arg = states[state_stack[-1]][ttype]
            except KeyError:
                return _FAILED
            if shift:
                if is_end:
                    return _FAILED
                state_stack.append(arg)
                value_stack.append(tok if ttype not in token_callbacks
                                   else token_callbacks[ttype](tok))
                break
            size, callback, origin, unit = arg
            if unit:
                # The child stays on the value stack; only its state changes.
                new_state = states[state_stack[-2]][origin][1]
                state_stack[-1] = new_state
                if is_end and new_state == end_state:
                    return value_stack[-1]
                continue
            if size:
                s = value_stack[-size:]
                del state_stack[-size:]
                del value_stack[-size:]
            else:
                s = []
            value = callback(s)
            new_state = states[state_stack[-1]][origin][1]
            state_stack.append(new_state)
            value_stack.append(value)
            if is_end and new_state == end_state:
                return value
