"""Run totals, the live progress display and the final summary.

Tasks report counts per micro-batch (``TaskStats``); the driver folds them into
``Totals``. On a terminal one line is rewritten in place; otherwise (CI, files,
``--log-format json``) a log line is emitted every ``log_every`` seconds, so
logs stay readable and parseable.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, TextIO

from .task import TaskStats

log = logging.getLogger("cdcflow.engine.progress")


@dataclass
class Totals:
    started: float = field(default_factory=time.monotonic)
    read: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    written: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    filtered: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    nacked: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    dlq: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    lag: dict[tuple[str, str, str], int | None] = field(default_factory=dict)
    micro_batches: int = 0
    retries: int = 0  # batches retried after an outage
    last_rate: dict[tuple[str, str], float] = field(default_factory=dict)

    def add(self, stats: Iterable[TaskStats], seconds: float) -> None:
        self.micro_batches += 1
        batch_read: dict[tuple[str, str], int] = defaultdict(int)
        for s in stats:
            t = s.task
            batch_read[(t.pipeline, t.source)] += s.read
            self.read[(t.pipeline, t.source)] += s.read
            for dest, n in s.written.items():
                self.written[(t.pipeline, dest)] += n
            self.filtered[t.pipeline] += s.filtered
            for node, n in s.nacked.items():
                self.nacked[(t.pipeline, node)] += n
            self.dlq[t.pipeline] += s.dlq
            self.retries += s.retries
            self.lag[(t.pipeline, t.source, t.partition)] = 0 if s.ended else s.lag
        for key, n in batch_read.items():
            self.last_rate[key] = n / seconds if seconds > 0 else 0.0

    def source_lag(self, pipeline: str, source: str) -> int | None:
        values = [v for (p, s, _), v in self.lag.items() if p == pipeline and s == source]
        if not values or any(v is None for v in values):
            return None
        return sum(values)  # type: ignore[arg-type]

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def total_read(self) -> int:
        return sum(self.read.values())

    def total_written(self) -> int:
        return sum(self.written.values())


def _count(n: float) -> str:
    for unit, div in (("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.1f}{unit}"
    return f"{n:.0f}"


def status_line(totals: Totals) -> str:
    parts = []
    for (pipe, src), n in sorted(totals.read.items()):
        lag = totals.source_lag(pipe, src)
        rate = totals.last_rate.get((pipe, src), 0.0)
        lag_text = f" lag {_count(lag)}" if lag is not None else ""
        parts.append(f"{pipe}/{src} out {_count(n)} ({_count(rate)}/s){lag_text}")
    for (pipe, dest), n in sorted(totals.written.items()):
        parts.append(f"{pipe}/{dest} in {_count(n)}")
    nacked = sum(totals.nacked.values())
    tail = f" | nacked {nacked} dlq {sum(totals.dlq.values())}" if nacked else ""
    return f"[{totals.elapsed:6.1f}s] " + " | ".join(parts) + tail


class ProgressDisplay:
    """A refreshing line on a TTY, periodic log lines elsewhere."""

    def __init__(self, stream: TextIO | None = None, *, log_every: float = 10.0, enabled: bool = True):
        self.stream = stream or sys.stderr
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.enabled = enabled
        self.log_every = log_every
        self._last_log = time.monotonic()
        self._drawn = False

    def update(self, totals: Totals) -> None:
        if not self.enabled:
            return
        line = status_line(totals)
        if self.tty:
            width = 200
            self.stream.write("\r\x1b[K" + line[:width])
            self.stream.flush()
            self._drawn = True
        elif time.monotonic() - self._last_log >= self.log_every:
            self._last_log = time.monotonic()
            log.info("progress %s", line)

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False


def summary(totals: Totals, outputs: list[str], failures: list[str], startup_seconds: float) -> str:
    """The end-of-run text: totals, where the outputs are, and why it stopped if it failed."""
    elapsed = totals.elapsed
    read = totals.total_read()
    lines = [
        f"cdcflow run {'FAILED' if failures else 'finished'}: {elapsed:.1f}s running "
        f"+ {startup_seconds:.1f}s Spark start-up, {totals.micro_batches} micro-batches",
        f"  records read      {read:>12,}" + (f"   ({read / elapsed:,.0f}/s)" if elapsed > 0 and read else ""),
        f"  records written   {totals.total_written():>12,}",
        f"  records filtered  {sum(totals.filtered.values()):>12,}",
        f"  records nacked    {sum(totals.nacked.values()):>12,}   (to the DLQ: {sum(totals.dlq.values()):,})",
    ]
    if totals.retries:
        lines.append(f"  batches retried   {totals.retries:>12,}   (after an outage; see the log)")
    for (pipe, src), n in sorted(totals.read.items()):
        lines.append(f"  source      {pipe}/{src}: {n:,} read")
    for (pipe, dest), n in sorted(totals.written.items()):
        lines.append(f"  destination {pipe}/{dest}: {n:,} written")
    for (pipe, node), n in sorted(totals.nacked.items()):
        lines.append(f"  nacked at   {pipe}/{node}: {n:,}")
    if outputs:
        lines.append("  output:")
        lines.extend(f"    {o}" for o in outputs)
    for f in failures:
        lines.append(f"  error: {f}")
    return "\n".join(lines)
