"""Op library IR -> `generated/runtime/_reg_<ns>.py`: the Python side of namespace `<ns>`.

`import runtime` imports `runtime._reg_<ns>` right after loading the C++ library (the module named
by its `m.set_python_module`). It registers, on one `torch.library.Library(ns, "FRAGMENT")`, what
one generator module per concern renders for each op, in this order:
- `py_kernels`: Python kernels (dispatch values `package.module:function`), with `Library.impl`;
- `py_functionalize`: `Functionalize` kernels for in-place and out= ops (their functional variant
  plus copies, Note [Functionalizing mutable ops]), so torch.compile and export take them, ops
  called for an effect marked as such (Note [Ops called for an effect]), and the Autograd
  kernels of mutating ops where they are not C++ (Note [Autograd of mutating ops]);
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

"""

from __future__ import annotations

from codegen import formulas as F
from codegen import layout
from codegen.api import python as P
from codegen.config import Project
from codegen.dest import py_autocast, py_autograd, py_fake, py_functionalize, py_kernels, py_vmap
from codegen.dest.py_common import (HELPERS, ModuleScope, Section, module_name, twin_namespace,
                                    wrap_call)
from codegen.dest.py_ops import python_names
from codegen.dest.py_sources import PySources, python_roots
from codegen.diagnostics import Diagnostics
from codegen.model import Op, OpLibrary
from codegen.rendering import banner, python_dir, render

# --------------------------------------------------------------------------------------------------
# One namespace's module


class _Module(ModuleScope):
    """Builds the sections of one namespace's module, one concern at a time."""

    def op(self, op: Op) -> Section | None:
        api = self.names.get(str(op.name), op.name.name)
        sec = Section(str(op.schema))
        try:
            # One generator per concern, in the order their registrations must run.
            py_kernels.kernels(self, op, sec)
            py_functionalize.functionalize(self, op, api, sec)
            py_functionalize.side_effect(op, sec)
            py_functionalize.no_gradient(self, op, api, sec)
            py_functionalize.list_autograd(self, op, api, sec)
            py_functionalize.not_implemented(self, op, api, sec)
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
        return sec


def _closure(names: set[str]) -> list[str]:
    out: set[str] = set()
    stack = list(names)
    while stack:
        n = stack.pop()
        if n not in out:
            out.add(n)
            stack.extend(HELPERS[n])
    return [h for h in HELPERS if h in out]


def generate_registrations(lib: OpLibrary, diags: Diagnostics,
                           project: Project) -> dict[str, str]:
    """`_reg_<ns>.py` of every namespace."""
    if layout.check_formulas(lib, diags):
        F.warn_constants_in_backward(lib, diags)
        py_functionalize.warn_unfunctionalizable_backwards(lib, diags)
    names = python_names(lib, diags)
    py_sources = PySources(python_roots(project),
                           project.python_roots if project.config_path is not None else None)
    out: dict[str, str] = {}
    for ns in lib.namespaces:
        ops = lib.in_namespace(ns)
        module = _Module(lib, ns, names, diags, py_sources)
        for op in ops:
            sec = module.op(op)
            if sec is not None:
                sec.registrations = [wrap_call(r) for r in sec.registrations]
                module.sections.append(sec)
        sources = sorted({s.file.path for s in layout.shards(lib)[ns]})
        by_module: dict[str, list[str]] = {}
        for (m, n), local in sorted(module.imports.items()):
            head = n.split(".")[0]
            by_module.setdefault(m, []).append(head if local == head else f"{head} as {local}")
        text = render("py_reg.py.j2",
            banner=banner("#", sources), ns=ns, twin_ns=twin_namespace(ns),
            module=module_name(project, ns),
            imports=[{"module": m, "names": sorted(set(names))} for m, names in by_module.items()],
            helpers=_closure(module.helpers), aliases=sorted(module.aliases.items()),
            sections=module.sections)
        out[f"{python_dir(project)}/_reg_{ns}.py"] = text
    return out
