"""Which libtorch ABI a namespace's C++ library is built against (Note [ABI choice]).

Note [ABI choice]
An op file may say, next to `namespace:`,

    abi: stable          # or `full`, the default: today's libtorch C++ API
    min_torch: "2.10"    # required with `abi: stable`: the oldest torch the library loads on

A `stable` namespace is generated for torch's stable ABI (torch/csrc/stable, torch/headeronly):
`STABLE_TORCH_LIBRARY` registrations with `TORCH_BOX`ed kernels taking `torch::stable::Tensor`
and the headeronly types (codegen.api.cpp_stable, codegen.dest.cpp_stable). It is compiled with
`-DTORCH_TARGET_VERSION=<min_torch>` against the stable headers alone, links no libpython, and
`import runtime` accepts it on any torch at or above `min_torch` (runtime.loader). The choice is
per namespace, because a namespace is one shared library: every op file of a namespace must make
the same choice (checked here, at load).

What the stable ABI can box depends on the minimum torch (the `TORCH_FEATURE_VERSION` gates of
torch/csrc/stable/stableivalue_conversions.h and library.h): STABLE_FEATURES lists the versions
the generator relies on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from codegen.diagnostics import Diagnostics, Loc

FULL = "full"
STABLE = "stable"
KINDS = (FULL, STABLE)

# The first torch whose stable ABI this generator targets: TORCH_TARGET_VERSION, lists, strings,
# Device, Layout and MemoryFormat boxing, and the versioned torch_library_impl all start here.
FIRST_STABLE = (2, 10)

# Features of the stable ABI newer than FIRST_STABLE, and the torch release that added them.
STABLE_FEATURES: dict[str, tuple[int, int]] = {
    "tags": (2, 12),                # StableLibrary::def(schema, tags)
    "set_python_module": (2, 13),   # StableLibrary::set_python_module: Python fake kernels
    "Generator": (2, 13),           # torch::stable::Generator boxing
}

_VERSION = re.compile(r"(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\Z")


@dataclass(frozen=True)
class Abi:
    """`abi: stable` with its minimum torch (major, minor). `full` is represented by None."""

    min_torch: tuple[int, int]
    loc: Loc = field(compare=False, hash=False)      # the `abi:` value

    @property
    def min_text(self) -> str:
        return version_text(self.min_torch)

    @property
    def target_version(self) -> str:
        """TORCH_TARGET_VERSION's encoding (torch/headeronly/version.h): major in the top byte,
        minor in the next, patch and ABI tag zero."""
        major, minor = self.min_torch
        return f"0x{major:02x}{minor:02x}000000000000"

    def has(self, feature: str) -> bool:
        return self.min_torch >= STABLE_FEATURES[feature]


def version_text(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def parse_version(text: str) -> tuple[int, int] | None:
    """`"2.10"` -> (2, 10); None when it is not MAJOR.MINOR."""
    m = _VERSION.match(text)
    return (int(m[1]), int(m[2])) if m else None


def namespace_abi(lib, ns: str) -> Abi | None:
    """The namespace's ABI (None: full), as its files agree (check_namespaces)."""
    for f in lib.files:
        if any(op.namespace == ns for op in f.ops):
            return f.abi
    return None


def check_namespaces(lib, diags: Diagnostics) -> None:
    """Every op file of a namespace makes the same ABI choice: they build one shared library."""
    first: dict[str, tuple[object, str]] = {}   # namespace -> (choice, first file making it)
    for f in lib.files:
        if f.abi_refused:
            continue
        for ns in dict.fromkeys(op.namespace for op in f.ops):
            choice = (STABLE, f.abi.min_torch) if f.abi is not None else (FULL, None)
            here = f.abi.loc if f.abi is not None else f.namespace_loc
            if ns not in first:
                first[ns] = (choice, f.path)
                continue
            prev, prev_path = first[ns]
            if prev != choice:
                diags.error(here or Loc(f.path, 1, 1),
                            f"namespace '{ns}' is built {_describe(choice)} here, but "
                            f"{_describe(prev)} by {prev_path}; a namespace is one shared library",
                            "give every op file of the namespace the same 'abi:' and "
                            "'min_torch:'")


def _describe(choice) -> str:
    kind, v = choice
    return "on the full libtorch API" if kind == FULL else \
        f"on the stable ABI for torch >= {version_text(v)}"
