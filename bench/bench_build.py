"""Build figures of the example library, in a scratch copy of the repository's op files and kernel
sources (the repository's own build/ is left alone):

  1. cold build: codegen + ninja from nothing;
  2. no-op `make codegen && make build`: wall time, files rewritten (target: none), ninja's verdict
     (target: "no work to do"), under 1 s;
  3. one kernel source edited: objects recompiled (target: that one);
  4. one schema file edited (a tag of one op in schemas/python.yaml, then in schemas/core.yaml):
     objects recompiled (target: that file's registration shard only; the stamp is not a TU
     with torch headers and compiles in milliseconds);
  5. edits no C++ sees, each above most ops of schemas/core.yaml, so every line below moves: a doc
     string, a sample, a derivative formula, a fake rule that stays Python (target: nothing
     recompiled, nothing relinked);
  6. one op's schema (a default of weighted_mse): target: the kernel source including that op's
     header, the file's registration shard and the stamp.

Each step runs `python -m codegen generate schemas` then `python -m codegen.build`, as the Makefile
targets do. Run: `python bench/bench_build.py [--keep DIR]`.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import scratch  # noqa: E402


def snapshot(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_mtime_ns
            for d in ("generated", "build") for p in (root / d).rglob("*") if p.is_file()}


def step(root: Path) -> tuple[float, str, str]:
    t = time.perf_counter()
    gen = scratch.generate(root)
    built = scratch.build(root)
    elapsed = time.perf_counter() - t
    if gen.returncode != 0 or built.returncode != 0:
        raise SystemExit(gen.stdout + gen.stderr + built.stdout + built.stderr)
    return elapsed, gen.stdout, built.stdout


def compiled(ninja_out: str) -> list[str]:
    """What ninja compiled: the sources of its CXX/NVCC/STAMP steps."""
    return re.findall(r"^\[\d+/\d+\] (?:CXX|NVCC|STAMP) (\S+)", ninja_out, re.M)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="work in this directory and keep it")
    args = parser.parse_args()
    tmp = None if args.keep else tempfile.TemporaryDirectory(prefix="opgen-bench-build-")
    root = Path(args.keep or tmp.name)
    shutil.copytree(REPO / "schemas", root / "schemas")
    shutil.copytree(REPO / "runtime" / "csrc", root / "runtime" / "csrc")

    rows = []
    t, _, out = step(root)
    rows.append(("cold build (codegen + ninja)", t, compiled(out)))

    before = snapshot(root)
    t, gen_out, out = step(root)
    rewritten = sorted(k for k, v in snapshot(root).items() if before.get(k) != v)
    noop_ok = "ninja: no work to do." in out
    rows.append(("no-op make codegen && make build", t, compiled(out)))

    edit(root / "runtime/csrc/exops/pointwise.cpp", "namespace exops {",
         "// edited by bench_build\nnamespace exops {")
    t, _, out = step(root)
    rows.append(("edit runtime/csrc/exops/pointwise.cpp", t, compiled(out)))

    edit(root / "schemas/python.yaml", "tags: [pointwise]", "tags: [pointwise, core]")
    t, _, out = step(root)
    rows.append(("edit a tag in schemas/python.yaml", t, compiled(out)))

    edit(root / "schemas/core.yaml", "tags: [dynamic_output_shape]",
         "tags: [dynamic_output_shape, core]")
    t, _, out = step(root)
    rows.append(("edit a tag in schemas/core.yaml", t, compiled(out)))

    core = root / "schemas/core.yaml"
    for label, old, new in [
        ("edit a doc string (core.yaml, 1st op)",
         "      self + alpha * other, broadcasting and promoting dtypes like torch.add.\n",
         "      self + alpha * other, broadcasting and promoting dtypes like torch.add.\n"
         "      (A second line, added by bench_build.)\n"),
        ("edit a sample (core.yaml, 1st op)",
         "      - {self: {shape: [N=3, M=4]}, other: {shape: [M]}, alpha: 2.5}\n",
         "      - {self: {shape: [N=3, M=4]}, other: {shape: [M]}, alpha: 2.5}\n"
         "      - {self: {shape: [7]}, other: {shape: [7]}, alpha: 0.5}\n"),
        ("edit a formula (core.yaml, 1st op)",
         "other: unbroadcast(grad * alpha, other)", "other: unbroadcast(alpha * grad, other)"),
        ("edit a Python-side fake rule (select_above)",
         "fake: empty([dynamic()])", "fake: empty([dynamic(max=64)])"),
        ("edit one schema (weighted_mse default)",
         'str reduction="mean"', 'str reduction="sum"'),
    ]:
        edit(core, old, new)
        t, _, out = step(root)
        rows.append((label, t, compiled(out)))

    print("example library (schemas/core.yaml + schemas/python.yaml, 3 kernel sources); "
          "seconds, wall clock, 2 processes per step as `make codegen && make build`\n")
    for label, seconds, units in rows:
        print(f"  {label:<45} {seconds:>7.2f} s   compiled {len(units)}: {', '.join(units) or '-'}")
    print(f"\nno-op: ninja says {'no work to do' if noop_ok else 'it had work'}; "
          f"{gen_out.strip().splitlines()[-1]}; files rewritten: {len(rewritten)}"
          + (f" ({', '.join(rewritten)})" if rewritten else ""))
    print("targets: no-op < 1 s with nothing rewritten; a kernel edit recompiles that source; a "
          "tag edit recompiles that file's shard (+ the millisecond stamp); doc, sample, formula "
          "and Python-side fake rule edits recompile nothing; a schema edit recompiles what "
          "includes that op's header, the shard and the stamp")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
