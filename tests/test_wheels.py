"""Honest wheels (Note [Honest wheels] in codegen/setuptools.py): what a wheel says about torch
(Requires-Dist), its tag, and its libraries' RUNPATH; opgen's own wheel holds the tool only.

The requirement logic is tested directly (fast); wheels are built from temporary projects in
fresh venvs (slow).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from codegen.setuptools import merge_torch_requirement, torch_promise
from tests import scratch

# --------------------------------------------------------------------------------------------------
# The requirement (fast)


def test_full_abi_pins_the_release_without_its_local_label() -> None:
    """`torch==2.13.0` (PEP 440: matches 2.13.0+cpu and 2.13.0+cu130, builds of one release)."""
    p = torch_promise({"a": None}, "2.13.0+cpu")
    assert p is not None and p.specifier == "==2.13.0" and not p.stable_only
    assert merge_torch_requirement(["numpy>=1", "torch"], p) == (["numpy>=1", "torch==2.13.0"], [])
    assert merge_torch_requirement(["torch>=2.5; python_version >= '3.10'"], p)[0] == \
        ['torch==2.13.0; python_version >= "3.10"']
    assert merge_torch_requirement([], p)[0] == ["torch==2.13.0"]


def test_loader_accepts_every_build_of_the_release() -> None:
    """What `torch==2.13.0` lets pip install, the loader loads: the local label does not count."""
    from codegen.loader import torch_mismatch

    assert torch_mismatch("2.13.0+cpu", "2.13.0+cu130") is None
    assert torch_mismatch("2.13.0", "2.13.0+cpu") is None
    assert torch_mismatch("2.13.0+cpu", "2.13.1+cpu") == (
        "was built for torch 2.13.0+cpu, but this is torch 2.13.1+cpu; rebuild it")


def test_stable_abi_requires_the_highest_minimum() -> None:
    p = torch_promise({"a": (2, 10), "b": (2, 12)}, "2.13.0+cpu")
    assert p is not None and p.specifier == ">=2.12" and p.stable_only
    assert merge_torch_requirement(["torch"], p) == (["torch>=2.12"], [])
    # The project's stricter bounds are kept; a weaker lower bound is raised, with a warning.
    assert merge_torch_requirement(["torch>=2.13"], p) == (["torch>=2.13"], [])
    reqs, warnings = merge_torch_requirement(["torch>=2.5,<3"], p)
    assert reqs == ["torch<3,>=2.12"]
    assert warnings == ["the project requires torch<3,>=2.5, but the stable-ABI libraries need "
                        "torch 2.12 or newer: the wheel requires torch<3,>=2.12"]


@pytest.mark.parametrize("declared, merged, warned", [
    # At min_torch already: kept as written, no warning (it warned that nothing changed).
    ("torch>=2.10", "torch>=2.10", False),
    ("torch>=2.10.0,<3", "torch<3,>=2.10.0", False),
    # Stricter than min_torch: kept (it became >=2.10, accepting the 2.10.0 it excluded).
    ("torch>2.10", "torch>2.10", False),
    ("torch>2.10,<2.11", "torch<2.11,>2.10", False),
    # Below it: raised, with a warning; a compatible-release bound keeps its upper bound.
    ("torch>2.9", "torch>=2.10", True),
    ("torch~=2.9", "torch>=2.10,~=2.9", True),
])
def test_stable_lower_bounds(declared: str, merged: str, warned: bool) -> None:
    reqs, warnings = merge_torch_requirement([declared], torch_promise({"a": (2, 10)}, "2.13.0"))
    assert reqs == [merged]
    assert warnings == ([f"the project requires {declared}, but the "
                         "stable-ABI libraries need torch 2.10 or newer: the wheel requires "
                         f"{merged}"] if warned else [])


def test_mixed_abis_say_the_stricter() -> None:
    p = torch_promise({"full": None, "st": (2, 10)}, "2.14.1")
    assert p is not None and p.specifier == "==2.14.1" and not p.stable_only


@pytest.mark.parametrize("declared, promise, message", [
    ("torch<2.12", ({"a": None}, "2.13.0+cpu"),
     "the project requires torch<2.12, but namespace a is built on the full libtorch API of torch "
     "2.13.0, which that excludes"),
    ("torch<2.9", ({"a": (2, 10)}, "2.13.0"),
     "the project requires torch<2.9, but the stable-ABI libraries need torch 2.10 or newer: no "
     "torch satisfies both"),
    ("torch===2.10-custom", ({"a": (2, 10)}, "2.13.0"),
     "the project requires torch===2.10-custom, but the stable-ABI libraries need torch 2.10 or "
     "newer: no torch satisfies both"),
])
def test_contradicting_requirements_are_errors(declared, promise, message) -> None:
    with pytest.raises(ValueError) as info:
        merge_torch_requirement([declared], torch_promise(*promise))
    assert str(info.value) == message


def test_contradiction_fails_the_build(tmp_path: Path) -> None:
    """setup() stops with the message, before anything is built."""
    root = scratch.write_project(tmp_path / "alphaops", "alphaops", "alphans")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('dependencies = ["torch"]',
                                                       'dependencies = ["torch<2"]'))
    proc = subprocess.run([sys.executable, "setup.py", "--version"], cwd=root,
                          env=scratch.env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    import torch
    from packaging.version import Version

    release = Version(torch.__version__).public
    assert proc.stderr == (
        "pyproject.toml:8:17: error: the project requires torch<2, but namespace alphans is "
        f"built on the full libtorch API of torch {release}, which that excludes\n"
        '    dependencies = ["torch<2"]\n'
        "                    ^~~~~~~~~\n"
        "hint: loosen or remove the torch requirement in [project] dependencies\n"
        "1 error generated.\n"), proc.stderr
    assert not list(root.glob("alphaops/*.so"))


def test_setuptools_without_bdist_wheel_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    """A Python 3.11 venv ships setuptools 65 (no setuptools.command.bdist_wheel) and no `wheel`:
    the one-line setup.py says what to install instead of an ImportError traceback."""
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name in ('wheel', 'setuptools.command.bdist_wheel'):\n"
            "            raise ImportError(name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "import codegen.setuptools\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=scratch.env(),
                       capture_output=True, text=True, timeout=120)
    import setuptools
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (
        "error: opgen's setup() builds wheels with setuptools 70.1 or newer, or the `wheel` "
        f"package; this environment has setuptools {setuptools.__version__} "
        f"({Path(setuptools.__file__).parent}) and no `wheel`\n"
        "hint: `pip install -U setuptools` in it, or require \"setuptools>=70.1\" in "
        "[build-system] of pyproject.toml\n")


def test_libraries_outside_the_package_fail_the_wheel(tmp_path: Path) -> None:
    """A wheel without its op libraries would fail at import: setup() refuses, at the key."""
    root = scratch.write_project(tmp_path / "alphaops", "alphaops", "alphans")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + 'libraries = "build/lib"\n')
    proc = subprocess.run([sys.executable, "setup.py", "--version"], cwd=root,
                          env=scratch.env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr == (
        "pyproject.toml:14:13: error: 'libraries' is outside the package alphaops, so a wheel "
        "would not hold the op libraries\n"
        '    libraries = "build/lib"\n'
        "                ^~~~~~~~~~~\n"
        'hint: build them inside the package, e.g. libraries = "alphaops" (the default)\n'
        "1 error generated.\n"), proc.stderr


def test_generated_outside_the_package_fails_the_wheel(tmp_path: Path) -> None:
    """With 'generated' outside the package, the wheel held neither ops.py nor the loader (import
    failed once installed): building it (build_py, not in editable mode) refuses, at the key,
    before anything is built."""
    root = scratch.write_project(tmp_path / "alphaops", "alphaops", "alphans")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + 'generated = "gen"\n')
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_py"], cwd=root,
                          env=scratch.env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr == (
        "pyproject.toml:14:13: error: 'generated' is outside the package alphaops, so a wheel "
        "would not hold the generated modules (ops.py, the loader)\n"
        '    generated = "gen"\n'
        "                ^~~~~\n"
        'hint: generate inside the package, e.g. generated = "alphaops/_generated" (the '
        "default)\n"
        "1 error generated.\n"), proc.stderr
    assert not (root / "build" / "obj").exists() and not list(root.rglob("*.so"))


def test_wheel_holds_only_the_libraries_of_the_projects_namespaces(tmp_path: Path,
                                                                   monkeypatch) -> None:
    """A namespace moved away (or deleted) leaves its built lib<ns>_ops.so in the package
    directory; the wheel holds the libraries of the namespaces the op files declare now, not
    every lib*_ops.so lying there."""
    import fnmatch

    import codegen.setuptools as opgen_setuptools

    root = scratch.write_project(tmp_path / "alphaops", "alphaops", "alphans")
    (root / "alphaops" / "libgone_ops.so").write_bytes(b"built before the namespace moved")
    captured: dict = {}
    monkeypatch.setattr(opgen_setuptools.setuptools, "setup", captured.update)
    monkeypatch.chdir(root)
    opgen_setuptools.setup()
    patterns = captured["package_data"]["alphaops"]
    assert any(fnmatch.fnmatch("libalphans_ops.so", p) for p in patterns), patterns
    assert not any(fnmatch.fnmatch("libgone_ops.so", p) for p in patterns), patterns


def test_libraries_in_a_plain_directory_of_the_package_are_packaged(tmp_path: Path,
                                                                    monkeypatch) -> None:
    """`libraries = "alphaops/lib"` (a directory, not a subpackage): the library is package data
    of the package itself, by its path below it (as data of a package `alphaops.lib`, which
    setuptools does not list, it was left out of the wheel)."""
    import codegen.setuptools as opgen_setuptools

    root = scratch.write_project(tmp_path / "alphaops", "alphaops", "alphans")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + 'libraries = "alphaops/lib"\n')
    captured: dict = {}
    monkeypatch.setattr(opgen_setuptools.setuptools, "setup", captured.update)
    monkeypatch.chdir(root)
    opgen_setuptools.setup()
    assert "lib/libalphans_ops.so" in captured["package_data"]["alphaops"]
    assert captured["packages"] == ["alphaops", "alphaops._generated"]


def test_generated_below_a_plain_directory_is_packaged(tmp_path: Path, monkeypatch) -> None:
    """`generated = "alphaops/gen/_generated"`, `gen/` without __init__.py: the generated
    subpackage is listed (find_packages did not enter gen/, and the wheel held no ops.py)."""
    import codegen.setuptools as opgen_setuptools

    root = scratch.write_project(tmp_path / "alphaops", "alphaops", "alphans")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + 'generated = "alphaops/gen/_generated"\n')
    (root / "alphaops" / "__init__.py").write_text(
        "from alphaops.gen._generated import ops  # opgen: loads the op libraries\n")
    captured: dict = {}
    monkeypatch.setattr(opgen_setuptools.setuptools, "setup", captured.update)
    monkeypatch.chdir(root)
    opgen_setuptools.setup()
    assert captured["packages"] == ["alphaops", "alphaops.gen", "alphaops.gen._generated"]
    assert "*.pyi" in captured["package_data"]["alphaops.gen._generated"]


def test_dotted_package_in_a_namespace_directory_is_packaged(tmp_path: Path,
                                                            monkeypatch) -> None:
    """`package = "acme.alphaops"` in src/acme/alphaops, src/acme/ without __init__.py: the wheel
    lists the package and its subpackages from the package's own directory (find_packages from
    src/acme found none of them, and the wheel held no module at all)."""
    import codegen.setuptools as opgen_setuptools

    root = scratch.write_dotted_project(tmp_path / "alphaops", "alphaops", "alphans")
    captured: dict = {}
    monkeypatch.setattr(opgen_setuptools.setuptools, "setup", captured.update)
    monkeypatch.chdir(root)
    opgen_setuptools.setup()
    assert captured["packages"] == ["acme.alphaops", "acme.alphaops._generated"]
    assert captured["package_dir"] == {"": "src"}
    # A package-dir not named after the package is mapped as it is (no module of the op file
    # can be found there: no import path leads to it).
    (root / "src" / "acme" / "alphaops").rename(root / "lib")
    ops = root / "ops" / "alphans.yaml"
    ops.write_text(ops.read_text(encoding="utf-8").split("  - func: cube")[0], encoding="utf-8")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text(encoding="utf-8").replace(
        'package = "acme.alphaops"', 'package = "acme.alphaops"\npackage-dir = "lib"'),
        encoding="utf-8")
    captured.clear()
    opgen_setuptools.setup()
    assert captured["packages"] == ["acme.alphaops", "acme.alphaops._generated"]
    assert captured["package_dir"] == {"acme.alphaops": "lib"}


def test_python_kernel_outside_the_package_fails_the_wheel(tmp_path: Path, monkeypatch,
                                                           capsys) -> None:
    """A Python kernel in a module of the project outside the package (found through
    'python-roots'): the wheel would not hold it and the installed package would fail at import
    (its registrations import the module). setup() refuses, at the reference; a module setup()
    is told to ship as well passes."""
    import codegen.setuptools as opgen_setuptools

    root = scratch.write_project(tmp_path / "alphaops", "alphaops", "alphans")
    (root / "alphaops" / "kernels.py").rename(root / "pykernels.py")
    ops = root / "ops" / "alphans.yaml"
    ops.write_text(ops.read_text().replace("'alphaops.kernels:cube'", "'pykernels:cube'"))
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + 'python-roots = ["."]\n')
    captured: dict = {}
    monkeypatch.setattr(opgen_setuptools.setuptools, "setup", captured.update)
    monkeypatch.chdir(root)
    with pytest.raises(SystemExit) as info:
        opgen_setuptools.setup()
    assert info.value.code == 1 and not captured
    assert capsys.readouterr().err == (
        "ops/alphans.yaml:12:43: error: module 'pykernels' of pykernels:cube is outside the "
        "package alphaops (pykernels.py), so the wheel would not hold it and `import alphaops` "
        "would fail once installed\n"
        "        dispatch: {CompositeExplicitAutograd: 'pykernels:cube'}\n"
        "                                              ^~~~~~~~~~~~~~~~\n"
        "hint: move it into the package, e.g. as alphaops.pykernels, or have setup() ship it "
        "too (`packages=`, `py_modules=`)\n"
        "1 error generated.\n")
    opgen_setuptools.setup(py_modules=["pykernels"])
    assert captured["py_modules"] == ["pykernels"]


def _sdist(root: Path, out: Path) -> Path:
    proc = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(out)], cwd=root,
                          env=scratch.env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (tarball,) = out.glob("*.tar.gz")
    return tarball


def test_sdist_holds_what_the_wheel_build_reads(tmp_path: Path) -> None:
    """`python -m build` builds the wheel from the sdist: it must hold the op files and every
    file of the kernel directories (headers too), and no built library (it held neither the
    op files nor the kernels, and the wheel build failed with 'ops does not exist')."""
    import tarfile

    root = scratch.write_project(tmp_path / "alphaops", "alphaops", "alphans")
    (root / "csrc" / "cpu" / "helpers.h").write_text("#pragma once\n", encoding="utf-8")
    (root / "csrc" / ".hidden").write_text("", encoding="utf-8")
    (root / "ops" / "sample_failures.yaml").write_text("{}\n", encoding="utf-8")
    (root / "ops" / "notes.txt").write_text("not read by opgen\n", encoding="utf-8")
    (root / "alphaops" / "libalphans_ops.so").write_bytes(b"built before")
    tarball = _sdist(root, tmp_path / "dist")
    with tarfile.open(tarball) as tar:
        names = sorted(m.name.split("/", 1)[1] for m in tar.getmembers()
                       if m.isfile() and "/" in m.name)
    assert [n for n in names if n.startswith(("ops/", "csrc/"))] == [
        "csrc/cpu/add.cpp", "csrc/cpu/helpers.h", "csrc/cpu/more/twice.cc", "ops/alphans.yaml",
        "ops/sample_failures.yaml"], names
    assert "alphaops/kernels.py" in names and not [n for n in names if n.endswith(".so")]


# --------------------------------------------------------------------------------------------------
# Wheels (slow)

STABLE_OPS = """\
namespace: {ns}
abi: stable
min_torch: "2.10"
ops:
  - func: scale(Tensor self, float alpha=1.0) -> Tensor
    dispatch: {{CPU: scale_cpu}}
    fake: like(self)
