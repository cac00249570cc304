"""End to end: the example library's C++ ops (schemas/core.yaml, runtime/csrc/exops/) built with
ninja, loaded by `import runtime`, and every op checked on every sample of its op file: its
registered schema against its behaviour (`torch.library.opcheck`, test_schema), and its numbers
against a plain-PyTorch reference. (tests/test_samples.py runs the full opcheck, gradcheck,
compile and export checks over every op file.)
"""

from __future__ import annotations

import contextlib
import functools

import re

import pytest
import torch
import torch.nn.functional as F

from tests import scratch

pytestmark = pytest.mark.e2e
OP_FILE = str(scratch.REPO / "schemas" / "core.yaml")


@pytest.fixture(scope="module", autouse=True)
def runtime_module():
    built = scratch.build_example()
    assert built.returncode == 0, built.stdout + built.stderr
    import runtime

    return runtime


def _moments(self, dim=(), keepdim=False, *, correction=1):
    var, mean = torch.var_mean(self, dim=list(dim) or None, correction=correction,
                               keepdim=keepdim)
    return mean, var


def _weighted_mse(input, target, weight=None, reduction="mean"):
    loss = (input - target) ** 2
    if weight is not None:
        loss = loss * weight
    return {"none": loss, "mean": loss.mean(), "sum": loss.sum()}[reduction]


def _weighted_sum(tensors, weights):
    terms = torch.broadcast_tensors(*[t * w for t, w in zip(tensors, weights)])
    return functools.reduce(torch.add, terms)


def _pad_end(self, pad, value=0.0):
    flat = [n for p in reversed(pad) for n in (0, p)]
    return F.pad(self, flat, value=value)


def _gaussian_window(size, sigma, *, dtype=None, layout=None, device=None, pin_memory=None):
    w = torch.signal.windows.gaussian(size, std=sigma, sym=True, dtype=torch.float64)
    return (w / w.sum()).to(dtype=dtype or torch.get_default_dtype(), device=device)


def _smooth_clamp(self, limit=1.0):
    return limit * torch.tanh(self / limit)


# Plain-PyTorch references, by op (str(op.name)).
REFERENCES = {
    "exops::scaled_add": lambda self, other, *, alpha=1: torch.add(self, other, alpha=alpha),
    "exops::weighted_mse": _weighted_mse,
    "exops::soft_shrink": lambda self, lambd=0.5: F.softshrink(self, lambd),
    "exops::soft_shrink_": lambda self, lambd=0.5: F.softshrink(self, lambd),
    "exops::soft_shrink.out": lambda self, lambd=0.5, *, out: F.softshrink(self, lambd),
    "exops::moments": _moments,
    "exops::weighted_sum": _weighted_sum,
    "exops::pad_end": _pad_end,
    "exops::select_above": lambda self, threshold: self.flatten()[self.flatten().abs() > threshold],
    "exops::gaussian_window": _gaussian_window,
    "exops::smooth_clamp": _smooth_clamp,
    "exops::smooth_clamp_backward":
        lambda grad_output, self, limit: grad_output * (1 - torch.tanh(self / limit) ** 2),
    "exops::scaled_smooth_clamp":
        lambda self, scale, limit=1.0: scale * _smooth_clamp(self / scale, limit),
}


def _cases() -> list[tuple]:
    # Collected from the op file alone: importing runtime (runtime.testing) needs the built
    # library, which the module fixture builds only once the tests run.
    from codegen.load import load_library

    return [(op, s, i) for op in load_library([OP_FILE]).ops for i, s in enumerate(op.samples)]


CASES = _cases()


def _case_id(c: tuple) -> str:
    op, _, i = c
    return f"{op.name}-{i}"


def _case(c: tuple):
    from runtime import testing

    return testing.Case(*c)


def test_every_op_has_samples_and_a_reference() -> None:
    from codegen.load import load_library

    names = {str(op.name) for op in load_library([OP_FILE]).ops}
    assert names == set(REFERENCES)
    assert names == {str(op.name) for op, _, _ in CASES}


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_opcheck_schema(case) -> None:
    case = _case(case)
    args, kwargs = case.inputs()
    torch.library.opcheck(case.overload, args, kwargs, test_utils=("test_schema",))


