"""The C++ call API (`<ns>::ops::<name>(...)` in each op's kernel header) compiles in a user's C++
file with every kind of default the schema language allows, and calling it with the defaults left
out compiles too (`g++ -fsyntax-only`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
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
"""


def _compile_flags() -> list[str]:
    from torch.utils import cpp_extension

    std = "c++20" if "-std=c++20" in Path(cpp_extension.__file__).read_text() else "c++17"
    return ([f"-std={std}", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
             f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
            + [f for inc in cpp_extension.include_paths("cpu") for f in ("-isystem", inc)])


def test_device_string_defaults_compile(tmp_path, monkeypatch):
    """`Device d="cpu"`: `at::Device d = "cpu"` does not compile (const char* reaches c10::Device
    only through std::string, two user conversions), so the default is spelled as a
    construction."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas/capi.yaml").write_text(OPS, encoding="utf-8")
    lib = load_library(["schemas"])
    diags = lib.diagnostics()
    files = render(lib, diags, config.default_project(tmp_path))
    assert not diags.has_errors, diags.render()
    header = files.files["generated/cpp/capi/capi/dev.h"]
    assert ('at::Device d = at::Device("cpu"), std::optional<at::Device> e = at::Device("cpu"), '
            'std::optional<at::Device> f = std::nullopt)') in header
    cpp = tmp_path / "generated/cpp"
    for rel, text in files.files.items():
        if rel.endswith(".h"):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text(text, encoding="utf-8")
    use = tmp_path / "use.cpp"
    use.write_text("#include <capi/capi.h>\n"
                   "at::Tensor use(const at::Tensor& t) {\n"
                   "  return capi::ops::dev(capi::ops::dev(t), at::kCPU, std::nullopt);\n"
                   "}\n")
    result = subprocess.run([os.environ.get("CXX", "c++"), *_compile_flags(), "-I", str(cpp),
                             str(use)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-5000:]
