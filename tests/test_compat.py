"""The compatibility gate (`snapshot`, `bc-check`, codegen.compat): one pinned case per kind of
break, declared breaks, each compatible change, the changelog, and a table of schema pairs on
which the gate agrees with torch's FunctionSchema.is_backward_compatible_with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codegen import compat
from codegen.__main__ import main
from codegen.parse import parse_schema

ROOT = Path(__file__).resolve().parent.parent

BASE = """\
namespace: ex
ops:
  - func: f(Tensor x, Tensor y, float alpha=1.0) -> Tensor
    tags: [pointwise, nondeterministic_seeded]
    dispatch: {CPU: f_cpu, CUDA: f_cuda}
    fake: like(x)
    derivatives:
      x: grad * alpha
      y: g(grad)
    vmap: pointwise
    autocast: {device_type: cuda, cast_inputs: float16}
  - func: g(Tensor x) -> Tensor
    dispatch: {CPU: g_cpu}
    fake: like(x)
    derivatives:
      x: grad
  - func: h(Tensor x, int n, *, str mode="a") -> Tensor
  - func: h.out(Tensor x, int n, *, str mode="a", Tensor(a!) out) -> Tensor(a!)
"""


def run(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def lib(tmp_path, monkeypatch, capsys):
    """A project with BASE snapshotted; returns a function that writes the op file anew and runs
    bc-check."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "schemas").mkdir()
    ops = tmp_path / "schemas" / "ops.yaml"
    ops.write_text(BASE)
    assert run(["snapshot"], capsys) == (0, "wrote schemas/opgen.lock (4 ops)\n", "")

    def check(text: str, *args: str):
        ops.write_text(text)
        return run(["bc-check", *args], capsys)

    return check


def edit(*pairs: tuple[str, str], text: str = BASE) -> str:
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new)
    return text


def test_unchanged_library_passes(lib):
    assert lib(BASE) == (0, "4 ops compatible with schemas/opgen.lock: 0 added, 0 changed, "
                            "0 removed\n", "")


def test_snapshot_is_written_only_when_it_changes(lib, capsys):
    lock = Path("schemas/opgen.lock")
    mtime = lock.stat().st_mtime_ns
    assert run(["snapshot"], capsys) == (0, "up to date: schemas/opgen.lock (4 ops)\n", "")
    assert lock.stat().st_mtime_ns == mtime


def test_snapshot_is_one_field_per_line(lib):
    text = Path("schemas/opgen.lock").read_text()
    entry = json.loads(text)["ops"]["ex::f"]
    assert entry == {
        "schema": "ex::f(Tensor x, Tensor y, float alpha=1.0) -> Tensor",
        "file": "schemas/ops.yaml",
        "tags": ["needs_contiguous_strides", "nondeterministic_seeded", "pointwise"],
        "kernels": ["CPU", "CUDA"], "devices": ["CPU", "CUDA", "Meta"], "fake": "rule",
        "differentiable": ["x", "y"], "double_backward": True, "vmap": "pointwise",
        "autocast": "cuda:float16", "api": "f"}
    assert '      "kernels": ["CPU", "CUDA"],\n' in text


# --------------------------------------------------------------------------------------------------
# One case per kind of break, message pinned


def test_removed_op_is_located_in_the_snapshot(lib):
    text = BASE[:BASE.index("  - func: h(")]
    code, out, err = lib(text)
    assert code == 1 and out == ""
    assert err == """\
schemas/opgen.lock:31:5: error: ex::h: op 'ex::h' was removed: callers break
        "ex::h": {
        ^~~~~~~
hint: restore it, or declare it under the op file's 'removed:' with a reason
schemas/opgen.lock:44:5: error: ex::h.out: op 'ex::h.out' was removed: callers break
        "ex::h.out": {
        ^~~~~~~~~~~
hint: restore it, or declare it under the op file's 'removed:' with a reason
2 errors generated.
"""


def test_removed_overload(lib):
    code, _, err = lib(BASE[:BASE.index("  - func: h.out(")])
    assert code == 1
    assert "error: ex::h.out: overload 'ex::h.out' was removed: callers break" in err


def test_renamed_argument(lib):
    code, _, err = lib(edit(("h(Tensor x, int n,", "h(Tensor x, int count,")))
    assert code == 1
    assert err == """\
schemas/ops.yaml:17:27: error: ex::h: argument 'n' was renamed to 'count': callers passing it by name break
      - func: h(Tensor x, int count, *, str mode="a") -> Tensor
                              ^~~~~
hint: keep the op compatible, or declare the break with 'breaks: {reason: ...}'
1 error generated.
"""


