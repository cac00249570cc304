"""The CUDA half of the build.

Fast tests (any torch): the toolchain derived for a CUDA build of torch (torch.version.cuda and
CUDA_HOME stand in for one) on both ABIs, the CUDA architecture list and its errors, and the
loader's check of the CUDA runtime a library needs.

Slow tests (`make test-cuda`, which sets OPGEN_CUDA_PYTHON to a venv with the CUDA build of the
pinned torch, see .ci/cuda_venv.py): the example library built with nvcc on both ABIs, linked and
imported on a machine without a GPU, and every CUDA kernel its op files declare registered for the
CUDA key.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

from codegen import config, loader, toolchain
from tests import scratch

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc"
                                if Path("/usr/local/cuda/bin/nvcc").is_file() else None)
CUDA_PYTHON = os.environ.get("OPGEN_CUDA_PYTHON") or (
    sys.executable if torch.version.cuda is not None else None)


@pytest.fixture
def cuda_torch(monkeypatch, tmp_path):
    """This torch made to look like a CUDA build with a toolkit at a scratch CUDA_HOME."""
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "lib64").mkdir()
    (home / "lib64" / "libcudart.so").write_text("")
    (home / "bin" / "nvcc").write_text("")
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime.h").write_text("")     # a toolkit (codegen.toolchain)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(home))
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_80", "sm_90", "sm_120"])
    for var in ("TORCH_CUDA_ARCH_LIST", "CC", "OPGEN_CFLAGS", "OPGEN_NVCC_FLAGS"):
        monkeypatch.delenv(var, raising=False)
    return home


def test_toolchain_for_cuda_torch_covers_both_abis(cuda_torch, monkeypatch):
    monkeypatch.setenv("CC", "gcc-12")
    monkeypatch.setenv("OPGEN_CFLAGS", "-DFROM_CFLAGS -Wshadow")
    monkeypatch.setenv("OPGEN_NVCC_FLAGS", "-lineinfo")
    t = toolchain.make_toolchain("k")
    var = lambda name: toolchain.toolchain_var(t.text, name)  # noqa: E731
    assert "-DOPGEN_WITH_CUDA" in var("cflags")
    # The stable registration's CUDA block is compiled in, and its .cu files get everything.
    assert "-DOPGEN_WITH_CUDA" in var("stable_cflags")
    stable_cu = var("stable_cuda_cflags")
    for flag in ("-DOPGEN_WITH_CUDA", "-DUSE_CUDA", "-Xcompiler -fvisibility=hidden",
                 "-DFROM_CFLAGS", "-Xcompiler -Wshadow", "-lineinfo", "-ccbin gcc-12"):
        assert flag in stable_cu, flag
        assert flag in var("cuda_cflags") or flag in ("-DUSE_CUDA",
                                                      "-Xcompiler -fvisibility=hidden"), flag
    assert f"-L{cuda_torch}/lib64 -lcudart -ltorch_cuda" == var("stable_cuda_ldflags")
    # torch's own architectures, with no TORCH_CUDA_ARCH_LIST and no GPU.
    assert "# CUDA architectures: the architectures torch" in t.text
    for sm in ("80", "90", "120"):
        assert f"-gencode=arch=compute_{sm},code=sm_{sm}" in stable_cu
    assert "sm_75" not in stable_cu


def test_arch_list_from_the_environment_wins(cuda_torch, monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.6+PTX")
    t = toolchain.make_toolchain("k")
    flags = toolchain.toolchain_var(t.text, "cuda_cflags")
    assert "-gencode=arch=compute_86,code=sm_86" in flags
    assert "-gencode=arch=compute_86,code=compute_86" in flags
    assert "compute_90" not in flags


def test_invalid_arch_list_is_an_error(cuda_torch, monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.5")
    with pytest.raises(toolchain.ToolchainError) as e:
        toolchain.make_toolchain("k")
    assert str(e.value) == (
        "error: invalid CUDA architecture list from TORCH_CUDA_ARCH_LIST=9.5: Unknown CUDA arch "
        "(9.5) or GPU not supported\nhint: write architectures as torch.utils.cpp_extension "
        "takes them: versions such as \"8.0;8.6;9.0+PTX\" or names such as \"Ampere;Hopper\"")


def test_native_without_a_visible_gpu_is_an_error(cuda_torch, tmp_path, monkeypatch):
    """`native` reads the building machine's GPUs; with none visible torch's own helper fails
    with an IndexError. Both sources of the list get an error saying so instead."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "native")
    with pytest.raises(IndexError):
        cpp_extension._get_cuda_arch_flags()       # what opgen would have passed on
    with pytest.raises(toolchain.ToolchainError) as e:
        toolchain.make_toolchain("k")
    assert str(e.value) == (
        "error: invalid CUDA architecture list from TORCH_CUDA_ARCH_LIST=native: 'native' "
        "compiles for the GPUs of the building machine, and it has none visible\n"
        "hint: name the architectures to build for, e.g. \"8.0;9.0+PTX\"")
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.opgen]\npackage = "pkg"\ncuda-arch = "native"\n')
    monkeypatch.chdir(root)
    from codegen.diagnostics import Diagnostics

    project = config.load(root / "pyproject.toml", Diagnostics())
    with config.use(project), pytest.raises(toolchain.ToolchainError) as e:
        toolchain.make_toolchain("k")
    assert str(e.value).splitlines()[:4] == [
        "pyproject.toml:3:13: error: invalid CUDA architecture list 'native': 'native' compiles "
        "for the GPUs of the building machine, and it has none visible",
        '    cuda-arch = "native"',
        "                ^~~~~~~~",
        'hint: name the architectures to build for, e.g. "8.0;9.0+PTX"']


