"""Work on several cores (codegen.jobs, Note [Forked workers]): `check` and `generate` give the same
files and the same messages whatever OPGEN_JOBS is, a worker's failure reaches the caller, and
forking is refused where it is unsafe. Forks run in fresh interpreters (the test process has
threads)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from codegen import jobs

ROOT = Path(__file__).resolve().parent.parent
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="forking is used on Linux only")


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                          capture_output=True, text=True, timeout=300)


def split_in_a_fresh_process(code: str) -> subprocess.CompletedProcess:
    """`code` run after `jobs` is imported and `me` holds the process id (children have
    another)."""
    return run_python("import os, signal, time\nfrom codegen import jobs\nme = os.getpid()\n"
                      + textwrap.dedent(code))


def counting_forks(code: str, **env: str) -> subprocess.CompletedProcess:
    """`code` run where `forks` lists the children this process forks."""
    return run_python(textwrap.dedent("""
        import os
        forks = []
        real_fork = os.fork
        def fork():
            pid = real_fork()
            if pid:
                forks.append(pid)
            return pid
        os.fork = fork
    """) + textwrap.dedent(code), **env)


def test_requested(monkeypatch):
    monkeypatch.delenv(jobs.ENV, raising=False)
    assert jobs.requested() is None
    monkeypatch.setenv(jobs.ENV, " 3 ")
    assert jobs.requested() == 3
    for bad in ("0", "-2", "two"):
        monkeypatch.setenv(jobs.ENV, bad)
        with pytest.raises(jobs.JobsError) as e:
            jobs.requested()
        assert str(e.value) == (f"OPGEN_JOBS={bad!r}: expected a positive number of processes "
                                "(1 runs everything in one process)")


def test_a_bad_setting_is_a_message(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "codegen", "check"], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OPGEN_JOBS": "many"},
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr == ("error: OPGEN_JOBS='many': expected a positive number of processes "
                           "(1 runs everything in one process)\n")


def test_count(monkeypatch):
    monkeypatch.setattr(jobs, "can_fork", lambda: True)
    monkeypatch.setattr(jobs, "cores", lambda: 4)
    monkeypatch.delenv(jobs.ENV, raising=False)
    assert jobs.count(10, 100) == 1           # not enough work for a second process
    assert jobs.count(250, 100) == 2
    assert jobs.count(10_000, 100) == 4       # the cores
    monkeypatch.setattr(jobs, "cores", lambda: 64)
    assert jobs.count(10_000, 100) == jobs.MAX_DEFAULT
    monkeypatch.setenv(jobs.ENV, "3")
    assert jobs.count(10, 100) == 3           # asked for: no threshold
    assert jobs.count(2, 100) == 2            # but no more processes than pieces of work
    monkeypatch.setenv(jobs.ENV, "1")
    assert jobs.count(10_000, 100) == 1
    monkeypatch.setattr(jobs, "can_fork", lambda: False)
    monkeypatch.setenv(jobs.ENV, "3")
    assert jobs.count(10_000, 100) == 1


@linux_only
def test_no_fork_beside_another_thread():
    proc = run_python("""
        from codegen import jobs
        print(jobs.can_fork())
    """)
    assert proc.stdout == "True\n", proc.stderr
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not jobs.can_fork()
    finally:
        stop.set()
        other.join()


@linux_only
def test_split_runs_parts_in_children_in_order():
    proc = split_in_a_fresh_process("""
        got = jobs.split(lambda part: (part, os.getpid() == me), ["a", "b", "c"])
        print(got)
    """)
    assert proc.stdout == "[('a', True), ('b', False), ('c', False)]\n", proc.stderr


@linux_only
def test_a_childs_exception_is_raised_here():
    proc = run_python("""
        from codegen import jobs
        def work(part):
            if part == 2:
                raise KeyError("missing")
            return part
        try:
            jobs.split(work, [1, 2])
        except KeyError as e:
            print(repr(e))
            print("worker process" in "".join(getattr(e, "__notes__", [])))
    """)
    assert proc.stdout == "KeyError('missing')\nTrue\n", proc.stderr


@linux_only
def test_a_killed_child_has_its_part_run_here():
    proc = split_in_a_fresh_process("""
        def work(part):
            if os.getpid() != me:
                os.kill(os.getpid(), signal.SIGKILL)
            return part * 10
        print(jobs.split(work, [1, 2, 3]))
    """)
    assert proc.stdout == "[10, 20, 30]\n", proc.stderr


def project_copy(tmp_path: Path, errors: str = "") -> Path:
    """The example project's op files and kernels, in a directory of their own, with `errors`
    planted: "load" (schemas of two files, found while parsing), "check" (an op file name too long
    for the files made from it, found by the whole-library checks while a child renders) or
    "render" (a Python kernel's module that does not exist, found by the Python-side
    generators)."""
    root = tmp_path / "proj"
    root.mkdir()
    shutil.copy(ROOT / "pyproject.toml", root)
    shutil.copytree(ROOT / "schemas", root / "schemas")
    shutil.copytree(ROOT / "runtime", root / "runtime",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__", "build"))
    core, py = root / "schemas" / "core.yaml", root / "schemas" / "python.yaml"
    if errors == "load":
        for f in (core, py):
            f.write_text(f.read_text().replace("func: ", "func: 1", 1))
    elif errors == "check":
        py.rename(py.with_name("python" + "x" * 240 + ".yaml"))
    elif errors == "render":
        text = py.read_text()
        assert "runtime.kernels.exops:" in text
        py.write_text(text.replace("runtime.kernels.exops:", "runtime.kernels.nowhere:", 1))
    return root


@linux_only
@pytest.mark.parametrize("errors", ["", "load", "check", "render"])
def test_same_files_and_messages_on_any_number_of_processes(tmp_path, errors):
    root = project_copy(tmp_path, errors)
    runs = {}
    for n in ("1", "3"):
        out = tmp_path / f"out{n}"
        shutil.copytree(root, out)
        proc = subprocess.run([sys.executable, "-m", "codegen", "generate"], cwd=out,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "OPGEN_JOBS": n,
                                   "OPGEN_NO_CACHE": "1"},
                              capture_output=True, text=True, timeout=300)
        files = {p.relative_to(out).as_posix(): p.read_bytes()
                 for p in sorted((out / "generated").rglob("*")) if p.is_file()}
        runs[n] = proc.returncode, proc.stdout, proc.stderr, files
    assert runs["1"] == runs["3"]
    code, _, stderr, files = runs["1"]
    if errors == "load":
        assert code == 1 and files == {}
        assert "core.yaml" in stderr and "python.yaml" in stderr, stderr
    elif errors == "check":
        assert code == 1 and files == {}
        assert "is too long: it makes a file name" in stderr, stderr
    elif errors == "render":
        assert code == 1 and files == {}
        assert "runtime.kernels.nowhere" in stderr, stderr
    else:
        assert code == 0 and len(files) > 20, stderr


@linux_only
def test_children_do_the_work_and_fill_the_load_cache(tmp_path):
    """Not vacuous: with OPGEN_JOBS=3, op files are parsed and generators run in children (the
    parent parses a third of the files and forks), and what they parse is kept in the cache."""
    root = project_copy(tmp_path)
    proc = counting_forks(f"""
        from pathlib import Path
        from codegen import config, gen, load
        from codegen.diagnostics import Diagnostics
        parsed = []
        real = load._parse
        load._parse = lambda path, rules: parsed.append(path) or real(path, rules)
        os.chdir({str(root)!r})
        paths = load.op_files(["schemas"], Diagnostics())
        lib = load.load_library(["schemas"], cache="cache")
        print(len(forks), len(parsed) < len(paths))
        forks.clear()
        project = config.default_project(Path.cwd())
        diags = lib.diagnostics()
        out = gen.render(lib, diags, project)
        print(len(forks))
        parsed.clear()
        again = load.load_library(["schemas"], cache="cache")
        print(parsed, again == lib)
    """, OPGEN_JOBS="3")
    assert proc.stdout == "2 True\n1\n[] True\n", proc.stderr


@linux_only
def test_no_more_processes_than_files_to_parse(tmp_path):
    """OPGEN_JOBS=8 and two op files to parse: one child, not seven, six of them with nothing to
    parse."""
    root = project_copy(tmp_path)
    proc = counting_forks(f"""
        from codegen import load
        os.chdir({str(root)!r})
        lib = load.load_library(["schemas/core.yaml", "schemas/python.yaml"])
        print(len(forks), len(lib.files))
    """, OPGEN_JOBS="8")
    assert proc.stdout == "1 2\n", proc.stderr


@linux_only
def test_children_are_stopped_when_this_part_fails():
    proc = split_in_a_fresh_process("""
        def work(part):
            if os.getpid() == me:
                raise ValueError("here")
            time.sleep(60)
        t = time.monotonic()
        try:
            jobs.split(work, [1, 2, 3])
        except ValueError:
            pass
        print(time.monotonic() - t < 30, os.listdir("/proc/self/task") == [str(me)])
        try:
            os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            print("no child left")
    """)
    assert proc.stdout == "True True\nno child left\n", proc.stderr
