"""Semantic checks on parsed op records: `Op` IR in, located diagnostics out.

The grammar only decides what a schema *says*; this module decides whether it is an op we can
register and generate code for: names that must become C++ and Python identifiers and file names,
types and alias annotations custom ops can carry, defaults that fit their type, dispatch
combinations torch rejects at registration time, duplicate ops across files. torchgen's in-place
and out= conventions (torchgen/model.py `FunctionSchema.__post_init__`) are errors only in files
with `conventions: aten` (Note [Aten conventions]).

Checks that need the YAML (unknown keys, tags, sample values) live in `codegen.load`, which holds
the nodes; everything here works from the IR and points into the `func:` string through
`Op.func.at(...)`. `verify_op` returns whether the op passed, so callers can skip follow-on work
(fake rules, formulas) that would only repeat the same mistake.

Rules that PyTorch's own native_functions.yaml breaks are switched by `Rules` (Note [Rules torch
breaks]); our op files get them all.
"""

from __future__ import annotations

import keyword
import math
import re
from dataclasses import dataclass

from codegen import enums, reserved
from codegen.diagnostics import Diagnostic, Diagnostics, Loc, suggest
from codegen.model import (
    BASE_TYPES,
    SCRIPT_ONLY_BASE,
    Annotation,
    Argument,
    BaseTy,
    BaseType,
    BoolDefault,
    ComplexDefault,
    CppKernel,
    Default,
    DispatchKey,
    EnumDefault,
    ExportLoss,
    FloatDefault,
    FunctionSchema,
    Generic,
    GenericType,
    IntDefault,
    ListDefault,
    ListType,
    NoneDefault,
    Op,
    OpLibrary,
    OptionalType,
    PyRef,
    Return,
    Span,
    StrDefault,
    Type,
    TypeVar,
    holds_dict,
    holds_str_or_device,
    is_tensor_like,
    iter_types,
    strip_optional,
    unexported_return,
    untraceable_argument,
    untraceable_return,
    without_alias,
)
from codegen.schema_errors import foreign_type_hint
from codegen.tags import effect_only

# --------------------------------------------------------------------------------------------------
# Note [Rules torch breaks]
#
# native_functions.yaml names three arguments `from`, a Python keyword
# (`random_.from(Tensor(a!) self, int from, ...)`): torch's bindings parse arguments in C++ and
# never spell them in Python, and torchgen's own keyword check excepts exactly these three
# (torchgen/gen.py, error_check_native_functions). Our typed Python API declares every argument as
# a Python parameter, so our op files may not. The benchmark that loads torch's corpus
# (bench/bench_load.py) runs with `Rules.torch_corpus()`, which excepts the same three. aten's factory
# ops also have CPU and CUDA kernels without a Tensor argument: torchgen registers BackendSelect
# kernels that pick the backend from their TensorOptions, which a custom op does not get, so only
# the corpus may. Every other rule stays on, and the corpus passes them all.


@dataclass(frozen=True)
class Rules:
    # (op name with overload, argument) pairs allowed although the argument is a Python keyword.
    keyword_argument_exceptions: frozenset[tuple[str, str]] = frozenset()
    # Device kernels of ops without Tensor arguments are reached (aten's BackendSelect).
    backend_select: bool = False

    @staticmethod
    def torch_corpus() -> Rules:
        return Rules(keyword_argument_exceptions=frozenset({
            ("aten::_has_compatible_shallow_copy_type", "from"),
            ("aten::random_.from", "from"),
            ("aten::uniform_", "from"),
        }), backend_select=True)


DEFAULT_RULES = Rules()

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PLAIN_NAME = IDENT.match

PY_KEYWORDS = frozenset(keyword.kwlist)

# The default values torch's schema parser accepts for enum-like types (tests/test_verify.py checks
# each against torch._C.parse_schema): `int reduction=Mean` is at::Reduction::Mean.
INT_ENUM_DEFAULTS = frozenset({"Mean"})
MEMORY_FORMAT_DEFAULTS = frozenset({"contiguous_format"})
LAYOUT_DEFAULTS = frozenset({"strided"})
SCALAR_TYPE_DEFAULTS = enums.SCALAR_TYPE_NAMES

# torchgen groups these keyword-only arguments into TensorOptions (factory functions only).
TENSOR_OPTIONS = (("dtype", BaseTy.ScalarType), ("layout", BaseTy.Layout),
                  ("device", BaseTy.Device), ("pin_memory", BaseTy.bool))

PLAIN_TENSOR = BaseType(BaseTy.Tensor)


# --------------------------------------------------------------------------------------------------
# Entry points


def verify_library(lib: OpLibrary, diags: Diagnostics, rules: Rules = DEFAULT_RULES) -> bool:
    """Every check on every op, then the checks across ops. True when nothing was wrong."""
    ok = True
    for op in lib.ops:
        ok = verify_op(op, diags, rules) and ok
    return verify_across(lib, diags, rules) and ok


def verify_op(op: Op, diags: Diagnostics, rules: Rules = DEFAULT_RULES, *,
              fake_loc: Loc | None = None,
              conventions: list[Convention] | None = None,
              namespace_checked: bool = False) -> bool:
    """Checks on one op; `fake_loc` is where its `fake:` is, when it has one not yet parsed into
    `op.fake`. True when the op passed. torchgen's conventions the op breaks are appended to
    `conventions` (Note [Aten conventions]): errors only in a file that asks for them.
    `namespace_checked`: the op's namespace is its file's, checked (and reported) there once."""
    v = _OpVerifier(op, diags, rules, conventions, namespace_checked)
    v.names()
    v.types()
    v.defaults()
    v.aliasing()
    v.traceable()
    v.dispatch(fake_loc if fake_loc is not None else _fake_loc(op))
    v.vmap()
    v.autocast()
    return v.ok


