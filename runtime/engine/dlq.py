"""The DLQ node: Conduit's nack window, and the records it sends to the dead-letter queue.

Conduit's rules (docs "Dead-letter queue"): the last ``window-size`` outcomes
(ack or nack) are remembered; when a nack makes the number of nacks in that
window exceed ``window-nack-threshold`` the pipeline stops and that record is
*not* sent to the DLQ. ``window-size: 0`` watches nothing: every nack goes to the
DLQ. The defaults (size 1, threshold 0) therefore stop on the first nack.

cdcflow keeps one window per source partition (partitions run in parallel on
different executors; a shared window would need a coordinator on every record).
The window is saved with the partition's position, so it survives restarts.

Per batch the window is applied to the processors' nacks before anything is written
(``verdict``), so a stop writes nothing from the stopping record on, and again when a
destination returns nacks; ``send`` writes the nacked records before the stop to the DLQ.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable

from ..errors import CdcflowError
from ..pipeline.model import PipelineConfig
from ..record import META_DLQ_NACK_ERROR, META_DLQ_NACK_NODE_ID, Record
from .faults import DLQ, PROCESSOR, NodeError, as_infrastructure, describe, node_error


class NackWindow:
    """Sliding window of outcomes (1 = nack, 0 = ack), oldest first."""

    __slots__ = ("size", "threshold", "_bits", "_nacks")

    def __init__(self, size: int, threshold: int, initial: Iterable[int] = ()):
        self.size = max(0, int(size))
        self.threshold = max(0, int(threshold))
        self._bits: deque[int] = deque(maxlen=self.size or None)
        self._nacks = 0
        if self.size:
            for bit in list(initial)[-self.size:]:
                self._push(1 if bit else 0)

    def _push(self, bit: int) -> None:
        if len(self._bits) == self.size:
            self._nacks -= self._bits[0]
        self._bits.append(bit)
        self._nacks += bit

    def ack(self, count: int = 1) -> None:
        if not self.size or count <= 0:
            return
        if count >= self.size:  # the whole window is acks now: O(size), not O(count)
            self._bits = deque([0] * self.size, maxlen=self.size)
            self._nacks = 0
            return
        for _ in range(count):
            self._push(0)

    def nack(self) -> bool:
        """Record a nack. True: the record may go to the DLQ; False: the threshold is exceeded."""
        if not self.size:
            return True
        self._push(1)
        return self._nacks <= self.threshold

    @property
    def nacks(self) -> int:
        return self._nacks

    def snapshot(self) -> list[int]:
        return list(self._bits)


def dlq_record(record: Record, node_id: str, error: str) -> Record:
    """A copy of ``record`` carrying why and where it was rejected (Conduit's metadata keys)."""
    out = record.copy()
    out.metadata[META_DLQ_NACK_ERROR] = error
    out.metadata[META_DLQ_NACK_NODE_ID] = node_id
    return out


class Nacks:
    """A batch's rejections: the first per source position (a record is nacked once, like Conduit)."""

    __slots__ = ("by_position", "counts")

    def __init__(self) -> None:
        self.by_position: dict[bytes, tuple[Record, str, str]] = {}
        self.counts: dict[str, int] = {}

    def add(self, record: Record, node: str, error: str) -> None:
        if record.position not in self.by_position:
            self.by_position[record.position] = (record, node, error)
            self.counts[node] = self.counts.get(node, 0) + 1


@dataclass(slots=True)
class Verdict:
    """What the nack window makes of a batch's nacks so far."""

    stop_at: int | None  # index (in the batch) of the record the pipeline stops at
    reason: str
    window_after: list[int]  # the window to save with the last acknowledged position
    dlq: list[tuple[int, Record]]  # nacked records before the stop, as DLQ records
    before_nack: dict[int, list[int]]  # the window as it was before each nack


def verdict(pipe: PipelineConfig, task: object, positions: list[bytes], nacks: Nacks,
            window0: list[int]) -> Verdict:
    """Apply the nack window to the batch's nacks, in source order (pure: it is asked again when a
    destination returns nacks)."""
    dlq_cfg = pipe.dead_letter_queue
    if not nacks.by_position:
        if not any(window0):
            return Verdict(None, "", window0, [], {})
        clean = NackWindow(dlq_cfg.window_size, dlq_cfg.window_nack_threshold, window0)
        clean.ack(len(positions))  # acks slide earlier nacks out of the window (cheap: O(window-size))
        return Verdict(None, "", clean.snapshot(), [], {})
    unmatched = nacks.by_position.keys() - set(positions)
    if unmatched:
        _, node, error = nacks.by_position[next(iter(unmatched))]
        raise NodeError(pipe.id, PROCESSOR, node, CdcflowError(
            "rejected a record whose position is not one the source produced in this batch "
            f"(a processor changed .Position?); cannot route it to the DLQ safely: {error}"))
    window = NackWindow(dlq_cfg.window_size, dlq_cfg.window_nack_threshold, window0)
    before_nack: dict[int, list[int]] = {}
    dlq_items: list[tuple[int, Record]] = []
    run = 0
    for i, pos in enumerate(positions):
        hit = nacks.by_position.get(pos)
        if hit is None:
            run += 1
            continue
        window.ack(run)
        run = 0
        before_nack[i] = window.snapshot()
        record, node, error = hit
        if not window.nack():
            reason = (
                f"pipeline {pipe.id} stopped: {window.nacks} nacks in the last {window.size} records exceed "
                f"window-nack-threshold {window.threshold} (source {task}, node {node}: {error})"
            )
            return Verdict(i, reason, before_nack[i], dlq_items, before_nack)
        dlq_items.append((i, dlq_record(record, node, error)))
    window.ack(run)
    return Verdict(None, "", window.snapshot(), dlq_items, before_nack)


def send(pipe: PipelineConfig, task: object, verdict: Verdict, dlq: Any) -> Verdict:
    """Write the verdict's DLQ records to ``dlq`` (a destination plugin); returns the verdict as it
    stands after that: a DLQ outage fails the batch (retried), any other DLQ failure stops the
    pipeline at the first record the DLQ did not take."""
    if not verdict.dlq:
        return verdict
    failed_at: int | None = None
    why = ""
    dlq_cfg = pipe.dead_letter_queue
    try:
        results = dlq.write([r for _, r in verdict.dlq])
    except Exception as e:  # noqa: BLE001 - a DLQ failure stops the pipeline, with its reason
        if as_infrastructure(e) is not None:
            raise node_error(pipe.id, DLQ, dlq_cfg.plugin, e) from e
        failed_at, why = verdict.dlq[0][0], describe(e)
    else:
        for (i, _), err in zip(verdict.dlq, results or ()):
            if err is not None:
                failed_at, why = i, str(err)
                break
    if failed_at is None:
        return verdict
    stop_at = failed_at if verdict.stop_at is None else min(verdict.stop_at, failed_at)
    reason = (f"pipeline {pipe.id} stopped: writing to the dead-letter queue failed "
              f"({DLQ} {dlq_cfg.plugin}, source {task}): {why}")
    return Verdict(stop_at, reason, verdict.before_nack[stop_at], verdict.dlq, verdict.before_nack)
