"""An external opgen project (tests.scratch.write_project: three ops, kernels in a nested tree, a
Python kernel): cold build (`opgen generate` + `opgen build`), no-op rebuild (target: < 1 s),
wheel size (`pip wheel --no-build-isolation`), and the installed package's `import` time against
`import torch` alone, in a venv without opgen.

Run: `python bench/bench_project.py` (compiles one small library; ccache off for a cold figure).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import scratch  # noqa: E402


def timed(cmd: list[str], **kw) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, **kw)
    return time.perf_counter() - t


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        root = scratch.write_project(tmp_path / "benchops", "benchops", "benchns")
        env = scratch.env() | {"OPGEN_NO_CCACHE": "1"}
        opgen = [sys.executable, "-m", "codegen", "--project", str(root)]
        cold = timed(opgen + ["generate"], env=env) + timed(opgen + ["build"], env=env)
        noop = [timed(opgen + ["build"], env=env) for _ in range(5)]
        wheels = tmp_path / "wheels"
        t = timed([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                   "--no-index", "-w", str(wheels), str(root)], env=env)
        wheel = next(wheels.glob("*.whl"))
        wheel_name, wheel_size = wheel.name, wheel.stat().st_size
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                        str(venv)], check=True)
        clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OPGEN_ROOT")}
        subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                        "install", "--no-deps", "--no-index", str(wheel)], check=True,
                       capture_output=True, env=clean)
        python = str(venv / "bin" / "python")
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()

        def imports(stmt: str) -> float:
            runs = [timed([python, "-c", stmt], cwd=elsewhere, env=clean) for _ in range(5)]
            return statistics.median(runs)

        torch_alone = imports("import torch")
        package = imports("import benchops")
        # The package's own share, without the noise of two interpreter start-ups.
        own = statistics.median(float(subprocess.run(
            [python, "-c", "import time, torch; t = time.perf_counter(); import benchops; "
             "print(time.perf_counter() - t)"], cwd=elsewhere, env=clean, check=True,
            capture_output=True, text=True).stdout) for _ in range(5))
    print("external project (3 ops, 2 C++ kernel sources, 1 Python kernel), seconds, wall clock")
    print(f"  cold build (generate + build, no ccache)   {cold:8.2f}")
    print(f"  no-op rebuild (opgen build), median of 5    {statistics.median(noop):8.3f}"
          f"   (max {max(noop):.3f}; target < 1 s)")
    print(f"  pip wheel --no-build-isolation (built)      {t:8.2f}")
    print(f"  wheel size                                  {wheel_size / 1024:8.1f} KiB"
          f"   ({wheel_name})")
    print(f"  python -c 'import torch', median of 5       {torch_alone:8.3f}")
    print(f"  python -c 'import benchops', median of 5    {package:8.3f}"
          f"   (+{package - torch_alone:.3f} over torch alone)")
    print(f"  import benchops after torch, in-process     {own:8.3f}   (median of 5)")


if __name__ == "__main__":
    main()
