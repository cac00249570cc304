"""Generated code is hygienic by construction (issue 7, items 1 and 8).

- Every user text reaching a generated file goes through one function of codegen/escape.py: each is
  checked here against hostile text (line breaks of every kind, NUL, comment terminators,
  backslashes, quotes), by parsing what it produces.
- An op file whose path holds a line break is refused at load, and even when it reaches the
  generators (the check switched off), no generated file gets a second line from it.
- Names: tests/hygiene/nasty_py.yaml (Python kernels only) names ops, arguments and kernels after
  what the generated Python uses; its generated modules compile, import and run, and its stub
  passes mypy. tests/hygiene/clash_py.yaml names arguments after the generated backward's
  locals, the builtins, `torch` and `_ops`: every sample check passes on it, and no generated
  function calls a name it binds. tests/hygiene/nasty_cpp.yaml names ops and arguments after C
  macros and the generated C++'s locals; its registration unit and header compile
  (`g++ -fsyntax-only`).
- What cannot be made safe is refused: pinned in tests/diagnostics/ (namespace_*, op_name_*,
  overload_*, kernel_*).
"""

from __future__ import annotations

import ast
import codecs
import importlib.util
import inspect
import io
import json
import re
import os
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
import torch

from codegen import config, escape, reserved
from codegen.__main__ import main as cli
from codegen.gen import render
from codegen.dest.py_common import reg_module_names
from codegen.load import load_library
from tests import expect, scratch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NASTY_PY = "tests/hygiene/nasty_py.yaml"
NASTY_CPP = "tests/hygiene/nasty_cpp.yaml"
CLASH_PY = "tests/hygiene/clash_py.yaml"

# Everything some tool takes as the end of a line, NUL, and the characters of comment and string
# syntax.
LINE_ENDS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
HOSTILE = [
    "plain", "a\nb", "a\rb", "a\r\nb", "x\u2028y", "x\u2029y", "nul\x00", "*/ /* // #", "\\",
    "ends in a backslash\\", "backslash then blanks\\  ", "\\\nspliced", '"""', "'''", '"', "'",
    "\x85\x0b\x0c\x1c\x1d\x1e", "bidi \u202eevil", "undecodable \udcff", "tab\there", "é ü 中",
]


def _rendered(paths: list[str]) -> dict[str, str]:
    lib = load_library(paths)
    diags = lib.diagnostics()
    files = render(lib, diags, config.default_project(ROOT))
    assert not diags.has_errors, diags.render()
    return dict(files.files)


# --------------------------------------------------------------------------------------------------
# The escaping functions


@pytest.mark.parametrize("text", HOSTILE)
def test_comments_stay_one_line(text):
    for fn in (escape.cpp_comment, escape.py_comment, escape.banner_path):
        out = fn(text)
        assert not any(c in out for c in LINE_ENDS + "\x00"), (fn.__name__, out)
        assert all(c == " " or c.isprintable() for c in out), (fn.__name__, out)
    # Python sees exactly one statement after the comment.
    tree = ast.parse(f"# {escape.py_comment(text)}\nx = 1\n")
    assert len(tree.body) == 1
    # A C++ comment never ends in a backslash (a line splice), even before blanks.
    assert not escape.cpp_comment(text).rstrip(" \t").endswith("\\")


@pytest.mark.parametrize("text", HOSTILE)
def test_py_string_is_the_value_on_one_line(text):
    lit = escape.py_string(text)
    assert not any(c in lit for c in LINE_ENDS + "\x00")
    assert ast.literal_eval(lit) == text


@pytest.mark.parametrize("text", HOSTILE)
def test_cpp_string_is_the_value_in_printable_ascii(text):
    lit = escape.cpp_string(text)
    assert lit[0] == lit[-1] == '"' and all(" " <= c <= "~" for c in lit)
    # C's escapes (\\, \", \ooo) decode back to the UTF-8 bytes of the value.
    assert codecs.escape_decode(lit[1:-1])[0] == text.encode("utf-8", "surrogateescape")


@pytest.mark.parametrize("text", HOSTILE + ["two\nlines\n\nand more", "last \"", "x\\"])
def test_docstring_is_the_value(text):
    source = f'def f():\n    """{escape.docstring(text)}"""\n'
    tree = ast.parse(source)
    assert len(tree.body) == 1 and len(tree.body[0].body) == 1
    doc = ast.get_docstring(tree.body[0], clean=True)
    assert doc == inspect.cleandoc(text)
    # Lines break only at the value's own line feeds.
    assert source.count("\n") == 2 + text.count("\n") + (1 if "\n" in text else 0)
    assert not any(c in source for c in LINE_ENDS.replace("\n", "") + "\x00")


