"""The op reference (`opgen docs`, codegen.dest.md_reference) and the Markdown escapes it writes
user text with.

Golden files: the example library's reference is the committed docs/ops/ itself (CI also runs
`make docs-check`), and tests/golden/md/ holds a library of user text that means something in
Markdown. `make golden` refreshes both after an intended change.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from codegen import escape
from codegen.__main__ import main
from codegen.diagnostics import Diagnostics
from codegen.dest import md_reference
from codegen.load import load_library
from tests import expect

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "md"


def render(paths: list[str], directory: str) -> dict[str, str]:
    lib = load_library(paths)
    diags = Diagnostics()
    out = md_reference.generate(lib, diags, directory=directory)
    assert not diags.has_errors, diags.render()
    return out


def test_golden_example_reference(monkeypatch):
    """docs/ops/ is the example library's reference, as `opgen docs` writes it."""
    monkeypatch.chdir(ROOT)
    out = render(["schemas"], "docs/ops")
    assert set(out) == {"docs/ops/exops.md", "docs/ops/exstable.md"}
    expect.check_dir(ROOT / "docs" / "ops", {Path(k).name: v for k, v in out.items()})


def test_golden_markdown_escaping(monkeypatch):
    monkeypatch.chdir(ROOT)
    out = render(["tests/golden/md/inputs/escape.yaml"], "ref")
    expect.check_dir(GOLDEN / "expected", {Path(k).name: v for k, v in out.items()})


def test_support_matrix_reads_the_ir(monkeypatch):
    monkeypatch.chdir(ROOT)
    lib = load_library(["tests/golden/md/inputs/escape.yaml"])
    rows = {op.name.name: md_reference.support(op, lib) for op in lib.ops}
    yes = {name: {k for k, v in row.items() if v} for name, row in rows.items()}
    assert yes == {
        "tricky": {"CPU", "CUDA", "Meta", "autograd", "compile", "export", "vmap"},
        "cuda_only": {"CUDA", "Meta", "compile", "export"},
        "writes_second": {"CPU", "Meta"},
        "declared": set(),
    }
    lib = load_library(["schemas"])
    row = md_reference.support(lib.named("exops", "smooth_clamp")[0], lib)
    assert all(row.values())


def test_lone_int_return_does_not_compile(tmp_path):
    """vLLM's `init_custom_ar(...) -> int` graph-breaks torch.compile: compile ✗. torch.export
    records the int as a constant, and its program runs: export ✓ (tests/test_reference_marks.py
    runs both)."""
    path = tmp_path / "ops.yaml"
    path.write_text("namespace: ar\nops:\n"
                    "  - func: init_custom_ar(int[] ipc_tensors, Tensor rank_data, int rank, "
                    "bool fully_connected) -> int\n    dispatch: {CPU: init_cpu}\n"
                    "    fake: len(ipc_tensors)\n    suppress: [non-tensor-return]\n")
    lib = load_library([str(path)])
    row = md_reference.support(lib.ops[0], lib)
    assert {k for k, v in row.items() if v} == {"CPU", "Meta", "export"}


def test_sample_calls_run(monkeypatch):
    """Each example call is Python that builds the sample's arguments (checked with the op
    replaced by a recorder)."""
    torch = pytest.importorskip("torch")
    monkeypatch.chdir(ROOT)
    lib = load_library(["schemas"])
    op = lib.named("exops", "segment_sum")[0]
    calls = [md_reference.sample_call(op, s) for s in op.samples]
    assert calls[0] == ("torch.ops.exops.segment_sum(torch.empty(6, 3).uniform_(-1.0, 1.0)"
                        ".requires_grad_(), torch.randint(0, 4, (6,), dtype=torch.int64), 4)")
    seen = []

    class Ops:
        def __getattr__(self, name):
            return self

        def __call__(self, *args, **kwargs):
            seen.append((args, kwargs))

    for call in calls:
        eval(call.replace("torch.ops.exops.segment_sum", "ops"), {"torch": torch, "ops": Ops()})
    values, ids, n = seen[0][0]
    assert values.shape == (6, 3) and values.requires_grad and ids.dtype == torch.int64
    assert n == 4 and int(ids.max()) < 4