def test_cuda_arch_forms_are_torchs(monkeypatch):
    """`cuda-arch`'s form check (codegen.config, which needs no CUDA) takes every entry torch's
    TORCH_CUDA_ARCH_LIST takes, and refuses only entries torch refuses; which versions are
    supported stays torch's to say at build time (9.5 passes the form check)."""
    entries = [*config.CUDA_ARCH_NAMES, "8.0", "8.6", "9.0+PTX", "9.0a", "12.1a+PTX", "9.5",
               "banana", "hopper", "Hopper+PTX", "sm_90", "8", "8.0.1", "9.0+ptx", "+PTX", "9.0b"]
    refused = []
    for entry in entries:
        monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", entry)
        try:
            cpp_extension._get_cuda_arch_flags()
            torch_takes = True
        except ValueError:
            torch_takes = False
        takes = config.cuda_arch_problem(entry, alone=True) is None
        assert takes or not torch_takes, entry
        assert torch_takes or entry not in config.CUDA_ARCH_NAMES, entry
        if not takes:
            refused.append(entry)
    assert refused == ["banana", "hopper", "Hopper+PTX", "sm_90", "8", "8.0.1", "9.0+ptx",
                       "+PTX", "9.0b"]


def test_project_arch_list_and_its_located_error(cuda_torch, tmp_path, monkeypatch):
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pyproject.toml").write_text(textwrap.dedent("""\
        [tool.opgen]
        package = "pkg"
        cuda-arch = "9.0;9.5"
    """))
    monkeypatch.chdir(root)
    from codegen.diagnostics import Diagnostics

    project = config.load(root / "pyproject.toml", Diagnostics())
    assert project.cuda_arch == "9.0;9.5"
    with config.use(project), pytest.raises(toolchain.ToolchainError) as e:
        toolchain.make_toolchain("k")
    assert str(e.value).splitlines()[:3] == [
        "pyproject.toml:3:13: error: invalid CUDA architecture list '9.0;9.5': Unknown CUDA "
        "arch (9.5) or GPU not supported",
        '    cuda-arch = "9.0;9.5"',
        "                ^~~~~~~~~",
    ]
    (root / "pyproject.toml").write_text(
        '[tool.opgen]\npackage = "pkg"\ncuda-arch = ["8.0", "9.0+PTX"]\n')
    project = config.load(root / "pyproject.toml", Diagnostics())
    with config.use(project):
        t = toolchain.make_toolchain("k")
    assert "# CUDA architectures: [tool.opgen] cuda-arch" in t.text
    flags = toolchain.toolchain_var(t.text, "cuda_cflags")
    assert "-gencode=arch=compute_90,code=compute_90" in flags


def test_cuda_torch_without_nvcc_says_so(cuda_torch, monkeypatch, tmp_path):
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", None)
    t = toolchain.make_toolchain("k")
    assert not t.with_cuda
    assert toolchain.toolchain_var(t.text, "cuda_skip") == (
        "torch 2.13.0+cpu has CUDA 13.0 but no CUDA toolkit (nvcc) was found"
        if torch.__version__ == "2.13.0+cpu" else toolchain.toolchain_var(t.text, "cuda_skip"))
    assert "-DOPGEN_WITH_CUDA" not in toolchain.toolchain_var(t.text, "stable_cflags")


def _library_needing(tmp_path: Path, soname: str) -> Path:
    """A shared library whose DT_NEEDED names `soname` (linked against a stub of that name)."""
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    (tmp_path / "stub.c").write_text("int cudaStub(void) { return 0; }\n")
    (tmp_path / "lib.c").write_text("int cudaStub(void);\nint f(void) { return cudaStub(); }\n")
    subprocess.run(["cc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o",
                    str(stub_dir / soname), str(tmp_path / "stub.c")], check=True)
    out = tmp_path / "libx_ops.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(tmp_path / "lib.c"),
                    str(stub_dir / soname)], check=True)
    return out


def test_loader_names_the_missing_cuda_runtime(tmp_path):
    lib = _library_needing(tmp_path, "libcudart.so.99")
    (tmp_path / "pyproject.toml").write_text("")
    assert "libcudart.so.99" in loader.needed_libraries(lib)
    at = loader.Where(tmp_path, tmp_path, "gen", "opgen build", "opgen generate")
    with pytest.raises(loader.LibraryError) as e:
        loader.check_cuda_runtime(at, lib, torch)
    message = str(e.value)
    assert message.startswith("libx_ops.so has CUDA kernels and needs the CUDA runtime "
                              "libcudart.so.99, which cannot be loaded here (")
    assert message.endswith(f"torch {torch.__version__} "
                            + (f"has CUDA {torch.version.cuda}" if torch.version.cuda
                               else "has no CUDA")
                            + "; a library with CUDA kernels runs with the CUDA it was built "
                            f"for: run `opgen build` in {tmp_path}")


def test_loader_accepts_a_library_without_cuda(tmp_path):
    lib = _library_needing(tmp_path, "libnotcuda.so.1")
    at = loader.Where(tmp_path, tmp_path, "gen", "opgen build", "opgen generate")
    loader.check_cuda_runtime(at, lib, torch)      # not a CUDA library: nothing to check


# --------------------------------------------------------------------------------------------------
# With the CUDA build of torch: build, link, import, registered kernels

REGISTERED = """
import json, sys
import torch
import runtime
from codegen.load import load_library
from codegen.loader import needed_libraries

