"""One source partition's share of a micro-batch, run inside a Spark task: the nodes wired.

Per batch (``_cycle``): the source node reads → the processor chains (the source's, the
pipeline's, each destination's) → the nack window judges the rejections (``dlq``) → the
acker ends the previous batch's save and acknowledges it → each destination node writes
(durably) → the DLQ gets the rejected records before any stop → the acker settles the
batch: its position and window are saved (on a helper thread while the next batch is read),
then acknowledged. Only records before a stop are acknowledged; records written past it are
duplicates on the next run, never losses.

The pipeline's processors and destinations are kept per Python worker process and reused
across tasks and micro-batches (a standalone plugin is a subprocess: expensive to start);
so are its sources (``source.py``).
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..errors import CdcflowError
from ..pipeline.model import ConnectorConfig, PipelineConfig
from . import dlq, processors
from . import source as source_nodes
from .acker import Acker, state_node
from .destination import DestinationNode, before_stop
from .dlq import Nacks
from .faults import DLQ, STATE, NodeError, PipelineStopped, RetryPolicy, describe, in_node, quiet_teardown
from .plan import PartitionTask, RunContext
from .source import SourceNode
from .spark.heap import keep_freed_memory
from .spark.worker import start_marks

log = logging.getLogger("cdcflow.engine.task")


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


# -- what a worker process keeps -------------------------------------------------
_lock = threading.Lock()
_registry_cache: dict[tuple, Any] = {}
_pipeline_cache: dict[tuple, "_PipelineParts"] = {}


@dataclass
class _PipelineParts:
    """A pipeline's nodes after its sources: its processors, destinations and DLQ."""

    chain: Any
    destinations: list[DestinationNode]
    dlq: DestinationNode

    def close(self, clean: bool) -> None:
        quiet_teardown(self.chain)
        for d in [*self.destinations, self.dlq]:
            d.close(clean)


def _prepare_process(ctx: RunContext) -> None:
    """Point this process's schema store at the run's shared SQLite file; mask secrets in its logs."""
    from ..params import install_redactor
    from ..schemas import STORE_ENV, set_default_store

    ctx.install_secrets()
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
    that long-lived heap again. Freed memory stays in the worker for the next batch (``spark.heap``)."""
    gc.collect()
    gc.freeze()
    keep_freed_memory()


def _pipeline_parts(ctx: RunContext, pipe: PipelineConfig, registry) -> _PipelineParts:
    key = (str(ctx.state.root), pipe.id, repr((pipe.processors, pipe.destinations, pipe.dead_letter_queue)))
    with _lock:
        parts = _pipeline_cache.get(key)
    if parts is not None:
        return parts
    built: list[Any] = []
    try:
        chain = processors.build(pipe.id, pipe.processors, registry, ctx.processor_settings(pipe.id))
        built.append(chain)
        dests = []
        for cfg in pipe.destinations:
            node = DestinationNode.open(pipe.id, cfg, registry.connector(cfg.plugin),
                                        ctx.settings_of(pipe.id, "destination", cfg.id))
            built.append(node.plugin)
            node.chain = processors.build(pipe.id, cfg.processors, registry, ctx.processor_settings(pipe.id))
            built.append(node.chain)
            dests.append(node)
        dlq_cfg = pipe.dead_letter_queue
        dlq_node = DestinationNode.open(
            pipe.id,
            ConnectorConfig(id=f"{pipe.id}-dlq", type="destination", plugin=dlq_cfg.plugin, settings=dlq_cfg.settings),
            registry.connector(dlq_cfg.plugin), ctx.settings_of(pipe.id, DLQ), role=DLQ, node=dlq_cfg.plugin)
    except BaseException:
        for part in built:
            quiet_teardown(part)
        raise
    parts = _PipelineParts(chain, dests, dlq_node)
    with _lock:
        _pipeline_cache[key] = parts
    return parts


def _evict_pipeline(ctx: RunContext, pipeline_id: str) -> None:
    """Close a pipeline's cached nodes after a failure (torn down without ``stop``)."""
    root = str(ctx.state.root)
    source_nodes.evict_pipeline(ctx, pipeline_id)
    with _lock:
        keys = [k for k in _pipeline_cache if k[0] == root and k[1] == pipeline_id]
        popped = [_pipeline_cache.pop(k) for k in keys]
    for p in popped:
        p.close(clean=False)


def teardown_all() -> int:
    """Close every cached plugin in this process at the end of the run: destinations get
    ``stop(last_position)`` before their teardown."""
    with _lock:
        parts = list(_pipeline_cache.values())
        _pipeline_cache.clear()
    n = source_nodes.evict_all()
    for p in parts:
        p.close(clean=True)
    return n + len(parts)


