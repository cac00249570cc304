"""Command line: `python -m codegen {check,list,generate,build} [PATHS]` (also `opgen ...`).

Every command works on a project: `--project DIR`, or the nearest pyproject.toml with a
`[tool.opgen]` table upward from the working directory (codegen.config), or else opgen's example
layout in the working directory. PATHS (op files or directories, relative to the working
directory) default to the project's `schemas`; the command runs in the project root, so
generated files and messages name project-relative paths.

Exit status: 0 on success (warnings, if any, on stderr), 1 when the op files have errors (printed
as located diagnostics) or an output cannot be written, 2 on bad command-line usage, 3 on an
internal error (a bug: one line, the traceback only with --debug). User input never produces a
traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

from codegen import config
from codegen.diagnostics import Diagnostics, UserError
from codegen.files import WriteError


def _load(paths: list[str]):
    from codegen.load import load_library

    return load_library(paths or list(config.current().schemas))


def _check_python_side(lib, werror: bool = False) -> Diagnostics:
    """Everything `generate` checks, so that `check` passes exactly what `generate` can generate:
    the checks that need the whole library (namespaces torch defines, names too long for a file),
    then every generator renders in memory (C++ bindings of every type, formulas calling library
    ops, missing fake kernels, Python function signatures, batching/autocast rules) and nothing
    is written. Returns the warnings (errors, with `werror`)."""
    from codegen.gen import check_library, render

    diags = lib.diagnostics()
    check_library(lib, diags)
    if not diags.has_errors:
        render(lib, diags)
    if werror:
        diags.werror()
    diags.raise_if_errors()
    return diags


def _print_warnings(diags: Diagnostics) -> None:
    if diags.items:
        print(diags.render(), file=sys.stderr)


def cmd_check(args: argparse.Namespace) -> int:
    lib = _load(args.paths)
    _print_warnings(_check_python_side(lib, args.werror))
    n = len(lib.ops)
    print(f"{n} op{'s' if n != 1 else ''} in {len(lib.files)} file{'s' if len(lib.files) != 1 else ''}: ok")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    lib = _load(args.paths)
    for op in lib.ops:
        print(op.schema)
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from codegen import files
    from codegen.gen import check_library, output_dir, render

    lib = _load(args.paths)
    diags = lib.diagnostics()
    check_library(lib, diags)
    diags.raise_if_errors()
    fileset = render(lib, diags)
    if args.werror:
        diags.werror()
    diags.raise_if_errors()
    _print_warnings(diags)
    root = Path(".")      # the project root (config.use)
    if args.check:
        changed = files.stale(root, fileset) + files.orphans(root, fileset, output_dir())
        for rel in changed:
            print(f"stale: {rel}")
        return 1 if changed else 0
    written = files.write(root, fileset, prune_dir=output_dir())
    if args.depfile:
        from codegen.dest.ninja import write_depfile

        write_depfile(Path(args.depfile), lib)
    for rel in written:
        print(f"wrote {rel}")
    if not written:
        print(f"{len(fileset.files)} files up to date")
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    """Record every op's contract in the snapshot (codegen.compat), written only when it
    changes."""
    from codegen import compat, files

    lib = _load(args.paths)
    path = _shown(args.snapshot, config.current().snapshot)
    written = files.write(Path("."), files.FileSet({path: compat.snapshot_text(lib)}))
    n = len(lib.ops)
    print(f"{'wrote' if written else 'up to date:'} {path} ({n} op{'s' if n != 1 else ''})")
    return 0


def cmd_bc_check(args: argparse.Namespace) -> int:
    """Compare the library with the snapshot: every undeclared break is a located error."""
    from codegen import compat

    lib = _load(args.paths)
    diags = Diagnostics()
    snap = compat.read_snapshot(_shown(args.snapshot, config.current().snapshot), diags)
    diags.raise_if_errors()
    assert snap is not None
    report = compat.compare(lib, snap)
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


def cmd_docs(args: argparse.Namespace) -> int:
    """Render the op reference, one Markdown file per namespace, written only when it
    changes; with --check, write nothing and exit 1 when a file is stale."""
    from codegen import files
    from codegen.dest import md_reference

    lib = _load(args.paths)
    directory = _shown(args.output, config.current().docs)
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


def _shown(path: str | None, default: str) -> str:
    return config.current().relative(path) if path else default


def add_ship_commands(sub) -> None:
    """`snapshot`, `bc-check` and `docs`: keeping a shipped library's contract and reference."""
    from codegen import build

    for name, fn, help_ in [
        ("snapshot", cmd_snapshot, "record every op's contract in the snapshot (opgen.lock)"),
        ("bc-check", cmd_bc_check, "check the op library against the snapshot; exit 1 on a "
                                   "break that is not declared"),
        ("docs", cmd_docs, "write the op reference, Markdown per namespace"),
    ]:
        p = sub.add_parser(name, help=help_)
        debug_option(p, argparse.SUPPRESS)
        build.project_option(p, argparse.SUPPRESS)
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


INTERNAL_ERROR = 3


def internal_error(e: BaseException, debug: bool) -> int:
    """An exception no user input should raise: one line that cannot pass for a result, and the
    traceback only when asked for."""
    if debug:
        traceback.print_exc()
    detail = " ".join(str(e).split())
    if len(detail) > 300:
        detail = detail[:297] + "..."
    print(f"error: internal error, please report: {type(e).__name__}"
          f"{': ' + detail if detail else ''}"
          f"{'' if debug else ' (rerun with --debug for the traceback)'}", file=sys.stderr)
    return INTERNAL_ERROR


def debug_option(parser: argparse.ArgumentParser, default) -> None:
    parser.add_argument("--debug", action="store_true", default=default,
                        help="show the traceback of an internal error")


def main(argv: list[str] | None = None) -> int:
    from codegen import build

    # Usage names the command as it was run: the `opgen` console script or `python -m codegen`.
    prog = "opgen" if Path(sys.argv[0]).name == "opgen" else "python -m codegen"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    debug_option(parser, False)
    build.project_option(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn, help_ in [
        ("check", cmd_check, "parse and validate op files"),
        ("list", cmd_list, "print every op's canonical schema"),
        ("generate", cmd_generate, "generate code into the project's generated directory"),
        ("build", None, "compile the op libraries with ninja (python -m codegen.build)"),
    ]:
        p = sub.add_parser(name, help=help_)
        debug_option(p, argparse.SUPPRESS)     # `--debug` before or after the command
        build.project_option(p, argparse.SUPPRESS)
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
    if args.fn is None:
        return build.run(args)
    try:
        project = config.resolve(args.project, Diagnostics())
        args.paths = [project.relative(p) for p in args.paths]
        with config.use(project):
            return args.fn(args)
    except UserError as e:
        print(e.diags.render(), file=sys.stderr)
        return 1
    except WriteError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `python -m codegen list | head`: the reader left; exit quietly, as other tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001  (the one place that catches everything; see above)
        return internal_error(e, args.debug)


if __name__ == "__main__":
    sys.exit(main())