def test_reordered_arguments(lib):
    code, _, err = lib(edit(("f(Tensor x, Tensor y,", "f(Tensor y, Tensor x,")))
    assert code == 1
    assert err == """\
schemas/ops.yaml:3:20: error: ex::f: argument 'x' moved from position 1 to 2: positional callers pass it to 'y'
      - func: f(Tensor y, Tensor x, float alpha=1.0) -> Tensor
                       ^
hint: keep the old order; add new arguments at the end
schemas/ops.yaml:3:30: error: ex::f: argument 'y' moved from position 2 to 1: positional callers pass it to 'x'
      - func: f(Tensor y, Tensor x, float alpha=1.0) -> Tensor
                                 ^
hint: keep the old order; add new arguments at the end
2 errors generated.
"""


def test_retyped_argument(lib):
    code, _, err = lib(edit(("h(Tensor x, int n,", "h(Tensor x, float n,")))
    assert code == 1
    assert "schemas/ops.yaml:17:29: error: ex::h: argument 'n' changed type from 'int' to " \
           "'float', which does not take every value it took\n" in err


def test_newly_required_argument(lib):
    code, _, err = lib(edit(('h(Tensor x, int n, *, str mode="a")',
                             'h(Tensor x, int n, *, str mode="a", bool fast)')))
    assert code == 1
    assert err == """\
schemas/ops.yaml:17:52: error: ex::h: new argument 'fast' has no default: existing calls do not pass it
      - func: h(Tensor x, int n, *, str mode="a", bool fast) -> Tensor
                                                       ^~~~
hint: give 'fast' a default
1 error generated.
"""


def test_inserted_argument(lib):
    code, _, err = lib(edit(("h(Tensor x, int n,", "h(Tensor x, int m, int n,")))
    assert code == 1
    assert "error: ex::h: new argument 'm' was inserted at position 2, before 'n': positional " \
           "callers pass their arguments to the wrong parameters\n" in err


def test_removed_argument(lib):
    code, _, err = lib(edit(('h(Tensor x, int n, *, str mode="a") -> Tensor',
                             'h(Tensor x, int n) -> Tensor')))
    assert code == 1
    assert "error: ex::h: argument 'mode' was removed: callers passing it break\n" in err


def test_changed_default(lib):
    code, _, err = lib(edit(("float alpha=1.0)", "float alpha=2.0)")))
    assert code == 1
    assert "schemas/ops.yaml:3:39: error: ex::f: argument 'alpha' changed its default from 1.0 " \
           "to 2.0: callers leaving it out get another result\n" in err


def test_lost_default(lib):
    code, _, err = lib(edit(("float alpha=1.0)", "float alpha)")))
    assert code == 1
    assert "error: ex::f: argument 'alpha' lost its default (1.0): callers leaving it out " \
           "break\n" in err


def test_became_keyword_only(lib):
    code, _, err = lib(edit(('h(Tensor x, int n, *, str mode="a")',
                             'h(Tensor x, *, int n, str mode="a")')))
    assert code == 1
    assert "error: ex::h: argument 'n' became keyword-only: positional callers break\n" in err


def test_changed_return(lib):
    code, _, err = lib(edit(("h(Tensor x, int n, *, str mode=\"a\") -> Tensor",
                             "h(Tensor x, int n, *, str mode=\"a\") -> Tensor?")))
    assert code == 1
    assert "error: ex::h: return 1 changed type from 'Tensor' to 'Tensor?', which callers may " \
           "not handle\n" in err


def test_changed_alias_annotation(lib):
    code, _, err = lib(edit(("Tensor(a!) out) -> Tensor(a!)", "Tensor(b!) out) -> Tensor(b!)")))
    assert code == 1
    assert "error: ex::h.out: argument 'out' changed its alias annotation from 'Tensor(a!)' to " \
           "'Tensor(b!)'\n" in err


def test_lost_derivative(lib):
    code, _, err = lib(edit(("      y: g(grad)\n", "      y: not_implemented(\"later\")\n")))
    assert code == 1
    assert err == """\
schemas/ops.yaml:3:11: error: ex::f: lost the derivative for 'y'
      - func: f(Tensor x, Tensor y, float alpha=1.0) -> Tensor
              ^
hint: restore its formula under 'derivatives:'
1 error generated.
"""


def test_lost_double_backward(lib):
    code, _, err = lib(edit(("    derivatives:\n      x: grad\n", "")))
    assert code == 1
    assert "error: ex::g: lost its derivatives: it is no longer differentiable\n" in err
    assert "error: ex::f: its backward is no longer differentiable (double backward, " \
           "gradgradcheck, torch.func.hessian break)\n" in err


