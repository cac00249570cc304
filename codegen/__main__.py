"""Command line: `python -m codegen {check,list,generate,build} [PATHS]` (also `opgen ...`).

Every command works on a project: `--project DIR`, or the nearest pyproject.toml with a
`[tool.opgen]` table upward from the working directory (codegen.config), or else opgen's example
layout in the working directory. PATHS (op files or directories, relative to the working
directory) default to the project's `schemas`; the command runs in the project root, so
generated files and messages name project-relative paths. `generate` writes the whole library
(and so do `docs` and `snapshot`, into the project's own reference and snapshot, and `bc-check`
compares it with the project's snapshot): in a project with a [tool.opgen], PATHS that leave out
an op file of `schemas` are refused (`_whole_library`).

Exit status: 0 on success (warnings, if any, on stderr), 1 when the op files have errors (printed
as located diagnostics) or an output cannot be written, 2 on bad command-line usage, 3 on an
internal error (a bug: one line, the traceback only with --debug). User input never produces a
traceback.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from codegen import build, cli, compat, config, files, load, sample_failures
from codegen.dest import md_reference, ninja
from codegen.dest.py_ops import python_names
from codegen.gen import add_later_errors, check_and_render
from codegen.rendering import output_dir
from codegen.diagnostics import Diagnostics, Loc


def _cache_dir(project: config.Project) -> str | None:
    """Where loaded op files are kept between runs (Note [Incremental loading] in codegen.load):
    under the project's build directory; `OPGEN_NO_CACHE=1` turns it off."""
    if os.environ.get("OPGEN_NO_CACHE"):
        return None
    return os.path.join(project.build, "opgen-cache")


def _load(paths: list[str], project: config.Project, *, all_errors: bool = False):
    """The library; with `all_errors`, errors in it also bring what the later stages find
    (codegen.gen.add_later_errors)."""
    origin = None
    if not paths and project.config_path is not None:
        # The op files are the project's `schemas`: an error about one points at its entry.
        def origin(path: str, diags: Diagnostics) -> Loc:
            return config.locate_value(project, "schemas", diags, path)
    try:
        return load.load_library(paths or list(project.schemas), cache=_cache_dir(project),
                                 origin=origin)
    except load.LoadErrors as e:
        if all_errors:
            add_later_errors(e, project)
        raise


def _check_python_side(lib, project: config.Project, werror: bool = False,
                       paths: list[str] | None = None) -> Diagnostics:
    """Everything `generate` checks, so that `check` passes exactly what `generate` can generate:
    the checks that need the whole library (namespaces torch defines, names too long for a file),
    then every generator renders in memory (C++ bindings of every type, formulas calling library
    ops, missing fake kernels, Python function signatures, batching/autocast rules) and nothing
    is written; with `paths` (the op files and directories loaded), the known failures files of
    those directories too (what the sample checks would read). Returns the warnings (errors, with
    `werror`)."""
    diags = lib.diagnostics()
    # The failures files after rendering: rendering stops at any error found before it, and a
    # mistake there must not hide the op files' (a formula calling an op with a wrong keyword).
    check_and_render(lib, diags, project)
    if paths is not None:
        sample_failures.check_failures(paths, lib.ops, diags)
    if werror:
        diags.werror()
    diags.raise_if_errors()
    return diags


def _print_warnings(diags: Diagnostics) -> None:
    if diags.items:
        print(diags.render(), file=sys.stderr)


def cmd_check(args: argparse.Namespace, project: config.Project) -> int:
    lib = _load(args.paths, project, all_errors=True)
    _print_warnings(_check_python_side(lib, project, args.werror,
                                       args.paths or list(project.schemas)))
    n = len(lib.ops)
    print(f"{n} op{'s' if n != 1 else ''} in {len(lib.files)} file{'s' if len(lib.files) != 1 else ''}: ok")
    return 0


def cmd_list(args: argparse.Namespace, project: config.Project) -> int:
    lib = _load(args.paths, project)
    for op in lib.ops:
        print(op.schema)
    return 0


def _outside_the_project(paths: list[str], project: config.Project) -> None:
    """Generated files name their op files (comments, the manifest, the build's `codegen` edge):
    an op file outside the project would put a path of this machine into them. `paths` are
    project-relative where they lie below the root, else absolute (cli.run_in_project)."""
    diags = Diagnostics()
    for p in paths:
        if os.path.isabs(p):
            diags.error(Loc(p, 1, 1), "this op file is outside the project, and generated files "
                        "name their op files by project-relative paths",
                        f"move it below {project.root}"
                        + (" (into 'schemas' of [tool.opgen])" if project.config_path else ""))
    diags.raise_if_errors()


