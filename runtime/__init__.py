"""The example op library, ready to call: `import runtime` loads every built C++ op library
(`build/lib<ns>_ops.so`), then each namespace's Python-side registrations (`runtime._reg_<ns>`:
fake kernels, autograd, vmap, autocast, Python kernels), and exposes every op as
`runtime.ops.<name>` (also reachable as `torch.ops.<ns>.<op>`).

This repository's pyproject.toml declares this package as an opgen project whose generated
modules live outside it, in `<root>/generated/runtime/`, appended here to the package's path;
`<root>` is the repository holding this package, or `$OPGEN_ROOT` when set (the tests use it to
load a library generated and built in a scratch directory). The loader is the generated
`runtime._loader` (a copy of codegen/loader.py). A library that is missing, stale (built from
other schemas) or built for another torch raises `runtime.LibraryError` saying so and what to run,
before anything is registered.

A project whose generated directory lies inside its package (the default) needs none of this:
its `__init__.py` holds one line, `from <package>._generated import ops` (docs/CONFIG.md).
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(os.environ.get("OPGEN_ROOT") or Path(__file__).resolve().parent.parent).resolve()
GENERATED = ROOT / "generated" / "runtime"

__path__.append(str(GENERATED))  # noqa: F821  (a package's __path__)

try:
    from runtime._loader import LibraryError, load_package
except ModuleNotFoundError as e:
    if e.name != "runtime._loader":
        raise

    class LibraryError(ImportError):  # type: ignore[no-redef]  # the generated loader is missing
        pass

    raise LibraryError(f"generated/runtime/_manifest.py is missing under {ROOT} (nothing is "
                       "generated there); run `make codegen` (python -m codegen generate), then "
                       "`make build`") from None

NAMESPACES = load_package(__name__)

from runtime import ops  # noqa: E402

__all__ = ["ops", "LibraryError", "NAMESPACES", "ROOT"]
