"""Golden files for the C++ back end's generators: kernel headers, registration shards, stamps,
build.ninja, runtime.ops and the runtime manifest.

Inputs are small dedicated op files in tests/golden/cpp/inputs/: `types.yaml` (every C++ binding
of the schema language) and `shards/` (two files sharing a namespace, a second namespace, an
API-name clash). Expected outputs live in tests/golden/cpp/expected/<case>/; refresh them after an
intended change with `make golden` (EXPECTTEST_ACCEPT=1), never by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen import config
from codegen.dest import (cpp_aoti, cpp_kernel_index, cpp_kernels, cpp_register, cpp_stamp, ninja,
                          py_ops)
from codegen.diagnostics import Diagnostics
from codegen.load import load_library
from tests import expect

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden" / "cpp"
ROOT = HERE.parent
EXAMPLE = config.default_project(ROOT)    # opgen's example layout: generated/, runtime

INPUTS = "tests/golden/cpp/inputs"
EXPECTED = GOLDEN / "expected"
CASES = {
    "types": [f"{INPUTS}/types.yaml"],
    "shards": [f"{INPUTS}/shards/one.yaml", f"{INPUTS}/shards/two.yaml"],
    "cuda": [f"{INPUTS}/cuda.yaml"],
}


def render(paths: list[str]) -> dict[str, str]:
    lib = load_library(paths)
    diags = Diagnostics()
    out: dict[str, str] = {}
    for gen in (cpp_kernels.generate, cpp_register.generate, cpp_stamp.generate_stamps,
                py_ops.generate_ops, py_ops.generate_manifest, cpp_aoti.generate,
                cpp_aoti.generate_helper):
        out.update(gen(lib, diags, EXAMPLE))
    out.update(cpp_kernel_index.generate(lib, diags, EXAMPLE, out))
    # build.ninja from fixed inputs: the golden file must not depend on this checkout's files.
    sources = {ns: ((f"runtime/csrc/{ns}/kernels.cpp", "kernels.cpp"),
                    (f"runtime/csrc/{ns}/kernels.cu", "kernels.cu"))
               for ns in lib.namespaces}
    inputs = ninja.BuildInputs(sources, tuple(paths), tuple(out))
    out[ninja.ninja_file(EXAMPLE)] = ninja.build_ninja(lib, inputs, EXAMPLE)
    assert not diags.has_errors, diags.render()
    return out


def golden_path(case: str, rel: str) -> Path:
    return EXPECTED / case / rel


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_outputs(case: str, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)     # op file paths are relative to the repository root
    out = render(CASES[case])
    expect.check_dir(EXPECTED / case, out)


def test_golden_generators_are_deterministic(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    assert render(CASES["types"]) == render(CASES["types"])


def test_shard_roles(monkeypatch) -> None:
    """The first file of a namespace claims it with TORCH_LIBRARY; later files add fragments."""
    monkeypatch.chdir(ROOT)
    out = render(CASES["shards"])
    one = out["generated/cpp/alpha/register_one.cpp"]
    two = out["generated/cpp/alpha/register_two.cpp"]
    assert "TORCH_LIBRARY(alpha, m)" in one and "TORCH_LIBRARY_FRAGMENT" not in one
    assert "TORCH_LIBRARY_FRAGMENT(alpha, m)" in two and "TORCH_LIBRARY(" not in two
    assert "TORCH_LIBRARY(beta, m)" in out["generated/cpp/beta/register_one.cpp"]


def test_python_api_names_resolve_clashes(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    lib = load_library(CASES["shards"])
    names = py_ops.python_names(lib, Diagnostics())
    assert names == {"alpha::add": "alpha_add", "beta::add": "beta_add",
                     "alpha::scale.out": "scale_out", "alpha::scale": "scale",
                     "alpha::identity": "identity"}


def test_kernel_objects_never_collide_with_generated_ones(monkeypatch) -> None:
    """Kernel objects mirror the kernel directory, so a kernel source `gen/stamp.cpp` may exist;
    its object must not be the generated stamp's (ninja refuses two edges for one output)."""
    monkeypatch.chdir(ROOT)
    paths = CASES["shards"]
    lib = load_library(paths)
    sources = {ns: tuple((f"runtime/csrc/{ns}/{rel}", rel)
                         for rel in ("gen/stamp.cpp", "gen/register_one.cpp", "gen/autograd.cpp",
                                     "stamp.cpp"))
               for ns in lib.namespaces}
    inputs = ninja.BuildInputs(sources, tuple(paths), ())
    text = ninja.build_ninja(lib, inputs, EXAMPLE).replace("$\n    ", "")
    outputs = [o for line in text.splitlines() if line.startswith("build ")
               for o in line[len("build "):].partition(":")[0].split()]
    assert "build/obj/alpha/gen/stamp.o" in outputs
    assert len(outputs) == len(set(outputs)), sorted(o for o in outputs if outputs.count(o) > 1)


def test_codegen_inputs_may_be_deleted(monkeypatch) -> None:
    """Ninja stops on a missing input that no edge makes ('missing and no known rule'), before
    it could regenerate: each input of the codegen edge (op files, the listing of op files and
    kernel sources of Note [Input listing]) is a phony target, so deleting an op file or the
    listing only reruns code generation."""
    monkeypatch.chdir(ROOT)
    text = render(CASES["shards"])[ninja.ninja_file(EXAMPLE)].replace("$\n    ", "")
    edges = [line[len("build "):].partition(":") for line in text.splitlines()
             if line.startswith("build ")]
    codegen = next(rest for _outs, _, rest in edges if rest.split()[0] == "codegen")
    inputs = [w for w in codegen.split()[1:] if w not in ("|", "||")]
    assert f"{INPUTS}/shards/one.yaml" in inputs and ninja.input_listing(EXAMPLE) in inputs
    phony = {outs.strip() for outs, _, rest in edges if rest.split() == ["phony"]}
    assert [i for i in inputs if i not in phony] == []
