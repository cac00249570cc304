"""Writing the generated set (Note [Set-atomic writes] in codegen/files.py): modes follow the
umask; an unwritable target or a failed write leaves every file untouched, with a one-line error;
a generate killed midway leaves a set that `generate --check` and the build notice."""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from codegen import config, files
from codegen.build import check_generated
from codegen.rendering import set_stamp
from tests import scratch

# The example layout's completion stamp (generated/SHA256SUMS).
SET_STAMP = set_stamp(config.default_project(Path(__file__).resolve().parent.parent))

V1 = """\
namespace: wr
ops:
  - func: twice(Tensor self) -> Tensor
    doc: 2 * self.
    dispatch:
      CPU: twice_cpu
    fake: like(self)
"""
# Changes every generated file of the namespace (schema hash, header, registrations, Python side).
V2 = V1 + """\
  - func: thrice(Tensor self) -> Tensor
    dispatch:
      CPU: thrice_cpu
    fake: like(self)
"""


def snapshot(root: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file under root/generated: bytes, mtime, mode."""
    out = {}
    for p in sorted((root / "generated").rglob("*")):
        if p.is_file():
            st = p.stat()
            out[p.relative_to(root).as_posix()] = (p.read_bytes(), st.st_mtime_ns, st.st_mode)
    return out


def generated_v1(root: Path) -> Path:
    scratch.make_root(root, {"wr.yaml": V1}, {})
    gen = scratch.generate(root)
    assert gen.returncode == 0, gen.stderr
    (root / "schemas" / "wr.yaml").write_text(V2)
    return root


# --------------------------------------------------------------------------------------------------
# Modes


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_modes_follow_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    fs = files.FileSet()
    fs.add("generated/a.txt", "a\n")
    fs.add("generated/sub/b.txt", "b\n")
    fs.seal("generated/SUMS", "# sums\n")
    (tmp_path / "generated").mkdir()
    (tmp_path / "generated" / "a.txt").write_text("old\n")     # rewritten, not kept as it was
    os.chmod(tmp_path / "generated" / "a.txt", 0o640)
    old = os.umask(umask)
    try:
        written = files.write(tmp_path, fs, prune_dir="generated")
    finally:
        os.umask(old)
    assert written == ["generated/SUMS", "generated/a.txt", "generated/sub/b.txt"]
    for rel in written:
        assert stat.S_IMODE((tmp_path / rel).stat().st_mode) == mode, rel


# --------------------------------------------------------------------------------------------------
# Unwritable targets and failed writes


def unprivileged() -> list[str]:
    """A command prefix under which file permissions apply (root ignores them)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: permissions cannot be denied")
    caps = "-dac_override,-dac_read_search,-fowner"
    return [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}", "--"]


def test_unwritable_target_changes_nothing(tmp_path: Path) -> None:
    root = generated_v1(tmp_path)
    before = snapshot(root)
    runtime_dir = root / "generated" / "runtime"
    runtime_dir.chmod(0o555)
    try:
        proc = subprocess.run([*unprivileged(), sys.executable, "-m", "codegen", "generate",
                               "schemas"], cwd=root, env=scratch.env(), capture_output=True,
                              text=True, timeout=300)
    finally:
        runtime_dir.chmod(0o755)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == ("error: cannot write generated/runtime/_aoti.py: "
                           "generated/runtime is not writable\n")
    assert snapshot(root) == before


def test_directory_in_the_way(tmp_path: Path, capsys, monkeypatch) -> None:
    from codegen.__main__ import main

    root = generated_v1(tmp_path)
    (root / "generated" / "runtime" / "ops.pyi").unlink()
    (root / "generated" / "runtime" / "ops.pyi").mkdir()
    before = snapshot(root)
    monkeypatch.chdir(root)
    assert main(["generate", "schemas"]) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("", "error: cannot write generated/runtime/ops.pyi: a directory is in "
                              "the way\n")
    assert snapshot(root) == before


def test_failed_write_rolls_back(tmp_path: Path, capsys, monkeypatch) -> None:
    """A write that fails after others were staged (a full disk) replaces nothing and leaves no
    temporary behind."""
    from codegen.__main__ import main

    root = generated_v1(tmp_path)
    before = snapshot(root)
    real = files._temporary
    calls = []

    def fail_third(target: str, data: bytes) -> str:
        calls.append(target)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(target, data)

    monkeypatch.setattr(files, "_temporary", fail_third)
    monkeypatch.chdir(root)
    assert main(["generate", "schemas"]) == 1
    out, err = capsys.readouterr()
    rel = Path(calls[-1]).as_posix()     # relative to the working directory, the root
    assert (out, err) == ("", f"error: cannot write {rel}: No space left on device; nothing was "
                              "changed\n")
    assert snapshot(root) == before


def test_replace_failing_midway_names_the_file(tmp_path: Path, capsys, monkeypatch) -> None:
    """A target that cannot be replaced although its directory is writable (an immutable file,
    `chattr +i`; another user's file in a sticky directory) stops the renames midway: the error
    names that file, no temporary is left behind, and the next run, once it can, completes the
    set."""
    from codegen.__main__ import main

    root = generated_v1(tmp_path)
    real = os.replace
    blocked = "generated/runtime/ops.py"

    def replace(src, dst):
        if Path(dst).as_posix().endswith(blocked):
            raise OSError(1, "Operation not permitted")
        return real(src, dst)

    monkeypatch.setattr(files.os, "replace", replace)
    monkeypatch.chdir(root)
    assert main(["generate", "schemas"]) == 1
    out, err = capsys.readouterr()
    assert err == (f"error: cannot replace {blocked} (Operation not permitted): writing generated "
                   "stopped midway and the set is incomplete; run code generation again once it "
                   "can be replaced (the build does so by itself)\n")
    assert not [p for p in (root / "generated").rglob(f"{files.TEMP_PREFIX}*")]
    monkeypatch.setattr(files.os, "replace", real)
    assert main(["generate", "--check", "schemas"]) == 1
    assert main(["generate", "schemas"]) == 0
    assert main(["generate", "--check", "schemas"]) == 0


# --------------------------------------------------------------------------------------------------
# A generate killed midway

KILL_AFTER = """
import os, signal, sys
real, renamed = os.replace, []
def replace(src, dst):
    if len(renamed) == {n}:
        os.kill(os.getpid(), signal.SIGKILL)
    renamed.append(dst)
    return real(src, dst)
os.replace = replace
from codegen.__main__ import main
sys.exit(main(["generate", "schemas"]))
"""


def killed_generate(root: Path, after: int) -> None:
    """Run `generate`, SIGKILLed just before its rename number `after` + 1."""
    # No load cache: its entries are renamed into place too, and only generated files count here.
    proc = subprocess.run([sys.executable, "-c", KILL_AFTER.format(n=after)], cwd=root,
                          env=dict(scratch.env(), OPGEN_NO_CACHE="1"), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == -9, proc.stdout + proc.stderr


def test_killed_generate_is_noticed(tmp_path: Path) -> None:
    root = generated_v1(tmp_path)
    before = snapshot(root)
    killed_generate(root, 2)
    after = snapshot(root)
    changed = {rel for rel in before if after.get(rel) != before[rel]}
    kept = {rel for rel in after if rel in before and after[rel] == before[rel]}
    assert len(changed - {SET_STAMP}) == 2 and kept, "the kill must leave a mixed set"
    assert SET_STAMP not in after

    check = scratch.run(root, "-m", "codegen", "generate", "--check", "schemas")
    assert check.returncode == 1 and f"stale: {SET_STAMP}\n" in check.stdout

    out = io.StringIO()
    assert check_generated(root, out)
    assert out.getvalue() == (f"note: {SET_STAMP} is missing (the last code generation did not "
                              "complete); regenerating before the build\n")

    again = scratch.generate(root)
    assert again.returncode == 0, again.stderr
    assert files.verify_stamp(root, SET_STAMP) is None
    assert not list((root / "generated").rglob(f"{files.TEMP_PREFIX}*"))


def test_build_notices_a_file_changed_under_the_stamp(tmp_path: Path) -> None:
    root = generated_v1(tmp_path)
    header = root / "generated" / "cpp" / "wr" / "wr.h"
    header.write_text(header.read_text() + "// edited\n")
    out = io.StringIO()
    assert check_generated(root, out)
    assert out.getvalue() == ("note: generated/cpp/wr/wr.h differs from the set "
                              f"{SET_STAMP} records; regenerating before the build\n")
    assert not (root / SET_STAMP).exists()     # so ninja's codegen edge reruns first


def test_pruning_removes_only_what_opgen_wrote(tmp_path: Path, capsys, monkeypatch) -> None:
    """An op deleted from the YAML takes its generated files with it (printed as removed), and a
    leftover temporary goes too; a file of the user's in the generated directory stays."""
    from codegen.__main__ import main

    root = generated_v1(tmp_path)
    (root / "schemas" / "wr.yaml").write_text(V2)
    monkeypatch.chdir(root)
    assert main(["generate", "schemas"]) == 0
    thrice = "generated/cpp/wr/wr/thrice.h"
    assert (root / thrice).is_file()
    notes = root / "generated" / "NOTES.txt"
    notes.write_text("mine\n")
    temporary = root / "generated" / "cpp" / f"{files.TEMP_PREFIX}0123456789ab{files.TEMP_SUFFIX}"
    temporary.write_text("half a file")
    (root / "schemas" / "wr.yaml").write_text(V1)
    capsys.readouterr()
    assert main(["generate", "schemas"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"removed {thrice}" in out and f"removed {temporary.relative_to(root)}" in out
    assert not (root / thrice).exists() and not temporary.exists()
    assert notes.read_text() == "mine\n"
    assert main(["generate", "--check", "schemas"]) == 0


def test_pruning_removes_the_directories_it_empties(tmp_path: Path, monkeypatch) -> None:
    """A renamed op file or a namespace moved away leaves no empty directory of its generated
    headers behind (generated/cpp/<ns>/<file>/); a directory still holding a file stays, and so
    does an empty one of the user's."""
    from codegen.__main__ import main

    root = generated_v1(tmp_path)
    monkeypatch.chdir(root)
    assert main(["generate", "schemas"]) == 0
    mine = root / "generated" / "cpp" / "mine"
    mine.mkdir()
    (root / "schemas" / "wr.yaml").rename(root / "schemas" / "renamed.yaml")
    assert main(["generate", "schemas"]) == 0
    assert (root / "generated" / "cpp" / "wr" / "renamed" / "thrice.h").is_file()
    assert not (root / "generated" / "cpp" / "wr" / "wr").exists()
    (root / "schemas" / "renamed.yaml").write_text(V2.replace("namespace: wr", "namespace: wq"))
    assert main(["generate", "schemas"]) == 0
    assert not (root / "generated" / "cpp" / "wr").exists()
    assert (root / "generated" / "cpp" / "wq" / "renamed" / "thrice.h").is_file()
    assert mine.is_dir()
    assert main(["generate", "--check", "schemas"]) == 0