def test_long_registration_lines_split_outside_string_literals():
    """codegen.dest.py_common.wrap_call splits a long call at its commas, never inside a string
    literal, escaped quotes included."""
    from codegen.dest.py_common import wrap_call

    args = [escape.py_string(t) for t in HOSTILE] + ["lib=_lib"]
    line = f"torch.library.register_fake({', '.join(args)})"
    assert ast.dump(ast.parse(wrap_call(line))) == ast.dump(ast.parse(line))


# --------------------------------------------------------------------------------------------------
# Op file paths


OP_FILE = """\
namespace: {ns}
ops:
  - func: f(Tensor self) -> Tensor
    doc: one
    dispatch: {{CPU: f_cpu}}
    fake: like(self)
"""
PAYLOADS = {
    "nl": "schemas/a\n__import__('os').system('exit 7')#.yaml",
    "cr": "schemas/b\rprint('pwned')#.yaml",
    "ls": "schemas/c\u2028print('pwned')#.yaml",
}

# The code in the paths (file names derived from them keep letters, digits and '_' only).
PAYLOAD_CODE = ("__import__('os')", "print('pwned')")


def _write_payload_files(root: Path) -> list[str]:
    (root / "schemas").mkdir()
    for ns, rel in PAYLOADS.items():
        (root / rel).write_text(OP_FILE.format(ns=ns), encoding="utf-8")
    return sorted(PAYLOADS.values())


def test_op_file_path_with_control_character_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    paths = _write_payload_files(tmp_path)
    assert cli(["check", *paths]) == 1
    expect.check_file(HERE / "hygiene" / "op_file_path_control.expected", capsys.readouterr().err)