def verify_across(lib: OpLibrary, diags: Diagnostics, rules: Rules = DEFAULT_RULES) -> bool:
    """Checks between ops: each (namespace, name, overload) defined once in the library."""
    ok = True
    first: dict[tuple[str | None, str, str], Op] = {}
    for op in lib.ops:
        key = (op.schema.name.namespace, op.schema.name.name, op.schema.name.overload)
        if key in first:
            prev = first[key]
            what = (f"overload '{op.schema.name}'" if op.schema.name.overload
                    else f"op '{op.schema.name}' (default overload)")
            diags.error(_name_loc(op), f"{what} is defined twice",
                        f"first defined at {prev.loc}; give one of them another overload name")
            ok = False
        else:
            first[key] = op
    return ok


def _fake_loc(op: Op) -> Loc | None:
    if op.fake is None:
        return None
    loc = getattr(op.fake, "loc", None)
    return loc if isinstance(loc, Loc) else op.loc


def _name_loc(op: Op) -> Loc:
    return _at(op, op.schema.name.span)


def _at(op: Op, span: Span | None) -> Loc:
    if span is None or op.func is None or span.end <= span.start:
        return op.loc
    return op.func.at(span.start, span.end - span.start)


def _join(spans: list[Span | None]) -> Span | None:
    """The span from the first to the last of `spans` (None if any is unknown)."""
    if not spans or any(s is None for s in spans):
        return None
    return Span(spans[0].start, spans[-1].end)  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------------------
# Note [Aten conventions]
#
# torchgen holds ATen's operators to conventions (in-place ops are `name_(Tensor(a!) self, ...) ->
# Tensor(a!)`, out= ops take their outputs keyword-only and return them, op names do not end in
# `_out`, ...) that torch, c10 and torch.library do not: custom op libraries break them on purpose
# (the extension-cpp tutorial's `myadd_out(Tensor a, Tensor b, Tensor(a!) out) -> ()`). Breaking one
# costs nothing by itself, so by default it is no error; what it does cost is said where it is
# known: an op torch.compile cannot functionalize gets a `not-functionalizable` warning from
# codegen.dest.py_reg, which knows the whole library. A file with `conventions: aten` gets every
# convention it breaks as an error, as torchgen would.

# The message every convention error ends with.
CONVENTIONS_FLAG = "conventions: aten"

# Warnings that a convention error of the same op says again (an in-place name without a
# mutation): a file with `conventions: aten` gets the error alone.
CONVENTION_WARNINGS = frozenset({"inplace-without-mutation"})


@dataclass(frozen=True)
class Convention:
    """A torchgen convention an op breaks: an error in a file with `conventions: aten`."""

    loc: Loc
    message: str
    hint: str | None = None

    def report(self, diags: Diagnostics) -> None:
        diags.items.append(Diagnostic(self.loc, self.message, self.hint, "error", None,
                                      CONVENTIONS_FLAG))


# --------------------------------------------------------------------------------------------------
# One op


def identifier_problem(name: str, what: str, *, python: bool, cpp: bool,
                       allowed: frozenset[str] = frozenset()) -> tuple[str, str] | None:
    """What is wrong with `name` as an identifier (message, hint), or None: not one, or a Python
    (`python`) or C++ (`cpp`) keyword not in `allowed`."""
    if not IDENT.match(name):
        return (f"{what} '{name}' is not an identifier",
                "use ASCII letters, digits and '_', not starting with a digit")
    if name in allowed:
        return None
    if python and name in PY_KEYWORDS:
        return f"{what} '{name}' is a Python keyword", f"rename it, for example '{name}_'"
    if cpp and name in reserved.CPP_KEYWORDS:
        return f"{what} '{name}' is a C++ keyword", f"rename it, for example '{name}_'"
    return None


def namespace_problem(ns: str) -> tuple[str, str] | None:
    """What is wrong with `ns` as a namespace (message, hint), or None. A namespace is spelled as
    is in C++ (`namespace <ns>`, TORCH_LIBRARY) and reached as `torch.ops.<ns>`: an identifier
    and no keyword, neither a macro nor the generated code's, nor one of torch.ops' own
    attributes."""
    problem = identifier_problem(ns, "namespace", python=True, cpp=True)
    if problem is not None:
        return problem
    if ns in reserved.object_macros():
        return (f"namespace '{ns}' is a C/C++ macro (the headers the generated code includes "
                "define it), so C++ cannot spell the namespace", "rename the namespace")
    if ns in reserved.CPP_UNQUALIFIED_TYPES:
        return (f"namespace '{ns}' is a type the generated C++ names unqualified ({ns} n), so "
                "C++ cannot declare the namespace", "rename the namespace")
    if reserved.is_cpp_reserved(ns):
        return (f"namespace '{ns}' is reserved: the generated C++ keeps its own helpers in "
                f"namespace '{reserved.CPP_NAMESPACE}' and its names start with 'opgen_'",
                "rename the namespace")
    if ns in reserved.torch_ops_attributes():
        return (f"namespace '{ns}' is an attribute of torch.ops itself (torch.ops.{ns}), so "
                "torch could never find these ops by name", "rename the namespace")
    if len(ns) > 4 and ns.startswith("__") and ns.endswith("__"):
        # torch.ops is a module: a dunder attribute there is the import system's
        # (`__path__` would make it look like a package) or Python's.
        return (f"namespace '{ns}' is a dunder name, which Python reserves for module "
                f"attributes such as torch.ops.{ns}", "rename the namespace")
    return None


