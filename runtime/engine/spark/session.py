"""The Spark session a run executes on.

Master: ``--master`` > the pipeline file's ``engine.master`` > ``local[*]``.
Configuration: the file's ``engine.conf`` then ``--conf k=v`` pairs (later wins).
Workers run the driver's own Python executable so cdcflow and the plugins installed
beside it import there; plugins from elsewhere are shipped (``ship.py``). Spark's
JVM logging is turned down to errors: cdcflow reports progress itself.

The engine needs only the RDD API, so a run starts a bare ``SparkContext``: building a
``SparkSession`` on top loads Spark SQL in the JVM and costs seconds of start-up (as
much again as the context here). ``SessionInfo.spark`` still gives a session to callers
that want one, built on first use.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...schemas import STORE_ENV
from . import cds
from .cds import ArchivePlan
from ..state import StateDir

log = logging.getLogger("cdcflow.engine.spark.session")

DEFAULT_MASTER = "local[*]"

_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} spark %p %c{1}: %m%n
# PySpark counts as a shell: Spark announces a "default log level" unless this matches the root
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
"""


#: The driver JVM only schedules tasks and carries counts (records stay in the Python
#: workers), so it is tuned for start-up: C1-only JIT (the C2 compiler threads compete with
#: the start-up for the cores) and the serial collector (no GC threads).
DRIVER_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


#: the Python worker daemon Spark starts on each executor (``daemon.py``)
DAEMON_MODULE = "cdcflow.engine.spark.daemon"


def resolve_master(cli_master: str | None, file_master: str | None) -> str:
    return cli_master or file_master or DEFAULT_MASTER


def parse_conf_pairs(pairs: list[str]) -> dict[str, str]:
    """``k=v`` strings from ``--conf``; a pair without ``=`` is a usage error."""
    conf: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf expects key=value, got {pair!r}")
        conf[key.strip()] = value
    return conf


@dataclass
class SessionInfo:
    context: Any  # pyspark.SparkContext: all the engine uses
    master: str
    startup_seconds: float
    owned: bool  # created here, so stopped here
    archive: ArchivePlan | None = None  # the driver JVM's class-data-sharing archive (cds.py)

    @property
    def spark(self) -> Any:
        """A ``pyspark.sql.SparkSession`` on this context, built on first use (costs seconds)."""
        from pyspark.sql import SparkSession

        return SparkSession.builder.getOrCreate()  # joins this (the active) context

    def stop(self) -> None:
        """Stop the context (and any session built on it) without idling on the accumulator server.

        PySpark's ``SparkContext.stop`` waits for its accumulator server thread, which polls
        for shutdown once a second: up to a second of every run spent sleeping. cdcflow uses
        no accumulators, so the server is told to stop and left to finish on its own
        (a daemon thread) while the context stops.
        """
        from pyspark.sql import SparkSession

        server = getattr(self.context, "_accumulatorServer", None)
        if server is not None:
            self.context._accumulatorServer = None  # keeps stop() from joining the polling thread
            server.server_shutdown = True  # its request handler leaves at its next poll
            threading.Thread(target=server.shutdown, name="cdcflow-accumulator-stop", daemon=True).start()
        session = SparkSession.getActiveSession()
        if session is not None and session.sparkContext is self.context:
            session.stop()
        else:
            self.context.stop()
        if self.archive is not None:
            from pyspark import SparkContext

            cds.finish(self.archive, SparkContext)


def base_conf(state: StateDir, master: str) -> dict[str, str]:
    """What every cdcflow session needs; user conf may override any of it."""
    log4j = state.local_dir / "log4j2.properties"
    if not log4j.exists() or log4j.read_text() != _LOG4J2:
        log4j.write_text(_LOG4J2)
    java_opts = f"-Dlog4j2.configurationFile={log4j}"
    return {
        "spark.app.name": "cdcflow",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        f"spark.executorEnv.{STORE_ENV}": str(state.schema_store_path),
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        # one partition is worked on by exactly one task at a time: no speculative copies
        "spark.speculation": "false",
        "spark.python.worker.reuse": "true",
        # PySpark's daemon with cdcflow's worker-side modules imported once, before it forks (daemon.py)
        "spark.python.daemon.module": DAEMON_MODULE,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": f"{java_opts} {DRIVER_JVM_OPTIONS}",
        "spark.executor.extraJavaOptions": java_opts,
    }


def start_session(master: str, conf: dict[str, str], state: StateDir) -> SessionInfo:
    """Start (or join) the Spark session for a run."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ[STORE_ENV] = str(state.schema_store_path)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # one INFO line per gateway call otherwise
    from pyspark import SparkContext

    active = SparkContext._active_spark_context  # a context (or session) the caller started
    if active is not None:
        log.info("joining the active Spark context (master %s)", active.master)
        return SessionInfo(active, active.master, 0.0, owned=False)
    started = time.monotonic()
    settings = {**base_conf(state, master), **conf}
    # the archive only matters when this start launches the JVM, with cdcflow's JVM options
    launches = SparkContext._gateway is None and "spark.driver.extraJavaOptions" not in conf
    archive = cds.plan(settings) if launches else None
    try:
        context = _new_context(master, settings, archive)
    except Exception:
        if archive is None or archive.pending is not None or SparkContext._gateway is not None:
            raise
        log.warning("the Spark JVM did not start with the class-data-sharing archive %s: retrying without it",
                    archive.path)
        cds.discard(archive)
        archive = None
        context = _new_context(master, settings, None)
    return SessionInfo(context, master, time.monotonic() - started, owned=True, archive=archive)


def _new_context(master: str, settings: dict[str, str], archive: ArchivePlan | None) -> Any:
    from pyspark import SparkConf, SparkContext

    spark_conf = SparkConf().setMaster(master)
    for key, value in settings.items():
        spark_conf.set(key, value)
    if archive is not None:
        spark_conf.set("spark.driver.extraJavaOptions", f"{settings['spark.driver.extraJavaOptions']} {archive.java_options}")
    context = SparkContext.getOrCreate(spark_conf)
    context.setLogLevel("ERROR")
    return context


def ship_plugins(info: SessionInfo, state: StateDir) -> list[Path]:
    from .ship import ship_plugins as _ship

    return _ship(info.context, state.local_dir / "ship")
