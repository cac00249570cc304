"""`check` and `generate` time against library size: the example library replicated to N ops.

The example library (schemas/*.yaml: C++ and Python kernels, fake rules, Python fakes, formulas
calling library ops, in-place/out= variants, vmap and autocast rules) is copied R times into a
temp dir under new names: op, kernel and Python function names get a `_r<i>` suffix (in-place ops
keep their trailing underscore: `soft_shrink_r3_`), and each copy's Python kernels live in their
own module `bench_kernels.exops_r<i>`, written beside the op files so `check` can resolve them.
All copies share the namespace `exops`, so one `_reg_exops.py` and one `TORCH_LIBRARY` hold them.

Each command runs as `python -m codegen ...` in a fresh process (what a user's `make check` or
`make codegen` pays, interpreter start-up included), several rounds, best of each; every run
starts from scratch (no load cache, `generate` into an empty output root). Both wall-clock and CPU (user + system) time are
shown: on a shared machine the CPU figure is the steadier one. Linear scaling means per-op times
stay flat and the 4000/500 ratio is about 8 (a little less: start-up is a fixed cost).
Target: 2,000 ops generated in under 2 s.

    python bench/bench_scale.py [--sizes 500 2000 4000] [--rounds N] [--codegen-root PATH]
                                [--inputs CHECKOUT]
                                [--torchgen] [--edit] [--stages] [--tmp DIR] [--jobs N]

`--edit` times the edit loop: `generate` after one op file changed (the load cache of the run
before in place) against a `generate` from scratch, as a ratio. It also times the floor under any
run, a process that only starts Python and imports what `generate` imports.

`--stages` splits one `generate` from scratch into its stages (imports, load, whole-library
checks, each generator, write), timed inside one fresh process, best of the rounds per stage.

`--jobs N` runs opgen with OPGEN_JOBS=N (codegen.jobs; default: opgen's own choice, the free
cores for a library this size); `--jobs 1` is the one-process figure. `--stages` always runs in
one process, so that each stage is timed where it runs.

`--codegen-root` times another checkout's codegen (a "before" figure) on the same inputs.
`--torchgen` also times torchgen's whole `python -m torchgen.gen` on native_functions.yaml, once.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
KERNEL_MODULE = "runtime.kernels.exops"


def use_inputs(checkout: Path) -> None:
    """Replicate the example library of `checkout` (this one by default): its full-API op files
    (the stable-ABI example, `abi:`, and the known sample failures file are left out) and Python
    kernels. `--inputs` a checkout from before a format change times old and new codegen on the
    same text."""
    global SCHEMAS, KERNEL_FILE
    SCHEMAS = [p for p in sorted((checkout / "schemas").glob("*.yaml"))
               if p.name != "sample_failures.yaml"
               and "abi" not in (yaml.safe_load(p.read_text(encoding="utf-8")) or {})]
    KERNEL_FILE = checkout / "runtime" / "kernels" / "exops.py"


SCHEMAS: list[Path] = []
KERNEL_FILE = ROOT / "runtime" / "kernels" / "exops.py"
use_inputs(ROOT)
IDENT = re.compile(r"[A-Za-z_]\w*")


def renamed_names() -> set[str]:
    """Every op name, C++ kernel name and Python kernel function of the example library."""
    names: set[str] = set()
    for path in SCHEMAS:
        for op in yaml.safe_load(path.read_text())["ops"]:
            names.add(op["func"].split("(")[0].split(".")[0].split("::")[-1])
            for kernel in (op.get("dispatch") or {}).values():
                if ":" not in kernel:
                    names.add(kernel)
    names |= set(re.findall(r"^def (\w+)", KERNEL_FILE.read_text(), re.M))
    return names


def replica(text: str, i: int, names: set[str]) -> str:
    """`text` with every name of the library renamed for copy `i`."""

    def rename(m: re.Match) -> str:
        word = m.group()
        if word not in names:
            return word
        if word.endswith("_") and not word.endswith("__"):   # in-place: the suffix goes inside
            return f"{word[:-1]}_r{i}_"
        return f"{word}_r{i}"

    text = text.replace(f"{KERNEL_MODULE}:", f"bench_kernels.exops_r{i}:")
    return IDENT.sub(rename, text)


def make_library(folder: Path, n_ops: int) -> int:
    """Writes about `n_ops` ops (whole copies of the example) under `folder`; returns the count."""
    per_copy = sum(len(yaml.safe_load(p.read_text())["ops"]) for p in SCHEMAS)
    copies = max(1, round(n_ops / per_copy))
    names = renamed_names()
    (folder / "schemas").mkdir(parents=True)
    kernels = folder / "bench_kernels"
    kernels.mkdir()
    (kernels / "__init__.py").write_text("")
    kernel_text = KERNEL_FILE.read_text()
    for i in range(copies):
        for path in SCHEMAS:
            (folder / "schemas" / f"{path.stem}_r{i}.yaml").write_text(
                replica(path.read_text(), i, names))
        (kernels / f"exops_r{i}.py").write_text(replica(kernel_text, i, names))
    return copies * per_copy


PYCACHE = Path(tempfile.gettempdir()) / "opgen-bench-pycache"
TMP: str | None = None     # where libraries and output roots go (--tmp), else the system's
JOBS: str | None = None    # OPGEN_JOBS of the timed processes (--jobs), else opgen's default


def environment(cwd: Path, codegen_root: Path) -> dict[str, str]:
    """The timed processes' environment: codegen importable, with its bytecode compiled, as an
    installed package has it (pip compiles it; PYTHONDONTWRITEBYTECODE would make every run
    compile opgen's modules again). Bytecode goes to a cache outside the checkout."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONDONTWRITEBYTECODE", "OPGEN_JOBS")}
    if JOBS is not None:
        env["OPGEN_JOBS"] = JOBS
    env.update(PYTHONPATH=os.pathsep.join([str(cwd), str(codegen_root)]),
               PYTHONPYCACHEPREFIX=str(PYCACHE))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(codegen_root / "codegen")],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    return env