def test_op_file_path_never_breaks_a_generated_line(tmp_path, monkeypatch, capsys):
    """Defence in depth: with the load-time check off, every generated file still holds the
    paths on their comment lines only."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("codegen.load.check_path", lambda path, diags: None)
    paths = _write_payload_files(tmp_path)
    assert cli(["generate", "--root", str(tmp_path), *paths]) == 0, capsys.readouterr().err
    outputs = [p for p in (tmp_path / "generated").rglob("*") if p.is_file()]
    assert len(outputs) > 10
    for path in outputs:
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(tmp_path)
        if path.name == "build.ninja":
            continue  # ninja has no way to spell a line break in a path: the load check is all
        assert not any(c in text for c in LINE_ENDS.replace("\n", "") + "\x00"), rel
        if path.name == "SHA256SUMS":
            # Data, not code: a comment line, or a digest and a path, one per line.
            for line in text.splitlines():
                assert line.startswith("# ") or re.fullmatch(r"[0-9a-f]{64}  \S.*", line), line
            continue
        if path.suffix == ".json":
            # Data (the build's index): the paths are inside JSON strings only.
            json.loads(text)
            for line in text.split("\n"):
                if any(p in line for p in PAYLOAD_CODE):
                    assert line.lstrip().startswith('"'), (rel, line)
            continue
        if path.suffix in (".py", ".pyi"):
            # Python: the paths are in comments and string literals only.
            ast.parse(text, filename=str(rel))
            for tok in tokenize.generate_tokens(io.StringIO(text).readline):
                if any(p in tok.string for p in PAYLOAD_CODE):
                    assert tok.type in (tokenize.COMMENT, tokenize.STRING), (rel, tok)
        else:
            # C++: in comments only.
            for line in text.split("\n"):
                if any(p in line for p in PAYLOAD_CODE):
                    assert line.startswith("//"), (rel, line)


# --------------------------------------------------------------------------------------------------
# Python names


def _import_file(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def nasty_python(tmp_path, monkeypatch):
    """The nasty op library defined in this process, its generated registrations imported from
    files (as `import runtime` would), ops.py beside them."""
    monkeypatch.chdir(ROOT)
    files = _rendered([NASTY_PY])
    for rel, text in files.items():
        if rel.startswith("generated/runtime/"):
            (tmp_path / Path(rel).name).write_text(text, encoding="utf-8")
    lib = load_library([NASTY_PY])
    defs = torch.library.Library("hyg", "DEF")
    reg = None
    try:
        for op in lib.ops:
            defs.define(str(op.schema).removeprefix("hyg::"))
        reg = _import_file("hyg_registrations", tmp_path / "_reg_hyg.py")
        yield tmp_path, reg, _import_file("hyg_ops", tmp_path / "ops.py")
    finally:
        if reg is not None:
            reg._lib._destroy()
            if "_vmap_lib" in reg.__dict__:     # the positional twins (codegen/dest/py_vmap.py)
                reg._vmap_lib._destroy()
        defs._destroy()


def test_nasty_python_library_imports_and_runs(nasty_python):
    _, reg, ops = nasty_python
    x, y = torch.ones(3), torch.full((3,), 2.0)
    # Kernels named functools, max, sum and len are imported under their module's prefix.
    for name in ("functools", "max", "sum", "len"):
        assert name not in vars(reg) and f"_tests_hygiene_kernels_{name}" in vars(reg)
    assert torch.ops.hyg.vm(x, y).tolist() == [5.0] * 3
    assert torch.ops.hyg._OPS(x).tolist() == [3.0] * 3
    assert torch.ops.hyg._torch(x).tolist() == [11.0] * 3
    assert torch.ops.hyg.Tensor(x).tolist() == [-1.0] * 3
    # Arguments `info` and `in_dims` beside the batching rule's own parameters.
    batched = torch.vmap(torch.ops.hyg.vm)(torch.ones(2, 3), torch.ones(2, 3))
    assert batched.shape == (2, 3) and batched.tolist() == [[3.0] * 3] * 2
    # Fake kernels, and a string default with every kind of line break.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert torch.ops.hyg.vm(torch.empty(2, 1), torch.empty(3)).shape == (2, 3)
        assert torch.ops.hyg.EOF(torch.empty(4)).shape == (4,)
    assert torch.ops.hyg.EOF(x).tolist() == [5.0] * 3
    # Functionalization keeps the argument `result` apart from its own local.
    def mutate(a, b):
        torch.ops.hyg.accumulate_(a, b)
        return a

    a = torch.zeros(3)
    assert torch.func.functionalize(mutate)(a, y).tolist() == [2.0] * 3
    assert a.tolist() == [2.0] * 3
    # `a_b` and `aB` both have an autograd.Function, under different names.
    for op in (torch.ops.hyg.a_b, torch.ops.hyg.aB):
        t = torch.ones(2, requires_grad=True)
        op(t).sum().backward()
        assert t.grad.tolist() == [1.0, 1.0]
    # runtime.ops: ops named after its own internals get a trailing underscore; the internals
    # stay what they are.
    assert ops._OPS_ is torch.ops.hyg._OPS.default and isinstance(ops._OPS, dict)
    assert ops._torch_ is torch.ops.hyg._torch.default and ops._torch is torch
    assert ops.Tensor_ is torch.ops.hyg.Tensor.default and ops.EOF is torch.ops.hyg.EOF.default
    assert {"_OPS_", "_torch_", "Tensor_", "vm"} <= set(ops.__all__)


def test_nasty_stub_passes_mypy(nasty_python):
    pytest.importorskip("mypy")
    folder, _, _ = nasty_python
    pkg = folder / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.pyi").write_text((folder / "ops.pyi").read_text(encoding="utf-8"))
    (folder / "use.py").write_text(
        "import torch\nfrom pkg import ops\n\n"
        "t: torch.Tensor = ops.Tensor_(ops._OPS_(ops._torch_(ops.vm(torch.ones(1), "
        "torch.ones(1)))))\n"
        "u: torch.Tensor = ops.EOF(t, s='x')\n")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / "build" / "mypy_cache"),
         "--no-error-summary", "--strict", "use.py"],
        cwd=folder, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def test_doc_with_nul_leaves_stub_parseable(monkeypatch):
    monkeypatch.chdir(ROOT)
    stub = _rendered([NASTY_PY])["generated/runtime/ops.pyi"]
    tree = ast.parse(stub)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "vm")
    lib = load_library([NASTY_PY])
    doc = next(op.doc for op in lib.ops if op.name.name == "vm")
    assert "\x00" in doc and "\u2028" in doc
    assert ast.get_docstring(fn).startswith(doc)


@pytest.fixture(scope="module")
def clash_library():
    from codegen import testing
    from tests import scratch

    with scratch.in_repo():
        lib = testing.load_python_library([CLASH_PY])
    yield lib
    lib.close()


def _clash_checks():
    from codegen import testing
    from tests import scratch

    with scratch.in_repo():
        cases = testing.load_cases([CLASH_PY])
    return [pytest.param(case, check, id=f"{case.id}-{check}")
            for case in cases for check in testing.CHECKS if testing.applies(case, check)]


@pytest.mark.parametrize("case,check", _clash_checks())
def test_ops_with_arguments_named_like_generated_names_pass_the_sample_checks(
        clash_library, case, check):
    """Arguments named like backward's locals (`ctx`, `needs`, `x_grad`, `xs_len`, `outputs`), the
    builtins generated functions call (`len`, `list`, `sum`, `tuple`), `torch` and `_ops`: each op
    is generated, and opcheck, gradcheck, torch.compile, export and vmap pass on it."""
    from codegen import testing

    assert testing.run_check(case, check) is None


def test_generated_batching_rules_and_mutating_ops_beside_hidden_names(clash_library):
    """What the sample checks leave out: generated batching rules (which refused ops naming an
    argument `_ops` or `list`), an in-place op differentiated through its functional variant
    (`torch` hidden), an out= op's Autograd kernel refusing a gradient, and a positional
    twin's batching rule."""
    from codegen import testing

    module = clash_library.modules["clash"]
    # Only the names some op hides are aliased at module level.
    assert {"_torch", "_len", "_list", "_tuple", "_ops_"} <= set(vars(module))
    assert module._torch is torch and module._len is len and module._ops_ is module._ops
    assert "_sum" not in vars(module)     # `int sum` is read by no function that calls sum()
    for case in clash_library.cases():
        if case.op.name.name in ("cat_op", "lists_op", "opt_op", "split_op"):
            assert testing.check_vmap(case) > 0, case.id
    x, outputs, flat_grads, t = (torch.randn(2, 3) for _ in range(4))
    got = torch.vmap(torch.ops.clash.split_op)(x, outputs, flat_grads, t)
    assert torch.equal(got[0][0], x * outputs) and torch.equal(got[1], x * t)

    x = torch.randn(3, requires_grad=True)
    y = x.clone()
    torch.ops.clash.scale_(y, list=3.0)
    y.sum().backward()
    assert x.grad.tolist() == [3.0] * 3
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        torch.ops.clash.scale.out(x, 3.0, out=torch.empty(3))
    # A keyword-only Tensor named `_vmap_ops`, the twins' module-level name.
    assert module._vmap_ops_ is module._vmap_ops
    info, in_dims, out = torch.randn(4, 3), torch.randn(3), torch.zeros(3, 4)
    torch.vmap(lambda a, o: torch.ops.clash.fill_kw(a, in_dims, _vmap_ops=o),
               in_dims=(0, 1), out_dims=None)(info, out)
    torch.testing.assert_close(out.T, info + in_dims)
    # Under torch.func: grad of an input named `torch`, and vmap over it.
    grad = torch.func.grad(lambda a, b: torch.ops.clash.torch_op(a, b).sum())
    a, b = torch.randn(3), torch.randn(2)
    torch.testing.assert_close(grad(a, b), b.sum().expand(3))
    batched = torch.vmap(grad, in_dims=(0, None))(torch.randn(4, 3), b)
    torch.testing.assert_close(batched, b.sum().expand(4, 3))


