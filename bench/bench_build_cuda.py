"""Build time of the example library with its CUDA kernels, against the CPU-only build of the same
example in the same run, in scratch copies of the repository (its own build/ is left alone):

  1. cold build (codegen + ninja from nothing, no ccache): CUDA build / CPU-only build;
  2. one kernel edited: a CUDA kernel source (runtime/csrc/exops/soft_shrink.cu) in the CUDA
     build / a C++ kernel source (runtime/csrc/exops/pointwise.cpp) in the CPU-only build.

The CUDA build needs an interpreter with the CUDA build of torch (`make test-cuda` sets one up in
CUDA_VENV, default ~/.cache/opgen/venv-cuda): `--cuda-python` or OPGEN_CUDA_PYTHON; no GPU is
needed. The CPU-only build uses this interpreter's torch (the CPU wheel pinned in
requirements-dev.txt). nvcc compiles for TORCH_CUDA_ARCH_LIST (default here: "9.0", one
architecture). Run: `python bench/bench_build_cuda.py [--cuda-python PATH] [-j N]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def copy_repo(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    for rel in files:
        if (REPO / rel).is_file() and not rel.startswith("build/"):
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dst / rel)


def timed_build(python: str, root: Path, jobs: int) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=str(root), OPGEN_NO_CCACHE="1")
    env.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    start = time.perf_counter()
    proc = subprocess.run([python, "-m", "codegen.build", "-j", str(jobs)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=7200)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"build with {python} failed:\n{proc.stdout}{proc.stderr}")
    return took, proc.stdout


def edit(path: Path) -> None:
    path.write_text(path.read_text() + "\n// edited by bench_build_cuda\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cuda-python", default=os.environ.get("OPGEN_CUDA_PYTHON"))
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    if not args.cuda_python:
        sys.exit("error: no interpreter with the CUDA build of torch: pass --cuda-python or set "
                 "OPGEN_CUDA_PYTHON (make test-cuda sets up ~/.cache/opgen/venv-cuda)")
    with tempfile.TemporaryDirectory() as tmp:
        cpu_root, cuda_root = Path(tmp, "cpu"), Path(tmp, "cuda")
        copy_repo(cpu_root)
        copy_repo(cuda_root)
        cpu_cold, out = timed_build(sys.executable, cpu_root, args.jobs)
        assert "skipping CUDA kernels" in out, out
        cuda_cold, out = timed_build(args.cuda_python, cuda_root, args.jobs)
        nvcc = out.count("NVCC ")
        edit(cpu_root / "runtime/csrc/exops/pointwise.cpp")
        cpu_edit, out = timed_build(sys.executable, cpu_root, args.jobs)
        edit(cuda_root / "runtime/csrc/exops/soft_shrink.cu")
        cuda_edit, out = timed_build(args.cuda_python, cuda_root, args.jobs)
        assert "NVCC runtime/csrc/exops/soft_shrink.cu" in out, out
    print(f"example library, -j{args.jobs}, TORCH_CUDA_ARCH_LIST="
          f"{os.environ.get('TORCH_CUDA_ARCH_LIST', '9.0')}, {nvcc} nvcc units")
    print(f"{'':28}{'CUDA build':>12}{'CPU-only':>12}{'ratio':>8}")
    for what, cuda, cpu in (("cold build", cuda_cold, cpu_cold),
                            ("one kernel edited", cuda_edit, cpu_edit)):
        print(f"{what:28}{cuda:>11.1f}s{cpu:>11.1f}s{cuda / cpu:>7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
