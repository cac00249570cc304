"""Per-call cost of an op whose kernel is a Python function, side by side in one run:

  generated    exops::signbit_mask from schemas/python.yaml, registered by the generated
               runtime._reg_exops (Library.impl of runtime.kernels.exops:signbit_mask + fake)
  Library      the same function, hand-registered: Library("bench_lib", "DEF").define/impl
               + register_fake
  custom_op    the same function under torch.library.custom_op + register_fake
  function     the function called directly (no dispatcher): the kernel's own cost

4-element float32 tensor, no grad; us per call, best of 21 interleaved rounds. The overhead
column subtracts the function's own time. Targets: generated <= 1.1x Library; custom_op >= 3x generated.
Run: `python bench/bench_pykernel.py` (after `make build`).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import runtime  # noqa: E402,F401
from runtime.kernels.exops import signbit_mask  # noqa: E402
from timing import best_us  # noqa: E402


def hand_written_library() -> tuple[torch.library.Library, object]:
    lib = torch.library.Library("bench_lib", "DEF")
    lib.define("signbit_mask(Tensor x) -> Tensor")
    lib.impl("signbit_mask", signbit_mask, "CompositeExplicitAutograd")
    torch.library.register_fake("bench_lib::signbit_mask",
                                lambda x: x.new_empty(x.shape, dtype=torch.bool), lib=lib)
    return lib, torch.ops.bench_lib.signbit_mask.default


def custom_op_version():
    op = torch.library.custom_op("bench_co::signbit_mask", mutates_args=())(signbit_mask)
    op.register_fake(lambda x: x.new_empty(x.shape, dtype=torch.bool))
    return op


def main() -> None:
    x = torch.randn(4)
    generated = torch.ops.exops.signbit_mask.default
    _keep, library_op = hand_written_library()
    custom = custom_op_version()
    for f in (generated, library_op, custom):
        assert torch.equal(f(x), signbit_mask(x))

    t = best_us({
        "generated": lambda: generated(x),
        "Library": lambda: library_op(x),
        "custom_op": lambda: custom(x),
        "function": lambda: signbit_mask(x),
    }, number=10000, rounds=21)
    over = {k: t[k] - t["function"] for k in ("generated", "Library", "custom_op")}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; exops::signbit_mask "
          "on a 4-element float32 tensor; us per call (best of 21 interleaved rounds x 10000)\n")
    print(f"{'':<12} {'per call':>9} {'overhead':>9}")
    for k in ("generated", "Library", "custom_op"):
        print(f"{k:<12} {t[k]:>9.2f} {over[k]:>9.2f}")
    print(f"{'function':<12} {t['function']:>9.2f}")
    print()
    print(f"generated / Library:   {t['generated'] / t['Library']:.2f}x per call, "
          f"{over['generated'] / over['Library']:.2f}x overhead   (target <= 1.1x)")
    print(f"custom_op / generated: {t['custom_op'] / t['generated']:.2f}x per call, "
          f"{over['custom_op'] / over['generated']:.2f}x overhead   (target >= 3x)")


if __name__ == "__main__":
    main()
