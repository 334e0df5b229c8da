"""The driver loop: micro-batches of Spark jobs over every live source partition.

Each micro-batch is one Spark job of as many tasks as the executors have slots
(``SparkContext.defaultParallelism``; ``spark.default.parallelism`` sets it); each task
serves a group of source partitions, interleaved, up to its budget, and returns counts per
partition. A partition keeps its group across micro-batches (grouped by its place in the
plan), so a Python worker tends to get the same partitions back and reuses the sources it
opened. The tasks persist positions themselves, so the driver holds no state that a crash
could lose. Partitions whose bounded source ended drop out; a pipeline that stopped or
failed drops out with its reason. The loop ends when nothing is live, when ``until_idle``
sees a micro-batch whose every partition ended idle (it gave nothing for the idle timeout,
or its source said nothing waits) or at its source's end, or when ``request_stop`` was
called (SIGINT/SIGTERM): the in-flight micro-batch finishes its current batches,
checkpoints, and the run returns normally.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .plan import PartitionTask, RunContext
from .progress import ProgressDisplay, Totals
from .task import TaskStats, run_partitions

if TYPE_CHECKING:  # prometheus_client is imported only when a run serves metrics
    from .metrics import RunMetrics

log = logging.getLogger("cdcflow.engine.driver")


@dataclass
class LoopResult:
    totals: Totals
    failures: list[str] = field(default_factory=list)
    interrupted: bool = False


#: set in a group's Python workers (``SparkContext.environment`` when its RDD is made): PySpark
#: keeps a pool of workers per distinct environment, so a group always gets a worker of its own
#: pool back (on each executor) and the sources that worker keeps open for its partitions
GROUP_ENV = "CDCFLOW_TASK_GROUP"


def _spark_job(spark_context, ctx: RunContext, groups: list[list[PartitionTask]], rdds: "GroupJobs | None" = None
               ) -> list[TaskStats]:
    """One Spark task per group, each in its group's Python worker."""
    return (rdds or GroupJobs(spark_context, ctx)).job(groups).collect()


def group_partitions(live: list[PartitionTask], order: dict[PartitionTask, int], slots: int) -> list[list[PartitionTask]]:
    """``live`` in ``slots`` groups (some maybe empty): a partition's group follows from its place in
    the plan (``order``), so it stays in its group while others end or fail."""
    groups: list[list[PartitionTask]] = [[] for _ in range(max(1, slots))]
    for t in live:
        groups[order[t] % len(groups)].append(t)
    return groups


class GroupJobs:
    """The RDD of a micro-batch: the union of one single-task RDD per non-empty group, each made
    with the group's ``GROUP_ENV``; kept while the groups do not change (making one pickles the
    run context)."""

    def __init__(self, spark_context, ctx: RunContext):
        self.sc, self.ctx = spark_context, ctx
        self._key: tuple | None = None
        self._rdd = None
        self.used: set[int] = set()  # the groups whose workers ran a task

    def group_rdd(self, slot: int, func):
        """A one-task RDD running ``func()`` in group ``slot``'s workers."""

        def work(items):
            for _ in items:  # read to its end: a worker that leaves input unread is not reused
                pass
            return func()

        env = self.sc.environment
        env[GROUP_ENV] = str(slot)
        try:
            rdd = self.sc.parallelize([slot], 1).mapPartitions(work)
            rdd._jrdd  # the function is wrapped (with the environment) now
        finally:
            env.pop(GROUP_ENV, None)
        return rdd

    def job(self, groups: list[list[PartitionTask]]):
        key = tuple(tuple(g) for g in groups)
        if key != self._key:
            ctx = self.ctx
            parts = []
            for slot, group in enumerate(groups):
                if group:
                    parts.append(self.group_rdd(slot, lambda group=group: run_partitions(ctx, group)))
                    self.used.add(slot)
            self._rdd = parts[0] if len(parts) == 1 else self.sc.union(parts)
            self._key = key
        return self._rdd

    def teardown(self) -> None:
        """Best effort: close the cached plugins of the workers of each group that ran (on the
        executors the tasks reach now)."""
        from .task import teardown_all

        rdds = [self.group_rdd(slot, lambda: [teardown_all()]) for slot in sorted(self.used)]
        if not rdds:
            return
        try:
            (rdds[0] if len(rdds) == 1 else self.sc.union(rdds)).collect()
        except Exception:  # noqa: BLE001 - durability never depends on this
            log.debug("executor teardown job failed", exc_info=True)


class Driver:
    def __init__(
        self,
        spark_context,
        ctx: RunContext,
        tasks: list[PartitionTask],
        *,
        until_idle: bool = False,
        trigger_interval: float = 1.0,
        display: ProgressDisplay | None = None,
        metrics: RunMetrics | None = None,
        slots: int | None = None,
    ):
        self.sc = spark_context
        self.ctx = ctx
        self.tasks = list(tasks)
        self._order = {t: i for i, t in enumerate(self.tasks)}
        self.slots = slots or max(1, spark_context.defaultParallelism)
        self._jobs = GroupJobs(spark_context, ctx)
        self.until_idle = until_idle
        self.trigger_interval = trigger_interval
        self.display = display or ProgressDisplay(enabled=False)
        self.metrics = metrics
        self._stop = threading.Event()

    def request_stop(self) -> None:
        """Finish the in-flight micro-batch and return (safe from a signal handler)."""
        if not self._stop.is_set():
            self._stop.set()
            try:
                self.ctx.state.request_stop()
            except OSError:  # the state dir vanished: tasks stop at their budget anyway
                pass

    def run(self) -> LoopResult:
        self.ctx.state.clear_stop()
        result = LoopResult(Totals())
        live = list(self.tasks)
        try:
            while live and not self._stop.is_set():
                started = time.monotonic()
                stats = _spark_job(self.sc, self.ctx, group_partitions(live, self._order, self.slots), self._jobs)
                seconds = time.monotonic() - started
                result.totals.add(stats, seconds)
                live = self._next_live(live, stats, result)
                if self.metrics is not None:
                    self.metrics.observe(stats, seconds, len(live))
                self.display.update(result.totals)
                if not live:
                    break
                if self.until_idle and all(s.idle or s.ended for s in stats):
                    # every partition ended its slice idle (its source said nothing waits, or it
                    # gave nothing for the idle timeout) or ended: another micro-batch would only
                    # wait the same again
                    log.info("every live partition is idle: stopping (--until-idle)")
                    break
                if all(s.read == 0 and (s.idle or s.ended) for s in stats):
                    self._stop.wait(self.trigger_interval)
        finally:
            self.display.close()
            result.interrupted = self._stop.is_set()
            self.ctx.state.clear_stop()
        return result

    def teardown_workers(self) -> None:
        """Close cached plugins in the Python workers of every group (destinations get ``stop``)."""
        self._jobs.teardown()

    def _next_live(self, live: list[PartitionTask], stats: list[TaskStats], result: LoopResult) -> list[PartitionTask]:
        done: set[PartitionTask] = set()
        dead_pipelines: set[str] = set()
        for s in stats:
            if s.ended:
                done.add(s.task)
            problem = s.stopped or s.error
            if problem:
                if s.task.pipeline not in dead_pipelines:
                    result.failures.append(problem if s.stopped else f"pipeline {s.task.pipeline} failed: {problem}")
                else:
                    result.failures.append(problem)
                dead_pipelines.add(s.task.pipeline)
        return [t for t in live if t not in done and t.pipeline not in dead_pipelines]
