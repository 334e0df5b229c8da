"""One source partition's share of a micro-batch, run inside a Spark task.

Per batch: read → source processors → pipeline processors → for each destination
its processors then a synchronous, durable ``write`` → rejected records to the
DLQ (Conduit's nack window decides whether the pipeline stops instead) → save the
partition's position and window atomically → ``ack`` the source. The save runs on a
helper thread while the next batch is read and processed, and ends before that batch
is written (``_Checkpoints``); the ack follows the save. Only records before a stop are acknowledged; records written past
it are duplicates on the next run, never losses.

Plugins are expensive to start (a standalone plugin is a subprocess), so every
Python worker process keeps what it opened in a process-level cache keyed by the
plugin's configuration and reuses it across tasks and micro-batches. A cached
source is reused only if it stopped exactly at the partition's saved position;
otherwise (the partition ran in another process meanwhile) it is reopened there.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..batch import RecordBatch, positions_of
from ..errors import CdcflowError
from ..heap import keep_freed_memory
from ..pipeline.model import ConnectorConfig, PipelineConfig
from ..record import (
    META_SOURCE_CONNECTOR_ID,
    META_SOURCE_PLUGIN_NAME,
    META_SOURCE_PLUGIN_VERSION,
    Record,
)
from .dlq import NackWindow, dlq_record
from .faults import DESTINATION, DLQ, PROCESSOR, SOURCE, STATE, NodeError, RetryPolicy, as_infrastructure, describe, node_error
from .plan import PartitionTask, RunContext
from .state import PartitionState

log = logging.getLogger("cdcflow.engine.task")


def _process_started_at(pid: int | str = "self") -> float | None:
    """When a process was started (wall clock), from ``/proc``; None elsewhere.

    A Spark Python worker is forked by PySpark's daemon (its parent), so these two are
    where a task's timeline starts: the daemon's start, then the worker's fork; what lies
    between the fork and the task's first step is the worker's own start-up (PySpark's
    worker module, unpickling, imports)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # the command name may hold spaces
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
        ticks_since_boot = int(fields[19])  # field 22, "starttime"; fields[0] is field 3
        return time.time() - (uptime - ticks_since_boot / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


_process_marks: tuple[int, list[tuple[str, float]]] = (0, [])


def _start_marks() -> list[tuple[str, float]]:
    """This process's "daemon" and "worker" start marks, read once per process (the module may
    have been imported before a fork: PySpark's daemon preloads it, ``daemon.py``)."""
    global _process_marks
    pid = os.getpid()
    if _process_marks[0] != pid:
        marks = [(step, at) for step, at in (("daemon", _process_started_at(os.getppid())),
                                             ("worker", _process_started_at())) if at is not None]
        _process_marks = (pid, marks)
    return _process_marks[1]


class PipelineStopped(CdcflowError):
    """The pipeline stopped on purpose: nack threshold exceeded or the DLQ write failed."""


@dataclass
class TaskStats:
    """What a task reports back to the driver: counts only, never records."""

    task: PartitionTask
    read: int = 0
    filtered: int = 0
    written: dict[str, int] = field(default_factory=dict)
    nacked: dict[str, int] = field(default_factory=dict)  # node id → nacks
    dlq: int = 0
    ended: bool = False
    idle: bool = False
    lag: int | None = None
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # CPU time of the worker process during the task (all its threads)
    opened: bool = False  # the source was (re)opened: first task of this worker, or the partition moved
    saved: int = 0  # checkpoints saved (a batch written, its position saved and acknowledged)
    retries: int = 0  # batches retried after an outage
    stopped: str | None = None  # DLQ stop: the message
    error: str | None = None  # anything else that failed the partition
    pid: int = 0  # the Python worker that ran the task
    # where the task's wall time went: (step, time.time()) in order, from the start of the
    # worker's parent ("daemon") and the worker's fork ("worker") through "task", "registry",
    # "pipeline", "source", "first-batch", "work" to "end"
    timeline: list[tuple[str, float]] = field(default_factory=list)
    # CPU of the worker process since its fork when the source was open: on a worker's
    # first task, everything it spent starting up (imports, registry, opening plugins)
    process_cpu_at_source: float = 0.0


# -- process-level plugin cache ------------------------------------------------
_lock = threading.Lock()
_registry_cache: dict[tuple, Any] = {}
_pipeline_cache: dict[tuple, "_PipelineParts"] = {}
_source_cache: dict[tuple, "_OpenSource"] = {}


@dataclass
class _Destination:
    config: ConnectorConfig
    plugin: Any
    chain: Any  # connector-level processors (None when there are none)


@dataclass
class _PipelineParts:
    chain: Any
    destinations: list[_Destination]
    dlq: Any

    def teardown(self) -> None:
        for part in [self.chain, self.dlq, *(d.chain for d in self.destinations), *(d.plugin for d in self.destinations)]:
            _quiet_teardown(part)


@dataclass
class _OpenSource:
    plugin: Any
    chain: Any
    position: bytes | None  # where the next read continues: the last acknowledged position
    name: str
    version: str
    fingerprint: str  # the source's configuration: a changed pipeline file reopens it

    def teardown(self) -> None:
        try:
            self.plugin.stop()
        except Exception:  # noqa: BLE001 - closing after a failure must not hide it
            log.debug("source stop failed", exc_info=True)
        _quiet_teardown(self.chain)
        _quiet_teardown(self.plugin)


def _quiet_teardown(part: Any) -> None:
    if part is None:
        return
    try:
        part.teardown()
    except Exception:  # noqa: BLE001
        log.debug("teardown of %r failed", part, exc_info=True)


def _prepare_process(ctx: RunContext) -> None:
    """Point this process's schema store at the run's shared SQLite file; mask secrets in its logs."""
    from ..params import install_redactor
    from ..schemas import STORE_ENV, set_default_store

    install_redactor()
    if os.environ.get(STORE_ENV) != ctx.schema_store:
        os.environ[STORE_ENV] = ctx.schema_store
        set_default_store(None)  # a reused worker may hold another run's store


def _registry(ctx: RunContext):
    import sys

    from ..registry import load_registry

    key = (ctx.plugins_dir, tuple(sys.path))  # shipped plugin zips extend sys.path
    with _lock:
        reg = _registry_cache.get(key)
        if reg is None:
            reg = _registry_cache[key] = load_registry(ctx.plugins_dir)
            _freeze_heap()
        return reg


def _freeze_heap() -> None:
    """Move what the worker has loaded so far (modules, plugins, generated codecs' parents) out of
    the collector's reach: batches keep ~10k records alive, and each full collection would walk
    that long-lived heap again.
    Freed memory stays in the worker for the next batch (``cdcflow.heap``)."""
    gc.collect()
    gc.freeze()
    keep_freed_memory()


def _build_chain(processors, registry):
    if not processors:
        return None
    from ..pipeline.chain import build_chain

    return build_chain(processors, registry)


def _open_destination(cfg: ConnectorConfig, plugin_ref: str, registry, settings_side: str = "destination"):
    info = registry.connector(plugin_ref)
    settings = info.validate(settings_side, cfg.settings, plugin_id=cfg.id)
    dest = info.new_destination()
    dest.id = cfg.id
    dest.configure(settings)
    dest.open()
    return dest


def _pipeline_parts(ctx: RunContext, pipe: PipelineConfig, registry) -> _PipelineParts:
    key = (str(ctx.state.root), pipe.id, repr((pipe.processors, pipe.destinations, pipe.dead_letter_queue)))
    with _lock:
        parts = _pipeline_cache.get(key)
    if parts is not None:
        return parts
    built: list[Any] = []
    try:
        with _In(pipe.id, PROCESSOR, "/".join(p.id for p in pipe.processors)):
            chain = _build_chain(pipe.processors, registry)
        built.append(chain)
        dests = []
        for cfg in pipe.destinations:
            with _In(pipe.id, DESTINATION, cfg.id):
                plugin = _open_destination(cfg, cfg.plugin, registry)
            built.append(plugin)
            with _In(pipe.id, PROCESSOR, "/".join(p.id for p in cfg.processors)):
                dchain = _build_chain(cfg.processors, registry)
            built.append(dchain)
            dests.append(_Destination(cfg, plugin, dchain))
        dlq_cfg = pipe.dead_letter_queue
        with _In(pipe.id, DLQ, dlq_cfg.plugin):
            dlq = _open_destination(
                ConnectorConfig(id=f"{pipe.id}-dlq", type="destination", plugin=dlq_cfg.plugin,
                                settings=dlq_cfg.settings),
                dlq_cfg.plugin,
                registry,
            )
    except BaseException:
        for part in built:
            _quiet_teardown(part)
        raise
    parts = _PipelineParts(chain, dests, dlq)
    with _lock:
        _pipeline_cache[key] = parts
    return parts


def _open_source(
    ctx: RunContext, pipe: PipelineConfig, task: PartitionTask, state: PartitionState, registry, stats: TaskStats
) -> _OpenSource:
    cfg = next(c for c in pipe.sources if c.id == task.source)
    key = (str(ctx.state.root), pipe.id, task.source, task.partition)
    fingerprint = repr(cfg)
    with _lock:
        cached = _source_cache.get(key)
    if cached is not None:
        if cached.position == state.position and cached.fingerprint == fingerprint:
            return cached
        _evict_source(key)
    stats.opened = True
    info = registry.connector(cfg.plugin)
    settings = info.validate("source", cfg.settings, plugin_id=cfg.id)
    plugin = info.new_source()
    plugin.id = cfg.id
    # with no processors anywhere, nothing before the destinations needs Record objects
    plugin.lazy_batches = not (cfg.processors or pipe.processors or any(d.processors for d in pipe.destinations))
    chain = None
    try:
        with _In(pipe.id, SOURCE, cfg.id):
            plugin.configure(settings)
            plugin.open(state.position, task.partition)
        with _In(pipe.id, PROCESSOR, "/".join(p.id for p in cfg.processors)):
            chain = _build_chain(cfg.processors, registry)
    except BaseException:
        _quiet_teardown(chain)
        _quiet_teardown(plugin)
        raise
    opened = _OpenSource(plugin, chain, state.position, info.name, info.version, fingerprint)
    with _lock:
        _source_cache[key] = opened
    return opened


def _evict_source(key: tuple) -> None:
    with _lock:
        src = _source_cache.pop(key, None)
    if src is not None:
        src.teardown()


def _evict_pipeline(ctx: RunContext, pipeline_id: str) -> None:
    root = str(ctx.state.root)
    with _lock:
        srcs = [k for k in _source_cache if k[0] == root and k[1] == pipeline_id]
        parts = [k for k in _pipeline_cache if k[0] == root and k[1] == pipeline_id]
        popped_parts = [_pipeline_cache.pop(k) for k in parts]
    for k in srcs:
        _evict_source(k)
    for p in popped_parts:
        p.teardown()


def teardown_all() -> int:
    """Close every cached plugin in this process (end of run, best effort)."""
    with _lock:
        srcs = list(_source_cache)
        parts = list(_pipeline_cache.values())
        _pipeline_cache.clear()
    for k in srcs:
        _evict_source(k)
    for p in parts:
        p.teardown()
    return len(srcs) + len(parts)


# -- the batch cycle ------------------------------------------------------------
class _Nacks:
    """First rejection per source position (a record is nacked once, like Conduit)."""

    __slots__ = ("by_position", "counts")

    def __init__(self) -> None:
        self.by_position: dict[bytes, tuple[Record, str, str]] = {}
        self.counts: dict[str, int] = {}

    def add(self, record: Record, node: str, error: str) -> None:
        if record.position not in self.by_position:
            self.by_position[record.position] = (record, node, error)
            self.counts[node] = self.counts.get(node, 0) + 1


class _In:
    """``with _In(pipeline, role, node):`` — a failure inside leaves as a ``NodeError`` naming the node."""

    __slots__ = ("pipeline", "role", "node")

    def __init__(self, pipeline: str, role: str, node: str):
        self.pipeline, self.role, self.node = pipeline, role, node

    def __enter__(self) -> None:
        return None

    def __exit__(self, typ, e, tb) -> None:
        if e is not None and isinstance(e, Exception) and not isinstance(e, (NodeError, PipelineStopped)):
            raise node_error(self.pipeline, self.role, self.node, e) from e


def _run_chain(chain, records: list[Record], nacks: _Nacks, pipeline: str) -> tuple[list[Record], int]:
    """Apply a chain; returns the surviving records and how many were filtered. A processor's
    outage (``InfrastructureError``) fails the batch instead of nacking records."""
    if chain is None or not records:
        return records, 0
    with _In(pipeline, PROCESSOR, "/".join(chain.node_ids)):
        result = chain.process(records)
    for n in result.nacks:
        nacks.add(n.record, n.node_id, str(n.error))
    filtered = max(0, len(records) - len(result.records) - len(result.nacks))
    return result.records, filtered


@dataclass(slots=True)
class _Verdict:
    """What the nack window makes of a batch's nacks so far."""

    stop_at: int | None  # index (in the batch) of the record the pipeline stops at
    reason: str
    window_after: list[int]  # the window to save with the last acknowledged position
    dlq: list[tuple[int, Record]]  # nacked records before the stop, as DLQ records
    before_nack: dict[int, list[int]]  # the window as it was before each nack


def _verdict(pipe: PipelineConfig, task: PartitionTask, positions: list[bytes], nacks: _Nacks,
             window0: list[int]) -> _Verdict:
    """Apply the nack window to the batch's nacks, in source order (pure: it is asked again when a
    destination returns nacks)."""
    dlq_cfg = pipe.dead_letter_queue
    if not nacks.by_position:
        if not any(window0):
            return _Verdict(None, "", window0, [], {})
        clean = NackWindow(dlq_cfg.window_size, dlq_cfg.window_nack_threshold, window0)
        clean.ack(len(positions))  # acks slide earlier nacks out of the window (cheap: O(window-size))
        return _Verdict(None, "", clean.snapshot(), [], {})
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
            return _Verdict(i, reason, before_nack[i], dlq_items, before_nack)
        dlq_items.append((i, dlq_record(record, node, error)))
    window.ack(run)
    return _Verdict(None, "", window.snapshot(), dlq_items, before_nack)


def _before_stop(records: Sequence[Record], positions: list[bytes], stop_at: int) -> list[Record]:
    """The records that come before the stopping one in source order (a destination's batch
    after its processors: some records may be gone, a split may repeat a position)."""
    later = set(positions[stop_at:])
    out: list[Record] = []
    for r in records:
        if r.position in later:
            break
        out.append(r)
    return out


def _process_batch(
    batch: Sequence[Record],
    source: _OpenSource,
    parts: _PipelineParts,
    stats: TaskStats,
    checkpoints: "_Checkpoints",
    pipe: PipelineConfig,
    state: PartitionState,
) -> tuple[list[bytes], _Verdict, _Nacks]:
    """Stamp, run every processor, then write each destination. The nack window is applied to the
    processors' nacks *before* any write, so a stop writes nothing from the stopping record on;
    a destination's own nacks are known only after its write: the destinations after it then get
    only the records before the stop."""
    nacks = _Nacks()
    task = stats.task
    src_id, name, version = task.source, source.name, source.version
    if isinstance(batch, RecordBatch):
        batch.add_metadata({META_SOURCE_CONNECTOR_ID: src_id, META_SOURCE_PLUGIN_NAME: name,
                            META_SOURCE_PLUGIN_VERSION: version})
    else:
        for r in batch:
            md = r.metadata
            md[META_SOURCE_CONNECTOR_ID] = src_id
            md[META_SOURCE_PLUGIN_NAME] = name
            md[META_SOURCE_PLUGIN_VERSION] = version
    records, f1 = _run_chain(source.chain, batch, nacks, pipe.id)
    records, f2 = _run_chain(parts.chain, records, nacks, pipe.id)
    stats.filtered += f1 + f2
    fan_out = len(parts.destinations) > 1
    outputs = []
    for dest in parts.destinations:
        drecs = records
        if dest.chain is not None:
            if fan_out:
                drecs = [r.copy() for r in drecs]  # its processors must not change what the others get
            drecs, f = _run_chain(dest.chain, drecs, nacks, pipe.id)
            stats.filtered += f
        outputs.append((dest, drecs))
    positions = positions_of(batch)
    verdict = _verdict(pipe, task, positions, nacks, state.window)
    for dest, drecs in outputs:
        if verdict.stop_at is not None:
            drecs = _before_stop(drecs, positions, verdict.stop_at)
        if not drecs:
            continue
        checkpoints.flush()  # the previous batch is saved before this one is written: one unsaved batch at most
        dest_id = dest.config.id
        with _In(pipe.id, DESTINATION, dest_id):
            errors = dest.plugin.write(drecs)
            if errors and len(errors) != len(drecs):
                raise CdcflowError(f"write returned {len(errors)} results for {len(drecs)} records")
        failed = 0
        if errors:
            for r, err in zip(drecs, errors):
                if err is not None:
                    failed += 1
                    nacks.add(r, dest_id, str(err))
            if failed:
                verdict = _verdict(pipe, task, positions, nacks, state.window)
        stats.written[dest_id] = stats.written.get(dest_id, 0) + len(drecs) - failed
    return positions, verdict, nacks


def _settle(
    pipe: PipelineConfig,
    task: PartitionTask,
    positions: list[bytes],
    verdict: _Verdict,
    nacks: _Nacks,
    state: PartitionState,
    parts: _PipelineParts,
    stats: TaskStats,
) -> tuple[list[bytes], str | None]:
    """Write the DLQ; returns the positions now settled (``state`` holds their position and
    window) and, if the pipeline must stop, why. A DLQ outage fails the batch (retried); any
    other DLQ failure stops the pipeline at the first record it did not take."""
    stop_at, reason, window_after = verdict.stop_at, verdict.reason, verdict.window_after
    if verdict.dlq:
        failed_at: int | None = None
        why = ""
        dlq_cfg = pipe.dead_letter_queue
        try:
            results = parts.dlq.write([r for _, r in verdict.dlq])
        except Exception as e:  # noqa: BLE001 - a DLQ failure stops the pipeline, with its reason
            if as_infrastructure(e) is not None:
                raise node_error(pipe.id, DLQ, dlq_cfg.plugin, e) from e
            failed_at, why = verdict.dlq[0][0], describe(e)
        else:
            for (i, _), err in zip(verdict.dlq, results or ()):
                if err is not None:
                    failed_at, why = i, str(err)
                    break
        if failed_at is not None:
            stop_at = failed_at if stop_at is None else min(stop_at, failed_at)
            window_after = verdict.before_nack[stop_at]
            reason = (f"pipeline {pipe.id} stopped: writing to the dead-letter queue failed "
                      f"({DLQ} {dlq_cfg.plugin}, source {task}): {why}")
        stats.dlq += sum(1 for i, _ in verdict.dlq if stop_at is None or i < stop_at)
    for node, n in nacks.counts.items():
        stats.nacked[node] = stats.nacked.get(node, 0) + n
    acked = positions if stop_at is None else positions[:stop_at]
    if acked:
        state.position = acked[-1]
        state.window = window_after
    return acked, (reason if stop_at is not None else None)


# -- checkpoints ----------------------------------------------------------------
_checkpoint_pool: Any = None


def _checkpoint_executor():
    global _checkpoint_pool
    with _lock:
        if _checkpoint_pool is None:
            from concurrent.futures import ThreadPoolExecutor

            _checkpoint_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cdcflow-checkpoint")
        return _checkpoint_pool


class _Checkpoints:
    """Saves a partition's state while the task reads its next batch, then acknowledges.

    A checkpoint is a durable file replace (two fsyncs) that would leave
    the core idle once per batch. Batch N's state is saved on a helper thread while
    batch N+1 is read and goes through the processors; before any destination writes
    N+1, N's save is awaited and N is acknowledged. The contract is kept: a position
    is saved only after every destination wrote it, acknowledged only after it was
    saved, saves of one partition never overlap, and a crash leaves at most one
    written but unsaved batch per partition (the one being written).
    """

    __slots__ = ("_ctx", "_task", "_source", "_future", "_positions", "_stats")

    def __init__(self, ctx: RunContext, task: PartitionTask, source: _OpenSource, stats: TaskStats):
        self._ctx, self._task, self._source, self._stats = ctx, task, source, stats
        self._future: Any = None
        self._positions: list[bytes] = []

    def submit(self, state: PartitionState, positions: list[bytes]) -> None:
        self.flush()
        snapshot = PartitionState(state.position, list(state.window), state.ended)
        t = self._task
        self._future = _checkpoint_executor().submit(self._ctx.state.save, t.pipeline, t.source, t.partition, snapshot)
        self._positions = positions

    def save_now(self, state: PartitionState) -> None:
        self.flush()
        t = self._task
        with _In(t.pipeline, STATE, _state_node(t)):
            self._ctx.state.save(t.pipeline, t.source, t.partition, state)
        self._stats.saved += 1

    def flush(self) -> None:
        """Wait for the pending save (its error raises here), then acknowledge its positions."""
        future, positions = self._future, self._positions
        if future is None:
            return
        self._future, self._positions = None, []
        t = self._task
        with _In(t.pipeline, STATE, _state_node(t)):
            future.result()
        with _In(t.pipeline, SOURCE, t.source):
            self._source.plugin.ack(positions)
        self._source.position = positions[-1]
        self._stats.saved += 1


def _state_node(task: PartitionTask) -> str:
    return f"(positions of source {task.source}{f'[{task.partition}]' if task.partition else ''})"


def _work(
    ctx: RunContext,
    pipe: PipelineConfig,
    task: PartitionTask,
    state: PartitionState,
    source: _OpenSource,
    parts: _PipelineParts,
    stats: TaskStats,
    checkpoints: _Checkpoints,
) -> None:
    """The batch cycle until the budget is used, the source ends or idles, or a stop is asked."""
    limits = ctx.limits
    batch_size = pipe.engine.batch_size or limits.batch_size

    def one_batch() -> bool | None:
        """Read, process, write and settle one batch: True if it had records, False if the
        source had none yet, None if the source ended.

        Runs with the automatic collector paused. A batch is ~10k records of a few container
        objects each, all freed when this returns; with the collector running, every
        young-generation pass over them (and the promotions to older generations) costs
        time per record and finds nothing, as records hold no cycles. Objects a batch frees
        also leave the collector's allocation count, so resuming it afterwards does not start
        a collection; cyclic garbage a plugin leaves behind still counts and is collected later.
        """
        with _In(pipe.id, SOURCE, task.source):
            batch = source.plugin.read(batch_size)
        if batch is None:
            stats.ended = True
            if not state.ended:
                state.ended = True
                checkpoints.save_now(state)
            return None
        if not batch:
            return False
        if not stats.read:
            stats.timeline.append(("first-batch", time.time()))
        stats.read += len(batch)
        positions, verdict, nacks = _process_batch(batch, source, parts, stats, checkpoints, pipe, state)
        if verdict.dlq:
            checkpoints.flush()  # DLQ writes, like destination writes, wait for the previous save
        acked, stop_reason = _settle(pipe, task, positions, verdict, nacks, state, parts, stats)
        if acked:
            checkpoints.submit(state, acked)
        if stop_reason is not None:
            checkpoints.flush()
            stats.stopped = stop_reason
            raise PipelineStopped(stop_reason)
        return True

    idle_since: float | None = None
    work_started = time.monotonic()  # the budget excludes opening plugins: every task reads
    while True:
        now = time.monotonic()
        if now - work_started >= limits.task_seconds and (stats.read or stats.idle):
            return
        if limits.task_records and stats.read >= limits.task_records:
            return
        if ctx.state.stop_requested():
            return
        collecting = gc.isenabled()
        gc.disable()
        try:
            got = one_batch()
        finally:
            if collecting:
                gc.enable()
        if got is None:
            return
        if got:
            idle_since = None
            continue
        if idle_since is None:
            idle_since = now
            # a source that knows nothing is waiting (it just looked) is idle now: waiting
            # out the timeout would only delay the micro-batch (and --until-idle's end)
            caught_up = _caught_up(source.plugin)
        else:
            caught_up = False
        if caught_up or now - idle_since >= limits.idle_timeout:
            stats.idle = True
            return
        time.sleep(0.01)


def _caught_up(plugin) -> bool:
    """The source says nothing waits behind its position (``lag() == 0``); a failing ``lag`` says nothing."""
    try:
        return plugin.lag() == 0
    except Exception:  # noqa: BLE001 - lag is informative; the idle timeout still applies
        return False


def run_partition(ctx: RunContext, task: PartitionTask) -> TaskStats:
    """Work on one partition for up to the task's budget; never raises (errors are in the stats).

    A batch failed by an outage (``InfrastructureError``, in any node) is retried with the
    pipeline's backoff: the cached plugins are closed, the partition's saved state is read
    again and the source reopened at it, so the batch is read and written anew (nothing of it
    was acknowledged). When the budget is spent the pipeline fails, naming the node."""
    started = time.monotonic()
    cpu_started = time.process_time()
    stats = TaskStats(task, pid=os.getpid())
    stats.timeline.extend(_start_marks())
    mark = stats.timeline.append
    mark(("task", time.time()))
    try:
        _prepare_process(ctx)
        pipe = ctx.pipelines[task.pipeline]
        registry = _registry(ctx)
        mark(("registry", time.time()))
        policy = RetryPolicy.of(pipe.engine)
        retry, failing_since = 0, 0.0
        while True:
            saved_before = stats.saved
            try:
                _attempt(ctx, pipe, task, registry, stats)
                break
            except NodeError as e:
                if not e.retryable:
                    raise
                _evict_pipeline(ctx, task.pipeline)  # reopen everything: a broken connection heals that way
                now = time.monotonic()
                if retry == 0 or stats.saved > saved_before:  # a batch went through since: a new outage
                    retry, failing_since = 0, now
                retry += 1
                wait = policy.next_delay(retry, now - failing_since)
                if wait is None:
                    raise _GaveUp(f"{e} (gave up after {retry - 1} retries in {now - failing_since:.1f}s, "
                                  f"{policy})") from e
                stats.retries += 1
                log.warning("pipeline %s: %s (source partition %s); retry %d in %.1fs", task.pipeline, e, task, retry, wait)
                if not _wait_unless_stopped(ctx, wait):
                    break  # the run is stopping: nothing of the failed batch was acknowledged
    except PipelineStopped:
        _evict_pipeline(ctx, task.pipeline)
    except Exception as e:  # noqa: BLE001 - reported to the driver with its context
        log.debug("partition %s failed", task, exc_info=True)
        if isinstance(e, (NodeError, _GaveUp)):
            stats.error = f"{e} (source partition {task})"
        else:
            stats.error = f"source partition {task}: {describe(e)}"
        _evict_pipeline(ctx, task.pipeline)
    stats.seconds = time.monotonic() - started
    stats.cpu_seconds = time.process_time() - cpu_started
    mark(("end", time.time()))
    return stats


class _GaveUp(CdcflowError):
    """An outage outlasted the pipeline's retry budget."""


def _wait_unless_stopped(ctx: RunContext, seconds: float) -> bool:
    """Sleep before a retry; False as soon as the run is asked to stop."""
    deadline = time.monotonic() + seconds
    while True:
        if ctx.state.stop_requested():
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        time.sleep(min(left, 0.1))


def _attempt(ctx: RunContext, pipe: PipelineConfig, task: PartitionTask, registry, stats: TaskStats) -> None:
    """Open (or reuse) the partition's plugins at its saved state and work until the budget is used."""
    mark = stats.timeline.append
    with _In(pipe.id, STATE, _state_node(task)):
        state = ctx.state.load(task.pipeline, task.source, task.partition)
    parts = _pipeline_parts(ctx, pipe, registry)
    mark(("pipeline", time.time()))
    source = _open_source(ctx, pipe, task, state, registry, stats)
    mark(("source", time.time()))
    stats.process_cpu_at_source = time.process_time()
    checkpoints = _Checkpoints(ctx, task, source, stats)
    try:
        _work(ctx, pipe, task, state, source, parts, stats, checkpoints)
        mark(("work", time.time()))
    except BaseException:
        try:
            checkpoints.flush()  # what was written and saved before the failure is still acknowledged
        except Exception:  # noqa: BLE001 - the first failure is the one to report
            log.debug("checkpoint after a failure failed", exc_info=True)
        raise
    checkpoints.flush()
    try:
        stats.lag = source.plugin.lag()
    except Exception:  # noqa: BLE001 - lag is informative only
        stats.lag = None


#: set to a directory to write one cProfile file per task (``<pipeline>.<source>.<partition>.<pid>.<n>.prof``)
PROFILE_ENV = "CDCFLOW_TASK_PROFILE"


def run_partitions(ctx: RunContext, tasks: Sequence[PartitionTask]) -> list[TaskStats]:
    """What a Spark task calls for its slice (one partition per Spark partition)."""
    profile_dir = os.environ.get(PROFILE_ENV)
    if profile_dir:
        return [_profiled(ctx, t, profile_dir) for t in tasks]
    return [run_partition(ctx, t) for t in tasks]


_profile_count = 0


def _profiled(ctx: RunContext, task: PartitionTask, out_dir: str) -> TaskStats:
    """``run_partition`` under cProfile: where a worker's time goes, without a debugger on the executor."""
    import cProfile
    import urllib.parse

    global _profile_count
    _profile_count += 1
    profiler = cProfile.Profile()
    stats = profiler.runcall(run_partition, ctx, task)
    name = ".".join(urllib.parse.quote(x, safe="") or "_" for x in (task.pipeline, task.source, task.partition))
    os.makedirs(out_dir, exist_ok=True)
    profiler.dump_stats(os.path.join(out_dir, f"{name}.{os.getpid()}.{_profile_count}.prof"))
    return stats