class _OpVerifier:
    def __init__(self, op: Op, diags: Diagnostics, rules: Rules,
                 conventions: list[Convention] | None = None,
                 namespace_checked: bool = False) -> None:
        self.op = op
        self.namespace_checked = namespace_checked
        self.schema: FunctionSchema = op.schema
        self.diags = diags
        self.rules = rules
        self.conventions = conventions if conventions is not None else []
        self.ok = True

    def error(self, span: Span | None, message: str, hint: str | None = None) -> None:
        self.ok = False
        self.diags.error(_at(self.op, span), message, hint)

    def error_at(self, loc: Loc, message: str, hint: str | None = None) -> None:
        self.ok = False
        self.diags.error(loc, message, hint)

    def convention(self, span: Span | None, message: str, hint: str | None = None) -> None:
        """A torchgen convention the op breaks (Note [Aten conventions])."""
        self.conventions.append(Convention(_at(self.op, span), message, hint))

    def warning(self, span: Span | None, name: str, message: str,
                hint: str | None = None) -> None:
        self.diags.warning(_at(self.op, span), message, hint, name=name,
                           suppress=self.op.suppress)

    # -- names -------------------------------------------------------------------------------------

    def names(self) -> None:
        name = self.schema.name
        span = name.span
        if name.namespace is not None and not self.namespace_checked:
            problem = namespace_problem(name.namespace)
            if problem is not None:
                self.error(span, *problem)
        if self.identifier(name.name, "op name", span, python=True, cpp=True) and \
                name.name in reserved.op_namespace_attributes():
            self.error(span, f"op name '{name.name}' is an attribute of every torch.ops "
                       f"namespace (torch.ops.{name.namespace or '<ns>'}.{name.name}), so "
                       "torch could never find this op by name", "rename the op")
        if name.overload:
            # Overloads only ever appear joined to the op name (`add.Tensor`, `add_Tensor`), so
            # keywords are fine: torch's own corpus has overloads `int`, `float` and `from`.
            if self.identifier(name.overload, "overload name", span, python=False, cpp=False) \
                    and (name.overload in reserved.op_packet_attributes()
                         or name.overload.startswith("__")) and name.overload != "default":
                self.error(span, f"overload name '{name.overload}' is "
                           + ("reserved by torch (torch.ops looks up names starting with '__' "
                              "on the op itself)" if name.overload.startswith("__") else
                              f"an attribute of every op (torch.ops.{name.namespace or '<ns>'}.{name.name}."
                              f"{name.overload})")
                           + ", so torch could never find this overload by name",
                           "rename the overload")
            if name.overload == "default":
                self.error(span, "overload name 'default' is reserved",
                           "torch.ops.<ns>.<op>.default is the overload without a name")
        if name.name.endswith("_out") and not name.is_dunder:
            self.convention(span, f"op name '{name.name}' ends in '_out', which is reserved",
                            f"name the op '{name.name[:-4]}' with overload 'out': "
                            f"{name.name[:-4]}.out(...)")

        seen: set[str] = set()
        for a in self.schema.arguments:
            n = a.name
            if n not in seen and _PLAIN_NAME(n) and n not in PY_KEYWORDS and n not in reserved.CPP_KEYWORDS:
                seen.add(n)  # the common case, checked without building messages or spans
                continue
            where = a.name_span or a.span
            allowed = frozenset({n}) if (str(name), n) in \
                self.rules.keyword_argument_exceptions else frozenset()
            if self.identifier(n, "argument name", where, python=True, cpp=True,
                               allowed=allowed):
                if n in seen:
                    self.error(where, f"argument '{n}' is declared twice")
                seen.add(n)
        returned: set[str] = set()
        for r in self.schema.returns:
            if r.name is None:
                continue
            if self.identifier(r.name, "return name", r.span, python=True, cpp=True):
                if r.name in returned:
                    self.error(r.span, f"return name '{r.name}' is used twice")
                returned.add(r.name)

    def identifier(self, name: str, what: str, span: Span | None, *, python: bool, cpp: bool,
                   allowed: frozenset[str] = frozenset()) -> bool:
        problem = identifier_problem(name, what, python=python, cpp=cpp, allowed=allowed)
        if problem is not None:
            self.error(span, *problem)
        return problem is None

    # -- types -------------------------------------------------------------------------------------

    def types(self) -> None:
        if self.schema.is_vararg:
            self.error(self.schema.span, "custom ops cannot take variadic arguments ('...')")
        if self.schema.is_varret:
            self.error(self.schema.span, "custom ops cannot return variadic results ('...')")
        for x in self.schema.arguments + self.schema.returns:  # type: ignore[operator]
            t = x.type
            # Fast path: a plain base type, as most arguments are.
            if type(t) is BaseType and t.alias is None and t.name not in SCRIPT_ONLY_BASE:
                continue
            self.type(t, x.type_span or x.span, _describe(x))

    def type(self, t: Type, span: Span | None, what: str) -> None:
        for sub in iter_types(t):
            if isinstance(sub, TypeVar):
                self.error(sub.span or span, f"unknown type '{sub.name}' for {what}",
                           foreign_type_hint(sub.name) or suggest(sub.name, BASE_TYPES) or
                           "type variables are TorchScript-only; custom ops cannot take them")
                return
            if isinstance(sub, BaseType) and sub.name in SCRIPT_ONLY_BASE:
                self.error(sub.span or span,
                           f"type '{sub.name.value}' ({what}) is TorchScript-only; custom ops "
                           "cannot take or return it")
                return
            # Tuples are checked by the C++ binding (codegen.api.cpp), which binds most.
            if isinstance(sub, GenericType) and sub.kind is not Generic.Dict:
                self.error(sub.span or span,
                           f"type '{sub}' ({what}) is TorchScript-only; custom ops cannot take "
                           "or return it")
                return
            if isinstance(sub, OptionalType) and isinstance(sub.elem, OptionalType):
                self.error(sub.span or span, f"type '{sub}' ({what}) is optional twice")
                return
            alias = None if isinstance(sub, OptionalType) else sub.alias
            if alias is not None:
                self.annotation(sub, alias, span, what)

    def annotation(self, t: Type, alias: Annotation, span: Span | None, what: str) -> None:
        tensor = isinstance(t, BaseType) and t.name is BaseTy.Tensor
        tensor_list = isinstance(t, ListType) and isinstance(strip_optional(t.elem), BaseType) \
            and strip_optional(t.elem).name is BaseTy.Tensor  # type: ignore[union-attr]
        where = alias.span or t.span or span
        if not (tensor or tensor_list):
            # torch registers it (vLLM's merge_attn_states takes `int!? prefill_tokens`), and a
            # value that is not a Tensor can neither alias nor be written: it means nothing.
            self.warning(where, "alias-on-non-tensor",
                         f"alias annotation {alias} on non-Tensor type '{t}' ({what}) has no "
                         "effect: only Tensors alias or are written; torch keeps it in the "
                         "schema, so torch.compile may take the op for a mutating one",
                         "drop the annotation: only Tensor, Tensor?, Tensor[] and Tensor?[] "
                         "carry alias annotations")
            return
        if alias.is_write and len(alias.alias_set) > 1:
            self.error(where, f"a mutable alias annotation names a single alias set, not "
                       f"{alias}", f"write ({alias.alias_set[0]}!)")

    # -- defaults ----------------------------------------------------------------------------------

    def defaults(self) -> None:
        seen_default: Argument | None = None
        for a in self.schema.arguments:
            if a.default is not None:
                self.default(a)
                if not a.kwarg_only:
                    seen_default = a
            elif not a.kwarg_only and seen_default is not None:
                if isinstance(a.type, ListType):
                    # torch registers it, but its Python tooling builds an inspect.Signature from
                    # the schema and fails: torch.fx normalization (inductor, SchemaCheckMode).
                    self.warning(a.name_span or a.span, "list-after-default",
                                 f"list argument '{a.name}' has no default but follows "
                                 f"'{seen_default.name}', which has one: torch registers the op, "
                                 "but torch.compile's inductor and opcheck's test_schema fail on "
                                 "it (torch 2.13 turns the schema into a Python signature)",
                                 f"give '{a.name}' a default, or move it after '*' "
                                 "(keyword-only)")
                else:
                    # torch refuses it too: FunctionSchema asserts "Non-default positional
                    # argument follows default argument" (parse_schema and Library.define), except
                    # for list types, which it lets through for old serialized schemas
                    # (executorch's mxfp conv2d has `Tensor? bias=None, int[] stride`).
                    self.error(a.name_span or a.span,
                               f"argument '{a.name}' has no default but follows "
                               f"'{seen_default.name}', which has one",
                               "give it a default, or move it after '*' (keyword-only); torch "
                               "refuses this order as well (only list types may follow a "
                               "default)")
                seen_default = None

    def default(self, a: Argument) -> None:
        d = a.default
        assert d is not None
        span = a.default_span or d.span or a.span
        if not _finite(d):
            self.error(span, f"default of argument '{a.name}' is out of range for a double",
                       "defaults are finite numbers")
            return
        if isinstance(d, NoneDefault) and not isinstance(a.type, OptionalType):
            self.error(span, f"default None for argument '{a.name}' of non-optional type "
                       f"'{a.type}'", f"make the type optional: {a.type}?")
            return
        if isinstance(d, ListDefault) and _fits(d, a.type) and not _list_default_readable(a.type):
            # c10's schema parser throws at m.def, which runs when the library is loaded: the
            # process aborts (`terminate called after throwing ... ErrorReport`).
            self.error(span, f"torch refuses a list default on type '{a.type}' of argument "
                       f"'{a.name}' when the library is loaded (it reads one only on a "
                       "non-optional list of int, SymInt, float, bool, ScalarType, Layout, "
                       "MemoryFormat or DeviceIndex)",
                       "make the default None, or give it none" if isinstance(a.type, OptionalType)
                       else f"make it optional with the default None ({a.type}? {a.name}=None), "
                       "or give it no default")
            return
        if not _fits(d, a.type):
            self.error(span, f"default value {d} does not fit type '{a.type}' of argument "
                       f"'{a.name}'", _default_hint(d, a.type))

    def unexported(self, r: Return, loss: ExportLoss) -> None:
        """A return torch.compile traces but a program torch.export saves loses."""
        where = "it returns" if len(self.schema.returns) == 1 else "among its returns is"
        if loss is ExportLoss.SAVE:
            self.warning(r.type_span or r.span, "non-tensor-return",
                         f"torch.export cannot save a program calling this op: {where} "
                         f"'{r.type}', and torch serializes no list other than Tensor[] nor "
                         "tuple inside a return of an op", "return a Tensor (a 1-dim one for a "
                         "list of numbers) or a Tensor[] where the op must export")
        else:
            self.warning(r.type_span or r.span, "non-tensor-return",
                         f"torch.export cannot load a program calling this op: {where} "
                         f"'{r.type}', and torch loads no saved program whose op returns a bool "
                         "among several values", "return the bool as an int or a 0-dim Tensor "
                         "where the op must export")

    def traceable(self) -> None:
        if not self.ok:
            return  # a type already refused says enough
        s = self.schema
        if effect_only(s):
            self.warning(self._empty_returns(), "no-effect",
                         f"'{s.name}' returns nothing and marks no argument as written: "
                         "torch.compile and torch.export keep its calls (registered as having a "
                         "side effect), but know of no write its kernel makes, and may read what "
                         "it writes before the call",
                         "mark what the kernel writes (`Tensor! output`); an op called for a "
                         "side effect outside tensors (logging, communication, a file) keeps "
                         "this warning off with `suppress: [no-effect]`")
        r = untraceable_return(self.schema.returns)
        lost = unexported_return(self.schema.returns)
        if r is not None and holds_dict(r.type):
            self.warning(r.type_span or r.span, "non-tensor-return",
                         f"torch.compile cannot trace a call of this op: it returns "
                         f"'{r.type}', and Dynamo puts no op returning a Dict in a graph (a "
                         "graph break, so fullgraph=True fails, and so does torch.export with "
                         "strict=True)", "return Tensors (a Tensor[] with a str[] of the keys "
                         "for a Dict of Tensors) where the op must compile")
        elif r is not None and len(self.schema.returns) > 1:
            self.warning(r.type_span or r.span, "non-tensor-return",
                         f"torch.compile and torch.export cannot trace a call of this op: among "
                         f"its returns is '{r.type}', and Dynamo puts no op returning a str or a "
                         "Device in a graph (a graph break, so fullgraph=True fails)",
                         "return Tensors, numbers and dtypes where the op must compile (a str "
                         "as a number the caller maps back)")
        elif r is not None and holds_str_or_device(r.type):
            self.warning(r.type_span or r.span, "non-tensor-return",
                         f"torch.compile cannot trace a call of this op: it returns a lone "
                         f"'{r.type}', which Dynamo does not put in a graph (a graph break, so "
                         "fullgraph=True fails), and torch.export cannot save a program calling "
                         "it", "return a Tensor (a str as a number the caller maps back) where "
                         "the op must compile or export")
        elif r is not None:
            self.warning(r.type_span or r.span, "non-tensor-return",
                         f"torch.compile cannot trace a call of this op: it returns a lone "
                         f"'{r.type}', which Dynamo does not put in a graph (a graph break, so "
                         "fullgraph=True fails), and torch.export records its value as a "
                         "constant", "return a Tensor (a 0-dim one for a number) where the op "
                         "must compile")
        elif lost is not None:
            self.unexported(*lost)
        a = untraceable_argument(self.schema.arguments)
        if a is not None:
            in_dict = holds_dict(a.type)
            self.warning(a.type_span or a.span, "nested-tensor-argument",
                         f"torch.compile cannot compile a call of this op that passes Tensors in "
                         f"'{a.name}': functionalization does not unwrap Tensors inside a "
                         f"{'Dict' if in_dict else 'tuple'} ('{a.type}'), so "
                         "inductor and aot_eager fail"
                         + ("" if in_dict else ", and torch.export makes their sizes static"),
                         "pass the Tensors as Tensor, Tensor? or Tensor[] arguments"
                         + (" (with a str[] of the keys)" if in_dict else ""))

    def _empty_returns(self) -> Span | None:
        """Where the schema's `()` returns are, if it spells them so."""
        text = self.op.func.text if self.op.func is not None else ""
        at = text.rfind("()")
        return Span(at, at + 2) if at > text.rfind("->") >= 0 else None

    # -- aliasing and mutation (torchgen's conventions) --------------------------------------------

    def aliasing(self) -> None:
        s = self.schema
        args = s.arguments
        rets = s.returns
        arg_anns = [a.annotation for a in args]
        ret_anns = [r.annotation for r in rets]
        if s.name.inplace and not any(a.is_write and is_tensor_like(a.type) for a in args):
            self.warning(s.name.span, "inplace-without-mutation",
                         f"'{s.name}' is named like an in-place op, but its schema marks no "
                         "argument as written: if its kernel writes one (as in-place ops do), "
                         "torch.compile and torch.export do not know, and may reorder or drop "
                         "the write",
                         "mark what the kernel writes (`Tensor(a!) self -> Tensor(a!)`); if it "
                         "returns a new Tensor instead, drop the trailing '_' from its name")
        if not s.name.inplace and not any(arg_anns) and not any(ret_anns):
            return  # no aliasing, no mutation: the common case, nothing below applies
        outs = [a for a, ann in zip(args, arg_anns) if a.kwarg_only and ann and ann.is_write]

        # out= arguments come last among the keyword-only ones.
        after_out = False
        for a, ann in zip(args, arg_anns):
            if not a.kwarg_only:
                continue
            if ann is not None and ann.is_write:
                after_out = True
            elif after_out:
                self.convention(a.name_span or a.span,
                                f"keyword-only argument '{a.name}' follows the out= arguments",
                                "mutable keyword-only (out=) arguments come last")
                break

        # Every return annotation names an input's alias set.
        arg_sets = {x for ann in arg_anns if ann for x in ann.alias_set}
        for r, ann in zip(rets, ret_anns):
            if ann is None:
                continue
            if ann.is_fresh:
                self.error(r.type_span or r.span, f"return {r} is marked written with a bare "
                           "'!', an alias set of its own: it aliases no argument",
                           "to return a mutated argument, name its alias set on both: "
                           "Tensor(a!) out -> Tensor(a!)")
                continue
            unknown = [x for x in ann.alias_set if x != "*" and x not in arg_sets]
            if unknown:
                self.error(r.type_span or r.span,
                           f"return aliases '{unknown[0]}', which no argument's annotation names",
                           "annotate the input it aliases, e.g. Tensor(a) self -> Tensor(a)")
                continue
            same = [a for a, a_ann in zip(args, arg_anns) if a_ann == ann]
            if len(same) > 1:
                self.error(r.type_span or r.span, f"return {r} aliases several inputs: "
                           + ", ".join(a.name for a in same))
            if ann.is_write and not same:
                written = [a for a, a_ann in zip(args, arg_anns)
                           if a_ann and a_ann.alias_set == ann.alias_set]
                if written:
                    x = written[0]
                    self.error(x.type_span or x.span,
                               f"argument '{x.name}' is returned as mutable {ann} but is not "
                               f"annotated as written", f"write {_with_write(x)}")

        mutable_rets = [r for r, ann in zip(rets, ret_anns) if ann and ann.is_write]
        if mutable_rets and len(mutable_rets) != len(rets):
            self.convention(_join([r.span for r in rets]) or s.span,
                            "an op returns either only mutated inputs or only new values, not both",
                            "return the mutated inputs separately, or not at all")

        if outs and s.name.inplace:
            self.convention(s.name.span, f"'{s.name}' is both in-place (trailing '_') and out= "
                            "(mutable keyword-only arguments)")
            return
        if s.name.inplace:
            self.inplace()
        elif outs:
            self.out(outs)

        # A mutable return is an out= argument or self (torchgen: methods chain on self);
        # other mutated positional arguments are not returned.
        out_and_self = [a.annotation for a in outs] + [
            ann for a, ann in zip(args, arg_anns) if a.name == "self" and not a.kwarg_only]
        for r in mutable_rets:
            ann = r.annotation
            if ann not in out_and_self and ann in arg_anns:
                self.convention(r.type_span or r.span,
                                f"mutable return {r} aliases a positional argument other than self",
                                "an op that mutates a positional argument returns nothing for it; "
                                "or make it a keyword-only out= argument")

        # torchgen: TensorOptions arguments (dtype, layout, device, pin_memory) are for factory
        # functions, which are functional.
        if any(ann and ann.is_write for ann in arg_anns):
            options = self.tensor_options()
            if options is not None:
                self.convention(_join([options[0].span, options[-1].span]) or s.span,
                                "only functional ops take the TensorOptions arguments "
                                "(dtype, layout, device, pin_memory)",
                                "factory functions, which create their result, take them")

    def inplace(self) -> None:
        s = self.schema
        first = s.arguments[0] if s.arguments else None
        if first is None or first.name != "self" or first.kwarg_only:
            self.convention(s.name.span, f"in-place op '{s.name}' must take 'self' as its first "
                            "argument", f"{s.name.name}(Tensor(a!) self, ...) -> Tensor(a!)")
            return
        if not first.is_write:
            self.convention(first.type_span or first.span,
                            f"in-place op '{s.name}' must mark 'self' as mutated",
                            f"write {_with_write(first)}")
            return
        if isinstance(first.type, BaseType) and first.type.name is BaseTy.Tensor:
            if not (len(s.returns) == 1 and s.returns[0].annotation == first.annotation):
                self.convention(_join([r.span for r in s.returns]) or s.span,
                                f"in-place op '{s.name}' must return self", f"-> {first.type}")
        elif s.returns:
            self.convention(_join([r.span for r in s.returns]) or s.span,
                            f"in-place op '{s.name}' with a non-Tensor self returns nothing",
                            "-> ()")

    def out(self, outs: list[Argument]) -> None:
        s = self.schema
        if any(_unannotated(a.type) != PLAIN_TENSOR for a in outs):
            if s.returns:
                self.convention(s.span, "out= ops with Tensor-list or optional out arguments "
                                "return nothing", "-> ()")
            return
        counted = [a for a in outs if not a.name.startswith("_scratch_")]
        if len(counted) != len(s.returns):
            self.convention(s.span, f"out= op returns {len(s.returns)} value"
                            f"{'s' if len(s.returns) != 1 else ''} for {len(counted)} out argument"
                            f"{'s' if len(counted) != 1 else ''}",
                            "return each out argument, in order, with its annotation")
            return
        for a, r in zip(outs, s.returns):
            if a.annotation != r.annotation:
                self.convention(r.type_span or r.span,
                                f"return {r} does not match out argument '{a.name}' "
                                f"({a.annotation})",
                                "the i-th return is the i-th out argument, with the same "
                                "annotation")
                return

    def tensor_options(self) -> list[Argument] | None:
        """The keyword-only dtype, layout, device, pin_memory run torchgen groups, if present."""
        kw = [a for a in self.schema.arguments if a.kwarg_only]
        n = len(TENSOR_OPTIONS)
        for i in range(len(kw) - n + 1):
            if all(a.name == name and strip_optional(a.type) == BaseType(ty)
                   for a, (name, ty) in zip(kw[i:], TENSOR_OPTIONS)):
                return kw[i:i + n]
        return None

    # -- kernels -----------------------------------------------------------------------------------

    def dispatch(self, fake_loc: Loc | None) -> None:
        op = self.op
        keys = {k for k, _ in op.dispatch}
        cia = DispatchKey.CompositeImplicitAutograd
        cea = DispatchKey.CompositeExplicitAutograd
        if cia in keys and cea in keys:
            self.error_at(op.kernel(cea).loc,  # type: ignore[union-attr]
                          "CompositeImplicitAutograd and CompositeExplicitAutograd kernels "
                          "exclude each other",
                          "keep CompositeExplicitAutograd if you also give derivatives, else "
                          "CompositeImplicitAutograd")
        # The dispatcher picks a device kernel from the Tensor arguments' devices; with none, it
        # finds only a composite kernel (aten's factory ops need BackendSelect, which a custom op
        # does not have).
        device_keys = [k for k, _ in op.dispatch
                       if k in (DispatchKey.CPU, DispatchKey.CUDA, DispatchKey.Meta)]
        if (device_keys and not self.rules.backend_select
                and not any(is_tensor_like(a.type) for a in op.schema.arguments)):
            # torch_sparse's hgt_sample takes its Tensors in Dicts only, which the dispatcher
            # does not look into.
            nested = untraceable_argument(op.schema.arguments)
            what, whose = ("without Tensor arguments", "the Tensor arguments' devices")
            if nested is not None:
                box = "Dict" if holds_dict(nested.type) else "tuple"
                what = f"whose Tensors are all inside a {box} ('{nested.name}')"
                whose = "the devices of its Tensor, Tensor? and Tensor[] arguments alone"
            self.error_at(op.kernel(device_keys[0]).loc,  # type: ignore[union-attr]
                          f"a {device_keys[0].value} kernel of an op {what} is never called: "
                          f"the dispatcher chooses the kernel from {whose}",
                          "register it as CompositeExplicitAutograd, which runs for any device "
                          "(the kernel may read the op's Device argument)")
        if fake_loc is not None:
            if DispatchKey.Meta in keys:
                self.error_at(fake_loc, "an op with a Meta kernel cannot also have a fake rule",
                              "torch.library.register_fake refuses ops with a Meta kernel; "
                              "drop one of them")
            if cia in keys:
                self.error_at(fake_loc, "a CompositeImplicitAutograd op needs no fake rule",
                              "it decomposes into ops that have their own; "
                              "torch.library.register_fake refuses it")
        for _, kernel in op.dispatch:
            if isinstance(kernel, CppKernel):
                parts, keywords, lang = kernel.name.split("::"), reserved.CPP_KEYWORDS, "C++"
            elif isinstance(kernel, PyRef):
                parts = kernel.module.split(".") + kernel.name.split(".")
                keywords, lang = PY_KEYWORDS, "Python"
            else:
                raise TypeError(f"unknown kernel kind {kernel!r}")
            bad = [p for p in parts if p in keywords]
            if bad:
                self.error_at(kernel.loc, f"kernel name '{bad[0]}' is a {lang} keyword",
                              "rename the function")
            elif isinstance(kernel, CppKernel):
                self.cpp_kernel_name(kernel)

    def cpp_kernel_name(self, kernel: CppKernel) -> None:
        """The kernel's C++ name is declared in the generated header as written: the function
        must not be a macro (it is followed by `(`), its namespaces not object-like macros, and
        none of it the generated code's own names."""
        qualified = kernel.qualified(self.op.namespace)
        parts = qualified.lstrip(":").split("::")
        fn = parts[-1]
        if fn in reserved.CPP_UNQUALIFIED_TYPES:
            self.error_at(kernel.loc, f"kernel name '{fn}' is a type the generated header names "
                          f"unqualified ({fn} n): declaring the kernel would hide it",
                          "rename the function")
            return
        if fn in reserved.object_macros() or fn in reserved.function_macros():
            self.error_at(kernel.loc, f"kernel name '{fn}' is a C/C++ macro (the headers the "
                          "generated code includes define it)", "rename the function")
            return
        bad = [p for p in parts[:-1] if p in reserved.object_macros()]
        if bad:
            self.error_at(kernel.loc, f"C++ namespace '{bad[0]}' of kernel '{kernel.name}' is a "
                          "C/C++ macro (the headers the generated code includes define it)",
                          "rename the namespace")
            return
        bad = [p for p in parts if reserved.is_cpp_reserved(p)]
        if bad:
            self.error_at(kernel.loc, f"'{bad[0]}' in kernel name '{kernel.name}' is reserved for "
                          f"the generated C++ (namespace '{reserved.CPP_NAMESPACE}', names "
                          "starting with 'opgen_')", "rename the function")
        elif qualified.lstrip(":") == f"{self.op.namespace}::ops":
            self.error_at(kernel.loc, f"kernel '{qualified}' would clash with the generated call "
                          f"API, namespace {self.op.namespace}::ops", "rename the function")

    def vmap(self) -> None:
        op = self.op
        if op.vmap is None:
            return
        kw_tensors = [a.name for a in self.schema.arguments
                      if a.kwarg_only and is_tensor_like(a.type)]
        if kw_tensors:
            self.error_at(op.vmap.loc, "vmap rules cannot cover keyword-only Tensor arguments "
                          f"('{kw_tensors[0]}')",
                          "torch.library.register_vmap refuses them; make them positional")

    def autocast(self) -> None:
        spec = self.op.autocast
        if spec is None:
            return
        if self.schema.kwarg_only:
            self.error_at(spec.loc, "autocast rules cannot cover ops with keyword-only "
                          f"arguments ('{self.schema.kwarg_only[0].name}')",
                          "torch.library.register_autocast passes positional arguments only; "
                          "make them positional")
        elif self.schema.mutable_arguments:
            self.error_at(spec.loc, f"autocast casts the inputs of functional ops; {self.op.name} "
                          "mutates its arguments")


