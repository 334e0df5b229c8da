"""A Spark task's share of a micro-batch: its source partitions, served in turn, the nodes wired.

The driver hands each task a group of source partitions (as many tasks as the executors
have slots); the task reads them interleaved (``_Served``), one batch of one partition per
cycle, so a quiet partition never makes one with data wait for a slot.

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
from .plan import Limits, PartitionTask, RunContext
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


# -- a task's partitions, served in turn ----------------------------------------------
#: seconds between looks at the stop file: a look is a file-system (or object-store) request,
#: too dear for every cycle of every partition
_STOP_CHECK = 0.05
#: how long a task sleeps when none of its partitions had records in a round
_TICK = 0.01
_FAILED = object()  # a step failed; its pipeline's fate (retry, stop, failure) is settled


@dataclass(eq=False)
class _Lane:
    """One source partition a task serves: its nodes once open, and where it stands."""

    stats: TaskStats
    pipe: PipelineConfig
    source: SourceNode | None = None
    parts: _PipelineParts | None = None
    acker: Acker | None = None
    idle_since: float | None = None  # the first empty read of the current quiet spell
    resume_at: float = 0.0  # after an outage of its pipeline: reopened at its saved state then
    retrying: bool = False  # after an outage, until a cycle went through: the task may not return
    done: bool = False  # ended, or its pipeline stopped or failed: not served again in this task

    @property
    def task(self) -> PartitionTask:
        return self.stats.task

    def full(self, limits: Limits) -> bool:
        return bool(limits.task_records and self.stats.read >= limits.task_records)


@dataclass
class _Outage:
    """A pipeline's outage in this task: its partitions' retries share one backoff."""

    retry: int = 0
    since: float = 0.0
    saved: int = 0  # the pipeline's checkpoints at its last failure: more since then is a new outage


class _Served:
    """The partitions of one Spark task, read in turn (as a Kafka consumer serves the partitions
    assigned to it) until each is idle or ended, or the budget is used.

    Each partition keeps its own order, position, acker and nack window; one cycle of one
    partition is one batch. A partition that has nothing is passed over at the cost of a read
    that does not wait (``SourceNode.read_wait``), so a quiet partition never holds up one with
    data. A failure belongs to the partition's pipeline: its partitions in the task are retried
    together (an outage), or stop, or fail; other pipelines' partitions go on."""

    def __init__(self, ctx: RunContext, lanes: list[_Lane], registry):
        self.ctx, self.lanes, self.registry = ctx, lanes, registry
        self.read_wait = 0.0 if len(lanes) > 1 else None  # alone, a partition may wait in its read
        self.outages: dict[str, _Outage] = {}
        self.last_records: float | None = None  # when a partition last had records
        self.cpu_at_open: float | None = None  # the worker's CPU since its fork when the first source was open

    def run(self) -> None:
        limits = self.ctx.limits
        started = time.monotonic()  # the budget excludes opening plugins: every partition reads
        next_stop_check = 0.0
        while True:
            now = time.monotonic()
            if now >= next_stop_check:
                next_stop_check = now + _STOP_CHECK
                if self.ctx.state.stop_requested():
                    self.drain()
                    break
            live = [lane for lane in self.lanes if not lane.done]
            if not live:
                break
            budget_used = now - started >= limits.task_seconds
            # a task whose partitions had records ends before its budget only after a whole idle
            # timeout without any: a momentary lull must not leave its partitions unserved while
            # the other tasks of the micro-batch work on (the job waits for the longest)
            lull = self.last_records is None or now - self.last_records >= limits.idle_timeout
            if all(not lane.retrying and (lane.stats.idle or lane.full(limits) or (budget_used and lane.stats.read))
                   for lane in live) and (budget_used or lull or all(lane.full(limits) for lane in live)):
                if self.drain():
                    break
                continue
            if not self.round(live, started + limits.task_seconds, limits):
                wake = min(lane.resume_at for lane in live)  # all waiting out an outage: until the first retry
                time.sleep(min(wake - now, 0.1) if wake > now else _TICK)
        self.finish()

    def round(self, live: list[_Lane], deadline: float, limits: Limits) -> bool:
        """One cycle of each partition that may read now; True if one had records. Once the budget
        is used (``deadline``), a partition that read in this micro-batch has had its share."""
        progressed = False
        for lane in live:
            now = time.monotonic()
            if lane.resume_at > now or (not lane.retrying and (lane.full(limits) or (now >= deadline and lane.stats.read))):
                continue
            got = self.guarded(lane, self.cycle, lane)
            if got is _FAILED:
                continue
            stats = lane.stats
            lane.retrying = False
            if got is None:  # the bounded source ended (the acker saved that)
                lane.done = True
            elif got:
                lane.idle_since, stats.idle, progressed = None, False, True
                self.last_records = time.monotonic()
            elif not stats.idle:
                t = time.monotonic()
                if lane.idle_since is None:
                    lane.idle_since = t
                    # a source that knows nothing waits (it just looked) is idle now: waiting out
                    # the timeout would only delay the micro-batch (and --until-idle's end)
                    stats.idle = lane.source is not None and lane.source.lag() == 0
                elif t - lane.idle_since >= limits.idle_timeout:
                    stats.idle = True
        return progressed

    def cycle(self, lane: _Lane) -> bool | None:
        """Read, process, write and settle one batch of ``lane`` (opening its nodes first if needed).

        Each cycle runs with the automatic collector paused. A batch is ~10k records of a few
        container objects each, all freed when the cycle ends; with the collector running, every
        young-generation pass over them finds nothing (records hold no cycles). Objects a batch
        frees also leave the collector's allocation count, so resuming it afterwards does not
        start a collection; cyclic garbage a plugin leaves behind still counts and is collected
        later."""
        if lane.source is None:
            self.open(lane)
        collecting = gc.isenabled()
        gc.disable()
        try:
            return _cycle(lane.pipe, lane.source, lane.parts, lane.acker, lane.stats,
                          lane.pipe.engine.batch_size or self.ctx.limits.batch_size)
        finally:
            if collecting:
                gc.enable()

    def open(self, lane: _Lane) -> None:
        """Open (or reuse) the partition's nodes at its saved state."""
        ctx, task, stats = self.ctx, lane.task, lane.stats
        mark = stats.timeline.append
        with in_node(task.pipeline, STATE, state_node(task)):
            state = ctx.state.load(task.pipeline, task.source, task.partition)
        lane.parts = _pipeline_parts(ctx, lane.pipe, self.registry)
        mark(("pipeline", time.time()))
        source, opened = source_nodes.open_source(ctx, lane.pipe, task, state, self.registry)
        source.set_read_wait(self.read_wait)
        lane.source = source
        stats.opened = stats.opened or opened
        mark(("source", time.time()))
        if self.cpu_at_open is None:  # once per task: with many threads in the worker, a reading costs ~1 ms
            self.cpu_at_open = time.process_time()
        stats.process_cpu_at_source = self.cpu_at_open
        lane.acker = Acker(ctx, task, source, state)
        lane.idle_since = None

    def drain(self) -> bool:
        """End every partition's save under way and acknowledge it; False when one failed with an
        outage (its pipeline retries: the task goes on)."""
        ok = True
        for lane in self.lanes:
            if not lane.done and lane.acker is not None and self.guarded(lane, lane.acker.wait) is _FAILED:
                ok = ok and lane.done
        return ok

    def finish(self) -> None:
        at = time.time()
        for lane in self.lanes:
            stats = lane.stats
            if lane.acker is not None:
                stats.saved += lane.acker.saved
            if lane.source is not None:
                if not (stats.error or stats.stopped):
                    stats.timeline.append(("work", at))
                stats.lag = lane.source.lag()

    # -- failures: the partition's pipeline's -----------------------------------------------
    def guarded(self, lane: _Lane, step, *args):
        """``step(*args)``, or ``_FAILED`` when it failed (the failure then handled)."""
        try:
            return step(*args)
        except PipelineStopped:  # the DLQ stop: the cycle put its message in the stats
            self.end_pipeline(lane)
        except NodeError as e:
            if e.retryable:
                self.outage(lane, e)
            else:
                self.fail(lane, e)
        except Exception as e:  # noqa: BLE001 - reported to the driver with its context
            self.fail(lane, e)
        return _FAILED

    def siblings(self, lane: _Lane) -> list[_Lane]:
        return [other for other in self.lanes if other.task.pipeline == lane.task.pipeline and not other.done]

    @staticmethod
    def drop(lane: _Lane) -> None:
        """Forget the partition's nodes; what was saved before is still acknowledged."""
        if lane.acker is not None:
            try:
                lane.acker.wait()
            except Exception:  # noqa: BLE001 - the first failure is the one to report
                log.debug("checkpoint after a failure failed", exc_info=True)
            lane.stats.saved += lane.acker.saved
        lane.source = lane.parts = lane.acker = None

    def end_pipeline(self, lane: _Lane) -> None:
        """The pipeline stopped or failed: its partitions in this task end, its nodes are closed."""
        for other in self.siblings(lane):
            self.drop(other)
            other.done = True
        _evict_pipeline(self.ctx, lane.task.pipeline)

    def fail(self, lane: _Lane, e: Exception) -> None:
        log.debug("partition %s failed", lane.task, exc_info=True)
        if isinstance(e, (NodeError, _GaveUp)):
            lane.stats.error = f"{e} (source partition {lane.task})"
        else:
            lane.stats.error = f"source partition {lane.task}: {describe(e)}"
        self.end_pipeline(lane)

    def outage(self, lane: _Lane, e: NodeError) -> None:
        """A batch failed by an outage (``InfrastructureError``, in any node): the pipeline's cached
        plugins are closed and its partitions here reopened at their saved states after the backoff,
        so the batch is read and written anew (nothing of it was acknowledged). When the retry
        budget is spent the pipeline fails, naming the node."""
        siblings = self.siblings(lane)
        for other in siblings:
            self.drop(other)
        _evict_pipeline(self.ctx, lane.task.pipeline)  # reopen everything: a broken connection heals that way
        outage = self.outages.setdefault(lane.task.pipeline, _Outage())
        saved = sum(other.stats.saved for other in siblings)
        now = time.monotonic()
        if outage.retry == 0 or saved > outage.saved:  # a batch went through since: a new outage
            outage.retry, outage.since = 0, now
        outage.retry += 1
        outage.saved = saved
        policy = RetryPolicy.of(lane.pipe.engine)
        wait = policy.next_delay(outage.retry, now - outage.since)
        if wait is None:
            self.fail(lane, _GaveUp(f"{e} (gave up after {outage.retry - 1} retries in {now - outage.since:.1f}s, "
                                    f"{policy})"))
            return
        lane.stats.retries += 1
        log.warning("pipeline %s: %s (source partition %s); retry %d in %.1fs", lane.task.pipeline, e, lane.task,
                    outage.retry, wait)
        for other in siblings:
            other.resume_at, other.retrying = now + wait, True


