"""Op library IR -> the build stamp of each namespace (`generated/cpp/<ns>/stamp.cpp`).

Note [Schema hash]
`schema_hash(lib, ns)` digests exactly what the compiled library registers: every op's schema and
tags and its C++ kernels. It is compiled into the library (the stamp) and written to the runtime
manifest; `import runtime` compares the two before loading, so a library built from other schemas
is refused instead of half-registering. It includes the fake rules compiled into Meta kernels
(codegen.dest.cpp_meta); edits that do not change the library (docs, samples, formulas, rules
that stay Python) leave the hash, and so the build, alone.
"""

from __future__ import annotations

import hashlib

from codegen import layout as L
from codegen.config import Project
from codegen.dest import cpp_meta, cpp_stable
from codegen.diagnostics import Diagnostics
from codegen.model import OpLibrary
from codegen.rendering import banner, render


def schema_hash(lib: OpLibrary, ns: str) -> str:
    """See Note [Schema hash]. Once per namespace of a library: the stamp and the manifest ask."""
    return L.memo(lib, (schema_hash, ns), lambda: _schema_hash(lib, ns))


def _schema_hash(lib: OpLibrary, ns: str) -> str:
    h = hashlib.sha256()
    for shard in L.shards(lib).get(ns, []):
        for op in shard.ops:
            kernels = ",".join(f"{k.value}={v.qualified(ns)}" for k, v in L.cpp_kernels(op))
            meta, _ = cpp_meta.translate(op)
            if meta is not None:
                kernels += f"\tMeta={meta.rule}"
            if op.abi is not None:
                # The ABI is what the library is built on (the full API's hashes stay as before).
                smeta = cpp_stable.translate_meta(op)
                kernels += f"\tabi=stable>={op.abi.min_text}" + (
                    f"\tMeta={smeta.rule}" if smeta is not None else "")
            # The CUDA wrappers' opt-outs change the compiled registration (defaults: as before).
            kernels += "".join(f"\t{k}=false" for k in ("device_guard", "device_check")
                               if not getattr(op, k))
            h.update(f"{L.def_schema(op)}\t{','.join(op.tags)}\t{kernels}\n".encode())
    return h.hexdigest()[:16]


def generate_stamps(lib: OpLibrary, diags: Diagnostics, project: Project) -> dict[str, str]:
    out = {}
    for ns, shs in L.shards(lib).items():
        out[L.stamp_path(project, ns)] = render(
            "cpp_stamp.cpp.j2",
            banner=banner("//", [s.file.path for s in shs]),
            ns=ns,
            library=L.library_file(ns),
            prefix=L.stamp_prefix(ns),
            schema_hash=schema_hash(lib, ns),
            min_torch=getattr(shs[0].ops[0].abi, "min_text", None),
        )
    return out
