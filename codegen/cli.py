"""What both command lines (`python -m codegen`, `python -m codegen.build`; `opgen`) share: the
common options and the one place that turns every failure into a message and an exit status.

Exit status: 0 on success, 1 for errors in the user's input or environment (located diagnostics,
an output that cannot be written, a missing compiler), 2 on bad usage (argparse), 3 on an internal
error (a bug: one line, the traceback only with --debug), 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
import traceback
import warnings
from typing import Callable, NoReturn

from codegen import config
from codegen.jobs import JobsError
from codegen.diagnostics import Diagnostics, UserError
from codegen.files import WriteError

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


def exit_now(code: int) -> NoReturn:
    """Leave with `code` without freeing the heap object by object: a run's IR and rendered text
    are millions of objects, and freeing them at exit costs a 2,000-op `generate` about 0.2 s.
    opgen leaves nothing for exit to do (no atexit handler; temporary files are removed where
    they are made), so only the standard streams are flushed. For the command lines only: a
    caller of `main` gets its exit status back."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a reader that left, a closed stream
            pass
    os._exit(code)


def debug_option(parser: argparse.ArgumentParser, default) -> None:
    parser.add_argument("--debug", action="store_true", default=default,
                        help="show the traceback of an internal error")


def project_option(parser: argparse.ArgumentParser, default=None) -> None:
    parser.add_argument("--project", "--root", dest="project", metavar="DIR", default=default,
                        help="the project's directory (default: the nearest pyproject.toml with "
                        "[tool.opgen] upward from here; `--root` is the old name)")


def run_in_project(args: argparse.Namespace, body: Callable[[config.Project], int], *,
                   environment_errors: tuple[type[BaseException], ...] = ()) -> int:
    """`body(project)` inside the project `args.project` names (or the nearest one), with every
    failure turned into a message on stderr and an exit status. `environment_errors` are failures
    of the machine rather than of opgen (a build directory that cannot be written, a missing
    compiler): one line, exit 1. Op file paths in `args.paths`, given relative to the working
    directory, are made relative to the project root, where the body runs.

    The cyclic garbage collector is off meanwhile: a run builds a few million small acyclic
    objects (the IR, rendered text) and frees them all at exit, and each full collection rescans
    them all (a third of render time on 2,000 ops, bench/bench_scale.py)."""
    collecting = gc.isenabled()
    gc.disable()
    quiet = contextlib.ExitStack()
    quiet.enter_context(warnings.catch_warnings())
    # torch says this on import where NumPy is not installed; opgen never uses NumPy.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
    try:
        project = config.resolve(args.project, Diagnostics())
        if getattr(args, "paths", None):
            args.paths = [project.relative(p) for p in args.paths]
        else:
            missing = config.no_project(project, args.project)
            if missing is not None:
                print(missing, file=sys.stderr)
                return 1
        with config.use(project):
            return body(project)
    except UserError as e:
        print(e.diags.render(), file=sys.stderr)
        return 1
    except (WriteError, JobsError, *environment_errors) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `opgen list | head`: the reader left; exit quietly, as other tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001  (the one place that catches everything)
        return internal_error(e, args.debug)
    finally:
        quiet.close()
        if collecting:
            gc.enable()