def test_no_generated_function_calls_a_name_it_binds(monkeypatch):
    """A generated per-op function reaches the builtins, `torch` and the module's names it calls
    under names none of its parameters or locals has: where an argument hides one (`len`,
    `_apply`), through the module-level alias (`_len = len`). Checked on the example, the golden
    inputs, the nasty library and the one whose arguments are named after what the generated
    code calls (a Tensor, an int, a list is never called)."""
    monkeypatch.chdir(ROOT)
    inputs = [["schemas"], *[[str(p.relative_to(ROOT))]
                             for p in sorted((HERE / "golden/py/inputs").glob("*.yaml"))],
              [NASTY_PY], [CLASH_PY]]
    checked = 0
    for paths in inputs:
        for rel, text in _rendered(paths).items():
            if not rel.startswith("generated/runtime/_reg_"):
                continue
            for node in ast.parse(text).body:
                if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or \
                        node.name in reg_module_names():
                    continue
                functions = [node] if isinstance(node, ast.FunctionDef) else \
                    [m for m in node.body if isinstance(m, ast.FunctionDef)]
                for fn in functions:
                    body = [n for stmt in fn.body for n in ast.walk(stmt)]
                    args = fn.args
                    bound = {n.id for n in body if isinstance(n, ast.Name)
                             and isinstance(n.ctx, ast.Store)} | \
                        {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                         *filter(None, (args.vararg, args.kwarg)))}
                    called = {n.func.id for n in body if isinstance(n, ast.Call)
                              and isinstance(n.func, ast.Name)}
                    assert not called & bound, (rel, fn.name, called & bound)
                    checked += 1
    assert checked > 200


