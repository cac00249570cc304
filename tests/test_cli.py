"""`python -m codegen check` / `list`: exit codes, output, default paths, no traceback, no
writes."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
import sys
from pathlib import Path

import pytest

from codegen.__main__ import main

ROOT = Path(__file__).resolve().parent.parent

GOOD = """\
namespace: ex
ops:
  - func: "f( Tensor self,int n = 1 ) -> Tensor"
  - func: f.out(Tensor self, int n=1, *, Tensor(a!) out) -> Tensor(a!)
"""
BAD = """\
- func: ex::h(Tensr self) -> Tensor
- func: ex::g(int n=1.5) -> ()
"""


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "good.yaml").write_text(GOOD)
    (tmp_path / "bad.yaml").write_text(BAD)
    return tmp_path


def run(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_check_ok_defaults_to_schemas(files, capsys):
    assert run(["check"], capsys) == (0, "2 ops in 1 file: ok\n", "")


def test_check_errors_exit_1_with_every_diagnostic(files, capsys):
    code, out, err = run(["check", "schemas", "bad.yaml"], capsys)
    assert code == 1 and out == ""
    assert err == (
        "bad.yaml:1:15: error: unknown type 'Tensr' for argument 'self'\n"
        "    - func: ex::h(Tensr self) -> Tensor\n"
        "                  ^~~~~\n"
        "hint: did you mean 'Tensor'?\n"
        "bad.yaml:2:21: error: default value 1.5 does not fit type 'int' of argument 'n'\n"
        "    - func: ex::g(int n=1.5) -> ()\n"
        "                        ^~~\n"
        "hint: make the type float, or the default an integer\n"
        "2 errors generated.\n")


def test_list_prints_canonical_qualified_schemas(files, capsys):
    assert run(["list"], capsys) == (0, (
        "ex::f(Tensor self, int n=1) -> Tensor\n"
        "ex::f.out(Tensor self, int n=1, *, Tensor(a!) out) -> Tensor(a!)\n"), "")


def test_list_with_errors_prints_no_schemas(files, capsys):
    code, out, err = run(["list", "schemas", "bad.yaml"], capsys)
    assert code == 1 and out == "" and "2 errors generated." in err


def test_missing_paths(files, capsys):
    code, out, err = run(["check", "nope.yaml"], capsys)
    assert (code, out) == (1, "")
    assert err == "nope.yaml:1:1: error: no such file or directory\n1 error generated.\n"


HINT_NO_PROJECT = ("hint: run the command inside your project or name it with --project DIR; a "
                   "project declares itself with [tool.opgen] in its pyproject.toml "
                   "(docs/CONFIG.md)\n")


@pytest.mark.parametrize("command", [["check"], ["generate"], ["build"], ["docs"], ["bc-check"]])
def test_no_project_here(command, tmp_path, monkeypatch, capsys):
    """Run from a directory that holds no project (it said `schemas:1:1: error: no such file or
    directory`, or told a user of their own project to run `make codegen`)."""
    monkeypatch.chdir(tmp_path)
    assert run(command, capsys) == (1, "", (
        f"error: no opgen project in {tmp_path}: no pyproject.toml with a [tool.opgen] table "
        "there or in a directory above, and no schemas/ directory of op files\n"
        + HINT_NO_PROJECT))


def test_project_option_names_no_project(tmp_path, capsys):
    (tmp_path / "bare").mkdir()
    assert run(["--project", str(tmp_path / "bare"), "check"], capsys) == (1, "", (
        f"error: no opgen project in {tmp_path / 'bare'}: it has no pyproject.toml, and no "
        "schemas/ directory of op files\n" + HINT_NO_PROJECT))
    (tmp_path / "bare" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert run(["--project", str(tmp_path / "bare"), "check"], capsys) == (1, "", (
        f"error: no opgen project in {tmp_path / 'bare'}: its pyproject.toml has no [tool.opgen] "
        "table, and no schemas/ directory of op files\n" + HINT_NO_PROJECT))


def test_bad_usage_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_check_and_list_write_nothing(files, capsys, monkeypatch):
    # Nothing but the incremental cache of loaded op files (Note [Incremental loading]).
    before = sorted(p for p in files.rglob("*"))
    run(["check", "schemas", "bad.yaml"], capsys)
    run(["list"], capsys)
    cache = files / "build" / "opgen-cache"
    assert cache.is_dir()
    assert sorted(p for p in files.rglob("*") if cache not in p.parents) == sorted(
        before + [files / "build", cache])
    shutil.rmtree(files / "build")
    monkeypatch.setenv("OPGEN_NO_CACHE", "1")
    run(["check", "schemas", "bad.yaml"], capsys)
    run(["list"], capsys)
    assert sorted(p for p in files.rglob("*")) == before


def python_m(args, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "codegen", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)


def test_entry_point_exit_codes_and_no_traceback(files):
    ok = python_m(["check"], files)
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "2 ops in 1 file: ok\n", "")
    (files / "garbage.yaml").write_bytes(b"\x00\xff- !!python/object:os.system [1]\n\t")
    for args in (["check", "garbage.yaml"], ["list", "garbage.yaml", "bad.yaml"]):
        r = python_m(args, files)
        assert r.returncode == 1 and r.stdout == ""
        assert "Traceback" not in r.stderr and "error:" in r.stderr


def test_entry_point_flushes_everything_before_leaving(files):
    """The command lines leave without freeing the heap (cli.exit_now): what they printed is
    still all there, through a pipe, and the status is the run's."""
    lines = "".join(f"  - func: f.o{i}(Tensor self) -> Tensor\n" for i in range(3000))
    (files / "many.yaml").write_text("namespace: ex\nops:\n" + lines)
    r = python_m(["list", "many.yaml"], files)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.splitlines() == [f"ex::f.o{i}(Tensor self) -> Tensor" for i in range(3000)]
    (files / "bad2.yaml").write_text("namespace: ex\nops:\n  - func: g(Tensor) -> Tensor\n")
    r = python_m(["check", "bad2.yaml"], files)
    assert r.returncode == 1 and r.stderr.endswith("1 error generated.\n"), r.stderr