"""

STABLE_KERNEL = """\
#include <{ns}/{ns}.h>

#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>

namespace {ns} {{

torch::stable::Tensor scale_cpu(const torch::stable::Tensor& self, double alpha) {{
  STD_TORCH_CHECK(self.scalar_type() == torch::headeronly::ScalarType::Float,
                  "scale: expected float32");
  torch::stable::Tensor in = torch::stable::contiguous(self);
  torch::stable::Tensor out = torch::stable::empty_like(in);
  const float* src = static_cast<const float*>(in.const_data_ptr());
  float* dst = static_cast<float*>(out.mutable_data_ptr());
  for (int64_t i = 0; i < in.numel(); ++i) {{
    dst[i] = src[i] * static_cast<float>(alpha);
  }}
  return out;
}}

}}  // namespace {ns}
"""


def write_stable_project(root: Path, package: str, ns: str) -> Path:
    """A project whose only namespace is on the stable ABI."""
    scratch.write_project(root, package, ns)
    shutil.rmtree(root / "csrc")
    (root / "ops" / f"{ns}.yaml").write_text(STABLE_OPS.format(ns=ns), encoding="utf-8")
    (root / "csrc").mkdir()
    (root / "csrc" / "scale.cpp").write_text(STABLE_KERNEL.format(ns=ns), encoding="utf-8")
    return root


def build_wheel(project: Path, out: Path) -> Path:
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation",
                           "--no-deps", "--no-index", "-w", str(out), str(project)],
                          env=scratch.env(), capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    wheels = list(out.glob(f"{project.name}-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    return re.findall(r"^Requires-Dist: (.*)$", text, re.M)


def dynamic_section(library: Path) -> str:
    proc = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True,
                          timeout=60, check=True)
    return proc.stdout


def check_no_build_path(wheel: Path, tmp: Path, build_paths: list[Path]) -> list[str]:
    """Every library's RUNPATH/RPATH entries (none may name a build-machine directory)."""
    unpacked = tmp / (wheel.stem + "-unpacked")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(unpacked)
    entries = []
    libraries = sorted(unpacked.rglob("*.so"))
    assert libraries
    for lib in libraries:
        dyn = dynamic_section(lib)
        for m in re.finditer(r"\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[(.*)\]", dyn):
            for entry in m[1].split(":"):
                entries.append(entry)
                assert entry.startswith("$ORIGIN"), (lib.name, entry)
        for p in build_paths:
            assert str(p) not in dyn, (lib.name, p)
    return entries


