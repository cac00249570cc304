"""The typed API stubs (generated/runtime/ops.pyi, codegen/dest/py_stubs.py): the same names as
runtime.ops, each op's real signature, and mypy type-checking code that uses them.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from codegen.api import python as P
from codegen.load import load_library
from codegen.parse import parse_schema

ROOT = Path(__file__).resolve().parent.parent
STUB = ROOT / "generated" / "runtime" / "ops.pyi"
OPS = ROOT / "generated" / "runtime" / "ops.py"


def _stub_functions() -> dict[str, ast.FunctionDef]:
    tree = ast.parse(STUB.read_text(encoding="utf-8"))
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _ops_table() -> dict[str, tuple[str, str, str]]:
    tree = ast.parse(OPS.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "_OPS":
            return ast.literal_eval(node.value)
    raise AssertionError("generated/runtime/ops.py has no _OPS table")


def test_stub_names_are_the_module_names():
    assert sorted(_stub_functions()) == sorted(_ops_table())


def test_stub_signatures_are_the_schemas(monkeypatch):
    """Parameter names, order, keyword-only markers and which have defaults follow the schema as
    torch's own parser reads it; the docstring ends with the schema."""
    monkeypatch.chdir(ROOT)
    lib = load_library(["schemas"])
    stubs = _stub_functions()
    table = _ops_table()
    for name, (ns, op_name, overload) in table.items():
        op = next(o for o in lib.ops if (o.namespace, o.name.name, o.name.overload_or_default)
                  == (ns, op_name, overload))
        schema = torch._C.parse_schema(str(op.schema))
        fn = stubs[name]
        positional = [a.arg for a in fn.args.args]
        kw_only = [a.arg for a in fn.args.kwonlyargs]
        assert positional == [a.name for a in schema.arguments if not a.kwarg_only], name
        assert kw_only == [a.name for a in schema.arguments if a.kwarg_only], name
        n_pos_defaults = len(fn.args.defaults)
        given = set(positional[len(positional) - n_pos_defaults:]) | {
            a.arg for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is not None}
        assert given == {a.name for a in schema.arguments if a.has_default_value()}, name
        doc = ast.get_docstring(fn)
        assert doc is not None and doc.endswith(str(op.schema)), name


def test_defaults_evaluate_to_the_schema_defaults(monkeypatch):
    """Each default expression of the stub means what the schema's default means."""
    monkeypatch.chdir(ROOT)
    lib = load_library(["schemas"])
    stubs = _stub_functions()
    table = _ops_table()
    for name, (ns, op_name, overload) in table.items():
        op = next(o for o in lib.ops if (o.namespace, o.name.name, o.name.overload_or_default)
                  == (ns, op_name, overload))
        schema = torch._C.parse_schema(str(op.schema))
        fn = stubs[name]
        params = [*fn.args.args, *fn.args.kwonlyargs]
        defaults = [None] * (len(fn.args.args) - len(fn.args.defaults)) + list(fn.args.defaults) \
            + list(fn.args.kw_defaults)
        for p, d, a in zip(params, defaults, schema.arguments):
            if d is None:
                continue
            value = eval(compile(ast.Expression(d), "<default>", "eval"), {"torch": torch})
            expected = a.default_value
            if isinstance(value, tuple):
                value = list(value)
            assert value == expected, (name, p.arg, value, expected)


USAGE = """
import torch
from runtime import ops

x = torch.randn(3, 4)
y: torch.Tensor = ops.scaled_add(x, x, alpha=2)
# A Scalar takes a complex number too (torch.types.Number alone has none).
yc: torch.Tensor = ops.scaled_add(x.to(torch.complex64), x, alpha=2j)
mean, var = ops.moments(x, [1], keepdim=True, correction=0)
w = ops.gaussian_window(7, 1.5, dtype=torch.float64, device="cpu")
z = ops.weighted_sum([x, x], [0.5, 0.5])
p = ops.pad_end(x, [1, 2], value=-1.0)
n = ops.row_normalize(x)
"""

MISUSE = """
import torch
from runtime import ops

x = torch.randn(3, 4)
a = ops.scaled_add(x, "other")
b = ops.moments(x, [1], True, 1)
c: int = ops.soft_shrink(x)
d = ops.no_such_op(x)
"""


