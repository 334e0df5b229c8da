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


def run_tree(cmd: Sequence[str], env: dict[str, str] | None = None, every: float = 0.2
             ) -> tuple[int, str, str, float, float]:
    """Run ``cmd``; (return code, stdout, stderr, wall seconds, CPU seconds of its whole process
    tree). Why sampled: Spark's JVM and its Python workers are not waited for by the process that
    started them, so ``getrusage(RUSAGE_CHILDREN)`` and ``/usr/bin/time`` miss their CPU; here
    every descendant's user+system time is read from /proc every ``every`` seconds, keeping each
    one's last reading (a process living less than ``every`` may be missed)."""
    import os
    import subprocess
    import tempfile
    import threading

    tick = os.sysconf("SC_CLK_TCK")
    seen: dict[tuple[int, str], float] = {}  # (pid, start time) -> last CPU seconds

    def sample(root: int) -> None:
        parents: dict[int, int] = {}
        stats: dict[int, list[str]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pid = int(entry)
            parents[pid] = int(fields[1])
            stats[pid] = fields
        tree, grew = {root}, True
        while grew:
            grew = False
            for pid, ppid in parents.items():
                if ppid in tree and pid not in tree:
                    tree.add(pid)
                    grew = True
        for pid in tree:
            fields = stats.get(pid)
            if fields is not None:  # utime, stime: fields 14 and 15 of stat (11 and 12 after the name)
                seen[(pid, fields[19])] = (int(fields[11]) + int(fields[12])) / tick

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), env=env, stdout=out, stderr=err, text=True)
        done = threading.Event()

        def watch() -> None:
            while not done.wait(every):
                sample(proc.pid)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        rc = proc.wait()
        wall = time.perf_counter() - t0
        done.set()
        watcher.join()
        out.seek(0)
        err.seek(0)
        return rc, out.read(), err.read(), wall, sum(seen.values())


def alternate(compare_env: str | None, repeat: int, run: Callable[[dict[str, str]], tuple[float, float]]) -> None:
    """Call ``run(extra_env) -> (wall s, CPU s)`` ``repeat`` times, alternating without and with
    ``compare_env`` (``VAR=VALUE``, or None: without only); print each run, the best of each side
    and the load (interleaved, so load from other processes hits both sides alike)."""
    import os

    variants: list[tuple[str, dict[str, str]]] = [("default", {})]
    if compare_env:
        var, _, value = compare_env.partition("=")
        variants.append((compare_env, {var: value}))
    runs: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in variants}
    for i in range(repeat):
        for label, extra in variants:
            wall, cpu = run(extra)
            runs[label].append((wall, cpu))
            print(f"run {i + 1} {label:<40} wall {wall:6.1f}s cpu {cpu:6.1f}s", flush=True)
    for label, got in runs.items():
        print(f"best of {repeat}: {label:<40} wall {min(w for w, _ in got):6.1f}s cpu {min(c for _, c in got):6.1f}s")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
