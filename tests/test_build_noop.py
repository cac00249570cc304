"""A build with nothing to do does nothing: the codegen edge of the generated build file declares
exactly the files code generation writes (an output it never writes would rerun the edge on
every build), for libraries on the full API and on the stable ABI, in this repository and in a
project of its own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from codegen import config
from codegen.build import ninja_binary
from codegen.diagnostics import Diagnostics
from codegen.gen import render
from codegen.load import load_library
from tests import scratch

FULL_OPS = """\
namespace: {ns}
ops:
  - func: twice(Tensor x) -> Tensor
    dispatch: {{CPU: twice_cpu}}
    fake: like(x)
  - func: twice_(Tensor(a!) x) -> Tensor(a!)
    dispatch: {{CPU: twice_cpu_}}
"""

STABLE_OPS = """\
namespace: {ns}
abi: stable
min_torch: "2.10"
ops:
  - func: halve(Tensor x) -> Tensor
    dispatch: {{CPU: halve_cpu}}
    fake: like(x)
  - func: halve_(Tensor(a!) x) -> Tensor(a!)
    dispatch: {{CPU: halve_cpu_}}
"""

FULL_KERNEL = """\
#include <{ns}/full.h>

#include <ATen/ops/mul.h>

namespace {ns} {{

at::Tensor twice_cpu(const at::Tensor& x) {{ return at::mul(x, 2); }}

at::Tensor& twice_cpu_(at::Tensor& x) {{ return x.mul_(2); }}

}}  // namespace {ns}
"""

STABLE_KERNEL = """\
#include <{ns}/stab.h>

#include <torch/csrc/stable/ops.h>

namespace {ns} {{

torch::stable::Tensor halve_cpu(const torch::stable::Tensor& x) {{
  torch::stable::Tensor out = torch::stable::empty_like(x);
  torch::stable::copy_(out, x);
  return out;
}}

torch::stable::Tensor halve_cpu_(torch::stable::Tensor& x) {{ return x; }}

}}  // namespace {ns}
"""


def codegen_outputs(ninja_text: str) -> set[str]:
    """The outputs of the build file's `codegen` edge."""
    joined = re.sub(r"\$\n\s*", "", ninja_text)
    (line,) = [ln for ln in joined.splitlines()
               if ln.startswith("build ") and re.search(r"[^$]: codegen ", ln)]
    return set(line[len("build "):].split(": codegen ", 1)[0].split())


def test_codegen_edge_declares_exactly_the_generated_set(tmp_path: Path, monkeypatch) -> None:
    """Both ABIs: every declared output is written, and every written file is declared."""
    monkeypatch.chdir(tmp_path)
    Path("full.yaml").write_text(FULL_OPS.format(ns="nfull"), encoding="utf-8")
    Path("stab.yaml").write_text(STABLE_OPS.format(ns="nstab"), encoding="utf-8")
    lib = load_library(["full.yaml", "stab.yaml"])
    diags = Diagnostics()
    project = config.default_project(tmp_path)
    fileset = render(lib, diags, project)
    assert not diags.has_errors, diags.render()
    declared = codegen_outputs(fileset.files[project.ninja_file])
    assert declared == set(fileset.files)
    # The stable header is one per op file; the full API's has one more per op name.
    assert "generated/cpp/nstab/stab.h" in declared and "generated/cpp/nfull/full/twice.h" in declared
    assert not any(p.startswith("generated/cpp/nstab/stab/") for p in declared)


def codegen_command(ninja_text: str) -> str:
    """The command of the build file's `codegen` rule."""
    joined = re.sub(r"\$\n\s*", "", ninja_text)
    rule = joined.split("rule codegen\n", 1)[1]
    return next(ln for ln in rule.splitlines() if ln.strip().startswith("command = "))


def test_the_codegen_edge_reads_the_op_file_directory_beside_its_failures_file(
        tmp_path: Path, monkeypatch) -> None:
    """`sample_failures.yaml` beside the op files is not an op file: the edge still reruns
    `generate` on the directory, so an op file added later is taken (given the old files one by
    one, `generate` refused to leave it out, and `opgen build` failed until `opgen generate`)."""
    monkeypatch.chdir(tmp_path)
    Path("ops").mkdir()
    Path("ops/full.yaml").write_text(FULL_OPS.format(ns="nfull"), encoding="utf-8")
    Path("ops/sample_failures.yaml").write_text("{}\n", encoding="utf-8")
    lib = load_library(["ops"])
    diags = Diagnostics()
    project = config.default_project(tmp_path)
    fileset = render(lib, diags, project)
    assert not diags.has_errors, diags.render()
    command = codegen_command(fileset.files[project.ninja_file])
    assert command.endswith("generate --depfile build/codegen.d ops"), command


