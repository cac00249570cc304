"""The edit loop rebuilds only what changed (Note [Headers that change only with C++] in
codegen/dest/cpp_kernels.py): edits no C++ sees leave every C++ output and build.ninja byte for
byte, and a schema edit changes only the headers of the op it touches. In memory, no compiler:
bench/bench_build.py measures the same edits through ninja."""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen import config
from codegen.dest import cpp_kernels, cpp_register, cpp_stamp, ninja
from codegen.diagnostics import Diagnostics
from codegen.load import load_library

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = config.default_project(ROOT)
CORE = (ROOT / "schemas" / "core.yaml").read_text(encoding="utf-8")


def cpp_outputs(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "core.yaml"
    path.write_text(text, encoding="utf-8")
    lib = load_library([str(path)])
    diags = Diagnostics()
    out: dict[str, str] = {}
    for gen in (cpp_kernels.generate, cpp_register.generate, cpp_stamp.generate_stamps):
        out.update(gen(lib, diags, EXAMPLE))
    inputs = ninja.BuildInputs({"exops": (("runtime/csrc/exops/k.cpp", "k.cpp"),)},
                               (str(path),), tuple(out))
    out[ninja.ninja_file(EXAMPLE)] = ninja.build_ninja(lib, inputs, EXAMPLE)
    assert not diags.has_errors, diags.render()
    return out


def edited(old: str, new: str) -> str:
    assert old in CORE
    return CORE.replace(old, new, 1)


# Each edit sits above most ops of the file, so every line below it moves.
INVISIBLE = {
    "doc": ("broadcasting and promoting dtypes like torch.add.\n",
            "broadcasting and promoting dtypes like torch.add.\n      A second line.\n"),
    "sample": ("      - {self: {shape: [N=3, M=4]}, other: {shape: [M]}, alpha: 2.5}\n",
               "      - {self: {shape: [N=3, M=4]}, other: {shape: [M]}, alpha: 2.5}\n"
               "      - {self: {shape: [7]}, other: {shape: [7]}}\n"),
    "formula": ("other: unbroadcast(grad * alpha, other)", "other: unbroadcast(alpha * grad, other)"),
    "python_fake_rule": ("fake: empty([dynamic()])", "fake: empty([dynamic(max=64)])"),
}


@pytest.mark.parametrize("what", sorted(INVISIBLE))
def test_edits_no_cpp_sees_change_no_cpp_output(tmp_path: Path, what: str) -> None:
    before = cpp_outputs(tmp_path, CORE)
    after = cpp_outputs(tmp_path, edited(*INVISIBLE[what]))
    assert after == before


def test_a_schema_edit_changes_only_that_ops_header(tmp_path: Path) -> None:
    before = cpp_outputs(tmp_path, CORE)
    after = cpp_outputs(tmp_path, edited('str reduction="mean"', 'str reduction="sum"'))
    changed = sorted(k for k in before if before[k] != after.get(k))
    assert sorted(after) == sorted(before)
    assert changed == ["generated/cpp/exops/core/weighted_mse.h",
                       "generated/cpp/exops/register_core.cpp",
                       "generated/cpp/exops/stamp.cpp"]
