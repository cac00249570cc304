"""Parsing and checking fake rules and derivative formulas: this checkout against another.

The example library is replicated to about N ops (as bench/bench_scale.py does) and loaded once;
each side then re-parses and re-checks every op's fake rule (`shape.parse_fake_rule`) and
derivatives (`formulas.parse_derivatives`) from the texts, in its own fresh process, several
rounds, alternating sides. Printed: the best CPU seconds of each side (process time, steadier than
wall clock on a shared machine) and their ratio. `--codegen-root` names the other checkout (a
"before" figure, e.g. `git archive HEAD~1 | tar -x -C /tmp/before`).

    python bench/bench_rules.py [--codegen-root PATH] [--ops 2000] [--rounds 5] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
from codegen import formulas, load, shape
from codegen.diagnostics import Diagnostics
from codegen.model import DerivativesSpec, Located

folder, repeat = sys.argv[1], int(sys.argv[2])
lib = load.load_library([folder + "/schemas"])
work = []
for op in lib.ops:
    if isinstance(op.fake, shape.FakeRule) and op.fake.text:
        work.append((shape.parse_fake_rule, Located(op.fake.text, op.loc), op.schema))
    d = op.derivatives
    if isinstance(d, formulas.Derivatives):
        spec = DerivativesSpec(
            tuple((f.inputs, Located(f.text, op.loc)) for f in d.formulas)
            + tuple(((n,), Located("non_differentiable", op.loc)) for n in d.non_differentiable),
            d.output_differentiability, op.loc)
        work.append((formulas.parse_derivatives, spec, op.schema))
for fn, text, schema in work[:50]:      # the parsers are built before the clock starts
    fn(text, schema, Diagnostics())
t = time.process_time()
for _ in range(repeat):
    for fn, text, schema in work:
        diags = Diagnostics()
        assert fn(text, schema, diags) is not None, diags.render()
print(json.dumps({"cpu": (time.process_time() - t) / repeat, "items": len(work)}))
"""


def child(codegen_root: Path, folder: Path, repeat: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(codegen_root)]))
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(repeat)], env=env,
                         cwd=folder, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"{codegen_root}: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--codegen-root", type=Path,
                   help="the other checkout, whose codegen package is timed against this one "
                        "(without it, this checkout alone)")
    p.add_argument("--ops", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3, help="passes over the rules per process")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_scale

    sides = {"this": ROOT}
    if args.codegen_root is not None:
        sides["other"] = args.codegen_root.resolve()
    best = {k: float("inf") for k in sides}
    with tempfile.TemporaryDirectory(prefix="bench_rules_") as tmp:
        n = bench_scale.make_library(Path(tmp), args.ops)
        items = 0
        for _ in range(args.rounds):
            for side, root in sides.items():
                r = child(root, Path(tmp), args.repeat)
                best[side] = min(best[side], r["cpu"])
                items = r["items"]
    print(f"{n} ops, {items} fake rules and derivatives sections; best of {args.rounds} "
          f"(CPU s per pass)")
    print(f"  this checkout ({ROOT}): {best['this']:.3f} s")
    if "other" in sides:
        print(f"  other ({sides['other']}): {best['other']:.3f} s")
        print(f"  ratio this/other: {best['this'] / best['other']:.2f}")


if __name__ == "__main__":
    main()
