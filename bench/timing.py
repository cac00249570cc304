"""Timing shared by the benchmarks: interleaved rounds, best of each, in microseconds."""

from __future__ import annotations

import timeit
from typing import Callable


def best_us(fns: dict[str, Callable[[], object]], number: int, rounds: int) -> dict[str, float]:
    """Best per-call time of each function. Each round times every function once, so a busy
    machine slows all of them alike; the ratios are what the benchmarks report."""
    best = {k: float("inf") for k in fns}
    for f in fns.values():
        f()
    for _ in range(rounds):
        for k, f in fns.items():
            best[k] = min(best[k], timeit.timeit(f, number=number) / number * 1e6)
    return best
