"""Parse throughput over native_functions.yaml: codegen.parse_schema vs torchgen vs c10.

    python bench/bench_parse.py [--rounds N]

Each parser reads the same 2,584 schema strings, interleaved round by round so machine noise hits
all three alike; the best round of each is reported, with ratios. Target: ours / torchgen <= 1.0.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torchgen  # noqa: E402
import yaml  # noqa: E402
from torchgen.model import FunctionSchema as TorchgenSchema  # noqa: E402

from codegen import parse_schema  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    path = os.path.join(os.path.dirname(torchgen.__file__),
                        "packaged/ATen/native/native_functions.yaml")
    with open(path) as f:
        funcs = [e["func"] for e in yaml.load(f, Loader=yaml.CSafeLoader)]
    parsers = {
        "codegen.parse_schema": parse_schema,
        "torchgen FunctionSchema.parse": TorchgenSchema.parse,
        "torch._C.parse_schema (C++)": torch._C.parse_schema,
    }
    t0 = time.perf_counter()
    parse_schema(funcs[0])
    print(f"grammar load (first parse): {(time.perf_counter() - t0) * 1e3:.1f} ms")
    best = {name: float("inf") for name in parsers}
    for _ in range(args.rounds):
        for name, fn in parsers.items():
            t = time.perf_counter()
            for s in funcs:
                fn(s)
            best[name] = min(best[name], time.perf_counter() - t)
    n = len(funcs)
    base = best["torchgen FunctionSchema.parse"]
    print(f"{n} schemas, best of {args.rounds} rounds")
    for name, t in best.items():
        print(f"  {name:32s} {t / n * 1e6:7.1f} us/schema   {t / base:5.2f}x torchgen")
    ratio = best["codegen.parse_schema"] / base
    print(f"ratio codegen/torchgen = {ratio:.2f} (target <= 1.0)")


if __name__ == "__main__":
    main()
