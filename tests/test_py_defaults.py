"""Defaults of Python kernels, fakes and batching rules against the schema's
(codegen/dest/py_reg.py check_signature): which spellings are the same value, which are not.

The pinned messages are tests/diagnostics_py/reg_*default*.yaml; this file covers the
equivalences, one function per case in a scratch module.
"""

from __future__ import annotations

import textwrap

import pytest

from codegen import config, parse_schema
from codegen.dest.py_sources import PySources, check_signature, python_roots
from codegen.diagnostics import Diagnostics, Loc
from codegen.model import PyRef

# (schema arguments, Python parameters, whether they agree)
CASES = [
    ("float eps=1e-6", "eps=1e-06", True),
    ("float eps=1e-6", "eps=1e-5", False),
    ("float bound=1", "bound=1.0", True),
    ("float bound=1.0", "bound=1", False),          # an int default changes result dtypes
    ("float x=-1.5", "x=-1.5", True),
    ("float x=-1.5", "x=1.5", False),
    ("Scalar alpha=1", "alpha=1", True),
    ("Scalar alpha=1", "alpha=1.0", False),
    ("bool keepdim=False", "keepdim=False", True),
    ("bool keepdim=False", "keepdim=0", False),
    ("str reduction=\"mean\"", "reduction='mean'", True),
    ("str reduction=\"mean\"", "reduction='sum'", False),
    ("int[] dim=[]", "dim=()", True),
    ("int[] dim=[0, 1]", "dim=[0, 1]", True),
    ("int[] dim=[0, 1]", "dim=(1, 0)", False),
    ("int[2] stride=1", "stride=(1, 1)", True),
    ("int[2] stride=1", "stride=1", False),
    ("float? scale=None", "scale=None", True),
    ("float? scale=None", "scale=1.0", False),
    ("ScalarType dtype=long", "dtype=torch.int64", True),
    ("ScalarType dtype=long", "dtype=torch.long", True),
    ("ScalarType dtype=long", "dtype=torch.float32", False),
    ("MemoryFormat fmt=contiguous_format", "fmt=torch.contiguous_format", True),
    ("Layout layout=strided", "layout=torch.strided", True),
    ("Device device=\"cpu\"", "device='cpu'", True),
    ("Device device=\"cpu\"", "device=torch.device('cpu')", True),
    ("Device device=\"cpu\"", "device=torch.device('cuda')", False),
    ("*, int correction=1", "*, correction=1", True),
    ("*, int correction=1", "*, correction=2", False),
    ("*, int correction=1", "correction=2", False),   # keyword argument, positional parameter
    ("float eps=1e-6", "eps=EPS", True),              # a module constant
    ("float eps=1e-5", "eps=EPS", False),
    ("int[] dim=[0, 1]", "dim=(0, ONE)", True),
    ("int[] dim=[0, 2]", "dim=(0, ONE)", False),
    ("float eps=1e-6", "eps=TWICE", True),            # bound twice: not a constant, not checked
    ("float eps=1e-6", "eps=float('1e-5')", True),    # not a literal: not checked
    ("float eps", "eps=0.5", True),                   # the dispatcher always passes it
]

PRELUDE = """\
import torch

EPS = 1e-6
ONE = 1
TWICE = 1.0
TWICE = 2.0
"""


def _sources(root) -> PySources:
    """Modules looked up as in the example layout of a project at `root`."""
    return PySources(python_roots(config.default_project(root)))


def _check(tmp_path, monkeypatch, schema_args: str, params: str, *, leading: str = "",
           what: str = "kernel") -> Diagnostics:
    name = f"mod_{abs(hash((schema_args, params, leading)))}"
    (tmp_path / f"{name}.py").write_text(
        PRELUDE + f"\n\ndef f({leading}x, {params}):\n    return x\n")
    monkeypatch.chdir(tmp_path)
    schema = parse_schema(f"ex::f(Tensor x, {schema_args}) -> Tensor")
    diags = Diagnostics()
    ref = PyRef(name, "f", Loc("ops.yaml", 1, 1))
    check_signature(ref, schema, diags, what, leading=2 if leading else 0,
                    sources=_sources(tmp_path))
    return diags


@pytest.mark.parametrize("schema_args, params, same", CASES,
                         ids=[f"{a} | {p}" for a, p, _ in CASES])
