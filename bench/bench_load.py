"""Load + validate torch's native_functions.yaml: our loader vs torchgen's `parse_native_yaml`.

The 2,584 entries of `torchgen/packaged/ATen/native/native_functions.yaml` are converted to our op
file format (func qualified with `aten::`, dispatch keys kept where they are in our set, tags kept
when known) in a temporary directory. Each side then runs in a fresh process (what a user's
`check` or `torchgen.gen` pays), several rounds, alternating; we print the medians side by side,
the ratio, and each side's peak traced memory (tracemalloc, in a separate process because tracing
slows Python down).

    python bench/bench_load.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

OUR_KEYS = {"CPU", "CUDA", "Meta", "CompositeImplicitAutograd", "CompositeExplicitAutograd"}


def torchgen_paths() -> tuple[str, str]:
    import torchgen

    native = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native"
    return str(native / "native_functions.yaml"), str(native / "tags.yaml")


def convert(src: str, dst: str) -> int:
    """native_functions.yaml -> our format; returns the number of entries."""
    import yaml

    sys.path.insert(0, str(ROOT))
    from codegen.tags import TAGS

    with open(src) as f:
        entries = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    out = []
    for e in entries:
        op: dict = {"func": "aten::" + e["func"]}
        dispatch = {}
        for keys, kernel in (e.get("dispatch") or {}).items():
            for key in (k.strip() for k in keys.split(",")):
                if key in OUR_KEYS:
                    dispatch[key] = kernel
        if dispatch:
            op["dispatch"] = dispatch
        tags = e.get("tags", [])
        tags = [tags] if isinstance(tags, str) else tags
        tags = [t for t in tags if t in TAGS]
        if tags:
            op["tags"] = tags
        out.append(op)
    with open(dst, "w") as f:
        yaml.dump(out, f, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False,
                  width=1 << 20)
    return len(out)


# --------------------------------------------------------------------------------------------------
# One measurement, run in a child process: `python bench/bench_load.py --child SIDE PATH [--trace]`


def child(side: str, path: str, trace: bool) -> None:
    sys.path.insert(0, str(ROOT))
    if side == "ours":
        from codegen.load import load_library
        from codegen.verify import Rules

        def run():
            return len(load_library([path], rules=Rules.torch_corpus()).ops)
    else:
        from torchgen.gen import parse_native_yaml

        _, tags = torchgen_paths()

        def run():
            # Parses every entry and runs torchgen's checks (error_check_native_functions).
            return len(parse_native_yaml(path, tags).native_functions)

    if trace:
        import tracemalloc

        tracemalloc.start()
        n = run()
        _, peak = tracemalloc.get_traced_memory()
        print(json.dumps({"n": n, "peak": peak}))
    else:
        t = time.perf_counter()
        n = run()
        print(json.dumps({"n": n, "seconds": time.perf_counter() - t}))


def measure(side: str, path: str, trace: bool = False) -> dict:
    args = [sys.executable, __file__, "--child", side, path] + (["--trace"] if trace else [])
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{side} failed:\n{proc.stdout}{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--child", nargs=2, metavar=("SIDE", "PATH"), help=argparse.SUPPRESS)
    p.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.trace)
        return

    native, _ = torchgen_paths()
    with tempfile.TemporaryDirectory() as tmp:
        ours_path = os.path.join(tmp, "native_functions.yaml")
        n = convert(native, ours_path)
        times: dict[str, list[float]] = {"ours": [], "torchgen": []}
        counts = {}
        for _ in range(args.rounds):
            for side, path in (("ours", ours_path), ("torchgen", native)):
                r = measure(side, path)
                times[side].append(r["seconds"])
                counts[side] = r["n"]
        peaks = {side: measure(side, path, trace=True)["peak"]
                 for side, path in (("ours", ours_path), ("torchgen", native))}

    ours, theirs = statistics.median(times["ours"]), statistics.median(times["torchgen"])
    print(f"native_functions.yaml: {n} entries; ops loaded: ours {counts['ours']}, "
          f"torchgen {counts['torchgen']}; median of {args.rounds} fresh-process runs")
    print(f"{'':34}{'ours':>12}{'torchgen':>12}{'ratio':>9}")
    print(f"{'load + validate (s)':34}{ours:12.3f}{theirs:12.3f}{ours / theirs:9.2f}")
    print(f"{'  fastest run (s)':34}{min(times['ours']):12.3f}{min(times['torchgen']):12.3f}"
          f"{min(times['ours']) / min(times['torchgen']):9.2f}")
    po, pt = peaks["ours"] / 2**20, peaks["torchgen"] / 2**20
    print(f"{'peak traced memory (MiB)':34}{po:12.1f}{pt:12.1f}{po / pt:9.2f}")
    print("ratio = ours / torchgen; <= 1.0 means ours is no slower (no larger)")


if __name__ == "__main__":
    main()
