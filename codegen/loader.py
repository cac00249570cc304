"""Built op libraries -> loaded ops: checks each `lib<ns>_ops.so` against the generated manifest
before loading it, then imports the namespace's Python-side registrations.

This module runs in the generated package, not in opgen: code generation copies it, unchanged,
into every generated package as `<package>._loader` (codegen/dest/py_ops.py), so an installed
op library needs torch alone. It imports nothing but the standard library and torch, and keeps no
state outside the package it serves: two opgen-built packages load side by side.

Order matters (pytorch#122494 and friends): a Python registration that runs against an op whose C++
library did not load fails with a misleading "operator does not exist", so every library is checked
and loaded first, and only then does any `runtime._reg_<ns>` module run.

Each library carries a stamp (<generated>/cpp/<ns>/stamp.cpp): the hash of the schemas it registers
and the torch version it was compiled against. The stamp is read from the file's bytes, without
loading it, so a stale or foreign library is refused before its static initializers register
anything in this process.

Some damage kills the process inside `dlopen`, where no `except` can help, so it is looked for
first: a file shorter than its ELF headers say (a link killed midway, a full disk: mapping it
raises SIGBUS), and a namespace or an op that this process has already registered (another
library's TORCH_LIBRARY, or torch's own ops: the registration throws in a static initializer,
which aborts).
"""

from __future__ import annotations

import importlib.util
import mmap
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any



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
            match = _STAMP.match(m[at:at + len(prefix) + 160])
    if match is None:
        return None
    return Stamp(match["ns"].decode(), match["hash"].decode(), match["torch"].decode())


@dataclass(frozen=True)
class Where:
    """Where a package's files are, and what its messages tell the user to run."""

    root: Path              # the project root (paths in messages are shown relative to it)
    libraries: Path         # the directory of the built libraries
    python_dir: str         # the generated modules' directory, project-relative
    build_command: str
    codegen_command: str
    package: str = ""       # the top-level package (for an installed one: what to reinstall)

    def hint(self, command: str) -> str:
        if (self.root / "pyproject.toml").is_file() or (self.root / "Makefile").is_file():
            return f"run `{command}` in {self.root}"
        dist = _distribution(self.package)
        if dist is None:
            return (f"run `{command}` in the project {self.package or 'the package'} was "
                    f"generated in ({self.root} has no pyproject.toml)")
        # An installed package (a wheel): nothing to run `command` in. Its files disagree with
        # each other or with this torch, so it has to be built again, against this torch.
        return (f"{dist} is installed, not a project built in place: reinstall it built from "
                "source against this torch, `pip install --force-reinstall --no-deps "
                f"--no-build-isolation --no-binary {dist} {dist}` (or, in its source tree, "
                "`pip install --force-reinstall --no-deps --no-build-isolation .`)")

    @property
    def build_hint(self) -> str:
        return self.hint(self.build_command)

    @property
    def codegen_hint(self) -> str:
        return self.hint(self.codegen_command)


def _distribution(package: str) -> str | None:
    """The installed distribution that provides top-level package `package`, if one does."""
    if not package:
        return None
    try:
        from importlib.metadata import packages_distributions

        dists = packages_distributions().get(package.partition(".")[0])
    except Exception:  # noqa: BLE001  (a broken metadata directory only costs the name)
        return None
    return dists[0] if dists else None


def check_library(at: Where, ns: str, info: dict[str, Any], torch_version: str) -> Path:
    """The library's path once it is known to match the manifest; LibraryError otherwise."""
    root = at.root
    path: Path = at.libraries / info["library"]
    hint = at.build_hint
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
    problem = torch_mismatch(stamp.torch_version, torch_version)
    if problem is not None:
        raise LibraryError(f"{where} {problem}: {hint}")
    problem = elf_problem(path)
    if problem is not None:
        raise LibraryError(f"{where} is damaged: {problem} (a link or a copy was cut short, or the "
                           f"disk was full); {hint}")
    return path


# Note [ABI choice] in codegen/abi.py: a library built on torch's stable ABI is stamped
# `torch=>=<min_torch>` instead of the exact version it was compiled with.
_STABLE_PREFIX = ">="
_RELEASE = re.compile(r"(\d+)\.(\d+)")


