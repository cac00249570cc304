"""`python -m codegen.build`: this machine's toolchain -> `build/toolchain.ninja`, then ninja on
`generated/build.ninja`, with ninja's output shown as it comes.

The toolchain file is written by codegen.toolchain (Note [Toolchain]); compiler and linker errors
get the notes of codegen.build_notes.

Before ninja runs, the generated set is checked against its completion stamp (Note [Set-atomic
writes] in codegen/files.py): after an interrupted or failed generate, or a generated file changed
since, the stamp is removed, so ninja's `codegen` edge regenerates the set before anything
compiles; a mixed set is never compiled.

Exit status: ninja's (0 on success), 1 when the build cannot start, 3 on an internal error (one
line; the traceback with --debug).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from codegen import cli, config
from codegen.build_notes import Notes, generated_namespaces, namespace_indexes
from codegen.dest.ninja import check_kernel_sources, kernel_sources, ninja_file, refresh_listing
from codegen.diagnostics import Diagnostics, UserError
from codegen.files import verify_stamp
from codegen.layout import library_file, stamp_path, stamp_prefix
from codegen.loader import elf_problem, read_stamp
from codegen.rendering import set_stamp
from codegen.toolchain import ToolchainError, toolchain_var, write_stable_include, write_toolchain


def ninja_binary() -> str:
    try:
        import ninja

        candidate = Path(ninja.BIN_DIR) / "ninja"
        if candidate.is_file():
            return str(candidate)
    except ImportError:
        pass
    found = shutil.which("ninja")
    if found is None:
        raise SystemExit("error: ninja is not installed (pip install ninja)")
    return found


def cuda_sources(root: Path) -> list[str]:
    sources = kernel_sources(config.current(), generated_namespaces(root), root)
    return sorted(s for v in sources.values() for s, _ in v if s.endswith(".cu"))


def check_sources(root: Path) -> None:
    """UserError for kernel sources that would build and then go wrong at import (a hand-written
    TORCH_LIBRARY block for a namespace opgen generates, a TORCH_LIBRARY_IMPL registration of a
    kernel the generated registration units register too)."""
    namespaces = generated_namespaces(root)
    diags = Diagnostics()
    sources = kernel_sources(config.current(), namespaces, root)
    check_kernel_sources(sources, set(namespaces), root, diags, namespace_indexes(root))
    diags.raise_if_errors()


_SOURCE_EXCERPT = re.compile(r"^\s*\d*\s*\|")   # gcc's `  5 | code` and `    |   ^~~` lines


def _codegen_failure(line: str, build_file: str) -> bool:
    """Whether `line` is ninja's `FAILED: [code=N] outputs...` of the edge that regenerates the
    build file (opgen's own `generate`)."""
    return line.startswith("FAILED: ") and build_file in line.split()


def run_ninja(root: Path, extra: list[str], *, out=None) -> int:
    out = out or sys.stdout
    notes = Notes(root)
    build_file = ninja_file(config.current())
    proc = subprocess.Popen([ninja_binary(), "-f", build_file, *extra],
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", bufsize=1)
    assert proc.stdout is not None
    pending: str | None = None      # a note waits until the compiler has shown its source lines
    # A failed regeneration has said what is wrong in located messages: ninja's list of every
    # generated file, the command line and its closing "rebuilding ...: subcommand failed"
    # would bury them.
    skip_command = False
    for line in proc.stdout:
        if skip_command:
            skip_command = False
            continue
        if _codegen_failure(line, build_file):
            skip_command = True
            continue
        if line.startswith(f"ninja: error: rebuilding '{build_file}'"):
            continue
        if pending is not None and not _SOURCE_EXCERPT.match(line):
            out.write(pending + "\n")
            pending = None
        out.write(line)
        note = notes.after(line)
        if note:
            if pending is not None:
                out.write(pending + "\n")
            pending = note
        out.flush()
    if pending is not None:
        out.write(pending + "\n")
    return proc.wait()


def _generate_hint() -> str:
    """How this project regenerates: its own command (`opgen generate` in a project)."""
    return f"hint: run `{config.current().codegen_command}`"


def check_generated(root: Path, out, err=None) -> bool:
    """Make ninja regenerate a generated set that is not the one its stamp records: without
    the stamp, an output of the `codegen` edge is missing, so that edge runs first. False when
    that cannot work (a build file older than the stamp), with the error written to `err`
    (stderr by default)."""
    err = err or sys.stderr
    project = config.current()
    stamp = set_stamp(project)
    problem = verify_stamp(root, stamp)
    if problem is None:
        return True
    build_file = ninja_file(project)
    if stamp not in (root / build_file).read_text(encoding="utf-8", errors="replace"):
        err.write(f"error: {problem}, and {build_file} is too old to regenerate it\n"
                  f"{_generate_hint()}\n")
        return False
    out.write(f"note: {problem}; regenerating before the build\n")
    try:
        (root / stamp).unlink()
    except FileNotFoundError:
        pass
    return True


def build(root: Path, extra: list[str] | None = None, *, out=None, err=None) -> int:
    """Build; ninja's output and notes go to `out` (stdout), errors that stop the build before
    ninja runs to `err` (stderr)."""
    out = out or sys.stdout
    err = err or sys.stderr
    build_file = ninja_file(config.current())
    if not (root / build_file).is_file():
        err.write(f"error: {build_file} not found under {root}: nothing is generated yet\n"
                  f"{_generate_hint()} first\n")
        return 1
    if not check_generated(root, out, err):
        return 1
    try:
        check_sources(root)
    except UserError as e:
        err.write(e.diags.render() + "\n")
        return 1
    try:
        _written, text = write_toolchain(root)
    except ToolchainError as e:
        err.write(f"{e}\n")
        return 1
    # Links only (idempotent): a stable namespace may come from op files that ninja's codegen edge
    # generates only once ninja runs, after which no index would be read again.
    write_stable_include(root)
    if toolchain_var(text, "nvcc") is None:
        skipped = cuda_sources(root)
        if skipped:
            why = toolchain_var(text, "cuda_skip") or "no CUDA build"
            hint = ("\nhint: install the CUDA toolkit (or pip install 'cuda-toolkit[nvcc,cccl]') "
                    "and set CUDA_HOME to its directory" if "nvcc" in why else "")
            out.write(f"note: {why}: skipping CUDA kernels ({', '.join(skipped)}); their ops "
                      f"get no CUDA kernel in this build{hint}\n")
    outdate_refused_libraries(root)
    refresh_listing(config.current(), root)
    out.flush()
    return run_ninja(root, list(extra or []), out=out)


_STAMP_SCHEMAS = re.compile(r'"@opgen-stamp ns=(\w+) schemas=([0-9a-f]+) ')


def outdate_refused_libraries(root: Path) -> None:
    """Make ninja relink each library the loader would refuse, though it is newer than its
    inputs: one copied over from another checkout or project, or cut short. The loader tells the
    user to run the build, and ninja alone would find nothing to do. The file keeps its bytes
    (only its mtime goes back), so a build that then fails leaves it as it was."""
    project = config.current()
    for ns in generated_namespaces(root):
        lib = root / project.libraries / library_file(ns)
        try:
            if not lib.is_file():
                continue                # nothing built yet: ninja links it anyway
            m = _STAMP_SCHEMAS.search(
                (root / stamp_path(project, ns)).read_text(encoding="utf-8"))
            if m is None:
                continue
            stamp = read_stamp(lib, stamp_prefix(ns))
            if stamp is None or stamp.schema_hash != m[2] or elf_problem(lib) is not None:
                os.utime(lib, (1, 1))   # not 0: ninja reads an mtime of 0 as a missing file
        except OSError:
            continue                    # ninja and the loader say what is wrong with it


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen.build",
                                     description=__doc__.splitlines()[0])
    cli.project_option(parser)
    add_arguments(parser)
    cli.debug_option(parser, False)
    args = parser.parse_args(argv)
    return run(args)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The build's own options (also those of `opgen build`)."""
    parser.add_argument("-j", "--jobs", type=int, help="parallel jobs (ninja's default otherwise)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show full command lines")
    parser.add_argument("targets", nargs="*", help="ninja targets (default: every library)")


def run(args: argparse.Namespace) -> int:
    extra = (["-j", str(args.jobs)] if args.jobs else []) + (["-v"] if args.verbose else [])
    # OSError: the disk, not the code (a build directory that cannot be written, no compiler).
    return cli.run_in_project(args, lambda project: build(project.root, extra + args.targets),
                              environment_errors=(OSError,))


if __name__ == "__main__":
    sys.exit(main())
