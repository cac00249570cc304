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


if __name__ == "__main__":
    main()
