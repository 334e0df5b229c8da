"""Timing the codec benchmarks share (imported by the bench scripts, which run from this folder)."""

from __future__ import annotations

import gc
import time
from typing import Callable, Sequence


def best_rates(fns: Sequence[Callable[[], object]], n: int, repeat: int = 5) -> list[float]:
    """Records/s of each function over ``n`` records, best of ``repeat`` interleaved rounds
    (one round times each function once, so load from other processes hits all alike), with
    the cyclic GC off for every side (its pauses on millions of fresh objects otherwise
    dominate whichever side runs second)."""
    best = [float("inf")] * len(fns)
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeat):
            for i, fn in enumerate(fns):
                t0 = time.perf_counter()
                fn()
                best[i] = min(best[i], time.perf_counter() - t0)
    finally:
        gc.enable()
    return [n / t for t in best]


def cpu_per_record(fns: Sequence[Callable[[object], object]], items: Sequence, repeat: int = 5) -> list[float]:
    """Best CPU µs per item of each of ``fns`` applied to every item of ``items`` (rounds
    interleaved across the functions, cyclic GC off, as ``best_rates``)."""
    best = [float("inf")] * len(fns)
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeat):
            for i, fn in enumerate(fns):
                t0 = time.process_time()
                for item in items:
                    fn(item)
                best[i] = min(best[i], time.process_time() - t0)
    finally:
        gc.enable()
    return [t / len(items) * 1e6 for t in best]
