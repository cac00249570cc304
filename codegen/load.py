"""Op files (YAML, see docs/FORMAT.md) -> `OpLibrary` records, every problem a located diagnostic.

Loading runs in stages, one module each: YAML with locations (codegen.yaml_source: the text read
as a stream of parser events into small located nodes, never constructed into Python objects by
PyYAML, so nothing in an op file can run code or allocate without bound; Note [Reading YAML]),
samples (codegen.load_samples), and here the op entries and the file. Each op entry's
`func:` goes through `codegen.parse_schema`, whose error offsets are mapped back into the YAML file
so the caret lands under the offending character; `codegen.verify` then checks the schemas, and
`codegen.shape` / `codegen.formulas` parse fake rules and derivative formulas.

Every error of every file is collected; `load_library` raises one `UserError` carrying all of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import pickle
import re
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from codegen import abi as abi_mod
from codegen import enums, jobs, verify
from codegen.abi import Abi
from codegen.diagnostics import WARNINGS, Diagnostics, Loc, UserError, suggest
from codegen.escape import first_unprintable
from codegen.model import (
    AUTOCAST_DTYPE,
    AutocastSpec,
    BaseTy,
    BaseType,
    CppKernel,
    DeclaredBreak,
    DerivativesSpec,
    DispatchKey,
    FunctionSchema,
    GradcheckSpec,
    Kernel,
    Located,
    Op,
    OperatorName,
    OpFile,
    OpLibrary,
    PyRef,
    TensorSample,
    TypeVar,
    VmapSpec,
)
from codegen.parse import SchemaSyntaxError, parse_schema
from codegen.load_samples import COMPLEX_DTYPES, FLOAT_DTYPES, SampleReader
from codegen.shape import Arg, Empty, FakeRule, Given, Prop, TensorProp
from codegen.tags import TAGS, functional_variant, rule_needs_contiguous_inputs, shape_tag
from codegen.yaml_source import (MAX_ERRORS_PER_FILE, MAX_FILE_BYTES, Map, Node, Scalar, Seq,
                                 TooManyErrors, for_display, short)

OP_KEYS = ("func", "doc", "tags", "dispatch", "fake", "derivatives", "samples", "gradcheck",
           "autocast", "vmap", "suppress", "breaks", "device_guard", "device_check")
FILE_KEYS = ("namespace", "ops", "suppress", "conventions", "abi", "min_torch", "autograd",
             "removed")
# `autograd:` values: where the Autograd kernels of a file's ops live (codegen.dest.cpp_autograd).
AUTOGRAD_KINDS = ("cpp", "python")
BREAK_KEYS = ("reason",)
CONVENTIONS = ("aten",)
AUTOCAST_KEYS = ("device_type", "cast_inputs")
GRADCHECK_KEYS = ("dtype", "atol", "rtol", "eps")
# The per-library failures file beside the op files (codegen.testing reads it): not an op file.
FAILURES_FILE = "sample_failures.yaml"
AUTOCAST_DEVICES = ("cuda", "cpu")
VMAP_KINDS = ("pointwise", "leading")
# An op named in `removed:`: `[ns::]name[.overload]`.
_OP_NAME = re.compile(r"([A-Za-z_]\w*::)?[A-Za-z_]\w*(\.[A-Za-z_]\w*)?\Z", re.ASCII)
# `leading(x, residual)`: the Tensor inputs whose dim 0 holds the rows.
_LEADING_ROWS = re.compile(r"leading\s*\(\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*\)\Z",
                           re.ASCII)

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CPP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*\Z")
_PY_REF = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"
                     r":([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\Z")

# --------------------------------------------------------------------------------------------------
# One file


class _FileLoader(SampleReader):
    """Decodes one op file: the file's keys, then each op entry as it is read."""

    def __init__(self, path: str, diags: Diagnostics, rules) -> None:
        super().__init__(path, diags)
        self.rules = rules
        self.bad_namespace = False
        # torchgen conventions the file's ops break (Note [Aten conventions] in codegen.verify).
        self.conventions: list[verify.Convention] = []
        # `samples:` of each op entry (by its func's location), read once the whole file is:
        # a sample may take the output of an op the file declares further down.
        self.pending_samples: dict[tuple[int, int], tuple[Node, FunctionSchema]] = {}

    # -- the file ----------------------------------------------------------------------------------

    def load(self) -> OpFile | None:
        try:
            return self._load()
        except TooManyErrors:
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
        waiting: list[tuple[Node, bool]] = []   # entries read before the file's namespace
        ops: list[Op] = []
        root: Node | None = None
        abi: Abi | None = None
        entries: list[int] = []
        for item in self.compose(text):
            if item[0] == "entry":
                _, node, clean, in_ops = item
                entries.append(node.start.line + 1)
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
            # No document (an empty file, or comments only) is a file of no ops, as `~` is.
            return OpFile(self.path, None, ()) if self.ok else None
        if type(root) is Scalar and root.tag == "null":  # type: ignore[attr-defined]
            return OpFile(self.path, None, ())
        suppress: frozenset[str] = frozenset()
        conventions: str | None = None
        autograd: str | None = None
        removed: tuple[DeclaredBreak, ...] = ()
        abi_refused = False
        if type(root) is Map:
            top = self.mapping(root, "the op file", FILE_KEYS)
            if top is None:
                return None
            if "ops" not in top:
                if self.ok:  # else a misspelled `ops:` was just reported
                    self.error(Loc(self.path, root.start.line + 1, root.start.column + 1),
                               "op file has no 'ops:' list", "list the op entries under 'ops:'")
                return None
            self.sequence(top["ops"][1], "'ops'", "each op entry is a list item, starting "
                          "with '- ': `  - func: ...`" if type(top["ops"][1]) is Map else None)
            if "suppress" in top:
                suppress = self.suppress(top["suppress"][1])
            if "conventions" in top:
                conventions = self.conventions_key(top["conventions"][1])
            before = len(self.diags.items)
            abi = self.abi(root, top)
            abi_refused = any(d.severity == "error" for d in self.diags.items[before:])
            if "autograd" in top:
                autograd = self.autograd_key(top["autograd"][1])
            if "removed" in top:
                removed = self.removed(top["removed"][1],
                                       None if self.bad_namespace else namespace)
        elif type(root) is not Seq:
            self.error(root, f"expected a list of op entries or a mapping with 'ops:', "
                       f"got {root.kind}")
            return None
        for node, clean in waiting:  # a mapping without `namespace:`
            self.add_op(ops, node, clean, namespace)
        ops = self.read_samples(ops)
        if self.bad_namespace:
            namespace = None
        warnings = self.settle_warnings(ops, suppress, conventions)
        if abi is not None:
            ops = [dataclasses.replace(op, abi=abi) for op in ops]
        return OpFile(self.path, namespace, tuple(ops), for_display(self.text), namespace_loc,
                      suppress, conventions, warnings, abi=abi, abi_refused=abi_refused,
                      autograd=autograd,
                      removed=removed, entries=tuple(sorted(entries)))

    def declared_break(self, key: Node, node: Node, what: str, op: str = ""
                       ) -> DeclaredBreak | None:
        """`{reason: <why>}`: an intended break of the snapshot's contract (codegen.compat)."""
        if type(node) is Scalar and node.tag == "str":  # type: ignore[attr-defined]
            text = short(node.value)  # type: ignore[attr-defined]
            quoted = text.replace("\\", "\\\\").replace('"', '\\"')
            self.error(node, f"expected {what} (a mapping {{reason: ...}}), got a string",
                       f'write {{reason: "{quoted}"}}')
            return None
        fields = self.mapping(node, what, BREAK_KEYS)
        if fields is None:
            return None
        if "reason" not in fields:
            self.error(node, f"{what} needs 'reason:'",
                       "say why the break is intended: {reason: \"...\"}")
            return None
        reason = self.string(fields["reason"][1], "'reason'")
        if reason is None:
            return None
        if not reason.strip():
            self.error(fields["reason"][1], "the reason of a declared break is empty",
                       "say why the break is intended")
            return None
        return DeclaredBreak(reason.strip(), self.loc(key), op)

    def removed(self, node: Node, namespace: str | None) -> tuple[DeclaredBreak, ...]:
        """`removed: {<op>: {reason: ...}}`: ops the library no longer has, on purpose."""
        if type(node) is not Map:
            items = node.items if type(node) is Seq else []  # type: ignore[attr-defined]
            first = items[0] if items else None
            # A list of names: the first one, in the form that takes it.
            name = first.value if type(first) is Scalar and first.tag == "str" else "ns::name"
            self.error(node, f"expected 'removed' (a mapping: removed op -> {{reason: ...}}), "
                       f"got {node.kind}",
                       f"write removed: {{{short(name)}: {{reason: \"why it was removed\"}}}}, "
                       "one entry per op")
            return ()
        fields = self.mapping(node, "'removed'", None)
        out = []
        for name, (key, value) in (fields or {}).items():
            m = _OP_NAME.match(name)
            if m is None:
                self.error(key, f"'{short(name)}' is not an op name",
                           "write ns::name or ns::name.overload (the namespace may be left "
                           "out in a file with 'namespace:')")
                continue
            if m.group(1) is None:
                if namespace is None:
                    self.error(key, f"removed op '{short(name)}' has no namespace",
                               f"write 'my_ns::{name}'")
                    continue
                name = f"{namespace}::{name}"
            decl = self.declared_break(key, value, f"removed op '{short(name)}'", name)
            if decl is not None:
                out.append(decl)
        return tuple(out)

    def abi(self, root: Node, top: dict) -> Abi | None:
        """The file's `abi:` and `min_torch:` (Note [ABI choice] in codegen/abi.py)."""
        kind = abi_mod.FULL
        if "abi" in top:
            node = top["abi"][1]
            kind = self.string(node, "'abi'") or ""
            if kind and kind not in abi_mod.KINDS:
                self.error(node, f"unknown ABI '{short(kind)}'; 'abi' is one of: "
                           + ", ".join(abi_mod.KINDS),
                           suggest(kind, abi_mod.KINDS)
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
        if type(vnode) is Scalar and vnode.tag in ("int", "float"):
            written = self.text[vnode.start.index:vnode.end.index]
            self.error(vnode, f"min_torch {written} is a number to YAML (2.10 reads as 2.1); "
                       "write the version as a string", f'quote it: min_torch: "{written}"')
            return None
        text = self.string(vnode, "'min_torch'")
        if text is None:
            return None
        version = abi_mod.parse_version(text)
        if version is None:
            self.error(vnode, f"min_torch '{short(text)}' is not a torch version of the form "
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
        # A convention error says what its warning would: `conventions: aten` keeps the error.
        covered = verify.CONVENTION_WARNINGS if conventions == "aten" else frozenset()
        self.diags.drop_warnings(lambda d: d.name not in suppress and d.name not in covered,
                                 self.first_error)
        if suppress:
            ops[:] = [dataclasses.replace(op, suppress=op.suppress | suppress) for op in ops]
        return tuple(d for d in self.diags.items[self.first_error:] if d.severity == "warning")

    def suppress(self, node: Node) -> frozenset[str]:
        """`suppress:` a warning name or a list of them."""
        items = [node] if type(node) is Scalar and node.tag == "str" else self.sequence(
            node, "'suppress'")
        out: set[str] = set()
        for item in items or ():
            name = self.string(item, "a warning name")
            if name is None:
                continue
            if name not in WARNINGS:
                bare = name[2:] if name.startswith("-W") else name
                hint = (f"write the name without '-W': {bare}" if bare in WARNINGS
                        else suggest(name, WARNINGS)
                        or "known warnings: " + ", ".join(sorted(WARNINGS)))
                self.error(item, f"unknown warning '{short(name)}'", hint)
            else:
                out.add(name)
        return frozenset(out)

    def autograd_key(self, node: Node) -> str | None:
        value = self.string(node, "'autograd'")
        if value is not None and value not in AUTOGRAD_KINDS:
            self.error(node, f"unknown autograd kind '{short(value)}'; 'autograd' is one of: "
                       + ", ".join(AUTOGRAD_KINDS),
                       "'cpp' (the default) generates C++ Autograd kernels where the formulas "
                       "allow, 'python' keeps them in the Python registration module")
            return None
        return value

    def conventions_key(self, node: Node) -> str | None:
        value = self.string(node, "'conventions'")
        if value is not None and value not in CONVENTIONS:
            self.error(node, f"unknown conventions '{short(value)}'",
                       "the only conventions are 'aten' (torchgen's rules, as errors)")
            return None
        return value

    def namespace(self, node: Node) -> str | None:
        """The file's namespace, checked here once, not again for every op that relies on it.
        A bad one is still returned (its ops are then checked, and dropped: `op`)."""
        namespace = self.string(node, "'namespace'")
        problem = verify.namespace_problem(namespace) if namespace is not None else None
        if problem is not None:
            self.error(node, problem[0].replace(namespace, short(namespace), 1),  # type: ignore
                       problem[1])
        if namespace is None or problem is not None:
            self.bad_namespace = True
        return namespace

    def add_op(self, ops: list[Op], node: Node, clean: bool, namespace: str | None) -> None:
        # An entry with a YAML error (alias, tag, ...) was reported already; reading it further
        # would only report the placeholder that replaced the bad part.
        if clean:
            op = self.op(node, namespace)
            if op is not None:
                ops.append(op)
        self.check_error_limit()  # verify, shape and formulas report straight to diags

    # -- one op ------------------------------------------------------------------------------------

    def op(self, node: Node, namespace: str | None) -> Op | None:
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
        from_file = schema.name.namespace is None
        if from_file:
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
        self.add_file_op(schema)    # what samples may call, even if the entry has errors

        changes: dict[str, object] = {}
        if "doc" in fields:
            doc = self.string(fields["doc"][1], "'doc'")
            if doc is not None:
                changes["doc"] = doc
        if "tags" in fields:
            tag_locs = self.tags(fields["tags"][1])
            changes["tags"] = tuple(t for t, _ in tag_locs)
            changes["tag_locs"] = tag_locs
        if "dispatch" in fields:
            changes["dispatch"] = self.dispatch(fields["dispatch"][1])
        if "samples" in fields:
            self.pending_samples[func.loc.line, func.loc.col] = (fields["samples"][1], schema)
        if "gradcheck" in fields:
            changes["gradcheck"] = self.gradcheck(fields["gradcheck"][1])
        if "autocast" in fields:
            changes["autocast"] = self.autocast(fields["autocast"][1])
        if "vmap" in fields:
            changes["vmap"] = self.vmap(fields["vmap"][1])
        if "suppress" in fields:
            changes["suppress"] = self.suppress(fields["suppress"][1])
        if "breaks" in fields:
            changes["breaks"] = self.declared_break(*fields["breaks"], "'breaks'")
        for key in ("device_guard", "device_check"):
            if key in fields:
                flag = self.boolean(fields[key][1], f"'{key}'")
                if flag is not None:
                    changes[key] = flag
        op = Op(schema=schema, loc=func.loc, func=func, **changes)  # type: ignore[arg-type]
        op = self.none_return(op)

        fake_loc = self.loc(fields["fake"][1]) if "fake" in fields else None
        schema_ok = verify.verify_op(op, self.diags, self.rules, fake_loc=fake_loc,
                                     conventions=self.conventions, namespace_checked=from_file)
        if not schema_ok:
            self.ok = False
        # `out` needs the whole library (Note [The out tag]): load_library adds it.
        tag = shape_tag(op.schema) if schema_ok else None
        late: dict[str, object] = {}     # one dataclasses.replace for all of them
        if tag == "inplace" and not {"inplace", "out"} & set(op.tags):
            late["tags"] = op.tags + (tag,)
        # Fake rules and formulas read the schema; on a broken one they would only add noise.
        if "fake" in fields and schema_ok:
            fake = self.fake(fields["fake"][1], schema)
            if fake is not None:
                late["fake"] = fake
        if "derivatives" in fields and schema_ok:
            derivatives = self.derivatives(fields["derivatives"][1], schema)
            if derivatives is not None:
                late["derivatives"] = derivatives
        if schema_ok and rule_needs_contiguous_inputs(op.schema, late.get("fake", op.fake),
                                                      op.tags):
            late["tags"] = tuple(late.get("tags", op.tags)) + ("needs_contiguous_strides",)
        if from_file and self.bad_namespace:
            return None     # checked for its own errors; no later stage sees the bad namespace
        return dataclasses.replace(op, **late) if late else op  # type: ignore[arg-type]

    def read_samples(self, ops: list[Op]) -> list[Op]:
        """`ops` with their `samples:`, read now that every op of the file is known (a sample
        may call any of them: codegen.model.OpOutput). Entries left out of `ops` for an error
        still have theirs checked."""
        out = []
        for op in ops:
            found = self.pending_samples.pop((op.loc.line, op.loc.col), None)
            if found is not None:
                op = dataclasses.replace(op, samples=self.samples(*found))
                if isinstance(op.fake, FakeRule) and op.samples:
                    self.empty_dtype(op.fake, op)
                self.check_error_limit()
            out.append(op)
        for node, schema in self.pending_samples.values():
            self.samples(node, schema)
            self.check_error_limit()
        self.pending_samples.clear()
        return out

    def empty_dtype(self, rule: FakeRule, op: Op) -> None:
        """A warning where `empty()` takes its dtype from the op's first Tensor argument (the
        default) while a sample gives that argument an integer dtype and another Tensor argument
        a floating one: the output of an op taking indices and values (FBGEMM's
        `segment_sum_csr(SymInt batch_size, Tensor csr_seg, Tensor values)`) has the values'
        dtype, and the fake kernel would make it int64."""
        empties = [n for n in rule.nodes() if isinstance(n, Empty) and n.dtype is None and n.like]
        if not empties:
            return
        like = empties[0].like
        # A rule that gives some output another argument's dtype (`dtype=value.dtype`) has
        # chosen: its other empty() outputs are meant to have the first argument's (indices).
        chosen = {(n.tensor.arg if isinstance(n.tensor, Given) else n.tensor).name
                  for n in rule.nodes() if isinstance(n, TensorProp) and n.prop is Prop.dtype
                  and isinstance(n.tensor, (Arg, Given))}
        for sample in op.samples:
            values = dict(sample.args)
            first = values.get(like)
            if not isinstance(first, TensorSample) or enums.is_floating(first.dtype):
                continue
            other = next(((name, v) for name, v in sample.args if name != like
                          and isinstance(v, TensorSample) and enums.is_floating(v.dtype)), None)
            if other is None or other[0] in chosen:
                continue
            name, v = other
            for e in empties:
                loc = rule.loc_of(e) or op.loc
                self.diags.warning(
                    loc, f"empty() takes its dtype from '{like}', the op's first Tensor "
                    f"argument, which the sample at line {sample.loc.line} gives as "
                    f"{first.dtype} beside {v.dtype} '{name}'",
                    f"give the dtype: `dtype={name}.dtype` for {name}'s, `dtype={like}.dtype` "
                    "to keep this one", name="empty-dtype", suppress=op.suppress)
            return

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

    def tags(self, node: Node) -> tuple[tuple[str, Loc], ...]:
        """Each tag with where it is written."""
        items = [node] if type(node) is Scalar and node.tag == "str" else self.sequence(
            node, "'tags'")
        out: dict[str, Loc] = {}
        for item in items or ():
            tag = self.string(item, "a tag")
            if tag is None:
                continue
            if tag not in TAGS:
                self.error(item, f"unknown tag '{short(tag)}'",
                           suggest(tag, TAGS) or "see torch.Tag for the known tags")
            elif tag in out:
                self.error(item, f"tag '{tag}' given twice")
            else:
                out[tag] = self.loc(item)
        return tuple(out.items())

    def kernel(self, node: Node, what: str) -> Kernel | None:
        text = self.string(node, what)
        if text is None:
            return None
        loc = self.loc(node)
        m = _PY_REF.match(text)
        if m:
            return PyRef(m.group(1), m.group(2), loc)
        if _CPP_NAME.match(text):
            return CppKernel(text, loc)
        self.error(node, f"'{short(text)}' is neither a C++ function name nor a Python callable",
                   "write a C++ name (my_kernel, or other_ns::my_kernel) or "
                   "package.module:function")
        return None

    def comma_split(self, key: Node, value: Node, name: str, what: str, example: str) -> bool:
        """A key written without ':' (its null value starts where the key ends): in a flow
        mapping YAML ends an entry at each comma, so `{CPU, CUDA: k}` is `CPU` with no value
        and `CUDA: k`, where the block form `CPU, CUDA: k` is one key naming both."""
        if not (type(value) is Scalar and value.tag == "null"
                and value.start.index == key.end.index):
            return False
        self.error(key, f"'{short(name)}' has no {what}: in a flow mapping ({{...}}) a comma "
                   f"ends an entry, so the key before it gets no value",
                   f"to give several keys one {what}, quote them together ({example}), or write "
                   f"the entry on a line of its own (block style)")
        return True

    def dispatch(self, node: Node) -> tuple[tuple[DispatchKey, Kernel], ...]:
        fields = self.mapping(node, "'dispatch'", None)
        out: list[tuple[DispatchKey, Kernel]] = []
        for name, (key, value) in (fields or {}).items():
            keys = [k.strip() for k in name.split(",")] if "," in name else [name]
            if self.comma_split(key, value, name, "kernel", "{\"CPU, CUDA\": my_kernel}"):
                continue
            kernel = self.kernel(value, f"the {name} kernel")
            for k in keys:
                try:
                    dk = DispatchKey(k)
                except ValueError:
                    names = [d.value for d in DispatchKey]
                    self.error(key, f"unknown dispatch key '{short(k)}'; allowed keys: "
                               + ", ".join(names), suggest(k, names))
                    continue
                if any(d is dk for d, _ in out):
                    self.error(key, f"dispatch key '{k}' given twice")
                    continue
                if kernel is not None:
                    out.append((dk, kernel))
        return tuple(out)

    def fake(self, node: Node, schema: FunctionSchema):
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

    def derivatives(self, node: Node, schema: FunctionSchema):
        fields = self.mapping(node, "'derivatives'", None)
        if fields is None:
            return None
        n_errors = len(self.diags.items)
        formulas: list[tuple[tuple[str, ...], Located]] = []
        keys: list[tuple[Loc, ...]] = []
        output_differentiability: tuple[bool, ...] | None = None
        od_loc: Loc | None = None
        od_locs: tuple[Loc, ...] = ()
        for name, (key, value) in fields.items():
            if name == "output_differentiability":
                items = self.sequence(value, "'output_differentiability'")
                if items is not None:
                    flags = [self.boolean(i, "an entry of 'output_differentiability'")
                             for i in items]
                    if all(f is not None for f in flags):
                        output_differentiability = tuple(flags)  # type: ignore[arg-type]
                        od_loc, od_locs = self.loc(value), tuple(self.loc(i) for i in items)
                continue
            if self.comma_split(key, value, name, "formula", "{\"a, b\": formula}"):
                continue
            names = tuple(n.strip() for n in name.split(","))
            bad = [n for n in names if not IDENT.match(n)]
            if bad:
                self.error(key, f"'{short(name)}' is not an input name or a comma-separated "
                           "list of them")
                continue
            if self.string(value, f"the derivative formula for '{name}'") is None:
                continue
            formulas.append((names, self.located(value)))  # type: ignore[arg-type]
            where, start, at = self.located(key), 0, []
            for n in names:
                start = name.index(n, start)
                at.append(where.at(start, len(n)))
                start += len(n)
            keys.append(tuple(at))
        spec = DerivativesSpec(tuple(formulas), output_differentiability, self.loc(node),
                               tuple(keys), od_loc, od_locs)
        if len(self.diags.items) != n_errors:
            return None  # a partial spec would only draw "no formula for x" errors
        from codegen.formulas import parse_derivatives  # on first use, as for fake rules

        n = len(self.diags.items)
        result = parse_derivatives(spec, schema, self.diags)
        if len(self.diags.items) != n:
            self.ok = False
        return result

    def autocast(self, node: Node) -> AutocastSpec | None:
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
            self.error(fields["device_type"][1], f"unknown autocast device type '{short(device)}'",
                       "expected one of: " + ", ".join(AUTOCAST_DEVICES))
            device = None
        cast = fields["cast_inputs"][1]
        if type(cast) is Scalar and cast.value == AUTOCAST_DTYPE:  # type: ignore[attr-defined]
            dtype: str | None = AUTOCAST_DTYPE
        else:
            dtype = self.dtype(cast, "'cast_inputs'")
            if dtype is not None and dtype not in FLOAT_DTYPES:
                self.error(cast, f"autocast casts inputs to a floating dtype, not '{dtype}'",
                           f"for example float16 or bfloat16, or {AUTOCAST_DTYPE} (the dtype "
                           "autocast is given)")
                dtype = None
        if device is None or dtype is None:
            return None
        return AutocastSpec(device, dtype, self.loc(node))

    def gradcheck(self, node: Node) -> GradcheckSpec | None:
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

    def vmap(self, node: Node):
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
        expected = ("expected pointwise, leading, leading(x, ...) naming the inputs with rows, "
                    "or a Python batching rule package.module:function")
        name, rows, _ = text.partition("(")
        close = suggest(name.strip(), ("leading",) if rows else VMAP_KINDS)  # only leading has rows
        self.error(node, f"unknown vmap rule '{short(text)}'",
                   f"{close} ({expected})" if close else expected)
        return None

# --------------------------------------------------------------------------------------------------
# The library


def directory_op_files(d: str) -> list[str]:
    """The op files of a directory, sorted: its `*.yaml` files but the known-failures file."""
    return [os.path.join(d, n) for n in sorted(os.listdir(d))
            if n.endswith(".yaml") and n != FAILURES_FILE and os.path.isfile(os.path.join(d, n))]


def op_files(paths: list[str], diags: Diagnostics,
             origin: Callable[[str, Diagnostics], Loc | None] | None = None) -> list[str]:
    """Command-line paths -> op files: files as given, directories' `*.yaml` sorted, no repeats.
    `origin(path, diags)`: where the path was written (an entry of `schemas` in pyproject.toml),
    for the error about a directory without op files."""
    out: list[str] = []
    seen: set[str] = set()
    for p in paths:
        if os.path.isdir(p):
            found = directory_op_files(p)
            if not found:
                yml = [n for n in sorted(os.listdir(p)) if n.endswith(".yml")]
                hint = (f"{os.path.join(p, yml[0])} ends in .yml: op files are named *.yaml"
                        if yml else None)
                at = origin(p, diags) if origin is not None else None
                if at is None:
                    diags.error(Loc(p, 1, 1), "directory holds no op files (*.yaml)", hint)
                else:
                    diags.error(at, f"'schemas': {p} holds no op files (*.yaml)", hint or
                                "put the op files there, or name their files or directories "
                                "in 'schemas'")
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


def load_library(paths: list[str], *, rules: verify.Rules | None = None,
                 cache: str | os.PathLike | None = None,
                 origin: Callable[[str, Diagnostics], Loc | None] | None = None) -> OpLibrary:
    """Read, parse and verify op files; raise `UserError` with every error found. With `cache`
    (a directory), each file's result is kept there and reused while the file, the rules and
    opgen are unchanged (Note [Incremental loading]). Many files are parsed on several cores
    (codegen.jobs). `origin`: as for `op_files`."""
    rules = rules or verify.DEFAULT_RULES
    diags = Diagnostics()
    targets = op_files(paths, diags, origin)
    for path in targets:
        check_path(path, diags)
    files = []
    for path, (text, result, items) in zip(targets, _load_files(targets, rules, cache)):
        if text:
            diags.add_source(path, text)
        diags.items.extend(items)
        if result is not None:
            files.append(result)
    lib = OpLibrary(tuple(files))
    verify.verify_across(lib, diags, rules)
    abi_mod.check_namespaces(lib, diags)
    if diags.has_errors:
        raise LoadErrors(diags, lib, rules)
    return _out_tags(lib)


class LoadErrors(UserError):
    """Errors found while loading, with what did load: the library of every op read (`lib`),
    for the later stages to look at the sound ones (codegen.gen.add_later_errors)."""

    def __init__(self, diags: Diagnostics, lib: OpLibrary, rules: verify.Rules) -> None:
        super().__init__(diags)
        self.lib = lib
        self.rules = rules

    def sound(self) -> tuple[OpLibrary, set[str]]:
        """The library without the ops whose schema is refused (later stages assume it sound),
        and the names of those ops."""
        files, left_out = [], set()
        for f in self.lib.files:
            ops = tuple(op for op in f.ops if verify.verify_op(op, Diagnostics(), self.rules))
            left_out |= {f"{op.namespace}.{op.name.name}" for op in f.ops if op not in ops}
            left_out |= {op.name.name for op in f.ops if op not in ops}
            files.append(dataclasses.replace(f, ops=ops) if len(ops) != len(f.ops) else f)
        return _out_tags(OpLibrary(tuple(files))), left_out


# One file's load: its text (for source lines in messages), its OpFile (None when it has none),
# and its diagnostics.
Loaded = tuple[str | None, "OpFile | None", list]

# The bytes of op files that pay for a process of their own: about 0.1 s of parsing, some ten
# times what a fork and the trip of the results back cost.
PARSE_BYTES_PER_PROCESS = 128 * 1024


def _load_files(paths: list[str], rules: verify.Rules,
                cache: str | os.PathLike | None) -> list[Loaded]:
    """Each file's load, from the cache where it holds one; the others are parsed, spread over
    processes when they are many."""
    store = _LoadCache(cache, rules) if cache is not None else None
    done: dict[str, Loaded] = {}
    todo: list[tuple[str, Path | None]] = []     # a file to parse, and where to keep it
    size = 0
    for path in paths:
        entry = store.entry(path) if store is not None else None
        hit = store.lookup(entry) if store is not None and entry is not None else None
        if hit is not None:
            done[path] = hit
            continue
        todo.append((path, entry))
        with contextlib.suppress(OSError):
            size += os.stat(path).st_size

    def parse(part: list[tuple[str, Path | None]]) -> list[tuple[str, Loaded]]:
        return [(p, store.fresh(p, e) if store is not None else _parse(p, rules))
                for p, e in part]

    # No more processes than files: a part with nothing to parse would be a fork for nothing.
    n = max(1, min(jobs.count(size, PARSE_BYTES_PER_PROCESS), len(todo)))
    for part in jobs.split(parse, [todo[i::n] for i in range(n)]):
        done.update(part)
    return [done[p] for p in paths]


def _parse(path: str, rules: verify.Rules) -> Loaded:
    diags = Diagnostics()
    result = _FileLoader(path, diags, rules).load()
    return diags.source(path), result, diags.items


def _out_tags(lib: OpLibrary) -> OpLibrary:
    """Tag `out` the out= ops (Note [Tags from the schema's shape]) that have no functional
    variant in the library (Note [The out tag]); warn where an op file writes the tag on one that
    has."""

    def tagged(op: Op) -> Op:
        if {"inplace", "out"} & set(op.tags) or shape_tag(op.schema) != "out" or \
                functional_variant(lib, op) is not None:
            return op
        return dataclasses.replace(op, tags=op.tags + ("out",))

    def warnings(f: OpFile) -> tuple:
        diags = Diagnostics()
        for op in f.ops:
            functional = functional_variant(lib, op) if "out" in op.tags else None
            if functional is not None:
                diags.warning(op.loc, f"tag 'out' on {op.name}: inductor (torch 2.13 to 2.15) "
                              f"then compiles calls of {functional.name} through this overload, "
                              "and fails with dynamic shapes or an argument left at its default",
                              "remove the tag: the generated Functionalize kernel already lets "
                              "torch.compile take this op (docs/FORMAT.md, the out tag)",
                              name="out-tag", suppress=op.suppress)
        return tuple(diags.items)

    # Only a file with a new tag or warning is rebuilt (most libraries: none).
    files = []
    for f in lib.files:
        ops = tuple(tagged(op) for op in f.ops)
        found = warnings(f)
        if found or any(a is not b for a, b in zip(ops, f.ops)):
            f = dataclasses.replace(f, ops=ops, warnings=f.warnings + found)
        files.append(f)
    return lib if all(a is b for a, b in zip(files, lib.files)) else OpLibrary(tuple(files))


# Note [Incremental loading]
# Loading one op file (YAML, the schema grammar, fake rules, formulas, the per-op checks) depends on
# the file's bytes, its path, the rules, opgen itself and the installed torch (a formula naming a
# torch function opgen's record lacks is looked up there: Note [Formula vocabulary] in
# codegen/formulas.py), nothing else: checks across files run after (verify_across, the ABI
# checks). So a file's result, its OpFile and its diagnostics, is
# stored under a digest of those, and a library where one file changed parses only that file. The
# store is a cache: anything wrong with it (unreadable, truncated, from another Python) only means
# the file is loaded again.


@functools.lru_cache(maxsize=1)
def _opgen_digest() -> str:
    """What opgen's own loading depends on: its sources, grammars and records, the versions of
    the parsers it uses, and the installed torch."""
    import lark

    h = hashlib.sha256(f"{sys.version}\0{yaml.__version__}\0{lark.__version__}\0"
                       f"{_torch_identity()}".encode())
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".lark", ".json") and "__pycache__" not in path.parts:
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _torch_identity() -> str:
    """Which torch is installed, without importing it (seconds): its directory and the bytes of
    its `version.py` (version and git revision); empty without torch."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
        where = list(spec.submodule_search_locations or []) if spec is not None else []
        if not where:
            return ""
        return where[0] + "\0" + (Path(where[0]) / "version.py").read_text(errors="replace")
    except (ImportError, ValueError, OSError):
        return ""


class _LoadCache:
    def __init__(self, directory: str | os.PathLike, rules: verify.Rules):
        self.dir = Path(directory)
        self.rules = rules
        self.salt = f"{_opgen_digest()}\0{rules!r}".encode()

    def entry(self, path: str) -> Path | None:
        """Where `path`'s result is kept, for its current bytes (None: it cannot be read)."""
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except OSError:
            return None
        if len(data) > MAX_FILE_BYTES:
            return None
        key = hashlib.sha256(self.salt + b"\0" + os.fsencode(path) + b"\0" + data).hexdigest()
        return self.dir / key[:2] / key

    def lookup(self, entry: Path) -> Loaded | None:
        """The load kept at `entry`, if there is one."""
        try:
            with open(entry, "rb") as f:
                text, result, items = pickle.load(f)
        except Exception:   # noqa: BLE001  (a missing or unusable entry: load the file)
            return None
        return text, result, items

    def fresh(self, path: str, entry: Path | None) -> Loaded:
        """`path` parsed, and its result kept at `entry` (None: the file could not be read,
        which the loader reports)."""
        loaded = _parse(path, self.rules)
        if entry is not None:
            try:
                entry.parent.mkdir(parents=True, exist_ok=True)
                tmp = entry.with_name(f"{entry.name}.{os.getpid()}.tmp")
                with open(tmp, "wb") as f:
                    pickle.dump(loaded, f, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(tmp, entry)
            except (OSError, pickle.PicklingError, TypeError, AttributeError):
                # A read-only or full disk, or an IR object pickle cannot take: no cache entry,
                # same result.
                with contextlib.suppress(OSError, UnboundLocalError):
                    os.unlink(tmp)
        return loaded
