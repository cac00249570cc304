"""Op library IR -> `generated/runtime/_reg_<ns>.py`: the Python side of namespace `<ns>`.

`import runtime` imports `runtime._reg_<ns>` right after loading the C++ library (the module named
by its `m.set_python_module`). It registers, on one `torch.library.Library(ns, "FRAGMENT")`, what
one generator module per concern renders for each op, in this order:
- `py_kernels`: Python kernels (dispatch values `package.module:function`), with `Library.impl`;
- `py_functionalize`: `Functionalize` kernels for in-place and out= ops (their functional variant
  plus copies, Note [Functionalizing mutable ops]), so torch.compile and export take them;
- `py_fake`: fake kernels from shape rules, the schema or Python functions
  (`torch.library.register_fake`), unless `codegen.dest.cpp_meta` made the rule a C++ Meta kernel;
- `py_autograd`: autograd from derivative formulas (Note [Generated autograd]);
- `py_vmap`: batching rules (`pointwise`, `leading`, Python functions, and generated ones where
  torch's loop fallback refuses the op);
- `py_autocast`: autocast policies.
This module composes them: it gives out module-level names, imports of user functions and the
helpers the generated code calls (`HELPERS`, written into the module, so it depends on torch
alone), and renders the one module. `py_common` holds what the concerns share, `py_sources` the
checks of Python functions named in op files.

Note [Generators take what they render with]
The generators under codegen/dest render with the banner and jinja2 environment of
`codegen.gen`, which imports them; they do not import `codegen.gen` back. `gen.generators()`
hands over its `banner` and `template_environment`; a caller outside codegen.gen (tests,
`runtime.testing.load_python_library`) that passes none gets codegen.gen's, looked up then.
"""

from __future__ import annotations

from typing import Callable

import jinja2

from codegen import config
from codegen import formulas as F
from codegen import reserved
from codegen.api import python as P
from codegen.dest import (cpp_library, py_autocast, py_autograd, py_fake, py_functionalize,
                          py_kernels, py_vmap)
from codegen.dest.py_common import (Class, Function, Section, module_name, op_attr, qualname,
                                    wrap_call)
from codegen.dest.py_sources import PySources, check_signature, find_module_source
from codegen.diagnostics import Diagnostics
from codegen.model import Op, OpLibrary, PyRef

# What other modules have always imported from here.
from codegen.dest.py_autograd import FormulaEmitter, Names  # noqa: E402,F401
from codegen.dest.py_fake import FakeEmitter, fake_of, needs_fake  # noqa: E402,F401
from codegen.dest.py_functionalize import functional_variant  # noqa: E402,F401
from codegen.dest.py_sources import _parse_module  # noqa: E402,F401

__all__ = ["Class", "Function", "Section", "module_name", "op_attr", "qualname", "wrap_call",
           "PySources", "check_signature", "find_module_source", "FormulaEmitter", "Names",
           "FakeEmitter", "fake_of", "needs_fake", "functional_variant", "HELPERS",
           "environment", "generate_registrations"]


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
    "not_implemented": (),
    "first_order": (),
    "apply": (),
}


def _rendering(banner, template_environment):
    """`banner` and `template_environment` as given, else codegen.gen's (Note [Generators take
    what they render with])."""
    if banner is None or template_environment is None:
        from codegen import gen

        banner = banner or gen.banner
        template_environment = template_environment or gen.template_environment
    return banner, template_environment


def environment() -> jinja2.Environment:
    return _rendering(None, None)[1]()


# --------------------------------------------------------------------------------------------------
# One namespace's module


