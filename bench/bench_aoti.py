"""An op through a generated AOTInductor C shim against AOTInductor's proxy executor, per call,
side by side in one run (Note [AOTInductor C shims] in codegen/dest/cpp_aoti.py).

Two packages of the same model, `aoti_compile_and_package`d once with `runtime._aoti.use_c_shims()`
and once without (the proxy executor: arguments serialized at compile time, the op looked up and
unboxed per call), are loaded with `aoti_load_package` and timed on a 4-element tensor. The model
chains CHAIN calls of exops::smooth_clamp, so the per-call figure is
(model time - empty model time) / CHAIN, the empty model (one aten add, also in both) giving the
fixed cost of entering a package. Eager `torch.ops.exops.smooth_clamp` is timed beside them.

Run: `python bench/bench_aoti.py` (after `make build`; two AOT compiles, about a minute).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from torch._inductor import config  # noqa: E402

import runtime  # noqa: E402,F401
from runtime import _aoti  # noqa: E402
from timing import best_us  # noqa: E402

CHAIN = 20


class Chain(torch.nn.Module):
    def forward(self, x):
        for _ in range(CHAIN):
            x = torch.ops.exops.smooth_clamp(x, 2.0)
        return x


class Empty(torch.nn.Module):
    def forward(self, x):
        return x + 1


def package(model: torch.nn.Module, x, path: Path, shims: bool):
    with config.patch({"aot_inductor.custom_ops_to_c_shims": {}}):
        if shims:
            _aoti.use_c_shims()
        ep = torch.export.export(model, (x,))
        return torch._inductor.aoti_load_package(
            torch._inductor.aoti_compile_and_package(ep, package_path=str(path)))


def main() -> None:
    torch.set_num_threads(1)
    x = torch.randn(4)
    with tempfile.TemporaryDirectory() as tmp:
        shim = package(Chain(), x, Path(tmp) / "shim.pt2", shims=True)
        proxy = package(Chain(), x, Path(tmp) / "proxy.pt2", shims=False)
        empty = package(Empty(), x, Path(tmp) / "empty.pt2", shims=False)
        ref = Chain()(x)
        assert torch.equal(shim(x), ref) and torch.equal(proxy(x), ref)
        t = best_us({"shim": lambda: shim(x), "proxy": lambda: proxy(x),
                     "empty": lambda: empty(x),
                     "eager": lambda: torch.ops.exops.smooth_clamp.default(x, 2.0)},
                    number=2000, rounds=7)
    per_shim = (t["shim"] - t["empty"]) / CHAIN
    per_proxy = (t["proxy"] - t["empty"]) / CHAIN
    print(f"torch {torch.__version__}, 1 thread, 4-element float32, {CHAIN} calls of "
          "exops::smooth_clamp per model run")
    print(f"model run: shim {t['shim']:.1f} us, proxy {t['proxy']:.1f} us, "
          f"empty package {t['empty']:.1f} us")
    print(f"per op call: C shim {per_shim:.2f} us, proxy executor {per_proxy:.2f} us, "
          f"eager {t['eager']:.2f} us")
    print(f"ratio shim/proxy per call: {per_shim / per_proxy:.2f}x "
          f"(proxy/shim {per_proxy / per_shim:.2f}x)")


if __name__ == "__main__":
    main()
