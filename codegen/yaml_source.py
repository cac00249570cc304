"""YAML with locations: an op file's text -> small nodes that know where they were written, and
typed access that reports every problem as a located diagnostic.

The first stage of loading (codegen.load decodes op entries from these nodes, codegen.load_samples
their samples; codegen.testing reads the known failures file with it).
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

import yaml
from yaml import events as ev

from codegen.diagnostics import Diagnostics, Loc, scalar_locator, suggest
from codegen.model import Located

# Op files are small; anything this large is not one, and reading it would only be slow.
MAX_FILE_BYTES = 4 * 1024 * 1024
# Deepest YAML nesting accepted. Real op files nest about 6 deep (a tensor sample's `values:` adds
# one level per dimension); libyaml's recursive composer crashes the process near 30,000.
MAX_DEPTH = 32
# Errors reported per file before giving up on it (as compilers do): a file that is not an op file
# at all would otherwise produce one error per node.
MAX_ERRORS_PER_FILE = 50

# --------------------------------------------------------------------------------------------------
# Note [Streaming op entries]
#
# Each op entry is handed on as soon as its last event is read and then dropped, so only one entry's
# nodes are alive at a time: peak memory stays near the size of the result, and a file that is not
# an op file stops at the error limit instead of being read to its end first. Entries under `ops:`
# wait for `namespace:` if the file gives it later. A YAML syntax error after some entries still
# reports theirs, as a compiler reports errors before the one that stops it.
#
# Note [Reading YAML]
#
# `yaml.compose` would give nodes with marks, but (1) libyaml's composer recurses in C and
# segfaults on input nested ~30,000 deep, (2) aliases come back as shared nodes, so an alias bomb
# is only caught after the fact, and (3) it resolves every scalar in Python, which makes it four
# times slower than the event stream it is built on. So we parse events (libyaml's parser is a state
# machine, CParser when available) and build our own small nodes: depth is checked as it grows,
# anchors, aliases and tags are refused at their own position, and plain scalars are resolved with
# YAML 1.1's core resolvers only (null/bool/int/float; no timestamps, no `<<` merges).


class Node:
    __slots__ = ("start", "end")
    kind = "node"


class Scalar(Node):
    __slots__ = ("value", "tag")

    def __init__(self, value, tag: str, start, end):
        self.value = value      # decoded Python value: str, int, float, bool or None
        self.tag = tag          # "str" | "int" | "float" | "bool" | "null"
        self.start = start
        self.end = end

    @property
    def kind(self) -> str:  # type: ignore[override]
        return _SCALAR_KINDS[self.tag]


_SCALAR_KINDS = {"str": "a string", "int": "an integer", "float": "a number",
                 "bool": "a boolean", "null": "null"}


class Seq(Node):
    __slots__ = ("items",)
    kind = "a list"

    def __init__(self, start):
        self.items: list[Node] = []
        self.start = start
        self.end = start


class Map(Node):
    __slots__ = ("pairs",)
    kind = "a mapping"

    def __init__(self, start):
        self.pairs: list[tuple[Node, Node]] = []
        self.start = start
        self.end = start


_YAML_TAG = "tag:yaml.org,2002:"
_EXPLICIT_TAGS = {_YAML_TAG + t: t for t in ("str", "int", "float", "bool", "null")}
_RESOLVED = {_YAML_TAG + t: t for t in ("int", "float", "bool", "null")}

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _implicit_resolvers() -> dict[str, list[tuple[str, re.Pattern]]]:
    table: dict[str, list[tuple[str, re.Pattern]]] = {}
    for first, entries in yaml.SafeLoader.yaml_implicit_resolvers.items():
        kept = [(_RESOLVED[tag], rx) for tag, rx in entries if tag in _RESOLVED]
        if kept:
            table[first] = kept
    return table


_RESOLVERS = _implicit_resolvers()
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_CONSTRUCT = {
    "int": _CONSTRUCTOR.construct_yaml_int,
    "float": _CONSTRUCTOR.construct_yaml_float,
}


# Note [Line breaks]
# YAML counts \r\n, \r, \n, NEL, LS and PS as line breaks; str.splitlines (which draws the source
# lines of diagnostics) also splits at \v, \f and \x1c-\x1e. We turn every YAML break into \n
# before parsing, so marks, our own line arithmetic and scalar_locator agree, and show the other
# characters as U+FFFD, so the lines drawn are the lines YAML counted. Columns do not move.
_OTHER_BREAKS = {0x85: "\n", 0x2028: "\n", 0x2029: "\n"}
_NOT_BREAKS = {c: "\ufffd" for c in (0x0B, 0x0C, 0x1C, 0x1D, 0x1E)}
_NOT_BREAKS_RE = re.compile("[\x0b\x0c\x1c-\x1e]")


def normalize_breaks(text: str) -> str:
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "\x85" in text or "\u2028" in text or "\u2029" in text:
        text = text.translate(_OTHER_BREAKS)
    return text


def for_display(text: str) -> str:
    return text.translate(_NOT_BREAKS) if _NOT_BREAKS_RE.search(text) else text


def _resolve(value: str) -> str:
    for tag, rx in _RESOLVERS.get(value[:1], ()):
        if rx.match(value):
            return tag
    return "str"


# The resolved plain scalars SafeConstructor's int and float take straight to int() and float()
# (no `_`, base prefix, leading zero or sexagesimal `:`): these skip building a yaml.ScalarNode.
_PLAIN_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)\Z")
_PLAIN_FLOAT = re.compile(r"[-+]?[0-9]+\.[0-9]*(?:[eE][-+][0-9]+)?\Z")
_BOOL_VALUES = yaml.constructor.SafeConstructor.bool_values


# A number as YAML 1.2 (and editors) read it, which YAML 1.1 (PyYAML, op files) reads as a string
# unless it has a '.' and a signed exponent: `1e-6`, `2E5`.
_FLOAT_12 = re.compile(r"([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))[eE]([-+]?)([0-9]+)\Z")


def number_hint(node: Node) -> str | None:
    """The hint for a string given where a number is expected, when YAML 1.2 reads it as one."""
    m = _FLOAT_12.match(node.value) if type(node) is Scalar and node.tag == "str" else None
    if m is None:
        return None
    mantissa, sign, exponent = m.groups()
    fixed = f"{mantissa}{'' if '.' in mantissa else '.0'}e{sign or '+'}{exponent}"
    return (f"YAML reads {node.value} as a string: a float needs a '.' and a signed exponent, "
            f"as in {fixed}")


def _construct(kind: str, value: str) -> object:
    """SafeConstructor's value of a scalar of `kind` (int, float, bool, null); it raises as
    SafeConstructor does. The spellings it takes straight to int() and float(), booleans and
    null (most scalars of an op file that are not strings) skip building a yaml.ScalarNode."""
    if kind == "int" and _PLAIN_INT.match(value):
        return int(value)
    if kind == "float" and _PLAIN_FLOAT.match(value):
        return float(value)
    if kind == "bool":
        return _BOOL_VALUES[value.lower()]
    if kind == "null":
        return None
    return _CONSTRUCT[kind](yaml.ScalarNode(_YAML_TAG + kind, value))


# What a YAML parser context that reaches the end of the file leaves open.
_UNCLOSED = {"while scanning a quoted scalar": "quote", "while parsing a flow sequence": "'['",
             "while parsing a flow mapping": "'{'"}


class ScalarLocator:
    """offset, length in a scalar's value -> Loc in its file; the mapping is built on first use
    and is not pickled (the incremental cache stores what the locator is made from)."""

    __slots__ = ("args", "_locate")

    def __init__(self, *args: Any):
        self.args = args
        self._locate: Callable[[int, int], Loc] | None = None

    def __call__(self, offset: int, length: int = 1) -> Loc:
        if self._locate is None:
            self._locate = scalar_locator(*self.args)
        return self._locate(offset, length)

    def __getstate__(self):
        return self.args

    def __setstate__(self, args) -> None:
        self.args, self._locate = args, None


class YamlFile:
    """One YAML file read into nodes: positions, errors (at most MAX_ERRORS_PER_FILE, then
    TooManyErrors), the streaming composer and typed access."""

    def __init__(self, path: str, diags: Diagnostics) -> None:
        self.path = path
        self.diags = diags
        self.text = ""
        self.ok = True
        self.first_error = len(diags.items)

    # -- positions and errors ----------------------------------------------------------------------

    def loc(self, node: Node) -> Loc:
        start, end = node.start, node.end
        if end.line == start.line:
            length = end.index - start.index
        else:
            eol = self.text.find("\n", start.index)
            length = (eol if eol >= 0 else len(self.text)) - start.index
        return Loc(self.path, start.line + 1, start.column + 1, max(1, length))

    def error(self, where: Node | Loc, message: str, hint: str | None = None) -> None:
        self.ok = False
        self.check_error_limit()
        self.diags.error(where if isinstance(where, Loc) else self.loc(where), message, hint)

    def check_error_limit(self) -> None:
        items = self.diags.items
        if len(items) - self.first_error >= MAX_ERRORS_PER_FILE and sum(
                1 for d in items[self.first_error:] if d.severity == "error") \
                >= MAX_ERRORS_PER_FILE:     # warnings and notes do not count
            raise TooManyErrors

    def locator(self, node: Scalar) -> Callable[[int, int], Loc]:
        """offset, length in the scalar's value -> Loc in the file (built on first use)."""
        return ScalarLocator(self.path, self.text, node.start.index, node.end.index, node.value,
                              node.start.line, node.start.column)

    def located(self, node: Scalar) -> Located:
        return Located(node.value, self.loc(node), self.locator(node))

    # -- reading -----------------------------------------------------------------------------------

    def read(self) -> str | None:
        """The file's text (UTF-8, line breaks normalized), or None with the error reported."""
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except IsADirectoryError:
            self.error(Loc(self.path, 1, 1), "is a directory, not an op file")
            return None
        except OSError as e:
            self.error(Loc(self.path, 1, 1), f"cannot read op file: {e.strerror or e}")
            return None
        if len(data) > MAX_FILE_BYTES:
            self.error(Loc(self.path, 1, 1),
                       f"file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB; "
                       "this is not an op file")
            return None
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        try:
            text = normalize_breaks(data.decode("utf-8"))
        except UnicodeDecodeError as e:
            prefix = normalize_breaks(data[: e.start].decode("utf-8", "replace"))
            line = prefix.count("\n") + 1
            col = len(prefix) - (prefix.rfind("\n") + 1) + 1
            self.diags.add_source(self.path, for_display(
                normalize_breaks(data.decode("utf-8", "replace"))))
            self.error(Loc(self.path, line, col),
                       f"file is not valid UTF-8 (byte 0x{data[e.start]:02x})",
                       "op files are UTF-8 text")
            return None
        self.text = text
        self.diags.add_source(self.path, for_display(text))
        return text

    def _mark_loc(self, mark) -> Loc:
        return Loc(self.path, mark.line + 1, mark.column + 1)

    def compose(self, text: str):
        """YAML text -> our nodes (Note [Reading YAML]), streamed (Note [Streaming op entries]).

        Yields ("entry", node, clean, in_ops) for each op entry as soon as it is complete (`clean`:
        no YAML error was reported while reading it; `in_ops`: it is under a mapping's `ops:`),
        ("namespace", node) for the file's `namespace:` value, and last ("root", node) -- the root
        is None when the YAML is unusable.
        """
        root: Node | None = None
        stack: list[Node] = []
        stream: Node | None = None     # the list whose items are yielded rather than kept
        docs = 0
        errors_seen = start = len(self.diags.items)
        theirs = 0      # diagnostics the consumer added while an entry was yielded
        loader = None
        try:
            # yaml.parse's loop without its generator (get_event is None after the stream's end).
            loader = _BaseLoader(text)
            get_event = loader.get_event
            while (e := get_event()) is not None:
                cls = type(e)
                if cls is ev.ScalarEvent:
                    if e.anchor is not None:
                        self._anchor(e)
                    tag = e.tag
                    value = e.value
                    if tag is None and e.implicit[0]:
                        # Only plain scalars resolve to numbers, booleans and null.
                        kind = _resolve(value)
                    elif tag is None or tag == "!":
                        kind = "str"
                    else:
                        kind = _EXPLICIT_TAGS.get(tag)
                        if kind is None:
                            self._bad_tag(e)
                            kind = "str"
                    if kind != "str":
                        try:
                            value = _construct(kind, value)
                        except (ValueError, KeyError, yaml.YAMLError):   # KeyError: !!bool maybe
                            self.error(self._event_loc(e),
                                       f"'{short(value)}' is not a valid {kind}")
                            kind, value = "str", e.value
                    node: Node = Scalar(value, kind, e.start_mark, e.end_mark)
                elif cls is ev.MappingStartEvent or cls is ev.SequenceStartEvent:
                    if e.anchor is not None:
                        self._anchor(e)
                    if e.tag is not None and e.tag != "!" and e.tag != (
                            _YAML_TAG + ("map" if cls is ev.MappingStartEvent else "seq")):
                        self._bad_tag(e)
                    if len(stack) >= MAX_DEPTH:
                        self.error(self._mark_loc(e.start_mark),
                                   f"YAML nested more than {MAX_DEPTH} levels deep",
                                   "op files need only a few levels of nesting")
                        break
                    if cls is ev.MappingStartEvent:
                        stack.append(Map(e.start_mark))
                    else:
                        seq = Seq(e.start_mark)
                        # The root list, or the list under the root mapping's `ops:`.
                        if not stack or (len(stack) == 1 and type(stack[0]) is Map
                                         and _pending_key(stack[0]) == "ops"):
                            stream = seq
                        stack.append(seq)
                    continue
                elif cls is ev.MappingEndEvent or cls is ev.SequenceEndEvent:
                    node = stack.pop()
                    node.end = e.end_mark
                elif cls is ev.AliasEvent:
                    self.error(self._event_loc(e), "YAML aliases are not allowed in op files",
                               "write the value out in full")
                    node = Scalar(None, "null", e.start_mark, e.end_mark)
                elif cls is ev.DocumentStartEvent:
                    docs += 1
                    if docs > 1:
                        self.error(self._mark_loc(e.start_mark),
                                   "an op file holds a single YAML document",
                                   "split it into several files, or merge the documents")
                        break
                    continue
                else:
                    continue
                if not stack:
                    root = node
                    continue
                parent = stack[-1]
                if parent is stream:
                    clean = len(self.diags.items) == errors_seen
                    yield "entry", node, clean, len(stack) > 1
                    theirs += len(self.diags.items) - errors_seen
                    errors_seen = len(self.diags.items)
                elif type(parent) is Seq:
                    parent.items.append(node)  # type: ignore[attr-defined]
                else:
                    pairs = parent.pairs  # type: ignore[attr-defined]
                    if pairs and pairs[-1][1] is None:
                        pairs[-1] = (pairs[-1][0], node)
                        if len(stack) == 1 and _is_str(pairs[-1][0], "namespace"):
                            before = len(self.diags.items)
                            yield "namespace", node
                            theirs += len(self.diags.items) - before
                            errors_seen += len(self.diags.items) - before
                    else:
                        pairs.append((node, None))
            else:
                # Usable unless the YAML itself was bad: what the consumer reported about the
                # entries (a bad dispatch key) leaves the rest of the file to read.
                usable = len(self.diags.items) - start == theirs
                yield "root", (root if usable else None)
                return
        except yaml.MarkedYAMLError as e:
            self._yaml_error(e)
        except yaml.reader.ReaderError as e:
            self._reader_error(e)
        except yaml.YAMLError as e:
            self.error(Loc(self.path, 1, 1), f"invalid YAML: {e}")
        finally:
            if loader is not None:
                loader.dispose()
        yield "root", None

    def _event_loc(self, e) -> Loc:
        s, t = e.start_mark, e.end_mark
        length = t.index - s.index if t.line == s.line else 1
        return Loc(self.path, s.line + 1, s.column + 1, max(1, length))

    def _anchor(self, e) -> None:
        self.error(self._mark_loc(e.start_mark), f"YAML anchors are not allowed in op files "
                   f"(found '&{e.anchor}')", "write the value out in full")

    def _bad_tag(self, e) -> None:
        tag = e.tag
        shown = "!!" + tag[len(_YAML_TAG):] if tag.startswith(_YAML_TAG) else tag
        self.error(self._mark_loc(e.start_mark), f"YAML tag '{shown}' is not allowed in op files",
                   "op files hold plain strings, numbers, booleans, lists and mappings")

    def _yaml_error(self, e: yaml.MarkedYAMLError) -> None:
        mark = e.problem_mark or e.context_mark
        problem = (e.problem or e.context or "invalid YAML").strip()
        hint = None
        if mark is not None and 0 <= mark.index < len(self.text) and self.text[mark.index] == "\t":
            problem = "tab character where YAML expects indentation or a token"
            hint = "YAML forbids tabs for indentation; indent with spaces"
        elif mark is not None and mark.index >= len(self.text.rstrip()) and \
                e.context_mark is not None and e.context in _UNCLOSED:
            ctx = e.context_mark
            hint = (f"the {_UNCLOSED[e.context]} at line {ctx.line + 1}, column "
                    f"{ctx.column + 1} is never closed")
        elif mark is not None and mark.index < len(self.text.rstrip()) and \
                (hint := self._yaml_hint(mark)) is not None:
            pass
        elif e.context and e.problem and e.context_mark is not None:
            ctx = e.context_mark
            hint = f"{e.context.strip()} (line {ctx.line + 1}, column {ctx.column + 1})"
        if mark is None:
            loc = Loc(self.path, 1, 1)
        elif mark.index >= len(self.text.rstrip()):
            # Ran off the end: point just past the last character, on a line that exists.
            end = len(self.text.rstrip())
            line = self.text.count("\n", 0, end) + 1
            loc = Loc(self.path, line, end - (self.text.rfind("\n", 0, end) + 1) + 1)
        else:
            loc = Loc(self.path, mark.line + 1, mark.column + 1)
        self.error(loc, f"invalid YAML: {problem}", hint)

    def _yaml_hint(self, mark) -> str | None:
        """What most likely went wrong where the YAML parser stopped, for the mistakes people
        make in op files: a key indented unlike its neighbours, a quote inside a quoted value,
        ': ' inside a plain value. None when it looks like none of these."""
        lines = self.text.split("\n")
        if not 0 <= mark.line < len(lines):
            return None
        line = lines[mark.line]
        col = mark.column
        ch = line[col] if col < len(line) else ""
        start = len(line) - len(line.lstrip(" "))
        before = line[start:col]
        # A closed quoted value followed by more text: a quote inside it ended it early.
        stripped = line[:col].rstrip()
        if stripped.endswith(('"', "'")) and ch and ch not in "#,]}":
            q = stripped[-1]
            opened = stripped.find(q)
            if opened < len(stripped) - 1:
                inside = (r'write \" for a quote inside "...", or quote the value with '
                          "'...'" if q == '"' else
                          "write '' for a quote inside '...', or quote the value with \"...\"")
                return (f"the quoted value that starts in column {opened + 1} ends at the {q} in "
                        f"column {len(stripped)}; {inside}")
        above = next((i for i in range(mark.line - 1, -1, -1)
                      if lines[i].strip() and not lines[i].lstrip().startswith("#")), None)
        if above is None:
            return None
        # Where the line above starts its key: after its indentation and any `- `.
        prev = lines[above]
        key_col = len(prev) - len(prev.lstrip(" "))
        while prev[key_col:key_col + 2] == "- ":
            key_col += 2
            while key_col < len(prev) and prev[key_col] == " ":
                key_col += 1
        at_start = col == start
        key_then_colon = col > start and ch == ":" and " " not in before \
            and start > key_col
        if (at_start or key_then_colon) and start != key_col:
            where = (f"line {mark.line + 1} starts in column {start + 1}, "
                     f"{'right' if start > key_col else 'left'} of the key on line {above + 1} "
                     f"(column {key_col + 1})")
            if start > key_col:
                return (f"{where}, so YAML reads it as more of that key's value; the keys of "
                        "one mapping start in the same column")
            return f"{where}; the keys of one mapping start in the same column"
        if col > start and ch == ":" and " " in before.partition(":")[2].strip():
            key = before.partition(":")[0]
            value = line[start + len(key) + 1:].strip()
            q = "'" if '"' in value else '"'
            example = f", {key}: {q}{value}{q}" if q not in value else ""
            return (f"a plain value cannot contain ': ' (YAML reads it as another key): quote "
                    f"the value{example}")
        return None

    def _reader_error(self, e) -> None:
        pos = max(0, min(int(getattr(e, "position", 0) or 0), len(self.text)))
        line = self.text.count("\n", 0, pos) + 1
        col = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        ch = e.character
        code = ord(ch) if isinstance(ch, str) and ch else ch
        what = f"U+{code:04X}" if isinstance(code, int) else repr(ch)
        self.error(Loc(self.path, line, col),
                   f"invalid YAML: control character {what} is not allowed",
                   "op files are plain text")

    # -- typed access ------------------------------------------------------------------------------

    def mapping(self, node: Node, what: str, allowed: tuple[str, ...] | None
                ) -> dict[str, tuple[Scalar, Node]] | None:
        """A mapping's string keys -> (key node, value node); errors for duplicates and (when
        `allowed` is given) unknown keys."""
        if type(node) is not Map:
            self.error(node, f"expected {what} (a mapping), got {node.kind}")
            return None
        out: dict[str, tuple[Scalar, Node]] = {}
        for key, value in node.pairs:  # type: ignore[attr-defined]
            if type(key) is not Scalar or key.tag not in ("str", "int", "bool", "float"):
                self.error(key, f"keys of {what} must be strings, got {key.kind}")
                continue
            # `1:` or `yes:` as a key: keep what was written, for the message.
            name = key.value if key.tag == "str" else self.text[key.start.index:key.end.index]
            if name in out:
                first = out[name][0]
                self.error(key, f"duplicate key '{short(name)}' in {what}",
                           f"first given at line {first.start.line + 1}")
                continue
            if allowed is not None and name not in allowed:
                hint = suggest(name, allowed)
                self.error(key, f"unknown key '{short(name)}' in {what}; allowed keys: "
                           + ", ".join(allowed), hint)
                continue
            out[name] = (key, value)
        return out

    def string(self, node: Node, what: str) -> str | None:
        if type(node) is Scalar and node.tag == "str":
            return node.value  # type: ignore[attr-defined]
        hint = None
        if type(node) is Scalar and node.tag != "null":
            hint = "quote it to make it a string"
        self.error(node, f"expected a string for {what}, got {node.kind}", hint)
        return None

    def sequence(self, node: Node, what: str, hint: str | None = None) -> list[Node] | None:
        if type(node) is Seq:
            return node.items  # type: ignore[attr-defined]
        self.error(node, f"expected a list for {what}, got {node.kind}", hint)
        return None

    def boolean(self, node: Node, what: str) -> bool | None:
        if type(node) is Scalar and node.tag == "bool":
            return node.value  # type: ignore[attr-defined]
        self.error(node, f"expected true or false for {what}, got {node.kind}")
        return None

    def number(self, node: Node, what: str) -> float | None:
        if type(node) is Scalar and node.tag in ("int", "float"):
            value = node.value  # type: ignore[attr-defined]
            if isinstance(value, float) and not math.isfinite(value):
                self.error(node, f"{what} must be a finite number")
                return None
            return value
        self.error(node, f"expected a number for {what}, got {node.kind}", number_hint(node))
        return None


class TooManyErrors(Exception):
    pass


def _pending_key(m: Node) -> str | None:
    """The key of a mapping whose value is being read, if it is a string."""
    pairs = m.pairs  # type: ignore[attr-defined]
    if pairs and pairs[-1][1] is None and _is_str(pairs[-1][0]):
        return pairs[-1][0].value
    return None


def _is_str(node: Node, value: str | None = None) -> bool:
    return type(node) is Scalar and node.tag == "str" and (  # type: ignore[attr-defined]
        value is None or node.value == value)  # type: ignore[attr-defined]


def short(text: str, limit: int = 60) -> str:
    """User text quoted in a message, cut short: the caret already shows where it is."""
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."
