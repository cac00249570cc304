"""Command line: `python -m codegen {check,list,generate} [PATHS]`.

Exit status: 0 on success, 1 when the op files have errors (printed as located diagnostics),
2 on bad command-line usage. User input never produces a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from codegen.diagnostics import UserError

DEFAULT_PATHS = ["schemas"]


def _load(paths: list[str]):
    from codegen.load import load_library

    return load_library(paths or DEFAULT_PATHS)


def _check_python_side(lib) -> None:
    """The checks that need the whole library (formulas calling library ops, missing fake
    kernels, Python function signatures, batching/autocast rules): codegen.dest.py_reg renders
    in memory and writes nothing."""
    from codegen.dest.py_reg import generate_registrations

    diags = lib.diagnostics()
    generate_registrations(lib, diags)
    diags.raise_if_errors()


def cmd_check(args: argparse.Namespace) -> int:
    lib = _load(args.paths)
    _check_python_side(lib)
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
    from codegen.gen import OUTPUT_DIR, render

    lib = _load(args.paths)
    diags = lib.diagnostics()
    fileset = render(lib, diags)
    diags.raise_if_errors()
    root = Path(args.root)
    if args.check:
        changed = files.stale(root, fileset) + files.orphans(root, fileset, OUTPUT_DIR)
        for rel in changed:
            print(f"stale: {rel}")
        return 1 if changed else 0
    written = files.write(root, fileset, prune_dir=OUTPUT_DIR)
    if args.depfile:
        from codegen.dest.ninja import write_depfile

        write_depfile(Path(args.depfile), lib)
    for rel in written:
        print(f"wrote {rel}")
    if not written:
        print(f"{len(fileset.files)} files up to date")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn, help_ in [
        ("check", cmd_check, "parse and validate op files"),
        ("list", cmd_list, "print every op's canonical schema"),
        ("generate", cmd_generate, "generate code into generated/"),
    ]:
        p = sub.add_parser(name, help=help_)
        p.add_argument("paths", nargs="*", help="op files or directories (default: schemas/)")
        p.set_defaults(fn=fn)
        if name == "generate":
            p.add_argument("--root", default=".", help="repository root (outputs go to ROOT/generated)")
            p.add_argument("--check", action="store_true",
                           help="write nothing; exit 1 if any generated file is stale")
            p.add_argument("--depfile", metavar="PATH",
                           help="also write a make-style depfile of every input read (for ninja)")
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except UserError as e:
        print(e.diags.render(), file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `python -m codegen list | head`: the reader left; exit quietly, as other tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
