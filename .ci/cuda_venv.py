"""Set up (once) the virtual environment `make test-cuda` uses: the CUDA build of the pinned
torch from the package registry, the other pins of requirements-dev.txt, and nvcc from the
`cuda-toolkit[nvcc,cccl]` wheels when no CUDA toolkit is installed (CUDA_HOME, nvcc on PATH,
/usr/local/cuda). Prints the CUDA_HOME to build with. No GPU is needed.

    python .ci/cuda_venv.py VENV_DIR
"""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def pins() -> dict[str, str]:
    out = {}
    for line in (REPO / "requirements-dev.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[name.strip()] = version.strip()
    return out


def probe(python: Path, code: str) -> str | None:
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def system_cuda_home() -> str | None:
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if candidate and (Path(candidate) / "bin" / "nvcc").is_file():
            return candidate
    sys.path.insert(0, str(REPO))
    from codegen.toolchain import installed_toolkit     # the build's own search

    return installed_toolkit()


def main() -> int:
    venv = Path(sys.argv[1])
    python = venv / "bin" / "python"
    want = pins()
    pip = [str(python), "-m", "pip", "--isolated", "install", "-q"]
    if not python.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    have = probe(python, "import torch; print(torch.__version__, torch.version.cuda)")
    if have is None or not have.startswith(want["torch"] + "+") or have.endswith("None"):
        # --isolated: a pip.conf pointing at CPU wheels must not pick the build.
        subprocess.run(pip + [f"torch=={want['torch']}"], check=True)
    missing = [f"{n}=={v}" for n, v in want.items() if n != "torch" and probe(
        python, f"from importlib.metadata import version; print(version({n!r}))") != v]
    if missing:
        subprocess.run(pip + missing, check=True)
    home = system_cuda_home()
    if home is None:
        cuda = probe(python, "import torch; print(torch.version.cuda)") or ""
        major = cuda.split(".")[0]
        subprocess.run(pip + [f"cuda-toolkit[nvcc,cccl]=={major}.*"], check=True)
        home = probe(python, "import nvidia, os; "
                             f"print(os.path.join(list(nvidia.__path__)[0], 'cu{major}'))")
        if home is None or not (Path(home) / "bin" / "nvcc").is_file():
            print("error: no nvcc: neither a CUDA toolkit nor the cuda-toolkit wheels give one",
                  file=sys.stderr)
            return 1
    print(home)
    return 0


if __name__ == "__main__":
    sys.exit(main())
