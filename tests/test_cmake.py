"""The CMake route (docs/CMAKE.md): `[tool.opgen] cmake = true` makes `opgen generate` write
`<generated>/opgen.cmake`; a scikit-build-core project includes it from its CMakeLists.txt and
its wheel passes the checks a setuptools wheel passes (tests/test_wheels.py): it installs in a
fresh venv without opgen, its ops match their references and pass opcheck, its libraries carry
no build path.

The end-to-end test needs scikit-build-core and cmake, from the package registry, in the
interpreter named by OPGEN_SKBUILD_PYTHON (default: /work/venvs/i17-ship/bin/python, a venv made
with --system-site-packages so it sees torch); it is skipped, saying why, where they are absent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import expect, scratch
from tests.test_wheels import (CALL_STABLE, check_no_build_path, requires_dist,
                               write_stable_project)

GOLDEN = Path(__file__).resolve().parent / "golden" / "cmake"
SKBUILD_PYTHON = os.environ.get("OPGEN_SKBUILD_PYTHON", "/work/venvs/i17-ship/bin/python")

CMAKELISTS = """\
cmake_minimum_required(VERSION 3.19)
project({package} LANGUAGES CXX)
# Generate (a fresh checkout has no generated files), then include opgen's CMake file: one
# target per op namespace, installed into the package.
find_package(Python REQUIRED COMPONENTS Interpreter)
execute_process(COMMAND "${{Python_EXECUTABLE}}" -m codegen --project "${{CMAKE_CURRENT_SOURCE_DIR}}"
                generate COMMAND_ERROR_IS_FATAL ANY)
set(OPGEN_GENERATED TRUE)
include(${{CMAKE_CURRENT_SOURCE_DIR}}/{package}/_generated/opgen.cmake)
"""

SKBUILD_PYPROJECT = """\
[build-system]
requires = ["scikit-build-core>=0.10", "torch-opgen", "torch"]
build-backend = "scikit_build_core.build"

[project]
name = "{package}"
version = "0.1.0"
dependencies = ["torch"]

[tool.scikit-build]
wheel.packages = ["{package}"]
wheel.exclude = ["{package}/_generated/cpp/**", "{package}/_generated/build.ninja",
                 "{package}/_generated/SHA256SUMS", "{package}/_generated/opgen.cmake"]
{extra}
[tool.opgen]
package = "{package}"
schemas = ["ops"]
kernels = ["csrc"]
cmake = true
"""


def to_cmake_project(root: Path, package: str, extra: str = "") -> Path:
    """The temporary setuptools project at root, moved to scikit-build-core and CMake."""
    (root / "setup.py").unlink()
    (root / "pyproject.toml").write_text(SKBUILD_PYPROJECT.format(package=package, extra=extra),
                                         encoding="utf-8")
    (root / "CMakeLists.txt").write_text(CMAKELISTS.format(package=package), encoding="utf-8")
    return root


def test_cmake_file_is_generated_when_configured(tmp_path: Path) -> None:
    root = to_cmake_project(scratch.write_project(tmp_path / "alphaops", "alphaops", "alphans"),
                            "alphaops")
    gen = subprocess.run([sys.executable, "-m", "codegen", "generate"], cwd=root,
                         env=scratch.env(), capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr
    text = (root / "alphaops" / "_generated" / "opgen.cmake").read_text(encoding="utf-8")
    assert text.startswith("# @generated")
    assert str(tmp_path) not in text
    expect.check_file(GOLDEN / "full.cmake", text)
    # Sources per namespace, the library name the loader expects, installed into the package.
    assert 'add_library(opgen_alphans SHARED\n  "${OPGEN_PROJECT_ROOT}/csrc/cpu/add.cpp"\n' \
           '  "${OPGEN_PROJECT_ROOT}/csrc/cpu/more/twice.cc"\n' \
           '  "${OPGEN_PROJECT_ROOT}/alphaops/_generated/cpp/alphans/register_alphans.cpp"\n' \
           '  "${OPGEN_PROJECT_ROOT}/alphaops/_generated/cpp/alphans/autograd.cpp"\n' \
           '  "${OPGEN_PROJECT_ROOT}/alphaops/_generated/cpp/alphans/aoti.cpp"\n' \
           '  "${OPGEN_PROJECT_ROOT}/alphaops/_generated/cpp/alphans/stamp.cpp"\n)' in text
    assert 'OUTPUT_NAME "alphans_ops"' in text
    assert 'install(TARGETS opgen_alphans LIBRARY DESTINATION "alphaops")' in text
    assert "target_link_libraries(opgen_alphans PUBLIC ${TORCH_LIBRARIES})" in text
    # Regeneration: op files, the files in their directories and the configuration are
    # configure dependencies (test_only_a_changed_set_of_files_reconfigures).
    assert '"${OPGEN_PROJECT_ROOT}/ops/alphans.yaml"' in text
    assert '"${_opgen_glob_root}/ops/[!.]*.yaml"' in text      # an op file added there
    assert '"${OPGEN_PROJECT_ROOT}/pyproject.toml"' in text
    # Without the key nothing is written, and generate prunes the file it wrote before.
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("cmake = true\n", ""))
    gen = subprocess.run([sys.executable, "-m", "codegen", "generate"], cwd=root,
                         env=scratch.env(), capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr
    assert not (root / "alphaops" / "_generated" / "opgen.cmake").exists()


def test_stable_namespace_links_no_python(tmp_path: Path) -> None:
    root = to_cmake_project(write_stable_project(tmp_path / "stabops", "stabops", "stabns"),
                            "stabops")
    gen = subprocess.run([sys.executable, "-m", "codegen", "generate"], cwd=root,
                         env=scratch.env(), capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr
    text = (root / "stabops" / "_generated" / "opgen.cmake").read_text(encoding="utf-8")
    expect.check_file(GOLDEN / "stable.cmake", text)
    block = text[text.index("# namespace stabns"):]
    assert "TORCH_LIBRARIES" not in block and "python" not in block.lower()
    assert 'target_link_libraries(opgen_stabns PRIVATE "${OPGEN_TORCH_CPU_LIBRARY}")' in block
    assert "TORCH_TARGET_VERSION=0x020a000000000000" in block
    assert 'target_include_directories(opgen_stabns SYSTEM PRIVATE "${OPGEN_STABLE_INCLUDE}")' \
        in block


PROGRAM_CMAKELISTS = """\
cmake_minimum_required(VERSION 3.19)
project(uses_alphaops LANGUAGES CXX)
set(OPGEN_PYTHON "{python}")
include(${{CMAKE_CURRENT_SOURCE_DIR}}/alphaops/_generated/opgen.cmake)
add_executable(uses_ops main.cpp)
target_link_libraries(uses_ops PRIVATE opgen_alphans)
"""

PROGRAM = """\
#include <alphans/alphans.h>   // the generated kernel declarations, from the target's includes

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>
#include <iostream>

