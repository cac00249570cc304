"""Tests generated from the `samples:` of every op of the example library (schemas/*.yaml), run
on the built library (`import runtime`) by codegen.testing (docs/FORMAT.md, "Sample checks"):

- `torch.library.opcheck` with all four utilities (test_schema, test_autograd_registration,
  test_faketensor, test_aot_dispatch_dynamic);
- gradcheck for ops with gradients (derivative formulas, or a CompositeImplicitAutograd kernel),
  and gradgradcheck, or the clear error, for the second order;
- `torch.compile(fullgraph=True)` (inductor) at every size the samples' named sizes take: no
  graph break, one graph, the fake kernel's sizes;
- `torch.export` of a call, decomposed, saved, loaded and run;
- random ops: the seed decides; ops with a batching rule: `torch.vmap` equals a loop over the
  batch; ops with an autocast policy: under `torch.autocast` their inputs are cast.

Known exceptions go in schemas/sample_failures.yaml (`<op>[<sample>]: {<check>: <reason>}`); each
listed check must then fail, and one that passes is reported. The example library's is empty.
"""

from __future__ import annotations

import pytest

from codegen import testing
from tests import scratch

pytestmark = pytest.mark.e2e

# Collected from the op files alone: codegen.testing loads no library.
with scratch.in_repo():
    CASES = testing.load_cases(["schemas"])
    FAILURES = testing.load_failures(["schemas"], CASES)


@pytest.fixture(scope="module")
def built():
    """The example library, built and loaded (`import runtime`)."""
    result = scratch.build_example()
    assert result.returncode == 0, result.stdout + result.stderr
    import runtime

    return runtime


def _params():
    return [pytest.param(case, check, id=f"{case.id}-{check}")
            for case in CASES for check in testing.CHECKS if testing.applies(case, check)]


@pytest.mark.parametrize("case,check", _params())
def test_sample(built, case: testing.Case, check: str) -> None:
    reason = testing.run_check(case, check, FAILURES)
    if reason is not None:
        pytest.xfail(reason)


def test_compile_varies_the_named_sizes(built):
    case = next(c for c in CASES if c.id == "exops::segment_sum[0]")
    assert testing.symbolic_dims(case) == ["N", "M", "S"]
    assert testing.check_compile(case) == len(testing.COMPILE_SCALES)


def test_example_library_has_no_known_failures():
    assert FAILURES.entries == {}, "the example library must pass every sample check"


def test_every_op_has_samples():
    with scratch.in_repo():
        from codegen.load import load_library

        lib = load_library(["schemas"])
    assert [str(op.name) for op in lib.ops if not op.samples] == []


def test_gradients_cover_composite_ops():
    """A CompositeImplicitAutograd op is gradchecked through its decomposition."""
    (case,) = [c for c in CASES if c.op.name.name == "scaled_smooth_clamp"]
    assert testing.applies(case, "gradients")
    assert testing.differentiable_inputs(case.op) == ["self", "scale"]


@pytest.mark.parametrize("name", ["soft_shrink", "scaled_add", "row_normalize"])
def test_rule_ops_compile_on_transposed_inputs(built, name):
    """A kernel built from ATen ops (TensorIterator, at::add) lays its output out like its
    input, while a rule's output is contiguous and inductor asserts it: the op's
    `needs_contiguous_strides` tag (Note [Contiguous inputs for rule outputs] in codegen/tags.py)
    makes inductor hand it contiguous inputs. x.t() through it, compiled, equals eager."""
    import torch
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    op = getattr(torch.ops.exops, name).default
    assert torch.Tag.needs_contiguous_strides in op.tags
    assert not op(torch.randn(3, 4).t(), *([torch.randn(3)] if name == "scaled_add" else [])) \
        .is_contiguous()                    # the kernel follows its input's layout
    fn = (lambda a, b: op(a.t(), b) + 1) if name == "scaled_add" else (lambda a, b: op(a.t()) + 1)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="inductor", fullgraph=True, dynamic=True)
    # Compiled for real: inductor's caches do not key on a custom op's tags.
    with inductor_config.patch(fx_graph_cache=False), \
            functorch_config.patch(enable_autograd_cache=False):
        for n in (4, 6):
            a, b = torch.randn(3, n), torch.randn(3)
            torch.testing.assert_close(compiled(a, b), fn(a, b))