def _whole_library(args: argparse.Namespace, project: config.Project, consequence: str,
                   hint: str, **words: str) -> None:
    """A command that writes an output of the whole library (the generated set, which it
    prunes; the reference; the snapshot) refuses op files named on the command line that leave
    out some of the project's `schemas`: what it wrote would lose those files' ops. Files beyond
    `schemas` are taken, as before; without a [tool.opgen] the paths given are the library.
    `consequence` ends the message, `hint` is the hint; in them `{prog}` is the command as run,
    `{schemas}` the `schemas` entries, `{given}` the paths as typed; `words`, more of them."""
    if project.config_path is None or not args.paths:
        return
    quiet = Diagnostics()
    given = {os.path.realpath(f) for f in load.op_files(args.paths, quiet)}
    if quiet.has_errors:
        return      # a path that is no op file: loading reports it, located
    left_out: dict[str, str] = {}       # real path -> (the first) `schemas` entry holding it
    for entry in project.schemas:
        for f in load.op_files([entry], Diagnostics()):
            left_out.setdefault(os.path.realpath(f), entry)
    missing = [(real, entry) for real, entry in left_out.items() if real not in given]
    if not missing:
        return
    first, entry = missing[0]
    shown = project.relative(first)
    more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
    typed = getattr(args, "typed_paths", None) or args.paths
    words = {
        **words,
        "prog": args.prog + (f" --project {shlex.quote(args.project)}" if args.project else ""),
        "schemas": ", ".join(project.schemas),
        "given": " ".join(shlex.quote(p) for p in typed),
        "what": "one file" if len(typed) == 1 else "these",
        "those": "those files" if more else "that file",
    }
    diags = Diagnostics()
    diags.error(config.locate_value(project, "schemas", diags, entry),
                f"the op files given leave out {shown}{more} of the project's 'schemas', "
                + consequence.format(**words), hint.format(**words))
    diags.raise_if_errors()


def cmd_generate(args: argparse.Namespace, project: config.Project) -> int:
    _outside_the_project(args.paths, project)
    _whole_library(args, project,
                   "and generate --check would report what was generated from {those} stale"
                   if args.check else "and generate would delete what was generated from {those}",
                   "generate writes the whole library of the project: run `{prog} generate` "
                   "(all of {schemas}), or `{prog} check {given}` to validate {what}")
    lib = _load(args.paths, project, all_errors=True)
    diags = lib.diagnostics()
    fileset = check_and_render(lib, diags, project)
    if args.werror:
        diags.werror()
    diags.raise_if_errors()
    assert fileset is not None
    _print_warnings(diags)
    root = Path(".")      # the project root (config.use)
    if args.check:
        changed = files.stale(root, fileset) + files.orphans(root, fileset, output_dir(project))
        for rel in changed:
            print(f"stale: {rel}")
        return 1 if changed else 0
    written = files.write(root, fileset, prune_dir=output_dir(project))
    if args.depfile:
        ninja.write_depfile(Path(args.depfile), lib, project)
    for rel in written:
        print(f"{'wrote' if rel in fileset.files else 'removed'} {rel}")
    if not written:
        print(f"{len(fileset.files)} files up to date")
    return 0


def cmd_snapshot(args: argparse.Namespace, project: config.Project) -> int:
    """Record every op's contract in the snapshot (codegen.compat), written only when it
    changes."""
    path = _shown(project, args.snapshot, project.snapshot)
    if path == project.snapshot:
        _whole_library(args, project, "and snapshot would drop the ops of {those} from {path}",
                       "snapshot records the contract of the whole library: run `{prog} "
                       "snapshot` (all of {schemas}), or `{prog} snapshot --snapshot PATH {given}` "
                       "to record {what} elsewhere", path=path)
    lib = _load(args.paths, project)
    text = compat.snapshot_text(lib, python_names(lib, Diagnostics()))
    written = files.write(Path("."), files.FileSet({path: text}))
    n = len(lib.ops)
    print(f"{'wrote' if written else 'up to date:'} {path} ({n} op{'s' if n != 1 else ''})")
    return 0


def cmd_bc_check(args: argparse.Namespace, project: config.Project) -> int:
    """Compare the library with the snapshot: every undeclared break is a located error."""
    path = _shown(project, args.snapshot, project.snapshot)
    if path == project.snapshot:
        _whole_library(args, project,
                       "and bc-check would report the ops of {those} as removed from {path}",
                       "bc-check compares the whole library with its snapshot: run `{prog} "
                       "bc-check` (all of {schemas}), or `{prog} bc-check --snapshot PATH "
                       "{given}` against a snapshot of {what}", path=path)
    lib = _load(args.paths, project)
    diags = Diagnostics()
    snap = compat.read_snapshot(path, diags)
    diags.raise_if_errors()
    assert snap is not None
    report = compat.compare(lib, snap, python_names(lib, Diagnostics()))
    compat.diagnose(report, lib, snap, diags)
    if args.changelog:
        print(compat.changelog(report))
    diags.raise_if_errors()
    declared = sum(1 for r in report.ops if r.declared is not None)
    if not args.changelog:
        print(f"{len(lib.ops)} ops compatible with {snap.path}: {len(report.added)} added, "
              f"{len(report.changed)} changed, {len(report.removed)} removed"
              + (f", {declared} declared break{'s' if declared != 1 else ''}" if declared else ""))
    return 0


