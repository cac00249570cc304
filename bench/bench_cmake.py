"""The CMake route (docs/CMAKE.md) next to `opgen build`, for one project (tests.scratch's three-op
library): cold build (generate + configure + compile + link for CMake; generate + build for
opgen), no-op rebuild, and rebuild after one op file edit (the doc string of one op: schemas
unchanged, so nothing but regeneration should run), as ratios CMake / opgen, in one run.

Run: `python bench/bench_cmake.py` (needs cmake 3.19+ on PATH and ninja; ccache is off for cold
figures: OPGEN_NO_CCACHE for opgen, none configured for CMake).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import scratch  # noqa: E402

CMAKELISTS = """\
cmake_minimum_required(VERSION 3.19)
project(benchops LANGUAGES CXX)
include(${CMAKE_CURRENT_SOURCE_DIR}/benchops/_generated/opgen.cmake)
"""


def timed(cmd: list[str], **kw) -> float:
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return time.perf_counter() - t


def project(path: Path, cmake: bool) -> Path:
    root = scratch.write_project(path, "benchops", "benchns")
    if cmake:
        p = root / "pyproject.toml"
        p.write_text(p.read_text().replace('kernels = ["csrc"]', 'kernels = ["csrc"]\ncmake = true'))
        (root / "CMakeLists.txt").write_text(CMAKELISTS)
    return root


def edit(root: Path) -> None:
    ops = root / "ops" / "benchns.yaml"
    ops.write_text(ops.read_text().replace("    fake: like(x)\n", "    fake: like(x)\n    doc: edited.\n", 1))


def main() -> None:
    cmake_exe = shutil.which("cmake")
    if cmake_exe is None:
        raise SystemExit("cmake is not on PATH")
    version = subprocess.run([cmake_exe, "--version"], capture_output=True, text=True).stdout
    env = scratch.env() | {"OPGEN_NO_CCACHE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        o = project(tmp_path / "o" / "benchops", cmake=False)
        c = project(tmp_path / "c" / "benchops", cmake=True)
        opgen = [sys.executable, "-m", "codegen", "--project", str(o)]
        b = tmp_path / "cmake-build"
        configure = [cmake_exe, "-S", str(c), "-B", str(b), "-G", "Ninja",
                     "-DCMAKE_BUILD_TYPE=Release", f"-DPython_EXECUTABLE={sys.executable}"]
        build = [cmake_exe, "--build", str(b)]
        res: dict[str, tuple[float, float]] = {}
        # Generate once for CMake: opgen.cmake must exist before the first configure.
        gen_c = timed([sys.executable, "-m", "codegen", "--project", str(c), "generate"], env=env)
        cold_c = gen_c + timed(configure, env=env) + timed(build, env=env)
        cold_o = timed(opgen + ["generate"], env=env) + timed(opgen + ["build"], env=env)
        res["cold build"] = (cold_c, cold_o)
        noop_c = min(timed(build, env=env) for _ in range(3))
        noop_o = min(timed(opgen + ["build"], env=env) for _ in range(3))
        res["no-op rebuild"] = (noop_c, noop_o)
        edit(c)
        edit(o)
        res["rebuild after an op file edit"] = (timed(build, env=env),
                                                 timed(opgen + ["build"], env=env))
    print(f"CMake route vs `opgen build`, one three-op project ({version.splitlines()[0]})")
    print(f"{'':32} {'CMake':>9} {'opgen':>9} {'CMake/opgen':>12}")
    for k, (a, b_) in res.items():
        print(f"{k:32} {a:8.2f}s {b_:8.2f}s {a / b_:11.2f}x")


if __name__ == "__main__":
    main()
