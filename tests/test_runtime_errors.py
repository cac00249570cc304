"""`import runtime` refuses an op library it cannot trust, before registering anything, and says
what is wrong and what to run: the library is missing, stale (built from other schemas), built for
another torch, not one of ours, truncated, its namespace or one of its ops is registered in the
process already, or the Python-side registrations it needs are missing.

Each case is a scratch root (OPGEN_ROOT) holding copies of the example library's generated runtime
modules and, where the case needs one, of its built library; `import runtime` runs in a fresh
interpreter.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests import scratch

pytestmark = pytest.mark.e2e

PROBE = r"""
import sys
try:
    import runtime
except ImportError as e:
    print(type(e).__name__)
    print(e)
    print("registered python side:", any(m.startswith("runtime._reg_") for m in sys.modules))
    sys.exit(3)
print("loaded", runtime.NAMESPACES)
"""


@pytest.fixture(scope="module")
def example_library() -> Path:
    built = scratch.build_example()
    assert built.returncode == 0, built.stdout + built.stderr
    return scratch.REPO / "build" / "libexops_ops.so"


def make_root(tmp_path: Path, library: Path | None) -> Path:
    shutil.copytree(scratch.REPO / "generated" / "runtime", tmp_path / "generated" / "runtime")
    if library is not None:
        (tmp_path / "build").mkdir()
        shutil.copy2(library, tmp_path / "build" / library.name)
        # The example's other namespaces (exstable), intact: the cases are about `library`.
        for other in (scratch.REPO / "build").glob("lib*_ops.so"):
            if other.name != library.name:
                shutil.copy2(other, tmp_path / "build" / other.name)
    return tmp_path


def probe(root: Path) -> str:
    proc = scratch.python(root, PROBE)
    if proc.returncode == 0:
        return proc.stdout
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "LibraryError"
    assert lines[-1] == "registered python side: False"
    return "\n".join(lines[1:-1])


def test_copied_root_loads(tmp_path: Path, example_library: Path) -> None:
    """The control: an intact copy loads (so the failures below are the cases' own)."""
    assert probe(make_root(tmp_path, example_library)).startswith("loaded")


def test_missing_library(tmp_path: Path) -> None:
    message = probe(make_root(tmp_path, None))
    assert "the C++ op library of namespace 'exops' is not built: build/libexops_ops.so does " \
           f"not exist; run `make build` in the project runtime was generated in ({tmp_path} " \
           "has no pyproject.toml)" in message


def test_an_installed_package_is_told_how_to_reinstall(tmp_path: Path) -> None:
    """A package pip installed (here PyYAML's `yaml`, standing in for an op library's wheel) has
    no project to run the build in: the hint names the distribution and the pip command."""
    from codegen.loader import LibraryError, Where, check_library

    at = Where(tmp_path, tmp_path, "yaml/_generated", "opgen build", "opgen generate", "yaml")
    with pytest.raises(LibraryError) as e:
        check_library(at, "ns", {"library": "libns_ops.so"}, torch.__version__)
    assert str(e.value) == (
        "the C++ op library of namespace 'ns' is not built: libns_ops.so does not exist; PyYAML "
        "is installed, not a project built in place: reinstall it built from source against "
        "this torch, `pip install --force-reinstall --no-deps --no-build-isolation --no-binary "
        "PyYAML PyYAML` (or, in its source tree, `pip install --force-reinstall --no-deps "
        "--no-build-isolation .`)")
    with_project = Where(scratch.REPO, tmp_path, "generated/runtime", "make build", "make codegen",
                         "runtime")
    assert with_project.build_hint == f"run `make build` in {scratch.REPO}"


def test_stale_library(tmp_path: Path, example_library: Path) -> None:
    root = make_root(tmp_path, example_library)
    manifest = root / "generated" / "runtime" / "_manifest.py"
    text = manifest.read_text()
    built_hash = re.search(r'"schema_hash": ["\']([0-9a-f]+)["\']', text)[1]
    manifest.write_text(text.replace(built_hash, "0123456789abcdef"))
    message = probe(root)
    assert ("build/libexops_ops.so is stale: it was built from other schemas than "
            "schemas/core.yaml") in message
    assert f"(schema hash {built_hash}, expected 0123456789abcdef); run `make build`" in message


def test_library_for_another_torch(tmp_path: Path, example_library: Path) -> None:
    root = make_root(tmp_path, example_library)
    lib = root / "build" / example_library.name
    actual = torch.__version__
    other = re.sub(r"\d", "9", actual) if re.sub(r"\d", "9", actual) != actual else "0" * len(actual)
    data = lib.read_bytes()
    stamp = f"torch={actual};".encode()
    assert data.count(stamp) == 1
    lib.write_bytes(data.replace(stamp, f"torch={other};".encode()))
    message = probe(root)
    assert f"build/libexops_ops.so was built for torch {other}, but this is torch {actual}; " \
           "rebuild it: run `make build`" in message


def test_foreign_library(tmp_path: Path) -> None:
    root = make_root(tmp_path, None)
    (root / "build").mkdir()
    (root / "build" / "libexops_ops.so").write_bytes(b"\x7fELF not ours")
    message = probe(root)
    assert "build/libexops_ops.so is not an op library of namespace 'exops' built by this " \
           "project (it carries no build stamp)" in message


def test_missing_python_registrations(tmp_path: Path, example_library: Path) -> None:
    root = make_root(tmp_path, example_library)
    (root / "generated" / "runtime" / "_reg_exops.py").unlink()
    message = probe(root)
    assert "runtime._reg_exops (generated/runtime/_reg_exops.py) is missing, but the op files " \
           "of namespace 'exops' declare Python-side registrations" in message
    assert "run `make codegen`" in message


def test_missing_manifest(tmp_path: Path) -> None:
    message = probe(tmp_path)
    assert "generated/runtime/_manifest.py is missing" in message
    assert "run `make codegen`" in message


def crash_signal(code: str) -> int:
    """What `code` dies of in a fresh interpreter (the controls below: each damage really kills
    the process when loaded without the loader's checks)."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    return -proc.returncode


def test_truncated_library_is_refused_not_sigbus(tmp_path: Path, example_library: Path) -> None:
    """A link killed midway or a full disk leaves a library cut short, stamp included: mapping
    it raises SIGBUS inside dlopen. The loader refuses it from its ELF headers first."""
    root = make_root(tmp_path, example_library)
    lib = root / "build" / example_library.name
    data = lib.read_bytes()
    at = data.find(b"@opgen-stamp ns=exops ")
    assert at > 0
    cut = at + 1024            # the stamp survives; later segments do not
    lib.write_bytes(data[:cut])
    assert crash_signal(f"import torch; torch.ops.load_library({str(lib)!r})") == signal.SIGBUS
    message = probe(root)
    assert message.startswith(f"build/libexops_ops.so is damaged: its ELF headers describe "
                              f"{len(data)} bytes, but the file has {cut} (a link or a copy was "
                              "cut short, or the disk was full); run `make build`"), message


REGISTER_FIRST = """
import torch
keep = torch.library.Library("exops", {kind!r})
{more}
"""


def probe_after(root: Path, setup: str) -> str:
    proc = scratch.python(root, setup + PROBE)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "LibraryError" and lines[-1] == "registered python side: False"
    return "\n".join(lines[1:-1])


def test_namespace_registered_already(tmp_path: Path, example_library: Path) -> None:
    """Another library holding the namespace's TORCH_LIBRARY: loading ours would abort."""
    root = make_root(tmp_path, example_library)
    setup = REGISTER_FIRST.format(kind="DEF", more="")
    lib = root / "build" / example_library.name
    assert crash_signal(setup + f"torch.ops.load_library({str(lib)!r})") == signal.SIGABRT
    message = probe_after(root, setup)
    assert message.startswith("namespace 'exops' of build/libexops_ops.so is already registered "
                              "in this process (by <string>:3); loading the library would abort "
                              "the process"), message


def test_op_registered_already(tmp_path: Path, example_library: Path) -> None:
    """An op of ours defined already (through a fragment: the namespace itself is free)."""
    root = make_root(tmp_path, example_library)
    setup = REGISTER_FIRST.format(kind="FRAGMENT",
                                  more='keep.define("scaled_add(Tensor x) -> Tensor")')
    lib = root / "build" / example_library.name
    assert crash_signal(setup + f"torch.ops.load_library({str(lib)!r})") == signal.SIGABRT
    message = probe_after(root, setup)
    assert message.startswith("op 'exops::scaled_add' of build/libexops_ops.so is already "
                              "registered in this process (by another library, or torch)"), message


def test_same_library_loaded_twice_is_fine(tmp_path: Path, example_library: Path) -> None:
    """The check skips a library this process loaded already: dlopen registers nothing again."""
    root = make_root(tmp_path, example_library)
    lib = root / "build" / example_library.name
    setup = f"import torch\ntorch.ops.load_library({str(lib)!r})\n"
    proc = scratch.python(root, setup + PROBE)
    assert proc.returncode == 0 and proc.stdout.startswith("loaded"), proc.stdout + proc.stderr
