"""Work spread over processes: op files parsed and generators run on several cores at once.

CPython runs Python code on one core at a time, so the parallel parts of `check` and `generate` run
in forked child processes (Note [Forked workers]). A child starts with everything the parent built
(imports, grammars, the loaded library) and sends back only its result, pickled. `OPGEN_JOBS=N`
sets the number of processes (1: everything in the calling process); by default it is the number
of cores this process may use, at most 8, and only when there is enough work to pay for a fork.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import traceback
from typing import Callable, Sequence, TypeVar

ENV = "OPGEN_JOBS"
MAX_DEFAULT = 8

T = TypeVar("T")
R = TypeVar("R")


class JobsError(Exception):
    """OPGEN_JOBS set to something that is not a number of processes."""


def requested() -> int | None:
    """The number of processes OPGEN_JOBS asks for, if it is set."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise JobsError(f"{ENV}={value!r}: expected a positive number of processes "
                        f"(1 runs everything in one process)")
    return n


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:      # macOS, Windows
        return os.cpu_count() or 1


def can_fork() -> bool:
    """Whether forking is safe here. fork() copies only the calling thread, so in a process with
    other threads (torch's thread pools, a test runner's) a child could wait forever on a lock
    another thread held; and only Linux's fork is dependable for a Python process."""
    if sys.platform != "linux":
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def count(units: int, per_process: int) -> int:
    """How many processes to use for `units` pieces of work when a process pays for itself from
    `per_process` pieces on: OPGEN_JOBS (capped at `units`), else the free cores, at most
    MAX_DEFAULT. 1 where forking is unsafe."""
    asked = requested()
    n = min(asked, units) if asked is not None else min(cores(), MAX_DEFAULT,
                                                         units // max(per_process, 1))
    return n if n > 1 and can_fork() else 1


def split(fn: Callable[[T], R], parts: Sequence[T], *,
          before: Callable[[], bool] | None = None) -> list[R] | None:
    """[fn(p) for p in parts], `parts[1:]` each in a forked child while this process runs
    `fn(parts[0])`. `before()` runs here first, while the children work: where it returns False,
    they are stopped and the result is None. A child's exception is raised here; a child that
    dies without a result (killed, out of memory) has its part run here instead."""
    children = [_Child(fn, p) for p in parts[1:]]
    try:
        if before is not None and not before():
            return None
        results = [fn(parts[0])] if parts else []
        return results + [c.result() for c in children]
    finally:
        for c in children:      # left behind by an exception or by `before`: stopped
            c.abandon()


# Note [Forked workers]
# A child is a fork() of the calling process: it shares the parent's memory copy-on-write, so
# nothing is sent to it, and the work it does is exactly the work this process would do. It
# writes its pickled result to a pipe and leaves with os._exit, so that it runs no atexit handler
# and flushes no copy of the parent's buffered output. The parent reads the pipe only after its own
# part is done: the child has finished computing by then and only waits to hand its bytes over.
# The garbage collector stays as the parent set it (off during a command, codegen.cli).


class _Child:
    """One part in a forked child; `pid` is None where the fork failed (the part then runs in the
    parent) and once the child is reaped."""

    def __init__(self, fn: Callable[[T], R], part: T) -> None:
        self.fn, self.part = fn, part
        self.pid: int | None = None
        try:
            read, write = os.pipe()
        except OSError:         # no descriptor left: the part runs in the parent
            return
        try:
            self.pid = os.fork()
        except OSError:         # no process left: likewise
            os.close(read)
            os.close(write)
            return
        if self.pid == 0:
            os.close(read)
            _run_child(fn, part, write)
        os.close(write)
        self.read = read

    def result(self) -> R:
        if self.pid is None:
            return self.fn(self.part)
        with os.fdopen(self.read, "rb") as f:
            data = f.read()
        os.waitpid(self.pid, 0)
        self.pid = None
        if not data:            # killed before it could answer
            return self.fn(self.part)
        ok, value = pickle.loads(data)
        if ok:
            return value
        raise value

    def abandon(self) -> None:
        """Stop a child whose result will not be read."""
        if self.pid is None:
            return
        os.close(self.read)
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        self.pid = None


def _run_child(fn: Callable, part: object, fd: int) -> None:
    try:
        try:
            data = pickle.dumps((True, fn(part)), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as e:      # noqa: BLE001  (handed to the parent, which raises it)
            e.add_note("in a worker process (OPGEN_JOBS=1 runs it in one process):\n"
                       + "".join(traceback.format_exception(e)).rstrip())
            try:
                data = pickle.dumps((False, e), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:   # noqa: BLE001  (an exception pickle cannot take)
                data = pickle.dumps((False, RuntimeError(
                    "".join(traceback.format_exception(e)).rstrip())))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    finally:
        os._exit(0)
