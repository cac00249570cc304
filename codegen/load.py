"""Op files (YAML, see docs/FORMAT.md) -> `OpLibrary` records, every problem a located diagnostic.

The YAML is read as a stream of parser events, never constructed into Python objects by PyYAML:
nothing in an op file can run code or allocate without bound (Note [Reading YAML]). Each op entry's
`func:` goes through `codegen.parse_schema`, whose error offsets are mapped back into the YAML file
so the caret lands under the offending character; `codegen.verify` then checks the schemas, and
`codegen.shape` / `codegen.formulas` parse fake rules and derivative formulas.

Every error of every file is collected; `load_library` raises one `UserError` carrying all of them.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Any, Callable

import yaml
from yaml import events as ev

from codegen import abi as abi_mod
from codegen import enums, verify
from codegen.abi import Abi
from codegen.diagnostics import WARNINGS, Diagnostics, Loc, UserError, scalar_locator
from codegen.escape import first_unprintable
from codegen.model import (
    AutocastSpec,
    BaseTy,
    BaseType,
    CppKernel,
    DerivativesSpec,
    DispatchKey,
    FunctionSchema,
    GradcheckSpec,
    Kernel,
    ListType,
    Located,
    Op,
    OperatorName,
    OpFile,
    OpLibrary,
    OptionalType,
    PyRef,
    Sample,
    SampleValue,
    SymDim,
    TensorSample,
    Type,
    TypeVar,
    VmapSpec,
)
from codegen.parse import SchemaSyntaxError, parse_schema
from codegen.tags import TAGS, shape_tag

# Op files are small; anything this large is not one, and reading it would only be slow.
MAX_FILE_BYTES = 4 * 1024 * 1024
# Deepest YAML nesting accepted. Real op files nest about 6 deep (a tensor sample's `values:` adds
# one level per dimension); libyaml's recursive composer crashes the process near 30,000.
MAX_DEPTH = 32
# Errors reported per file before giving up on it (as compilers do): a file that is not an op file
# at all would otherwise produce one error per node.
MAX_ERRORS_PER_FILE = 50

OP_KEYS = ("func", "doc", "tags", "dispatch", "fake", "derivatives", "samples", "gradcheck",
           "autocast", "vmap", "suppress")
FILE_KEYS = ("namespace", "ops", "suppress", "conventions", "abi", "min_torch")
CONVENTIONS = ("aten",)
TENSOR_SAMPLE_KEYS = ("shape", "values", "dtype", "requires_grad", "low", "high")
AUTOCAST_KEYS = ("device_type", "cast_inputs")
GRADCHECK_KEYS = ("dtype", "atol", "rtol", "eps")
# The per-library failures file beside the op files (codegen.testing reads it): not an op file.
FAILURES_FILE = "sample_failures.yaml"
AUTOCAST_DEVICES = ("cuda", "cpu")
VMAP_KINDS = ("pointwise", "leading")
# `leading(x, residual)`: the Tensor inputs whose dim 0 holds the rows.
_LEADING_ROWS = re.compile(r"leading\s*\(\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*\)\Z",
                           re.ASCII)

# torch dtype names a sample or autocast spec may use (tests/test_load.py checks each is a
# torch.dtype): the canonical names plus the common aliases.
DTYPES = frozenset({
    "float16", "bfloat16", "float32", "float64", "complex32", "complex64", "complex128",
    "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "bool",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "half", "float", "double", "short", "int", "long", "cfloat", "cdouble", "chalf",
})
FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "half", "float", "double"})
COMPLEX_DTYPES = frozenset({"complex32", "complex64", "complex128", "cfloat", "cdouble", "chalf"})

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# A named size in a sample: `N` (its value given elsewhere in the sample) or `N=6`.
_DIM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\s*=\s*(-?[0-9]+))?\Z")
DIM_HINT = "a size is an integer, or a named size: N (symbolic), N=6 (with its value)"
_CPP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*\Z")
_PY_REF = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"
                     r":([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\Z")

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


class _Node:
    __slots__ = ("start", "end")
    kind = "node"


class _Scalar(_Node):
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


class _Seq(_Node):
    __slots__ = ("items",)
    kind = "a list"

    def __init__(self, start):
        self.items: list[_Node] = []
        self.start = start
        self.end = start


class _Map(_Node):
    __slots__ = ("pairs",)
    kind = "a mapping"

    def __init__(self, start):
        self.pairs: list[tuple[_Node, _Node]] = []
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
    "bool": _CONSTRUCTOR.construct_yaml_bool,
    "null": _CONSTRUCTOR.construct_yaml_null,
}


# Note [Line breaks]
# YAML counts \r\n, \r, \n, NEL, LS and PS as line breaks; str.splitlines (which draws the source
# lines of diagnostics) also splits at \v, \f and \x1c-\x1e. We turn every YAML break into \n
# before parsing, so marks, our own line arithmetic and scalar_locator agree, and show the other
# characters as U+FFFD, so the lines drawn are the lines YAML counted. Columns do not move.
_OTHER_BREAKS = {0x85: "\n", 0x2028: "\n", 0x2029: "\n"}
_NOT_BREAKS = {c: "\ufffd" for c in (0x0B, 0x0C, 0x1C, 0x1D, 0x1E)}
_NOT_BREAKS_RE = re.compile("[\x0b\x0c\x1c-\x1e]")


def _normalize_breaks(text: str) -> str:
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "\x85" in text or "\u2028" in text or "\u2029" in text:
        text = text.translate(_OTHER_BREAKS)
    return text


def _for_display(text: str) -> str:
    return text.translate(_NOT_BREAKS) if _NOT_BREAKS_RE.search(text) else text


def _resolve(value: str) -> str:
    for tag, rx in _RESOLVERS.get(value[:1], ()):
        if rx.match(value):
            return tag
    return "str"


# --------------------------------------------------------------------------------------------------
# One file


class _FileLoader:
    def __init__(self, path: str, diags: Diagnostics, rules) -> None:
        self.path = path
        self.diags = diags
        self.rules = rules
        self.text = ""
        self.ok = True
        self.bad_namespace = False
        self.first_error = len(diags.items)
        # The sample being read: named size -> (value, where given), and the uses of each.
        self.dims: dict[str, tuple[int, _Node]] = {}
        self.dim_uses: list[tuple[str, _Node]] = []
        # torchgen conventions the file's ops break (Note [Aten conventions] in codegen.verify).
        self.conventions: list[verify.Convention] = []

    # -- positions and errors ----------------------------------------------------------------------

    def loc(self, node: _Node) -> Loc:
        start, end = node.start, node.end
        if end.line == start.line:
            length = end.index - start.index
        else:
            eol = self.text.find("\n", start.index)
            length = (eol if eol >= 0 else len(self.text)) - start.index
        return Loc(self.path, start.line + 1, start.column + 1, max(1, length))

    def error(self, where: _Node | Loc, message: str, hint: str | None = None) -> None:
        self.ok = False
        self.check_error_limit()
        self.diags.error(where if isinstance(where, Loc) else self.loc(where), message, hint)

    def check_error_limit(self) -> None:
        if len(self.diags.items) - self.first_error >= MAX_ERRORS_PER_FILE:
            raise _TooManyErrors

    def locator(self, node: _Scalar) -> Callable[[int, int], Loc]:
        """offset, length in the scalar's value -> Loc in the file (built on first use)."""
        cache: list[Callable[[int, int], Loc]] = []
        path, text, value = self.path, self.text, node.value
        start, end = node.start, node.end

        def locate(offset: int, length: int = 1) -> Loc:
            if not cache:
                cache.append(scalar_locator(path, text, start.index, end.index, value,
                                            start.line, start.column))
            return cache[0](offset, length)

        return locate

    def located(self, node: _Scalar) -> Located:
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
            text = _normalize_breaks(data.decode("utf-8"))
        except UnicodeDecodeError as e:
            prefix = _normalize_breaks(data[: e.start].decode("utf-8", "replace"))
            line = prefix.count("\n") + 1
            col = len(prefix) - (prefix.rfind("\n") + 1) + 1
            self.diags.add_source(self.path, _for_display(
                _normalize_breaks(data.decode("utf-8", "replace"))))
            self.error(Loc(self.path, line, col),
                       f"file is not valid UTF-8 (byte 0x{data[e.start]:02x})",
                       "op files are UTF-8 text")
            return None
        self.text = text
        self.diags.add_source(self.path, _for_display(text))
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
        root: _Node | None = None
        stack: list[_Node] = []
        stream: _Node | None = None     # the list whose items are yielded rather than kept
        docs = 0
        errors_seen = len(self.diags.items)
        try:
            for e in yaml.parse(text, Loader=_BaseLoader):
                cls = type(e)
                if cls is ev.ScalarEvent:
                    if e.anchor is not None:
                        self._anchor(e)
                    tag = e.tag
                    value = e.value
                    if tag is None or tag == "!":
                        # Only plain scalars resolve to numbers, booleans and null.
                        kind = _resolve(value) if tag is None and e.implicit[0] else "str"
                    else:
                        kind = _EXPLICIT_TAGS.get(tag)
                        if kind is None:
                            self._bad_tag(e)
                            kind = "str"
                    if kind != "str":
                        try:
                            value = _CONSTRUCT[kind](yaml.ScalarNode(tag, value))
                        except (ValueError, yaml.YAMLError):
                            self.error(self._event_loc(e),
                                       f"'{_short(value)}' is not a valid {kind}")
                            kind, value = "str", e.value
                    node: _Node = _Scalar(value, kind, e.start_mark, e.end_mark)
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
                        stack.append(_Map(e.start_mark))
                    else:
                        seq = _Seq(e.start_mark)
                        # The root list, or the list under the root mapping's `ops:`.
                        if not stack or (len(stack) == 1 and type(stack[0]) is _Map
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
                    node = _Scalar(None, "null", e.start_mark, e.end_mark)
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
                    errors_seen = len(self.diags.items)
                elif type(parent) is _Seq:
                    parent.items.append(node)  # type: ignore[attr-defined]
                else:
                    pairs = parent.pairs  # type: ignore[attr-defined]
                    if pairs and pairs[-1][1] is None:
                        pairs[-1] = (pairs[-1][0], node)
                        if len(stack) == 1 and _is_str(pairs[-1][0], "namespace"):
                            yield "namespace", node
                    else:
                        pairs.append((node, None))
            else:
                yield "root", (root if self.ok else None)
                return
        except yaml.MarkedYAMLError as e:
            self._yaml_error(e)
        except yaml.reader.ReaderError as e:
            self._reader_error(e)
        except yaml.YAMLError as e:
            self.error(Loc(self.path, 1, 1), f"invalid YAML: {e}")
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

    def mapping(self, node: _Node, what: str, allowed: tuple[str, ...] | None
                ) -> dict[str, tuple[_Scalar, _Node]] | None:
        """A mapping's string keys -> (key node, value node); errors for duplicates and (when
        `allowed` is given) unknown keys."""
        if type(node) is not _Map:
            self.error(node, f"expected {what} (a mapping), got {node.kind}")
            return None
        out: dict[str, tuple[_Scalar, _Node]] = {}
        for key, value in node.pairs:  # type: ignore[attr-defined]
            if type(key) is not _Scalar or key.tag not in ("str", "int", "bool", "float"):
                self.error(key, f"keys of {what} must be strings, got {key.kind}")
                continue
            # `1:` or `yes:` as a key: keep what was written, for the message.
            name = key.value if key.tag == "str" else self.text[key.start.index:key.end.index]
            if name in out:
                first = out[name][0]
                self.error(key, f"duplicate key '{_short(name)}' in {what}",
                           f"first given at line {first.start.line + 1}")
                continue
            if allowed is not None and name not in allowed:
                hint = verify.suggest(name, allowed)
                self.error(key, f"unknown key '{_short(name)}' in {what}; allowed keys: "
                           + ", ".join(allowed), hint)
                continue
            out[name] = (key, value)
        return out

    def string(self, node: _Node, what: str) -> str | None:
        if type(node) is _Scalar and node.tag == "str":
            return node.value  # type: ignore[attr-defined]
        hint = None
        if type(node) is _Scalar and node.tag != "null":
            hint = "quote it to make it a string"
        self.error(node, f"expected a string for {what}, got {node.kind}", hint)
        return None

    def sequence(self, node: _Node, what: str) -> list[_Node] | None:
        if type(node) is _Seq:
            return node.items  # type: ignore[attr-defined]
        self.error(node, f"expected a list for {what}, got {node.kind}")
        return None

    def boolean(self, node: _Node, what: str) -> bool | None:
        if type(node) is _Scalar and node.tag == "bool":
            return node.value  # type: ignore[attr-defined]
        self.error(node, f"expected true or false for {what}, got {node.kind}")
        return None

    def number(self, node: _Node, what: str) -> float | None:
        if type(node) is _Scalar and node.tag in ("int", "float"):
            value = node.value  # type: ignore[attr-defined]
            if isinstance(value, float) and not math.isfinite(value):
                self.error(node, f"{what} must be a finite number")
                return None
            return value
        self.error(node, f"expected a number for {what}, got {node.kind}")
        return None

    # -- the file ----------------------------------------------------------------------------------

    def load(self) -> OpFile | None:
        try:
            return self._load()
        except _TooManyErrors:
            last = self.diags.items[-1].loc
            self.diags.error(Loc(self.path, last.line, last.col, last.length),
                             f"too many errors in this file; stopping after "
                             f"{MAX_ERRORS_PER_FILE}")
            return None

    def _load(self) -> OpFile | None:
        text = self.read()
        if text is None:
            return None
        namespace: str | None = None
        namespace_loc: Loc | None = None
        namespace_known = False
        waiting: list[tuple[_Node, bool]] = []   # entries read before the file's namespace
        ops: list[Op] = []
        root: _Node | None = None
        abi: Abi | None = None
        for item in self.compose(text):
            if item[0] == "entry":
                _, node, clean, in_ops = item
                if namespace_known or not in_ops:
                    self.add_op(ops, node, clean, namespace)
                else:
                    waiting.append((node, clean))
            elif item[0] == "namespace":
                if not namespace_known:
                    namespace = self.namespace(item[1])
                    namespace_loc = self.loc(item[1])
                    namespace_known = True
                    for node, clean in waiting:
                        self.add_op(ops, node, clean, namespace)
                    waiting.clear()
            else:
                root = item[1]
        if root is None:
            return None
        if type(root) is _Scalar and root.tag == "null":  # type: ignore[attr-defined]
            return OpFile(self.path, None, ())
        suppress: frozenset[str] = frozenset()
        conventions: str | None = None
        if type(root) is _Map:
            top = self.mapping(root, "the op file", FILE_KEYS)
            if top is None:
                return None
            if "ops" not in top:
                if self.ok:  # else a misspelled `ops:` was just reported
                    self.error(Loc(self.path, root.start.line + 1, root.start.column + 1),
                               "op file has no 'ops:' list", "list the op entries under 'ops:'")
                return None
            self.sequence(top["ops"][1], "'ops'")
            if "suppress" in top:
                suppress = self.suppress(top["suppress"][1])
            if "conventions" in top:
                conventions = self.conventions_key(top["conventions"][1])
            abi = self.abi(root, top)
        elif type(root) is not _Seq:
            self.error(root, f"expected a list of op entries or a mapping with 'ops:', "
                       f"got {root.kind}")
            return None
        for node, clean in waiting:  # a mapping without `namespace:`
            self.add_op(ops, node, clean, namespace)
        warnings = self.settle_warnings(ops, suppress, conventions)
        if abi is not None:
            ops = [dataclasses.replace(op, abi=abi) for op in ops]
        return OpFile(self.path, namespace, tuple(ops), _for_display(self.text), namespace_loc,
                      suppress, conventions, warnings, abi=abi)

    def abi(self, root: _Node, top: dict) -> Abi | None:
        """The file's `abi:` and `min_torch:` (Note [ABI choice] in codegen/abi.py)."""
        kind = abi_mod.FULL
        if "abi" in top:
            node = top["abi"][1]
            kind = self.string(node, "'abi'") or ""
            if kind and kind not in abi_mod.KINDS:
                self.error(node, f"unknown ABI '{_short(kind)}'; 'abi' is one of: "
                           + ", ".join(abi_mod.KINDS),
                           verify.suggest(kind, abi_mod.KINDS)
                           or "'stable' builds on torch's stable ABI, 'full' (the default) on "
                           "the whole libtorch C++ API")
                return None
        if kind != abi_mod.STABLE:
            if kind and "min_torch" in top:
                key = top["min_torch"][0]
                self.error(key, "'min_torch' applies to 'abi: stable' only: a library on the "
                           "full libtorch API loads on exactly the torch it was built with",
                           "add 'abi: stable', or remove 'min_torch'")
            return None
        first = abi_mod.version_text(abi_mod.FIRST_STABLE)
        node = top["abi"][1]
        if "min_torch" not in top:
            self.error(node, "'abi: stable' needs 'min_torch': the oldest torch the library "
                       "must load on", f'add \'min_torch: "{first}"\' (or newer) beside it')
            return None
        vnode = top["min_torch"][1]
        if type(vnode) is _Scalar and vnode.tag in ("int", "float"):
            written = self.text[vnode.start.index:vnode.end.index]
            self.error(vnode, f"min_torch {written} is a number to YAML (2.10 reads as 2.1); "
                       "write the version as a string", f'quote it: min_torch: "{written}"')
            return None
        text = self.string(vnode, "'min_torch'")
        if text is None:
            return None
        version = abi_mod.parse_version(text)
        if version is None:
            self.error(vnode, f"min_torch '{_short(text)}' is not a torch version of the form "
                       "MAJOR.MINOR", f'write e.g. "{first}"')
            return None
        if version < abi_mod.FIRST_STABLE:
            self.error(vnode, f"min_torch {text} is older than torch {first}, the first release "
                       "whose stable ABI the generator targets",
                       f'use "{first}" or newer, or build on the full API (remove \'abi: '
                       "stable')")
            return None
        return Abi(version, self.loc(node))


    def settle_warnings(self, ops: list[Op], suppress: frozenset[str],
                        conventions: str | None) -> tuple:
        """Apply the file's `suppress:` and `conventions:` (known only once the file is read, as
        they may follow `ops:`) to what its ops reported; the file's remaining warnings."""
        if conventions == "aten":
            for c in self.conventions:
                c.report(self.diags)
                self.ok = False
        self.diags.drop_warnings(lambda d: d.name not in suppress, self.first_error)
        if suppress:
            ops[:] = [dataclasses.replace(op, suppress=op.suppress | suppress) for op in ops]
        return tuple(d for d in self.diags.items[self.first_error:] if d.severity == "warning")

    def suppress(self, node: _Node) -> frozenset[str]:
        """`suppress:` a warning name or a list of them."""
        items = [node] if type(node) is _Scalar and node.tag == "str" else self.sequence(
            node, "'suppress'")
        out: set[str] = set()
        for item in items or ():
            name = self.string(item, "a warning name")
            if name is None:
                continue
            if name not in WARNINGS:
                bare = name[2:] if name.startswith("-W") else name
                hint = (f"write the name without '-W': {bare}" if bare in WARNINGS
                        else verify.suggest(name, WARNINGS)
                        or "known warnings: " + ", ".join(sorted(WARNINGS)))
                self.error(item, f"unknown warning '{_short(name)}'", hint)
            else:
                out.add(name)
        return frozenset(out)

    def conventions_key(self, node: _Node) -> str | None:
        value = self.string(node, "'conventions'")
        if value is not None and value not in CONVENTIONS:
            self.error(node, f"unknown conventions '{_short(value)}'",
                       "the only conventions are 'aten' (torchgen's rules, as errors)")
            return None
        return value

    def namespace(self, node: _Node) -> str | None:
        namespace = self.string(node, "'namespace'")
        if namespace is not None and not IDENT.match(namespace):
            self.error(node, f"namespace '{_short(namespace)}' is not an identifier",
                       "use letters, digits and '_', not starting with a digit")
            namespace = None
        if namespace is None:
            # Reported once here, not again for every op that relies on it.
            self.bad_namespace = True
        return namespace

    def add_op(self, ops: list[Op], node: _Node, clean: bool, namespace: str | None) -> None:
        # An entry with a YAML error (alias, tag, ...) was reported already; reading it further
        # would only report the placeholder that replaced the bad part.
        if clean:
            op = self.op(node, namespace)
            if op is not None:
                ops.append(op)
        self.check_error_limit()  # verify, shape and formulas report straight to diags

    # -- one op ------------------------------------------------------------------------------------

    def op(self, node: _Node, namespace: str | None) -> Op | None:
        fields = self.mapping(node, "an op entry", OP_KEYS)
        if fields is None:
            return None
        if "func" not in fields:
            self.error(Loc(self.path, node.start.line + 1, node.start.column + 1, 1),
                       "op entry has no 'func:'", "every op entry starts with 'func: <schema>'")
            return None
        func_node = fields["func"][1]
        text = self.string(func_node, "'func'")
        if text is None:
            return None
        func = self.located(func_node)  # type: ignore[arg-type]
        schema = self.schema(func)
        if schema is None:
            return None
        if schema.name.namespace is None:
            if namespace is None and self.bad_namespace:
                return None
            if namespace is None:
                name = schema.name
                length = (name.span.end - name.span.start) if name.span else len(name.name)
                self.error(func.at(name.span.start if name.span else 0, length),
                           f"op '{name}' has no namespace",
                           f"write 'my_ns::{name.name}', or give the file a 'namespace:' "
                           "(mapping form: namespace: my_ns, ops: [...])")
                return None
            old = schema.name
            schema = schema.with_name(OperatorName(namespace, old.name, old.overload, old.span))

        changes: dict[str, object] = {}
        if "doc" in fields:
            doc = self.string(fields["doc"][1], "'doc'")
            if doc is not None:
                changes["doc"] = doc
        if "tags" in fields:
            changes["tags"] = self.tags(fields["tags"][1])
        if "dispatch" in fields:
            changes["dispatch"] = self.dispatch(fields["dispatch"][1])
        if "samples" in fields:
            changes["samples"] = self.samples(fields["samples"][1], schema)
        if "gradcheck" in fields:
            changes["gradcheck"] = self.gradcheck(fields["gradcheck"][1])
        if "autocast" in fields:
            changes["autocast"] = self.autocast(fields["autocast"][1])
        if "vmap" in fields:
            changes["vmap"] = self.vmap(fields["vmap"][1])
        if "suppress" in fields:
            changes["suppress"] = self.suppress(fields["suppress"][1])
        op = Op(schema=schema, loc=func.loc, func=func, **changes)  # type: ignore[arg-type]
        op = self.none_return(op)

        fake_loc = self.loc(fields["fake"][1]) if "fake" in fields else None
        schema_ok = verify.verify_op(op, self.diags, self.rules, fake_loc=fake_loc,
                                     conventions=self.conventions)
        if not schema_ok:
            self.ok = False
        # `out` needs the whole library (Note [The out tag]): load_library adds it.
        tag = shape_tag(op.schema) if schema_ok else None
        if tag == "inplace" and not {"inplace", "out"} & set(op.tags):
            op = dataclasses.replace(op, tags=op.tags + (tag,))
        # Fake rules and formulas read the schema; on a broken one they would only add noise.
        if "fake" in fields and schema_ok:
            fake = self.fake(fields["fake"][1], schema)
            if fake is not None:
                op = dataclasses.replace(op, fake=fake)
        if "derivatives" in fields and schema_ok:
            derivatives = self.derivatives(fields["derivatives"][1], schema)
            if derivatives is not None:
                op = dataclasses.replace(op, derivatives=derivatives)
        return op

    def none_return(self, op: Op) -> Op:
        """`-> None` (torch reads `-> NoneType`: one return of type NoneType) is registered as
        `-> ()`: c10 binds no C++ kernel to a NoneType return (a `void` kernel means `-> ()`), and
        the op returns None in Python either way."""
        s = op.schema
        if len(s.returns) != 1 or s.returns[0].name is not None:
            return op
        t = s.returns[0].type
        if not ((isinstance(t, BaseType) and t.name is BaseTy.NoneType and t.alias is None)
                or (isinstance(t, TypeVar) and t.name == "None" and t.alias is None)):
            return op
        span = s.returns[0].type_span or s.returns[0].span
        loc = op.func.at(span.start, span.end - span.start) if span and op.func else op.loc
        # As written: `None` and `NoneType` are one type to torch (and to the IR).
        written = op.func.text[span.start:span.end] if span and op.func else str(t)
        self.diags.warning(loc, f"'-> {written}' is registered as '-> ()': C++ kernels cannot "
                           "return NoneType, and the op returns None in Python either way",
                           "write '-> ()'", name="none-return", suppress=op.suppress)
        schema = FunctionSchema(s.name, s.arguments, (), s.is_vararg, s.is_varret, s.span)
        return dataclasses.replace(op, schema=schema)

    def schema(self, func: Located) -> FunctionSchema | None:
        try:
            return parse_schema(func.text)
        except SchemaSyntaxError as e:
            self.error(func.at(e.offset, e.length), e.message, e.hint)
            return None

    def tags(self, node: _Node) -> tuple[str, ...]:
        items = [node] if type(node) is _Scalar and node.tag == "str" else self.sequence(
            node, "'tags'")
        out: list[str] = []
        for item in items or ():
            tag = self.string(item, "a tag")
            if tag is None:
                continue
            if tag not in TAGS:
                self.error(item, f"unknown tag '{_short(tag)}'",
                           verify.suggest(tag, TAGS) or "see torch.Tag for the known tags")
            elif tag in out:
                self.error(item, f"tag '{tag}' given twice")
            else:
                out.append(tag)
        return tuple(out)

    def kernel(self, node: _Node, what: str) -> Kernel | None:
        text = self.string(node, what)
        if text is None:
            return None
        loc = self.loc(node)
        m = _PY_REF.match(text)
        if m:
            return PyRef(m.group(1), m.group(2), loc)
        if _CPP_NAME.match(text):
            return CppKernel(text, loc)
        self.error(node, f"'{_short(text)}' is neither a C++ function name nor a Python callable",
                   "write a C++ name (my_kernel, or other_ns::my_kernel) or "
                   "package.module:function")
        return None

    def dispatch(self, node: _Node) -> tuple[tuple[DispatchKey, Kernel], ...]:
        fields = self.mapping(node, "'dispatch'", None)
        out: list[tuple[DispatchKey, Kernel]] = []
        for name, (key, value) in (fields or {}).items():
            keys = [k.strip() for k in name.split(",")] if "," in name else [name]
            kernel = self.kernel(value, f"the {name} kernel")
            for k in keys:
                try:
                    dk = DispatchKey(k)
                except ValueError:
                    names = [d.value for d in DispatchKey]
                    self.error(key, f"unknown dispatch key '{_short(k)}'; allowed keys: "
                               + ", ".join(names), verify.suggest(k, names))
                    continue
                if any(d is dk for d, _ in out):
                    self.error(key, f"dispatch key '{k}' given twice")
                    continue
                if kernel is not None:
                    out.append((dk, kernel))
        return tuple(out)

    def fake(self, node: _Node, schema: FunctionSchema):
        text = self.string(node, "'fake'")
        if text is None:
            return None
        m = _PY_REF.match(text.strip())
        if m:
            return PyRef(m.group(1), m.group(2), self.loc(node))
        located = self.located(node)  # type: ignore[arg-type]
        # Imported on first use: loading the rule grammar costs ~50 ms that files without
        # fake rules need not pay.
        from codegen.shape import parse_fake_rule

        n = len(self.diags.items)
        rule = parse_fake_rule(located, schema, self.diags)
        if len(self.diags.items) != n:
            self.ok = False
        return rule

    def derivatives(self, node: _Node, schema: FunctionSchema):
        fields = self.mapping(node, "'derivatives'", None)
        if fields is None:
            return None
        n_errors = len(self.diags.items)
        formulas: list[tuple[tuple[str, ...], Located]] = []
        output_differentiability: tuple[bool, ...] | None = None
        for name, (key, value) in fields.items():
            if name == "output_differentiability":
                items = self.sequence(value, "'output_differentiability'")
                if items is not None:
                    flags = [self.boolean(i, "an entry of 'output_differentiability'")
                             for i in items]
                    if all(f is not None for f in flags):
                        output_differentiability = tuple(flags)  # type: ignore[arg-type]
                continue
            names = tuple(n.strip() for n in name.split(","))
            bad = [n for n in names if not IDENT.match(n)]
            if bad:
                self.error(key, f"'{_short(name)}' is not an input name or a comma-separated "
                           "list of them")
                continue
            if self.string(value, f"the derivative formula for '{name}'") is None:
                continue
            formulas.append((names, self.located(value)))  # type: ignore[arg-type]
        spec = DerivativesSpec(tuple(formulas), output_differentiability, self.loc(node))
        if len(self.diags.items) != n_errors:
            return None  # a partial spec would only draw "no formula for x" errors
        from codegen.formulas import parse_derivatives  # on first use, as for fake rules

        n = len(self.diags.items)
        result = parse_derivatives(spec, schema, self.diags)
        if len(self.diags.items) != n:
            self.ok = False
        return result

    def autocast(self, node: _Node) -> AutocastSpec | None:
        fields = self.mapping(node, "'autocast'", AUTOCAST_KEYS)
        if fields is None:
            return None
        for key in AUTOCAST_KEYS:
            if key not in fields:
                self.error(Loc(self.path, node.start.line + 1, node.start.column + 1),
                           f"'autocast' needs '{key}:'",
                           "autocast: {device_type: cuda, cast_inputs: float16}")
                return None
        device = self.string(fields["device_type"][1], "'device_type'")
        if device is not None and device not in AUTOCAST_DEVICES:
            self.error(fields["device_type"][1], f"unknown autocast device type '{_short(device)}'",
                       "expected one of: " + ", ".join(AUTOCAST_DEVICES))
            device = None
        dtype = self.dtype(fields["cast_inputs"][1], "'cast_inputs'")
        if dtype is not None and dtype not in FLOAT_DTYPES:
            self.error(fields["cast_inputs"][1],
                       f"autocast casts inputs to a floating dtype, not '{dtype}'",
                       "for example float16 or bfloat16")
            dtype = None
        if device is None or dtype is None:
            return None
        return AutocastSpec(device, dtype, self.loc(node))

    def gradcheck(self, node: _Node) -> GradcheckSpec | None:
        fields = self.mapping(node, "'gradcheck'", GRADCHECK_KEYS)
        if fields is None:
            return None
        values: dict[str, object] = {}
        if "dtype" in fields:
            dtype = self.dtype(fields["dtype"][1], "'dtype'")
            if dtype is None:
                return None
            if dtype not in FLOAT_DTYPES and dtype not in COMPLEX_DTYPES:
                self.error(fields["dtype"][1], f"gradients are checked in a floating or complex "
                           f"dtype, not '{dtype}'", "for example float64 (the default) or float32")
                return None
            values["dtype"] = enums.DTYPE_ALIASES.get(dtype, dtype)
        for key in ("atol", "rtol", "eps"):
            if key in fields:
                v = self.number(fields[key][1], f"'{key}'")
                if v is None:
                    return None
                if v <= 0 and key == "eps" or v < 0:
                    self.error(fields[key][1], f"'{key}' must be "
                               + ("positive" if key == "eps" else "at least 0"))
                    return None
                values[key] = float(v)
        return GradcheckSpec(loc=self.loc(node), **values)  # type: ignore[arg-type]

    def vmap(self, node: _Node):
        text = self.string(node, "'vmap'")
        if text is None:
            return None
        if text in VMAP_KINDS:
            return VmapSpec(text, self.loc(node))
        m = _LEADING_ROWS.match(text)
        if m:
            rows = tuple(n.strip() for n in m.group(1).split(","))
            return VmapSpec("leading", self.loc(node), rows)
        m = _PY_REF.match(text)
        if m:
            return VmapSpec(PyRef(m.group(1), m.group(2), self.loc(node)), self.loc(node))
        self.error(node, f"unknown vmap rule '{_short(text)}'",
                   "expected pointwise, leading, leading(x, ...) naming the inputs with rows, or a "
                   "Python batching rule package.module:function")
        return None

    def dtype(self, node: _Node, what: str) -> str | None:
        text = self.string(node, what)
        if text is None:
            return None
        name = text[len("torch."):] if text.startswith("torch.") else text
        if name not in DTYPES:
            self.error(node, f"unknown dtype '{_short(text)}'",
                       verify.suggest(name, DTYPES) or "for example float32, int64 or bool")
            return None
        return name

    # -- samples -----------------------------------------------------------------------------------

    def samples(self, node: _Node, schema: FunctionSchema) -> tuple[Sample, ...]:
        named: list[tuple[str | None, _Node]] = []
        if type(node) is _Map:
            fields = self.mapping(node, "'samples'", None) or {}
            # A key naming an argument is one sample left out of its list, unless its value is
            # itself a sample (a mapping of argument names): then it is a sample's name.
            args = [n for n, (_key, value) in fields.items()
                    if schema.argument(n) is not None and not _is_sample(value, schema)]
            if args:
                self.error(fields[args[0]][0], f"'samples' is a list of samples (or a mapping "
                           f"name -> sample), but '{args[0]}' is an argument of {schema.name}",
                           "for a single sample, write samples: [{" + args[0] + ": ...}]")
                return ()
            for name, (_key, value) in fields.items():
                named.append((name, value))
        else:
            items = self.sequence(node, "'samples' (a list, or a mapping name -> sample)")
            named = [(None, item) for item in items or ()]
        out = []
        for name, item in named:
            sample = self.sample(item, schema, name)
            if sample is not None:
                out.append(sample)
        return tuple(out)

    def sample(self, node: _Node, schema: FunctionSchema, name: str | None) -> Sample | None:
        fields = self.mapping(node, "a sample", None)
        if fields is None:
            return None
        names = [a.name for a in schema.arguments]
        values: dict[str, SampleValue] = {}
        ok = True
        self.dims, self.dim_uses = {}, []
        gradcheck = None
        for arg_name, (key, value) in fields.items():
            arg = schema.argument(arg_name)
            if arg is None and arg_name == "gradcheck":
                # The sample's own gradcheck options (an argument of that name would win).
                gradcheck = self.gradcheck(value)
                ok = ok and gradcheck is not None
                continue
            if arg is None:
                self.error(key, f"sample names '{_short(arg_name)}', which is not an argument of "
                           f"{schema.name}", verify.suggest(arg_name, names)
                           or ("arguments: " + ", ".join(names) if names else "it takes none"))
                ok = False
                continue
            v = self.sample_value(value, arg.type, f"'{arg_name}'")
            if v is _BAD:
                ok = False
            else:
                values[arg_name] = v
        missing = [a.name for a in schema.arguments
                   if a.default is None and a.name not in fields]
        if missing:
            self.error(Loc(self.path, node.start.line + 1, node.start.column + 1),
                       "sample gives no value for " + ", ".join(f"'{m}'" for m in missing)
                       + (" (no default)" if len(missing) == 1 else " (no defaults)"))
            ok = False
        for dim, use in self.dim_uses:
            if dim not in self.dims:
                self.error(use, f"named size '{dim}' has no value in this sample",
                           f"give it once, where it is used first: {dim}=<size>")
                ok = False
                break
        if not ok:
            return None
        args = tuple((a.name, values[a.name]) for a in schema.arguments if a.name in values)
        dims = tuple((d, v) for d, (v, _) in self.dims.items())
        return Sample(args, self.loc(node), name, dims, gradcheck)

    def size_name(self, node: _Scalar, what: str):
        """`N` or `N=6` where a sample gives a size -> SymDim, or _BAD (error reported)."""
        m = _DIM.match(node.value.strip())
        if m is None:
            self.error(node, f"expected a size for {what}, got '{_short(node.value)}'", DIM_HINT)
            return _BAD
        dim = m.group(1)
        if m.group(2) is not None:
            value = int(m.group(2))
            if dim in self.dims:
                first = self.dims[dim][1]
                self.error(node, f"named size '{dim}' is given a value twice in this sample",
                           f"its value is given at line {first.start.line + 1}; write just "
                           f"'{dim}' here")
                return _BAD
            if not 2 <= value < 2**31:
                self.error(node, f"named size '{dim}' is {value}; a named size is between 2 and "
                           "2**31 - 1",
                           "torch.compile specializes sizes 0 and 1 (they cannot vary): write a "
                           "fixed size instead" if 0 <= value < 2 else None)
                return _BAD
            self.dims[dim] = (value, node)
        self.dim_uses.append((dim, node))
        return SymDim(dim)

    def sample_value(self, node: _Node, t: Type, what: str):
        """A YAML value for an argument of type `t` -> SampleValue, or _BAD (error reported)."""
        if isinstance(t, OptionalType):
            if type(node) is _Scalar and node.tag == "null":
                return None
            return self.sample_value(node, t.elem, what)
        if isinstance(t, ListType):
            if type(node) is not _Seq:
                if t.size is not None and type(node) is _Scalar and node.tag != "null":
                    # `int[2] x` takes a single int for both elements, as in the schema language.
                    v = self.sample_value(node, t.elem, what)
                    return _BAD if v is _BAD else (v,) * t.size
                self.error(node, f"expected a list for {what} ({t}), got {node.kind}")
                return _BAD
            items = [self.sample_value(i, t.elem, f"an element of {what}")
                     for i in node.items]  # type: ignore[attr-defined]
            if any(i is _BAD for i in items):
                return _BAD
            if t.size is not None and len(items) != t.size:
                self.error(node, f"{what} ({t}) takes {t.size} elements, got {len(items)}")
                return _BAD
            return tuple(items)
        if isinstance(t, BaseType):
            return self.base_sample(node, t.name, what)
        self.error(node, f"samples cannot give a value of type '{t}' ({what})")
        return _BAD

    def base_sample(self, node: _Node, ty: BaseTy, what: str):
        tag = node.tag if type(node) is _Scalar else None  # type: ignore[attr-defined]
        value = node.value if type(node) is _Scalar else None  # type: ignore[attr-defined]
        if ty is BaseTy.Tensor:
            return self.tensor_sample(node, what)
        if ty in (BaseTy.int, BaseTy.SymInt) and tag == "str":
            return self.size_name(node, what)  # type: ignore[arg-type]
        if ty in (BaseTy.int, BaseTy.SymInt, BaseTy.DeviceIndex):
            if tag == "int":
                if not -(2**63) <= value < 2**63:
                    self.error(node, f"{what} does not fit in a 64-bit int")
                    return _BAD
                return value
            return self._sample_type_error(node, "an integer", what)
        if ty is BaseTy.float:
            if tag in ("int", "float"):
                return float(value)
            return self._sample_type_error(node, "a number", what)
        if ty in (BaseTy.bool, BaseTy.SymBool):
            if tag == "bool":
                return value
            return self._sample_type_error(node, "true or false", what)
        if ty is BaseTy.Scalar:
            if tag in ("int", "float", "bool"):
                return value
            return self._sample_type_error(node, "a number or boolean", what)
        if ty is BaseTy.str:
            if tag == "str":
                return value
            return self._sample_type_error(node, "a string", what)
        if ty is BaseTy.ScalarType:
            name = self.dtype(node, what)
            return _BAD if name is None else name
        if ty is BaseTy.Device:
            if tag == "str" and re.match(r"[a-z_]+(:[0-9]+)?\Z", value):
                return value
            return self._sample_type_error(node, "a device string such as cpu or cuda:0", what)
        if ty in (BaseTy.Layout, BaseTy.MemoryFormat):
            choices = _ENUM_SAMPLES[ty]
            if tag == "str" and value in choices:
                return value
            self.error(node, f"expected a {ty.value} name for {what}",
                       "expected one of: " + ", ".join(sorted(choices)))
            return _BAD
        self.error(node, f"samples cannot give a value of type '{ty.value}' ({what})",
                   "omit the argument if it has a default")
        return _BAD

    def _sample_type_error(self, node: _Node, expected: str, what: str):
        self.error(node, f"expected {expected} for {what}, got {node.kind}")
        return _BAD

    def tensor_sample(self, node: _Node, what: str):
        fields = self.mapping(node, f"a tensor sample for {what}", TENSOR_SAMPLE_KEYS)
        if fields is None:
            return _BAD
        ok = True
        if ("shape" in fields) == ("values" in fields):
            self.error(Loc(self.path, node.start.line + 1, node.start.column + 1),
                       f"a tensor sample gives exactly one of 'shape:' or 'values:' ({what})",
                       "{shape: [2, 3]} for random contents, {values: [[1, 2]]} for given ones")
            return _BAD
        shape: tuple[int, ...] = ()
        values = None
        if "shape" in fields:
            items = self.sequence(fields["shape"][1], "'shape'")
            if items is None:
                return _BAD
            dims: list = []
            for item in items:
                if type(item) is _Scalar and item.tag == "int" and 0 <= item.value < 2**31:
                    dims.append(item.value)
                elif type(item) is _Scalar and item.tag == "str":
                    dim = self.size_name(item, "'shape'")
                    ok = ok and dim is not _BAD
                    dims.append(dim)
                else:
                    self.error(item, f"a shape holds sizes (integers >= 0), got {item.kind}"
                               if not (type(item) is _Scalar and item.tag == "int")
                               else "a size must be between 0 and 2**31 - 1")
                    ok = False
            shape = tuple(dims)
        else:
            parsed = self.nested_values(fields["values"][1])
            if parsed is _BAD:
                return _BAD
            values, shape = parsed
        dtype = "float32"
        if "dtype" in fields:
            d = self.dtype(fields["dtype"][1], "'dtype'")
            if d is None:
                ok = False
            else:
                dtype = d
        elif values is not None and _all_ints(values):
            dtype = "int64"
        requires_grad = False
        if "requires_grad" in fields:
            rg = self.boolean(fields["requires_grad"][1], "'requires_grad'")
            if rg is None:
                ok = False
            else:
                requires_grad = rg
        bounds: list = []
        for key in ("low", "high"):
            if key in fields:
                bound = fields[key][1]
                if type(bound) is _Scalar and bound.tag == "str":
                    # A named size: index tensors whose values range over a size.
                    sym = self.size_name(bound, f"'{key}'")  # type: ignore[arg-type]
                    ok = ok and sym is not _BAD
                    bounds.append(sym)
                    continue
                v = self.number(bound, f"'{key}'")
                ok = ok and v is not None
                bounds.append(None if v is None else float(v))
            else:
                bounds.append(None)
        low, high = bounds
        if isinstance(low, float) and isinstance(high, float) and low >= high:
            self.error(fields["low"][1], f"'low' ({low}) must be less than 'high' ({high})")
            ok = False
        if not ok:
            return _BAD
        return TensorSample(shape, dtype, requires_grad, low, high, values)

    def nested_values(self, node: _Node):
        """`values:` -> (nested tuples, shape), checking the nesting is rectangular."""
        if type(node) is _Scalar:
            if node.tag in ("int", "float", "bool"):
                return node.value, ()  # type: ignore[attr-defined]
            self.error(node, f"tensor values are numbers or booleans, got {node.kind}")
            return _BAD
        if type(node) is not _Seq:
            self.error(node, f"tensor values are numbers or nested lists, got {node.kind}")
            return _BAD
        parts = [self.nested_values(i) for i in node.items]  # type: ignore[attr-defined]
        if any(p is _BAD for p in parts):
            return _BAD
        shapes = {p[1] for p in parts}
        if len(shapes) > 1:
            self.error(node, "tensor values are not rectangular: rows differ in shape")
            return _BAD
        inner = shapes.pop() if shapes else ()
        return tuple(p[0] for p in parts), (len(parts),) + inner


_BAD = object()


class _TooManyErrors(Exception):
    pass


def _pending_key(m: _Node) -> str | None:
    """The key of a mapping whose value is being read, if it is a string."""
    pairs = m.pairs  # type: ignore[attr-defined]
    if pairs and pairs[-1][1] is None and _is_str(pairs[-1][0]):
        return pairs[-1][0].value
    return None


def _is_str(node: _Node, value: str | None = None) -> bool:
    return type(node) is _Scalar and node.tag == "str" and (  # type: ignore[attr-defined]
        value is None or node.value == value)  # type: ignore[attr-defined]

_ENUM_SAMPLES = {
    BaseTy.Layout: frozenset({"strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr",
                              "sparse_bsc", "jagged"}),
    BaseTy.MemoryFormat: frozenset({"contiguous_format", "preserve_format", "channels_last",
                                    "channels_last_3d"}),
}


def _short(text: str, limit: int = 60) -> str:
    """User text quoted in a message, cut short: the caret already shows where it is."""
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _all_ints(values) -> bool:
    if isinstance(values, tuple):
        return all(_all_ints(v) for v in values)
    return isinstance(values, int) and not isinstance(values, bool)


# --------------------------------------------------------------------------------------------------
# The library


def op_files(paths: list[str], diags: Diagnostics) -> list[str]:
    """Command-line paths -> op files: files as given, directories' `*.yaml` sorted, no repeats."""
    out: list[str] = []
    seen: set[str] = set()
    for p in paths:
        if os.path.isdir(p):
            found = sorted(os.path.join(p, n) for n in os.listdir(p)
                           if n.endswith(".yaml") and n != FAILURES_FILE
                           and os.path.isfile(os.path.join(p, n)))
            if not found:
                diags.error(Loc(p, 1, 1), "directory holds no op files (*.yaml)")
        elif os.path.exists(p):
            found = [p]
        else:
            diags.error(Loc(p, 1, 1), "no such file or directory")
            found = []
        for f in found:
            key = os.path.realpath(f)
            if key not in seen:
                seen.add(key)
                out.append(os.path.normpath(f))
    return out


def check_path(path: str, diags: Diagnostics) -> None:
    """Generated files name their op files in comments (`@generated by codegen from <path>`): a
    path holding a line break or another control character is refused (codegen.escape would
    still keep such a comment on one line)."""
    ch = first_unprintable(path)
    if ch is not None:
        what = {"\n": "a line feed", "\r": "a carriage return", "\0": "a NUL character",
                "\u2028": "a line separator", "\u2029": "a paragraph separator"}.get(ch)
        diags.error(Loc(path, 1, 1),
                    f"op file path holds U+{ord(ch):04X}" + (f" ({what})" if what else "")
                    + "; generated files name their op files in comments, which must stay on one "
                    "line",
                    "rename the file (or the directories on its path) to printable characters")


def _is_sample(node: _Node, schema: FunctionSchema) -> bool:
    """Whether `node` reads as a sample: a non-empty mapping whose keys all name arguments."""
    return type(node) is _Map and bool(node.pairs) and all(
        type(k) is _Scalar and isinstance(k.value, str) and schema.argument(k.value) is not None
        for k, _ in node.pairs)


def load_library(paths: list[str], *, rules: verify.Rules | None = None) -> OpLibrary:
    """Read, parse and verify op files; raise `UserError` with every error found."""
    rules = rules or verify.DEFAULT_RULES
    diags = Diagnostics()
    files = []
    for path in op_files(paths, diags):
        check_path(path, diags)
        f = _FileLoader(path, diags, rules).load()
        if f is not None:
            files.append(f)
    lib = OpLibrary(tuple(files))
    verify.verify_across(lib, diags, rules)
    abi_mod.check_namespaces(lib, diags)
    if diags.has_errors:
        raise UserError(diags)
    return _out_tags(lib)


def _out_tags(lib: OpLibrary) -> OpLibrary:
    """Tag `out` the out= ops (Note [Tags from the schema's shape]) that have no functional
    variant in the library (Note [The out tag])."""
    from codegen.dest.py_functionalize import functional_variant

    def tagged(op: Op) -> Op:
        if {"inplace", "out"} & set(op.tags) or shape_tag(op.schema) != "out" or \
                functional_variant(lib, op) is not None:
            return op
        return dataclasses.replace(op, tags=op.tags + ("out",))

    files = tuple(dataclasses.replace(f, ops=tuple(tagged(op) for op in f.ops))
                  for f in lib.files)
    return lib if files == lib.files else OpLibrary(files)


def read_failures(files: list[str], cases: dict | None, checks: tuple[str, ...], make,
                  applies: Callable[[Any, str], bool] | None = None):
    """Known failures files (`sample_failures.yaml`: `<op>[<sample>]: {<check>: <reason>}`) ->
    `make(entries, where)`; raises UserError with every problem. `cases`, when given, maps case
    ids to cases: an entry must name one, and a check that `applies` to it."""
    diags = Diagnostics()
    entries: dict[str, dict[str, str]] = {}
    where: dict[tuple[str, str], str] = {}
    for path in files:
        loader = _FileLoader(path, diags, None)
        text = loader.read()
        if text is None:
            continue
        root = None
        for item in loader.compose(text):
            if item[0] == "root":
                root = item[1]
        if root is None or (type(root) is _Scalar and root.tag == "null"):
            continue                # an empty file lists nothing; YAML errors were reported
        top = loader.mapping(root, "the failures file (<op>[<sample>]: {<check>: <reason>})",
                             None)
        for case_id, (key, value) in (top or {}).items():
            if cases is not None and case_id not in cases:
                loader.error(key, f"no sample '{_short(case_id)}' in the op files",
                             verify.suggest(case_id, list(cases))
                             or "keys are sample ids: <ns>::<op>[<index or name>]")
                continue
            fields = loader.mapping(value, f"the known failures of {case_id}", checks)
            for check, (check_key, reason_node) in (fields or {}).items():
                reason = loader.string(reason_node, f"the reason {case_id} fails {check}")
                if reason is None:
                    continue
                if not reason.strip():
                    loader.error(reason_node, "a known failure needs a reason",
                                 "say why it fails, and what would fix it")
                    continue
                if cases is not None and applies is not None and \
                        not applies(cases[case_id], check):
                    loader.error(check_key, f"{case_id} has no {check} check, so it cannot fail",
                                 "remove the entry")
                    continue
                entries.setdefault(case_id, {})[check] = reason
                loc = loader.loc(check_key)
                where[(case_id, check)] = f"{loc.path}:{loc.line}:{loc.col}"
    diags.raise_if_errors()
    return make(entries, where)
