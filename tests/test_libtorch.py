"""A C++ program linking the example library and libtorch alone differentiates its ops (C++
autograd, Note [C++ autograd] in codegen/dest/cpp_autograd.py): tests/cpp/libtorch_autograd.cpp,
built with the build's toolchain, checks gradients against finite differences and a double
backward. No Python runs in that process."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "build" / "libexops_ops.so"


@pytest.mark.slow
def test_libtorch_program_differentiates_ops(tmp_path: Path) -> None:
    from torch.utils import cpp_extension

    from codegen import toolchain as tc

    if not LIBRARY.exists():
        pytest.skip("build the example library first (make build)")
    toolchain = tc.make_toolchain(tc.toolchain_key()).text
    var = lambda name: shlex.split(tc.toolchain_var(toolchain, name) or "")  # noqa: E731
    exe = tmp_path / "libtorch_autograd"
    # --no-as-needed: the program references no symbol of the op library, which registers its
    # ops (and their Autograd kernels) from static initializers when loaded.
    # The program finds torch's libraries through its own RUNPATH: the op library carries none
    # (a wheel's library is loaded after `import torch`).
    torch_lib = cpp_extension.library_paths()[0]
    cmd = [*var("cxx"), *var("cflags"), "-Werror", str(ROOT / "tests/cpp/libtorch_autograd.cpp"),
           "-o", str(exe), "-Wl,--no-as-needed", str(LIBRARY), f"-Wl,-rpath,{LIBRARY.parent}",
           f"-Wl,-rpath,{torch_lib}", *var("ldflags")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    run = subprocess.run([str(exe)], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines() == ["scaled_add: ok", "smooth_clamp: ok", "weighted_sum: ok",
                                       "smooth_clamp double backward: ok"]
    # No Python in the process: neither the program nor the op library loads libpython.
    ldd = subprocess.run(["ldd", str(exe)], capture_output=True, text=True)
    assert ldd.returncode == 0 and "libexops_ops.so" in ldd.stdout
    assert "libpython" not in ldd.stdout