def test_the_repository_build_file_declares_its_generated_set() -> None:
    """The committed generated/build.ninja against the committed generated set."""
    ninja = (scratch.REPO / "generated" / "build.ninja").read_text(encoding="utf-8")
    stamp = (scratch.REPO / "generated" / "SHA256SUMS").read_text(encoding="utf-8")
    listed = {"generated/" + line.split("  ", 1)[1] for line in stamp.splitlines()
              if line and not line.startswith("#")}
    assert codegen_outputs(ninja) == listed | {"generated/SHA256SUMS"}


def ninja_dry_run(root: Path, ninja_file: str) -> str:
    proc = subprocess.run([ninja_binary(), "-n", "-d", "explain", "-f", ninja_file], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


@pytest.mark.e2e
def test_a_built_repository_has_nothing_to_do(testing) -> None:    # `testing` builds it
    out = ninja_dry_run(scratch.REPO, "generated/build.ninja")
    assert out == "ninja: no work to do.\n", out


PROJECT = """\
[project]
name = "dualops"
version = "0.1.0"

[tool.opgen]
package = "dualops"
schemas = ["ops"]
kernels = ["csrc"]
"""


@pytest.mark.e2e
def test_a_built_project_has_nothing_to_do(tmp_path: Path) -> None:
    """A project with a full-API and a stable-ABI namespace: the first build after generate runs
    code generation once (to record what it read), a second build does nothing."""
    root = tmp_path / "proj"
    files = {
        "pyproject.toml": PROJECT,
        "ops/full.yaml": FULL_OPS.format(ns="dualfull"),
        "ops/stab.yaml": STABLE_OPS.format(ns="dualstab"),
        "csrc/dualfull/k.cpp": FULL_KERNEL.format(ns="dualfull"),
        "csrc/dualstab/k.cpp": STABLE_KERNEL.format(ns="dualstab"),
        "dualops/__init__.py": "from dualops._generated import ops\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")

    def opgen(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "codegen", *args], cwd=root,
                              env=scratch.env(), capture_output=True, text=True, timeout=900)

    gen = opgen("generate")
    assert gen.returncode == 0, gen.stdout + gen.stderr
    first = opgen("build")
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.count("] CODEGEN ") == 1, first.stdout
    assert "LINK dualops/libdualfull_ops.so" in first.stdout
    assert "LINK dualops/libdualstab_ops.so" in first.stdout
    out = ninja_dry_run(root, "dualops/_generated/build.ninja")
    assert out == "ninja: no work to do.\n", out
    again = opgen("build")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout == "ninja: no work to do.\n", again.stdout


@pytest.mark.e2e
def test_an_edit_that_renames_over_a_kernel_reruns_no_codegen(tmp_path: Path) -> None:
    """Note [Input listing]: fixing a kernel that failed to compile, saved as editors save (a
    temporary renamed over the file, a hidden swap file beside it), recompiles the kernel and
    reruns no code generation, though the kernel directory's mtime moved; a kernel source
    added later still does."""
    root = tmp_path / "proj"
    good = STABLE_KERNEL.format(ns="editstab")
    files = {
        "pyproject.toml": PROJECT.replace("dualops", "editops"),
        "ops/stab.yaml": STABLE_OPS.format(ns="editstab"),
        "csrc/editstab/k.cpp": good.replace("return x; }", "return x }"),
        "editops/__init__.py": "from editops._generated import ops\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")

    def opgen(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "codegen", *args], cwd=root,
                              env=scratch.env(), capture_output=True, text=True, timeout=900)

    assert opgen("generate").returncode == 0
    failed = opgen("build")
    assert failed.returncode != 0 and "FAILED" in failed.stdout, failed.stdout + failed.stderr
    kernel = root / "csrc/editstab/k.cpp"
    (kernel.parent / ".k.cpp.swp").write_bytes(b"")
    tmp = kernel.with_name("k.cpp.tmp~")
    tmp.write_text(good, encoding="utf-8")
    tmp.replace(kernel)
    fixed = opgen("build")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "CXX csrc/editstab/k.cpp" in fixed.stdout and "CODEGEN" not in fixed.stdout, \
        fixed.stdout
    again = opgen("build")
    assert again.stdout == "ninja: no work to do.\n", again.stdout
    (kernel.parent / "more.cpp").write_text("#include <editstab/stab.h>\n", encoding="utf-8")
    added = opgen("build")
    assert added.returncode == 0, added.stdout + added.stderr
    assert added.stdout.count("] CODEGEN ") == 1 and "CXX csrc/editstab/more.cpp" in added.stdout, \
        added.stdout