def _run(ctx: RunContext, tasks: Sequence[PartitionTask]) -> list[TaskStats]:
    started = time.monotonic()
    cpu_started = time.process_time()
    prefix = [*start_marks(), ("task", time.time())]
    all_stats = [TaskStats(t, pid=os.getpid(), timeline=list(prefix)) for t in tasks]
    try:
        _prepare_process(ctx)
        registry = _registry(ctx)
        lanes = [_Lane(s, ctx.pipelines[s.task.pipeline]) for s in all_stats]
    except Exception as e:  # noqa: BLE001 - reported to the driver with its context
        log.debug("task failed before its partitions opened", exc_info=True)
        for s in all_stats:
            s.error = f"source partition {s.task}: {describe(e)}"
            _evict_pipeline(ctx, s.task.pipeline)
    else:
        at = time.time()
        for s in all_stats:
            s.timeline.append(("registry", at))
        _Served(ctx, lanes, registry).run()
    seconds = time.monotonic() - started
    cpu = (time.process_time() - cpu_started) / max(1, len(all_stats))  # the task's CPU, shared out
    at = time.time()
    for s in all_stats:
        s.seconds, s.cpu_seconds = seconds, cpu
        s.timeline.append(("end", at))
    return all_stats


def run_partition(ctx: RunContext, task: PartitionTask) -> TaskStats:
    """``run_partitions`` of one partition."""
    return run_partitions(ctx, [task])[0]


