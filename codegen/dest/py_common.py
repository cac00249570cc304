"""What the generators of `_reg_<ns>.py` share (codegen.dest.py_reg composes them): the pieces a
section is made of, names of ops as the registrations spell them (Python's precedence for
emitted expressions is codegen.expr's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from codegen import escape, reserved
from codegen.config import Project
from codegen.layout import impl_name, python_module
from codegen.layout import locate as locate_in_func
from codegen.dest.py_sources import PySources
from codegen.diagnostics import Diagnostics, Loc
from codegen.model import BaseTy, BaseType, Op, OpLibrary, PyRef, Span
from codegen.rendering import render

TENSOR = BaseType(BaseTy.Tensor)


def returns_loc(op: Op) -> Loc:
    """Where the op's returns are written (its `func:` when that is unknown)."""
    spans = [r.span for r in op.schema.returns]
    if not spans or any(sp is None for sp in spans):
        return op.loc
    return locate_in_func(op, Span(spans[0].start, spans[-1].end))  # type: ignore[union-attr]


# Every string literal of the generated Python is written by codegen.escape.
q = escape.py_string


def wrap_call(line: str, width: int = 100) -> str:
    """A call statement, one argument per line when it is wider than `width`."""
    if len(line) <= width or not line.endswith(")"):
        return line
    start = line.index("(")
    args, depth, quote, current, escaped = [], 0, None, "", False
    for ch in line[start + 1:-1]:
        if quote:
            # Inside a literal: a backslash escapes the next character, quotes included.
            quote = None if ch == quote and not escaped else quote
            escaped = ch == "\\" and not escaped
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(current.strip())
            current = ""
            continue
        current += ch
    args.append(current.strip())
    return line[:start + 1] + "\n" + "".join(f"    {a},\n" for a in args) + ")"


def module_name(project: Project, ns: str) -> str:
    """`<package>._reg_<ns>`, the module `m.set_python_module` names."""
    return python_module(project, ns)


def qualname(op: Op) -> str:
    """`ns::name` or `ns::name.overload`, as torch.library's registration functions take it."""
    n = op.name
    return f"{n.namespace}::{n.name}" + (f".{n.overload}" if n.overload else "")


def op_attr(op: Op) -> str:
    """The op's OpOverload below `_ops` (`torch.ops.<ns>`): `name.overload`."""
    return f"{op.name.name}.{op.name.overload_or_default}"


@dataclass
class Function:
    name: str
    params: str
    body: list[str]
    doc: str | None = None
    decorators: list[str] = field(default_factory=list)

    def lines(self, indent: str = "") -> list[str]:
        """The definition's lines, each indented by `indent` (a method's: four spaces)."""
        out = [f"{indent}@{d}\n" for d in self.decorators]
        out.append(f"{indent}def {self.name}({self.params}):\n")
        if self.doc:
            out.append(f'{indent}    """{escape.docstring(self.doc, len(indent) + 4)}"""\n')
        out.extend(f"{indent}    {line}\n" for line in self.body)
        return out


@dataclass
class Class:
    """A class of static methods (a torch.autograd.Function)."""
    name: str
    base: str
    doc: str
    methods: list[Function]


@dataclass
class Section:
    """Everything the module holds for one op: functions and classes, then registration
    statements."""
    schema: str
    functions: list[Function | Class] = field(default_factory=list)
    registrations: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The section as `_reg_<ns>.py` holds it, less its last newline. Python rather than a
        template: the module has one section per op, and a template reads each piece through
        jinja's attribute lookup."""
        out = [f"\n\n# {escape.py_comment(self.schema)}\n"]
        for f in self.functions:
            out.append("\n\n")
            if isinstance(f, Class):
                out.append(f'class {f.name}({f.base}):\n    """{escape.docstring(f.doc)}"""\n')
                for m in f.methods:
                    out.append("\n")
                    out.extend(m.lines("    "))
            else:
                out.extend(f.lines())
        if self.functions:
            out.append("\n\n")
        out.extend(f"{r}\n" for r in self.registrations)
        return "".join(out)[:-1]


def op_name(op: Op) -> str:
    """The op's name inside its namespace, as `Library.impl` takes it (`m.impl` spells it alike)."""
    return impl_name(op)


def twin_namespace(ns: str) -> str:
    """The namespace of the positional twins of namespace `ns`'s ops (Note [Positional twins] in
    codegen/dest/py_vmap.py): `opgen_` is opgen's own, no op file names such a namespace."""
    return f"opgen_vmap_{ns}"


def camel(name: str) -> str:
    """`smooth_clamp` -> `SmoothClamp` (an empty part, from `__` or a trailing `_`, stays `_`)."""
    return "".join(p[:1].upper() + p[1:] if p else "_" for p in name.split("_"))


# --------------------------------------------------------------------------------------------------
# The module's scope

