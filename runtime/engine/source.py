"""The source node: a source plugin opened on one partition, and the processors on it.

``read`` returns a batch stamped with Conduit's ``conduit.source.*`` metadata; ``ack``
passes on positions the acker settled; ``lag`` says what waits behind the position.

Plugins are expensive to start (a standalone plugin is a subprocess), so a Python worker
keeps the sources it opened in a process-level cache keyed by pipeline and partition and
reuses one across tasks only if it stopped exactly at the partition's saved position and
its configuration is unchanged; otherwise (the partition ran in another process meanwhile)
it is closed and reopened there.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Sequence

from ..pipeline.model import PipelineConfig
from ..record import (
    META_SOURCE_CONNECTOR_ID,
    META_SOURCE_PLUGIN_NAME,
    META_SOURCE_PLUGIN_VERSION,
    Record,
)
from . import processors
from .fastpath import ReadWaitSource
from .faults import SOURCE, in_node, quiet_teardown
from .middleware import SourceMiddleware, connector_settings
from .plan import PartitionTask, RunContext
from .state import PartitionState

log = logging.getLogger("cdcflow.engine.source")


@dataclass
class SourceNode:
    pipeline: str
    task: PartitionTask
    plugin: Any
    chain: Any  # the source's own processors (None when there are none)
    name: str
    version: str
    fingerprint: str  # the source's configuration: a changed pipeline file reopens it
    #: the partition's state, which the acker advances: where this open plugin continues
    state: PartitionState
    middleware: SourceMiddleware = SourceMiddleware()  # Conduit's sdk.* settings

    def read(self, max_records: int) -> Sequence[Record] | None:
        """A batch (None: the bounded source ended), each record stamped with where it came from."""
        with in_node(self.pipeline, SOURCE, self.task.source):
            batch = self.plugin.read(self.middleware.read_size(max_records))
            if batch:
                self.middleware.apply(batch)  # Conduit's schema extraction (a store outage fails the batch)
        if batch:
            stamp = {META_SOURCE_CONNECTOR_ID: self.task.source, META_SOURCE_PLUGIN_NAME: self.name,
                     META_SOURCE_PLUGIN_VERSION: self.version}
            for r in batch:
                r.metadata.update(stamp)
        return batch

    def ack(self, positions: list[bytes]) -> None:
        with in_node(self.pipeline, SOURCE, self.task.source):
            self.plugin.ack(positions)

    def set_read_wait(self, seconds: float | None) -> None:
        """How long ``read`` may wait for records (None: the plugin's own setting), where the plugin
        can tell (``ReadWaitSource``): a task serving several partitions reads without waiting."""
        if isinstance(self.plugin, ReadWaitSource):
            self.plugin.read_wait = seconds

    def lag(self) -> int | None:
        """What waits behind the position, or None (a failing ``lag`` only informs: it says nothing)."""
        try:
            return self.plugin.lag()
        except Exception:  # noqa: BLE001 - lag is informative; the idle timeout still applies
            return None

    def teardown(self) -> None:
        try:
            self.plugin.stop()
        except Exception:  # noqa: BLE001 - closing after a failure must not hide it
            log.debug("source stop failed", exc_info=True)
        quiet_teardown(self.chain)
        quiet_teardown(self.plugin)


_lock = threading.Lock()
_cache: dict[tuple, SourceNode] = {}


def _key(ctx: RunContext, task: PartitionTask) -> tuple:
    return (str(ctx.state.root), task.pipeline, task.source, task.partition)


def open_source(ctx: RunContext, pipe: PipelineConfig, task: PartitionTask, state: PartitionState,
                registry: Any) -> tuple[SourceNode, bool]:
    """The partition's source node at ``state``'s position, and whether it was (re)opened now."""
    cfg = next(c for c in pipe.sources if c.id == task.source)
    key = _key(ctx, task)
    fingerprint = repr(cfg)
    with _lock:
        cached = _cache.get(key)
    if cached is not None:
        if cached.state.position == state.position and cached.fingerprint == fingerprint:
            cached.state = state
            return cached, False
        evict(key)
    info = registry.connector(cfg.plugin)
    plugin = info.new_source()
    plugin.id = cfg.id
    chain = None
    try:
        with in_node(pipe.id, SOURCE, cfg.id):
            plugin.configure(connector_settings(ctx.settings_of(pipe.id, SOURCE, cfg.id), info))
            plugin.open(state.position, task.partition)
        chain = processors.build(pipe.id, cfg.processors, registry, ctx.processor_settings(pipe.id))
    except BaseException:
        quiet_teardown(chain)
        quiet_teardown(plugin)
        raise
    node = SourceNode(pipe.id, task, plugin, chain, info.name, info.version, fingerprint, state,
                      SourceMiddleware.of(ctx.settings_of(pipe.id, SOURCE, cfg.id), info, cfg.id))
    with _lock:
        _cache[key] = node
    return node, True


def evict(key: tuple) -> None:
    with _lock:
        node = _cache.pop(key, None)
    if node is not None:
        node.teardown()


def evict_pipeline(ctx: RunContext, pipeline_id: str) -> None:
    root = str(ctx.state.root)
    with _lock:
        keys = [k for k in _cache if k[0] == root and k[1] == pipeline_id]
    for k in keys:
        evict(k)


def evict_all() -> int:
    with _lock:
        keys = list(_cache)
    for k in keys:
        evict(k)
    return len(keys)
