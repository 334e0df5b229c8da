"""``run`` as a function: load and validate pipeline files, start Spark, run, summarise.

The CLI (``commands.py``) is a thin wrapper; tests and embedders call ``run_files``
directly (optionally with their own Spark session).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, TextIO

from ..errors import CdcflowError, ConfigError, InfrastructureError, PluginNotFoundError
from ..masking import mask_setting
from ..objectstore import is_object_uri
from ..params import REDACTOR
from ..pipeline.model import PipelineConfig
from .driver import Driver
from .faults import NodeError, describe
from .plan import Limits, RunContext, plan_partitions
from .progress import ProgressDisplay, Totals, summary
from .spark.session import parse_conf_pairs, resolve_master, ship_plugins, start_session
from .state import DEFAULT_LEASE, StateDir, run_lock

log = logging.getLogger("cdcflow.engine")

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
DEFAULT_STATE_DIR = ".cdcflow"


@dataclass
class RunOutcome:
    exit_code: int
    problems: list[str] = field(default_factory=list)  # validation problems (exit 2)
    failures: list[str] = field(default_factory=list)  # pipeline failures (exit 1)
    totals: Totals | None = None
    state_dir: Path | str | None = None  # a local directory, or an object-store URI
    outputs: list[str] = field(default_factory=list)
    startup_seconds: float = 0.0
    interrupted: bool = False
    summary: str = ""


def _validation_problems(paths: list[str], env: Mapping[str, str] | None, registry):
    """Every problem ``cdcflow validate`` would report, plus the parsed pipelines."""
    from ..pipeline.validate import validate_files

    result = validate_files(paths, env=env, registry=registry)
    for warning in result.warnings:  # as Conduit logs its parser's warnings and runs on
        log.warning("%s", warning)
    return result.pipelines, [str(p) for p in result.problems]


def default_state_dir(paths: list[str], cli: str | None, pipelines: list[PipelineConfig]) -> Path | str:
    """``--state-dir`` > the first pipeline's ``engine.state-dir`` > ``.cdcflow/`` beside the first file.

    An object-store URI (``s3://bucket/prefix``...) is returned as it is (a ``str``)."""
    if cli:
        return cli if is_object_uri(cli) else Path(cli)
    for p in pipelines:
        if p.engine.state_dir:
            return p.engine.state_dir if is_object_uri(p.engine.state_dir) else Path(p.engine.state_dir)
    return Path(paths[0]).resolve().parent / DEFAULT_STATE_DIR


def _state(paths: list[str], cli: str | None, pipelines: list[PipelineConfig]) -> tuple[StateDir | None, list[str]]:
    """The run's state directory with its object-store options (``StateDir`` masks their secrets),
    or the problems that keep it from being one."""
    location = default_state_dir(paths, cli, pipelines)
    options: dict[str, str] = {}
    for p in pipelines:
        options = {**p.engine.state_options, **options}  # the first pipeline's value wins, like state-dir
    if options and not is_object_uri(str(location)):
        return None, [f"engine.state-options configure an object-store state directory; {location} is a local one"]
    try:
        return StateDir(location, options), []
    except ConfigError as e:  # a URI carrying credentials or naming no bucket
        return None, [REDACTOR.redact(str(e))]


def _outputs(pipelines: list[PipelineConfig]) -> list[str]:
    """Where the destinations put things, as far as their settings tell."""
    out = []
    for p in pipelines:
        for d in p.destinations:
            where = next((mask_setting(k, d.settings[k]) for k in ("path", "url", "uri", "topic")
                          if d.settings.get(k)), None)
            out.append(f"{p.id}/{d.id} ({d.plugin}): {where}" if where else f"{p.id}/{d.id} ({d.plugin})")
        dlq = p.dead_letter_queue
        where = mask_setting("path", dlq.settings.get("path"))
        out.append(f"{p.id} dead-letter queue ({dlq.plugin})" + (f": {where}" if where else ""))
    return out


#: the shortest task budget the trigger interval sets (a micro-batch costs one Spark job)
MIN_DEFAULT_BUDGET = 0.5


def _limits(pipelines: list[PipelineConfig], base: Limits | None) -> Limits:
    """``base`` (or the defaults) with the pipelines' ``micro-batch-duration``; without one (and
    without ``base``), a task's budget is the trigger interval (at least ``MIN_DEFAULT_BUDGET``):
    a group of partitions that went quiet and returned early is served again within it while
    the other tasks of its micro-batch work on (docs/engine.md, "Partitions, tasks and latency")."""
    limits = Limits(**vars(base)) if base else Limits()
    if base is None:
        limits.task_seconds = max(MIN_DEFAULT_BUDGET, min(p.engine.trigger_interval for p in pipelines))
    for p in pipelines:
        if p.engine.micro_batch_duration is not None:
            limits.task_seconds = p.engine.micro_batch_duration
    return limits


def run_files(
    paths: list[str],
    *,
    pipeline_ids: list[str] | None = None,
    master: str | None = None,
    conf: list[str] | None = None,
    until_idle: bool = False,
    metrics_port: int | None = None,
    state_dir: str | None = None,
    plugins_dir: str | None = None,
    env: Mapping[str, str] | None = None,
    limits: Limits | None = None,
    out: TextIO | None = None,
    progress: bool = True,
    on_driver: Callable[[Driver], None] | None = None,
) -> RunOutcome:
    """Run the pipelines of ``paths``; never raises for expected failures (see exit_code)."""
    out = out or sys.stdout
    from ..registry import load_registry

    registry = load_registry(plugins_dir)
    pipelines, problems = _validation_problems(paths, env, registry)
    try:
        cli_conf = parse_conf_pairs(conf or [])
    except ValueError as e:
        problems.append(str(e))
    if pipeline_ids:
        known = {p.id for p in pipelines}
        for pid in pipeline_ids:
            if pid not in known:
                problems.append(f"--pipeline {pid}: no such pipeline (known: {', '.join(sorted(known)) or 'none'})")
        pipelines = [p for p in pipelines if p.id in pipeline_ids]
    if problems:
        return RunOutcome(EXIT_INVALID, problems=problems)
    selected = [p for p in pipelines if p.status != "stopped"]
    for p in pipelines:
        if p.status == "stopped":
            log.info("pipeline %s has status stopped: not run", p.id)
    if not selected:
        return RunOutcome(EXIT_INVALID, problems=["no pipeline to run (every selected pipeline has status stopped)"])

    state, problems = _state(paths, state_dir, selected)
    if state is None:
        return RunOutcome(EXIT_INVALID, problems=problems)
    outcome = RunOutcome(EXIT_OK, state_dir=state.root, outputs=_outputs(selected))
    lease = next((p.engine.state_lease for p in selected if p.engine.state_lease), DEFAULT_LEASE)
    try:
        lock = run_lock(state.create(), lease).__enter__()
    except InfrastructureError as e:  # a read-only or full state directory, an unreachable store: named
        return RunOutcome(EXIT_FAILED, failures=[REDACTOR.redact(f"cannot start: state store: {describe(e)}")],
                          state_dir=state.root)
    except ConfigError as e:  # the store's file system is not installed (gcsfs, adlfs)
        return RunOutcome(EXIT_INVALID, problems=[REDACTOR.redact(f"state {state.root}: {e}")], state_dir=state.root)
    with lock:
        file_master = next((p.engine.master for p in selected if p.engine.master), None)
        spark_conf: dict[str, str] = {}
        for p in selected:
            spark_conf.update(p.engine.conf)
        spark_conf.update(cli_conf)
        session = start_session(resolve_master(master, file_master), spark_conf, state)
        outcome.startup_seconds = session.startup_seconds
        metrics = None
        try:
            ship_plugins(session, state)
            try:
                ctx = RunContext.prepare({p.id: p for p in selected}, state, registry,
                                         plugins_dir=str(plugins_dir) if plugins_dir else None,
                                         limits=_limits(selected, limits))
                tasks = plan_partitions(ctx, registry, until_idle)
            except (ConfigError, PluginNotFoundError) as e:
                return RunOutcome(EXIT_INVALID, problems=[REDACTOR.redact(str(e))], state_dir=state.root)
            except CdcflowError as e:
                where = f"pipeline {e.pipeline}: " if isinstance(e, NodeError) else ""
                return RunOutcome(EXIT_FAILED, failures=[REDACTOR.redact(f"cannot start: {where}{e}")],
                                  state_dir=state.root)
            resumed = _resumed(state, tasks)
            if metrics_port is not None:
                from .metrics import RunMetrics  # prometheus_client: imported only when metrics are served

                metrics = RunMetrics()
                port = metrics.serve(metrics_port)
                log.info("Prometheus metrics on http://0.0.0.0:%d/metrics", port)
            driver = Driver(
                session.context,
                ctx,
                tasks,
                until_idle=until_idle,
                trigger_interval=min(p.engine.trigger_interval for p in selected),
                display=ProgressDisplay(enabled=progress),
                metrics=metrics,
            )
            if on_driver is not None:
                on_driver(driver)
            lock.on_lost = lambda _why: driver.request_stop()  # another run took the state over
            if lock.lost:
                driver.request_stop()
            loop = driver.run()
            _teardown_executors(driver)
        finally:
            if metrics is not None:
                metrics.close()
            if session.owned:
                session.stop()
    outcome.totals = loop.totals
    outcome.failures = [REDACTOR.redact(f) for f in loop.failures]
    if lock.lost:
        outcome.failures.append(REDACTOR.redact(lock.lost))
    outcome.interrupted = loop.interrupted
    outcome.exit_code = EXIT_FAILED if outcome.failures else EXIT_OK
    outcome.summary = summary(loop.totals, outcome.outputs, outcome.failures, outcome.startup_seconds)
    if loop.totals.total_read() == 0 and not loop.failures:
        if resumed:
            outcome.summary += (
                f"\n  nothing new to read: sources continue from their saved positions in {state.root}"
                f" ({', '.join(map(str, resumed))}; delete that {'prefix' if state.remote else 'directory'}"
                " to start over)"
            )
        else:
            outcome.summary += (
                "\n  nothing was read: the sources returned no records (no saved position in "
                f"{state.root} was used; check the sources' settings, e.g. a path, URI or topic)"
            )
    print(outcome.summary, file=out)
    return outcome


def _resumed(state: StateDir, tasks: list) -> list:
    """The partitions that start from a saved state (a position, or a bounded source's end)."""
    out = []
    for t in tasks:
        try:
            saved = state.load(t.pipeline, t.source, t.partition)
        except CdcflowError:  # unreadable: the tasks report it
            continue
        if saved.position is not None or saved.ended:
            out.append(t)
    return out


def _teardown_executors(driver: Driver) -> None:
    """Best effort: close cached plugins in the Python workers Spark reaches now."""
    driver.teardown_workers()
