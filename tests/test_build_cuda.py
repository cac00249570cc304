"""The CUDA half of the build, where this machine can check it without a GPU: with nvcc present,
the toolchain is derived as for a CUDA build of torch (torch.version.cuda and CUDA_HOME stand in
for one), and ninja compiles the example's CUDA kernels (runtime/csrc/exops/*.cu) and the
registration shard with its CUDA block. Linking needs torch's CUDA libraries, so it stops at the
objects. Slow (nvcc on torch headers): `make test-slow`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from codegen import build
from tests import scratch

NVCC = shutil.which("nvcc")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(NVCC is None, reason="no nvcc on PATH")]


def test_cuda_objects_compile(tmp_path: Path, monkeypatch) -> None:
    import torch
    from torch.utils import cpp_extension

    cuda_home = Path(NVCC).resolve().parent.parent
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(cuda_home))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    # The CPU wheel ships c10/cuda headers without their configured macros file.
    monkeypatch.setenv("OPGEN_NVCC_FLAGS", "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE")
    toolchain = build.make_toolchain("cuda-test")
    assert toolchain.with_cuda
    assert "-DOPGEN_WITH_CUDA" in build.toolchain_var(toolchain.text, "cflags")
    assert "NVCC $in" in toolchain.text and "sm_90" in toolchain.text

    shutil.copytree(scratch.REPO / "schemas", tmp_path / "schemas")
    shutil.copytree(scratch.REPO / "runtime" / "csrc", tmp_path / "runtime" / "csrc")
    gen = scratch.generate(tmp_path)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "toolchain.ninja").write_text(toolchain.text)
    targets = ["build/obj/exops/smooth_clamp.cu.o", "build/obj/exops/gen/register_core.o"]
    proc = subprocess.run([build.ninja_binary(), "-f", "generated/build.ninja", *targets],
                          cwd=tmp_path, env=scratch.env(), capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "NVCC runtime/csrc/exops/smooth_clamp.cu" in proc.stdout
    symbols = subprocess.run(["nm", "-C", str(tmp_path / targets[0])], capture_output=True,
                             text=True).stdout
    assert "T exops::smooth_clamp_cuda(at::Tensor const&, double)" in symbols
    assert "T exops::smooth_clamp_backward_cuda(at::Tensor const&, at::Tensor const&, double)" \
        in symbols
    registration = subprocess.run(["nm", "-C", str(tmp_path / targets[1])], capture_output=True,
                                  text=True).stdout
    assert "U exops::smooth_clamp_cuda(at::Tensor const&, double)" in registration
