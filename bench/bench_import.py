"""Import + registration time of a generated library of 1,000 ops, side by side in one run with
the same 1,000 ops made with `torch.library.custom_op` + `register_fake` (and, for reference, with
`Library.define` + `impl` + `register_fake`, the hand-written style vLLM uses).

A synthetic op file (1,000 ops `syn::op<i>(Tensor self, float alpha) -> Tensor`, each with a C++
kernel and a fake rule, in 8 files) is generated and built in a temp dir, exactly as `make codegen
build` would; then each variant is timed in fresh interpreters, after `import torch`.

Each `fake: like(self)` rule is compiled into the library as a C++ Meta kernel
(codegen/dest/cpp_meta.py), so `import runtime` registers no Python fake kernels; the script
checks that and reports how many ops have each.

Target: `import runtime` <= 1/10 of custom_op + register_fake.
Run: `python bench/bench_import.py [--ops N] [--repeat R]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import scratch  # noqa: E402

FILES = 8


def synthetic_root(root: Path, n: int) -> None:
    per = (n + FILES - 1) // FILES
    schemas, kernels = {}, {}
    for f in range(FILES):
        ids = range(f * per, min(n, (f + 1) * per))
        schemas[f"syn{f}.yaml"] = "namespace: syn\nops:\n" + "".join(
            f"  - func: op{i}(Tensor self, float alpha) -> Tensor\n"
            f"    dispatch: {{CPU: op{i}_cpu}}\n"
            f"    fake: like(self)\n" for i in ids)
        kernels[f"syn/k{f}.cpp"] = f"#include <syn/syn{f}.h>\n\nnamespace syn {{\n" + "".join(
            f"at::Tensor op{i}_cpu(const at::Tensor& self, double alpha) {{ return self.mul(alpha); }}\n"
            for i in ids) + "}  // namespace syn\n"
    scratch.make_root(root, schemas, kernels)


TIMED = {
    "runtime": """
import runtime
assert len(runtime.ops.__all__) == N
""",
    "load_library": """
import glob
torch.ops.load_library(glob.glob(ROOT + "/build/libsyn_ops.so")[0])
""",
    "custom_op": """
def body(self: torch.Tensor, alpha: float) -> torch.Tensor:
    return self * alpha
def fake(self, alpha):
    return torch.empty_like(self)
for i in range(N):
    op = torch.library.custom_op(f"co::op{i}", body, mutates_args=())
    op.register_fake(fake)
""",
    "define_impl": """
lib = torch.library.Library("lib", "DEF")
def body(self, alpha):
    return self * alpha
def fake(self, alpha):
    return torch.empty_like(self)
for i in range(N):
    lib.define(f"op{i}(Tensor self, float alpha) -> Tensor")
    lib.impl(f"op{i}", body, "CPU")
    torch.library.register_fake(f"lib::op{i}", fake, lib=lib)