def has(name, key):
    return torch._C._dispatch_has_kernel_for_dispatch_key(name, key)

lib = load_library(["schemas"])
declared, missing = [], []
for op in lib.ops:
    name = f"{op.namespace}::{op.name.name}" + (f".{op.name.overload}" if op.name.overload else "")
    for key, _ in op.dispatch:
        if key.value == "CUDA":
            declared.append(name)
            if not has(name, "CUDA"):
                missing.append(name)
print(json.dumps({
    "gpu": torch.cuda.is_available(), "declared": declared, "missing": missing,
    # A control: an op with no CUDA kernel is reported as such.
    "control": has("exops::scaled_add", "CUDA"),
    "stable_needs": list(needed_libraries("build/libexstable_ops.so")),
    "full_needs": list(needed_libraries("build/libexops_ops.so")),
}))
"""


ON_GPU = """
import torch
import runtime
from codegen import testing

cases = testing.load_cases(["schemas"])
ran = []
for case in cases:
    for check in ("devices", "cudagraph"):
        if testing.applies(case, check):
            testing.check(case, check)
            ran.append((case.id, check))
assert any(c == "cudagraph" for _, c in ran), ran
# A device mismatch names the op and the argument (the generated device check).
try:
    torch.ops.exops.smooth_clamp_backward(torch.ones(2, device="cuda"), torch.ones(2), 1.0)
