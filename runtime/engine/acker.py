"""The acker: a partition's position, its checkpoint, and the source's ordered acks.

The contract: a batch's position is saved only after every destination (and the DLQ) took
the batch, and acknowledged to the source only after it was saved; positions are
acknowledged in production order, and saves of one partition never overlap. The
partition's ``PartitionState`` (position and nack window) lives here and is advanced only
by ``settle``: it is the one record of where the partition is.

A checkpoint is a durable file replace (two fsyncs: several milliseconds) that would leave
the core idle once per batch. So ``settle`` starts the save of batch N on a helper thread
and returns; the task reads and processes batch N+1 meanwhile and calls ``wait`` before
writing it, which ends N's save and acknowledges N. A crash thus leaves at most one
written but unsaved batch per partition (sent again on restart: at-least-once).
"""

from __future__ import annotations

import threading
from typing import Any

from .faults import STATE, in_node
from .plan import PartitionTask, RunContext
from .source import SourceNode
from .state import PartitionState

_pool_lock = threading.Lock()
_pool: Any = None


def _executor():
    global _pool
    with _pool_lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor

            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cdcflow-checkpoint")
        return _pool


def state_node(task: PartitionTask) -> str:
    """How a failure of the state store names the partition."""
    return f"(positions of source {task.source}{f'[{task.partition}]' if task.partition else ''})"


class Acker:
    __slots__ = ("_ctx", "_task", "_source", "state", "_future", "_pending", "saved")

    def __init__(self, ctx: RunContext, task: PartitionTask, source: SourceNode, state: PartitionState):
        self._ctx, self._task, self._source, self.state = ctx, task, source, state
        self._future: Any = None
        self._pending: list[bytes] = []  # the positions whose save is under way
        self.saved = 0  # checkpoints saved (and acknowledged)

    def settle(self, positions: list[bytes], window: list[int]) -> None:
        """Every destination took these positions (in order): move the partition past them and start
        saving; ``wait`` acknowledges them."""
        self.wait()
        state = self.state
        state.position, state.window = positions[-1], window
        snapshot = PartitionState(state.position, list(state.window), state.ended)
        t = self._task
        self._future = _executor().submit(self._ctx.state.save, t.pipeline, t.source, t.partition, snapshot)
        self._pending = positions

    def wait(self) -> None:
        """End the save under way (its error raises here), then acknowledge its positions."""
        future, positions = self._future, self._pending
        if future is None:
            return
        self._future, self._pending = None, []
        with in_node(self._task.pipeline, STATE, state_node(self._task)):
            future.result()
        self._source.ack(positions)
        self.saved += 1

    def end(self) -> None:
        """The bounded source ended: save that, after what was settled before."""
        self.wait()
        if not self.state.ended:
            self.state.ended = True
            t = self._task
            with in_node(t.pipeline, STATE, state_node(t)):
                self._ctx.state.save(t.pipeline, t.source, t.partition, self.state)
            self.saved += 1