def run(args: list[str], cwd: Path, codegen_root: Path, *, cold: bool = False
        ) -> tuple[float, float]:
    """Wall-clock and CPU (user + system) seconds of one fresh `python ARGS` process; `cold`:
    without the load cache (Note [Incremental loading]), every op file read and parsed."""
    env = environment(cwd, codegen_root)
    if cold:
        env["OPGEN_NO_CACHE"] = "1"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"`{' '.join(args)}` failed in {cwd}:\n{proc.stdout}{proc.stderr[-4000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def fresh_dir(folder: Path) -> Path:
    """A new empty output root: the old ones stay until the end, as deleting a tree just before
    timing would charge its file system work to the next run."""
    n = sum(1 for _ in folder.glob("out*"))
    out = folder / f"out{n}"
    out.mkdir()
    # The output root is the project, so the op files are linked into it (generate refuses op
    # files outside the project).
    (out / "schemas").symlink_to(folder / "schemas")
    return out


def keep_best(best: dict[str, tuple[float, float]], key: str, sample: tuple[float, float]
              ) -> None:
    """best[key] = the smaller wall-clock and the smaller CPU time of it and `sample`."""
    wall, cpu = best.get(key, (math.inf, math.inf))
    best[key] = (min(wall, sample[0]), min(cpu, sample[1]))


def time_size(n_ops: int, rounds: int, codegen_root: Path) -> tuple[int, dict[str, tuple]]:
    """(ops, {command: (best wall s, best CPU s)})."""
    with tempfile.TemporaryDirectory(prefix="bench_scale_", dir=TMP) as tmp:
        folder = Path(tmp)
        n = make_library(folder, n_ops)
        best: dict[str, tuple[float, float]] = {}
        for _ in range(rounds):
            for name in ("check", "generate"):
                out = fresh_dir(folder)
                args = ["-m", "codegen", name, "--root", str(out), str(out / "schemas")]
                keep_best(best, name, run(args, folder, codegen_root, cold=True))
        return n, best


