"""Scratch op libraries for tests and benchmarks: a throw-away repository root (op files, kernel
sources) that is generated and built exactly as the real one is, by `python -m codegen generate`
and `python -m codegen.build`, in subprocesses whose working directory is the scratch root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def env(root: Path | None = None) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    if root is not None:
        e["OPGEN_ROOT"] = str(root)
    return e


def clean_env() -> dict[str, str]:
    """The environment without opgen: what an installed package sees."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OPGEN_ROOT")}


def fresh_venv(path: Path, python: str = sys.executable) -> Path:
    """A venv that sees the system's torch (not its opgen: PYTHONPATH is dropped when it runs).
    Made from the venv these tests run in (`.ci/run`'s), its system site is the base
    interpreter's, which need not have torch: it then also sees this venv's packages, where
    opgen is not installed."""
    subprocess.run([python, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
                   check=True, timeout=300)
    exe = path / "bin" / "python"
    if python == sys.executable and sys.prefix != sys.base_prefix:
        purelib = subprocess.run([exe, "-c", "import sysconfig; print(sysconfig.get_paths()"
                                  "['purelib'])"], capture_output=True, text=True, check=True,
                                 timeout=60).stdout.strip()
        Path(purelib, "_parent_venv.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return exe


def copy_repo(dst: Path, *ls_files: str) -> None:
    """Copy the repository's files that `git ls-files <ls_files>` names to dst."""
    names = subprocess.run(["git", "ls-files", "-z", *ls_files], cwd=REPO, capture_output=True,
                           check=True, timeout=60).stdout.decode().split("\0")
    for rel in filter(None, names):
        if (REPO / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dst / rel)


def make_root(root: Path, schemas: dict[str, str], kernels: dict[str, str]) -> Path:
    """Write `schemas/<name>` and `runtime/csrc/<ns>/<file>` (keys `<ns>/<file>`) under root."""
    for name, text in schemas.items():
        p = root / "schemas" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    for rel, text in kernels.items():
        p = root / "runtime" / "csrc" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


def run(root: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=root, env=env(), capture_output=True,
                          text=True, timeout=timeout)


def generate(root: Path) -> subprocess.CompletedProcess:
    return run(root, "-m", "codegen", "generate", "schemas")


def build(root: Path, *extra: str) -> subprocess.CompletedProcess:
    return run(root, "-m", "codegen.build", *extra)


def python(root: Path, code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter where `import runtime` loads root's libraries."""
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env(root),
                          capture_output=True, text=True, timeout=timeout)


_example_built: subprocess.CompletedProcess | None = None


def build_example() -> subprocess.CompletedProcess:
    """Build the repository's own op libraries (`python -m codegen.build`), once per process;
    ninja makes this a no-op when build/ is current."""
    global _example_built
    if _example_built is None:
        _example_built = subprocess.run([sys.executable, "-m", "codegen.build"], cwd=REPO,
                                        env=env(), capture_output=True, text=True, timeout=1800)
    return _example_built


@contextlib.contextmanager
def in_repo():
    """Run with the repository as the working directory (op files name repo-relative paths)."""
    prev = Path.cwd()
    os.chdir(REPO)
    try:
        yield
    finally:
        os.chdir(prev)


@contextlib.contextmanager
def loaded(testing, paths: list[str]):
    """The Python library of op files (`testing.load_python_library`, from the repository root,
    as op files name repo-relative paths), closed when the block ends."""
    with in_repo():
        lib = testing.load_python_library(paths)
    try:
        yield lib
    finally:
        lib.close()


def case_ids(op_file: str) -> list[str]:
    """`<op>[<sample index>]` for every sample of `op_file`, read without importing runtime."""
    from codegen.load import load_library

    with in_repo():
        lib = load_library([op_file])
    return [f"{op.name}[{i}]" for op in lib.ops for i, _ in enumerate(op.samples)]


def python_library(request, testing, op_file: str):
    """`op_file` loaded in-process (runtime.testing.load_python_library), closed after the tests."""
    with in_repo():
        lib = testing.load_python_library([op_file])
    request.addfinalizer(lib.close)
    return lib


# --------------------------------------------------------------------------------------------------
# External projects: an op library outside this repository, as a user of opgen writes one


PROJECT_OPS = """\
# The op library of {package}: two C++ ops (kernels under csrc/, one in a subdirectory) and a
# Python one.
namespace: {ns}
ops:
  - func: add_scaled(Tensor a, Tensor b, float alpha=1.0) -> Tensor
    dispatch: {{CPU: add_scaled_cpu}}
    fake: broadcast(a, b)
  - func: twice(Tensor x) -> Tensor
    dispatch: {{CPU: twice_cpu}}
    fake: like(x)
  - func: cube(Tensor x) -> Tensor
    dispatch: {{CompositeExplicitAutograd: '{package}.kernels:cube'}}
    fake: like(x)
"""

PROJECT_FILES = {
    "pyproject.toml": """\
[build-system]
requires = ["setuptools>=70", "torch-opgen", "torch"]
build-backend = "setuptools.build_meta"

[project]
name = "{package}"
version = "0.1.0"
dependencies = ["torch"]

[tool.opgen]
package = "{package}"
schemas = ["ops"]
kernels = ["csrc"]
""",
    "setup.py": "from codegen.setuptools import setup; setup()\n",
    "ops/{ns}.yaml": PROJECT_OPS,
    "csrc/cpu/add.cpp": """\
#include <{ns}/{ns}.h>

#include <ATen/ops/add.h>

namespace {ns} {{

at::Tensor add_scaled_cpu(const at::Tensor& a, const at::Tensor& b, double alpha) {{
  return at::add(a, b, alpha);
}}

}}  // namespace {ns}
""",
    "csrc/cpu/more/twice.cc": """\
#include <{ns}/{ns}.h>

#include <ATen/ops/mul.h>

namespace {ns} {{

at::Tensor twice_cpu(const at::Tensor& x) {{
  return at::mul(x, 2);
}}

}}  // namespace {ns}
""",
    "{package}/__init__.py": "from {package}._generated import ops  # opgen: loads the op libraries\n",
    "{package}/kernels.py": "def cube(x):\n    return x * x * x\n",
}

# Each op's sample arguments, for opcheck.
PROJECT_SAMPLES = {
    "add_scaled": "(torch.randn(3, 4), torch.randn(4), 2.0)",
    "twice": "(torch.randn(2, 3),)",
    "cube": "(torch.randn(5),)",
}


def project_samples() -> str:
    """PROJECT_SAMPLES as a dict literal, for a script run in another interpreter."""
    return "{" + ", ".join(f"{k!r}: {v}" for k, v in PROJECT_SAMPLES.items()) + "}"


def write_project(root: Path, package: str, ns: str) -> Path:
    """An external opgen project at root: its own package and namespace, kernels in a nested
    tree, a Python kernel, a one-line setup.py."""
    for rel, text in PROJECT_FILES.items():
        p = root / rel.format(package=package, ns=ns)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text.format(package=package, ns=ns), encoding="utf-8")
    return root


def write_dotted_project(root: Path, package: str, ns: str) -> Path:
    """write_project with a dotted package (`acme.<package>`) in a src/ layout whose parent
    `src/acme/` is a namespace directory (no __init__.py), as PEP 420 organisations ship."""
    write_project(root, package, ns)
    dotted = f"acme.{package}"
    (root / "src" / "acme").mkdir(parents=True)
    shutil.move(root / package, root / "src" / "acme" / package)
    (root / "src" / "acme" / package / "__init__.py").write_text(
        f"from {dotted}._generated import ops  # opgen: loads the op libraries\n",
        encoding="utf-8")
    for rel in ("pyproject.toml", f"ops/{ns}.yaml"):
        p = root / rel
        p.write_text(p.read_text(encoding="utf-8").replace(
            f'package = "{package}"', f'package = "{dotted}"').replace(
            f"'{package}.kernels:", f"'{dotted}.kernels:"), encoding="utf-8")
    return root


def pinned_torch() -> str:
    """The torch release of requirements-dev.txt, which opgen's records of torch (the JSON
    files under codegen/, its tables of dtypes and enumerators) are taken from."""
    for line in (REPO / "requirements-dev.txt").read_text(encoding="utf-8").splitlines():
        name, _, version = line.split("#", 1)[0].strip().partition("==")
        if name.strip() == "torch":
            return version.strip()
    raise AssertionError("requirements-dev.txt pins no torch")


def on_pinned_torch():
    """A mark for a test comparing a record of the pinned torch with the installed one: under
    another release (`make test` with a torch of the user's) they differ by design."""
    import pytest
    import torch

    installed = torch.__version__.split("+")[0]
    return pytest.mark.skipif(installed != pinned_torch(),
                              reason=f"compares opgen's record of torch {pinned_torch()} "
                                     f"(requirements-dev.txt) with the installed torch {installed}")