# --------------------------------------------------------------------------------------------------
# Defaults against types


def _fits(d: Default, t: Type) -> bool:
    if isinstance(t, OptionalType):
        return isinstance(d, NoneDefault) or _fits(d, t.elem)
    if isinstance(t, ListType):
        if isinstance(d, ListDefault):
            return all(_fits(i, t.elem) for i in d.items)
        # `int[2] x=1` means [1, 1]; an unsized list has no such spelling.
        return t.size is not None and _fits(d, t.elem)
    if isinstance(d, ListDefault):
        return False
    if isinstance(t, BaseType):
        ty = t.name
        if ty is BaseTy.int:
            return isinstance(d, IntDefault) or (isinstance(d, EnumDefault)
                                                 and d.name in INT_ENUM_DEFAULTS)
        if ty is BaseTy.SymInt:
            return isinstance(d, IntDefault)
        if ty is BaseTy.DeviceIndex:    # c10::DeviceIndex is int8_t: a wider value would wrap
            return isinstance(d, IntDefault) and -128 <= d.value <= 127
        if ty is BaseTy.float:
            return isinstance(d, (IntDefault, FloatDefault))
        if ty in (BaseTy.bool, BaseTy.SymBool):
            return isinstance(d, BoolDefault)
        if ty is BaseTy.str:
            return isinstance(d, StrDefault)
        if ty is BaseTy.Scalar:
            return isinstance(d, (IntDefault, FloatDefault, ComplexDefault, BoolDefault))
        if isinstance(d, IntDefault) and ty.value in enums.BY_TYPE:
            # torch's own spelling of an enum default (`ScalarType t=6`), in range.
            return enums.by_number(ty.value, d.value) is not None
        if ty is BaseTy.ScalarType:
            return isinstance(d, EnumDefault) and d.name in SCALAR_TYPE_DEFAULTS
        if ty is BaseTy.MemoryFormat:
            return isinstance(d, EnumDefault) and d.name in MEMORY_FORMAT_DEFAULTS
        if ty is BaseTy.Layout:
            return isinstance(d, EnumDefault) and d.name in LAYOUT_DEFAULTS
        if ty is BaseTy.Device:
            return isinstance(d, StrDefault) and enums.device_string_problem(d.value) is None
        return False
    # Class types, type variables, tuples, generics: only None (optional), handled above.
    return False


