"""The op library, ready to call: `import runtime` loads every built C++ op library
(`build/lib<ns>_ops.so`), then each namespace's Python-side registrations (`runtime._reg_<ns>`:
fake kernels, autograd, vmap, autocast, Python kernels), and exposes every op as
`runtime.ops.<name>` (also reachable as `torch.ops.<ns>.<op>`).

Generated modules live in `<root>/generated/runtime/`, which is appended to this package's path;
`<root>` is the repository holding this package, or `$OPGEN_ROOT` when set (a library generated and
built elsewhere). A library that is missing, stale (built from other schemas) or built for another
torch raises `runtime.LibraryError` saying so and what to run, before anything is registered.
"""

from __future__ import annotations

import os
from pathlib import Path

from runtime.loader import LibraryError

ROOT = Path(os.environ.get("OPGEN_ROOT") or Path(__file__).resolve().parent.parent).resolve()
GENERATED = ROOT / "generated" / "runtime"
BUILD = ROOT / "build"

__path__.append(str(GENERATED))  # noqa: F821  (a package's __path__)

from runtime import loader as _loader  # noqa: E402

NAMESPACES = _loader.load_all(ROOT, BUILD, __name__)

from runtime import ops  # noqa: E402

__all__ = ["ops", "LibraryError", "NAMESPACES", "ROOT"]