# Helper functions a generated module may need, and the helpers each one calls.
HELPERS: dict[str, tuple[str, ...]] = {
    "broadcast": ("result_type", "common_device"),
    "result_type": (),
    "common_device": (),
    "reduce": (),
    "pointwise_batch": (),
    "fold_leading": (),
    "loop_batch": (),
    "loop_samples": (),
    "twins": ("loop_samples",),
    "not_implemented": (),
    "raising_backward": (),
    "first_order": ("raising_backward",),
    "no_derivative": ("apply", "raising_backward"),
    "apply": (),
    "has_tangent": (),
    "bump": (),
    "autocast_to_active": (),
}


@lru_cache(maxsize=1)
def reg_module_names() -> frozenset[str]:
    """Module-level names of every `runtime._reg_<ns>` module before its ops' sections: imports,
    `_lib`, `_ops`, and every helper (rendered with all of them)."""
    text = render("py_reg.py.j2", banner="#", ns="ns", twin_ns=twin_namespace("ns"),
                  module="runtime._reg_ns", imports=[], helpers=list(HELPERS), aliases=[],
                  sections=[])
    return reserved.bound_names(text)


class Reach:
    """How one generated function spells the module-level names and builtins it reads
    (`r.torch`, `r.len`, `r._ops`, `r._apply`): by their own names, except those an argument of
    the op hides there (a parameter `Tensor list`, `int sum`, `Tensor torch`), which it reaches
    through their module-level alias (`ModuleScope.alias`). Argument names are the op's API
    (callers pass them by keyword), so they stay; what the generated code reads moves instead."""

    def __init__(self, scope: ModuleScope | None, hidden: frozenset[str]):
        self._scope = scope
        self._hidden = hidden

    def __getattr__(self, name: str) -> str:
        if name not in _reachable():
            raise AttributeError(f"{name!r} is neither a builtin nor a name of the module")
        if name not in self._hidden:
            return name
        assert self._scope is not None
        return self._scope.alias(name)


# A function that reads every name as itself (no argument of an op among its parameters).
PLAIN = Reach(None, frozenset())


@lru_cache(maxsize=1)
def _reachable() -> frozenset[str]:
    return reg_module_names() | reserved.PY_BUILTINS


class ModuleScope:
    """The module-level scope of one namespace's `_reg_<ns>.py` that the concern generators
    (py_kernels, py_fake, ...) render into: names given out, imports, helpers, sections."""

    def __init__(self, lib: OpLibrary, ns: str, names: dict[str, str], diags: Diagnostics,
                 sources: PySources):
        self.lib = lib
        self.sources = sources
        self.ns = ns
        self.names = names
        self.diags = diags
        self.helpers: set[str] = set()
        self.imports: dict[tuple[str, str], str] = {}       # (module, name) -> local name
        self.sections: list[Section] = []
        # Module-level names given out so far, and those never to give: what the module defines
        # and calls before its sections, every builtin and keyword, and every argument name of
        # the namespace's ops (so no parameter of a generated function can hide one).
        self.taken: set[str] = set(reg_module_names() | reserved.PY_BUILTINS
                                   | reserved.PY_KEYWORDS)
        self.taken.update(a.name for op in lib.ops if op.namespace == ns
                          for a in op.schema.arguments)
        self.aliases: dict[str, str] = {}       # module-level name or builtin -> its alias

    def alias(self, name: str) -> str:
        """The module-level alias of `name` (`torch`, `_ops`, a helper, a builtin) for the
        functions in which an argument hides it: `_len = len`, `_ops_ = _ops`. Given out like
        any module-level name, so no argument of the namespace hides the alias."""
        if name not in self.aliases:
            # `_x_`, not `__x`: a method of a generated class would mangle a `__` name.
            self.aliases[name] = self.define(f"{name}_" if name.startswith("_") else f"_{name}")
        return self.aliases[name]

    def reach(self, op: Op, *user_locals: str) -> Reach:
        """How a generated function of `op` whose parameters or locals are named after its
        arguments (and `user_locals`, names an op file gives its locals) spells what it reads
        from the module and the builtins."""
        return Reach(self, frozenset(a.name for a in op.schema.arguments) | set(user_locals))

    def define(self, name: str) -> str:
        """A new module-level name: `name`, or `name_`, ... when that is taken."""
        name = reserved.fresh(name, self.taken)
        self.taken.add(name)
        return name

    def local_name(self, ref: PyRef) -> str:
        """The module-level name a user function is imported as: its own, unless the module
        owns it (`len`, `functools`, `_ops`, a generated function's name), which gets the
        module's path as prefix (`_pkg_mod_len`)."""
        key = (ref.module, ref.name)
        if key not in self.imports:
            local = ref.name.split(".")[0]
            if local in self.taken or local.startswith("_"):
                local = "_" + ref.module.replace(".", "_") + "_" + local
            self.imports[key] = self.define(local)
        return self.imports[key]

    def ref_expr(self, ref: PyRef) -> str:
        """An expression for `ref` (`pkg.mod:Class.method` names an attribute of an import)."""
        local = self.local_name(ref)
        rest = ref.name.split(".")[1:]
        return ".".join([local] + rest)
