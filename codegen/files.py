"""Output files: from {relative path: text} to the disk, as one set, written only where the
content changes.

Note [Set-atomic writes]
Everything is rendered in memory first, so a run that fails on user input writes nothing. Then:

1. every target directory is checked for writability, and every changed file is written to a
   temporary beside its target (`open` with mode 0o666, so the umask decides the final mode, as
   for any file a user creates); a failure here removes the temporaries and leaves every existing
   file untouched;
2. the completion stamp (`FileSet.stamp`, a `sha256sum`-style list of every file of the set) is
   removed, the temporaries are renamed over their targets, orphans are removed;
3. the stamp is written last.

A file is never half-written (rename is atomic), but a run killed during step 2 leaves a mix of old
and new files. It also leaves no stamp, which the next build notices (the stamp is an output of
the `codegen` edge of generated/build.ninja, and `python -m codegen.build` compares it with the
files): it regenerates before compiling anything. A file whose bytes are unchanged keeps its
mtime, so ninja's `restat` sees nothing to rebuild. Concurrent runs are serialized by an advisory
lock on the output directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

# Temporaries are named independently of their target, so a target whose name is near the file
# system's limit still has a temporary that fits (codegen.gen.check_file_names).
TEMP_PREFIX = ".opgen-"
TEMP_SUFFIX = ".tmp"


class WriteError(Exception):
    """An output that cannot be written (permissions, a full disk, a directory in the way):
    one line for the CLI, no traceback."""


@dataclass
class FileSet:
    """Rendered outputs of one codegen run, keyed by path relative to the output root.

    `stamp`, once `seal` sets it, is the path of the completion stamp: its text lists the SHA-256
    of every other file of the set, and it is written after all of them."""

    files: dict[str, str] = field(default_factory=dict)
    stamp: str | None = None

    def add(self, path: str, text: str) -> None:
        assert path not in self.files, f"two generators wrote {path}"
        # As Path(path).is_absolute() and its parts, without making a Path per file.
        assert not path.startswith("/") and ".." not in path.split("/"), path
        self.files[path] = text

    def update(self, other: dict[str, str]) -> None:
        for path, text in other.items():
            self.add(path, text)

    def seal(self, stamp: str, banner: str) -> None:
        """Add the completion stamp `stamp` (after every other file has been added)."""
        assert self.stamp is None
        base = PurePosixPath(stamp).parent
        digests = {rel: _digest(text.encode()) for rel, text in self.files.items()}
        self.add(stamp, banner + stamp_body(digests, base))
        self.stamp = stamp


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def stamp_body(digests: dict[str, str], base: PurePosixPath) -> str:
    """`<sha256>  <path relative to the stamp's directory>` lines: `sha256sum -c` reads them."""
    prefix = "" if base == PurePosixPath(".") else f"{base}/"
    return "".join(f"{d}  {_relative(rel, base, prefix)}\n" for rel, d in sorted(digests.items()))


def _relative(rel: str, base: PurePosixPath, prefix: str) -> str:
    """`PurePosixPath(rel).relative_to(base)`, without a Path per file for a path that
    PurePosixPath would leave as it is."""
    if rel.startswith(prefix) and _PLAIN_PATH.fullmatch(rel):
        return rel[len(prefix):]
    return str(PurePosixPath(rel).relative_to(base))


# Names separated by single slashes, none of them `.`: a path PurePosixPath keeps as it is.
_PLAIN_PATH = re.compile(r"(?!\.(/|$))[^/]+(/(?!\.(/|$))[^/]+)*")


def verify_stamp(root: Path, stamp: str) -> str | None:
    """None when the files the stamp at root/stamp lists all have the digests it records;
    otherwise why not (no stamp: an interrupted or failed write; a differing file: a mixed set or
    an edit by hand)."""
    path = root / stamp
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return f"{stamp} is missing (the last code generation did not complete)"
    except (OSError, UnicodeDecodeError) as e:
        return f"{stamp} cannot be read ({_reason(e)})"
    base = path.parent
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64:
            return f"{stamp} is malformed"
        try:
            data = (base / rel).read_bytes()
        except OSError:
            return f"{(PurePosixPath(stamp).parent / rel)} is missing"
        if _digest(data) != digest:
            return f"{(PurePosixPath(stamp).parent / rel)} differs from the set {stamp} records"
    return None


def stale(root: Path, fileset: FileSet) -> list[str]:
    """Paths whose content on disk differs from the rendered text (or is missing)."""
    out = []
    base = os.fspath(root)
    for rel, text in sorted(fileset.files.items()):
        try:
            with open(os.path.join(base, rel), "rb") as f:
                if f.read() == text.encode():
                    continue
        except OSError:
            pass
        out.append(rel)
    return out


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


@contextlib.contextmanager
def _locked(directory: Path):
    """An exclusive advisory lock on `directory` (created if missing) for concurrent runs."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise WriteError(f"cannot create or open {directory}: {_reason(e)}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _first_existing(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def preflight(root: Path, targets: list[str], removals: list[str]) -> None:
    """Raise WriteError, before anything is written, when a target cannot be replaced: its
    directory (or the nearest existing ancestor, for one still to be made) is not writable, or a
    directory or a file stands where a file or a directory must go."""
    checked: set[Path] = set()
    parents: set[str] = set()
    is_target = set(targets)
    base = os.fspath(root)
    # Strings, not a Path per file: thousands of files share a few hundred directories.
    for rel in targets + removals:
        p = os.path.join(base, rel)
        if rel in is_target and os.path.isdir(p):
            raise WriteError(f"cannot write {rel}: a directory is in the way")
        parent = os.path.dirname(p)
        if parent in parents:
            continue
        parents.add(parent)
        d = _first_existing((root / rel).parent)
        if d in checked:
            continue
        checked.add(d)
        if not d.is_dir():
            raise WriteError(f"cannot write {rel}: {d.relative_to(root)} is not a directory")
        if not os.access(d, os.W_OK | os.X_OK):
            raise WriteError(f"cannot write {rel}: {_shown(d, root)} is not writable")


def _shown(p: Path, root: Path) -> str:
    try:
        return p.relative_to(root).as_posix() or "."
    except ValueError:
        return str(p)


def _temporary(target: str | os.PathLike[str], data: bytes) -> str:
    """`data` in a new file beside `target`, with the mode the umask gives (not mkstemp's 0600)."""
    directory = os.path.dirname(os.fspath(target))
    while True:
        tmp = os.path.join(directory, f"{TEMP_PREFIX}{secrets.token_hex(6)}{TEMP_SUFFIX}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def write_atomic(path: Path, text: str) -> None:
    """One file, through a temporary beside it (for files outside a FileSet: depfiles, the
    toolchain); raises WriteError."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _temporary(path, text.encode())
        try:
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as e:
        raise WriteError(f"cannot write {path}: {_reason(e)}") from None


def write_if_changed(path: Path, text: str) -> bool:
    """`write_atomic` where the file does not hold `text` already, so that its mtime moves only
    when its content does (an input of a ninja edge); whether it was written."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except (OSError, UnicodeDecodeError):
        pass
    write_atomic(path, text)
    return True


def write(root: Path, fileset: FileSet, *, prune_dir: str | None = None) -> list[str]:
    """Write the changed files of the set (Note [Set-atomic writes]); return the paths written
    or removed. Raises WriteError, with every existing file untouched, when a file cannot be
    written.

    With `prune_dir`, files under root/prune_dir that no generator produced are removed (an op
    deleted from the YAML must not leave its generated code behind).
    """
    lock_dir = root / (prune_dir if prune_dir is not None else ".")
    with _locked(lock_dir):
        changed = stale(root, fileset)
        removals = orphans(root, fileset, prune_dir) if prune_dir is not None else []
        if not changed and not removals:
            return []
        stamp = fileset.stamp
        rewrite = [rel for rel in changed if rel != stamp]
        preflight(root, changed, removals)

        # Strings, not a Path per file: a big library writes thousands.
        base = os.fspath(root)
        staged: dict[str, str] = {}
        made: set[str] = set()
        try:
            try:
                for rel in rewrite:
                    target = os.path.join(base, rel)
                    parent = os.path.dirname(target)
                    if parent not in made:     # one mkdir per directory, not per file
                        os.makedirs(parent, exist_ok=True)
                        made.add(parent)
                    staged[rel] = _temporary(target, fileset.files[rel].encode())
            except OSError as e:
                raise WriteError(f"cannot write {rel}: {_reason(e)}; nothing was changed") \
                    from None
            # `rel`, `verb`: what failed, for the message.
            verb = "remove"
            try:
                if stamp is not None:
                    rel = stamp
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(base, stamp))
                verb = "replace"
                for rel in rewrite:
                    os.replace(staged[rel], os.path.join(base, rel))
                    del staged[rel]     # a failed rename leaves it staged, to be cleaned up
                verb = "remove"
                for rel in removals:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(base, rel))
                _remove_emptied_dirs(base, prune_dir, removals)
                if stamp is not None:
                    rel, verb = stamp, "write"
                    target = os.path.join(base, stamp)
                    staged[stamp] = _temporary(target, fileset.files[stamp].encode())
                    os.replace(staged[stamp], target)
                    del staged[stamp]
            except OSError as e:
                raise WriteError(f"cannot {verb} {rel} ({_reason(e)}): writing "
                                 f"{prune_dir or 'the outputs'} stopped midway and the set is "
                                 "incomplete; run code generation again once it can be "
                                 f"{_DONE[verb]} (the build does so by itself)") from None
        finally:
            for tmp in staged.values():
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        return sorted(set(changed) | set(removals))


