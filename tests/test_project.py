"""An op library outside this repository adopts opgen: its own package, namespace and layout
(`[tool.opgen]` in its pyproject.toml), commands from any directory, generated files with
project-relative paths only, and (slow) a wheel that installs into an environment without opgen,
imports from any directory and passes opcheck, two such packages in one process.

Pinned diagnostics for the configuration (tests/diagnostics_config/*.toml) and for kernel sources
(a hand-written TORCH_LIBRARY block) are here too.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from codegen.__main__ import main as cli
from tests import expect, scratch

HERE = Path(__file__).resolve().parent
CONFIG_CASES = sorted((HERE / "diagnostics_config").glob("*.toml"))


def opgen(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codegen", *args], cwd=cwd, env=scratch.env(),
                          capture_output=True, text=True, timeout=600)


def test_commands_from_any_directory(tmp_path: Path) -> None:
    """`--project DIR` from elsewhere, and the nearest [tool.opgen] from a subdirectory, give the
    same generated set; it names project-relative paths only."""
    root = scratch.write_project(tmp_path / "proj", "alphaops", "alphans")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    gen = opgen("--project", str(root), "generate", cwd=elsewhere)
    assert gen.returncode == 0, gen.stderr
    assert "wrote alphaops/_generated/build.ninja" in gen.stdout
    assert opgen("check", cwd=root / "csrc" / "cpu").stdout == "3 ops in 1 file: ok\n"
    assert opgen("list", cwd=root / "alphaops").stdout.splitlines()[0].startswith(
        "alphans::add_scaled(")
    again = opgen("generate", "--check", cwd=root / "csrc")
    assert again.returncode == 0, again.stdout + again.stderr
    generated = sorted(p.relative_to(root).as_posix()
                       for p in (root / "alphaops" / "_generated").rglob("*") if p.is_file())
    assert generated == [f"alphaops/_generated/{f}" for f in (
        "SHA256SUMS", "__init__.py", "_aoti.py", "_loader.py", "_manifest.py", "_reg_alphans.py",
        "build.ninja", "cpp/alphans/alphans.h", "cpp/alphans/alphans/add_scaled.h",
        "cpp/alphans/alphans/cube.h", "cpp/alphans/alphans/twice.h", "cpp/alphans/aoti.cpp",
        "cpp/alphans/autograd.cpp", "cpp/alphans/index.json", "cpp/alphans/register_alphans.cpp", "cpp/alphans/stamp.cpp", "ops.py", "ops.pyi")]
    for rel in generated:
        text = (root / rel).read_text(encoding="utf-8")
        assert str(tmp_path) not in text and str(scratch.REPO) not in text, rel
    ninja = (root / "alphaops" / "_generated" / "build.ninja").read_text(encoding="utf-8")
    # Kernels found recursively, each with its own object; the library goes into the package.
    assert "build build/obj/alphans/cpu/add.o: cxx csrc/cpu/add.cpp" in ninja
    assert "build build/obj/alphans/cpu/more/twice.cc.o: cxx csrc/cpu/more/twice.cc" in ninja
    assert "default alphaops/libalphans_ops.so" in ninja
    reg = (root / "alphaops" / "_generated" / "cpp" / "alphans" / "register_alphans.cpp")
    assert 'set_python_module("alphaops._generated._reg_alphans")' in \
        reg.read_text(encoding="utf-8").replace(" ", "")
    manifest = (root / "alphaops" / "_generated" / "_manifest.py").read_text(encoding="utf-8")
    assert 'LIBRARY_DIR = ".."' in manifest and '"alphaops._generated._reg_alphans"' in manifest


def test_build_messages_name_the_projects_commands(tmp_path: Path) -> None:
    """`opgen build` before `opgen generate`, and on a build file older than its generated set:
    errors on stderr, hints naming the project's own command."""
    root = scratch.write_project(tmp_path / "proj", "alphaops", "alphans")
    early = opgen("build", cwd=root)
    assert (early.returncode, early.stdout) == (1, "")
    assert early.stderr == (f"error: alphaops/_generated/build.ninja not found under {root}: "
                            "nothing is generated yet\nhint: run `opgen generate` first\n")
    assert opgen("generate", cwd=root).returncode == 0
    ninja = root / "alphaops" / "_generated" / "build.ninja"
    ninja.write_text(ninja.read_text(encoding="utf-8").replace("SHA256SUMS", "OTHER"),
                     encoding="utf-8")
    stale = opgen("build", cwd=root)
    assert (stale.returncode, stale.stdout) == (1, "")
    assert stale.stderr == (
        "error: alphaops/_generated/build.ninja differs from the set "
        "alphaops/_generated/SHA256SUMS records, and alphaops/_generated/build.ninja is too old "
        "to regenerate it\nhint: run `opgen generate`\n")


def test_dotted_package_finds_its_python_kernels(tmp_path: Path) -> None:
    """`package = "acme.alphaops"` in src/acme/alphaops: 'python-roots' defaults to src, where
    `import acme.alphaops.kernels` starts (it was src/acme, so check refused the project's own
    Python kernel as a module it cannot find)."""
    root = scratch.write_dotted_project(tmp_path / "proj", "alphaops", "alphans")
    proc = opgen("check", cwd=root)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "3 ops in 1 file: ok\n", "")
    from codegen import config
    from codegen.diagnostics import Diagnostics

    assert config.resolve(str(root), Diagnostics()).python_roots == ("src",)
    assert config.import_root("acme.alphaops", "acme/alphaops") == "."
    assert config.import_root("acme.alphaops", "lib/ops") == "lib"