def torch_mismatch(stamped: str, torch_version: str) -> str | None:
    """Why a library stamped `stamped` cannot load on `torch_version`, or None. A stable-ABI
    library loads on any torch at or above its minimum; any other only on its own torch
    release, whatever the local label (+cpu, +cu130): builds of one release share the C++ ABI,
    and a wheel's `torch==<release>` lets pip install either (Note [Honest wheels] in
    codegen/setuptools.py)."""
    if not stamped.startswith(_STABLE_PREFIX):
        if stamped.partition("+")[0] == torch_version.partition("+")[0]:
            return None
        return f"was built for torch {stamped}, but this is torch {torch_version}; rebuild it"
    need, have = _RELEASE.match(stamped[len(_STABLE_PREFIX):]), _RELEASE.match(torch_version)
    if need is None:
        return f"carries a malformed torch requirement '{stamped}'; rebuild it"
    if have is not None and (int(have[1]), int(have[2])) >= (int(need[1]), int(need[2])):
        return None
    return (f"is built on torch's stable ABI for torch {need[0]} or newer, but this is torch "
            f"{torch_version}; upgrade torch to {need[0]} or newer, or lower the op files' "
            "'min_torch' and rebuild")


# ELF header fields after e_ident, and the program / section header fields we need, per class.
_ELF = {
    1: ("IIIIIHHHHHH", 52, "IIIIIIII", 32, (1, 4), "IIIIIIIIII", 40, (1, 4, 5)),
    2: ("QQQIHHHHHH", 64, "IIQQQQQQ", 56, (2, 5), "IIQQQQIIQQ", 64, (1, 4, 5)),
}
_SHT_NOBITS = 8


def elf_problem(path: Path) -> str | None:
    """Why the ELF file at `path` cannot be mapped whole, or None: every byte its headers
    describe (program segments, sections, the header tables themselves) must be in the file."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        ident = f.read(16)
        if len(ident) < 16 or ident[:4] != b"\x7fELF" or ident[4] not in _ELF \
                or ident[5] not in (1, 2):
            return "it is not an ELF file"
        end = "<" if ident[5] == 1 else ">"
        head, head_size, ph, ph_size, ph_fields, sh, sh_size, sh_fields = _ELF[ident[4]]
        rest = f.read(head_size - 16)
        if len(rest) < head_size - 16:
            return f"it has {size} bytes, less than an ELF header"
        fields = struct.unpack(end + "HHI" + head, rest)
        phoff, shoff = fields[4], fields[5]
        phentsize, phnum, shentsize, shnum = fields[8], fields[9], fields[10], fields[11]
        need = max(head_size, phoff + phnum * phentsize if phnum else 0,
                   shoff + max(shnum, 1) * shentsize if shoff else 0)
        if need <= size:
            for off, count, entsize, fmt, esize, (o, n) in (
                    (phoff, phnum, phentsize, ph, ph_size, ph_fields),
                    (shoff, shnum, shentsize, sh, sh_size, sh_fields[1:])):
                if not count or entsize < esize:
                    continue
                f.seek(off)
                table = f.read(count * entsize)
                for i in range(count):
                    entry = struct.unpack_from(end + fmt, table, i * entsize)
                    if fmt == sh and entry[sh_fields[0]] == _SHT_NOBITS:
                        continue        # .bss and the like occupy no bytes of the file
                    need = max(need, entry[o] + entry[n])
    if need > size:
        return f"its ELF headers describe {need} bytes, but the file has {size}"
    return None


_SHT_DYNAMIC = 6
_DT_NEEDED = 1


def needed_libraries(path: Path) -> tuple[str, ...]:
    """The DT_NEEDED entries of the 64-bit little-endian ELF file at `path` (what the dynamic
    linker must find to load it); () for any other file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return ()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                for i in range(shnum)]
    out = []
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != _SHT_DYNAMIC or not entsize:
            continue
        strtab = sections[link][4]
        for at in range(offset, offset + size, entsize):
            tag, value = struct.unpack_from("<qQ", data, at)
            if tag == _DT_NEEDED:
                end = data.index(b"\0", strtab + value)
                out.append(data[strtab + value:end].decode(errors="replace"))
    return tuple(out)


# A library with CUDA kernels needs the CUDA runtime and torch's CUDA libraries it was linked
# with; a stable-ABI library loads on other torch versions only where those load too.
_CUDA_NEEDED = re.compile(r"lib(cudart|torch_cuda|c10_cuda)\.so(\.\d+)*$")


def check_cuda_runtime(at: Where, path: Path, torch_module: Any) -> None:
    """LibraryError naming the CUDA library that the library at `path` needs and this process
    cannot load. Called once dlopen has failed (whose error names only the first library
    missing): a library that loads costs no read of its file."""
    import ctypes

    for name in needed_libraries(path):
        if not _CUDA_NEEDED.match(name):
            continue
        try:
            ctypes.CDLL(name)
        except OSError as e:
            cuda = torch_module.version.cuda
            what = (f"the CUDA runtime {name}" if "cudart" in name
                    else f"{name}, torch's CUDA library")
            raise LibraryError(
                f"{_display(path, at.root)} has CUDA kernels and needs {what}, which cannot be "
                f"loaded here ({e}); torch {torch_module.__version__} "
                + (f"has CUDA {cuda}" if cuda else "has no CUDA")
                + f"; a library with CUDA kernels runs with the CUDA it was built for: "
                f"{at.build_hint}"
            ) from None