_DONE = {"remove": "removed", "replace": "replaced", "write": "written"}


def _remove_emptied_dirs(base: str, prune_dir: str | None, removals: list[str]) -> None:
    """The directories below prune_dir that removing `removals` left empty (a renamed op file's
    or a deleted namespace's header directory); a directory that still holds anything stays."""
    if prune_dir is None:
        return
    top = os.path.normpath(os.path.join(base, prune_dir))
    dirs = {os.path.normpath(os.path.dirname(os.path.join(base, rel))) for rel in removals}
    for d in sorted(dirs, key=len, reverse=True):
        while d.startswith(top + os.sep):   # below top, not top itself
            try:
                os.rmdir(d)
            except OSError:         # not empty (or already gone with a deeper one's parent)
                break
            d = os.path.dirname(d)


def orphans(root: Path, fileset: FileSet, prune_dir: str) -> list[str]:
    """Files under root/prune_dir that are not in the set but that opgen wrote: outputs of ops
    since deleted, and temporaries a killed run left behind. Anything else there (a user's file)
    is never touched."""
    base = root / prune_dir
    if not base.is_dir():
        return []
    keep = set(fileset.files)
    out = []
    for p in sorted(base.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            rel = p.relative_to(root).as_posix()
            if rel not in keep and _written_by_opgen(p):
                out.append(rel)
    return out


def _written_by_opgen(path: Path) -> bool:
    if path.name.startswith(TEMP_PREFIX) and path.name.endswith(TEMP_SUFFIX):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(1024)
    except OSError:
        return False
    return b"@generated" in head and b"do not edit" in head    # every generated file's banner