def test_sample_call_of_a_dtype_alias_draws_floats(tmp_path):
    """`dtype: half` is float16: uniform values, as for `dtype: float16` (it drew integers)."""
    path = tmp_path / "ops.yaml"
    path.write_text("- func: ex::f(Tensor x) -> Tensor\n"
                    "  samples: [{x: {shape: [2], dtype: half}}, {x: {shape: [2], dtype: cfloat}}]\n")
    op = load_library([str(path)]).ops[0]
    assert [md_reference.sample_call(op, s) for s in op.samples] == [
        "torch.ops.ex.f(torch.empty(2, dtype=torch.half).uniform_(-1.0, 1.0))",
        "torch.ops.ex.f(torch.empty(2, dtype=torch.cfloat).uniform_(-1.0, 1.0))"]


# --------------------------------------------------------------------------------------------------
# The command


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "schemas").mkdir()
    (tmp_path / "p").mkdir()      # the package the pyproject.toml files below name
    (tmp_path / "schemas" / "ops.yaml").write_text(
        "namespace: ex\nops:\n  - func: f(Tensor x) -> Tensor\n    doc: One *op*.\n")
    return tmp_path


def run(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_docs_written_only_when_changed(project, capsys):
    assert run(["docs"], capsys) == (0, "wrote docs/ops/ex.md\n", "")
    page = project / "docs" / "ops" / "ex.md"
    assert "One \\*op\\*." in page.read_text()
    mtime = page.stat().st_mtime_ns
    assert run(["docs"], capsys) == (0, "1 files up to date\n", "")
    assert page.stat().st_mtime_ns == mtime
    assert run(["docs", "--check"], capsys) == (0, "", "")


def test_docs_check_reports_stale_and_orphaned_files(project, capsys):
    run(["docs"], capsys)
    (project / "schemas" / "ops.yaml").write_text(
        "namespace: ey\nops:\n  - func: f(Tensor x) -> Tensor\n")
    (project / "docs" / "ops" / "README.md").write_text("mine\n")
    assert run(["docs", "--check"], capsys) == (
        1, "stale: docs/ops/ey.md\nstale: docs/ops/ex.md\n", "")
    assert run(["docs"], capsys) == (0, "wrote docs/ops/ey.md\nremoved docs/ops/ex.md\n", "")
    assert sorted(os.listdir(project / "docs" / "ops")) == ["README.md", "ey.md"]


def test_docs_directory_from_pyproject(project, capsys):
    (project / "pyproject.toml").write_text('[tool.opgen]\npackage = "p"\ndocs = "reference"\n')
    assert run(["docs"], capsys) == (0, "wrote reference/ex.md\n", "")


def test_docs_directory_must_stay_in_the_project(project, capsys):
    (project / "pyproject.toml").write_text('[tool.opgen]\npackage = "p"\ndocs = "../out"\n')
    code, _, err = run(["docs"], capsys)
    assert code == 1
    assert err == """\
pyproject.toml:3:8: error: 'docs': ../out is not inside the project
    docs = "../out"
           ^~~~~~~~
hint: paths in [tool.opgen] are relative to the directory of pyproject.toml and stay below it
1 error generated.
"""


# --------------------------------------------------------------------------------------------------
# Markdown escapes (codegen.escape)


@pytest.mark.parametrize("text, expected", [
    ("plain text", "plain text"),
    ("a*b*_c_", "a\\*b\\*\\_c\\_"),
    ("[x](http://y) ![i](j)", "\\[x\\](http://y) \\!\\[i\\](j)"),
    ("<script>&amp;", "\\<script\\>\\&amp;"),
    ("a | b", "a \\| b"),
    ("`code` ~~s~~ \\", "\\`code\\` \\~\\~s\\~\\~ \\\\"),
    ("# h", "\\# h"),
    ("- item", "\\- item"),
    ("+ item", "\\+ item"),
    ("> quote", "\\> quote"),
    ("12. item", "12\\. item"),
    ("3) item", "3\\) item"),
    ("===", "\\==="),
    ("two\nlines", "two lines"),
    ("bidi\u202eover", "bidi\\\\u202eover"),   # shown as the escape \\u202e
])
def test_md_text(text, expected):
    assert escape.md_text(text) == expected


def test_md_block_keeps_lines_and_paragraphs():
    assert escape.md_block("one\n- two\n\n\n\nthree *3*\n") == "one\n\\- two\n\nthree \\*3\\*"


@pytest.mark.parametrize("text, expected", [
    ("x", "`x`"),
    ("a`b", "``a`b``"),
    ("`x", "`` `x ``"),
    ("a``b`", "``` a``b` ```"),
    ("two\nlines", "`two\\x0alines`"),
])
def test_md_code(text, expected):
    assert escape.md_code(text) == expected


def test_md_code_in_a_table_escapes_pipes():
    assert escape.md_code("Tensor(a|b) x", in_table=True) == "`Tensor(a\\|b) x`"


def test_md_fenced_outlasts_backticks():
    assert escape.md_fenced("a\n```\nb", "python") == "````python\na\n```\nb\n````"
    assert escape.md_fenced("x = 1") == "```\nx = 1\n```"


# Hostile text: line ends of every kind, Markdown and HTML syntax, fences.
HOSTILE = ["a\nb", "a\rb", "x\u2028y", "nul\x00", "*a* _b_ **c**", "[l](u) ![i](u) <http://x>",
           "<b>&amp;</b>", "| cell |", "`a` ``b``", "```", "\\", "ends\\", "# h", "- i", "1. n",
           "> q", "===", "---", "~~~", "bidi \u202eevil", "undecodable \udcff", "tab\there"]
_SPECIAL = set("\\`*_{}[]<>|#&~!")


def _unescaped(text: str) -> str:
    """`text` less its backslash escapes: what Markdown would read as syntax."""
    return re.sub(r"\\.", "", text)


@pytest.mark.parametrize("text", HOSTILE)
def test_md_text_leaves_no_markup(text):
    out = escape.md_text(text)
    assert len(out.splitlines()) <= 1 and "\x00" not in out
    assert not _SPECIAL & set(_unescaped(out))
    assert not re.match(r"[-+=>]|\d+[.)]", out)     # nothing starts a block


@pytest.mark.parametrize("text", HOSTILE)
def test_md_code_and_fences_hold_the_text(text):
    span = escape.md_code(text)
    fence = re.match(r"`+", span).group()
    inner = span[len(fence):-len(fence)]
    assert span.endswith(fence) and fence not in inner and len(span.splitlines()) == 1
    block = escape.md_fenced(text)
    lines = block.split("\n")
    fence = lines[0]
    assert lines[-1] == fence and not any(line.startswith(fence) for line in lines[1:-1])


def test_multiline_fake_rule_is_one_line_in_its_cell(tmp_path):
    """A fake rule written over several lines (a YAML block scalar, or a folded one with a
    more-indented line) reads as one line of code in the table, not with `\\x0a` escapes."""
    path = tmp_path / "ops.yaml"
    path.write_text(
        "namespace: ml\nops:\n"
        "  - func: pool(Tensor x, int k) -> (Tensor, Tensor)\n"
        "    dispatch: {CPU: pool_cpu}\n"
        "    fake: |\n"
        "      check(x.size(1) % k == 0, \"k must divide  the channels\");\n"
        "      (empty([x.size(0), x.size(1) // k]),\n"
        "       empty([x.size(0), x.size(1) // k], dtype=int64))\n", encoding="utf-8")
    lib = load_library([str(path)])
    cell = md_reference._fake(lib.ops[0])
    assert cell == ('`check(x.size(1) % k == 0, "k must divide  the channels"); '
                    '(empty([x.size(0), x.size(1) // k]), '
                    'empty([x.size(0), x.size(1) // k], dtype=int64))`')