def check_unregistered(root: Path, namespaces: dict[str, dict[str, Any]],
                       paths: dict[str, Path]) -> None:
    """LibraryError unless every library can register its namespace and its ops in this process.

    Loading one whose TORCH_LIBRARY meets another for its namespace, or which defines an op that
    exists, aborts the interpreter inside dlopen. A library loaded already (the same file) is
    skipped: loading it again registers nothing.
    """
    import torch

    loaded = {os.path.realpath(p) for p in torch.ops.loaded_libraries}
    existing: set[str] | None = None
    for ns, info in namespaces.items():
        path = paths[ns]
        if os.path.realpath(path) in loaded:
            continue
        where = _display(path, root)
        if existing is None:
            existing = set(torch._C._dispatch_get_all_op_names())
        for name in info.get("op_names", ()):
            if f"{ns}::{name}" in existing:
                raise LibraryError(
                    f"op '{ns}::{name}' of {where} is already registered in this process (by "
                    "another library, or torch); loading the library would abort the process. "
                    "Is another copy of this op library loaded, or another library using "
                    f"namespace '{ns}'?")
        if info.get("claims_namespace", True):
            previous = _namespace_owner(ns)
            if previous is not None:
                raise LibraryError(
                    f"namespace '{ns}' of {where} is already registered in this process"
                    f"{previous}; loading the library would abort the process. Is another copy "
                    f"of this op library loaded, or another library using namespace '{ns}'?")


_PREVIOUS = re.compile(r"[Pp]revious registration of TORCH_LIBRARY was registered at (\S+?);?\s")


def _namespace_owner(ns: str) -> str | None:
    """None when `ns` has no TORCH_LIBRARY in this process; else ` (by <where>)` or ``.

    Asks the dispatcher as torch.library.Library(ns, "DEF") does, and drops the registration
    at once when it succeeds."""
    import torch

    try:
        handle = torch._C._dispatch_library("DEF", ns, "", __file__, 0)
    except RuntimeError as e:
        m = _PREVIOUS.search(str(e) + " ")
        return f" (by {m[1]})" if m else ""
    handle.reset()
    return None


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def locate(manifest: Any) -> Where:
    """The paths and commands a generated manifest records, resolved from its own location."""
    here = Path(manifest.__file__).resolve().parent
    return Where(Path(os.path.normpath(here / manifest.PROJECT_ROOT)),
                 Path(os.path.normpath(here / manifest.LIBRARY_DIR)), manifest.PYTHON_DIR,
                 manifest.BUILD_COMMAND, manifest.CODEGEN_COMMAND,
                 manifest.__name__.partition(".")[0])


def load_package(package: str) -> list[str]:
    """Check and load every library of `<package>._manifest`, then import the Python
    registrations. `package` is the package the generated modules are in.

    Returns the namespaces loaded.
    """
    manifest = importlib.import_module(f"{package}._manifest")
    at = locate(manifest)
    root = at.root

    import torch

    namespaces: dict[str, dict[str, Any]] = manifest.NAMESPACES
    paths = {ns: check_library(at, ns, info, torch.__version__)
             for ns, info in namespaces.items()}
    check_unregistered(root, namespaces, paths)
    for ns, path in paths.items():
        try:
            # Untyped in torch 2.13 (a user's mypy --strict reads this module); typed elsewhere.
            torch.ops.load_library(str(path))  # type: ignore[no-untyped-call, unused-ignore]
        except (OSError, RuntimeError) as e:
            check_cuda_runtime(at, path, torch)
            raise LibraryError(f"loading {_display(path, root)} failed: {e}\n(namespace '{ns}'; "
                               f"if the library is damaged, {at.build_hint})") from e
    for ns, info in namespaces.items():
        module = info["python_module"]
        if info["python_required"] or importlib.util.find_spec(module) is not None:
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as e:
                if e.name != module:
                    raise
                raise LibraryError(
                    f"{module} ({at.python_dir}/{module.rpartition('.')[2]}.py) is missing, but "
                    f"the op files of namespace '{ns}' declare Python-side registrations (fake "
                    f"rules, derivatives, vmap, autocast or Python kernels); {at.codegen_hint}"
                ) from None
    return list(namespaces)
