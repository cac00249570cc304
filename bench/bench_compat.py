"""`bc-check` on a 2,000-op library: its cost beyond loading the op files, and torch's
FunctionSchema.is_backward_compatible_with (FBGEMM's gate) on the same schema pairs.

The library is bench_scale's: the example library replicated to about N ops. Timed in one
process, best of several rounds, interleaved:

- load: `load_library` (parse and verify the op files), what every command pays first;
- snapshot: rendering the snapshot text of every op's contract;
- bc-check, unchanged: reading the snapshot and comparing (the usual CI case);
- bc-check, all changed: every op changed compatibly since the snapshot: where its last argument
  has a default, the snapshot's schema lacks it (a new trailing argument), else the snapshot
  spells it otherwise (`f( Tensor ...`); each op takes the full path: the old schema parsed,
  compared argument by argument, then the rest of the contract;
- torch: `parse_schema(new).is_backward_compatible_with(parse_schema(old))` on the same pairs,
  schemas only (no tags, gradients, vmap, autocast, devices; no locations).

Then the two commands as a user runs them, each a fresh process: `list` (load and print) and
`bc-check`; their difference is what bc-check adds to loading. Wall clock and CPU time (user +
system) are both shown: on a shared machine the CPU figure is the steadier one. Target: under a
second beyond loading at 2,000 ops.

    python bench/bench_compat.py [--ops 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_scale  # noqa: E402

from codegen import compat  # noqa: E402
from codegen.dest.py_ops import python_names  # noqa: E402
from codegen.diagnostics import Diagnostics  # noqa: E402
from codegen.load import load_library  # noqa: E402
from codegen.model import FunctionSchema  # noqa: E402
from codegen.parse import parse_schema  # noqa: E402


def best(fns: dict, rounds: int) -> dict[str, tuple[float, float]]:
    """Best wall-clock and CPU seconds of each function, rounds interleaved."""
    out = {k: (float("inf"), float("inf")) for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t, c = time.perf_counter(), time.process_time()
            f()
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            out[k] = (min(out[k][0], wall), min(out[k][1], cpu))
    return out


def older(text: str) -> str:
    """A schema an op could have had before its current one, compatibly."""
    s = parse_schema(text)
    last = s.arguments[-1] if s.arguments else None
    if last is not None and last.default is not None and not last.is_write:
        return str(FunctionSchema(s.name, s.arguments[:-1], s.returns))
    return text.replace("(", "( ", 1)


def process(args: list[str], cwd: Path) -> tuple[float, float]:
    """Wall-clock and CPU (user + system) seconds of a fresh `python -m codegen ARGS`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(cwd), str(ROOT)]))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "codegen", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"`{' '.join(args)}` failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()

    import torch

    with tempfile.TemporaryDirectory(prefix="bench_compat_") as tmp:
        folder = Path(tmp)
        n = bench_scale.make_library(folder, args.ops)
        os.chdir(folder)
        lib = load_library(["schemas"])
        lock = folder / "schemas" / "opgen.lock"
        api = python_names(lib, Diagnostics())
        lock.write_text(compat.snapshot_text(lib, api))
        data = json.loads(lock.read_text())
        for entry in data["ops"].values():
            entry["schema"] = older(entry["schema"])
        respelled = folder / "respelled.lock"
        respelled.write_text(json.dumps(data, indent=1))

        def bc_check(path: Path) -> None:
            diags = Diagnostics()
            snap = compat.read_snapshot(str(path), diags)
            assert snap is not None
            report = compat.compare(lib, snap, api)
            compat.diagnose(report, lib, snap, diags)
            assert not diags.has_errors, diags.render()[:2000]

        pairs = [(e["schema"], str(op.schema)) for op, e in
                 zip(sorted(lib.ops, key=lambda o: str(o.name)),
                     (data["ops"][k] for k in sorted(data["ops"])))]

        def torch_check() -> None:
            for old, new in pairs:
                assert torch._C.parse_schema(new).is_backward_compatible_with(
                    torch._C.parse_schema(old))

        t = best({
            "load": lambda: load_library(["schemas"]),
            "snapshot": lambda: compat.snapshot_text(lib, api),
            "bc-check, unchanged": lambda: bc_check(lock),
            "bc-check, all changed": lambda: bc_check(respelled),
            "torch is_backward_compatible_with": torch_check,
        }, args.rounds)
        cli = {"list": (float("inf"),) * 2, "bc-check": (float("inf"),) * 2}
        for _ in range(args.rounds):
            for k in cli:
                wall, cpu = process([k], folder)
                cli[k] = (min(cli[k][0], wall), min(cli[k][1], cpu))

    print(f"{n} ops (bench_scale's replicated example), in one process, best of {args.rounds} "
          "(CPU: this process's; steadier than wall clock on a shared machine):")
    load = t["load"][1]
    for k, (wall, cpu) in t.items():
        print(f"  {k:36s} {wall * 1e3:8.1f} ms wall {cpu * 1e3:8.1f} ms CPU "
              f"{cpu / load:7.3f} x load (CPU)")
    print("  bc-check (all changed) / torch's schema-only check on the same pairs (CPU): "
          f"{t['bc-check, all changed'][1] / t['torch is_backward_compatible_with'][1]:.1f}")
    print("fresh processes, interpreter start-up included, best of each:")
    for k, (wall, cpu) in cli.items():
        print(f"  opgen {k:10s} {wall:6.2f} s wall {cpu:6.2f} s CPU")
    beyond = cli["bc-check"][1] - cli["list"][1]
    print(f"  bc-check beyond loading (bc-check - list, CPU): {beyond:.2f} s; in process "
          f"{t['bc-check, unchanged'][1]:.2f} s unchanged, {t['bc-check, all changed'][1]:.2f} s "
          "all changed (target: under 1 s)")


if __name__ == "__main__":
    main()
