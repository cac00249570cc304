"""One case per diagnostic: tests/diagnostics/<name>.yaml must fail `check` with exactly the text in
<name>.expected (location, message, source line, caret, hint). A case named `warning_*` must load
with exactly its warnings instead.

Refresh after an intended change with
`EXPECTTEST_ACCEPT=1 python -m pytest tests/test_diagnostics.py` (or `make golden`), then read the
diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.diagnostics import UserError
from codegen.load import load_library
from tests import expect

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = ROOT / "tests" / "diagnostics"
CASES = sorted(CASES_DIR.glob("*.yaml"))


def diagnostics(case: Path):
    rel = case.relative_to(ROOT).as_posix()
    if case.stem.startswith("warning_"):
        diags = load_library([rel]).diagnostics()
        assert diags.items and not diags.has_errors, case.name
        return diags
    with pytest.raises(UserError) as e:
        load_library([rel])
    return e.value.diags


def render(case: Path) -> str:
    return diagnostics(case).render() + "\n"


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_diagnostic(case: Path, monkeypatch):
    monkeypatch.chdir(ROOT)
    got = render(case)
    expect.check_file(case.with_suffix(".expected"), got)


def test_diagnostic_cases_have_no_orphans():
    assert expect.orphans(CASES_DIR, CASES) == []


def test_diagnostic_cases_point_inside_their_file(monkeypatch):
    """Every diagnostic is located in the case file, on a real line and column."""
    monkeypatch.chdir(ROOT)
    for case in CASES:
        rel = case.relative_to(ROOT).as_posix()
        lines = case.read_bytes().decode("utf-8", "replace").splitlines()
        for d in diagnostics(case).items:
            assert d.loc.path == rel, (case.name, d)
            assert 1 <= d.loc.line <= len(lines), (case.name, d)
            assert 1 <= d.loc.col <= len(lines[d.loc.line - 1]) + 1, (case.name, d)


def test_very_long_lines_are_shown_around_the_caret(tmp_path):
    p = tmp_path / "ops.yaml"
    args = [f"int a{i}" for i in range(500)]
    args.insert(250, "Tensr x")
    p.write_text("- func: ex::f(" + ", ".join(args) + ") -> Tensor\n")
    with pytest.raises(UserError) as e:
        load_library([str(p)])
    (d,) = e.value.diags.items
    source, caret = e.value.diags.render().splitlines()[1:3]
    assert len(source) < 200 and source.startswith("    ...") and source.endswith("...")
    col = caret.index("^")
    assert source[col:col + 5] == "Tensr" and caret[col:] == "^~~~~"
