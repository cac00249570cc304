"""torch.func on ops whose autograd is generated from derivative formulas (codegen/dest/py_reg.py,
Note [Generated autograd]): `grad`, `vmap(grad(...))`, `jacrev` and `grad(grad(...))` on every
sample of every differentiable op of the example library (schemas/*.yaml, built) and of
tests/golden/py/inputs/grads.yaml (Python kernels, loaded without C++), against eager autograd,
which gradcheck compares with finite differences (tests/test_samples.py, tests/test_formulas.py).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import pytest
import torch
from torch.func import grad, jacrev, vmap

from codegen.formulas import Derivatives
from codegen.load import load_library
from codegen.model import Op, TensorSample
from tests import scratch

pytestmark = pytest.mark.e2e
GRADS_FILE = "tests/golden/py/inputs/grads.yaml"


def _differentiable_cases(path: str) -> list[str]:
    """Samples with a floating tensor for an input with a formula, of ops whose formulas are
    all implemented. vmap runs the forward of each: through the op's batching rule, PyTorch's
    loop fallback, or the rule generated where that refuses the op (Tensor[] arguments)."""
    with scratch.in_repo():
        lib = load_library([path])

    def floating(v: Any) -> bool:
        if isinstance(v, TensorSample):
            return getattr(torch, v.dtype).is_floating_point
        return isinstance(v, tuple) and any(floating(x) for x in v)

    out = []
    for op in lib.ops:
        d = op.derivatives
        if not isinstance(d, Derivatives) or any("not_implemented(" in f.text for f in d.formulas):
            continue
        diff = {n for f in d.formulas for n in f.inputs}
        out += [f"{op.name}[{i}]" for i, s in enumerate(op.samples)
                if any(n in diff and floating(v) for n, v in s.args)]
    return out


EXAMPLE_CASES = _differentiable_cases("schemas")
GRADS_CASES = _differentiable_cases(GRADS_FILE)


def combine(xs, a, ys, s):
    """Kernel of gradtest::combine (tests/golden/py/inputs/grads.yaml)."""
    return sum(x * s for x in xs) + a * sum(y.sum() for y in ys)


@pytest.fixture(scope="module")
def cases(request, testing):
    """id -> runtime.testing.Case of both libraries' differentiable ops."""
    grads_lib = scratch.python_library(request, testing, GRADS_FILE)
    with scratch.in_repo():
        example = testing.load_cases(["schemas"])
    return {c.id: c for c in [*example, *grads_lib.cases()]}


class Call:
    """The op of a case as a function of its differentiable floating tensors (flattened out of
    Tensor[] arguments), returning its floating outputs as a tuple."""

    def __init__(self, testing: Any, case: Any, seed: int = 0):
        self.op: Op = case.op
        args, kwargs = testing.make_inputs(case.op, case.sample, seed=seed, dtype=torch.float64,
                                           requires_grad=False)
        self.args, self.kwargs = args, kwargs
        # Every input with a formula, `not_implemented` ones included (their error is tested).
        diff = {n for f in case.op.derivatives.formulas for n in f.inputs}
        names = [a.name for a in case.op.schema.arguments if not a.kwarg_only]
        self.slots: list[tuple[int, int | None]] = []     # (position, index in a list)
        for i, a in enumerate(args):
            if names[i] not in diff:
                continue
            if isinstance(a, torch.Tensor) and a.is_floating_point():
                self.slots.append((i, None))
            elif isinstance(a, list):
                self.slots += [(i, j) for j, t in enumerate(a)
                               if isinstance(t, torch.Tensor) and t.is_floating_point()]
        self.overload = case.overload

    @property
    def leaves(self) -> tuple[torch.Tensor, ...]:
        return tuple(self.args[i] if j is None else self.args[i][j] for i, j in self.slots)

    def __call__(self, *leaves: torch.Tensor) -> tuple[torch.Tensor, ...]:
        args = [list(a) if isinstance(a, list) else a for a in self.args]
        for (i, j), t in zip(self.slots, leaves):
            if j is None:
                args[i] = t
            else:
                args[i][j] = t
        out = self.overload(*args, **self.kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        # A Tensor[] output counts element by element; an empty one has no Jacobian rows (and
        # torch.autograd.functional.jacobian, the reference, cannot stack zero of them).
        flat = [t for o in outs for t in (o if isinstance(o, list) else [o])]
        return tuple(o for o in flat if o.is_floating_point() and o.numel() > 0)

    def loss(self, *leaves: torch.Tensor) -> torch.Tensor:
        """A scalar that weighs every output element differently."""
        return sum((o * torch.linspace(-1.0, 2.0, o.numel(), dtype=o.dtype).view(o.shape)).sum()
                   for o in self(*leaves))


def _eager_grads(fn: Callable, leaves: tuple[torch.Tensor, ...],
                 create_graph: bool = False) -> tuple[torch.Tensor, ...]:
    leaves = tuple(t.detach().requires_grad_() for t in leaves)
    got = torch.autograd.grad(fn(*leaves), leaves, allow_unused=True, create_graph=create_graph)
    return tuple(torch.zeros_like(t) if g is None else g for t, g in zip(leaves, got))


@pytest.mark.parametrize("case_id", EXAMPLE_CASES + GRADS_CASES)
def test_grad_matches_eager_autograd(cases, testing, case_id):
    call = Call(testing, cases[case_id])
    argnums = tuple(range(len(call.leaves)))
    got = grad(call.loss, argnums=argnums)(*call.leaves)
    expected = _eager_grads(call.loss, call.leaves)
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("case_id", EXAMPLE_CASES + GRADS_CASES)
def test_jacrev_matches_eager_jacobian(cases, testing, case_id):
    call = Call(testing, cases[case_id])
    argnums = tuple(range(len(call.leaves)))
    got = jacrev(call, argnums=argnums)(*call.leaves)
    expected = torch.autograd.functional.jacobian(call, call.leaves)
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("case_id", EXAMPLE_CASES + GRADS_CASES)
def test_vmap_of_grad_matches_a_loop(cases, testing, case_id):
    case = cases[case_id]
    calls = [Call(testing, case, seed=s) for s in range(3)]
    call = calls[0]
    argnums = tuple(range(len(call.leaves)))
    batched = [torch.stack([c.leaves[k] for c in calls]) for k in argnums]

    def loss_of(*leaves: torch.Tensor) -> torch.Tensor:
        return call.loss(*leaves)

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="There is a performance drop")
        got = vmap(grad(loss_of, argnums=argnums))(*batched)
    expected = [_eager_grads(loss_of, c.leaves) for c in calls]
    for k in argnums:
        torch.testing.assert_close(got[k], torch.stack([e[k] for e in expected]))


