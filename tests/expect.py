"""Golden files and pinned messages: compare with the file, or rewrite it under
EXPECTTEST_ACCEPT=1 (`make golden`), never silently."""

from __future__ import annotations

import os
from pathlib import Path

ACCEPT = os.environ.get("EXPECTTEST_ACCEPT", "") not in ("", "0")


def check_file(path: Path, text: str) -> None:
    """`text` must equal the golden file `path`; with ACCEPT it becomes the golden file."""
    if ACCEPT:
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"no golden file {path}; run `make golden` to create it"
    assert text == path.read_text(encoding="utf-8"), \
        f"{path} differs from the output; run `make golden` and read the diff"


def check_dir(folder: Path, files: dict[str, str]) -> None:
    """`folder` must hold exactly `files` (path relative to it -> text), each equal."""
    on_disk = ({p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
               if folder.is_dir() else set())
    if ACCEPT:
        for stale in on_disk - set(files):
            (folder / stale).unlink()
    else:
        assert set(files) == on_disk, \
            f"the generated file set differs from {folder}; run `make golden`"
    for rel, text in sorted(files.items()):
        check_file(folder / rel, text)


def orphans(folder: Path, inputs: list[Path], suffix: str = ".expected") -> list[str]:
    """Expectation files in `folder` whose input case no longer exists."""
    stems = {c.stem for c in inputs}
    return [p.name for p in folder.glob(f"*{suffix}") if p.stem not in stems]