# The element types of a list c10's schema parser reads a `[...]` default for (convertToList in
# torch/csrc/jit/frontend/function_schema_parser.cpp: ints, with the enums it reads as ints,
# floats, complex numbers and bools); never on an optional list. (complex is refused as a type.)
_LIST_DEFAULT_ELEMS = frozenset({BaseTy.int, BaseTy.SymInt, BaseTy.float, BaseTy.bool,
                                 BaseTy.complex, BaseTy.ScalarType, BaseTy.Layout,
                                 BaseTy.MemoryFormat, BaseTy.DeviceIndex})


def _list_default_readable(t: Type) -> bool:
    return (isinstance(t, ListType) and isinstance(t.elem, BaseType)
            and t.elem.name in _LIST_DEFAULT_ELEMS)


def _finite(d: Default) -> bool:
    if isinstance(d, FloatDefault):
        return math.isfinite(d.value)
    if isinstance(d, ComplexDefault):
        return math.isfinite(d.imag)
    if isinstance(d, ListDefault):
        return all(_finite(i) for i in d.items)
    return True


def _default_hint(d: Default, t: Type) -> str | None:
    base = strip_optional(t)
    if isinstance(base, ListType) and base.size is None and not isinstance(d, ListDefault):
        return f"an unsized list's default is a list: [{d}]"
    if isinstance(base, BaseType):
        ty = base.name
        if isinstance(d, IntDefault) and ty.value in enums.BY_TYPE:
            last = len(enums.BY_TYPE[ty.value]) - 1
            return (f"torch numbers the values of {ty.value} from 0 to {last} (the generated code "
                    f"could not name {d.value}); or write a name, e.g. "
                    + {"ScalarType": "float32", "Layout": "strided",
                       "MemoryFormat": "contiguous_format"}[ty.value])
        if ty is BaseTy.ScalarType and isinstance(d, EnumDefault):
            return suggest(d.name, SCALAR_TYPE_DEFAULTS) or "a dtype name, e.g. float32"
        if ty is BaseTy.MemoryFormat:
            return "the only MemoryFormat default torch accepts is contiguous_format"
        if ty is BaseTy.Layout:
            return "the only Layout default torch accepts is strided"
        if ty is BaseTy.Device:
            if isinstance(d, StrDefault) and \
                    (problem := enums.device_string_problem(d.value)) is not None:
                name = d.value.partition(":")[0]
                close = None if name in enums.DEVICE_TYPES else \
                    "did you mean 'cuda'?" if name.lower() == "gpu" else \
                    suggest(name.lower(), enums.DEVICE_TYPES)
                return f"{close} {problem}" if close else problem
            return 'a device string, e.g. "cpu"'
        if ty is BaseTy.Tensor:
            return "a Tensor's only default is None, on Tensor?"
        if ty is BaseTy.int and isinstance(d, EnumDefault):
            return "the only named int default torch accepts is Mean (at::Reduction::Mean)"
        if ty is BaseTy.DeviceIndex and isinstance(d, IntDefault):
            return "a DeviceIndex is 8-bit: -128 to 127 (-1: the current device)"
        if ty is BaseTy.int and isinstance(d, FloatDefault):
            return "make the type float, or the default an integer"
        if ty in (BaseTy.float, BaseTy.Scalar) and isinstance(d, EnumDefault):
            return ("a number default is a literal, and torch's schema parser reads no nan or "
                    "inf: make the type optional with the default None, and decide in the kernel"
                    if d.name.lower() in ("nan", "inf", "infinity") else "a number, e.g. 1.0")
        if ty is BaseTy.bool:
            return "a bool default is True or False"
    return None


def _describe(x: Argument | Return) -> str:
    if isinstance(x, Argument):
        return f"argument '{x.name}'"
    return "a return" if x.name is None else f"return '{x.name}'"


def _unannotated(t: Type) -> Type:
    return without_alias(t)


def _with_write(a: Argument | Return) -> str:
    ann = a.annotation
    if ann is None:
        return f"Tensor(a!) {a.name}"
    text = str(a.type).replace(str(ann), str(Annotation(ann.alias_set, True,
                                                          ann.alias_set_after)), 1)
    return f"{text} {a.name}" if a.name else text


__all__ = ["Rules", "DEFAULT_RULES", "verify_op", "verify_across", "verify_library", "suggest"]