def test_console_script_is_the_leaving_entry():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["opgen"] == "codegen.__main__:entry"


def test_list_into_a_closed_pipe_is_quiet(files):
    lines = "".join(f"  - func: f.o{i}(Tensor self) -> Tensor\n" for i in range(5000))
    (files / "many.yaml").write_text("namespace: ex\nops:\n" + lines)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "codegen", "list", "many.yaml"], cwd=files,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    p.wait()
    assert "Traceback" not in err


# --------------------------------------------------------------------------------------------------
# Internal errors: one line, never mistaken for a result; the traceback only with --debug


def boom(*args, **kwargs):
    raise RuntimeError("boom\nsecond line")


@pytest.mark.parametrize("command", ["check", "list", "generate"])
def test_internal_error_is_one_line(files, capsys, monkeypatch, command):
    import codegen.load

    monkeypatch.setattr(codegen.load, "load_library", boom)
    code, out, err = run([command], capsys)
    assert (code, out) == (3, "")
    assert err == ("error: internal error, please report: RuntimeError: boom second line "
                   "(rerun with --debug for the traceback)\n")


def test_internal_error_traceback_with_debug(files, capsys, monkeypatch):
    import codegen.load

    monkeypatch.setattr(codegen.load, "load_library", boom)
    for args in (["--debug", "check"], ["check", "--debug"]):
        code, out, err = run(args, capsys)
        assert (code, out) == (3, "")
        assert err.startswith("Traceback (most recent call last):\n"), err
        assert err.endswith("\nerror: internal error, please report: RuntimeError: boom second "
                            "line\n")


def test_build_internal_error_is_one_line(capsys, monkeypatch):
    from codegen import build

    monkeypatch.setattr(build, "build", boom)
    assert build.main([]) == 3
    assert capsys.readouterr().err == (
        "error: internal error, please report: RuntimeError: boom second line "
        "(rerun with --debug for the traceback)\n")
    assert build.main(["--debug"]) == 3
    assert "Traceback (most recent call last):" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# Warnings are shown on success


ATEN = """\
namespace: aten
ops:
  - func: opgen_scale(Tensor self, float factor) -> Tensor
"""
ATEN_WARNING = """\
aten.yaml:1:12: warning: namespace 'aten' is defined by torch: these ops are added to it with \
TORCH_LIBRARY_FRAGMENT [-Wtorch-namespace]
    namespace: aten
               ^~~~
hint: use a namespace of your own unless you mean to extend torch's
1 warning generated.
"""


def test_warnings_are_printed_on_success(files, capsys):
    (files / "aten.yaml").write_text(ATEN)
    assert run(["check", "aten.yaml"], capsys) == (0, "1 op in 1 file: ok\n", ATEN_WARNING)
    code, out, err = run(["generate", "aten.yaml"], capsys)
    assert (code, err) == (0, ATEN_WARNING) and "wrote generated/cpp/aten/register_aten.cpp" in out
    register = (files / "generated" / "cpp" / "aten" / "register_aten.cpp").read_text()
    assert "TORCH_LIBRARY_FRAGMENT(aten, m)" in register and "TORCH_LIBRARY(" not in register