# -- the batch cycle ------------------------------------------------------------
def _cycle(pipe: PipelineConfig, source: SourceNode, parts: _PipelineParts, acker: Acker, stats: TaskStats,
           batch_size: int) -> bool | None:
    """Read, process, write and settle one batch: True if it had records, False if the source had
    none yet, None if the source ended."""
    batch = source.read(batch_size)
    if batch is None:
        stats.ended = True
        acker.end()
        return None
    if not batch:
        return False
    if not stats.read:
        stats.timeline.append(("first-batch", time.time()))
    stats.read += len(batch)

    # processors: the nack window sees their rejections before anything is written, so a stop
    # writes nothing from the stopping record on
    nacks = Nacks()
    records, f1 = processors.run(source.chain, batch, nacks, pipe.id)
    records, f2 = processors.run(parts.chain, records, nacks, pipe.id)
    stats.filtered += f1 + f2
    fan_out = len(parts.destinations) > 1
    outputs = []
    for dest in parts.destinations:
        drecs = records
        if dest.chain is not None:
            if fan_out:
                drecs = [r.copy() for r in drecs]  # its processors must not change what the others get
            drecs, f = processors.run(dest.chain, drecs, nacks, pipe.id)
            stats.filtered += f
        outputs.append((dest, drecs))
    positions = [r.position for r in batch]
    task = stats.task
    verdict = dlq.verdict(pipe, task, positions, nacks, acker.state.window)

    acker.wait()  # the previous batch is saved and acknowledged before this one is written

    # destinations: a destination's own nacks are known after its write; the destinations after
    # it then get only the records before a stop
    for dest, drecs in outputs:
        if verdict.stop_at is not None:
            drecs = before_stop(drecs, positions, verdict.stop_at)
        if not drecs:
            continue
        failed = dest.write(pipe.id, drecs, positions[-1] if drecs is batch else drecs[-1].position, nacks)
        if failed:
            verdict = dlq.verdict(pipe, task, positions, nacks, acker.state.window)
        dest_id = dest.config.id
        stats.written[dest_id] = stats.written.get(dest_id, 0) + len(drecs) - failed
    verdict = dlq.send(pipe, task, verdict, parts.dlq.plugin)
    stop_at = verdict.stop_at
    stats.dlq += sum(1 for i, _ in verdict.dlq if stop_at is None or i < stop_at)
    for node, n in nacks.counts.items():
        stats.nacked[node] = stats.nacked.get(node, 0) + n

    acked = positions if stop_at is None else positions[:stop_at]
    if acked:
        acker.settle(acked, verdict.window_after)
    if stop_at is not None:
        acker.wait()  # what came before the stop is saved and acknowledged before the pipeline stops
        stats.stopped = verdict.reason
        raise PipelineStopped(verdict.reason)
    return True


def _work(ctx: RunContext, pipe: PipelineConfig, source: SourceNode, parts: _PipelineParts, acker: Acker,
          stats: TaskStats) -> None:
    """The batch cycle until the budget is used, the source ends or idles, or a stop is asked.

    Each cycle runs with the automatic collector paused. A batch is ~10k records of a few
    container objects each, all freed when the cycle ends; with the collector running, every
    young-generation pass over them finds nothing (records hold no cycles). Objects a batch frees
    also leave the collector's allocation count, so resuming it afterwards does not start a
    collection; cyclic garbage a plugin leaves behind still counts and is collected later."""
    limits = ctx.limits
    batch_size = pipe.engine.batch_size or limits.batch_size
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
            got = _cycle(pipe, source, parts, acker, stats, batch_size)
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
            caught_up = source.lag() == 0
        else:
            caught_up = False
        if caught_up or now - idle_since >= limits.idle_timeout:
            stats.idle = True
            return
        time.sleep(0.01)


def _attempt(ctx: RunContext, pipe: PipelineConfig, task: PartitionTask, registry, stats: TaskStats) -> None:
    """Open (or reuse) the partition's nodes at its saved state and work until the budget is used."""
    mark = stats.timeline.append
    with in_node(pipe.id, STATE, state_node(task)):
        state = ctx.state.load(task.pipeline, task.source, task.partition)
    parts = _pipeline_parts(ctx, pipe, registry)
    mark(("pipeline", time.time()))
    source, opened = source_nodes.open_source(ctx, pipe, task, state, registry)
    stats.opened = stats.opened or opened
    mark(("source", time.time()))
    stats.process_cpu_at_source = time.process_time()
    acker = Acker(ctx, task, source, state)
    try:
        try:
            _work(ctx, pipe, source, parts, acker, stats)
            mark(("work", time.time()))
        except BaseException:
            try:
                acker.wait()  # what was written and saved before the failure is still acknowledged
            except Exception:  # noqa: BLE001 - the first failure is the one to report
                log.debug("checkpoint after a failure failed", exc_info=True)
            raise
        acker.wait()
    finally:
        stats.saved += acker.saved
    stats.lag = source.lag()


def run_partition(ctx: RunContext, task: PartitionTask) -> TaskStats:
    """Work on one partition for up to the task's budget; never raises (errors are in the stats).

    A batch failed by an outage (``InfrastructureError``, in any node) is retried with the
    pipeline's backoff: the cached plugins are closed, the partition's saved state is read
    again and the source reopened at it, so the batch is read and written anew (nothing of it
    was acknowledged). When the budget is spent the pipeline fails, naming the node."""
    started = time.monotonic()
    cpu_started = time.process_time()
    stats = TaskStats(task, pid=os.getpid())
    stats.timeline.extend(start_marks())
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
