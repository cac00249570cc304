"""torch.compile of a small model made of five library ops, side by side in one run:

  generated    exops::scaled_add, smooth_clamp, soft_shrink (C++ kernels) and gated_residual,
               row_normalize (Python kernels), with the generated fake kernels and autograd
  custom_op    the same five kernels and gradient formulas wrapped with torch.library.custom_op
               (register_fake + register_autograd), as an extension writing its ops in Python does

For inference (forward) and training (forward + backward): compile time (the first call after
torch._dynamo.reset(), inductor's and AOT's caches off, best of two compilations in alternating
order, after an unrelated warm-up compilation) and steady-state time per call (best of 7
interleaved rounds), plus eager time for reference. x [64, 32] float32, fullgraph=True,
dynamic=False, one thread.
Run: `python bench/bench_compile.py` (after `make build`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch._inductor.config  # noqa: E402

import runtime  # noqa: E402,F401
from runtime import ops  # noqa: E402
from runtime.kernels import exops as k  # noqa: E402
from timing import best_us  # noqa: E402

Tensor = torch.Tensor
raw = torch.ops.exops


def generated_model(x, w, g):
    y = ops.scaled_add(x, w, alpha=0.5)
    y = ops.smooth_clamp(y, 2.0)
    y = ops.soft_shrink(y, 0.1)
    y = ops.gated_residual(y, g)
    return ops.row_normalize(y)


# -- the same ops through custom_op


@torch.library.custom_op("bench_compile::scaled_add", mutates_args=())
def scaled_add(self: Tensor, other: Tensor, alpha: float) -> Tensor:
    return raw.scaled_add.default(self, other, alpha=alpha)


@scaled_add.register_fake
def _(self, other, alpha):
    return torch.empty(torch.broadcast_shapes(self.shape, other.shape),
                       dtype=torch.result_type(self, other))


def _scaled_add_setup(ctx, inputs, output):
    ctx.shapes = inputs[0].shape, inputs[1].shape
    ctx.alpha = inputs[2]


def _scaled_add_backward(ctx, grad):
    a, b = ctx.shapes
    return grad.sum_to_size(a), (grad * ctx.alpha).sum_to_size(b), None


scaled_add.register_autograd(_scaled_add_backward, setup_context=_scaled_add_setup)


@torch.library.custom_op("bench_compile::smooth_clamp", mutates_args=())
def smooth_clamp(self: Tensor, limit: float) -> Tensor:
    return raw.smooth_clamp.default(self, limit)


smooth_clamp.register_fake(lambda self, limit: torch.empty_like(self))


def _save_first(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.arg = inputs[1]


def _smooth_clamp_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return raw.smooth_clamp_backward.default(grad, x, ctx.arg), None


smooth_clamp.register_autograd(_smooth_clamp_backward, setup_context=_save_first)


@torch.library.custom_op("bench_compile::soft_shrink", mutates_args=())
def soft_shrink(self: Tensor, lambd: float) -> Tensor:
    return raw.soft_shrink.default(self, lambd)


soft_shrink.register_fake(lambda self, lambd: torch.empty_like(self))


def _soft_shrink_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * (x.abs() > ctx.arg), None


soft_shrink.register_autograd(_soft_shrink_backward, setup_context=_save_first)

gated_residual = torch.library.custom_op("bench_compile::gated_residual",
                                         mutates_args=())(k.gated_residual)
gated_residual.register_fake(k.gated_residual_fake)


def _save_both(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _gated_residual_backward(ctx, grad):
    x, gate = ctx.saved_tensors
    x_grad = grad * (1 + torch.sigmoid(gate))
    gate_grad = (grad * x * torch.sigmoid(gate) * (1 - torch.sigmoid(gate))).sum_to_size(gate.shape)
    return x_grad, gate_grad


gated_residual.register_autograd(_gated_residual_backward, setup_context=_save_both)

row_normalize = torch.library.custom_op("bench_compile::row_normalize",
                                        mutates_args=())(k.row_normalize)
row_normalize.register_fake(lambda x, eps=1e-6: torch.empty_like(x))


def _row_normalize_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return raw.row_normalize_backward.default(grad, x, ctx.arg), None


def _row_normalize_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.arg = inputs[1] if len(inputs) > 1 else 1e-6


row_normalize.register_autograd(_row_normalize_backward, setup_context=_row_normalize_setup)


def custom_op_model(x, w, g):
    y = scaled_add(x, w, 0.5)
    y = smooth_clamp(y, 2.0)
    y = soft_shrink(y, 0.1)
    y = gated_residual(y, g)
    return row_normalize(y)


# -- measuring


def inputs(grad: bool):
    torch.manual_seed(0)
    return [torch.randn(64, 32, requires_grad=grad), torch.randn(32, requires_grad=grad),
            torch.randn(32, requires_grad=grad)]


def run(model, args, train: bool):
    out = model(*args)
    if train:
        out.sum().backward()
    return out


def compile_once(model, train: bool):
    """(seconds to compile and run the first call, the compiled model)."""
    args = inputs(train)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, dynamic=False)
    with torch.enable_grad() if train else torch.no_grad():
        t = time.perf_counter()
        run(compiled, args, train)
        return time.perf_counter() - t, compiled


def measure(models: dict[str, object], train: bool) -> dict[str, tuple[float, float, float]]:
    """name -> (compile seconds, steady-state us per call, eager us per call). Compile times
    are the best of two fresh compilations, taken in alternating order."""
    compile_s = {name: float("inf") for name in models}
    compiled = {}
    for order in (list(models), list(reversed(models))):
        for name in order:
            seconds, compiled[name] = compile_once(models[name], train)
            compile_s[name] = min(compile_s[name], seconds)
    args = inputs(train)
    with torch.enable_grad() if train else torch.no_grad():
        steady = best_us({n: (lambda c=c: run(c, args, train)) for n, c in compiled.items()},
                         number=200, rounds=7)
        eager = best_us({n: (lambda m=m: run(m, args, train)) for n, m in models.items()},
                        number=200, rounds=7)
    return {n: (compile_s[n], steady[n], eager[n]) for n in models}


def warm_up() -> None:
    """Compile something unrelated first: inductor's one-time set-up is nobody's cost here."""
    def f(x):
        return torch.sigmoid(x * 2).sum()

    x = torch.randn(8, requires_grad=True)
    torch.compile(f, fullgraph=True)(x).backward()


def main() -> None:
    import torch._functorch.config

    # One thread: inductor's OpenMP kernels spin at barriers, and on a machine shared with other
    # work (2 cores here) that turns a microsecond reduction into milliseconds, at random.
    torch.set_num_threads(1)

    torch._inductor.config.fx_graph_cache = False
    torch._inductor.config.autotune_local_cache = False
    torch._functorch.config.enable_autograd_cache = False
    for train in (False, True):
        ref = run(generated_model, inputs(train), train)
        torch.testing.assert_close(run(custom_op_model, inputs(train), train), ref)
    warm_up()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; five-op model, "
          "x [64, 32] float32, inductor, fullgraph\n")
    print(f"{'':<22} {'compile s':>9} {'steady us':>10} {'eager us':>9}")
    results = {}
    models = {"generated": generated_model, "custom_op": custom_op_model}
    for train in (False, True):
        for name, r in measure(models, train).items():
            results[name, train] = r
            label = f"{name} ({'train' if train else 'infer'})"
            print(f"{label:<22} {r[0]:>9.2f} {r[1]:>10.1f} {r[2]:>9.1f}")
    print()
    for train in (False, True):
        g, c = results["generated", train], results["custom_op", train]
        mode = "train" if train else "infer"
        print(f"{mode}: generated / custom_op  compile {g[0] / c[0]:.2f}x, steady {g[1] / c[1]:.2f}x,"
              f" eager {g[2] / c[2]:.2f}x")


if __name__ == "__main__":
    main()