def test_python_module_not_found_names_python_roots(tmp_path: Path) -> None:
    """In a project, the hint says where modules are looked up: its 'python-roots' first (it
    spoke of the current directory, which is not where the command ran)."""
    root = scratch.write_dotted_project(tmp_path / "proj", "alphaops", "alphans")
    ops = root / "ops" / "alphans.yaml"
    ops.write_text(ops.read_text(encoding="utf-8").replace("alphaops.kernels:", "alphaops.kernel:"),
                   encoding="utf-8")
    proc = opgen("check", cwd=root / "csrc")
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        "ops/alphans.yaml:12:44: error: cannot find Python module 'acme.alphaops.kernel' of "
        "kernel acme.alphaops.kernel:cube\n"
        "        dispatch: {CompositeExplicitAutograd: 'acme.alphaops.kernel:cube'}\n"
        "                                               ^~~~~~~~~~~~~~~~~~~~\n"
        "hint: it is looked up below 'python-roots' of [tool.opgen] (src), the project root and "
        "the import path (sys.path), as `import` would\n"
        "1 error generated.\n"), proc.stderr


@pytest.mark.parametrize("cxx, message", [
    ("no-such-cxx -O2", "the C++ compiler 'no-such-cxx' (CXX) is not found"),
    ("", "CXX is empty"),
])
def test_build_without_a_compiler_says_so_once(cxx: str, message: str, tmp_path: Path) -> None:
    """A compiler that is not there stops the build before ninja, on stderr (every source
    failed alike with `/bin/sh: 1: ...: not found`)."""
    import torch

    root = scratch.write_project(tmp_path / "proj", "alphaops", "alphans")
    assert opgen("generate", cwd=root).returncode == 0
    env = {**scratch.env(), "CXX": cxx}
    proc = subprocess.run([sys.executable, "-m", "codegen", "build"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stdout + proc.stderr
    assert proc.stderr == (
        f"error: {message}\n"
        f"hint: set CXX to an installed compiler that builds C++20, as torch {torch.__version__} "
        "extensions need, or add its directory to PATH\n")


def test_generate_refuses_an_op_file_outside_the_project(tmp_path: Path) -> None:
    """Generated files name their op files: one outside the project put an absolute path of this
    machine into the package (the manifest, every banner) and the build file. check still reads
    it."""
    root = scratch.write_project(tmp_path / "proj", "alphaops", "alphans")
    outside = tmp_path / "shared.yaml"
    outside.write_text("namespace: sharedns\nops:\n  - func: f(Tensor x) -> Tensor\n"
                       "    dispatch: {CompositeExplicitAutograd: 'alphaops.kernels:cube'}\n"
                       "    fake: like(x)\n", encoding="utf-8")
    assert opgen("check", str(outside), cwd=root).returncode == 0
    proc = opgen("generate", str(outside), "ops", cwd=root)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        f"{outside}:1:1: error: this op file is outside the project, and generated files name "
        "their op files by project-relative paths\n"
        f"hint: move it below {root} (into 'schemas' of [tool.opgen])\n"
        "1 error generated.\n")
    assert not (root / "alphaops" / "_generated").exists()
    # Linked into the project (a shared op file), it is the project's, named by the link.
    linked = tmp_path / "linked.yaml"
    linked.write_text(outside.read_text().replace("sharedns", "alphans").replace("f(", "g("),
                      encoding="utf-8")
    (root / "ops" / "linked.yaml").symlink_to(linked)
    proc = opgen("generate", "ops", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert "ops/linked.yaml" in (root / "alphaops" / "_generated" / "_reg_alphans.py").read_text()


SECOND_OPS = """\
namespace: alphans
ops:
  - func: g(Tensor x) -> Tensor
    dispatch: {CompositeExplicitAutograd: 'alphaops.kernels:cube'}
    fake: like(x)
"""


def _two_file_project(tmp_path: Path, schemas: str = '["ops"]') -> Path:
    """A project whose `schemas` holds ops/main.yaml and ops/b.yaml (one namespace), generated."""
    root = scratch.write_project(tmp_path / "proj", "alphaops", "alphans")
    (root / "ops" / "alphans.yaml").rename(root / "ops" / "main.yaml")
    (root / "ops" / "b.yaml").write_text(SECOND_OPS, encoding="utf-8")
    toml = root / "pyproject.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace('schemas = ["ops"]',
                                                             f"schemas = {schemas}"),
                    encoding="utf-8")
    return root


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_generate_refuses_op_files_that_leave_out_some_of_schemas(tmp_path: Path, monkeypatch,
                                                                   capsys) -> None:
    """`generate ops/b.yaml` generated the library of that file alone, and deleted what was
    generated from ops/main.yaml (exit 0). The generated set is the whole library's: op files
    leaving out some of `schemas` are refused, located at the entry, and nothing is touched;
    `check` still takes one file."""
    root = _two_file_project(tmp_path)
    monkeypatch.chdir(root)
    assert cli(["generate"]) == 0
    capsys.readouterr()
    before = _files(root)
    assert "alphaops/_generated/cpp/alphans/register_main.cpp" in before
    message = (
        "pyproject.toml:12:12: error: the op files given leave out ops/main.yaml of the "
        "project's 'schemas', and generate would delete what was generated from that file\n"
        '    schemas = ["ops"]\n'
        "               ^~~~~\n"
        "hint: generate writes the whole library of the project: run `python -m codegen "
        "generate` (all of ops), or `python -m codegen check ops/b.yaml` to validate one file\n"
        "1 error generated.\n")
    assert (cli(["generate", "ops/b.yaml"]), *capsys.readouterr()) == (1, "", message)
    assert _files(root) == before
    # --check would report the files of main.yaml stale; from a subdirectory, the hint repeats
    # the paths as typed.
    monkeypatch.chdir(root / "ops")
    assert cli(["generate", "--check", "b.yaml"]) == 1
    assert capsys.readouterr().err == message.replace(
        "and generate would delete", "and generate --check would report").replace(
        "from that file\n", "from that file stale\n").replace("check ops/b.yaml", "check b.yaml")
    assert _files(root) == before
    assert cli(["check", "b.yaml"]) == 0
    capsys.readouterr()
    # schemas listing files: the caret is on the entry left out.
    root = _two_file_project(tmp_path / "files", '["ops/b.yaml", "ops/main.yaml"]')
    monkeypatch.chdir(root)
    assert cli(["generate", "ops/b.yaml"]) == 1
    assert capsys.readouterr().err.splitlines()[:3] == [
        "pyproject.toml:12:26: error: the op files given leave out ops/main.yaml of the "
        "project's 'schemas', and generate would delete what was generated from that file",
        '    schemas = ["ops/b.yaml", "ops/main.yaml"]',
        "                             ^~~~~~~~~~~~~~~"]
    assert not (root / "alphaops" / "_generated").exists()


