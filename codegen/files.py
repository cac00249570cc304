"""Output files: from {relative path: text} to the disk, written only when their content changes.

Everything is rendered in memory first, so a run that fails on user input writes nothing; writes
are atomic (temp file + rename) so an interrupted run never leaves half a file; a file whose bytes
are unchanged keeps its mtime, so ninja's `restat` sees nothing to rebuild.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class FileSet:
    """Rendered outputs of one codegen run, keyed by path relative to the output root."""

    files: dict[str, str] = field(default_factory=dict)

    def add(self, path: str, text: str) -> None:
        assert path not in self.files, f"two generators wrote {path}"
        assert not Path(path).is_absolute() and ".." not in Path(path).parts, path
        self.files[path] = text

    def update(self, other: dict[str, str]) -> None:
        for path, text in other.items():
            self.add(path, text)


def stale(root: Path, fileset: FileSet) -> list[str]:
    """Paths whose content on disk differs from the rendered text (or is missing)."""
    out = []
    for rel, text in sorted(fileset.files.items()):
        p = root / rel
        try:
            if p.read_bytes() == text.encode():
                continue
        except OSError:
            pass
        out.append(rel)
    return out


def write(root: Path, fileset: FileSet, *, prune_dir: str | None = None) -> list[str]:
    """Write changed files atomically; return the paths written.

    With `prune_dir`, files under root/prune_dir that no generator produced are removed (an op
    deleted from the YAML must not leave its generated code behind).
    """
    written = []
    for rel in stale(root, fileset):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
                f.write(fileset.files[rel])
            os.replace(tmp, p)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        written.append(rel)
    if prune_dir is not None:
        for extra in orphans(root, fileset, prune_dir):
            (root / extra).unlink()
            written.append(extra)
    return written


def orphans(root: Path, fileset: FileSet, prune_dir: str) -> list[str]:
    base = root / prune_dir
    if not base.is_dir():
        return []
    keep = set(fileset.files)
    out = []
    for p in sorted(base.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            rel = p.relative_to(root).as_posix()
            if rel not in keep:
                out.append(rel)
    return out
