"""Conduit's nack window and the records sent to the dead-letter queue.

Conduit's rules (docs "Dead-letter queue"): the last ``window-size`` outcomes
(ack or nack) are remembered; when a nack makes the number of nacks in that
window exceed ``window-nack-threshold`` the pipeline stops and that record is
*not* sent to the DLQ. ``window-size: 0`` watches nothing: every nack goes to the
DLQ. The defaults (size 1, threshold 0) therefore stop on the first nack.

cdcflow keeps one window per source partition (partitions run in parallel on
different executors; a shared window would need a coordinator on every record).
The window is saved with the partition's position, so it survives restarts.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable

from ..record import META_DLQ_NACK_ERROR, META_DLQ_NACK_NODE_ID, Record


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
