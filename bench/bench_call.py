"""Per-call overhead of the generated API on tiny tensors, side by side in one run:

  runtime.ops.<name>(...)              the generated binding (the op's OpOverload itself)
  torch.ops.exops.<op>.default(...)    the raw C++ op through the dispatcher
  custom_op(...)                       the same C++ kernel wrapped with torch.library.custom_op
                                       (what an extension gets writing its ops in Python)

Ops: select_above (functional, C++ only), soft_shrink_ (in place: its generated C++ Autograd kernel
runs soft_shrink's autograd and copies into self, Note [Autograd of mutating ops]) and
smooth_clamp (its Autograd kernel is generated C++, Note [C++ autograd] in
codegen/dest/cpp_autograd.py, so a call without grad costs about what the op costs without
autograd; the custom_op twin gets register_autograd, a Python autograd kernel). The stable-ABI
comparison at the end runs exstable::scale_, whose Autograd kernel is Python (the stable ABI has
no autograd API). bench_autograd.py compares the C++ and the old Python autograd paths.

Targets: runtime.ops <= 1.1x the raw op; custom_op >= 3x slower than runtime.ops.
Last, the stable ABI's boxing cost: a stable-ABI op against a full-API op of the same schema shape
(stable_vs_full), as a ratio in the same run.
Run: `python bench/bench_call.py` (after `make build`).
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import runtime  # noqa: E402,F401
from runtime import ops  # noqa: E402

Tensor = torch.Tensor
raw = torch.ops.exops


@torch.library.custom_op("bench_call::select_above", mutates_args=())
def select_above_co(self: Tensor, threshold: float) -> Tensor:
    return raw.select_above.default(self, threshold)


@torch.library.custom_op("bench_call::soft_shrink_", mutates_args=("self",))
def soft_shrink_co(self: Tensor, lambd: float) -> None:
    raw.soft_shrink_.default(self, lambd)


@torch.library.custom_op("bench_call::smooth_clamp", mutates_args=())
def smooth_clamp_co(self: Tensor, limit: float) -> Tensor:
    return raw.smooth_clamp.default(self, limit)


def _smooth_clamp_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.limit = inputs[1]


def _smooth_clamp_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return raw.smooth_clamp_backward.default(grad, x, ctx.limit), None


smooth_clamp_co.register_autograd(_smooth_clamp_backward, setup_context=_smooth_clamp_setup)


def per_call_us(fn, number: int = 10000, repeat: int = 5) -> float:
    fn()
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    x = torch.randn(4)
    y = torch.randn(4)
    cases = [
        ("select_above", lambda: ops.select_above(x, 0.5),
         lambda: raw.select_above.default(x, 0.5), lambda: select_above_co(x, 0.5)),
        ("soft_shrink_", lambda: ops.soft_shrink_(y, 0.0),
         lambda: raw.soft_shrink_.default(y, 0.0), lambda: soft_shrink_co(y, 0.0)),
        ("smooth_clamp", lambda: ops.smooth_clamp(x, 2.0),
         lambda: raw.smooth_clamp.default(x, 2.0), lambda: smooth_clamp_co(x, 2.0)),
    ]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, 4-element float32 "
          "tensors; us per call (best of 3 rounds x 5 x 10000)\n")
    print(f"{'op':<14} {'runtime.ops':>11} {'torch.ops':>10} {'custom_op':>10}   "
          f"{'runtime/raw':>11} {'custom_op/runtime':>17}")
    for name, ours, raw_call, custom in cases:
        # Interleave the three so drift (frequency, caches) hits each alike.
        t_ours, t_raw, t_custom = [], [], []
        for _ in range(3):
            t_ours.append(per_call_us(ours))
            t_raw.append(per_call_us(raw_call))
            t_custom.append(per_call_us(custom))
        a, b, c = min(t_ours), min(t_raw), min(t_custom)
        print(f"{name:<14} {a:>11.2f} {b:>10.2f} {c:>10.2f}   {a / b:>10.2f}x {c / a:>16.2f}x")
    print("\ntargets: runtime/raw <= 1.10x, custom_op/runtime >= 3x")
    stable_vs_full(y)


def stable_vs_full(y: Tensor) -> None:
    """The stable ABI's boxing (IValue -> StableIValue -> TORCH_BOX unboxing, and back) against
    the full API's unboxed call: two in-place ops of the same schema shape `(Tensor(a!) self,
    float) -> Tensor(a!)` on 4 elements, so the per-element work is negligible beside the call:
    exstable::scale_ (abi: stable) and exops::soft_shrink_ (full API), both through torch.ops."""
    stable = torch.ops.exstable.scale_.default
    full = raw.soft_shrink_.default
    t_stable, t_full = [], []
    for _ in range(3):
        t_stable.append(per_call_us(lambda: stable(y, 1.0)))
        t_full.append(per_call_us(lambda: full(y, 0.0)))
    a, b = min(t_stable), min(t_full)
    print(f"\nstable ABI vs full API, in-place (Tensor(a!), float) op, us per call:\n"
          f"  exstable::scale_ (stable) {a:.2f}   exops::soft_shrink_ (full) {b:.2f}   "
          f"stable/full {a / b:.2f}x")


if __name__ == "__main__":
    main()
