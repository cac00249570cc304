"""The C++ call API (`<ns>::ops::<name>(...)` in each op's kernel header) compiles in a user's C++
file with every kind of default the schema language allows, and calling it with the defaults left
out compiles too (`g++ -fsyntax-only`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import torch

from codegen import config
from codegen.gen import render
from codegen.load import load_library

OPS = """\
namespace: capi
ops:
  - func: dev(Tensor self, Device d="cpu", Device? e="cpu", Device? f=None) -> Tensor
    dispatch: {CPU: dev_cpu}
    fake: like(self)
  - func: int64_t(Tensor self, int n=1) -> Tensor
    dispatch: {CPU: k_int64}
    fake: like(self)
  - func: takes(Tensor self, int int64_t, int m) -> Tensor
    dispatch: {CPU: k_takes}
    fake: like(self)
  - func: sized(Tensor self, float[2] a=1.5, bool[3] b=True, int[2] k=1) -> Tensor
    dispatch: {CPU: k_sized}
    fake: like(self)
"""


def _compile_flags() -> list[str]:
    from torch.utils import cpp_extension

    std = "c++20" if "-std=c++20" in Path(cpp_extension.__file__).read_text() else "c++17"
    return ([f"-std={std}", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
             f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
            + [f for inc in cpp_extension.include_paths("cpu") for f in ("-isystem", inc)])


def _render_and_compile(tmp_path: Path, use: str) -> tuple[dict[str, str], str]:
    """The rendered files of OPS, and the compiler's errors for `use` including its headers."""
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas/capi.yaml").write_text(OPS, encoding="utf-8")
    lib = load_library(["schemas"])
    diags = lib.diagnostics()
    files = dict(render(lib, diags, config.default_project(tmp_path)).files)
    assert not diags.has_errors, diags.render()
    for rel, text in files.items():
        if rel.endswith(".h"):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text(text, encoding="utf-8")
    (tmp_path / "use.cpp").write_text("#include <capi/capi.h>\n" + use, encoding="utf-8")
    result = subprocess.run([os.environ.get("CXX", "c++"), *_compile_flags(), "-I",
                             str(tmp_path / "generated/cpp"), str(tmp_path / "use.cpp")],
                            capture_output=True, text=True, timeout=600)
    return files, result.stderr[-5000:] if result.returncode else ""


def test_names_of_the_types_the_header_spells_move_aside(tmp_path, monkeypatch):
    """An op or an argument named `int64_t`, which the header writes unqualified for every int:
    the call-API function and parameter get a trailing underscore (as keywords and macros do), or
    every declaration after them failed to compile."""
    monkeypatch.chdir(tmp_path)
    files, errors = _render_and_compile(tmp_path, (
        "at::Tensor use(const at::Tensor& t) {\n"
        "  return capi::ops::takes(capi::ops::int64_t_(t), 1, 2);\n"
        "}\n"))
    assert errors == ""
    assert "inline at::Tensor int64_t_(const at::Tensor& self, int64_t n = 1) {" in \
        files["generated/cpp/capi/capi/int64_t.h"]
    assert "inline at::Tensor takes(const at::Tensor& self, int64_t int64_t_, int64_t m) {" in \
        files["generated/cpp/capi/capi/takes.h"]


def test_sized_list_scalar_defaults_are_the_whole_list(tmp_path, monkeypatch):
    """`float[2] a=1.5` means [1.5, 1.5]: `at::ArrayRef<double> a = 1.5` was the one-element
    [1.5] (a call leaving it out passed the wrong list), `std::array<bool, 3> b = true` did not
    compile, and `int[2] k=1` had no default."""
    monkeypatch.chdir(tmp_path)
    files, errors = _render_and_compile(tmp_path, (
        "at::Tensor use(const at::Tensor& t) { return capi::ops::sized(t); }\n"))
    assert errors == ""
    assert ("inline at::Tensor sized(const at::Tensor& self, at::ArrayRef<double> a = {1.5, 1.5}, "
            "std::array<bool, 3> b = std::array<bool, 3>{true, true, true}, "
            "at::IntArrayRef k = {1, 1}) {") in files["generated/cpp/capi/capi/sized.h"]


def test_device_string_defaults_compile(tmp_path, monkeypatch):
    """`Device d="cpu"`: `at::Device d = "cpu"` does not compile (const char* reaches c10::Device
    only through std::string, two user conversions), so the default is spelled as a
    construction."""
    monkeypatch.chdir(tmp_path)
    files, errors = _render_and_compile(tmp_path, (
        "at::Tensor use(const at::Tensor& t) {\n"
        "  return capi::ops::dev(capi::ops::dev(t), at::kCPU, std::nullopt);\n"
        "}\n"))
    assert ('at::Device d = at::Device("cpu"), std::optional<at::Device> e = at::Device("cpu"), '
            'std::optional<at::Device> f = std::nullopt)') in files["generated/cpp/capi/capi/dev.h"]
    assert errors == ""