def test_lost_vmap_rule(lib):
    code, _, err = lib(edit(("    vmap: pointwise\n", "")))
    assert code == 1
    assert "error: ex::f: lost its vmap rule (pointwise): torch.vmap no longer batches it\n" in err


def test_lost_and_changed_autocast_rule(lib):
    code, _, err = lib(edit(("    autocast: {device_type: cuda, cast_inputs: float16}\n", "")))
    assert code == 1
    assert "error: ex::f: its autocast rule (cuda:float16) was removed: results under " \
           "autocast change\n" in err
    code, _, err = lib(edit(("cast_inputs: float16", "cast_inputs: bfloat16")))
    assert code == 1
    assert "error: ex::f: its autocast rule (cuda:float16) changed to cuda:bfloat16" in err


def test_dropped_tag_that_changes_compile_behaviour(lib):
    code, _, err = lib(edit(("tags: [pointwise, nondeterministic_seeded]", "tags: [pointwise]")))
    assert code == 1
    assert "error: ex::f: dropped tag 'nondeterministic_seeded': torch.compile may deduplicate " \
           "or reorder its calls as if they were deterministic\n" in err


def test_lost_device_kernel_and_fake(lib):
    code, _, err = lib(edit(("dispatch: {CPU: f_cpu, CUDA: f_cuda}", "dispatch: {CPU: f_cpu}")))
    assert code == 1
    assert "error: ex::f: no longer runs on CUDA: it lost its CUDA kernel\n" in err
    code, _, err = lib(edit(("    dispatch: {CPU: g_cpu}\n    fake: like(x)\n", "")))
    assert code == 1
    assert "error: ex::g: fake tensors can no longer run it: torch.compile and torch.export " \
           "cannot trace it\n" in err


def test_every_break_of_every_op_is_reported(lib):
    code, _, err = lib(edit(("float alpha=1.0)", "float alpha=2.0)"),
                            ("    vmap: pointwise\n", ""),
                            ("h(Tensor x, int n,", "h(Tensor x, int count,")))
    assert code == 1 and err.endswith("3 errors generated.\n")


# --------------------------------------------------------------------------------------------------
# Declared breaks


def test_declared_break_passes(lib):
    code, out, err = lib(edit(("float alpha=1.0)", "float alpha=2.0)"),
                              ("    vmap: pointwise\n",
                               "    breaks: {reason: \"alpha=2 is what every caller passes\"}\n")))
    assert (code, err) == (0, "")
    assert out == "4 ops compatible with schemas/opgen.lock: 0 added, 1 changed, 0 removed, " \
                  "1 declared break\n"


def test_declared_removal_passes(lib):
    text = BASE[:BASE.index("  - func: h.out(")].replace(
        "namespace: ex\n", "namespace: ex\nremoved:\n  h.out: {reason: \"use h\"}\n")
    code, out, err = lib(text)
    assert (code, err) == (0, "")
    assert "1 removed, 1 declared break" in out


def test_stale_declarations_are_errors(lib):
    code, _, err = lib(edit(("    vmap: pointwise\n", "    vmap: pointwise\n    breaks: {reason: x}\n"),
                            ("namespace: ex\n",
                             "namespace: ex\nremoved:\n  h: {reason: y}\n  gone: {reason: z}\n")))
    assert code == 1
    assert err == """\
schemas/ops.yaml:3:3: error: 'ex::h' is declared removed, but the library defines it
      h: {reason: y}
      ^
hint: drop it from 'removed:' (the op is defined at schemas/ops.yaml:21:11), or remove the op
schemas/ops.yaml:4:3: error: 'ex::gone' is declared removed, but the snapshot has no op of that name
      gone: {reason: z}
      ^~~~
hint: remove the declaration
schemas/ops.yaml:14:5: error: ex::f declares a break, but it is compatible with the snapshot
        breaks: {reason: x}
        ^~~~~~
hint: remove the declaration (it would hide the next break)
3 errors generated.
"""


def test_break_declared_on_a_new_op_says_it_is_new(lib):
    """`breaks:` on an op the snapshot does not have (just added, or renamed to it) is stale too;
    the message says the op is new rather than that it is compatible with its snapshot entry."""
    code, _, err = lib(BASE + """\
  - func: k(Tensor x) -> Tensor
    breaks: {reason: "renamed from g"}
""")
    assert code == 1
    assert err == """\
schemas/ops.yaml:20:5: error: ex::k declares a break, but it is a new op: the snapshot has no op of that name
        breaks: {reason: "renamed from g"}
        ^~~~~~
hint: remove the declaration (it would hide the next break)
1 error generated.
"""


