"""Built op libraries -> loaded ops: checks each `build/lib<ns>_ops.so` against the generated
manifest before loading it, then imports the namespace's Python-side registrations.

Order matters (pytorch#122494 and friends): a Python registration that runs against an op whose C++
library did not load fails with a misleading "operator does not exist", so every library is checked
and loaded first, and only then does any `runtime._reg_<ns>` module run.

Each library carries a stamp (generated/cpp/<ns>/stamp.cpp): the hash of the schemas it registers
and the torch version it was compiled against. The stamp is read from the file's bytes, without
loading it, so a stale or foreign library is refused before its static initializers register
anything in this process.
"""

from __future__ import annotations

import importlib
import importlib.util
import mmap
import os
import re
from dataclasses import dataclass
from pathlib import Path

BUILD_HINT = "run `make build` (python -m codegen.build) in {root}"


class LibraryError(ImportError):
    """An op library that cannot be used: missing, stale, built for another torch, or failing to
    load. The message says which and what to run."""


@dataclass(frozen=True)
class Stamp:
    namespace: str
    schema_hash: str
    torch_version: str


_STAMP = re.compile(rb"@opgen-stamp ns=(?P<ns>\w+) schemas=(?P<hash>[0-9a-f]+) "
                    rb"torch=(?P<torch>[^;\x00]{1,100});")


def read_stamp(path: Path, prefix: str) -> Stamp | None:
    """The stamp compiled into the library at `path`, or None when it carries none.

    `prefix` (`@opgen-stamp ns=<ns> `, from the manifest) is searched in the mapped file: no
    loading, no symbol table.
    """
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            at = m.find(prefix.encode())
            if at < 0:
                return None
            match = _STAMP.match(m[at:at + 256])
    if match is None:
        return None
    return Stamp(match["ns"].decode(), match["hash"].decode(), match["torch"].decode())


def check_library(root: Path, build_dir: Path, ns: str, info: dict, torch_version: str) -> Path:
    """The library's path once it is known to match the manifest; LibraryError otherwise."""
    path = build_dir / info["library"]
    hint = BUILD_HINT.format(root=root)
    where = _display(path, root)
    if not path.is_file():
        raise LibraryError(f"the C++ op library of namespace '{ns}' is not built: {where} does not "
                           f"exist; {hint}")
    stamp = read_stamp(path, info["stamp_prefix"])
    if stamp is None or stamp.namespace != ns:
        raise LibraryError(f"{where} is not an op library of namespace '{ns}' built by this "
                           f"project (it carries no build stamp); {hint}")
    if stamp.schema_hash != info["schema_hash"]:
        sources = ", ".join(info["sources"])
        raise LibraryError(f"{where} is stale: it was built from other schemas than {sources} "
                           f"declare now (schema hash {stamp.schema_hash}, expected "
                           f"{info['schema_hash']}); {hint}")
    if stamp.torch_version != torch_version:
        raise LibraryError(f"{where} was built for torch {stamp.torch_version}, but this is torch "
                           f"{torch_version}; rebuild it: {hint}")
    return path


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def load_all(root: Path, build_dir: Path, package: str) -> list[str]:
    """Check and load every library of the manifest, then import the Python registrations.

    Returns the namespaces loaded. `package` is the runtime package's name (`runtime`).
    """
    try:
        manifest = importlib.import_module(f"{package}._manifest")
    except ModuleNotFoundError as e:
        if e.name != f"{package}._manifest":
            raise
        raise LibraryError(f"generated/runtime/_manifest.py is missing under {root}; run "
                           "`make codegen` (python -m codegen generate), then `make build`") from None

    import torch

    namespaces: dict[str, dict] = manifest.NAMESPACES
    paths = {ns: check_library(root, build_dir, ns, info, torch.__version__)
             for ns, info in namespaces.items()}
    for ns, path in paths.items():
        try:
            torch.ops.load_library(str(path))
        except (OSError, RuntimeError) as e:
            raise LibraryError(f"loading {_display(path, root)} failed: {e}\n(namespace '{ns}'; "
                               f"if the library is damaged, {BUILD_HINT.format(root=root)})") from e
    for ns, info in namespaces.items():
        module = info["python_module"]
        if info["python_required"] or importlib.util.find_spec(module) is not None:
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as e:
                if e.name != module:
                    raise
                raise LibraryError(
                    f"{module} (generated/runtime/{module.rpartition('.')[2]}.py) is missing, but "
                    f"the op files of namespace '{ns}' declare Python-side registrations (fake "
                    "rules, derivatives, vmap, autocast or Python kernels); run `make codegen`"
                ) from None
    return list(namespaces)