CALL_STABLE = """
import sys
import torch
import {package}
assert "codegen" not in sys.modules
x = torch.randn(3, 4)
torch.testing.assert_close({package}.ops.scale(x, 2.5), x * 2.5)
torch.library.opcheck({package}.ops.scale, (x, 2.0))
print("ok")
"""


@pytest.mark.slow
@pytest.mark.e2e
def test_full_and_stable_wheels_are_honest(tmp_path: Path) -> None:
    import torch
    from packaging.version import Version

    release = Version(torch.__version__).public
    full = build_wheel(scratch.write_project(tmp_path / "alphaops", "alphaops", "alphans"),
                       tmp_path / "wheels")
    stable = build_wheel(write_stable_project(tmp_path / "stabops", "stabops", "stabns"),
                         tmp_path / "wheels")
    # Tags: the full-ABI wheel for this CPython, the stable one for every CPython.
    assert re.search(r"-cp3\d+-cp3\d+-linux_\w+\.whl$", full.name), full.name
    assert re.search(r"-py3-none-linux_\w+\.whl$", stable.name), stable.name
    assert requires_dist(full) == [f"torch=={release}"]
    assert requires_dist(stable) == ["torch>=2.10"]
    import sysconfig

    build_paths = [Path(torch.__file__).parent, tmp_path,
                   Path(sysconfig.get_paths()["purelib"])]
    assert check_no_build_path(full, tmp_path, build_paths) == []
    assert check_no_build_path(stable, tmp_path, build_paths) == []

    # Both load and run in a fresh venv without opgen, the projects gone.
    python = scratch.fresh_venv(tmp_path / "venv")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                              "--no-deps", "--no-index", str(full), str(stable)],
                             env=scratch.clean_env(), capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout + install.stderr
    shutil.rmtree(tmp_path / "alphaops")
    shutil.rmtree(tmp_path / "stabops")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run([str(python), "-c", CALL_STABLE.format(package="stabops")
                          + "import alphaops; print(alphaops.ops.twice(torch.ones(2)).tolist())"],
                         cwd=elsewhere, env=scratch.clean_env(), capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout == "ok\n[2.0, 2.0]\n", run.stdout


def _other_python() -> str | None:
    """A CPython other than this one (pyenv keeps several on the development machine)."""
    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for version in ("3.12", "3.13", "3.10"):
        if version == mine:
            continue
        candidates = [shutil.which(f"python{version}"),
                      *map(str, sorted(pyenv.glob(f"{version}.*/bin/python{version}")))]
        for exe in filter(None, candidates):
            ok = subprocess.run([exe, "-c", "import venv"], capture_output=True, timeout=60,
                                env=scratch.clean_env())
            if ok.returncode == 0:
                return exe
    return None


# Loads the stable library on another CPython with no torch for it: torch's C++ libraries are
# Python-independent, so they are loaded directly; the op library's static initializers then
# register its ops with the dispatcher. Proves the library needs no CPython of its own.
LOAD_WITHOUT_PYTHON_TORCH = """
import ctypes, pathlib, sys
torch_lib = pathlib.Path(sys.argv[1])
for name in ("libc10.so", "libtorch_cpu.so"):
    ctypes.CDLL(str(torch_lib / name), mode=ctypes.RTLD_GLOBAL)
import importlib.util
lib = pathlib.Path(importlib.util.find_spec("stabops").origin).parent / "libstabns_ops.so"
ctypes.CDLL(str(lib))
print(sys.version_info[:2], "loaded", lib.name)
"""


@pytest.mark.slow
@pytest.mark.e2e
def test_stable_wheel_installs_on_another_python(tmp_path: Path) -> None:
    """pip on a second CPython accepts the py3-none wheel, and the library loads there. torch
    itself is not installed on that Python (it would be a download): the library is loaded with
    torch's C++ libraries alone."""
    other = _other_python()
    if other is None:
        pytest.skip("no second CPython on this machine")
    import torch

    stable = build_wheel(write_stable_project(tmp_path / "stabops", "stabops", "stabns"),
                         tmp_path / "wheels")
    venv = tmp_path / "venv-other"
    subprocess.run([other, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                              "--no-deps", "--no-index", str(stable)],
                             env=scratch.clean_env(), capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout + install.stderr
    shutil.rmtree(tmp_path / "stabops")
    # Importing the package would import torch: load the library the wheel installed.
    run = subprocess.run([str(python), "-c", LOAD_WITHOUT_PYTHON_TORCH, str(Path(torch.__file__).parent / "lib")],
                         cwd=tmp_path, env=scratch.clean_env(), capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "loaded libstabns_ops.so" in run.stdout
    assert not run.stdout.startswith(f"({sys.version_info[0]}, {sys.version_info[1]})")


@pytest.mark.slow
def test_opgen_wheel_holds_the_tool_only(tmp_path: Path) -> None:
    # Build from a copy of the tracked files: setuptools writes build/ and *.egg-info in the
    # source tree, and build/ is the example's build directory.
    src = tmp_path / "src"
    scratch.copy_repo(src)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation",
                           "--no-deps", "--no-index", "-w", str(tmp_path), str(src)],
                          env=scratch.clean_env(), capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("torch_opgen-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"codegen", "torch_opgen-0.1.0.dist-info"}, top
    for needed in ("codegen/__main__.py", "codegen/loader.py", "codegen/dest/cmake.py",
                   "codegen/grammar/schema.lark", "codegen/opfile.schema.json"):
        assert needed in names, needed
    assert any(n.startswith("codegen/templates/") and n.endswith(".j2") for n in names)


def test_toolchain_writes_no_runpath() -> None:
    """`opgen build` links with -rpath-link (found at link time) and no -rpath: a RUNPATH would
    write this machine's torch directory into every library and wheel."""
    from codegen import config, toolchain

    with config.use(config.default_project(scratch.REPO)):
        text = toolchain.make_toolchain("key").text
    ldflags = [line for line in text.splitlines() if "ldflags = " in line]
    assert ldflags and all("-rpath-link," in line for line in ldflags), ldflags
    assert not re.search(r"-rpath,", text)


@pytest.mark.slow
@pytest.mark.e2e
def test_wheel_builds_from_the_sdist(tmp_path: Path) -> None:
    """What `python -m build` does: an sdist, unpacked elsewhere, then a wheel from it."""
    root = scratch.write_project(tmp_path / "alphaops", "alphaops", "alphans")
    tarball = _sdist(root, tmp_path / "dist")
    shutil.rmtree(root)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation",
                           "--no-deps", "--no-index", "-w", str(tmp_path / "wheels"),
                           str(tarball)], env=scratch.env(), capture_output=True, text=True,
                          timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (wheel,) = (tmp_path / "wheels").glob("alphaops-*.whl")
    assert "alphaops/libalphans_ops.so" in zipfile.ZipFile(wheel).namelist()


@pytest.mark.slow
@pytest.mark.e2e
def test_wheel_holds_nothing_an_earlier_build_left(tmp_path: Path) -> None:
    """setuptools stages the package in build/lib and never empties it: a module deleted since
    the last wheel, or a generated directory since moved, went into the next wheel too."""
    root = scratch.write_project(tmp_path / "alphaops", "alphaops", "alphans")
    (root / "alphaops" / "old.py").write_text("", encoding="utf-8")
    first = build_wheel(root, tmp_path / "first")
    assert "alphaops/old.py" in zipfile.ZipFile(first).namelist()
    (root / "alphaops" / "old.py").unlink()
    second = build_wheel(root, tmp_path / "second")
    assert "alphaops/old.py" not in zipfile.ZipFile(second).namelist()
    assert "alphaops/libalphans_ops.so" in zipfile.ZipFile(second).namelist()
