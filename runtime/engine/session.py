"""The Spark session a run executes on.

Master: ``--master`` > the pipeline file's ``engine.master`` > ``local[*]``.
Configuration: the file's ``engine.conf`` then ``--conf k=v`` pairs (later wins).
Workers run the driver's own Python executable so cdcflow and the plugins installed
beside it import there; plugins from elsewhere are shipped (``ship.py``). Spark's
JVM logging is turned down to errors: cdcflow reports progress itself.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..schemas import STORE_ENV
from .state import StateDir

log = logging.getLogger("cdcflow.engine.session")

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
    spark: object  # pyspark.sql.SparkSession
    master: str
    startup_seconds: float
    owned: bool  # created here, so stopped here


def base_conf(state: StateDir, master: str) -> dict[str, str]:
    """What every cdcflow session needs; user conf may override any of it."""
    log4j = state.root / "log4j2.properties"
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
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
    }


def start_session(master: str, conf: dict[str, str], state: StateDir) -> SessionInfo:
    """Start (or join) the Spark session for a run."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ[STORE_ENV] = str(state.schema_store_path)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # one INFO line per gateway call otherwise
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        log.info("joining the active Spark session (master %s)", active.sparkContext.master)
        return SessionInfo(active, active.sparkContext.master, 0.0, owned=False)
    started = time.monotonic()
    builder = SparkSession.builder.master(master)
    for key, value in {**base_conf(state, master), **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return SessionInfo(spark, master, time.monotonic() - started, owned=True)


def ship_plugins(info: SessionInfo, state: StateDir) -> list[Path]:
    from .ship import ship_plugins as _ship

    return _ship(info.spark.sparkContext, state.root / "ship")
