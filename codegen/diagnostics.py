"""Located, collected error messages: from a position in a user's file to compiler-style text.

    schemas/ops.yaml:4:19: error: unknown type 'Tensr'
        - func: ex::f(Tensr x) -> Tensor
                      ^~~~~
    hint: did you mean 'Tensor'?

Errors are collected in a `Diagnostics` and reported together; `UserError` carries them out of the
front end to the CLI, which prints them and exits 1. `assert` is for our own invariants only.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Callable, Iterable
from codegen.escape import shown


@dataclass(frozen=True, order=True)
class Loc:
    """A position in a source file: 1-based line and column (in characters), and a length."""

    path: str
    line: int
    col: int
    length: int = field(default=1, compare=False)

    def __str__(self) -> str:
        return f"{shown(self.path)}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Diagnostic:
    loc: Loc
    message: str
    hint: str | None = None
    severity: str = "error"
    # A warning's name (`-W<name>` silences it in an op file's `suppress:`, see docs/FORMAT.md);
    # `flag` is shown after the message, as compilers name the option behind a diagnostic.
    name: str | None = None
    flag: str | None = None

    def render(self, lines: list[str] | None) -> str:
        flag = f" [{self.flag}]" if self.flag else ""
        out = [f"{self.loc}: {self.severity}: {self.message}{flag}"]
        if lines is not None and 1 <= self.loc.line <= len(lines):
            src, col = _window(lines[self.loc.line - 1].rstrip("\r\n"), self.loc.col)
            out.append("    " + _printable(src))
            # Keep tabs in the caret line so the caret sits under the same column in a terminal.
            pad = "".join("\t" if c == "\t" else " " for c in src[: col - 1])
            width = max(1, min(self.loc.length, max(1, len(src) - col + 1)))
            out.append("    " + pad + "^" + "~" * (width - 1))
        if self.hint:
            out.append(f"hint: {self.hint}")
        return "\n".join(out)


# Source lines longer than this are shown as a window around the caret (a minified or generated
# file can hold megabytes on one line).
MAX_SHOWN = 160


def _window(line: str, col: int) -> tuple[str, int]:
    """`line` cut to MAX_SHOWN characters around 1-based `col`, and col's place in the cut."""
    if len(line) <= MAX_SHOWN:
        return line, col
    start = max(0, min(col - 1 - MAX_SHOWN // 2, len(line) - MAX_SHOWN))
    head = "..." if start > 0 else ""
    tail = "..." if start + MAX_SHOWN < len(line) else ""
    return head + line[start:start + MAX_SHOWN] + tail, col - start + len(head)


def _printable(line: str) -> str:
    return "".join(c if c == "\t" or c.isprintable() else "\ufffd" for c in line)


class Diagnostics:
    """Collects diagnostics for one run; knows each file's text to draw source lines."""

    def __init__(self) -> None:
        self.items: list[Diagnostic] = []
        self._lines: dict[str, list[str]] = {}

    def add_source(self, path: str, text: str) -> None:
        self._lines[path] = text.splitlines()

    def source(self, path: str) -> str | None:
        """The text shown for `path`'s source lines, if it was added."""
        lines = self._lines.get(path)
        return None if lines is None else "\n".join(lines)

    def error(self, loc: Loc, message: str, hint: str | None = None) -> None:
        self.items.append(Diagnostic(loc, message, hint))

    def absorb(self, other: Diagnostics, items: Iterable[Diagnostic]) -> None:
        """Take `items` of `other`, with the source lines it can show."""
        for path, lines in other._lines.items():
            self._lines.setdefault(path, lines)
        self.items.extend(items)

    def warning(self, loc: Loc, message: str, hint: str | None = None, *,
                name: str | None = None, suppress: Iterable[str] = ()) -> None:
        """A convention that only costs a generated extra: printed, and the run still succeeds.
        `name` (see WARNINGS) is shown as `[-W<name>]`; nothing is reported when it is among the
        names the op file silences (`suppress`)."""
        assert name is None or name in WARNINGS, name
        if name is not None and name in suppress:
            return
        self.items.append(Diagnostic(loc, message, hint, "warning", name,
                                     f"-W{name}" if name else None))

    def note(self, loc: Loc, message: str, hint: str | None = None) -> None:
        """Information about what generation chose (never fails a run, not a warning)."""
        self.items.append(Diagnostic(loc, message, hint, "note"))

    def werror(self) -> None:
        """`--werror`: every warning becomes an error, named `[-Werror=<name>]`."""
        self.items = [
            Diagnostic(d.loc, d.message, d.hint, "error", d.name,
                       f"-Werror={d.name}" if d.name else "-Werror")
            if d.severity == "warning" else d for d in self.items]

    def drop_warnings(self, keep: Callable[[Diagnostic], bool], start: int = 0) -> None:
        """Forget the warnings from item `start` on that `keep` refuses (suppressed ones)."""
        self.items[start:] = [d for d in self.items[start:]
                              if d.severity != "warning" or keep(d)]

    @property
    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self.items)

    def sorted(self) -> list[Diagnostic]:
        seen: set[tuple] = set()
        out = []
        for d in sorted(self.items, key=lambda d: (d.loc, d.message)):
            key = (d.loc, d.loc.length, d.message, d.hint)
            if key not in seen:
                seen.add(key)
                out.append(d)
        return out

    def render(self) -> str:
        diags = self.sorted()
        parts = [d.render(self._lines.get(d.loc.path)) for d in diags]
        n = sum(1 for d in diags if d.severity == "error")
        w = sum(1 for d in diags if d.severity == "warning")
        counts = [f"{k} {what}{'s' if k != 1 else ''}" for k, what in ((w, "warning"), (n, "error"))
                  if k]
        if counts:
            parts.append(" and ".join(counts) + " generated.")
        return "\n".join(parts)

    def raise_if_errors(self) -> None:
        if self.has_errors:
            raise UserError(self)


# Every named warning, and what it is about (docs/FORMAT.md, "Warnings", explains each).
WARNINGS: dict[str, str] = {
    "torch-namespace": "the namespace is one torch defines; the ops are added to it",
    "not-functionalizable": "torch.compile and torch.export cannot functionalize the op",
    "none-return": "'-> None' is registered as '-> ()'",
    "no-torch-func": "torch.func transforms cannot differentiate the op (autograd can)",
    "list-after-default": "a list argument without a default follows one with a default",
    "non-tensor-return": "torch.compile cannot trace an op returning a lone non-Tensor or a Dict",
    "nested-tensor-argument": "torch.compile fails on Tensors passed inside a tuple or Dict",
    "alias-on-non-tensor": "an alias annotation on a type that is not a Tensor has no effect",
    "inplace-without-mutation": "an op named like an in-place op mutates none of its arguments",
    "no-effect": "torch.compile knows of no write of an op that returns nothing and marks none",
    "empty-dtype": "empty() in a fake rule takes its dtype from an integer Tensor argument",
    "out-tag": "an `out` tag on an out= op with a functional variant breaks inductor (torch 2.13+)",
    "constant-in-backward": "a formula reads a non-differentiable output computed from the inputs",
    "backward-not-functionalizable": "torch.compile cannot differentiate the op: its backward "
                                     "calls an op torch cannot functionalize",
    "no-fake": "torch.compile and torch.export cannot trace an op without a fake kernel",
}


class UserError(Exception):
    """Bad user input, fully described by located diagnostics. Never shown as a traceback."""

    def __init__(self, diags: Diagnostics) -> None:
        super().__init__(diags.render())
        self.diags = diags


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice `word` is most likely a misspelling of, or None when nothing is close. A
    choice spelled the same but for case wins (`cpu` is `CPU`), which difflib finds too far
    for short words."""
    choices = list(choices)
    same = [c for c in choices if c.lower() == word.lower()]
    if len(same) == 1:
        return same[0]
    match = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return match[0] if match else None


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """A hint naming the closest choice, or None when nothing is close."""
    match = closest(word, choices)
    return f"did you mean '{match}'?" if match is not None else None


def one_of(choices: Iterable[str]) -> str:
    names = sorted(choices)
    return "expected one of: " + ", ".join(names)


def with_article(t: object) -> str:
    """A type (or word) with its article, for a message: 'a SymInt', 'an int[]'."""
    return f"{'an' if str(t)[:1] in 'aeiou' else 'a'} {t}"


# --------------------------------------------------------------------------------------------------
# Mapping offsets inside a YAML scalar back to the file


def scalar_locator(path: str, source: str, start_index: int, end_index: int, value: str,
                   start_line: int, start_col: int) -> Callable[[int, int], Loc]:
    """Map an offset into a scalar's decoded `value` back to a file position.

    `start_index`/`end_index` are the character offsets of the scalar's raw text in `source`
    (PyYAML's marks), `start_line`/`start_col` its 0-based mark. Decoded characters are aligned with
    the raw text greedily: quotes, escapes and line folding shift columns, and this undoes that.
    """
    raw = source[start_index:end_index]
    positions: list[int] | range
    if raw == value:
        # Plain, on one line: the alignment would map every offset to itself.
        positions = range(len(value) + 1)
    elif value and len(raw) == len(value) + 2 and raw[0] in "'\"" and raw[-1] == raw[0] \
            and value[0] != raw[0] and raw[1:-1] == value:
        # Quoted, with nothing unquoted: every offset one to the right.
        positions = range(1, len(value) + 2)
    else:
        positions = _align(raw, value)

    def locate(offset: int, length: int = 1) -> Loc:
        offset = max(0, min(offset, len(positions) - 1))
        raw_pos = start_index + positions[offset]
        line_start = source.rfind("\n", 0, raw_pos) + 1
        line = source.count("\n", 0, raw_pos) + 1
        col = raw_pos - line_start + 1
        return Loc(path, line, col, max(1, length))

    return locate


def _align(raw: str, value: str) -> list[int]:
    """Where each character of a scalar's decoded `value` (and its end) is in its `raw` text."""
    positions: list[int] = []
    j = 0
    for ch in value:
        k = j
        while k < len(raw):
            r = raw[k]
            if r == ch or (ch == " " and r in " \t\r\n"):
                break
            k += 1
        if k >= len(raw):
            k = j if j < len(raw) else max(0, len(raw) - 1)
        positions.append(k)
        j = k + 1
        # A folded line break eats the indentation that follows it.
        if ch == " " and k < len(raw) and raw[k] in "\r\n":
            while j < len(raw) and raw[j] in " \t\r\n":
                j += 1
    positions.append(min(j, len(raw)))
    return positions


def suggest(word: str, choices) -> str | None:
    """did_you_mean, skipped for long words (difflib is quadratic; no name is that long)."""
    return did_you_mean(word, choices) if len(word) <= 64 else None
