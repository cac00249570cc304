"""What the build needs to know of a namespace's generated C++, as data:
`generated/cpp/<ns>/index.json`.

The build explains compiler and linker errors (codegen.build_notes.Notes): which op a misdeclared or
missing function serves, where it is declared, what signature it must have; which namespaces are
on the stable ABI, from which torch, declared in which op files. It reads that from this file,
which generation writes from the IR, not from the comments of headers or of the build file (no
format contract between generated prose and the build).

The file holds the namespace, its ABI (`full` or `stable`) and min_torch, its op files, and one
record per kernel: the kernel's qualified C++ name, its uses (`CPU kernel of ns::op`), the schema it
serves, its declaration as the header spells it, the header and the declaration's line there, and
the op file. Records follow the headers' order. `registrations` lists, per registration unit,
the (op, dispatch key) pairs its TORCH_LIBRARY_IMPL blocks register, and `definitions` the ops its
TORCH_LIBRARY_FRAGMENT defines, so that the build can refuse a hand-written registration or
definition of the same op without reading generated C++ back.
"""

from __future__ import annotations

import json

from codegen import escape
from codegen import layout as L
from codegen.abi import namespace_abi
from codegen.config import Project
from codegen.dest import cpp_kernels, cpp_register, cpp_stable
from codegen.diagnostics import Diagnostics
from codegen.model import OpLibrary

GENERATED_KEY = "@generated"


def _records(header: str, text: str, decls: list[cpp_kernels.KernelDecl], source: str) -> list[dict]:
    lines = text.splitlines()
    out = []
    for d in decls:
        line = f"{d.decl};"
        out.append({
            "kernel": f"{d.cpp_namespace}::{d.name}" if d.cpp_namespace else d.name,
            "uses": list(d.comments),
            "schema": d.schema,
            "decl": line,
            "header": header,
            "line": lines.index(line) + 1,
            "source": source,
        })
    return out


def generate(lib: OpLibrary, diags: Diagnostics, project: Project,
             outputs: dict[str, str]) -> dict[str, str]:
    """One index per namespace, from the kernel headers among `outputs` ({path: text}, what the
    other generators rendered)."""
    out = {}
    for ns, shs in L.shards(lib).items():
        records: list[dict] = []
        units: dict[str, list[list[str]]] = {}
        definitions: dict[str, list[str]] = {}
        abi = namespace_abi(lib, ns)
        unit = cpp_register if abi is None else cpp_stable
        for shard in shs:
            registration = shard.registration(project)
            units[registration] = [[name, key] for name, key in unit.registrations(shard, diags)]
            definitions[registration] = [L.impl_name(op) for op in unit.defined(shard, diags)]
            if abi is not None:
                header = shard.header(project)
                if header in outputs:
                    records += _records(header, outputs[header],
                                        cpp_stable.kernel_decls(shard, diags), shard.file.path)
                continue
            for name, decls in cpp_kernels.header_decls(shard, diags).items():
                header = shard.op_header(project, name)
                if header in outputs:
                    records += _records(header, outputs[header], decls, shard.file.path)
        sources = sorted({s.file.path for s in shs})
        doc = {GENERATED_KEY: "by codegen from "
                              f"{', '.join(escape.banner_path(s) for s in sources)} - do not edit",
               "namespace": ns, "abi": "full" if abi is None else "stable",
               "min_torch": None if abi is None else abi.min_text, "op_files": sources,
               "kernels": records, "registrations": units, "definitions": definitions}
        # ASCII: no character of a user's path or string default can break a line of the file.
        out[L.index_path(project, ns)] = json.dumps(doc, indent=1) + "\n"
    return out
