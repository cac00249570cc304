"""Op library IR -> `generated/runtime/ops.pyi`: type stubs of `runtime.ops`.

`runtime.ops.<name>` is the op's `OpOverload`, resolved lazily (codegen/dest/py_ops.py), so neither
IDEs nor type checkers can see its signature; the stub declares each name as a function with the
op's real parameters (annotations from `codegen.api.python`, defaults, keyword-only markers), its
return type, and the op's doc with its schema as the docstring. Names are exactly those of ops.py
(`py_ops.python_names`).
"""

from __future__ import annotations

from codegen.api import python as P
from codegen.dest.py_ops import python_names
from codegen.diagnostics import Diagnostics
from codegen.config import Project
from codegen.rendering import banner, python_dir, render
from codegen.model import OpLibrary


def generate_stubs(lib: OpLibrary, diags: Diagnostics, project: Project) -> dict[str, str]:

    names = python_names(lib, diags)
    entries = []
    for op in lib.ops:
        try:
            params = P.parameters(op.schema, annotate=True)
            returns = P.returns_annotation(op.schema)
        except P.Unsupported as e:
            diags.error(op.loc, f"{op.name}: {e.message}; it cannot be typed in "
                        f"{project.module_prefix}.ops",
                        "use types with a Python binding")
            continue
        doc = (op.doc.strip() + "\n\n" if op.doc.strip() else "") + str(op.schema)
        name = names[str(op.name)]
        one_line = f"def {name}({', '.join(params)}) -> {returns}:"
        signature = one_line if len(one_line) <= 100 else (
            f"def {name}(\n" + "".join(f"    {p},\n" for p in params) + f") -> {returns}:")
        entries.append({"name": name, "signature": signature, "doc": doc})
    entries.sort(key=lambda e: e["name"])
    text = render("py_stubs.pyi.j2",
        banner=banner("#", [f.path for f in lib.files]), imports=P.STUB_IMPORTS,
        entries=entries, module=f"{project.module_prefix}.ops")
    return {f"{python_dir(project)}/ops.pyi": text}
