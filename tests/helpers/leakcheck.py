"""The leak check the compiled kernels' tests share."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Callable


def traced_growth(fn: Callable[[], object], rounds: int, warmup: int = 1) -> int:
    """Bytes of traced memory that ``rounds`` calls of ``fn`` leave behind.

    ``warmup`` untraced calls first fill what a kernel caches on purpose (plans,
    interned texts, free lists); one more traced call settles what tracing itself
    allocates. A missed DECREF on a result or an error path then shows as growth
    proportional to ``rounds``.
    """
    for _ in range(warmup):
        fn()
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(rounds):
            fn()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