def time_edit(n_ops: int, rounds: int, codegen_root: Path) -> tuple[int, dict[str, tuple]]:
    """The edit loop on a library of `n_ops`: `generate` from scratch (no load cache, empty output
    root), then again after editing one op file (an op's doc), with the load cache of the run
    before (Note [Incremental loading]). (ops, {run: (best wall s, best CPU s)})."""
    with tempfile.TemporaryDirectory(prefix="bench_edit_", dir=TMP) as tmp:
        folder = Path(tmp)
        n = make_library(folder, n_ops)
        edited = sorted((folder / "schemas").glob("*.yaml"))[0]
        best: dict[str, tuple[float, float]] = {}
        for i in range(rounds):
            # The floor of any run: the interpreter and the modules a generate imports.
            keep_best(best, "start-up", run(["-c", "import codegen.__main__"], folder,
                                            codegen_root))
            out = fresh_dir(folder)
            args = ["-m", "codegen", "generate", "--root", str(out), str(out / "schemas")]
            keep_best(best, "full", run(args, folder, codegen_root, cold=True))
            run(args, folder, codegen_root)          # fills the cache
            text = edited.read_text()
            edited.write_text(text.replace("doc: ", f"doc: (edit {i}) ", 1))
            keep_best(best, "one file edited", run(args, folder, codegen_root))
        return n, best


# Runs inside the timed process, in the library's folder: argv = [output root].
STAGES = r"""
import gc, sys, time
t0 = time.perf_counter()
from pathlib import Path
from codegen import config, files, gen, load
from codegen.dest import cpp_kernel_index, ninja
from codegen.rendering import output_dir
times = {"import": time.perf_counter() - t0}
gc.disable()      # as the command line does (codegen.cli.run_in_project)


def timed(name, fn):
    def run(*args, **kwargs):
        t = time.perf_counter()
        result = fn(*args, **kwargs)
        times[name] = times.get(name, 0.0) + time.perf_counter() - t
        return result
    return run


# gen.render itself runs, each step it takes timed under its own name.
steps = [(name, timed(name, g)) for name, g in gen.generators()]
gen.generators = lambda: steps
cpp_kernel_index.generate = timed("cpp-index", cpp_kernel_index.generate)
ninja.generate = timed("ninja", ninja.generate)
files.FileSet.seal = timed("seal", files.FileSet.seal)
schemas = str(Path.cwd() / "schemas")
with config.use(config.default_project(Path(sys.argv[1]))) as project:
    lib = timed("load", load.load_library)([schemas])
    diags = lib.diagnostics()
    timed("check", gen.check_library)(lib, diags, project)
    out = gen.render(lib, diags, project)
    timed("write", files.write)(Path("."), out, prune_dir=output_dir(project))
print(repr(times))
"""


def time_stages(n_ops: int, rounds: int, codegen_root: Path) -> tuple[int, dict[str, float]]:
    """(ops, {stage: best seconds}) of `generate` from scratch, stage by stage."""
    import ast

    with tempfile.TemporaryDirectory(prefix="bench_stages_", dir=TMP) as tmp:
        folder = Path(tmp)
        n = make_library(folder, n_ops)
        env = dict(environment(folder, codegen_root), OPGEN_JOBS="1")
        best: dict[str, float] = {}
        for _ in range(rounds):
            proc = subprocess.run([sys.executable, "-c", STAGES, str(fresh_dir(folder))], cwd=folder, env=env,
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"stage timing failed:\n{proc.stderr[-4000:]}")
            for k, v in ast.literal_eval(proc.stdout.strip().splitlines()[-1]).items():
                best[k] = min(best.get(k, math.inf), v)
        return n, best