""",
}


# `import runtime` again, with Python's bytecode cache on (`__pycache__` of the generated modules,
# as a user's interpreter keeps it); the other rows run as this interpreter's environment says
# (PYTHONDONTWRITEBYTECODE=1 compiles the generated modules from source on every import).
TIMED["runtime_pyc"] = TIMED["runtime"]


def timed(root: Path, name: str, n: int) -> float:
    code = ("import time, torch\nN = %d\nROOT = %r\nt0 = time.perf_counter()\n%s\n"
            "print('SECONDS', time.perf_counter() - t0)\n" % (n, str(root), TIMED[name]))
    if name == "runtime_pyc":
        env = scratch.env(root)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")     # the other rows never read it
        proc = subprocess.run([sys.executable, "-c", code], cwd=scratch.REPO,
                              env=env, capture_output=True, text=True, timeout=300)
    else:
        proc = scratch.python(root, code)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stdout}{proc.stderr}")
    return float(proc.stdout.split("SECONDS", 1)[1])


FAKES = """
import runtime
from torch._library.simple_registry import singleton
names = [f"syn::op{i}" for i in range(N)]
meta = sum(torch._C._dispatch_has_kernel_for_dispatch_key(n, "Meta") for n in names)
python = sum(singleton.find(n).fake_impl.kernel is not None for n in names)
print("FAKES", meta - python, python)
"""


def fake_kinds(root: Path, n: int) -> tuple[int, int]:
    """(ops with a C++ Meta kernel only, ops with a Python fake) after `import runtime`."""
    proc = scratch.python(root, "import torch\nN = %d\n%s" % (n, FAKES))
    if proc.returncode != 0:
        raise SystemExit(f"counting fake kernels failed:\n{proc.stdout}{proc.stderr}")
    cpp, python = proc.stdout.split("FAKES", 1)[1].split()
    return int(cpp), int(python)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", help="build in this directory and keep it")
    args = parser.parse_args()
    tmp = None if args.keep else tempfile.TemporaryDirectory(prefix="opgen-bench-import-")
    root = Path(args.keep or tmp.name)
    root.mkdir(parents=True, exist_ok=True)
    synthetic_root(root, args.ops)

    t = time.perf_counter()
    gen = scratch.generate(root)
    t_gen = time.perf_counter() - t
    if gen.returncode != 0:
        raise SystemExit(gen.stdout + gen.stderr)
    t = time.perf_counter()
    built = scratch.build(root)
    t_build = time.perf_counter() - t
    if built.returncode != 0:
        raise SystemExit(built.stdout + built.stderr)
    so = root / "build" / "libsyn_ops.so"
    print(f"{args.ops} synthetic ops in {FILES} op files: codegen {t_gen:.2f} s, cold build "
          f"{t_build:.1f} s ({so.stat().st_size / 1e6:.1f} MB library)\n")

    cpp, python = fake_kinds(root, args.ops)
    print(f"fake kernels after `import runtime`: {cpp} C++ Meta kernels, {python} Python "
          "(register_fake)\n")

    timed(root, "runtime_pyc", args.ops)     # writes the bytecode cache
    results: dict[str, list[float]] = {k: [] for k in TIMED}
    for _ in range(args.repeat):
        for name in TIMED:                 # interleaved: drift hits every variant alike
            results[name].append(timed(root, name, args.ops))
    med = {k: statistics.median(v) for k, v in results.items()}
    per_op = {k: v / args.ops * 1e6 for k, v in med.items()}
    print(f"seconds after `import torch`, median of {args.repeat} fresh interpreters:")
    rows = [
        ("import runtime (load .so + Python registrations)", "runtime"),
        ("  of which torch.ops.load_library(.so) alone", "load_library"),
        ("import runtime, bytecode cache on", "runtime_pyc"),
        ("custom_op + register_fake", "custom_op"),
        ("Library.define + impl + register_fake", "define_impl"),
    ]
    for label, key in rows:
        print(f"  {label:<50} {med[key]:>7.3f} s  {per_op[key]:>8.1f} us/op")
        if key == "load_library":
            rest = med["runtime"] - med["load_library"]
            print(f"  {'  the rest: runtime._reg_syn (Python side) etc.':<50} {rest:>7.3f} s  "
                  f"{rest / args.ops * 1e6:>8.1f} us/op")
    ratio = med["runtime"] / med["custom_op"]
    print(f"\nimport runtime / custom_op+register_fake = {ratio:.3f} (target <= 0.100; "
          f"{1 / ratio:.1f}x faster); with the bytecode cache on: "
          f"{med['runtime_pyc'] / med['custom_op']:.3f}; the C++ library alone: "
          f"{med['load_library'] / med['custom_op']:.3f}")
    print(json.dumps({"ops": args.ops, "median_s": med, "ratio": ratio,
                      "cpp_meta_kernels": cpp, "python_fakes": python}))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
