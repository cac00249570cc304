"""End to end, on one scratch library (one build):

- a `generate` SIGKILLed midway leaves a mixed generated set; the next `python -m codegen.build`
  notices, regenerates, and only then compiles;
- the library adds ops to `aten`, a namespace torch defines: it registers through
  TORCH_LIBRARY_FRAGMENT, loads, and its ops run eagerly and under FakeTensorMode.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codegen import config, files
from codegen.rendering import set_stamp
from tests import scratch
from tests.test_files import killed_generate
from tests.test_project import opgen

# The example layout's completion stamp (generated/SHA256SUMS).
SET_STAMP = set_stamp(config.default_project(Path(__file__).resolve().parent.parent))

pytestmark = pytest.mark.e2e

V1 = """\
namespace: aten
ops:
  - func: opgen_twice(Tensor self) -> Tensor
    doc: 2 * self, from an op library that adds ops to torch's own namespace.
    dispatch:
      CPU: rec_twice_cpu
    fake: like(self)
"""
V2 = V1 + """\
  - func: opgen_thrice(Tensor self) -> Tensor
    dispatch:
      CPU: rec_thrice_cpu
    fake: like(self)
"""
KERNELS = """\
#include <aten/ext.h>

namespace aten {

at::Tensor rec_twice_cpu(const at::Tensor& self) { return self.mul(2); }
at::Tensor rec_thrice_cpu(const at::Tensor& self) { return self.mul(3); }

}  // namespace aten
"""


@pytest.fixture(scope="module")
def recovered(tmp_path_factory):
    root = tmp_path_factory.mktemp("recovery")
    scratch.make_root(root, {"ext.yaml": V1}, {"aten/kernels.cpp": KERNELS})
    gen = scratch.generate(root)
    assert gen.returncode == 0, gen.stderr
    (root / "schemas" / "ext.yaml").write_text(V2)
    killed_generate(root, 3)
    assert files.verify_stamp(root, SET_STAMP) is not None
    return root, scratch.build(root)


def test_build_regenerates_an_interrupted_set_before_compiling(recovered) -> None:
    root, proc = recovered
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == (f"note: {SET_STAMP} is missing (the last code generation did not "
                        "complete); regenerating before the build")
    steps = [line.split("] ", 1)[1].split()[0] for line in lines if line.startswith("[")]
    assert steps[0] == "CODEGEN" and "CXX" in steps and "CODEGEN" not in steps[1:], lines
    assert files.verify_stamp(root, SET_STAMP) is None
    check = scratch.run(root, "-m", "codegen", "generate", "--check", "schemas")
    assert check.returncode == 0, check.stdout


def test_ops_added_to_aten_load_and_run(recovered) -> None:
    root, proc = recovered
    assert proc.returncode == 0
    register = (root / "generated" / "cpp" / "aten" / "register_ext.cpp").read_text()
    assert "TORCH_LIBRARY_FRAGMENT(aten, m)" in register and "TORCH_LIBRARY(" not in register
    run = scratch.python(root, """
import torch
import runtime
from torch._subclasses.fake_tensor import FakeTensorMode
x = torch.arange(3.0)
print(runtime.ops.opgen_twice(x).tolist(), torch.ops.aten.opgen_thrice(x).tolist())
with FakeTensorMode():
    print(tuple(torch.ops.aten.opgen_twice(torch.empty(4, 5)).shape))
""")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout == "[0.0, 2.0, 4.0] [0.0, 3.0, 6.0]\n(4, 5)\n"


def _import(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import alphaops"], cwd=root, env=scratch.env(),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("damage", ["foreign", pytest.param("cut short", marks=pytest.mark.slow),
                                    pytest.param("stale copy", marks=pytest.mark.slow)])
def test_build_relinks_a_library_the_loader_refuses(tmp_path: Path, damage: str) -> None:
    """A library the loader refuses (another project's or another checkout's copied over it, or
    one cut short) tells the user to run the build; ninja, seeing a library newer than its
    inputs, had nothing to do, so the advice could not work. The build relinks it."""
    root = scratch.write_project(tmp_path / "proj", "alphaops", "alphans")
    assert opgen("generate", cwd=root).returncode == 0
    first = opgen("build", cwd=root)
    assert first.returncode == 0, first.stdout + first.stderr
    lib = root / "alphaops" / "libalphans_ops.so"
    good = lib.read_bytes()
    if damage == "foreign":
        lib.write_bytes(b"\x7fELF not ours")
    elif damage == "cut short":
        lib.write_bytes(good[:good.find(b"@opgen-stamp ns=alphans ") + 1024])
    else:
        at = good.find(b"@opgen-stamp ns=alphans schemas=") + len(b"@opgen-stamp ns=alphans schemas=")
        lib.write_bytes(good[:at] + b"0123456789abcdef" + good[at + 16:])
    assert lib.read_bytes() != good
    probe = _import(root)
    assert probe.returncode != 0 and "opgen build" in probe.stderr, probe.stderr
    again = opgen("build", cwd=root)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "LINK alphaops/libalphans_ops.so" in again.stdout, again.stdout
    assert _import(root).returncode == 0, _import(root).stderr
    assert "no work to do" in opgen("build", cwd=root).stdout