def _detached(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_detached(i) for i in x)
    return x


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_matches_reference(case) -> None:
    case = _case(case)
    args, kwargs = case.inputs()
    args, kwargs = _detached(args), {k: _detached(v) for k, v in kwargs.items()}
    ref_args, ref_kwargs = _detached(args), {k: _detached(v) for k, v in kwargs.items()}
    expected = REFERENCES[str(case.op.name)](*ref_args, **ref_kwargs)
    with torch.no_grad():
        actual = case.overload(*args, **kwargs)
    torch.testing.assert_close(actual, expected)
    schema = case.op.schema
    if schema.is_inplace:
        assert actual is args[0], "an in-place op returns its argument"
    if schema.is_out_fn:
        assert actual is kwargs["out"], "an out= op returns its out argument"


def test_runtime_ops_are_the_op_overloads(runtime_module) -> None:
    ops = runtime_module.ops
    assert ops.scaled_add is torch.ops.exops.scaled_add.default
    assert ops.soft_shrink_out is torch.ops.exops.soft_shrink.out
    assert set(ops.__all__) >= {"scaled_add", "soft_shrink", "soft_shrink_", "soft_shrink_out"}
    with pytest.raises(AttributeError, match="no op 'nope'"):
        ops.nope
    # The module spellings reach the same module (runtime's __path__ holds generated/runtime).
    import runtime.ops
    from runtime.ops import scaled_add

    assert runtime.ops is ops and scaled_add is ops.scaled_add


def test_composite_op_differentiates_through_its_parts() -> None:
    """scaled_smooth_clamp is CompositeImplicitAutograd: autograd sees smooth_clamp inside it."""
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    scale = torch.full((5,), 2.0, dtype=torch.float64)
    torch.ops.exops.scaled_smooth_clamp(x, scale, 1.5).sum().backward()
    expected = 1 - torch.tanh(x.detach() / 2.0 / 1.5) ** 2
    torch.testing.assert_close(x.grad, expected)


def test_an_op_without_derivatives_raises_at_backward_eager_and_compiled() -> None:
    """weighted_mse has no derivatives. torch's fallback for custom ops only warned: eager
    differentiated through the ATen calls inside its C++ kernel, and torch.compile gave no
    gradient. Now both raise, as an aten op without a derivatives.yaml entry does, and a call
    with nothing to differentiate is plain."""
    x = torch.randn(4, 3, requires_grad=True)
    y = torch.randn(4, 3)

    def f(x, y):
        return torch.ops.exops.weighted_mse(x, y)

    out = f(x, y)
    assert out.requires_grad
    with pytest.raises(RuntimeError, match="derivative for exops::weighted_mse is not implemented"):
        out.backward()
    torch._dynamo.reset()
    with pytest.raises(Exception, match="derivative for exops::weighted_mse is not implemented"):
        torch.compile(f, backend="aot_eager", fullgraph=True)(x, y).backward()
    with torch.no_grad():
        assert not f(x, y).requires_grad
    plain = f(x.detach(), y)
    assert not plain.requires_grad and plain.grad_fn is None
    torch.testing.assert_close(plain, ((x.detach() - y) ** 2).mean())


def test_kernel_errors_reach_python() -> None:
    with pytest.raises(RuntimeError, match="reduction must be 'none', 'mean' or 'sum', got 'max'"):
        torch.ops.exops.weighted_mse(torch.ones(2), torch.ones(2), None, "max")
    with pytest.raises(RuntimeError, match="got 3 tensors but 2 weights"):
        torch.ops.exops.weighted_sum([torch.ones(1)] * 3, [1.0, 2.0])