int main() {
  // Linking the library registers its ops: call one through the dispatcher.
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow("alphans::twice", "")
                .typed<at::Tensor(const at::Tensor&)>();
  at::Tensor y = op.call(torch::ones({3}));
  at::Tensor direct = alphans::twice_cpu(torch::ones({2}));
  std::cout << y.sum().item<double>() << " " << direct.sum().item<double>() << "\\n";
  return 0;
}
"""


@pytest.mark.slow
def test_a_cpp_program_links_the_target(tmp_path: Path) -> None:
    """The CMake target is a shared library a C++ program links: it gets the generated headers
    and torch from the target, and the ops are registered when the program starts."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed")
    root = to_cmake_project(scratch.write_project(tmp_path / "alphaops", "alphaops", "alphans"),
                            "alphaops")
    (root / "CMakeLists.txt").write_text(PROGRAM_CMAKELISTS.format(python=sys.executable),
                                         encoding="utf-8")
    (root / "main.cpp").write_text(PROGRAM, encoding="utf-8")
    build = tmp_path / "build"
    for cmd in ([sys.executable, "-m", "codegen", "--project", str(root), "generate"], ["cmake", "-S", str(root), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"],
                ["cmake", "--build", str(build), "-j", "2"]):
        proc = subprocess.run(cmd, env=scratch.env(), capture_output=True, text=True,
                              timeout=1800)
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-4000:]
    run = subprocess.run([str(build / "uses_ops")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout == "6 4\n"


def test_only_a_changed_set_of_files_reconfigures(tmp_path: Path) -> None:
    """An editor's save (a temporary renamed over a kernel source, a lock file that comes and
    goes) leaves the configuration as it was; a kernel source added reconfigures. The project
    root has glob characters in its name."""
    if shutil.which("cmake") is None or shutil.which("ninja") is None:
        pytest.skip("cmake or ninja is not installed")
    root = to_cmake_project(scratch.write_project(tmp_path / "ops[1]", "alphaops", "alphans"),
                            "alphaops")
    build = tmp_path / "build"

    def run(*cmd: str) -> str:
        proc = subprocess.run(cmd, env=scratch.env(), capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-4000:]
        return proc.stdout + proc.stderr

    run("cmake", "-S", str(root), "-B", str(build), "-G", "Ninja",
        f"-DPython_EXECUTABLE={sys.executable}")
    bring_up_to_date = ("ninja", "-C", str(build), "build.ninja")
    assert "Re-running CMake" not in run(*bring_up_to_date)
    kernel = root / "csrc" / "cpu" / "add.cpp"
    saved = kernel.with_name(".add.cpp.tmp")
    saved.write_text(kernel.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    saved.replace(kernel)
    # Emacs's lock files: links to nowhere, beside the file being edited.
    (kernel.with_name(".#add.cpp")).symlink_to("user@host.1234:1")
    (root / "ops" / ".#alphans.yaml").symlink_to("user@host.1234:1")
    assert "Re-running CMake" not in run(*bring_up_to_date)
    (kernel.with_name(".#add.cpp")).unlink()
    (root / "ops" / ".#alphans.yaml").unlink()
    assert "Re-running CMake" not in run(*bring_up_to_date)
    (kernel.with_name("extra.cpp")).write_text("// more kernels\n", encoding="utf-8")
    assert "Re-running CMake" in run(*bring_up_to_date)
    assert "extra.cpp" in (root / "alphaops" / "_generated" / "opgen.cmake").read_text(
        encoding="utf-8")


def _skbuild_missing() -> str | None:
    if not Path(SKBUILD_PYTHON).exists():
        return f"{SKBUILD_PYTHON} does not exist (set OPGEN_SKBUILD_PYTHON to an interpreter " \
               "with scikit-build-core, cmake and torch)"
    probe = subprocess.run([SKBUILD_PYTHON, "-c", "import scikit_build_core, cmake, torch"],
                           capture_output=True, text=True, timeout=300, env=scratch.clean_env())
    if probe.returncode != 0:
        return f"scikit-build-core, cmake or torch is not installed for {SKBUILD_PYTHON}: " \
               + probe.stderr.strip().splitlines()[-1]
    return None


def skbuild_wheel(project: Path, out: Path) -> Path:
    proc = subprocess.run([SKBUILD_PYTHON, "-m", "pip", "wheel", "--no-build-isolation",
                           "--no-deps", "--no-index", "-w", str(out), str(project)],
                          env=scratch.env(), capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-4000:]
    wheels = list(out.glob(f"{project.name}-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


USE_FULL = """
import sys
import torch
import alphaops
assert "codegen" not in sys.modules
for name, args in {samples}.items():
    torch.library.opcheck(getattr(alphaops.ops, name), args)
a, b = torch.randn(3, 4), torch.randn(4)
torch.testing.assert_close(alphaops.ops.add_scaled(a, b, 3.0), a + 3.0 * b)
torch.testing.assert_close(alphaops.ops.twice(a), a * 2)
torch.testing.assert_close(alphaops.ops.cube(a), a * a * a)
print("ok")
"""


@pytest.mark.slow
@pytest.mark.e2e
def test_scikit_build_core_wheels(tmp_path: Path) -> None:
    missing = _skbuild_missing()
    if missing:
        pytest.skip(missing)
    import torch

    full_root = to_cmake_project(
        scratch.write_project(tmp_path / "alphaops", "alphaops", "alphans"), "alphaops")
    stable_root = to_cmake_project(
        write_stable_project(tmp_path / "stabops", "stabops", "stabns"), "stabops",
        extra='wheel.py-api = "py3"\n')
    full = skbuild_wheel(full_root, tmp_path / "wheels")
    stable = skbuild_wheel(stable_root, tmp_path / "wheels")
    assert re.search(r"-cp3\d+-cp3\d+-linux_\w+\.whl$", full.name), full.name
    assert re.search(r"-py3-none-linux_\w+\.whl$", stable.name), stable.name
    assert requires_dist(full) == ["torch"]     # scikit-build-core takes [project] as written
    import sysconfig
    build_paths = [Path(torch.__file__).parent, tmp_path, Path(sysconfig.get_paths()["purelib"])]
    assert check_no_build_path(full, tmp_path, build_paths) == []
    assert check_no_build_path(stable, tmp_path, build_paths) == []

    python = scratch.fresh_venv(tmp_path / "venv")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                              "--no-deps", "--no-index", str(full), str(stable)],
                             env=scratch.clean_env(), capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout + install.stderr
    shutil.rmtree(full_root)
    shutil.rmtree(stable_root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    samples = scratch.project_samples()
    for code in (USE_FULL.format(samples=samples), CALL_STABLE.format(package="stabops")):
        run = subprocess.run([str(python), "-c", code], cwd=elsewhere, env=scratch.clean_env(),
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout + run.stderr
        assert run.stdout == "ok\n", run.stdout