def cmd_docs(args: argparse.Namespace, project: config.Project) -> int:
    """Render the op reference, one Markdown file per namespace, written only when it
    changes; with --check, write nothing and exit 1 when a file is stale."""
    directory = _shown(project, args.output, project.docs)
    if directory == project.docs:
        _whole_library(args, project,
                       "and docs --check would report the reference in {directory} stale"
                       if args.check else
                       "and docs would drop the ops of {those} from the reference in {directory}",
                       "docs writes the reference of the whole library: run `{prog} docs` "
                       "(all of {schemas}), or `{prog} docs --output DIR {given}` for {what} "
                       "alone", directory=directory)
    lib = _load(args.paths, project)
    diags = lib.diagnostics()
    fileset = files.FileSet(md_reference.generate(lib, diags, directory=directory))
    diags.raise_if_errors()
    root = Path(".")
    # Only files opgen wrote are removed (the directory may hold others).
    orphans = [rel for rel in files.orphans(root, fileset, directory)
               if rel.endswith(".md") and (root / rel).read_text(
                   encoding="utf-8", errors="replace").startswith(md_reference.MARK)]
    if args.check:
        changed = files.stale(root, fileset) + orphans
        for rel in changed:
            print(f"stale: {rel}")
        return 1 if changed else 0
    written = files.write(root, fileset)
    for rel in orphans:
        (root / rel).unlink()
    for rel in written + orphans:
        print(f"{'removed' if rel in orphans else 'wrote'} {rel}")
    if not written and not orphans:
        print(f"{len(fileset.files)} files up to date")
    return 0


def _absolute(path: str) -> str:
    """A path option, taken relative to where the command is run (commands run in the project
    root, where `_shown` makes it project-relative again)."""
    return str(Path(path).resolve())


def _shown(project: config.Project, path: str | None, default: str) -> str:
    return project.relative(path) if path else default


def add_ship_commands(sub) -> None:
    """`snapshot`, `bc-check` and `docs`: keeping a shipped library's contract and reference."""
    for name, fn, help_ in [
        ("snapshot", cmd_snapshot, "record every op's contract in the snapshot (opgen.lock)"),
        ("bc-check", cmd_bc_check, "check the op library against the snapshot; exit 1 on a "
                                   "break that is not declared"),
        ("docs", cmd_docs, "write the op reference, Markdown per namespace"),
    ]:
        p = sub.add_parser(name, help=help_)
        cli.debug_option(p, argparse.SUPPRESS)
        cli.project_option(p, argparse.SUPPRESS)
        p.add_argument("paths", nargs="*", help="op files or directories (default: the "
                       "project's schemas)")
        p.set_defaults(fn=fn)
        if name in ("snapshot", "bc-check"):
            p.add_argument("--snapshot", metavar="PATH", type=_absolute,
                           help="the snapshot file (default: [tool.opgen] snapshot, opgen.lock)")
        if name == "bc-check":
            p.add_argument("--changelog", action="store_true",
                           help="print the added, removed and changed ops as Markdown")
        if name == "docs":
            p.add_argument("--output", metavar="DIR", type=_absolute,
                           help="the directory of the reference (default: [tool.opgen] docs, "
                                "docs/ops)")
            p.add_argument("--check", action="store_true",
                           help="write nothing; exit 1 if any reference file is stale")


def main(argv: list[str] | None = None) -> int:
    # Usage names the command as it was run: the `opgen` console script or `python -m codegen`.
    prog = "opgen" if Path(sys.argv[0]).name == "opgen" else "python -m codegen"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    cli.debug_option(parser, False)
    cli.project_option(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn, help_ in [
        ("check", cmd_check, "parse and validate op files"),
        ("list", cmd_list, "print every op's canonical schema"),
        ("generate", cmd_generate, "generate code into the project's generated directory"),
        ("build", None, "compile the op libraries with ninja (python -m codegen.build)"),
    ]:
        p = sub.add_parser(name, help=help_)
        cli.debug_option(p, argparse.SUPPRESS)     # `--debug` before or after the command
        cli.project_option(p, argparse.SUPPRESS)
        if name == "build":
            build.add_arguments(p)
            p.set_defaults(fn=None)
            continue
        p.add_argument("paths", nargs="*", help="op files or directories (default: the "
                       "project's schemas)")
        p.set_defaults(fn=fn)
        if name != "list":
            p.add_argument("--werror", action="store_true",
                           help="treat warnings as errors (exit 1, nothing generated)")
        if name == "generate":
            p.add_argument("--check", action="store_true",
                           help="write nothing; exit 1 if any generated file is stale")
            p.add_argument("--depfile", metavar="PATH",
                           help="also write a make-style depfile of every input read (for ninja)")
    add_ship_commands(sub)
    args = parser.parse_args(argv)
    args.prog = prog
    # The paths as typed, for hints to repeat (cli.run_in_project makes them project-relative).
    args.typed_paths = list(getattr(args, "paths", None) or ())
    if args.fn is None:
        return build.run(args)
    return cli.run_in_project(args, lambda project: args.fn(args, project))


def entry() -> None:
    """The `opgen` console script."""
    cli.exit_now(main())


if __name__ == "__main__":
    entry()