def test_second_order_under_torch_func(cases, testing):
    """grad(grad(...)) through formulas that are differentiable (they call smooth_clamp_backward,
    which has derivatives of its own)."""
    call = Call(testing, cases["exops::smooth_clamp[1]"])
    (x,) = call.leaves
    got = grad(lambda t: grad(call.loss)(t).sum())(x)
    leaf = x.detach().requires_grad_()
    (g,) = torch.autograd.grad(call.loss(leaf), leaf, create_graph=True)
    (expected,) = torch.autograd.grad(g.sum(), leaf)
    torch.testing.assert_close(got, expected)


def test_second_order_error_under_torch_func(cases, testing):
    """row_normalize's formula calls row_normalize_backward, which has no derivatives: a second
    derivative under torch.func raises the error naming it, as eager autograd does."""
    call = Call(testing, cases["exops::row_normalize[0]"])
    (x,) = call.leaves
    first = grad(call.loss)(x)
    torch.testing.assert_close(first, _eager_grads(call.loss, (x,))[0])
    with pytest.raises(RuntimeError, match="exops::row_normalize_backward, which has no "
                                           "derivatives"):
        grad(lambda t: grad(call.loss)(t).sum())(x)


def test_grad_matches_finite_differences(cases, testing):
    call = Call(testing, cases["exops::gated_residual[1]"])
    x, gate = call.leaves
    gx, ggate = grad(call.loss, argnums=(0, 1))(x, gate)
    eps = 1e-6
    for leaf, g in ((x, gx), (gate, ggate)):
        flat = leaf.view(-1)
        for k in range(0, flat.numel(), 3):
            old = flat[k].item()
            flat[k] = old + eps
            up = call.loss(x, gate).item()
            flat[k] = old - eps
            down = call.loss(x, gate).item()
            flat[k] = old
            assert abs((up - down) / (2 * eps) - g.view(-1)[k].item()) < 1e-6


def test_no_grad_call_records_nothing(cases, testing):
    """Without an input that requires grad the Autograd kernel calls the op below autograd."""
    x = torch.randn(4, requires_grad=True)
    with torch.no_grad():
        y = torch.ops.exops.smooth_clamp(x, 2.0)
    assert y.grad_fn is None and not y.requires_grad
    z = torch.ops.exops.smooth_clamp(x.detach(), 2.0)
    assert z.grad_fn is None
    w = torch.ops.exops.smooth_clamp(x, 2.0)
    # The generated C++ node (Note [C++ autograd] in codegen/dest/cpp_autograd.py).
    assert w.grad_fn.name() == "SmoothClampBackward"


def test_not_implemented_gradient_under_torch_func(cases, testing):
    call = Call(testing, cases["gradtest::frozen[0]"])
    with pytest.raises(NotImplementedError, match="gradtest::frozen is not implemented"):
        grad(call.loss)(*call.leaves)


def test_forward_mode_says_it_is_unsupported(cases, testing):
    """Formulas are reverse-mode: jvp raises instead of giving a zero tangent."""
    call = Call(testing, cases["exops::smooth_clamp[0]"])
    (x,) = call.leaves
    with pytest.raises(NotImplementedError, match="exops::smooth_clamp has no forward-mode"):
        torch.func.jvp(call, (x,), (torch.ones_like(x),))
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level(), pytest.raises(NotImplementedError, match="no forward-mode"):
        call(fwAD.make_dual(x, torch.ones_like(x)))


def test_several_tensor_lists(cases, testing):
    """Tensor[] inputs reach the Function flat after their counts: gradcheck and gradgradcheck
    (torch.func is checked on this op like on every other)."""
    assert testing.check_gradients(cases["gradtest::combine[0]"], second_order=True)