class _GaveUp(CdcflowError):
    """An outage outlasted the pipeline's retry budget."""


#: set to a directory to write one cProfile file per task (``<pipeline>.<source>.<partition>.<pid>.<n>.prof``)
PROFILE_ENV = "CDCFLOW_TASK_PROFILE"


def run_partitions(ctx: RunContext, tasks: Sequence[PartitionTask]) -> list[TaskStats]:
    """What a Spark task calls for its partitions: each worked, in turn, up to the task's budget;
    one ``TaskStats`` per partition, in order. Never raises: errors are in the stats."""
    profile_dir = os.environ.get(PROFILE_ENV)
    if profile_dir and tasks:
        return _profiled(ctx, tasks, profile_dir)
    return _run(ctx, tasks)


_profile_count = 0


def _profiled(ctx: RunContext, tasks: Sequence[PartitionTask], out_dir: str) -> list[TaskStats]:
    """A task under cProfile: where a worker's time goes, without a debugger on the executor."""
    import cProfile
    import urllib.parse

    global _profile_count
    _profile_count += 1
    profiler = cProfile.Profile()
    stats = profiler.runcall(_run, ctx, tasks)
    first = tasks[0]
    name = ".".join(urllib.parse.quote(x, safe="") or "_" for x in (first.pipeline, first.source, first.partition))
    if len(tasks) > 1:
        name += f"+{len(tasks) - 1}"
    os.makedirs(out_dir, exist_ok=True)
    profiler.dump_stats(os.path.join(out_dir, f"{name}.{os.getpid()}.{_profile_count}.prof"))
    return stats
