"""Tests generated from the `samples:` of every op of the example library (schemas/*.yaml), run
on the built library (`import runtime`):

- `torch.library.opcheck` with all four utilities (test_schema, test_autograd_registration,
  test_faketensor, test_aot_dispatch_dynamic);
- gradcheck in float64 for ops with derivatives, and gradgradcheck, or the clear error, for the
  second order;
- `torch.compile(fullgraph=True, dynamic=True)` (inductor) at three input sizes: no graph break,
  one graph;
- `torch.export` of a call, saved, loaded and run;
- ops with a batching rule: `torch.vmap` equals a loop over the batch;
- ops with an autocast policy: under `torch.autocast` their inputs are cast.

Known exceptions go in tests/opcheck_failures.yaml (`<op>[<sample>]: {<check>: <reason>}`); each
listed check must then fail (strict xfail). The example library's list is empty.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from codegen.load import load_library
from codegen.model import Op, Sample, TensorSample
from tests import scratch

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parent.parent
FAILURES_FILE = ROOT / "tests" / "opcheck_failures.yaml"
CHECKS = ("opcheck", "gradients", "compile", "export", "vmap", "autocast")


def _library():
    import os

    prev = Path.cwd()
    os.chdir(ROOT)
    try:
        return load_library(["schemas"])
    finally:
        os.chdir(prev)


# Collected from the op files alone: importing `runtime` (runtime.testing) loads the built
# library, which only the fixture below builds.
SAMPLES: list[tuple[str, Op, Sample, int]] = [
    (f"{op.name}[{s.name if s.name is not None else i}]", op, s, i)
    for op in _library().ops for i, s in enumerate(op.samples)]
FAILURES: dict[str, dict[str, str]] = yaml.safe_load(FAILURES_FILE.read_text()) or {}


def _has_gradients(op: Op, sample: Sample) -> bool:
    """A floating tensor given for an input with a derivative formula (runtime.testing's
    has_gradients, on the IR)."""
    from codegen.formulas import Derivatives

    if not isinstance(op.derivatives, Derivatives):
        return False
    diff = {n for f in op.derivatives.formulas for n in f.inputs}

    def floating(v) -> bool:
        if isinstance(v, TensorSample):
            return getattr(torch, v.dtype).is_floating_point or getattr(torch, v.dtype).is_complex
        return isinstance(v, tuple) and any(floating(x) for x in v)

    return any(name in diff and floating(v) for name, v in sample.args)


def _applies(op: Op, sample: Sample, check: str) -> bool:
    if check == "gradients":
        return _has_gradients(op, sample)   # no derivatives, or no floating input with one
    if check == "vmap":
        return op.vmap is not None
    if check == "autocast":
        return op.autocast is not None
    return True


def _params():
    out = []
    for case_id, op, sample, _ in SAMPLES:
        for check in CHECKS:
            if not _applies(op, sample, check):
                continue
            reason = FAILURES.get(case_id, {}).get(check)
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            out.append(pytest.param(case_id, check, id=f"{case_id}-{check}", marks=marks))
    return out


@pytest.fixture(scope="module")
def cases():
    """id -> runtime.testing.Case, once the example library is built and loaded."""
    built = scratch.build_example()
    assert built.returncode == 0, built.stdout + built.stderr
    from runtime import testing

    return {case_id: testing.Case(op, sample, i) for case_id, op, sample, i in SAMPLES}


@pytest.mark.parametrize("case_id,check", _params())
def test_sample(cases, case_id: str, check: str) -> None:
    from runtime import testing

    case = cases[case_id]
    assert case.id == case_id
    if check == "opcheck":
        results = testing.check_opcheck(case)
        assert set(results) == set(testing.ALL_OPCHECK_UTILS)
    elif check == "gradients":
        assert testing.has_gradients(case) and testing.check_gradients(case)
    elif check == "compile":
        assert testing.check_compile(case, backend="inductor") == len(testing.COMPILE_SCALES)
    elif check == "export":
        testing.check_export(case)
    elif check == "vmap":
        assert testing.check_vmap(case) == 2
    elif check == "autocast":
        assert testing.check_autocast(case) == getattr(torch, case.op.autocast.cast_inputs)
    else:
        raise AssertionError(check)


def test_example_library_has_no_known_failures():
    assert FAILURES == {}, "the example library must pass every sample check"


def test_failures_name_real_cases_and_checks():
    ids = {case_id for case_id, *_ in SAMPLES}
    for case_id, checks in FAILURES.items():
        assert case_id in ids, f"{FAILURES_FILE.name}: no sample {case_id}"
        assert set(checks) <= set(CHECKS), f"{FAILURES_FILE.name}: unknown check in {case_id}"


def test_every_op_has_samples():
    assert [str(op.name) for op in _library().ops if not op.samples] == []