class _Module:
    """Builds the sections of one namespace's module."""

    def __init__(self, lib: OpLibrary, ns: str, names: dict[str, str], diags: Diagnostics,
                 sources: PySources | None = None):
        self.lib = lib
        self.sources = sources or PySources()
        self.ns = ns
        self.names = names
        self.diags = diags
        self.helpers: set[str] = set()
        self.imports: dict[tuple[str, str], str] = {}       # (module, name) -> local name
        self.sections: list[Section] = []
        # Module-level names given out so far, and those never to give: what the module defines
        # and calls before its sections, every builtin and keyword, and every argument name of
        # the namespace's ops (so no parameter of a generated function can hide one).
        self.taken: set[str] = set(reserved.reg_module_names() | reserved.PY_BUILTINS
                                   | reserved.PY_KEYWORDS)
        self.taken.update(a.name for op in lib.ops if op.namespace == ns
                          for a in op.schema.arguments)

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

    def op(self, op: Op) -> Section | None:
        api = self.names.get(str(op.name), op.name.name)
        sec = Section(str(op.schema))
        try:
            # One generator per concern, in the order their registrations must run.
            py_kernels.kernels(self, op, sec)
            py_functionalize.functionalize(self, op, api, sec)
            py_fake.fake(self, op, api, sec)
            py_autograd.autograd(self, op, api, sec)
            py_vmap.vmap(self, op, api, sec)
            py_autocast.autocast(self, op, sec)
        except P.Unsupported as e:
            self.diags.error(op.loc, f"{op.name}: {e.message}",
                             "register this op's Python side by hand")
            return None
        if not sec.functions and not sec.registrations:
            return None
        if sec.functions and not self._check_names(op):
            return None
        return sec

    def _check_names(self, op: Op) -> bool:
        """Arguments become parameters of the generated functions: they must not hide a name
        those call (the module's own, such as `torch` and `_ops`, or a builtin such as `len`).
        Per-op function names avoid every argument name (`define`), so only these can clash."""
        own = reserved.reg_module_names()
        for a in op.schema.arguments:
            if a.name == "torch":
                what = "the torch module"
            elif a.name in own:
                what = f"the module-level name '{a.name}'"
            elif a.name in reserved.PY_BODY_BUILTINS:
                what = f"the builtin '{a.name}'"
            else:
                continue
            self.diags.error(cpp_library.locate(op, a.name_span or a.span),
                             f"argument '{a.name}' of {op.name} would hide {what} in the "
                             "generated Python registrations", "rename it")
            return False
        return True


def _closure(names: set[str]) -> list[str]:
    out: set[str] = set()
    stack = list(names)
    while stack:
        n = stack.pop()
        if n not in out:
            out.add(n)
            stack.extend(HELPERS[n])
    return [h for h in HELPERS if h in out]


def generate_registrations(lib: OpLibrary, diags: Diagnostics, *,
                           banner: Callable[[str, list[str]], str] | None = None,
                           template_environment: Callable[[], jinja2.Environment] | None = None
                           ) -> dict[str, str]:
    """`_reg_<ns>.py` of every namespace. `banner` and `template_environment` come from the
    module that imports this one (codegen.gen passes its own; Note [Generators take what they
    render with])."""
    from codegen.dest.py_ops import python_names

    banner, template_environment = _rendering(banner, template_environment)
    F.check_library(lib, diags)
    names = python_names(lib, diags)
    env = template_environment()
    py_sources = PySources()
    out: dict[str, str] = {}
    for ns in lib.namespaces:
        ops = lib.in_namespace(ns)
        module = _Module(lib, ns, names, diags, py_sources)
        for op in ops:
            sec = module.op(op)
            if sec is not None:
                sec.registrations = [wrap_call(r) for r in sec.registrations]
                module.sections.append(sec)
        sources = sorted({s.file.path for s in cpp_library.shards(lib)[ns]})
        by_module: dict[str, list[str]] = {}
        for (m, n), local in sorted(module.imports.items()):
            head = n.split(".")[0]
            by_module.setdefault(m, []).append(head if local == head else f"{head} as {local}")
        text = env.get_template("py_reg.py.j2").render(
            banner=banner("#", sources), ns=ns, module=module_name(ns),
            imports=[{"module": m, "names": sorted(set(names))} for m, names in by_module.items()],
            helpers=_closure(module.helpers), sections=module.sections)
        out[f"{config.current().python_out}/_reg_{ns}.py"] = text
    return out