def _mypy(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy")
    path = tmp_path / "usage.py"
    path.write_text(textwrap.dedent(code), encoding="utf-8")
    cache = ROOT / "build" / "mypy_cache"
    env = dict(os.environ, MYPYPATH=str(ROOT / "generated"))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache), "--no-error-summary",
         "--follow-imports=silent", str(path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_sized_list_scalar_defaults_are_expanded_as_torch_reads_them():
    """`float[2] a=1.5` means [1.5, 1.5] as `int[2] k=1` means [1, 1]: the stub said `= 1.5`,
    a default its own annotation refuses (mypy and pyright flag the stub) and not torch's value."""
    text = "f(Tensor x, float[2] a=1.5, bool[3] b=True, float[2] c=1, SymInt[2] k=2) -> Tensor"
    params = P.parameters(parse_schema(text), annotate=True)
    assert params[1:] == ["a: Sequence[float] = (1.5, 1.5)",
                          "b: Sequence[bool] = (True, True, True)",
                          "c: Sequence[float] = (1.0, 1.0)",
                          "k: int | torch.SymInt | Sequence[int | torch.SymInt] = (2, 2)"]
    for p, a in zip(params[1:], torch._C.parse_schema(text).arguments[1:]):
        assert list(eval(p.split(" = ")[1])) == a.default_value, p


def test_enum_returns_are_annotated_as_what_torch_returns():
    """An op returning a ScalarType, Layout or MemoryFormat gives back torch's number for it
    (float16 is 5), so the stub says int: `torch.dtype` let a caller's `d.is_floating_point`
    type-check and fail at run time."""
    lib = torch.library.Library("stubenum", "FRAGMENT")
    lib.define("f(Tensor x) -> (ScalarType a, Layout b, MemoryFormat c, ScalarType? d, "
               "ScalarType[] e, Device g)")
    lib.impl("f", lambda x: (torch.float16, torch.strided, torch.channels_last, None,
                             [torch.int8], torch.device("cpu")), "CompositeExplicitAutograd")
    got = torch.ops.stubenum.f(torch.ones(1))
    assert got == (5, 0, 2, None, [1], torch.device("cpu"))
    schema = parse_schema(str(torch.ops.stubenum.f.default._schema).removeprefix("stubenum::"))
    assert P.returns_annotation(schema) == \
        "tuple[int, int, int, int | None, list[int], torch.device]"


def test_mypy_accepts_correct_usage(tmp_path):
    result = _mypy(tmp_path, USAGE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_generated_loader_passes_mypy_strict():
    """A user's `mypy --strict` follows `import <package>` into the generated `_loader.py` and
    reports its errors there, in a file the user cannot edit."""
    pytest.importorskip("mypy")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / "build" / "mypy_cache"),
         "--strict", "--no-error-summary", str(ROOT / "generated/runtime/_loader.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert (result.returncode, result.stdout) == (0, ""), result.stdout + result.stderr


def test_example_package_passes_mypy_strict():
    """The example's own `runtime/__init__.py`, which a user copies: its fallback LibraryError
    carries a `type: ignore` that mypy must read as one."""
    pytest.importorskip("mypy")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / "build" / "mypy_cache"),
         "--strict", "--no-error-summary", str(ROOT / "runtime/__init__.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert (result.returncode, result.stdout) == (0, ""), result.stdout + result.stderr


def test_star_import_type_checks(tmp_path):
    """`from runtime.ops import *` binds every op at run time (ops.py's `__all__`); the stub lists
    the same names, so mypy sees them too (a bare `__all__: list[str]` exported none)."""
    stub_all = next(ast.literal_eval(n.value) for n in ast.parse(STUB.read_text()).body
                    if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__all__")
    assert stub_all == sorted(_ops_table())
    result = _mypy(tmp_path, """
        import torch
        from runtime.ops import *

        y: torch.Tensor = scaled_add(torch.ones(2), torch.ones(2))
        """)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_rejects_misuse(tmp_path):
    result = _mypy(tmp_path, MISUSE)
    assert result.returncode == 1
    errors = [line.split(": error: ", 1)[1] for line in result.stdout.splitlines()
              if ": error: " in line]
    assert errors == [
        'Argument 2 to "scaled_add" has incompatible type "str"; expected "Tensor"  [arg-type]',
        'Too many positional arguments for "moments"  [call-arg]',
        'Incompatible types in assignment (expression has type "Tensor", variable has type '
        '"int")  [assignment]',
        'Module has no attribute "no_such_op"  [attr-defined]',
    ], result.stdout
