"""The Python workers' start-up: cdcflow's preloading daemon and the task timeline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdcflow.engine.spark.daemon import bundled_zips_to_drop
from cdcflow.engine.runner import run_files
from cdcflow.engine.spark.session import DAEMON_MODULE, base_conf
from cdcflow.engine.state import StateDir

from helpers.engine import write_pipeline

PYTHON = sys.executable


def test_only_the_zips_inside_the_installed_pyspark_are_dropped(tmp_path):
    installed = tmp_path / "site" / "pyspark"
    bundled = installed / "python" / "lib"
    other_home = tmp_path / "spark-home" / "python" / "lib"
    for d in (bundled, other_home):
        d.mkdir(parents=True)
    path = [
        str(bundled / "pyspark.zip"),
        str(bundled / "py4j-0.10.9.9-src.zip"),
        str(other_home / "pyspark.zip"),  # a separate SPARK_HOME: may be another PySpark
        str(bundled / "extra.zip"),  # not one of Spark's archives
        str(tmp_path / "site"),
    ]
    assert bundled_zips_to_drop(path, str(installed)) == path[:2]
    assert bundled_zips_to_drop(path, None) == []


def test_daemon_preload_imports_from_compiled_pyspark_without_threads(tmp_path):
    """What Spark does: PYTHONPATH starts with the bundled pyspark.zip; the daemon drops it,
    imports the worker-side modules once and freezes them, and starts no thread."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = sorted(str(p) for p in lib.glob("*.zip"))
    if not any(z.endswith("pyspark.zip") for z in zips):
        pytest.skip("this PySpark install has no bundled pyspark.zip")
    probe = (
        "import gc, sys, threading\n"
        "from cdcflow.engine.spark import daemon\n"
        "dropped = daemon.use_installed_pyspark()\n"
        "modules = daemon.preload()\n"
        "import pyspark\n"
        "print(repr((dropped, modules, pyspark.__file__, 'pyspark.worker' in sys.modules,\n"
        "            'cdcflow.engine.task' in sys.modules, daemon.thread_count(), gc.get_freeze_count() > 0)))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(zips + [os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, env=env, timeout=120, check=True)
    dropped, modules, pyspark_file, worker, task, threads, frozen = eval(out.stdout.strip().splitlines()[-1])
    assert sorted(dropped) == zips
    assert ".zip" not in pyspark_file
    assert "cdcflow.connectors.builtin" in modules and "cdcflow.transforms.builtin" in modules
    assert worker and task and frozen
    assert threads == 1  # native threads included


def test_a_failed_preload_still_runs_pysparks_daemon(monkeypatch, capsys):
    """A preload that raises (faked: no real import of ours fails on demand) must not keep the
    daemon from serving; workers then import for themselves. PySpark's manager is replaced
    by a recorder so the test does not start serving on stdin."""
    import pyspark.daemon

    from cdcflow.engine.spark import daemon

    def broken_preload():
        raise ImportError("a plugin module that cannot be imported")

    served = []
    monkeypatch.setattr(daemon, "preload", broken_preload)
    monkeypatch.setattr(pyspark.daemon, "manager", lambda: served.append(True))
    daemon.main()
    assert served == [True]
    err = capsys.readouterr().err
    assert "preloading failed" in err and "a plugin module that cannot be imported" in err


def test_sessions_use_the_preloading_daemon(tmp_path):
    conf = base_conf(StateDir(tmp_path).create(), "local[1]")
    assert conf["spark.python.daemon.module"] == DAEMON_MODULE == "cdcflow.engine.spark.daemon"


@pytest.mark.spark
def test_workers_are_forked_by_cdcflows_daemon(spark):
    def probe(_):
        import pyspark

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            parent = f.read().replace(b"\0", b" ").decode()
        return [(parent, pyspark.__file__)]

    for parent, pyspark_file in spark.parallelize(range(2), 2).mapPartitions(probe).collect():
        assert "-m cdcflow.engine.spark.daemon" in parent
        assert ".zip" not in pyspark_file  # PySpark's bytecode, not the sources in Spark's zip


PIPELINE = """\
version: "2.2"
pipelines:
  - id: timeline
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          format.type: structured
          format.options.id: int
          recordCount: "300"
          partitions: "2"
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: "{out}"
"""


@pytest.mark.spark
def test_tasks_report_where_their_wall_time_went(spark, tmp_path, monkeypatch):
    from cdcflow.engine import driver as driver_module

    seen = []
    inner = driver_module._spark_job

    def recording(sc, ctx, tasks, *rest):
        stats = inner(sc, ctx, tasks, *rest)
        seen.extend(stats)
        return stats

    monkeypatch.setattr(driver_module, "_spark_job", recording)
    path = write_pipeline(tmp_path / "p.yaml", PIPELINE.format(out=tmp_path / "out.jsonl"))
    outcome = run_files([str(path)], until_idle=True, progress=False, state_dir=str(tmp_path / "state"),
                        out=open(os.devnull, "w"))
    assert outcome.exit_code == 0, outcome.failures
    reading = [s for s in seen if s.read]
    assert sum(s.read for s in reading) == 300 and len(reading) == 2
    for s in reading:
        steps = [step for step, _ in s.timeline]
        assert steps == ["daemon", "worker", "task", "registry", "pipeline", "source", "first-batch", "work", "end"]
        times = [at for _, at in s.timeline]
        # the daemon started before it forked the worker, and so on (process start times from
        # /proc are good to a clock tick or two)
        assert all(later >= earlier - 0.05 for earlier, later in zip(times, times[1:])), s.timeline
        assert s.pid != os.getpid() and s.timeline[-1][1] - s.timeline[2][1] <= s.seconds + 0.05
        assert 0 < s.process_cpu_at_source  # the worker's CPU since its fork, read when the source was open


def test_the_run_command_imports_prometheus_only_for_a_metrics_port():
    probe = ("import sys, cdcflow.cli\ncdcflow.cli.build_parser()\nimport cdcflow.engine.runner\n"
             "print('prometheus_client' in sys.modules)")
    out = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