@pytest.mark.parametrize("paths", [["ops"], ["ops/main.yaml", "ops/b.yaml"], ["./ops/"],
                                   ["ops", "more/c.yaml"]])
def test_generate_takes_op_files_covering_schemas(paths: list[str], tmp_path: Path, monkeypatch,
                                                  capsys) -> None:
    """The directory, its files, or more: an op file of the project outside `schemas` is taken,
    as before."""
    root = _two_file_project(tmp_path)
    (root / "more").mkdir()
    (root / "more" / "c.yaml").write_text(SECOND_OPS.replace("g(", "h("), encoding="utf-8")
    monkeypatch.chdir(root)
    assert cli(["generate", *paths]) == 0, capsys.readouterr().err
    generated = root / "alphaops" / "_generated" / "cpp" / "alphans"
    assert (generated / "register_main.cpp").is_file() and (generated / "register_b.cpp").is_file()
    assert (generated / "register_c.cpp").is_file() == ("more/c.yaml" in paths)


def test_docs_snapshot_and_bc_check_refuse_op_files_that_leave_out_some_of_schemas(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """`docs ops/b.yaml` rewrote the project's reference, and `snapshot ops/b.yaml` its
    snapshot, with the ops of that file alone; `bc-check ops/b.yaml` reported the other files'
    ops removed. Elsewhere (--output, --snapshot), the reference, snapshot and comparison of one
    file are taken."""
    root = _two_file_project(tmp_path)
    monkeypatch.chdir(root)
    assert cli(["docs"]) == 0 and cli(["snapshot"]) == 0
    capsys.readouterr()
    before = _files(root)
    at = ("pyproject.toml:12:12: error: the op files given leave out ops/main.yaml of the "
          "project's 'schemas', ")
    caret = '    schemas = ["ops"]\n               ^~~~~\n'
    assert (cli(["docs", "ops/b.yaml"]), *capsys.readouterr()) == (1, "", (
        f"{at}and docs would drop the ops of that file from the reference in docs/ops\n{caret}"
        "hint: docs writes the reference of the whole library: run `python -m codegen docs` "
        "(all of ops), or `python -m codegen docs --output DIR ops/b.yaml` for one file alone\n"
        "1 error generated.\n"))
    assert cli(["docs", "--check", "ops/b.yaml"]) == 1
    assert capsys.readouterr().err.startswith(
        f"{at}and docs --check would report the reference in docs/ops stale\n")
    assert (cli(["snapshot", "ops/b.yaml"]), *capsys.readouterr()) == (1, "", (
        f"{at}and snapshot would drop the ops of that file from opgen.lock\n{caret}"
        "hint: snapshot records the contract of the whole library: run `python -m codegen "
        "snapshot` (all of ops), or `python -m codegen snapshot --snapshot PATH ops/b.yaml` to "
        "record one file elsewhere\n1 error generated.\n"))
    assert (cli(["bc-check", "ops/b.yaml"]), *capsys.readouterr()) == (1, "", (
        f"{at}and bc-check would report the ops of that file as removed from opgen.lock\n"
        f"{caret}hint: bc-check compares the whole library with its snapshot: run `python -m "
        "codegen bc-check` (all of ops), or `python -m codegen bc-check --snapshot PATH "
        "ops/b.yaml` against a snapshot of one file\n1 error generated.\n"))
    assert _files(root) == before
    assert cli(["docs", "--output", "b-docs", "ops/b.yaml"]) == 0
    assert cli(["snapshot", "--snapshot", "b.lock", "ops/b.yaml"]) == 0
    assert "wrote b.lock (1 op)" in capsys.readouterr().out
    assert cli(["bc-check", "--snapshot", "b.lock", "ops/b.yaml"]) == 0
    assert "1 ops compatible with b.lock: 0 added, 0 changed, 0 removed" in \
        capsys.readouterr().out
    assert (root / "b-docs" / "alphans.md").is_file()


def test_generate_without_a_project_generates_the_files_given(tmp_path: Path, monkeypatch,
                                                              capsys) -> None:
    """Without a [tool.opgen] the op files given are the library (`--root`, the example layout):
    a file generated alone replaces the set, as it always did."""
    (tmp_path / "schemas").mkdir()
    for name in ("main", "b"):
        (tmp_path / "schemas" / f"{name}.yaml").write_text(
            f"namespace: alphans\nops:\n  - func: {name}(Tensor x) -> Tensor\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert cli(["generate", "--root", str(tmp_path), "schemas"]) == 0
    assert cli(["generate", "--root", str(tmp_path), "schemas/b.yaml"]) == 0
    assert "removed generated/cpp/alphans/register_main.cpp" in capsys.readouterr().out


def _spaced_project(tmp_path: Path) -> Path:
    """A project whose op, kernel and build directories have spaces in their names."""
    root = scratch.write_project(tmp_path / "my proj", "alphaops", "alphans")
    (root / "ops").rename(root / "my ops")
    (root / "csrc").rename(root / "c src")
    (root / "c src" / "cpu" / "more").rename(root / "c src" / "cpu" / "mo re")
    (root / "my src").mkdir()
    (root / "alphaops").rename(root / "my src" / "alphaops")
    (root / "pyproject.toml").write_text(
        '[tool.opgen]\npackage = "alphaops"\npackage-dir = "my src/alphaops"\n'
        'schemas = ["my ops"]\nkernels = ["c src"]\nbuild = "my build"\n', encoding="utf-8")
    return root


def test_build_file_takes_paths_with_spaces(tmp_path: Path) -> None:
    """`build = "my build"` broke the build file (`include my build/toolchain.ninja`: ninja read
    the include as `my`, as it read `default my src/...` with a package directory `my src/...`),
    and the codegen edge passed its depfile and op file directories as several shell words."""
    import shlex

    from codegen.build import ninja_binary

    root = _spaced_project(tmp_path)
    assert opgen("generate", cwd=root).returncode == 0
    ninja = root / "my src" / "alphaops" / "_generated" / "build.ninja"
    (root / "my build").mkdir(exist_ok=True)
    (root / "my build" / "toolchain.ninja").write_text(
        "codegen = opgen\ncxx = c++\n", encoding="utf-8")
    proc = subprocess.run([ninja_binary(), "-f", str(ninja), "-t", "commands"], cwd=root,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    codegen = next(line for line in proc.stdout.splitlines() if " generate " in line)
    assert shlex.split(codegen) == ["opgen", "generate", "--depfile", "my build/codegen.d",
                                    "my ops"]
    assert "c++ -MMD -MF 'my build/obj/alphans/cpu/mo re/twice.cc.o'.d" in proc.stdout


@pytest.mark.slow
def test_build_and_import_with_spaces_in_paths(tmp_path: Path) -> None:
    root = _spaced_project(tmp_path)
    assert opgen("generate", cwd=root).returncode == 0
    for _ in range(2):      # the second build finds nothing to do
        build = opgen("build", cwd=root)
        assert build.returncode == 0, build.stdout + build.stderr
    assert build.stdout.endswith("ninja: no work to do.\n"), build.stdout
    env = {**scratch.env(), "PYTHONPATH": str(root / "my src")}
    run = subprocess.run([sys.executable, "-c", "import torch, alphaops; "
                          "print(alphaops.ops.twice(torch.ones(2)).tolist())"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.stdout == "[2.0, 2.0]\n", run.stdout + run.stderr


OPS_AS_MODULE = """
import torch
import acme.alphaops.ops
from acme.alphaops.ops import cube
from acme.alphaops import ops
assert ops is acme.alphaops.ops
print(cube(torch.tensor([2.0])).item(), acme.alphaops.ops.twice(torch.ones(1)).item())
"""


def test_ops_imports_as_a_module_of_the_package(tmp_path: Path) -> None:
    """`import <package>.ops` and `from <package>.ops import <op>` find the ops the package binds
    as an attribute (both raised ModuleNotFoundError), but never shadow a module `ops` that the
    package has of its own, even one added after generation."""
    root = scratch.write_dotted_project(tmp_path / "proj", "alphaops", "alphans")
    assert opgen("generate", cwd=root).returncode == 0
    built = opgen("build", cwd=root)
    assert built.returncode == 0, built.stdout + built.stderr
    env = {**scratch.env(), "PYTHONPATH": str(root / "src")}

    def run(code: str) -> str:
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert run(OPS_AS_MODULE) == "8.0 2.0\n"
    (root / "src" / "acme" / "alphaops" / "ops.py").write_text("MINE = True\n", encoding="utf-8")
    assert run("import acme.alphaops._generated.ops as generated, acme.alphaops.ops as ops\n"
               "print(ops.MINE, generated.cube.__name__)") == "True cube.default\n"


PYTHON_ONLY_OPS = """\
namespace: pyns
ops:
  - func: cube(Tensor x) -> Tensor
    dispatch: {CompositeExplicitAutograd: 'acme.pyops.kernels:cube'}
    fake: like(x)
    samples:
      - {x: {shape: [3]}}
"""

LOAD_PYTHON_LIBRARY = """
import sys
import torch
from codegen import testing

for _ in range(2):      # closed, it loads again
    lib = testing.load_python_library(["../ops/pyns.yaml"])
    import acme.pyops.ops
    from acme.pyops.ops import cube
    for case in lib.cases():
        testing.check_opcheck(case)
    print(lib.modules["pyns"].__name__, cube(torch.tensor([2.0])).item())
    lib.close()
    print(sorted(m for m in sys.modules if m.startswith("acme.pyops")))
"""


def test_load_python_library_of_a_package(tmp_path: Path) -> None:
    """`codegen.testing.load_python_library` in a project whose Python kernels live in its package
    (as a wheel needs them), before anything is built: importing the kernels imports the package,
    whose __init__.py imports the generated subpackage, which failed (not generated, or a library
    not built). The generated subpackage now comes from memory, and the module names are the
    project's, found from its op files (they were runtime's)."""
    root = tmp_path / "proj"
    pkg = root / "src" / "acme" / "pyops"
    pkg.mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.opgen]\npackage = "acme.pyops"\n'
                                         'schemas = ["ops"]\n', encoding="utf-8")
    (root / "ops").mkdir()
    (root / "ops" / "pyns.yaml").write_text(PYTHON_ONLY_OPS, encoding="utf-8")
    (pkg / "__init__.py").write_text(
        "from acme.pyops._generated import ops  # opgen: loads the op libraries\n",
        encoding="utf-8")
    (pkg / "kernels.py").write_text("from .power import power\n\n\ndef cube(x):\n"
                                    "    return power(x, 3)\n", encoding="utf-8")
    (pkg / "power.py").write_text("def power(x, n):\n    return x ** n\n", encoding="utf-8")
    (root / "tests").mkdir()
    env = {**scratch.env(), "PYTHONPATH": f"{scratch.REPO}:{root / 'src'}"}
    expected = ("acme.pyops._generated._reg_pyns 8.0\n[]\n" * 2)
    for step in ("nothing generated", "generated, not built"):
        if step == "generated, not built":
            assert opgen("generate", cwd=root).returncode == 0
        proc = subprocess.run([sys.executable, "-c", LOAD_PYTHON_LIBRARY], cwd=root / "tests",
                              env=env, capture_output=True, text=True, timeout=300)
        assert (proc.returncode, proc.stdout) == (0, expected), (step, proc.stderr)


def test_package_that_does_not_load_its_ops_is_warned(tmp_path: Path) -> None:
    """A package whose __init__.py imports nothing of the generated subpackage imports fine and
    has no op (`torch.ops.<ns>` lacks every one): check warns, at the file. An import through
    another module of the package, at any depth and inside a function, counts."""
    root = scratch.write_project(tmp_path / "proj", "alphaops", "alphans")
    init = root / "alphaops" / "__init__.py"
    init.write_text('"""My ops."""\n__version__ = "0.1"\n', encoding="utf-8")
    proc = opgen("check", cwd=root)
    assert (proc.returncode, proc.stdout) == (0, "3 ops in 1 file: ok\n")
    hint = "`from alphaops._generated import ops  # opgen: loads the op libraries`"
    assert proc.stderr == (
        "alphaops/__init__.py:1:1: warning: `import alphaops` loads no op library: "
        "alphaops/__init__.py imports nothing of alphaops._generated\n"
        '    """My ops."""\n'
        "    ^\n"
        f"hint: add {hint} (docs/CONFIG.md)\n"
        "1 warning generated.\n"), proc.stderr
    init.write_text("from .api import *\n", encoding="utf-8")
    (root / "alphaops" / "api").mkdir()
    (root / "alphaops" / "api" / "__init__.py").write_text(
        "def load():\n    from .. import _generated\n", encoding="utf-8")
    assert opgen("check", cwd=root).stderr == ""
    init.unlink()
    proc = opgen("check", cwd=root)
    assert (proc.returncode, proc.stderr) == (0, (
        "alphaops:1:1: warning: the package alphaops has no __init__.py, so `import alphaops` "
        "loads no op library\n"
        f"hint: create alphaops/__init__.py holding {hint}\n"
        "1 warning generated.\n"))


@pytest.mark.parametrize("table", [
    '[tool]\nopgen.package = "alphaops"\nopgen.schemas = ["ops"]\nopgen.kernels = ["csrc"]\n',
    '[tool]\nopgen = {package = "alphaops", schemas = ["ops"], kernels = ["csrc"]}\n',
])
def test_other_toml_spellings_of_the_table_are_found(table: str, tmp_path: Path) -> None:
    """TOML's dotted keys and inline tables declare [tool.opgen] too (the project was not found,
    and the commands fell back to opgen's example layout)."""
    root = scratch.write_project(tmp_path / "proj", "alphaops", "alphans")
    (root / "pyproject.toml").write_text(table, encoding="utf-8")
    proc = opgen("check", cwd=root / "csrc")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "3 ops in 1 file: ok\n", "")


def test_dotted_key_spelling_locates_errors(tmp_path: Path) -> None:
    root = scratch.write_project(tmp_path / "proj", "alphaops", "alphans")
    (root / "pyproject.toml").write_text(
        '[tool]\nopgen.package = "alphaops"\nopgen.kernels = ["nope"]\n', encoding="utf-8")
    proc = opgen("check", cwd=root)
    assert proc.stderr.startswith(
        "pyproject.toml:3:18: error: 'kernels': nope does not exist\n"
        '    opgen.kernels = ["nope"]\n'
        "                     ^~~~~~\n"), proc.stderr


@pytest.mark.parametrize("case", CONFIG_CASES, ids=lambda p: p.stem)
def test_config_diagnostics(case: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    """Each tests/diagnostics_config/<case>.toml, as a project's pyproject.toml, fails every
    command with exactly <case>.expected."""
    root = scratch.write_project(tmp_path, "alphaops", "alphans")
    shutil.copy(case, root / "pyproject.toml")
    monkeypatch.chdir(root)
    assert cli(["check"]) == 1
    err = capsys.readouterr().err
    expect.check_file(case.with_suffix(".expected"), err)


@pytest.mark.parametrize("generated, key", [
    ("ops", "schemas"), ("csrc", "kernels"), ("build/gen", None), ("csrc/cpu/_gen", None)])
def test_generated_never_holds_the_projects_files(generated: str, key: str | None,
                                                  tmp_path: Path) -> None:
    """Generation prunes `generated`, so a directory holding the project's own files is refused
    before anything is touched; one inside the build or a kernel directory is fine (the kernel
    search skips it)."""
    root = scratch.write_project(tmp_path / "proj", "alphaops", "alphans")
    (root / "pyproject.toml").write_text(
        f'[tool.opgen]\npackage = "alphaops"\nschemas = ["ops"]\nkernels = ["csrc"]\n'
        f'generated = "{generated}"\n', encoding="utf-8")
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    gen = opgen("generate", cwd=root)
    if key is None:
        assert gen.returncode == 0, gen.stderr
        assert opgen("generate", "--check", cwd=root).returncode == 0
        ninja = (root / generated / "build.ninja").read_text(encoding="utf-8")
        sources = re.findall(r"^build \S+: cxx (\S+)", ninja, re.M)
        assert len(sources) == len(set(sources)) > 2     # generated sources are not kernels too
        assert all(p.read_bytes() == b for p, b in before.items())
        return
    assert (gen.returncode, gen.stdout) == (1, "")
    assert f"error: 'generated' would hold {generated}, a '{key}' path, and code generation " \
        "removes every file there that it did not write" in gen.stderr
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


KERNEL_WITH_TORCH_LIBRARY = """\
#include <{ns}/{ns}.h>

// TORCH_LIBRARY({ns}, m) in a comment is fine, and so is TORCH_LIBRARY_IMPL below.
TORCH_LIBRARY_IMPL({ns}, CPU, m) {{}}

TORCH_LIBRARY({ns}, m) {{
  m.def("leftover(Tensor x) -> Tensor");
}}

TORCH_LIBRARY(someone_else, m) {{}}
"""


def test_hand_written_torch_library_is_a_located_error(tmp_path: Path, capsys) -> None:
    """A leftover TORCH_LIBRARY block for a namespace opgen generates: generate and the build
    refuse it at the macro (it would build, then abort the process at import)."""
    root = scratch.write_project(tmp_path / "proj", "alphaops", "alphans")
    (root / "csrc" / "cpu" / "legacy").mkdir()
    (root / "csrc" / "cpu" / "legacy" / "register.cpp").write_text(
        KERNEL_WITH_TORCH_LIBRARY.format(ns="alphans"), encoding="utf-8")
    gen = opgen("--project", str(root), "generate", cwd=tmp_path)
    assert gen.returncode == 1 and gen.stdout == ""
    expect.check_file(HERE / "diagnostics_config" / "kernel_torch_library.expected", gen.stderr)
    # The build checks too (a kernel source edited after code generation).
    from codegen import build, config
    from codegen.diagnostics import Diagnostics, UserError

    (root / "csrc" / "cpu" / "legacy" / "register.cpp").unlink()
    assert opgen("--project", str(root), "generate", cwd=tmp_path).returncode == 0
    (root / "csrc" / "cpu" / "legacy" / "register.cpp").write_text(
        KERNEL_WITH_TORCH_LIBRARY.format(ns="alphans"), encoding="utf-8")
    with config.use(config.resolve(str(root), Diagnostics())):
        assert build.check_generated(root, sys.stdout)
        with pytest.raises(UserError) as info:
            build.check_sources(root)
    assert info.value.diags.render() + "\n" == gen.stderr


KERNEL_WITH_TORCH_LIBRARY_IMPL = """\
#include <{ns}/{ns}.h>

// m.impl("twice", ...) in a comment registers nothing.
TORCH_LIBRARY_IMPL({ns}, CPU, m) {{
  m.impl("add_scaled", &{ns}::add_scaled_cpu);
  m.impl(TORCH_SELECTIVE_NAME("{ns}::twice"), &{ns}::twice_cpu);
  m.impl("cube", &{ns}::twice_cpu);  // the op file gives cube no CPU kernel: fine
}}

TORCH_LIBRARY_IMPL({ns}, Meta, m) {{
  m.impl("twice", &{ns}::twice_cpu);
}}

TORCH_LIBRARY_IMPL({ns}, CUDA, m) {{
  m.impl("twice", &{ns}::twice_cpu);
}}
"""


def _refused_by_generate_and_the_build(tmp_path: Path, kernel: str, expected: str):
    """A project with hand-written registration source `kernel`: generate refuses it with the
    pinned diagnostics_config/<expected>.expected, and so does the build's own source check once
    the outputs exist. (project root, the generate process)."""
    from codegen import build, config
    from codegen.diagnostics import Diagnostics, UserError

    root = scratch.write_project(tmp_path / "proj", "alphaops", "alphans")
    legacy = root / "csrc" / "cpu" / "legacy" / "register.cpp"
    legacy.parent.mkdir()
    legacy.write_text(kernel.format(ns="alphans"), encoding="utf-8")
    gen = opgen("--project", str(root), "generate", cwd=tmp_path)
    assert gen.returncode == 1 and gen.stdout == ""
    expect.check_file(HERE / "diagnostics_config" / f"{expected}.expected", gen.stderr)
    legacy.unlink()
    assert opgen("--project", str(root), "generate", cwd=tmp_path).returncode == 0
    legacy.write_text(kernel.format(ns="alphans"), encoding="utf-8")
    with config.use(config.resolve(str(root), Diagnostics())):
        assert build.check_generated(root, sys.stdout)
        with pytest.raises(UserError) as info:
            build.check_sources(root)
    assert info.value.diags.render() + "\n" == gen.stderr
    return root, gen


def test_hand_written_impl_of_a_generated_kernel_is_a_located_error(tmp_path: Path) -> None:
    """A TORCH_LIBRARY_IMPL registration left beside the op file's `dispatch:` (or `fake:`,
    compiled to a Meta kernel) would replace opgen's kernel at import with only a warning:
    generate and the build refuse it, naming the op and the key."""
    root, gen = _refused_by_generate_and_the_build(tmp_path, KERNEL_WITH_TORCH_LIBRARY_IMPL,
                                                    "kernel_torch_library_impl")
    # Through the command, the build stops before compiling, on stderr.
    proc = opgen("build", cwd=root)
    assert (proc.returncode, proc.stdout) == (1, "") and proc.stderr == gen.stderr


KERNEL_WITH_TORCH_LIBRARY_FRAGMENT = """\
#include <torch/library.h>

// m.def("twice(Tensor x) -> Tensor") in a comment defines nothing.
TORCH_LIBRARY_FRAGMENT({ns}, m) {{
  m.def("legacy(Tensor x) -> Tensor");  // an op the op files do not define: fine
  m.def("{ns}::twice(Tensor self, float factor=2.0) -> Tensor");
  m.def(TORCH_SELECTIVE_SCHEMA("cube(Tensor x) -> Tensor"));
}}

TORCH_LIBRARY_FRAGMENT(someone_else, m) {{
  m.def("twice(Tensor x) -> Tensor");
}}
"""


def test_hand_written_def_of_a_declared_op_is_a_located_error(tmp_path: Path) -> None:
    """An m.def of an op the op files declare, left in a TORCH_LIBRARY_FRAGMENT block (as
    torchvision registers each op): it would build, then abort the process at import ("Tried to
    register an operator ... multiple times"). generate and the build refuse it at the schema."""
    root, gen = _refused_by_generate_and_the_build(tmp_path, KERNEL_WITH_TORCH_LIBRARY_FRAGMENT,
                                                    "kernel_torch_library_fragment")
    assert opgen("check", cwd=root).stderr == gen.stderr


def test_sources_of_no_namespace(tmp_path: Path) -> None:
    """With several namespaces, a kernel source outside every `<ns>/` directory is refused."""
    root = scratch.write_project(tmp_path / "proj", "alphaops", "alphans")
    (root / "ops" / "second.yaml").write_text(
        "namespace: secondns\nops:\n  - func: noop(Tensor x) -> Tensor\n"
        "    dispatch: {CPU: noop_cpu}\n", encoding="utf-8")
    gen = opgen("--project", str(root), "generate", cwd=tmp_path)
    assert gen.returncode == 1
    # Located at the C++ namespace its code is in, which names the directory it belongs in.
    assert gen.stderr.startswith(
        "csrc/cpu/add.cpp:5:1: error: this kernel source belongs to no namespace: the op library "
        "has several, and it is not in a directory named after one\n"
        "    namespace alphans {\n"
        "    ^~~~~~~~~~~~~~~~~~~\n"
        "hint: its code is in namespace 'alphans': move it to csrc/alphans/\n"), gen.stderr
    # Code in no namespace of the library: the directories to choose from, at its first line.
    (root / "csrc" / "cpu" / "add.cpp").write_text("// helpers\n\n#include <cmath>\n",
                                                   encoding="utf-8")
    gen = opgen("--project", str(root), "generate", cwd=tmp_path)
    assert gen.stderr.startswith(
        "csrc/cpu/add.cpp:3:1: error: this kernel source belongs to no namespace: the op library "
        "has several, and it is not in a directory named after one\n"
        "    #include <cmath>\n"
        "    ^~~~~~~~~~~~~~~~\n"
        "hint: move it to csrc/<namespace>/, one of: alphans, secondns\n"), gen.stderr


def test_sources_when_no_op_file_loads(tmp_path: Path) -> None:
    """An op file that does not load leaves the library with no namespace: its error alone is
    reported, not every kernel source as belonging to no namespace of "several"."""
    root = scratch.write_project(tmp_path / "proj", "alphaops", "alphans")
    ops = root / "ops" / "alphans.yaml"
    ops.write_text(ops.read_text(encoding="utf-8").replace(
        "    dispatch: {CPU: twice_cpu}", "      dispatch: {CPU: twice_cpu}"), encoding="utf-8")
    gen = opgen("--project", str(root), "check", cwd=tmp_path)
    assert (gen.returncode, gen.stdout) == (1, "")
    assert gen.stderr == (
        "ops/alphans.yaml:9:15: error: invalid YAML: mapping values are not allowed in this "
        "context\n"
        "          dispatch: {CPU: twice_cpu}\n"
        "                  ^\n"
        "hint: line 9 starts in column 7, right of the key on line 8 (column 5), so YAML reads "
        "it as more of that key's value; the keys of one mapping start in the same column\n"
        "1 error generated.\n")


def test_sources_compiling_to_one_object(tmp_path: Path) -> None:
    """Two kernel sources whose objects would be the same file are refused, located."""
    root = scratch.write_project(tmp_path / "proj", "alphaops", "alphans")
    twin = root / "csrc" / "alphans" / "cpu" / "add.cpp"
    twin.parent.mkdir(parents=True)
    twin.write_text((root / "csrc" / "cpu" / "add.cpp").read_text(encoding="utf-8"),
                    encoding="utf-8")
    gen = opgen("--project", str(root), "generate", cwd=tmp_path)
    assert gen.returncode == 1
    assert gen.stderr == (
        "csrc/cpu/add.cpp:1:1: error: this kernel source and csrc/alphans/cpu/add.cpp would "
        "compile to the same object build/obj/alphans/cpu/add.o\n"
        "    #include <alphans/alphans.h>\n"
        "    ^~~~~~~~~~~~~~~~~~~~~~~~~~~~\n"
        "hint: rename one of them\n"
        "1 error generated.\n")


# --------------------------------------------------------------------------------------------------
# Wheels (slow: two libraries compile)


USE_BOTH = """
import sys
import torch
import alphaops, betaops
assert "codegen" not in sys.modules
for pkg in (alphaops, betaops):
    for name, args in {samples}.items():
        op = getattr(pkg.ops, name)
        torch.library.opcheck(op, args)
print(alphaops._generated.NAMESPACES, betaops._generated.NAMESPACES,
      alphaops.ops.cube(torch.tensor([2.0])).item(), betaops.ops.twice(torch.ones(1)).item(),
      torch.ops.alphans.add_scaled(torch.ones(1), torch.ones(1), 3.0).item())
"""


def _pip_wheel(project: Path, out: Path) -> Path:
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation",
                           "--no-deps", "--no-index", "-w", str(out), str(project)],
                          env=scratch.env(), capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    wheels = list(out.glob(f"{project.name}-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.mark.slow
@pytest.mark.e2e
def test_wheels_install_and_run_without_opgen(tmp_path: Path) -> None:
    wheels = []
    for package, ns in (("alphaops", "alphans"), ("betaops", "betans")):
        root = scratch.write_project(tmp_path / package, package, ns)
        wheel = _pip_wheel(root, tmp_path / "wheels")
        assert re.search(r"-cp3\d+-cp3\d+-linux_\w+\.whl$", wheel.name), wheel.name
        names = sorted(zipfile.ZipFile(wheel).namelist())
        info = f"{package}-0.1.0.dist-info"
        assert names == sorted([
            f"{package}/__init__.py", f"{package}/kernels.py", f"{package}/lib{ns}_ops.so",
            f"{package}/py.typed",
            *(f"{package}/_generated/{f}" for f in (
                "__init__.py", "_aoti.py", "_loader.py", "_manifest.py", f"_reg_{ns}.py",
                "ops.py", "ops.pyi")),
            *(f"{info}/{f}" for f in ("METADATA", "WHEEL", "top_level.txt", "RECORD"))]), names
        wheels.append(wheel)

    python = scratch.fresh_venv(tmp_path / "venv")
    clean = scratch.clean_env()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    no_opgen = subprocess.run([str(python), "-c", "import codegen"], cwd=elsewhere, env=clean,
                              capture_output=True, text=True, timeout=300)
    assert no_opgen.returncode == 1 and "No module named 'codegen'" in no_opgen.stderr
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                              "--no-deps", "--no-index", *map(str, wheels)], env=clean,
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout + install.stderr
    shutil.rmtree(tmp_path / "alphaops")       # nothing of the projects is left to find
    shutil.rmtree(tmp_path / "betaops")
    run = subprocess.run([str(python), "-c", USE_BOTH.format(samples=scratch.project_samples())],
                         cwd=elsewhere, env=clean, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout == "['alphans'] ['betans'] 8.0 2.0 4.0\n", run.stdout


def test_build_refuses_a_torch_older_than_opgen_supports(monkeypatch) -> None:
    """torch 2.5 and 2.10 compiled none of the generated registrations (`m.def(schema, {tags})`;
    2.5 also lacks the AOTInductor shims): the build stops before ninja, saying which torch it
    needs."""
    import torch

    from codegen import toolchain

    monkeypatch.setattr(torch, "__version__", "2.10.0+cu128")
    with pytest.raises(toolchain.ToolchainError) as e:
        toolchain.make_toolchain("key")
    assert str(e.value) == (
        "error: torch 2.10.0+cu128 is older than opgen supports: the generated code needs torch "
        "2.13 or newer\n"
        f"hint: pip install 'torch>=2.13' (the build uses the torch of {sys.executable})")


def test_the_package_requires_the_torch_the_build_accepts() -> None:
    """pyproject.toml's torch requirement is the build's floor (codegen.toolchain.MIN_TORCH)."""
    import tomllib

    from codegen import toolchain

    meta = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml")
                         .read_text(encoding="utf-8"))
    floor = ".".join(map(str, toolchain.MIN_TORCH))
    assert f"torch>={floor}" in meta["project"]["dependencies"]


def test_a_wrapper_nvcc_on_path_builds_with_the_real_toolkit(tmp_path: Path, monkeypatch) -> None:
    """An `nvcc` on PATH that is a script exec'ing the real one made torch guess CUDA_HOME as
    the directory above it, where no libcudart is: every CUDA build failed to link. The build
    takes the toolkit the real nvcc belongs to, or the default one; a CUDA_HOME the user set
    stays."""
    from codegen import toolchain

    def toolkit(path: Path) -> Path:
        (path / "include").mkdir(parents=True)
        (path / "include" / "cuda_runtime.h").write_text("")
        (path / "bin").mkdir()
        (path / "bin" / "nvcc").write_text("#!/bin/sh\n")
        (path / "bin" / "nvcc").chmod(0o755)
        return path

    wrapper = tmp_path / "local"
    (wrapper / "bin").mkdir(parents=True)
    (wrapper / "bin" / "nvcc").write_text(f"#!/bin/sh\nexec {tmp_path}/cuda-13.0/bin/nvcc \"$@\"\n")
    (wrapper / "bin" / "nvcc").chmod(0o755)
    real = toolkit(tmp_path / "cuda-13.0")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(wrapper / "bin"))
    monkeypatch.setattr(toolchain, "DEFAULT_TOOLKIT", tmp_path / "cuda")
    assert toolchain._toolkit_home(str(wrapper)) is None        # nothing better: no CUDA build
    (tmp_path / "cuda").symlink_to(real)
    assert toolchain._toolkit_home(str(wrapper)) == str(tmp_path / "cuda")
    # An nvcc linked from PATH: its own toolkit.
    (wrapper / "bin" / "nvcc").unlink()
    (wrapper / "bin" / "nvcc").symlink_to(real / "bin" / "nvcc")
    assert toolchain._toolkit_home(str(wrapper)) == str(real)
    assert toolchain._toolkit_home(str(real)) == str(real)
    monkeypatch.setenv("CUDA_HOME", str(wrapper))
    assert toolchain._toolkit_home(str(wrapper)) == str(wrapper)
