"""codegen.rendering: the template environment's faster paths give jinja's answers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest

from codegen import rendering

ROOT = Path(__file__).resolve().parent.parent


def _plain(**options) -> jinja2.Environment:
    return jinja2.Environment(undefined=jinja2.StrictUndefined, **options)


@pytest.mark.parametrize("source, data", [
    ("{{ d.x }}", {"x": 1}),
    ("{{ d.items is callable }} {{ d.get('x') }}", {"x": 1, "items": 2, "get": 3}),
    ("{{ d['items'] }} {{ d.keys()|list }}", {"items": 2}),
    ("{{ o.x }}", None),
])
def test_getattr_answers_as_jinja(source: str, data: dict | None) -> None:
    """A dict's key is read directly unless a dict attribute has the name (jinja's answer then
    is the attribute); other objects as jinja reads them."""
    class O:
        x = "attr"
    env = rendering.template_environment()
    context = {"d": data, "o": O()}
    assert env.from_string(source).render(**context) == \
        _plain().from_string(source).render(**context)


@pytest.mark.parametrize("value", [{"x": 1}, object(), [1]])
def test_getattr_missing_is_an_error(value: object) -> None:
    env = rendering.template_environment()
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ d.missing }}").render(d=value)


def _render_in_subprocess(prefix: Path, *, write: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(prefix)
    if not write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    code = ("from codegen.dest.py_common import HELPERS; from codegen.rendering import render; "
            "print(render('py_reg.py.j2', banner='#', ns='ns', twin_ns='opgen_vmap_ns', "
            "module='m', imports=[], helpers=list(HELPERS), aliases=[], sections=[]), end='')")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True).stdout


def _cached(prefix: Path) -> list[Path]:
    return sorted(prefix.rglob("opgen-*.jinja"))


def test_compiled_templates_kept_between_runs(tmp_path: Path) -> None:
    """The first run writes the compiled template under PYTHONPYCACHEPREFIX; the next renders
    from it, the same text."""
    first = _render_in_subprocess(tmp_path, write=True)
    cached = _cached(tmp_path)
    assert len(cached) == 1
    stamp = cached[0].stat().st_mtime_ns
    assert _render_in_subprocess(tmp_path, write=True) == first
    assert cached[0].stat().st_mtime_ns == stamp    # read, not compiled and written again
    assert first.startswith("#\n") and "def _result_type(" in first


def test_nothing_written_under_dont_write_bytecode(tmp_path: Path) -> None:
    _render_in_subprocess(tmp_path, write=False)
    assert _cached(tmp_path) == []


def test_cached_template_of_other_source_is_not_used(tmp_path: Path, monkeypatch) -> None:
    """An edited template compiles again: an entry is used only for the source it was compiled
    from, and only by an environment with the same options."""
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    env = rendering.template_environment()
    cache = env.bytecode_cache
    bucket = cache.get_bucket(env, "t.j2", "/t.j2", "a")
    assert bucket.code is None
    bucket.code = compile("x = 1", "t", "exec")
    cache.set_bucket(bucket)
    assert cache.get_bucket(env, "t.j2", "/t.j2", "a").code is not None
    assert cache.get_bucket(env, "t.j2", "/t.j2", "b").code is None
    other = rendering.template_environment(extra=str)
    assert other.bytecode_cache.get_bucket(other, "t.j2", "/t.j2", "a").code is None


# --------------------------------------------------------------------------------------------------
# Work done once per library, diagnostics reported on every run


def _cases() -> list[Path]:
    return sorted([*(ROOT / "tests" / "diagnostics").glob("*.yaml"),
                   *(ROOT / "tests" / "diagnostics_py").glob("*.yaml")])


def test_second_run_on_a_library_reports_the_same(monkeypatch) -> None:
    """Generators compute some answers once per library (codegen.layout.reported and
    per_object): a second check of the same loaded library, with a fresh Diagnostics as `check`
    then `generate` in one process have, reports exactly what the first did; for every case of
    the diagnostics tests that loads."""
    from codegen import config
    from codegen.__main__ import _check_python_side
    from codegen.diagnostics import UserError
    from codegen.load import load_library

    monkeypatch.chdir(ROOT)
    project = config.default_project(ROOT)

    def run(lib) -> str:
        try:
            return _check_python_side(lib, project).render()
        except UserError as e:
            return e.diags.render()

    compared = 0
    for case in _cases():
        rel = case.relative_to(ROOT).as_posix()
        try:
            lib = load_library([rel])
        except UserError:
            continue        # refused when loading: no generator runs
        first = run(lib)
        assert run(lib) == first, case.name
        compared += bool(first)
    assert compared > 50
