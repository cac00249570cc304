"""The compatibility gate: a committed snapshot of every op's contract, and the check of a library
against it (`opgen snapshot`, `opgen bc-check [--changelog]`).

Once a library ships, its schemas are a contract with callers: Python and C++ code calling the
ops, saved exported programs, compiled graphs. The snapshot (`opgen.lock`, a JSON file written
one field per line so that a review reads its diff) records per op the canonical schema, tags,
the dispatch keys with kernels and the devices they cover, how fake tensors run it, the inputs
with gradients and whether the backward is differentiable, the vmap and autocast rules
(codegen.contract). `bc-check` compares the library with it and reports each break at the op in
its op file.

Note [Agreeing with torch]
The schema part mirrors c10's FunctionSchema::isBackwardCompatibleWith (what
`torch._C.parse_schema(new).is_backward_compatible_with(old)` answers): same name, overload,
varargs and number of returns; no fewer arguments; each old argument before the first out=
argument matches the new one at its position (name, list size, alias annotation, not newly
keyword-only, a type the old one's values still fit, the same default where the old one had
one); every argument added before the out= arguments has a default; the out= arguments match
after the shift; each return is the old one or narrower. The verdict on a pair of schemas is
torch's (tests/test_compat.py keeps a table); where torch only says no, this says what broke and
where, all of it, and then goes on to the rest of the contract, which torch does not check.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from codegen import contract as C
from codegen import enums
from codegen.diagnostics import Diagnostics, Loc
from codegen.escape import md_code, md_text
from codegen.model import (
    BaseTy,
    BaseType,
    BoolDefault,
    ComplexDefault,
    DeclaredBreak,
    EnumDefault,
    FloatDefault,
    FunctionSchema,
    IntDefault,
    ListDefault,
    ListType,
    NoneDefault,
    Op,
    OpLibrary,
    OptionalType,
    StrDefault,
    TupleType,
    Type,
    iter_types,
    without_alias,
)
from codegen.parse import SchemaSyntaxError, parse_schema

FORMAT = 1
STAMP = "@generated"


# --------------------------------------------------------------------------------------------------
# The snapshot file


def snapshot_text(lib: OpLibrary, api: Mapping[str, str]) -> str:
    """The snapshot of `lib`: ops sorted by name, one field per line. `api`: str(op.name) -> its
    Python API name (codegen.dest.py_ops.python_names)."""
    sources = ", ".join(sorted({f.path for f in lib.files})) or "no op files"
    stamp = (f"by opgen snapshot from {sources}; do not edit, run `opgen snapshot` to accept "
             "the current contract")
    lines = ["{", f"  {json.dumps(STAMP)}: {json.dumps(stamp)},", f'  "format": {FORMAT},',
             '  "ops": {']
    entries = sorted((str(op.name), C.contract(op, lib, api.get(str(op.name))))
                     for op in lib.ops)
    for i, (name, c) in enumerate(entries):
        lines.append(f"    {json.dumps(name)}: {{")
        fields = [f"      {json.dumps(k)}: {json.dumps(getattr(c, k))}" for k in C.Contract.FIELDS]
        lines.append(",\n".join(fields))
        lines.append("    }" + ("," if i + 1 < len(entries) else ""))
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


@dataclass
class Snapshot:
    path: str
    text: str
    ops: dict[str, C.Contract]
    lines: dict[str, int]           # op name -> its line in the file

    def loc(self, name: str) -> Loc:
        return Loc(self.path, self.lines.get(name, 1), 5, len(json.dumps(name)))


def read_snapshot(path: str, diags: Diagnostics) -> Snapshot | None:
    """The snapshot at `path`, or None with an error in `diags`."""
    p = Path(path)
    if not p.is_file():
        diags.error(Loc(path, 1, 1), "no snapshot of the op contracts here",
                    "run `opgen snapshot` to record the current contract, and commit it")
        return None
    text = p.read_text(encoding="utf-8")
    diags.add_source(path, text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        diags.error(Loc(path, e.lineno, e.colno), f"the snapshot is not valid JSON: {e.msg}",
                    "it is written by `opgen snapshot`; restore it from version control")
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or \
            not isinstance(data.get("ops"), dict):
        diags.error(Loc(path, 1, 1), f"not an opgen snapshot of format {FORMAT}",
                    "it is written by `opgen snapshot`; restore it from version control")
        return None
    keys = {f"    {json.dumps(name)}: {{": name for name in data["ops"]}
    lines = {}
    for i, line in enumerate(text.splitlines(), 1):
        name = keys.get(line)
        if name is not None:
            lines[name] = i
    ops: dict[str, C.Contract] = {}
    for name, entry in data["ops"].items():
        try:
            # `api` came later: a snapshot without it compares no API names.
            values = {k: entry[k] for k in C.Contract.FIELDS if k != "api"}
            values["api"] = entry.get("api")
            for k in ("tags", "kernels", "devices", "differentiable"):
                if not isinstance(values[k], list) or \
                        not all(isinstance(v, str) for v in values[k]):
                    raise TypeError(k)      # a string would read as a list of letters
                values[k] = tuple(values[k])
            for k, kind in (("schema", str), ("file", str), ("fake", (str, type(None))),
                            ("double_backward", (bool, type(None))),
                            ("vmap", (str, type(None))), ("autocast", (str, type(None))),
                            ("api", (str, type(None)))):
                if not isinstance(values[k], kind):
                    raise TypeError(k)
            # A schema that does not parse is damage too: compared as a change of the op, it
            # would pass under the op's declared `breaks:`.
            parse_schema(values["schema"])
            ops[name] = C.Contract(**values)
        except (KeyError, TypeError):
            diags.error(Loc(path, lines.get(name, 1), 5 if name in lines else 1),
                        f"the snapshot's entry for '{name}' is damaged",
                        "it is written by `opgen snapshot`; restore it from version control")
        except SchemaSyntaxError as e:
            diags.error(Loc(path, lines.get(name, 1), 5 if name in lines else 1),
                        f"the snapshot's entry for '{name}' is damaged: its schema "
                        f"'{values['schema']}' does not parse: {e.message}",
                        "it is written by `opgen snapshot`; restore it from version control")
    if diags.has_errors:
        return None
    return Snapshot(path, text, ops, lines)


# --------------------------------------------------------------------------------------------------
# Schemas (Note [Agreeing with torch])


@functools.lru_cache(maxsize=4096)
def _plain(t: Type) -> Type:
    """The type as c10 compares it: no alias annotations, SymInt read as int."""
    t = without_alias(t)
    if isinstance(t, BaseType) and t.name is BaseTy.SymInt:
        return BaseType(BaseTy.int)
    if isinstance(t, OptionalType):
        return OptionalType(_plain(t.elem))
    if isinstance(t, ListType):
        return ListType(_plain(t.elem), t.size)
    if isinstance(t, TupleType):
        return TupleType(tuple(map(_plain, t.elems)))
    return t


_NUMBERS = (BaseTy.int, BaseTy.float, BaseTy.complex, BaseTy.Scalar)


def fits(a: Type, b: Type) -> bool:
    """Whether every value of type `a` is one of type `b` (c10's isSubtypeOf on plain types)."""
    if a == b:
        return True
    if isinstance(b, OptionalType):
        if isinstance(a, OptionalType):
            return fits(a.elem, b.elem)
        return (isinstance(a, BaseType) and a.name is BaseTy.NoneType) or fits(a, b.elem)
    if isinstance(b, BaseType) and b.name is BaseTy.Scalar:
        return isinstance(a, BaseType) and a.name in _NUMBERS
    if isinstance(a, TupleType) and isinstance(b, TupleType):
        return len(a.elems) == len(b.elems) and all(map(fits, a.elems, b.elems))
    return False


@functools.lru_cache(maxsize=4096)
def _annotations(t: Type) -> tuple:
    """The alias annotations of a type and its parts (`T?` has none of its own)."""
    return tuple((x.alias.alias_set, x.alias.is_write, x.alias.alias_set_after)
                 if x.alias is not None else None
                 for x in iter_types(t) if not isinstance(x, OptionalType))


def _fresh_sets(t: Type) -> list[str]:
    return [name for x in iter_types(t) if not isinstance(x, OptionalType)
            and x.alias is not None and x.alias.is_fresh for name in x.alias.alias_set]


def _alias_change(what: str, o: Type, n: Type, hint: str | None = None, **where) -> Change:
    """`what` changed its alias annotation; or it kept its bare '!' and c10 numbers that set
    anew because a bare '!' before it came or went (torch compares the numbers)."""
    if str(o) == str(n):
        return Change(f"{what} keeps its bare '!', but c10 now names that alias set "
                      f"{', '.join(_fresh_sets(n))} instead of {', '.join(_fresh_sets(o))}: a "
                      "bare '!' was added or removed before it, and torch compares the names",
                      renumbered=True, **where)
    return Change(f"{what} changed its alias annotation from '{o}' to '{n}'", hint=hint,
                  **where)


def default_value(d, t: Type):
    """A default as c10 stores it (an IValue): `float x=1` is 1.0, `int[2] k=1` is [1, 1],
    `ScalarType t=long` is int64, `int r=Mean` is 1."""
    base = _plain(t)
    if isinstance(base, OptionalType):
        base = base.elem
    if isinstance(base, ListType) and not isinstance(d, (ListDefault, NoneDefault)):
        return ("list", (default_value(d, base.elem),) * (base.size or 1))
    if isinstance(d, ListDefault):
        elem = base.elem if isinstance(base, ListType) else base
        return ("list", tuple(default_value(x, elem) for x in d.items))
    if isinstance(d, NoneDefault):
        return ("None",)
    if isinstance(d, BoolDefault):
        return ("bool", d.value)
    if isinstance(d, IntDefault):
        is_float = isinstance(base, BaseType) and base.name is BaseTy.float
        return ("float", float(d.value)) if is_float else ("int", d.value)
    if isinstance(d, FloatDefault):
        return ("float", d.value)
    if isinstance(d, ComplexDefault):
        return ("complex", d.imag)
    if isinstance(d, StrDefault):
        return ("str", d.value)
    assert isinstance(d, EnumDefault), d
    if isinstance(base, BaseType) and base.name is BaseTy.int and d.name == "Mean":
        return ("int", 1)           # at::Reduction::Mean
    return ("enum", enums.DTYPE_ALIASES.get(d.name, d.name))


@dataclass(frozen=True)
class Change:
    """One difference between an op's snapshot and the library: a break, or a compatible change
    (for the changelog). `arg`/`ret` say where in the new schema it is."""

    message: str
    breaking: bool = True
    arg: str | None = None
    ret: int | None = None
    hint: str | None = None
    old: str | None = None          # the old name of a renamed argument
    renumbered: bool = False        # only a bare '!' numbered anew (Note [Fresh alias sets])


def _first_out(s: FunctionSchema) -> int:
    for i, a in enumerate(s.arguments):
        if a.kwarg_only and a.is_write:
            return i
    return len(s.arguments)


def _arg_changes(new, old, i: int, old_names: set, new_names: set, positions: dict,
                 ) -> list[Change]:
    """The new argument at old argument `old`'s position (`i`), compared as c10 does."""
    out = []
    if new.name != old.name:
        if old.name in new_names and new.name in old_names:
            out.append(Change(f"argument '{old.name}' moved from position {i + 1} to "
                              f"{positions[old.name] + 1}: positional callers pass it to "
                              f"'{new.name}'", arg=new.name,
                              hint="keep the old order; add new arguments at the end"))
        elif old.name not in new_names and new.name not in old_names:
            out.append(Change(f"argument '{old.name}' was renamed to '{new.name}': callers "
                              "passing it by name break", arg=new.name, old=old.name))
        elif new.name not in old_names:
            out.append(Change(f"new argument '{new.name}' was inserted at position {i + 1}, "
                              f"before '{old.name}': positional callers pass their arguments "
                              "to the wrong parameters", arg=new.name,
                              hint="add new arguments at the end (before any out= argument), "
                                   "with a default, or keyword-only with a default"))
        # else: `old` was removed (reported once, by name)
        return out
    if _plain(new.type) != _plain(old.type) and not fits(_plain(old.type), _plain(new.type)):
        out.append(Change(f"argument '{new.name}' changed type from '{old.type}' to "
                          f"'{new.type}', which does not take every value it took",
                          arg=new.name))
    elif _plain(new.type) != _plain(old.type):
        out.append(Change(f"argument '{new.name}' widened from '{old.type}' to '{new.type}'",
                          breaking=False, arg=new.name))
    if _annotations(new.type) != _annotations(old.type):
        out.append(_alias_change(
            f"argument '{new.name}'", old.type, new.type, arg=new.name,
            hint="what an op reads, writes and returns as a view is part of its contract "
                 "(torch.compile, functionalization)"))
    if new.kwarg_only and not old.kwarg_only:
        out.append(Change(f"argument '{new.name}' became keyword-only: positional callers "
                          "break", arg=new.name))
    if old.default is not None:
        if new.default is None:
            out.append(Change(f"argument '{new.name}' lost its default ({old.default}): "
                              "callers leaving it out break", arg=new.name))
        elif default_value(new.default, new.type) != default_value(old.default, old.type):
            out.append(Change(f"argument '{new.name}' changed its default from {old.default} "
                              f"to {new.default}: callers leaving it out get another result",
                              arg=new.name))
    elif new.default is not None:
        out.append(Change(f"argument '{new.name}' got a default ({new.default})",
                          breaking=False, arg=new.name))
    return out


def schema_changes(old: FunctionSchema, new: FunctionSchema) -> list[Change]:
    """Every difference between two schemas of one op; the breaking ones are exactly where c10
    says the new one is not backward compatible with the old (Note [Agreeing with torch])."""
    out: list[Change] = []
    if str(old.name) != str(new.name):
        out.append(Change(f"the op was renamed from '{old.name}' to '{new.name}'"))
    if old.is_vararg != new.is_vararg or old.is_varret != new.is_varret:
        out.append(Change("varargs changed ('...')"))
    # Returns: each new one is the old one or narrower (covariant).
    if len(old.returns) != len(new.returns):
        out.append(Change(f"returns {len(new.returns)} value"
                          f"{'s' if len(new.returns) != 1 else ''} instead of "
                          f"{len(old.returns)}", ret=0 if new.returns else None))
    else:
        for i, (o, n) in enumerate(zip(old.returns, new.returns)):
            if o.name != n.name:
                out.append(Change(f"return {i + 1} was renamed from "
                                  f"'{o.name or '(unnamed)'}' to '{n.name or '(unnamed)'}'",
                                  ret=i, hint="callers read named returns by name"))
            if _plain(n.type) != _plain(o.type) and not fits(_plain(n.type), _plain(o.type)):
                out.append(Change(f"return {i + 1} changed type from '{o.type}' to "
                                  f"'{n.type}', which callers may not handle", ret=i))
            elif _plain(n.type) != _plain(o.type):
                out.append(Change(f"return {i + 1} narrowed from '{o.type}' to '{n.type}'",
                                  breaking=False, ret=i))
            if _annotations(n.type) != _annotations(o.type):
                out.append(_alias_change(f"return {i + 1}", o.type, n.type, ret=i))
    # Arguments, by position as c10 compares them, out= arguments after the shift.
    new_names = {a.name for a in new.arguments}
    old_names = {a.name for a in old.arguments}
    positions = {a.name: i for i, a in enumerate(new.arguments)}
    old_out, new_out = _first_out(old), _first_out(new)
    for i in range(old_out):
        if i < len(new.arguments):
            out += _arg_changes(new.arguments[i], old.arguments[i], i, old_names, new_names,
                                positions)
    shift = new_out - old_out
    # New arguments: before the out= ones (c10 checks these), and after them (c10 does not look
    # there; a new argument without a default breaks every call all the same).
    added = list(range(old_out, min(new_out, len(new.arguments))))
    added += range(len(old.arguments) + shift, len(new.arguments))
    for i in added:
        a = new.arguments[i]
        if a.default is None:
            out.append(Change(f"new argument '{a.name}' has no default: existing calls do not "
                              "pass it", arg=a.name, hint=f"give '{a.name}' a default"))
        elif a.name not in old_names:
            out.append(Change(f"new {'keyword-only ' if a.kwarg_only else ''}argument "
                              f"'{a.name}' with default {a.default}", breaking=False,
                              arg=a.name))
    for i in range(old_out, len(old.arguments)):
        j = i + shift
        if j < len(new.arguments):
            out += _arg_changes(new.arguments[j], old.arguments[i], i, old_names, new_names,
                                positions)
    renamed = {c.old for c in out if c.old is not None}
    for a in old.arguments:
        if a.name not in new_names and a.name not in renamed:
            out.append(Change(f"argument '{a.name}' was removed: callers passing it break"))
    if any(c.breaking and not c.renumbered for c in out):
        # A renumbered set follows from a break reported already: only that one is news.
        out = [c for c in out if not c.renumbered]
    return out


def compatible(old: FunctionSchema, new: FunctionSchema) -> bool:
    """The verdict of `schema_changes`: torch's `is_backward_compatible_with`."""
    return not any(c.breaking for c in schema_changes(old, new))


# --------------------------------------------------------------------------------------------------
# The rest of the contract


def contract_changes(old: C.Contract, new: C.Contract) -> list[Change]:
    """What the op no longer does that it did: tags that torch.compile reads, gradients, double
    backward, vmap and autocast rules, devices; and the compatible changes."""
    out: list[Change] = []
    for tag in old.tags:
        if tag not in new.tags:
            why = C.COMPILE_TAGS.get(tag)
            out.append(Change(f"dropped tag '{tag}': {why}" if why else f"dropped tag '{tag}'",
                              breaking=why is not None))
    for tag in new.tags:
        if tag not in old.tags:
            out.append(Change(f"new tag '{tag}'", breaking=False))
    lost = [n for n in old.differentiable if n not in new.differentiable]
    if lost and not new.differentiable:
        out.append(Change("lost its derivatives: it is no longer differentiable",
                          hint="restore its 'derivatives:'"))
    elif lost:
        out.append(Change("lost the derivative for " + ", ".join(f"'{n}'" for n in lost),
                          hint="restore its formula under 'derivatives:'"))
    gained = [n for n in new.differentiable if n not in old.differentiable]
    if gained:
        out.append(Change("new derivative for " + ", ".join(f"'{n}'" for n in gained),
                          breaking=False))
    if old.double_backward and new.double_backward is False:
        out.append(Change("its backward is no longer differentiable (double backward, "
                          "gradgradcheck, torch.func.hessian break)",
                          hint="give every library op its formulas call derivatives"))
    if old.vmap is not None and new.vmap is None:
        out.append(Change(f"lost its vmap rule ({old.vmap}): torch.vmap no longer batches it",
                          hint="restore its 'vmap:'"))
    elif old.vmap != new.vmap:
        out.append(Change(f"vmap rule {old.vmap or 'none'} -> {new.vmap}", breaking=False))
    if old.autocast is not None and new.autocast != old.autocast:
        what = f"changed to {new.autocast}" if new.autocast else "was removed"
        out.append(Change(f"its autocast rule ({old.autocast}) {what}: results under "
                          "autocast change", hint="restore its 'autocast:'"))
    elif new.autocast != old.autocast:
        out.append(Change(f"new autocast rule {new.autocast}", breaking=False))
    for d in old.devices:
        if d not in new.devices:
            if d == "Meta":
                out.append(Change("fake tensors can no longer run it: torch.compile and "
                                  "torch.export cannot trace it", hint="restore its 'fake:'"))
            else:
                out.append(Change(f"no longer runs on {d}: it lost its {d} kernel",
                                  hint=f"restore its {d} kernel under 'dispatch:'"))
    for d in new.devices:
        if d not in old.devices:
            out.append(Change(f"now runs on {d}", breaking=False))
    if old.api is not None and new.api is not None and old.api != new.api:
        out.append(Change(f"its Python API name changed: ops.{old.api} is now ops.{new.api}, "
                          f"and callers of ops.{old.api} break",
                          hint="another op now has its name, and ops sharing a name are told "
                          "apart by overload, then namespace (docs/FORMAT.md, Compatibility): "
                          "rename one of them, or declare the break with 'breaks: {reason: ...}'"))
    return out


# --------------------------------------------------------------------------------------------------
# The check


@dataclass
class OpReport:
    name: str
    old: C.Contract | None
    new: C.Contract | None
    op: Op | None
    changes: list[Change] = field(default_factory=list)
    declared: DeclaredBreak | None = None

    @property
    def breaks(self) -> list[Change]:
        return [c for c in self.changes if c.breaking]


@dataclass
class Report:
    snapshot: str
    ops: list[OpReport]

    @property
    def added(self) -> list[OpReport]:
        return [r for r in self.ops if r.old is None]

    @property
    def removed(self) -> list[OpReport]:
        return [r for r in self.ops if r.new is None]

    @property
    def changed(self) -> list[OpReport]:
        return [r for r in self.ops if r.old is not None and r.new is not None and r.changes]

    @property
    def undeclared(self) -> list[OpReport]:
        return [r for r in self.ops if r.breaks and r.declared is None]


def compare(lib: OpLibrary, snap: Snapshot, api: Mapping[str, str]) -> Report:
    """The library against the snapshot; `api` as for snapshot_text."""
    ops: list[OpReport] = []
    present = set()
    for op in lib.ops:
        name = str(op.name)
        present.add(name)
        old = snap.ops.get(name)
        # A snapshot recorded before API names were has none to compare.
        new = C.contract(op, lib, None if old is not None and old.api is None else api.get(name))
        r = OpReport(name, old, new, op, declared=op.breaks)
        if old is not None and old != new:
            if old.schema != new.schema:    # read_snapshot refused one that does not parse
                r.changes += schema_changes(parse_schema(old.schema), op.schema)
            r.changes += contract_changes(old, new)
        ops.append(r)
    removals = {d.op: d for f in lib.files for d in f.removed}
    for name, old in snap.ops.items():
        if name not in present:
            overloads = [n for n in present if n.split(".")[0] == name.split(".")[0]]
            what = "overload" if overloads else "op"
            ops.append(OpReport(name, old, None, None, [Change(
                f"{what} '{name}' was removed: callers break",
                hint="restore it, or declare it under the op file's 'removed:' with a reason")],
                declared=removals.get(name)))
    ops.sort(key=lambda r: r.name)
    return Report(snap.path, ops)


def _op_loc(op: Op, change: Change) -> Loc:
    s = op.schema
    if op.func is not None:
        if change.arg is not None:
            a = s.argument(change.arg)
            if a is not None and a.name_span is not None:
                return op.func.at(a.name_span.start, len(a.name))
        if change.ret is not None and change.ret < len(s.returns):
            r = s.returns[change.ret]
            if r.span is not None:
                return op.func.at(r.span.start, r.span.end - r.span.start)
        if s.name.span is not None:
            return op.func.at(s.name.span.start, s.name.span.end - s.name.span.start)
    return op.loc


def diagnose(report: Report, lib: OpLibrary, snap: Snapshot, diags: Diagnostics) -> None:
    """Every undeclared break as a located error, and every stale declaration."""
    for f in lib.files:
        diags.add_source(f.path, f.source)
    by_name = {r.name: r for r in report.ops}
    for r in report.ops:
        if r.declared is not None and not r.breaks:
            what = ("the snapshot has no op of that name" if r.old is None and r.new is None
                    else "it is a new op: the snapshot has no op of that name" if r.old is None
                    else "it is compatible with the snapshot")
            diags.error(r.declared.loc, f"{r.name} declares a break, but {what}",
                        "remove the declaration (it would hide the next break)")
        if r.declared is not None or not r.breaks:
            continue
        for c in r.breaks:
            loc = _op_loc(r.op, c) if r.op is not None else snap.loc(r.name)
            diags.error(loc, f"{r.name}: {c.message}",
                        c.hint or "keep the op compatible, or declare the break with "
                                  "'breaks: {reason: ...}'")
    for f in lib.files:
        for d in f.removed:
            found = by_name.get(d.op)
            if found is None:
                diags.error(d.loc, f"'{d.op}' is declared removed, but the snapshot has no op "
                            "of that name", "remove the declaration")
            elif found.op is not None:
                _removed_but_defined(d, found.op, diags)


def check_removed(lib: OpLibrary, diags: Diagnostics) -> None:
    """`removed:` entries naming an op the library still defines (`check`: no snapshot needed)."""
    defined = {str(op.name): op for op in lib.ops}
    for f in lib.files:
        for d in f.removed:
            if d.op in defined:
                _removed_but_defined(d, defined[d.op], diags)


def _removed_but_defined(d: DeclaredBreak, op: Op, diags: Diagnostics) -> None:
    diags.error(d.loc, f"'{d.op}' is declared removed, but the library defines it",
                f"drop it from 'removed:' (the op is defined at {op.loc}), or remove the op")


# --------------------------------------------------------------------------------------------------
# The changelog


def changelog(report: Report) -> str:
    out = [f"## Op changes since {md_code(report.snapshot)}", ""]

    def declared(r: OpReport) -> str:
        return f" (intended: {md_text(r.declared.reason)})" if r.declared else ""

    sections = [
        ("Added", [f"- {md_code(r.new.schema)}" for r in report.added if r.new]),
        ("Removed", [f"- **breaking**: {md_code(r.old.schema)}{declared(r)}"
                     for r in report.removed if r.old]),
    ]
    changed = []
    for r in report.changed:
        assert r.old is not None and r.new is not None
        head = f"- {md_code(r.name)}"
        if r.breaks:
            head += f" **breaking**{declared(r)}"
        changed.append(head)
        if r.old.schema != r.new.schema:
            changed.append(f"  - {md_code(r.old.schema)} -> {md_code(r.new.schema)}")
        changed += [f"  - {'**breaking**: ' if c.breaking else ''}{md_text(c.message)}"
                    for c in r.changes]
    sections.append(("Changed", changed))
    for title, items in sections:
        out += [f"### {title}", ""] + (items or ["None."]) + [""]
    return "\n".join(out)