def test_setup_context_keeps_each_attribute_once(monkeypatch):
    """The attributes setup_context derives from an input's name (`x_shape` for the shape of
    `x`, `xs_count` for the length of `xs`) are made fresh against the values it keeps under
    their inputs' names: clash::meta_op, count_op and opt_count have values `x_shape`,
    `x_dtype` and `xs_count`, which the metadata and the lengths overwrote (wrong gradients or
    an error in backward; their sample checks run them)."""
    monkeypatch.chdir(ROOT)
    checked = set()
    for paths in (["schemas"], [CLASH_PY]):
        for rel, text in _rendered(paths).items():
            if not rel.startswith("generated/runtime/_reg_"):
                continue
            for node in ast.parse(text).body:
                methods = [m for m in node.body if isinstance(m, ast.FunctionDef)] \
                    if isinstance(node, ast.ClassDef) else [node]
                for fn in methods:
                    if not (isinstance(fn, ast.FunctionDef)
                            and fn.name.endswith("setup_context")):
                        continue
                    ctx = fn.args.args[0].arg
                    stored = [t.attr for stmt in fn.body if isinstance(stmt, ast.Assign)
                              for t in stmt.targets if isinstance(t, ast.Attribute)
                              and isinstance(t.value, ast.Name) and t.value.id == ctx]
                    assert len(stored) == len(set(stored)), (rel, node.name, stored)
                    checked.add(node.name)
    assert {"_MetaOpFunction", "_CountOpFunction", "_opt_count_setup_context"} <= checked


# --------------------------------------------------------------------------------------------------
# C++ names


def _compile_flags() -> list[str]:
    from torch.utils import cpp_extension

    std = "c++20" if "-std=c++20" in Path(cpp_extension.__file__).read_text() else "c++17"
    return ([f"-std={std}", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
             f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
             '-DOPGEN_TORCH_VERSION="test"']
            + [f for inc in cpp_extension.include_paths("cpu") for f in ("-isystem", inc)])


def test_nasty_cpp_library_compiles(tmp_path, monkeypatch):
    """Ops named EOF, INT_MAX and errno, arguments named op, NULL, INT_MAX, errno and
    TORCH_CHECK, an op `like` beside the Meta helper meta_like, kernels named f_CPU and
    meta_like, a CR and a comment terminator in a fake rule, a backslash ending a string
    default: the registration unit (with its Meta kernels), the kernel header with the call API,
    the AOTI shims, the Autograd kernels and the stamp compile without a warning."""
    monkeypatch.chdir(ROOT)
    cxx = os.environ.get("CXX", "c++")
    files = _rendered([NASTY_CPP])
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    cpp = tmp_path / "generated" / "cpp"
    units = sorted(str(p) for p in (cpp / "hygc").glob("*.cpp"))
    # the registration unit, the stamp, the AOTI shims and the Autograd kernels (of ops without
    # derivatives)
    assert len(units) == 4
    # The header is included by the registration unit; its call API also goes through a use.
    use = tmp_path / "use.cpp"
    use.write_text("#include <hygc/nasty_cpp.h>\n"
                   "at::Tensor use(const at::Tensor& t) {\n"
                   "  return hygc::ops::INT_MAX_(hygc::ops::EOF_(t, t, 1, 2, \"x\"), t);\n"
                   "}\n")
    result = subprocess.run([cxx, *_compile_flags(), "-I", str(cpp), *units, str(use)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-5000:]
    for rel in files:
        if rel.endswith((".py", ".pyi")):
            ast.parse(files[rel])


@scratch.on_pinned_torch()
def test_reserved_record_is_current():
    """codegen/reserved.json is what `python -m codegen.reserved --refresh` writes for the pinned
    torch and this compiler."""
    import json

    recorded = json.loads((ROOT / "codegen" / reserved.RECORD_FILE).read_text(encoding="utf-8"))
    fresh = reserved.record()
    for key in recorded:
        assert sorted(recorded[key]) == fresh[key], f"{key}: run python -m codegen.reserved --refresh"