def test_renumbered_bare_write_sets(tmp_path, monkeypatch, capsys):
    """A bare '!' is c10's alias set $N, numbered in order. When a break before it renumbers it
    (`input` loses its '!'), only that break is reported, not an alias change of `residual` from
    'Tensor!' to 'Tensor!'; when the renumbering is the only difference torch sees (a new
    argument with a bare '!' before the out= one), the message says what happened."""
    monkeypatch.chdir(tmp_path)
    ops = tmp_path / "ops.yaml"
    ops.write_text("namespace: ex\nops:\n"
                   "  - func: f(Tensor! input, Tensor! residual, Tensor weight) -> ()\n"
                   "  - func: g(Tensor x, *, Tensor! out) -> ()\n")
    assert run(["snapshot", "ops.yaml"], capsys)[0] == 0
    ops.write_text("namespace: ex\nops:\n"
                   "  - func: f(Tensor input, Tensor! residual, Tensor weight) -> ()\n"
                   "  - func: g(Tensor x, Tensor!? y=None, *, Tensor! out) -> ()\n")
    code, _, err = run(["bc-check", "ops.yaml"], capsys)
    assert code == 1
    assert err == """\
ops.yaml:3:20: error: ex::f: argument 'input' changed its alias annotation from 'Tensor!' to 'Tensor'
      - func: f(Tensor input, Tensor! residual, Tensor weight) -> ()
                       ^~~~~
hint: what an op reads, writes and returns as a view is part of its contract (torch.compile, functionalization)
ops.yaml:4:51: error: ex::g: argument 'out' keeps its bare '!', but c10 now names that alias set $1 instead of $0: a bare '!' was added or removed before it, and torch compares the names
      - func: g(Tensor x, Tensor!? y=None, *, Tensor! out) -> ()
                                                      ^~~
hint: keep the op compatible, or declare the break with 'breaks: {reason: ...}'
2 errors generated.
"""