def test_inplace_and_out_ops_have_cpp_autograd_kernels() -> None:
    """soft_shrink_ differentiates through soft_shrink, copied into self, and soft_shrink.out
    raises aten's out= error, both in the generated C++ Autograd kernels (Note [Autograd of
    mutating ops]); without a gradient they run the op below autograd and bump the version."""
    for name in ("exops::soft_shrink_", "exops::soft_shrink.out"):
        autograd = [line for line in torch._C._dispatch_dump(name).splitlines()
                    if line.startswith("Autograd")]
        assert len(autograd) == 1 and "cpp/exops/autograd.cpp" in autograd[0], autograd
    x = torch.tensor([-2.0, -0.25, 0.25, 3.0], dtype=torch.float64, requires_grad=True)
    y = x * 2
    torch.ops.exops.soft_shrink_(y, 0.5)
    (g,) = torch.autograd.grad((y * y).sum(), x)
    expected = torch.where((x * 2).abs() > 0.5, 2 * 2 * torch.ops.exops.soft_shrink(x * 2, 0.5),
                           torch.zeros_like(x)).detach()
    torch.testing.assert_close(g, expected)
    assert torch.autograd.gradcheck(
        lambda t: torch.ops.exops.soft_shrink_(t * 1, 0.5), (x,))
    compiled = torch.compile(lambda t: torch.ops.exops.soft_shrink_(t * 1, 0.5),
                             backend="aot_eager", fullgraph=True)
    (gc,) = torch.autograd.grad(compiled(x).sum(), x)
    (ge,) = torch.autograd.grad(torch.ops.exops.soft_shrink(x, 0.5).sum(), x)
    torch.testing.assert_close(gc, ge)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        torch.ops.exops.soft_shrink_(x, 0.5)
    # A forward-mode tangent goes through soft_shrink too (below autograd it stayed unchanged),
    # which says it has none; the out= op refuses it.
    t = x.detach()
    with pytest.raises(NotImplementedError, match="exops::soft_shrink has no forward-mode"):
        torch.func.jvp(lambda a: torch.ops.exops.soft_shrink_(a * 1, 0.5), (t,),
                       (torch.ones_like(t),))
    with pytest.raises(NotImplementedError, match=re.escape(
            "exops::soft_shrink.out writes to its arguments and has no forward-mode derivative")):
        torch.func.jvp(lambda a: torch.ops.exops.soft_shrink.out(a, 0.5, out=torch.empty_like(a)),
                       (t,), (torch.ones_like(t),))
    # No gradient recorded: the write is still seen by what saved the tensor.
    z = x.exp()
    with torch.no_grad():
        torch.ops.exops.soft_shrink_(z, 0.5)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    out = torch.empty(4, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="exops::soft_shrink.out: functions with out=... "
                                           "arguments don't support automatic differentiation"):
        torch.ops.exops.soft_shrink.out(x, 0.5, out=out)
    with torch.no_grad():
        assert torch.ops.exops.soft_shrink.out(x, 0.5, out=out) is out
    torch.testing.assert_close(out, torch.ops.exops.soft_shrink(x, 0.5).detach())


@pytest.mark.parametrize("in_dim", [0, 1, -1])
def test_stable_written_arguments_may_be_strided(in_dim) -> None:
    """exstable::scale_ and scale.out write through any strided view: a transpose, and the
    slices that torch's vmap fallback passes the in-place op at a batch dim other than 0."""
    x = torch.randn(4, 3, dtype=torch.float64)
    t = x.clone().t()
    assert torch.ops.exstable.scale_(t, 2.0) is t
    torch.testing.assert_close(t, 2 * x.t())
    out = torch.empty(4, 3, dtype=torch.float64).t()
    assert torch.ops.exstable.scale.out(x.t(), 3.0, out=out) is out
    torch.testing.assert_close(out, 3 * x.t())
    batch = torch.randn(5, 4, 3, dtype=torch.float64).movedim(0, in_dim)
    expected = 2 * batch
    torch.func.vmap(lambda b: torch.ops.exstable.scale_(b, 2.0), in_dims=in_dim,
                    out_dims=in_dim)(batch)
    torch.testing.assert_close(batch, expected)


WRITERS = {
    # C++ Autograd and ADInplaceOrView kernels (generated/cpp/exops/autograd.cpp)
    "exops::soft_shrink_": lambda t: torch.ops.exops.soft_shrink_(t, 0.5),
    "exops::soft_shrink.out": lambda t: torch.ops.exops.soft_shrink.out(torch.ones(4), 0.5, out=t),
    # Python ones (a stable-ABI namespace: generated/runtime/_reg_exstable.py)
    "exstable::scale_": lambda t: torch.ops.exstable.scale_(t, 2.0),
    "exstable::scale.out": lambda t: torch.ops.exstable.scale.out(torch.ones(4), 2.0, out=t),
}


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_writes_bump_versions_as_aten_in_place_ops_do(name) -> None:
    """A write bumps the written tensor's version once, under grad mode, no_grad and inference
    mode (where no Autograd kernel runs, the ADInplaceOrView kernel does), so a backward that
    saved the tensor raises; an inference tensor written outside inference mode is refused.
    (Note [ADInplaceOrView kernels])"""
    write = WRITERS[name]
    x = torch.rand(4) + 1
    for mode in (contextlib.nullcontext, torch.no_grad, torch.inference_mode):
        before = x._version
        with mode():
            write(x)
        assert x._version == before + 1, mode
    a = torch.rand(4, requires_grad=True)
    saved = (a * 1).exp()       # exp saves its result for backward
    with torch.inference_mode():
        write(saved)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.sum().backward()
    with torch.inference_mode():
        frozen = torch.rand(4)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside "
                                           "InferenceMode is not allowed"):
        write(frozen)
    with torch.inference_mode():
        write(frozen)           # inside it, as aten allows
