"""The C++ and Python autograd paths give identical gradients (Note [C++ autograd] in
codegen/dest/cpp_autograd.py): a copy of the example project whose op files say
`autograd: python` is generated and built, and every sample of every op with derivatives is
differentiated in both, with the same inputs and output gradients."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import scratch

ROOT = Path(__file__).resolve().parent.parent

# Run in a project root: the gradients of every sample, saved to argv[1].
GRADIENTS = r"""
import sys
import torch
import runtime  # noqa: F401  (loads the built libraries)
from codegen import testing
from codegen.dest import cpp_autograd
from codegen.load import load_library

paths = ["schemas/core.yaml", "schemas/python.yaml", "schemas/stable.yaml"]
lib = load_library(paths)
out = {}
for case in testing.load_cases(paths):
    names = testing.differentiable_inputs(case.op)
    if not names or testing.is_mutating(case.op):
        continue
    named = testing.make_named(case.op, case.sample, seed=case.seed)
    leaves = []
    for n in names:
        v = named.get(n)
        for t in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                t.requires_grad_(True)
                leaves.append(t)
    if not leaves:
        continue
    args, kwargs = testing.split_call(case.op, named)
    result = case.overload(*args, **kwargs)
    results = [r for r in (result if isinstance(result, tuple) else (result,))
               if isinstance(r, torch.Tensor) and r.requires_grad]
    gen = torch.Generator().manual_seed(case.seed + 1)
    cotangents = [torch.randn(r.shape, generator=gen, dtype=r.dtype) for r in results]
    grads = torch.autograd.grad(results, leaves, cotangents, allow_unused=True)
    out[case.id] = (cpp_autograd.uses_cpp(lib, case.op), [g for g in grads])
torch.save(out, sys.argv[1])
"""


def _gradients(root: Path, dest: Path) -> dict:
    import torch

    proc = subprocess.run([sys.executable, "-c", GRADIENTS, str(dest)], cwd=root,
                          env=scratch.env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(dest)


@pytest.mark.slow
def test_python_and_cpp_paths_agree(tmp_path: Path) -> None:
    copy = tmp_path / "python_path"
    copy.mkdir()
    shutil.copy(ROOT / "pyproject.toml", copy)
    shutil.copytree(ROOT / "schemas", copy / "schemas")
    shutil.copytree(ROOT / "runtime", copy / "runtime",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("core.yaml", "python.yaml"):
        p = copy / "schemas" / name
        p.write_text(p.read_text().replace("\nnamespace: exops\n",
                                           "\nnamespace: exops\nautograd: python\n"))
    for step in (["-m", "codegen", "generate"], ["-m", "codegen.build"]):
        proc = subprocess.run([sys.executable, *step], cwd=copy, env=scratch.env(copy),
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert not (copy / "generated" / "cpp" / "exops" / "autograd.cpp").exists()

    cpp = _gradients(ROOT, tmp_path / "cpp.pt")
    python = _gradients(copy, tmp_path / "python.pt")
    assert set(cpp) == set(python)
    on_cpp = sorted(k for k, (uses, _) in cpp.items() if uses)
    assert on_cpp, "no sample ran on the C++ path"
    assert not any(uses for uses, _ in python.values())
    for key in sorted(cpp):
        for a, b in zip(cpp[key][1], python[key][1], strict=True):
            assert (a is None) == (b is None), key
            if a is not None:
                assert a.dtype == b.dtype and a.shape == b.shape, key
                assert torch_equal(a, b), f"{key}: C++ and Python gradients differ"


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))