def test_default_equivalence(tmp_path, monkeypatch, schema_args, params, same):
    diags = _check(tmp_path, monkeypatch, schema_args, params)
    errors = [d for d in diags.items if d.severity == "error"]
    if same:
        assert errors == [], diags.render()
    else:
        assert len(errors) == 1, diags.render()
        assert "defaults to" in errors[0].message
        assert errors[0].loc.path.endswith(".py")


def test_batching_rule_defaults_after_leading_parameters(tmp_path, monkeypatch):
    diags = _check(tmp_path, monkeypatch, "float eps=1e-6", "eps=0.1", leading="info, in_dims, ",
                   what="batching rule")
    (err,) = diags.items
    assert err.message.startswith("parameter 'eps' of batching rule ")
    assert "defaults to 0.1, but ex::f declares eps=1e-06" in err.message


def test_location_counts_characters_not_bytes(tmp_path, monkeypatch):
    """ast columns are UTF-8 byte offsets; diagnostics count characters."""
    (tmp_path / "uni.py").write_text(
        "# a line break for str.splitlines, not for Python: \u2028 \x0c\r\n"
        "def f(x, ε=0.0, bound=0.25):\n    return x\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    schema = parse_schema("ex::f(Tensor x, float e=0.0, float bound=0.5) -> Tensor")
    diags = Diagnostics()
    check_signature(PyRef("uni", "f", Loc("ops.yaml", 1, 1)), schema, diags, "kernel",
                    sources=_sources(tmp_path))
    (err,) = diags.items
    assert (err.loc.line, err.loc.col, err.loc.length) == (2, 23, 4)
    assert err.loc.path == "uni.py"
    shown = diags.render().splitlines()
    assert shown[1:3] == ["    def f(x, ε=0.0, bound=0.25):", "    " + " " * 22 + "^~~~"]


def test_module_parsed_once_per_content(tmp_path, monkeypatch):
    """The same module named by many ops is parsed once; an edit is seen."""
    from codegen.dest import py_sources

    (tmp_path / "once.py").write_text("def f(x, bound=0.5):\n    return x\n")
    monkeypatch.chdir(tmp_path)
    schema = parse_schema("ex::f(Tensor x, float bound=0.5) -> Tensor")
    ref = PyRef("once", "f", Loc("ops.yaml", 1, 1))
    py_sources._parse_module.cache_clear()
    sources = _sources(tmp_path)
    for _ in range(5):
        check_signature(ref, schema, Diagnostics(), "kernel", sources=sources)
    assert py_sources._parse_module.cache_info().misses == 1
    (tmp_path / "once.py").write_text("def f(x, bound=0.25):\n    return x\n")
    diags = Diagnostics()
    check_signature(ref, schema, diags, "kernel", sources=sources)
    assert len(diags.items) == 1


def test_prelude_constants(tmp_path):
    """Only names bound once, at top level, to a value count as constants."""
    from codegen.dest.py_sources import _parse_module

    text = PRELUDE + textwrap.dedent("""
        import os as OS
        LATE = 1
        def g():
            global LATE
            LATE = 2
        """)
    constants = _parse_module(str(tmp_path / "c.py"), text).constants
    assert set(constants) == {"EPS", "ONE"}


@pytest.mark.parametrize("module, errors", [
    # A def rebound later is not what import finds: not checkable from source.
    ("def f(x):\n    return x\n\n\nf = _impl\n", 0),
    ("def f(x):\n    return x\n\n\nfrom math import sqrt as f\n", 0),
    # The last def is the function, and a rebinding before it does not hide it.
    ("f = _impl\n\n\ndef f(x):\n    return x\n", 1),
    ("def f(x, bound=0.5):\n    return x\n\n\ndef f(x):\n    return x\n", 1),
])
def test_function_rebound_after_its_def(tmp_path, monkeypatch, module, errors):
    name = f"rebound_{abs(hash(module))}"
    (tmp_path / f"{name}.py").write_text("def _impl(x, bound=0.5):\n    return x\n\n\n" + module)
    monkeypatch.chdir(tmp_path)
    schema = parse_schema("ex::f(Tensor x, float bound=0.5) -> Tensor")
    diags = Diagnostics()
    check_signature(PyRef(name, "f", Loc("ops.yaml", 1, 1)), schema, diags, "kernel",
                    sources=_sources(tmp_path))
    assert len(diags.items) == errors, diags.render()
    if errors:
        assert diags.items[0].message.endswith("it takes 1 positional parameter, the op passes "
                                               "up to 2")
