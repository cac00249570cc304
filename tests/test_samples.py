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

from runtime import testing
from tests import scratch

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parent.parent
FAILURES_FILE = ROOT / "tests" / "opcheck_failures.yaml"
CHECKS = ("opcheck", "gradients", "compile", "export", "vmap", "autocast")


def _cases() -> list[testing.Case]:
    import os

    prev = Path.cwd()
    os.chdir(ROOT)
    try:
        return testing.load_cases(["schemas"])
    finally:
        os.chdir(prev)


CASES = _cases()
FAILURES: dict[str, dict[str, str]] = yaml.safe_load(FAILURES_FILE.read_text()) or {}


def _params():
    out = []
    for case in CASES:
        for check in CHECKS:
            if check == "gradients" and not testing.has_gradients(case):
                continue    # no derivatives, or no floating input with one in this sample
            if check == "vmap" and case.op.vmap is None:
                continue
            if check == "autocast" and case.op.autocast is None:
                continue
            reason = FAILURES.get(case.id, {}).get(check)
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            out.append(pytest.param(case, check, id=f"{case.id}-{check}", marks=marks))
    return out


@pytest.fixture(scope="module", autouse=True)
def runtime_module():
    built = scratch.build_example()
    assert built.returncode == 0, built.stdout + built.stderr
    import runtime

    return runtime


@pytest.mark.parametrize("case,check", _params())
def test_sample(case: testing.Case, check: str) -> None:
    if check == "opcheck":
        results = testing.check_opcheck(case)
        assert set(results) == set(testing.ALL_OPCHECK_UTILS)
    elif check == "gradients":
        assert testing.check_gradients(case)
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
    ids = {c.id for c in CASES}
    for case_id, checks in FAILURES.items():
        assert case_id in ids, f"{FAILURES_FILE.name}: no sample {case_id}"
        assert set(checks) <= set(CHECKS), f"{FAILURES_FILE.name}: unknown check in {case_id}"


def test_every_op_has_samples():
    from codegen.load import load_library
    import os

    prev = Path.cwd()
    os.chdir(ROOT)
    try:
        lib = load_library(["schemas"])
    finally:
        os.chdir(prev)
    assert [str(op.name) for op in lib.ops if not op.samples] == []