def test_breaks_needs_a_reason(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("ops.yaml").write_text("- func: ex::f(Tensor x) -> Tensor\n  breaks: {}\n")
    code, _, err = run(["check", "ops.yaml"], capsys)
    assert code == 1
    assert err == """\
ops.yaml:2:11: error: 'breaks' needs 'reason:'
      breaks: {}
              ^~
hint: say why the break is intended: {reason: "..."}
1 error generated.
"""


def test_removed_names_an_op(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("ops.yaml").write_text("removed:\n  'a b': {reason: x}\n  f: {reason: y}\n"
                                "  ex::g: {reason: ' '}\nops: []\n")
    code, _, err = run(["check", "ops.yaml"], capsys)
    assert code == 1
    assert err == """\
ops.yaml:2:3: error: 'a b' is not an op name
      'a b': {reason: x}
      ^~~~~
hint: write ns::name or ns::name.overload (the namespace may be left out in a file with 'namespace:')
ops.yaml:3:3: error: removed op 'f' has no namespace
      f: {reason: y}
      ^
hint: write 'my_ns::f'
ops.yaml:4:19: error: the reason of a declared break is empty
      ex::g: {reason: ' '}
                      ^~~
hint: say why the break is intended
3 errors generated.
"""


# --------------------------------------------------------------------------------------------------
# Compatible changes


def test_new_op_passes(lib):
    code, out, _ = lib(BASE + "  - func: k(Tensor x) -> Tensor\n")
    assert code == 0 and "1 added" in out


def test_keyword_only_argument_with_default_passes(lib):
    # Given to h and its out= overload alike, so h.out keeps its functional variant (and no
    # `out` tag: Note [The out tag] in codegen/tags.py).
    code, out, _ = lib(edit(('h(Tensor x, int n, *, str mode="a")',
                             'h(Tensor x, int n, *, str mode="a", bool fast=False)'),
                            ('h.out(Tensor x, int n, *, str mode="a",',
                             'h.out(Tensor x, int n, *, str mode="a", bool fast=False,')))
    assert code == 0 and "2 changed" in out


def test_trailing_positional_argument_with_default_passes(lib):
    code, out, _ = lib(edit(("float alpha=1.0)", "float alpha=1.0, int k=3)")))
    assert code == 0 and "1 changed" in out


def test_argument_before_out_arguments_with_default_passes(lib):
    code, _, _ = lib(edit(('mode="a", Tensor(a!) out)', 'mode="a", int k=1, Tensor(a!) out)')))
    assert code == 0


def test_widened_argument_and_new_rules_pass(lib):
    code, _, _ = lib(edit(("h(Tensor x, int n,", "h(Tensor x, SymInt? n,"),
                          ("  - func: g(Tensor x) -> Tensor\n",
                           "  - func: g(Tensor x) -> Tensor\n    vmap: pointwise\n"
                           "    tags: [core]\n")))
    assert code == 0


# --------------------------------------------------------------------------------------------------
# Changelog, snapshot errors, the example


def test_changelog(lib):
    text = edit(("float alpha=1.0)", "float alpha=2.0)"),
                ("    vmap: pointwise\n", "    breaks: {reason: \"callers pass *2*\"}\n"),
                ('h(Tensor x, int n, *, str mode="a")',
                 'h(Tensor x, int n, *, str mode="a", bool fast=False)'))
    text = text[:text.index("  - func: h.out(")] + "  - func: k(Tensor x) -> Tensor\n"
    code, out, err = lib(text, "--changelog")
    assert code == 1        # h.out's removal is not declared
    assert out == """\
## Op changes since `schemas/opgen.lock`

### Added

- `ex::k(Tensor x) -> Tensor`

### Removed

- **breaking**: `ex::h.out(Tensor x, int n, *, str mode="a", Tensor(a!) out) -> Tensor(a!)`

### Changed

- `ex::f` **breaking** (intended: callers pass \\*2\\*)
  - `ex::f(Tensor x, Tensor y, float alpha=1.0) -> Tensor` -> `ex::f(Tensor x, Tensor y, float alpha=2.0) -> Tensor`
  - **breaking**: argument 'alpha' changed its default from 1.0 to 2.0: callers leaving it out get another result
  - **breaking**: lost its vmap rule (pointwise): torch.vmap no longer batches it
- `ex::h`
  - `ex::h(Tensor x, int n, *, str mode="a") -> Tensor` -> `ex::h(Tensor x, int n, *, str mode="a", bool fast=False) -> Tensor`
  - new keyword-only argument 'fast' with default False

"""
    assert "ex::h.out: overload 'ex::h.out' was removed" in err


def test_missing_and_damaged_snapshot(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "ops.yaml").write_text(BASE)
    code, _, err = run(["bc-check"], capsys)
    assert (code, err) == (1, "schemas/opgen.lock:1:1: error: no snapshot of the op contracts "
                              "here\nhint: run `opgen snapshot` to record the current contract, "
                              "and commit it\n1 error generated.\n")
    (tmp_path / "schemas" / "opgen.lock").write_text('{"format": 1,\n "ops": [}\n')
    code, _, err = run(["bc-check"], capsys)
    assert code == 1
    assert err.startswith("schemas/opgen.lock:2:10: error: the snapshot is not valid JSON: "
                          "Expecting value\n")


def test_snapshot_path_from_pyproject(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.opgen]\npackage = "p"\nschemas = ["ops.yaml"]\nsnapshot = "api/ops.lock"\n')
    (tmp_path / "p").mkdir()
    (tmp_path / "ops.yaml").write_text(BASE)
    assert run(["snapshot"], capsys)[:2] == (0, "wrote api/ops.lock (4 ops)\n")
    assert run(["bc-check"], capsys)[0] == 0


def test_example_library_matches_its_snapshot(monkeypatch, capsys):
    """The committed schemas/opgen.lock (CI runs `make bc-check` too)."""
    monkeypatch.chdir(ROOT)
    code, out, err = run(["bc-check"], capsys)
    assert (code, err) == (0, ""), err


def test_differentiable_inputs_agree_with_the_sample_checks(monkeypatch):
    """The snapshot records the inputs the sample checks differentiate (codegen.testing takes
    codegen.contract's)."""
    from codegen import contract, testing
    from codegen.load import load_library

    monkeypatch.chdir(ROOT)
    lib = load_library(["schemas", "tests/samplelib"])
    assert any(contract.differentiable_inputs(op) for op in lib.ops)
    for op in lib.ops:
        assert contract.differentiable_inputs(op) == testing.differentiable_inputs(op), op.name


OTHER_G = """\
namespace: other
ops:
  - func: g(Tensor x) -> Tensor
    dispatch: {CPU: g_cpu}
"""


def test_a_changed_python_api_name_breaks_callers(lib):
    """An op of another namespace named like `ex::g` makes both `ops.<ns>_g` (Note [API names]):
    `ops.g` is gone, though neither op's schema changed."""
    Path("schemas/other.yaml").write_text(OTHER_G)
    code, out, err = lib(BASE)
    assert (code, out) == (1, "")
    assert err == """\
schemas/ops.yaml:12:11: error: ex::g: its Python API name changed: ops.g is now ops.ex_g, and \
callers of ops.g break
      - func: g(Tensor x) -> Tensor
              ^
hint: another op now has its name, and ops sharing a name are told apart by overload, then \
namespace (docs/FORMAT.md, Compatibility): rename one of them, or declare the break with \
'breaks: {reason: ...}'
1 error generated.
"""


def test_a_snapshot_without_api_names_compares_none(lib):
    """Snapshots written before the API name was recorded still read, and compare the rest."""
    lock = Path("schemas/opgen.lock")
    data = json.loads(lock.read_text())
    for entry in data["ops"].values():
        del entry["api"]
    lock.write_text(json.dumps(data, indent=2))
    Path("schemas/other.yaml").write_text(OTHER_G)
    assert lib(BASE) == (0, "5 ops compatible with schemas/opgen.lock: 1 added, 0 changed, "
                            "0 removed\n", "")


# --------------------------------------------------------------------------------------------------
# Agreement with torch (Note [Agreeing with torch] in codegen/compat.py)

# (old, new) without the name: the op is `ex::f` in both.
PAIRS = [
    ("(Tensor x) -> Tensor", "(Tensor x) -> Tensor"),
    ("(Tensor x) -> Tensor", "(Tensor x, int k=1) -> Tensor"),
    ("(Tensor x) -> Tensor", "(Tensor x, *, int k=1) -> Tensor"),
    ("(Tensor x) -> Tensor", "(Tensor x, int k) -> Tensor"),
    ("(Tensor x) -> Tensor", "(Tensor x, *, int k) -> Tensor"),
    ("(Tensor x, int a) -> Tensor", "(Tensor x, int b) -> Tensor"),
    ("(Tensor x, Tensor y) -> Tensor", "(Tensor y, Tensor x) -> Tensor"),
    ("(Tensor x, Tensor y) -> Tensor", "(Tensor x) -> Tensor"),
    ("(Tensor x, int a) -> Tensor", "(Tensor x, int b, int a) -> Tensor"),
    ("(int x) -> Tensor", "(SymInt x) -> Tensor"),
    ("(SymInt x) -> Tensor", "(int x) -> Tensor"),
    ("(SymInt[] x) -> Tensor", "(int[] x) -> Tensor"),
    ("(SymBool x) -> Tensor", "(bool x) -> Tensor"),
    ("(int x) -> Tensor", "(float x) -> Tensor"),
    ("(int x) -> Tensor", "(Scalar x) -> Tensor"),
    ("(float x) -> Tensor", "(Scalar x) -> Tensor"),
    ("(bool x) -> Tensor", "(Scalar x) -> Tensor"),
    ("(int x) -> Tensor", "(int? x) -> Tensor"),
    ("(int? x) -> Tensor", "(int x) -> Tensor"),
    ("(Tensor x) -> Tensor", "(Tensor? x) -> Tensor"),
    ("(int[] x) -> Tensor", "(int[]? x) -> Tensor"),
    ("(int[] x) -> Tensor", "(int[2] x) -> Tensor"),
    ("(int[] x) -> Tensor", "(Scalar[] x) -> Tensor"),
    ("(Tensor[] x) -> Tensor", "(Tensor?[] x) -> Tensor"),
    ("((int, int) x) -> Tensor", "((int?, int) x) -> Tensor"),
    ("(Dict(str, Tensor) x) -> Tensor", "(Dict(str, Tensor?) x) -> Tensor"),
    ("(Scalar a=1) -> Tensor", "(Scalar a=1.0) -> Tensor"),
    ("(Scalar a=1) -> Tensor", "(Scalar a=True) -> Tensor"),
    ("(float a=1) -> Tensor", "(float a=1.0) -> Tensor"),
    ("(float[] a=[1, 2]) -> Tensor", "(float[] a=[1.0, 2.0]) -> Tensor"),
    ("(int[2] k=1) -> Tensor", "(int[2] k=[1, 1]) -> Tensor"),
    ("(int[2] k=1) -> Tensor", "(int[2] k=[1, 2]) -> Tensor"),
    ("(ScalarType t=long) -> Tensor", "(ScalarType t=int64) -> Tensor"),
    ("(ScalarType t=float) -> Tensor", "(ScalarType t=float32) -> Tensor"),
    ("(ScalarType? t=None) -> Tensor", "(ScalarType? t=float32) -> Tensor"),
    ("(int r=Mean) -> Tensor", "(int r=1) -> Tensor"),
    ('(str m="a") -> Tensor', '(str m="b") -> Tensor'),
    ('(Device d="cpu") -> Tensor', '(Device d="cpu:0") -> Tensor'),
    ("(int x=1) -> Tensor", "(int x) -> Tensor"),
    ("(int x) -> Tensor", "(int x=1) -> Tensor"),
    ("(int? x=None) -> Tensor", "(int? x=1) -> Tensor"),
    ("(Tensor x, *, int a) -> Tensor", "(Tensor x, int a) -> Tensor"),
    ("(Tensor x, int a) -> Tensor", "(Tensor x, *, int a) -> Tensor"),
    ("(Tensor x) -> Tensor", "(Tensor x) -> Tensor?"),
    ("(Tensor x) -> Tensor?", "(Tensor x) -> Tensor"),
    ("(Tensor x) -> Tensor", "(Tensor x) -> Tensor y"),
    ("(Tensor x) -> Tensor", "(Tensor x) -> (Tensor, Tensor)"),
    ("(int x) -> int", "(int x) -> Scalar"),
    ("(int x) -> Scalar", "(int x) -> int"),
    ("(Tensor x) -> Tensor", "(Tensor x) -> int"),
    ("(Tensor(a) x) -> Tensor(a)", "(Tensor(b) x) -> Tensor(b)"),
    ("(Tensor(a) x) -> Tensor(a)", "(Tensor x) -> Tensor"),
    ("(Tensor! x) -> ()", "(Tensor(a!) x) -> ()"),
    ("(Tensor(a!) x) -> ()", "(Tensor(a!) x) -> ()"),
    ("(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
     "(Tensor x, int k=1, *, Tensor(a!) out) -> Tensor(a!)"),
    ("(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
     "(Tensor x, *, int k=1, Tensor(a!) out) -> Tensor(a!)"),
    ("(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
     "(Tensor x, int k, *, Tensor(a!) out) -> Tensor(a!)"),
    ("(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
     "(Tensor x, *, Tensor(a!) out2) -> Tensor(a!)"),
    ("(Tensor x, *, Tensor(a!) o1, Tensor(b!) o2) -> (Tensor(a!), Tensor(b!))",
     "(Tensor x, *, Tensor(b!) o2, Tensor(a!) o1) -> (Tensor(a!), Tensor(b!))"),
    # Real schemas: vllm-project/vllm csrc/torch_bindings.cpp (the stored version) as `new`,
    # each beside the spelling an earlier release could have had (the edit is ours).
    ("(Tensor positions, Tensor! query, Tensor! key, int head_size, Tensor cos_sin_cache, "
     "bool is_neox) -> ()",
     "(Tensor positions, Tensor! query, Tensor!? key, int head_size, Tensor cos_sin_cache, "
     "bool is_neox) -> ()"),
    ("(Tensor! output, Tensor!? output_lse, Tensor prefix_output, Tensor prefix_lse, "
     "Tensor suffix_output, Tensor suffix_lse, int!? prefill_tokens_with_context) -> ()",
     "(Tensor! output, Tensor!? output_lse, Tensor prefix_output, Tensor prefix_lse, "
     "Tensor suffix_output, Tensor suffix_lse, int!? prefill_tokens_with_context, "
     "Tensor? output_scale=None) -> ()"),
    ("(Tensor! out, Tensor input, float alpha=1.702) -> ()",
     "(Tensor! out, Tensor input, float alpha=1.702, float limit=7.0) -> ()"),
    ("(Tensor! out, Tensor input, float alpha=1.702, float limit=7.0) -> ()",
     "(Tensor! out, Tensor input, float alpha=1.5, float limit=7.0) -> ()"),
    ("(Tensor _in_feats, Tensor _kernel, Tensor _scaling_factors, Tensor _zeros, "
     "SymInt split_k_iters) -> Tensor",
     "(Tensor _in_feats, Tensor _kernel, Tensor _scaling_factors, Tensor _zeros, "
     "SymInt split_k_iters, Tensor _temp_space, bool dtype_bf16) -> Tensor"),
    ("(Tensor! input, Tensor! residual, Tensor weight, float epsilon) -> ()",
     "(Tensor! input, Tensor! residual, Tensor? weight, float epsilon) -> ()"),
    ("(Tensor indices, Tensor offsets, int max_B) -> Tensor",
     "(Tensor indices, Tensor offsets, int max_B, Tensor? per_sample_weights=None) -> Tensor"),
    # Bare '!' sets are numbered in order ($0, $1): one coming or going renumbers the later ones.
    ("(Tensor! input, Tensor! residual, Tensor weight) -> ()",
     "(Tensor input, Tensor! residual, Tensor weight) -> ()"),
    ("(Tensor x, *, Tensor! out) -> ()", "(Tensor x, Tensor!? y=None, *, Tensor! out) -> ()"),
    ("(Tensor! x, Tensor! y) -> ()", "(Tensor! x, Tensor! y, Tensor!? z=None) -> ()"),
]

# Pairs where the gate goes further than torch on a schema alone: c10 does not look at arguments
# after the out= arguments, so a new one there without a default passes it.
BEYOND_TORCH = [
    ("(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
     "(Tensor x, *, Tensor(a!) out, int k) -> Tensor(a!)"),
]


def _torch_verdict(old: str, new: str) -> bool:
    torch = pytest.importorskip("torch")
    return torch._C.parse_schema("ex::f" + new).is_backward_compatible_with(
        torch._C.parse_schema("ex::f" + old))


@pytest.mark.parametrize("old, new", PAIRS)
def test_schema_verdict_agrees_with_torch(old, new):
    ours = compat.compatible(parse_schema("ex::f" + old), parse_schema("ex::f" + new))
    assert ours == _torch_verdict(old, new), compat.schema_changes(
        parse_schema("ex::f" + old), parse_schema("ex::f" + new))


def test_table_has_both_verdicts():
    verdicts = {_torch_verdict(o, n) for o, n in PAIRS}
    assert verdicts == {True, False}


@pytest.mark.parametrize("old, new", BEYOND_TORCH)
def test_gate_goes_further_than_torch(old, new):
    assert _torch_verdict(old, new)
    assert not compat.compatible(parse_schema("ex::f" + old), parse_schema("ex::f" + new))


def test_damaged_snapshot_entries(lib):
    lock = Path("schemas/opgen.lock")
    text = lock.read_text()
    lock.write_text(text.replace('"schema": "ex::g(Tensor x) -> Tensor"',
                                 '"schema": "ex::g(Tensor x -> Tensor"'))
    code, _, err = lib(BASE)
    assert code == 1
    assert err.startswith(
        "schemas/opgen.lock:18:5: error: the snapshot's entry for 'ex::g' is damaged: its schema "
        "'ex::g(Tensor x -> Tensor' does not parse: ")
    data = json.loads(text)
    data["ops"]["ex::g"] = ["not", "an", "entry"]
    lock.write_text(json.dumps(data))
    code, _, err = lib(BASE)
    assert code == 1
    assert err.startswith("schemas/opgen.lock:1:1: error: the snapshot's entry for 'ex::g' is "
                          "damaged\n")
    # A field of the wrong type (a string where a list belongs would read letter by letter).
    for field, value in (("tags", "pt2_compliant_tag"), ("double_backward", "yes")):
        data = json.loads(text)
        data["ops"]["ex::g"][field] = value
        lock.write_text(json.dumps(data))
        code, _, err = lib(BASE)
        assert code == 1 and "error: the snapshot's entry for 'ex::g' is damaged\n" in err, field


def test_a_damaged_schema_is_not_taken_for_a_declared_break(lib):
    """A snapshot schema that does not parse is damage of the snapshot, located there: an op
    declaring a break must not make bc-check (or its changelog) accept it."""
    lock = Path("schemas/opgen.lock")
    lock.write_text(lock.read_text().replace('"schema": "ex::g(Tensor x) -> Tensor"',
                                             '"schema": "ex::g(Tensor x -> Tensor"'))
    declared = edit(("  - func: g(Tensor x) -> Tensor\n",
                     "  - func: g(Tensor x) -> Tensor\n    breaks: {reason: \"on purpose\"}\n"))
    for args in ((), ("--changelog",)):
        assert lib(declared, *args) == (1, "", (
            "schemas/opgen.lock:18:5: error: the snapshot's entry for 'ex::g' is damaged: its "
            "schema 'ex::g(Tensor x -> Tensor' does not parse: expected ',' or ')' after "
            "argument 'x', found '->'\n"
            '        "ex::g": {\n'
            "        ^\n"
            "hint: it is written by `opgen snapshot`; restore it from version control\n"
            "1 error generated.\n")), args


def test_snapshot_option_is_relative_to_where_it_runs(lib, monkeypatch, capsys):
    Path("sub").mkdir()
    monkeypatch.chdir("sub")
    assert run(["--project", "..", "snapshot", "--snapshot", "api.lock"], capsys) == (
        0, "wrote sub/api.lock (4 ops)\n", "")
    code, out, _ = run(["--project", "..", "bc-check", "--snapshot", "api.lock"], capsys)
    assert code == 0 and "compatible with sub/api.lock" in out