except RuntimeError as e:
    assert "argument self in method exops::smooth_clamp_backward" in str(e), e
else:
    raise AssertionError("no device check")
print("ok")
"""


@pytest.mark.slow
@pytest.mark.skipif(CUDA_PYTHON is None, reason="no CUDA build of torch (make test-cuda)")
def test_example_cuda_kernels_build_link_and_register(tmp_path):
    import json

    scratch.copy_repo(tmp_path, "-co", "--exclude-standard")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    env.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")     # one architecture keeps nvcc's time down
    proc = subprocess.run([CUDA_PYTHON, "-m", "codegen.build"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for source in ("smooth_clamp.cu", "soft_shrink.cu", "weighted_mse.cu"):
        assert f"NVCC runtime/csrc/exops/{source}" in proc.stdout
    assert "NVCC runtime/csrc/exstable/stable_ops.cu" in proc.stdout
    run = subprocess.run([CUDA_PYTHON, "-c", REGISTERED], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    got = json.loads(run.stdout.splitlines()[-1])
    assert got["missing"] == []
    assert len(got["declared"]) == 10 and "exstable::scale.out" in got["declared"]
    assert got["control"] is False
    # The stable library states the CUDA runtime it needs; the loader checks it before dlopen.
    assert any(n.startswith("libcudart.so.") for n in got["stable_needs"])
    assert "libtorch_cuda.so" in got["stable_needs"]
    assert "libtorch_python.so" not in got["stable_needs"]
    if got["gpu"]:
        # With a GPU: each example CUDA kernel captured on a side stream in a CUDA graph (a
        # launch on any stream but the current one breaks the capture), replayed, == eager; and
        # every sample on CUDA gives the CPU's results.
        run = subprocess.run([CUDA_PYTHON, "-c", ON_GPU], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=1800)
        assert run.returncode == 0, run.stdout + run.stderr
        assert run.stdout.splitlines()[-1] == "ok", run.stdout
    # Hidden visibility on stable .cu objects: only the stamp and registration are exported.
    # No torch C++ symbol with CUDA kernels either: the C shim and the CUDA runtime's C API.
    undefined = subprocess.run(["nm", "-D", "-C", "--undefined-only", "build/libexstable_ops.so"],
                               cwd=tmp_path, capture_output=True, text=True).stdout
    assert not [n for n in undefined.splitlines()
                if any(p in n for p in ("c10::", "at::", "torch::", "caffe2::"))], undefined
    assert "aoti_torch_get_current_cuda_stream" in undefined
    assert "__cudaLaunchKernel@libcudart.so." in undefined
    # (nvcc's host code unoptimized exported ~120 std:: weak symbols; std's typeinfo remains.)
    symbols = subprocess.run(["nm", "-D", "-C", "--defined-only", "build/libexstable_ops.so"],
                             cwd=tmp_path, capture_output=True, text=True).stdout.splitlines()
    own = [s for s in symbols if "exstable" in s or "opgen" in s]
    assert [s.split()[-1] for s in own] == ["opgen_stamp_exstable"], own
    assert len(symbols) < 20, symbols


# A temporary project with one namespace per ABI, each with a CUDA kernel, built as a wheel with
# the CUDA torch and installed into an environment without opgen.
WHEEL_PROJECT = {
    "pyproject.toml": """\
[build-system]
requires = ["setuptools>=70", "torch-opgen", "torch"]
build-backend = "setuptools.build_meta"

[project]
name = "gpuops"
version = "0.1.0"
dependencies = ["torch"]

