"""Forward + backward of a differentiable op whose derivatives come from formulas in the op file,
side by side in one run, against the same op (same Python kernel, same gradient math) built the
other ways:

  generated        exops::gated_residual: Python kernel + `derivatives:` formulas, registered by
                   the generated runtime._reg_exops (an autograd.Function applied by the op's
                   Autograd kernel: Note [Generated autograd] in codegen/dest/py_reg.py)
  Library          hand-written Library.define/impl + register_autograd
  custom_op        torch.library.custom_op + register_autograd
  Function         a plain torch.autograd.Function
  composite        the expression in plain PyTorch ops (autograd records each op)

One step: y = op(x, gate); torch.autograd.grad(y, (x, gate), g), with x [4, 6] and gate [6],
float32. us per step, best of 21 interleaved rounds. Target: generated <= 0.9x custom_op.

Second, the C++ autograd path (Note [C++ autograd] in codegen/dest/cpp_autograd.py) on
exops::smooth_clamp (C++ kernel, formula calling exops::smooth_clamp_backward), x [4, 6] float32:

  no grad: the op on a tensor that does not require grad, against the same op with autograd
           skipped (inference_mode: the dispatcher goes straight to the CPU kernel), and against
           the old Python path (the generated Python Autograd kernel and autograd.Function,
           registered over the C++ one at the end of the run);
  forward + backward: against a plain autograd.Function around the same two ops, the composite
           (limit * tanh(x / limit) in PyTorch ops), and the old Python path.

Targets: no-grad C++ / without autograd <= 1.2x; forward + backward C++ / Function <= 0.8x and
C++ / composite <= 1.2x.
Run: `python bench/bench_autograd.py` (after `make build`).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import runtime  # noqa: E402,F401
from runtime.kernels.exops import gated_residual, gated_residual_fake  # noqa: E402
from timing import best_us  # noqa: E402


def setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def backward(ctx, grad):
    # The formulas of schemas/python.yaml, as written there.
    x, gate = ctx.saved_tensors
    x_grad = grad * (1 + torch.sigmoid(gate))
    gate_grad = (grad * x * torch.sigmoid(gate) * (1 - torch.sigmoid(gate))).sum_to_size(gate.shape)
    return x_grad, gate_grad


def library_version():
    lib = torch.library.Library("bench_ag", "DEF")
    lib.define("gated_residual(Tensor x, Tensor gate) -> Tensor")
    lib.impl("gated_residual", gated_residual, "CompositeExplicitAutograd")
    torch.library.register_fake("bench_ag::gated_residual", gated_residual_fake, lib=lib)
    torch.library.register_autograd("bench_ag::gated_residual", backward,
                                    setup_context=setup_context, lib=lib)
    return lib, torch.ops.bench_ag.gated_residual.default


def custom_op_version():
    op = torch.library.custom_op("bench_ag_co::gated_residual", mutates_args=())(gated_residual)
    op.register_fake(gated_residual_fake)
    op.register_autograd(backward, setup_context=setup_context)
    return op


class GatedResidual(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gate):
        ctx.save_for_backward(x, gate)
        return gated_residual(x, gate)

    @staticmethod
    def backward(ctx, grad):
        return backward(ctx, grad)


def composite(x, gate):
    return x * (1 + torch.sigmoid(gate))


def main() -> None:
    x = torch.randn(4, 6, requires_grad=True)
    gate = torch.randn(6, requires_grad=True)
    g = torch.ones(4, 6)
    _keep, library_op = library_version()
    ops = {
        "generated": torch.ops.exops.gated_residual.default,
        "Library": library_op,
        "custom_op": custom_op_version(),
        "Function": GatedResidual.apply,
        "composite": composite,
    }
    reference = torch.autograd.grad(composite(x, gate), (x, gate), g)
    for name, op in ops.items():
        got = torch.autograd.grad(op(x, gate), (x, gate), g)
        for a, b in zip(got, reference):
            torch.testing.assert_close(a, b, msg=lambda m, name=name: f"{name}: {m}")

    def step(op):
        return lambda: torch.autograd.grad(op(x, gate), (x, gate), g)

    t = best_us({name: step(op) for name, op in ops.items()}, number=2000, rounds=21)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; gated_residual forward "
          "+ backward, x [4, 6], gate [6]; us per step (best of 21 interleaved rounds x 2000)\n")
    for name in ops:
        print(f"{name:<10} {t[name]:>7.2f}")
    print()
    print(f"generated / custom_op: {t['generated'] / t['custom_op']:.2f}x   (target <= 0.9x)")
    print(f"generated / Function:  {t['generated'] / t['Function']:.2f}x")
    print(f"generated / Library:   {t['generated'] / t['Library']:.2f}x")


class SmoothClamp(torch.autograd.Function):
    """A plain autograd.Function around the same C++ ops."""

    @staticmethod
    def forward(ctx, x, limit):
        ctx.save_for_backward(x)
        ctx.limit = limit
        with torch._C._AutoDispatchBelowAutograd():
            return torch.ops.exops.smooth_clamp.default(x, limit)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return torch.ops.exops.smooth_clamp_backward.default(grad, x, ctx.limit), None


class _OldSmoothClampFunction(torch.autograd.Function):
    """What codegen.dest.py_autograd generates for exops::smooth_clamp (the old Python path)."""

    @staticmethod
    def forward(self, limit):
        with torch.enable_grad(), torch._C._AutoDispatchBelowAutograd():
            return torch.ops.exops.smooth_clamp.default(self, limit)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.limit = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        (self,) = ctx.saved_tensors
        return torch.ops.exops.smooth_clamp_backward.default(grad, self, ctx.limit), None


def _old_smooth_clamp_autograd(self, limit=1.0):
    from runtime._reg_exops import _apply, _differentiating

    if _differentiating(self):
        return _apply(_OldSmoothClampFunction, self, limit)
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.exops.smooth_clamp.default(self, limit)


def cpp_path() -> None:
    op = torch.ops.exops.smooth_clamp.default
    assert op(torch.randn(2, requires_grad=True), 2.0).grad_fn.name() == "SmoothClampBackward", \
        "exops::smooth_clamp has no C++ Autograd kernel: rebuild (make build)"
    x = torch.randn(4, 6, requires_grad=True)
    plain = x.detach()
    g = torch.ones(4, 6)

    # Calls in batches of 100, so the inference_mode context is not what is timed.
    def batch(fn):
        def run():
            for _ in range(100):
                fn()
        return run

    def without_autograd():
        with torch.inference_mode():
            for _ in range(100):
                op(plain, 2.0)

    def step(fn):
        return lambda: torch.autograd.grad(fn(x), (x,), g)

    steps = {
        "C++": step(lambda t: op(t, 2.0)),
        "Function": step(lambda t: SmoothClamp.apply(t, 2.0)),
        "composite": step(lambda t: 2.0 * torch.tanh(t / 2.0)),
    }
    reference = torch.autograd.grad(2.0 * torch.tanh(x / 2.0), (x,), g)[0]
    for name, fn in steps.items():
        torch.testing.assert_close(fn()[0], reference, msg=lambda m, name=name: f"{name}: {m}")
    calls = {"C++ no grad": batch(lambda: op(plain, 2.0)), "no autograd": without_autograd}
    t = best_us(calls, number=20, rounds=21)
    t = {k: v / 100 for k, v in t.items()}
    t.update(best_us(steps, number=2000, rounds=21))
    # The old Python path, registered over the C++ kernel (the dispatcher warns of the override).
    import warnings

    lib = torch.library.Library("exops", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lib.impl("smooth_clamp", _old_smooth_clamp_autograd, "Autograd")
    assert op(x, 2.0).grad_fn.name() != "SmoothClampBackward"
    torch.testing.assert_close(steps["C++"]()[0], reference)
    t["Python no grad"] = best_us({"": batch(lambda: op(plain, 2.0))}, number=20, rounds=21)[""] / 100
    t["Python step"] = best_us({"": steps["C++"]}, number=2000, rounds=21)[""]
    print(f"\nC++ autograd: exops::smooth_clamp, x [4, 6]; us per call / step (best of 21 rounds)\n")
    print(f"call without grad:  C++ path {t['C++ no grad']:6.2f}   without autograd "
          f"{t['no autograd']:6.2f}   old Python path {t['Python no grad']:6.2f}")
    print(f"forward + backward: C++ path {t['C++']:6.2f}   Function {t['Function']:6.2f}   "
          f"composite {t['composite']:6.2f}   old Python path {t['Python step']:6.2f}\n")
    print(f"no grad, C++ / without autograd: {t['C++ no grad'] / t['no autograd']:.2f}x (target <= 1.2x)")
    print(f"no grad, C++ / old Python path:  {t['C++ no grad'] / t['Python no grad']:.2f}x")
    print(f"step, C++ / Function:            {t['C++'] / t['Function']:.2f}x (target <= 0.8x)")
    print(f"step, C++ / composite:           {t['C++'] / t['composite']:.2f}x (target <= 1.2x)")
    print(f"step, C++ / old Python path:     {t['C++'] / t['Python step']:.2f}x")


if __name__ == "__main__":
    main()
    cpp_path()