def time_torchgen() -> tuple[float, float]:
    """Wall-clock and CPU seconds of torchgen's whole code generation for ATen."""
    import torchgen

    source = Path(torchgen.__file__).parent / "packaged" / "ATen"
    with tempfile.TemporaryDirectory(prefix="bench_torchgen_") as tmp:
        return run(["-m", "torchgen.gen", "-s", str(source), "-d", tmp], Path(tmp), ROOT)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[500, 2000, 4000])
    p.add_argument("--inputs", type=Path, default=ROOT,
                   help="the checkout whose example library is replicated (default: this one)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--codegen-root", type=Path, default=ROOT,
                   help="checkout whose codegen package is timed (default: this one)")
    p.add_argument("--edit", action="store_true",
                   help="time the edit loop instead: one op file edited against a full run")
    p.add_argument("--torchgen", action="store_true",
                   help="also time `python -m torchgen.gen` on native_functions.yaml")
    p.add_argument("--stages", action="store_true",
                   help="split one generate from scratch into its stages instead")
    p.add_argument("--tmp", metavar="DIR",
                   help="put the libraries and output roots there (e.g. /dev/shm: a tmpfs takes "
                        "this machine's disk out of the figures)")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="OPGEN_JOBS of the timed processes (default: opgen's own choice)")
    args = p.parse_args()
    global TMP, JOBS
    TMP = args.tmp
    JOBS = None if args.jobs is None else str(args.jobs)
    use_inputs(args.inputs.resolve())
    if args.stages:
        for size in args.sizes:
            n, best = time_stages(size, args.rounds, args.codegen_root.resolve())
            total = sum(best.values())
            print(f"  {n} ops, generate from scratch by stage (best of {args.rounds}; "
                  f"sum {total:.2f} s):")
            for k, v in best.items():
                if v >= 0.005:
                    print(f"    {k:<12}{v:7.2f} s {v / total:6.1%}")
        return
    if args.edit:
        for size in args.sizes:
            n, best = time_edit(size, args.rounds, args.codegen_root.resolve())
            (fw, fc), (ew, ec) = best["full"], best["one file edited"]
            sw, sc = best["start-up"]
            print(f"  {n} ops: generate from scratch {fw:.2f} s (CPU {fc:.2f}), one op file "
                  f"edited {ew:.2f} s (CPU {ec:.2f}): ratio {ew / fw:.2f} (CPU {ec / fc:.2f}); "
                  f"start-up and imports alone {sw:.2f} s (CPU {sc:.2f}): ratio {sw / fw:.2f} "
                  f"(CPU {sc / fc:.2f})", flush=True)
        return

    rows = []
    for size in args.sizes:
        n, best = time_size(size, args.rounds, args.codegen_root.resolve())
        rows.append((n, best))
        print(f"  {n} ops: " + ", ".join(f"{k} {w:.2f} s (CPU {c:.2f} s)"
                                         for k, (w, c) in best.items()), flush=True)
    print(f"codegen from {args.codegen_root}; a fresh process per command, best of {args.rounds} "
          f"(wall clock; CPU = user + system, steadier on a shared machine); OPGEN_JOBS="
          f"{JOBS or 'unset'}")
    print(f"{'ops':>6}{'check s':>10}{'CPU s':>8}{'ms/op':>8}{'generate s':>13}{'CPU s':>8}"
          f"{'ms/op':>8}")
    for n, best in rows:
        (cw, cc), (gw, gc) = best["check"], best["generate"]
        print(f"{n:6d}{cw:10.2f}{cc:8.2f}{cw / n * 1e3:8.2f}{gw:13.2f}{gc:8.2f}"
              f"{gw / n * 1e3:8.2f}")
    (n0, b0), (n1, b1) = rows[0], rows[-1]
    if n1 != n0:
        ratios = ", ".join(f"{k} {b1[k][0] / b0[k][0]:.2f} (CPU {b1[k][1] / b0[k][1]:.2f})"
                           for k in b0)
        print(f"ratio {n1}/{n0} ops = {n1 / n0:.2f}: {ratios}; linear scaling gives about the op "
              "ratio (less, as start-up is a fixed cost)")
    if args.torchgen:
        wall, cpu = time_torchgen()
        print(f"torchgen.gen on native_functions.yaml (once): {wall:.1f} s, CPU {cpu:.1f} s")


if __name__ == "__main__":
    main()
