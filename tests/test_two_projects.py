"""The project configuration reaches code generation as an argument (codegen.gen.render): one
library renders for two projects side by side in one process, without activating either
(config.use), and each project's files land under its own paths with its own names."""

from __future__ import annotations

import inspect
from dataclasses import replace
from pathlib import Path

import pytest

from codegen import config
from codegen.gen import check_library, generators, render
from codegen.load import load_library

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = config.default_project(ROOT)     # generated/, package `runtime`
# The same sources, generated into a subpackage of another package, built elsewhere.
OTHER = replace(EXAMPLE, package="acme.ops", package_dir="src/acme/ops",
                generated="src/acme/ops/_gen", build="out", libraries="out/lib", cmake=True,
                build_command="acme-build")


@pytest.fixture
def rendered(monkeypatch) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(the example's files, the other project's, the example's again), rendered in that order
    from one loaded library with the active project unreadable."""
    monkeypatch.chdir(ROOT)
    lib = load_library(["schemas"])

    def no_active_project():
        raise AssertionError("code generation read the active project")

    monkeypatch.setattr(config, "current", no_active_project)
    out = []
    for project in (EXAMPLE, OTHER, EXAMPLE):
        diags = lib.diagnostics()
        check_library(lib, diags, project)
        files = render(lib, diags, project)
        assert not diags.has_errors, diags.render()
        out.append(dict(files.files))
    return out[0], out[1], out[2]


def test_each_project_gets_its_own_paths(rendered):
    example, other, again = rendered
    assert all(p.startswith("generated/") for p in example)
    assert all(p.startswith("src/acme/ops/_gen/") for p in other)
    assert example == again      # the other project left nothing behind
    # The example's generated set is the committed one (`make codegen`).
    assert example == {p: (ROOT / p).read_text(encoding="utf-8") for p in example}


def test_each_project_gets_its_own_names(rendered):
    example, other, _ = rendered
    assert 'set_python_module("runtime._reg_exops")' in \
        example["generated/cpp/exops/register_core.cpp"]
    assert 'set_python_module("acme.ops._gen._reg_exops")' in \
        other["src/acme/ops/_gen/cpp/exops/register_core.cpp"]
    # A generated directory inside the package is a subpackage with its own __init__.py.
    assert "src/acme/ops/_gen/__init__.py" in other
    assert "generated/runtime/__init__.py" not in example
    assert "src/acme/ops/_gen/_reg_exops.py" in other
    assert "generated/runtime/_reg_exops.py" in example
    manifest = other["src/acme/ops/_gen/_manifest.py"]
    assert "acme.ops._gen._reg_exops" in manifest and "runtime._reg" not in manifest
    # The build file builds below the other project's build and library directories.
    ninja = other["src/acme/ops/_gen/build.ninja"]
    assert "out/lib/libexops_ops.so" in ninja and "builddir = out" in ninja
    assert "build/" not in ninja and "acme-build" in ninja
    # `cmake = true` is the other project's alone.
    assert "src/acme/ops/_gen/opgen.cmake" in other
    assert not any(p.endswith("opgen.cmake") for p in example)


def test_what_does_not_depend_on_the_project_is_the_same(rendered):
    example, other, _ = rendered
    headers = {p.removeprefix("generated/"): text for p, text in example.items()
               if p.endswith(".h")}
    assert headers and headers == {p.removeprefix("src/acme/ops/_gen/"): text
                                   for p, text in other.items() if p.endswith(".h")}


def test_every_generator_takes_the_project():
    assert {name: list(inspect.signature(fn).parameters) for name, fn in generators()} == {
        name: ["lib", "diags", "project"] for name, _ in generators()}
