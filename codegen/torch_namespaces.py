"""Namespaces torch already defines, and the ops in them, recorded from the pinned torch
(`python -m codegen.torch_namespaces --refresh` writes torch_namespaces.json; a test checks that
the file matches the installed torch).

Note [Torch namespaces]
A second `TORCH_LIBRARY` for a namespace aborts the interpreter at load time ("Only a single
TORCH_LIBRARY can be used to register the namespace"), and so does defining an op that exists.
An op file may still add ops to a namespace torch defines (`aten`, `prims`, `quantized`, ...;
executorch adds ops to `aten` this way): its registration units then use
`TORCH_LIBRARY_FRAGMENT` only, and `check` warns. An op that torch already has in the namespace
is an error, and so is a namespace torch.library reserves (`prim`: the generated Python side
could not register there). Namespaces registered after `import torch` (another extension, a
lazily imported torch module) are caught when the library is loaded (runtime.loader), before
anything is registered.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from codegen.diagnostics import Diagnostics, Loc
from codegen.model import Op, OpLibrary

RECORD_FILE = "torch_namespaces.json"


@lru_cache(maxsize=1)
def _record() -> dict:
    return json.loads(resources.files("codegen").joinpath(RECORD_FILE).read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def recorded() -> dict[str, frozenset[str]]:
    """namespace -> the ops torch defines in it (`name` or `name.overload`)."""
    return {ns: frozenset(ops) for ns, ops in _record()["namespaces"].items()}


def reserved() -> frozenset[str]:
    """Namespaces torch.library refuses to define anything in (the generated Python side could
    not register there)."""
    return frozenset(_record()["reserved"])


def current() -> dict:
    """What the record holds, from the installed torch (imports torch: for `--refresh` and the
    test that the record is current)."""
    import torch
    import torch.library

    reserved = sorted(getattr(torch.library, "_reserved_namespaces", []))
    namespaces: dict[str, list[str]] = {ns: [] for ns in reserved}
    for qualified in torch._C._dispatch_get_all_op_names():
        ns, _, name = qualified.partition("::")
        namespaces.setdefault(ns, []).append(name)
    return {"torch": torch.__version__.split("+")[0], "reserved": reserved,
            "namespaces": {ns: sorted(ops) for ns, ops in sorted(namespaces.items())}}


def is_torch_namespace(ns: str) -> bool:
    return ns in recorded()


def namespace_loc(lib: OpLibrary, ns: str) -> Loc:
    """Where the library first names namespace `ns`: a file's `namespace:` value, or the
    namespace part of the first op named `ns::...`."""
    for f in lib.files:
        if f.namespace == ns and f.namespace_loc is not None:
            return f.namespace_loc
        for op in f.ops:
            if op.namespace == ns:
                return _qualified_name_loc(op, len(ns))
    raise AssertionError(f"no op in namespace {ns}")


def _qualified_name_loc(op: Op, length: int | None = None) -> Loc:
    """The op's qualified name in its `func:`, its first `length` characters (all by default)."""
    span = op.schema.name.span
    if span is None or op.func is None:
        return op.loc
    whole = span.end - span.start
    return op.func.at(span.start, max(1, whole if length is None else min(length, whole)))


def check_namespaces(lib: OpLibrary, diags: Diagnostics) -> None:
    """Note [Torch namespaces]: a warning per namespace torch defines, an error per op that
    torch already has there."""
    for ns in lib.namespaces:
        existing = recorded().get(ns)
        if existing is None:
            continue
        if ns in reserved():
            diags.error(namespace_loc(lib, ns), f"namespace '{ns}' is reserved by torch",
                        "torch.library refuses to register anything in it; use a namespace of "
                        "your own")
            continue
        loc = namespace_loc(lib, ns)
        diags.warning(loc,
                      f"namespace '{ns}' is defined by torch: these ops are added to it with "
                      "TORCH_LIBRARY_FRAGMENT",
                      "use a namespace of your own unless you mean to extend torch's",
                      name="torch-namespace",
                      suppress=next((f.suppress for f in lib.files if f.path == loc.path), ()))
        for op in lib.ops:
            if op.namespace != ns:
                continue
            name = op.schema.name
            key = f"{name.name}.{name.overload}" if name.overload else name.name
            if key in existing:
                diags.error(_qualified_name_loc(op), f"op '{ns}::{key}' already exists in torch",
                            "defining it again aborts the process at load time; give the op "
                            "another name, or another overload name")


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if sys.argv[1:] != ["--refresh"]:
        sys.exit("usage: python -m codegen.torch_namespaces --refresh")
    target = Path(__file__).resolve().parent / RECORD_FILE
    target.write_text(json.dumps(current(), indent=0, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {target}")
