"""A class-data-sharing (AppCDS) archive for the driver JVM: a faster Spark start-up.

Starting Spark loads some 10 000 classes; the JVM can map them from an archive
instead of parsing and verifying them again at every start. Java 17 cannot create the archive on the fly while using it,
so the first run on a machine *writes* one (``-XX:ArchiveClassesAtExit``) and later
runs *use* it (``-XX:SharedArchiveFile``).

Safety: a truncated archive crashes the JVM, so an archive is only ever written to a
private temporary name, and renamed into place by the run that started that JVM,
after it shut the JVM down itself and saw it exit cleanly. A JVM that dies any other
way (the run was killed) leaves its temporary file behind; stale ones are deleted
later. A JVM that then still cannot start with the archive (it got damaged) is
retried once without it and the archive is removed (``session.start_session``).
Mismatches the JVM detects itself (another Java, another class path) make it ignore
the archive quietly. ``CDCFLOW_SPARK_CDS=0`` turns all of this off; the archives
live in ``$CDCFLOW_CACHE_DIR`` (default ``$XDG_CACHE_HOME/cdcflow`` or ``~/.cache/cdcflow``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

log = logging.getLogger("cdcflow.engine.spark.cds")

CDS_ENV = "CDCFLOW_SPARK_CDS"
CACHE_ENV = "CDCFLOW_CACHE_DIR"
#: a temporary archive older than this belongs to a run that was killed
STALE_SECONDS = 600
#: how long a run waits for its JVM to write the archive and exit
EXIT_TIMEOUT = 60.0
#: class-path settings: another value gives another archive (the JVM would refuse the old one)
_CLASSPATH_KEYS = ("spark.jars", "spark.jars.packages", "spark.driver.extraClassPath")
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


@dataclass
class ArchivePlan:
    """What one JVM start does with the archive: use ``path``, or write ``pending`` for ``path``."""

    path: Path
    pending: Path | None = None  # temporary file the JVM writes at exit (None: the archive is used)

    @property
    def java_options(self) -> str:
        if self.pending is not None:
            return f"-XX:ArchiveClassesAtExit={self.pending} {_QUIET}"
        # a crash report from a damaged archive goes beside it, not into the user's directory
        error_file = self.path.parent / "hs_err_pid%p.log"
        return f"-XX:SharedArchiveFile={self.path} -XX:ErrorFile={error_file} {_QUIET}"


def cache_dir() -> Path:
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cdcflow"


def enabled() -> bool:
    return os.environ.get(CDS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _archive_key(conf: Mapping[str, str]) -> str:
    """Java binary, Spark version and class-path settings: what the archive is only valid for."""
    import pyspark

    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")
    java_id = ""
    if java:
        real = os.path.realpath(java)
        try:
            java_id = f"{real}:{os.stat(real).st_mtime_ns}"
        except OSError:
            java_id = real
    parts = [java_id, pyspark.__version__, os.path.dirname(pyspark.__file__)]
    parts += [f"{k}={conf.get(k, '')}" for k in _CLASSPATH_KEYS]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def plan(conf: Mapping[str, str]) -> ArchivePlan | None:
    """The archive to use for a JVM started with ``conf``, or a temporary one to write (None: off)."""
    if not enabled():
        return None
    try:
        directory = cache_dir() / "spark-cds"
        directory.mkdir(parents=True, exist_ok=True)
        _remove_stale(directory)
        path = directory / f"driver-{_archive_key(conf)}.jsa"
        if path.is_file() and path.stat().st_size > 0:
            return ArchivePlan(path)
        return ArchivePlan(path, directory / f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    except OSError as e:  # a read-only home is no reason to fail a run
        log.debug("no class-data-sharing archive: %s", e)
        return None


def _remove_stale(directory: Path) -> None:
    now = time.time()
    for tmp in [*directory.glob("*.tmp"), *directory.glob("hs_err_pid*.log")]:
        try:
            if now - tmp.stat().st_mtime > STALE_SECONDS:
                tmp.unlink()
        except OSError:
            pass


def discard(archive: ArchivePlan) -> None:
    """The JVM did not start with this archive: remove it so the next run writes a new one."""
    for p in (archive.path, archive.pending):
        if p is not None:
            try:
                p.unlink(missing_ok=True)
            except OSError:
                pass


def finish(archive: ArchivePlan, context_class: Any) -> None:
    """After ``SparkContext.stop``: if this JVM writes the archive, shut it down and publish it.

    The gateway JVM exits when its stdin closes; it writes the archive while exiting.
    PySpark keeps the gateway for later contexts of this process, so it is forgotten
    here: the next context starts a new JVM (which then uses the archive).
    """
    if archive.pending is None:
        return
    gateway = getattr(context_class, "_gateway", None)
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return
    try:
        gateway.shutdown()
    except Exception:  # noqa: BLE001 - the JVM side is being closed anyway
        log.debug("py4j gateway shutdown failed", exc_info=True)
    context_class._gateway = None
    context_class._jvm = None
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        code = proc.wait(timeout=EXIT_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.debug("driver JVM did not exit cleanly (%s): class-data-sharing archive not kept", e)
        return
    pending = archive.pending
    if code == 0 and pending.is_file() and pending.stat().st_size > 0:
        os.replace(pending, archive.path)
        log.info("wrote the Spark class-data-sharing archive %s", archive.path)
    else:
        pending.unlink(missing_ok=True)