def test_werror_makes_warnings_errors_and_generates_nothing(files, capsys):
    (files / "aten.yaml").write_text(ATEN)
    as_error = ATEN_WARNING.replace("warning: ", "error: ").replace(
        "[-Wtorch-namespace]", "[-Werror=torch-namespace]").replace("1 warning", "1 error")
    assert run(["check", "--werror", "aten.yaml"], capsys) == (1, "", as_error)
    assert run(["generate", "--werror", "aten.yaml"], capsys) == (1, "", as_error)
    assert not (files / "generated").exists()


def test_warnings_load_finds_reach_werror(files, capsys):
    """Warnings of the loader (here none-return) count for --werror too."""
    (files / "ops.yaml").write_text("- func: ex::f(Tensor a) -> None\n")
    code, out, err = run(["check", "ops.yaml"], capsys)
    assert code == 0 and "warning: " in err and "[-Wnone-return]" in err
    code, out, err = run(["check", "--werror", "ops.yaml"], capsys)
    assert code == 1 and "error: " in err and "[-Werror=none-return]" in err


def test_file_level_suppress_silences_a_warning(files, capsys):
    (files / "aten.yaml").write_text(ATEN + "suppress: torch-namespace\n")
    assert run(["check", "--werror", "aten.yaml"], capsys) == (0, "1 op in 1 file: ok\n", "")


# --------------------------------------------------------------------------------------------------
# Names too long for a file: refused by `check`, at the limit the generators' file names set


def test_longest_namespace_generates(files, capsys):
    """The limit is exact: one character less than tests/diagnostics_py/ns_too_long.yaml's
    namespace, and every file is written (the longest name, lib<ns>_ops.so.tmp, comes from the
    build)."""
    ns = "n" * 241
    (files / "long.yaml").write_text(f"namespace: {ns}\nops:\n  - func: f(Tensor self) -> Tensor\n")
    code, out, err = run(["generate", "long.yaml"], capsys)
    assert (code, err) == (0, ""), err
    assert (files / "generated" / "runtime" / f"_reg_{ns}.py").is_file()
    (files / "long.yaml").write_text(f"namespace: {ns}n\nops:\n"
                                     "  - func: f(Tensor self) -> Tensor\n")
    code, out, err = run(["check", "long.yaml"], capsys)
    assert code == 1 and "is too long: it makes a file name lib<namespace>_ops.so.tmp of 256 " \
                         "bytes" in err


def test_long_op_file_name(files, capsys):
    name = "f" * 243 + ".yaml"          # register_<file>.cpp: 256 bytes
    (files / name).write_text("namespace: lf\nops:\n  - func: f(Tensor self) -> Tensor\n")
    code, out, err = run(["generate", name], capsys)
    assert (code, out) == (1, "")
    assert err == (
        f"{name}:1:1: error: op file name '{'f' * 37}...' is too long: it makes a file name "
        "register_<file>.cpp of 256 bytes, and a file name may have at most 255\n"
        "    namespace: lf\n"
        "    ^\n"
        "hint: shorten it by at least 1 character\n"
        "1 error generated.\n")
    assert not (files / "generated").exists()


def test_the_guard_pauses_the_cyclic_collector_and_restores_it() -> None:
    """Commands run with the cyclic GC off (a run's objects are acyclic and freed at exit), and
    the caller's collector state comes back however the body ends."""
    import argparse
    import gc

    from codegen import cli

    seen = []
    args = argparse.Namespace(project=None, debug=False)
    assert gc.isenabled()
    assert cli.run_in_project(args, lambda project: seen.append(gc.isenabled()) or 0) == 0

    def fails(project):
        seen.append(gc.isenabled())
        raise RuntimeError("boom")

    assert cli.run_in_project(args, fails) == cli.INTERNAL_ERROR
    assert seen == [False, False] and gc.isenabled()
    gc.disable()
    try:
        cli.run_in_project(args, lambda project: 0)
        assert not gc.isenabled()      # a caller that had it off keeps it off
    finally:
        gc.enable()


def test_the_guard_silences_torchs_numpy_warning(capsys) -> None:
    """torch warns on import where NumPy is missing (a user's fresh venv); opgen's commands do
    not pass that on. Other warnings still show."""
    import argparse
    import warnings

    from codegen import cli

    def body(project):
        warnings.warn("Failed to initialize NumPy: No module named 'numpy'", UserWarning)
        warnings.warn("something else", UserWarning)
        return 0

    args = argparse.Namespace(project=None, debug=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert cli.run_in_project(args, body) == 0
    assert [str(w.message) for w in seen] == ["something else"]