[tool.opgen]
package = "gpuops"
schemas = ["ops"]
kernels = ["csrc"]
""",
    "setup.py": "from codegen.setuptools import setup; setup()\n",
    "gpuops/__init__.py": "from gpuops._generated import ops  # opgen: loads the op libraries\n",
    "ops/gfull.yaml": """\
namespace: gfull
ops:
  - func: twice(Tensor x) -> Tensor
    dispatch: {CPU: twice_cpu, CUDA: twice_cuda}
    fake: like(x)
""",
    "ops/gstable.yaml": """\
namespace: gstable
abi: stable
min_torch: "2.10"
ops:
  - func: copy(Tensor x) -> Tensor
    dispatch: {CPU: copy_cpu, CUDA: copy_cuda}
    fake: like(x)
""",
    "csrc/gfull/twice.cpp": """\
#include <gfull/gfull.h>

#include <ATen/ops/mul.h>

namespace gfull {
at::Tensor twice_cpu(const at::Tensor& x) { return at::mul(x, 2); }
}  // namespace gfull
""",
    "csrc/gfull/twice.cu": """\
#include <gfull/gfull.h>

#include <ATen/ops/mul.h>

namespace gfull {
at::Tensor twice_cuda(const at::Tensor& x) { return at::mul(x, 2); }
}  // namespace gfull
""",
    "csrc/gstable/copy.cpp": """\
#include <gstable/gstable.h>

#include <torch/csrc/stable/ops.h>

namespace gstable {
torch::stable::Tensor copy_cpu(const torch::stable::Tensor& x) {
  return torch::stable::clone(x);
}
}  // namespace gstable
""",
    "csrc/gstable/copy.cu": """\
#include <gstable/gstable.h>

#include <torch/csrc/stable/ops.h>

namespace gstable {
torch::stable::Tensor copy_cuda(const torch::stable::Tensor& x) {
  return torch::stable::clone(x);
}
}  // namespace gstable
""",
}

USE_WHEEL = """
import torch, gpuops
has = torch._C._dispatch_has_kernel_for_dispatch_key
print(has("gfull::twice", "CUDA"), has("gstable::copy", "CUDA"), has("gfull::twice", "CPU"),
      gpuops.ops.twice(torch.ones(2)).tolist(), torch.ops.gstable.copy(torch.ones(1)).tolist())
"""


@pytest.mark.slow
@pytest.mark.skipif(CUDA_PYTHON is None, reason="no CUDA build of torch (make test-cuda)")
def test_wheel_of_a_cuda_project_registers_its_cuda_kernels(tmp_path):
    import zipfile

    root = tmp_path / "gpuops"
    for rel, text in WHEEL_PROJECT.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    env = dict(os.environ, PYTHONPATH=str(scratch.REPO))
    env.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    proc = subprocess.run([CUDA_PYTHON, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                           "--no-index", "-w", str(tmp_path / "wheels"), str(root)], env=env,
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    wheel, = (tmp_path / "wheels").glob("gpuops-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpuops/libgfull_ops.so" in names and "gpuops/libgstable_ops.so" in names
    # A fresh venv that sees the CUDA torch's site-packages (a .pth file: CUDA_PYTHON may itself
    # be a venv, whose --system-site-packages would be the base interpreter's) and no opgen.
    venv = tmp_path / "venv"
    subprocess.run([CUDA_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=300)
    site = subprocess.run([CUDA_PYTHON, "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True).stdout
    own = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print("
                          "sysconfig.get_paths()['purelib'])"], capture_output=True, text=True,
                         check=True).stdout.strip()
    Path(own, "cuda_torch.pth").write_text(site)
    clean = scratch.clean_env()
    install = subprocess.run([CUDA_PYTHON, "-m", "pip", "--python", str(venv / "bin" / "python"),
                              "install", "--no-deps", "--no-index", str(wheel)], env=clean,
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout + install.stderr
    shutil.rmtree(root)
    run = subprocess.run([str(venv / "bin" / "python"), "-c", USE_WHEEL], cwd=tmp_path, env=clean,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1] == "True True True [2.0, 2.0] [1.0]"
