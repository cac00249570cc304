"""One case per diagnostic of the Python side: fake rules (codegen/shape.py), derivative formulas
(codegen/formulas.py) and the generated registrations (codegen/dest/py_reg.py: missing fake
kernels, batching and autocast rules, Python function signatures, functional variants).

tests/diagnostics_py/<name>.yaml must fail `python -m codegen check` with exactly the text in
<name>.expected; a case named `warning_*` must pass `check` with exactly that text on stderr. Refresh after an intended change with `make golden` (EXPECTTEST_ACCEPT=1), then
read the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.__main__ import main as cli
from codegen.diagnostics import Loc, UserError
from codegen.load import load_library
from tests import expect

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = ROOT / "tests" / "diagnostics_py"
CASES = sorted(CASES_DIR.glob("*.yaml"))


def render(case: Path, capsys) -> str:
    rel = case.relative_to(ROOT).as_posix()
    if case.stem.startswith("warning_"):
        assert cli(["check", rel]) == 0, f"{case.name} failed `check`"
        return capsys.readouterr().err
    assert cli(["check", rel]) == 1, f"{case.name} passed `check`"
    return capsys.readouterr().err


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_diagnostic(case: Path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    got = render(case, capsys)
    expect.check_file(case.with_suffix(".expected"), got)


def test_every_case_gives_one_error(monkeypatch):
    """A case pins one message: exactly one error, located in the case file (or, for a check on
    a Python function the case names, in that function's file beside the cases)."""
    monkeypatch.chdir(ROOT)
    from codegen import config
    from codegen.__main__ import _check_python_side

    project = config.default_project(ROOT)
    for case in CASES:
        rel = case.relative_to(ROOT).as_posix()
        if case.stem.startswith("warning_"):
            (warning,) = _check_python_side(load_library([rel]), project).items
            assert warning.severity == "warning" and warning.loc.path == rel, case.name
            continue
        with pytest.raises(UserError) as e:
            _check_python_side(load_library([rel]), project)
        errors = [d for d in e.value.diags.sorted() if d.severity == "error"]
        assert len(errors) == 1, (case.name, e.value.diags.render())
        assert errors[0].loc.path == rel or (
            errors[0].loc.path.startswith(CASES_DIR.relative_to(ROOT).as_posix() + "/")
            and errors[0].loc.path.endswith(".py")), (case.name, errors[0])


def test_no_orphan_expectations():
    assert expect.orphans(CASES_DIR, CASES) == []


def test_kernel_module_that_does_not_parse_is_reported_once(tmp_path, monkeypatch, capsys):
    """Three kernels named in a module with a syntax error: one error, at the error in the module,
    not one per kernel."""
    (tmp_path / "brokenk.py").write_text("def f(x):\n    return x\n\ndef g(:\n    pass\n")
    (tmp_path / "ops.yaml").write_text(
        "namespace: ex\nops:\n"
        "  - func: f(Tensor x) -> Tensor\n"
        "    dispatch: {CompositeExplicitAutograd: 'brokenk:f'}\n"
        "    fake: brokenk:f\n"
        "  - func: g(Tensor x) -> Tensor\n"
        "    dispatch: {CompositeExplicitAutograd: 'brokenk:g'}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli(["check", "ops.yaml"]) == 1
    assert capsys.readouterr().err == (
        "brokenk.py:4:7: error: invalid syntax, so opgen cannot read the kernels the op files "
        "name in brokenk.py\n"
        "    def g(:\n"
        "          ^\n"
        "hint: ops.yaml:4:43 names kernel brokenk:f in it\n"
        "1 error generated.\n")


def test_later_stages_report_beside_load_errors(tmp_path, monkeypatch, capsys):
    """One run reports every error: a misspelled kernel function (found when the library is
    rendered) beside a bad dispatch key (found while loading). Nothing is said that would follow
    from an error already reported: inside a wrong entry (c's misspelled helper) or about an op
    left out for its schema (e calls d)."""
    (tmp_path / "stk.py").write_text("def good(x):\n    return x.clone()\n")
    (tmp_path / "ops.yaml").write_text("""\
namespace: st
ops:
  - func: a(Tensor x) -> Tensor
    dispatch: {CPUU: a_cpu}
  - func: b(Tensor x) -> Tensor
    dispatch: {CompositeExplicitAutograd: 'stk:goood'}
    fake: like(x)
  - func: c(Tensor x) -> Tensor
    dispatch: {CPU: c_cpu}
    fake: like(x)
    derivatives:
      y: grad
      x: unbroadcst(grad, x)
  - func: d(Tensr x) -> Tensor
  - func: e(Tensor x) -> Tensor
    dispatch: {CPU: e_cpu}
    fake: like(x)
    derivatives:
      x: d(grad)
""")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for command in ("check", "generate"):
        assert cli([command, "ops.yaml"]) == 1
        err = capsys.readouterr().err
        assert [line for line in err.splitlines() if "error:" in line] == [
            "ops.yaml:4:16: error: unknown dispatch key 'CPUU'; allowed keys: CPU, CUDA, Meta, "
            "CompositeImplicitAutograd, CompositeExplicitAutograd",
            "ops.yaml:6:48: error: stk.py defines no function 'goood'",
            "ops.yaml:12:7: error: derivatives name 'y', which is not an input of st::c",
            "ops.yaml:14:13: error: unknown type 'Tensr' for argument 'x'"], command
    assert not (tmp_path / "generated").exists()


def test_later_errors_before_an_entry_that_did_not_load(tmp_path, monkeypatch, capsys):
    """An entry whose schema does not parse loads no op; its error is its own, not one inside the
    entry before it, whose later-stage error (a's misspelled kernel, b's Dimname) is reported too."""
    (tmp_path / "stk.py").write_text("def good(x):\n    return x.clone()\n")
    (tmp_path / "ops.yaml").write_text("""\
namespace: st
ops:
  - func: a(Tensor x) -> Tensor
    dispatch: {CompositeExplicitAutograd: 'stk:goood'}
    fake: like(x)
  - func: b(Tensor x, int n=1.5.3) -> Tensor
  - func: c(Tensor x, Dimname d) -> Tensor
  - doc: the entry starts before its func
    func: d(Tensor x, Tensor& y) -> Tensor
""")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli(["check", "ops.yaml"]) == 1
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "error:" in line] == [
        "ops.yaml:4:48: error: stk.py defines no function 'goood'",
        "ops.yaml:6:29: error: malformed number '1.5.3'",
        "ops.yaml:7:23: error: named dimensions ('Dimname') cannot be bound by a custom op kernel "
        "(in op st::c)",
        "ops.yaml:9:29: error: expected the argument's name after type 'Tensor', found '&'"]


def test_every_problem_of_a_library_op_call_in_one_run(tmp_path, monkeypatch, capsys):
    """Each wrong keyword of a formula's call is an error at that keyword, and a missing argument
    is one too, unless a misspelled keyword was meant for it."""
    (tmp_path / "ops.yaml").write_text("""\
namespace: ex
ops:
  - func: g(Tensor x, Tensor y) -> Tensor
    derivatives:
      x: 'h(grad, bb=y, q=1.0)'
      y: 'grad'
  - func: h(Tensor a, Tensor b, Tensor c, *, float s=1.0) -> Tensor
""")
    monkeypatch.chdir(tmp_path)
    assert cli(["check", "ops.yaml"]) == 1
    assert capsys.readouterr().err == """\
ops.yaml:5:11: error: ex::h is missing argument 'c'
          x: 'h(grad, bb=y, q=1.0)'
              ^~~~~~~~~~~~~~~~~~~~
hint: its schema: ex::h(Tensor a, Tensor b, Tensor c, *, float s=1.0) -> Tensor
ops.yaml:5:19: error: ex::h has no argument 'bb'
          x: 'h(grad, bb=y, q=1.0)'
                      ^~
hint: did you mean 'b'?
ops.yaml:5:25: error: ex::h has no argument 'q'
          x: 'h(grad, bb=y, q=1.0)'
                            ^
hint: its schema: ex::h(Tensor a, Tensor b, Tensor c, *, float s=1.0) -> Tensor
3 errors generated.
"""


def test_the_caret_of_a_python_reference_is_on_the_part_that_is_wrong():
    """A missing module is underlined alone, a missing function alone, in quoted and plain
    values; a value whose text differs from the reference (an escape) keeps the whole value."""
    from codegen.dest.py_sources import ref_part
    from codegen.model import PyRef

    plain = PyRef("pkg.mod", "fn", Loc("ops.yaml", 3, 21, 10))          # pkg.mod:fn
    quoted = PyRef("pkg.mod", "fn", Loc("ops.yaml", 3, 21, 12))         # 'pkg.mod:fn'
    escaped = PyRef("pkg.mod", "fn", Loc("ops.yaml", 3, 21, 15))        # "pkg.mod:\x66n"
    assert ref_part(plain, module=True) == Loc("ops.yaml", 3, 21, 7)
    assert ref_part(plain, module=False) == Loc("ops.yaml", 3, 29, 2)
    assert ref_part(quoted, module=True) == Loc("ops.yaml", 3, 22, 7)
    assert ref_part(quoted, module=False) == Loc("ops.yaml", 3, 30, 2)
    assert ref_part(escaped, module=False) == escaped.loc


def test_every_independent_mistake_of_the_formulas_in_one_run(tmp_path, monkeypatch, capsys):
    """A formula's mistakes in parts that do not depend on each other (a binding and the
    expression) are each an error, beside those of the op's other formulas."""
    (tmp_path / "ops.yaml").write_text("""\
namespace: ex
ops:
  - func: g(Tensor x, Tensor y, float r) -> Tensor
    derivatives:
      x: 'h = torch.nope(x); grad[:r] * h'
      y: 'torch.mul(grad.bogus, y)'
""")
    monkeypatch.chdir(tmp_path)
    assert cli(["check", "ops.yaml"]) == 1
    assert capsys.readouterr().err == """\
ops.yaml:5:15: error: 'torch.nope' does not exist
          x: 'h = torch.nope(x); grad[:r] * h'
                  ^~~~~~~~~~
hint: did you mean 'ne'?
ops.yaml:5:36: error: a slice bound must be an integer, and this is a float: torch refuses it \
when the formula runs
          x: 'h = torch.nope(x); grad[:r] * h'
                                       ^
ops.yaml:6:21: error: torch.Tensor has no attribute 'bogus'
          y: 'torch.mul(grad.bogus, y)'
                        ^~~~~~~~~~
hint: formulas use the attributes and methods of tensors (and of dtypes, devices, finfo and sizes)
3 errors generated.
"""
