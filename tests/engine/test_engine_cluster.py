"""A pipeline on a standalone Spark master + worker started by the test, with a
pluggy-registered third-party transform installed with ``pip --target`` into a
directory only the driver sees (PYTHONPATH of the driver process): the engine must
ship it to the executors (zip of the package + its .dist-info)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers.engine import PLUGIN_PKG, PYTHON, REPO, write_pipeline

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TRANSFORM_SRC = '''
"""A third-party transform: upper-cases .Payload.After.name."""
import pluggy
from cdcflow.sdk import Transform

hookimpl = pluggy.HookimplMarker("cdcflow")


class Upper(Transform):
    name = "test.upper"
    version = "v1.0.0"
    summary = "upper-cases Payload.After.name"

    def process_record(self, record):
        record.after["name"] = record.after["name"].upper()
        return record


@hookimpl
def cdcflow_transforms():
    return [Upper]
'''

PYPROJECT = '''
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "cdcflow-upper-transform"
version = "1.0.0"

[project.entry-points.cdcflow]
upper = "cdcflow_upper"

[tool.setuptools]
py-modules = ["cdcflow_upper"]
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[1]} exited: {path.read_text(errors='replace')[-2000:]}")
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {text!r}: {path.read_text(errors='replace')[-2000:]}")


@pytest.fixture
def standalone_cluster(tmp_path):
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["SPARK_HOME"] = str(spark_home)
    env["PYSPARK_PYTHON"] = sys.executable
    port = _free_port()
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    procs = []
    try:
        with open(master_log, "w") as out:
            procs.append(subprocess.Popen(
                [str(spark_home / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
                 "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(_free_port())],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        _wait_for(master_log, "I have been elected leader", procs[0], 90)
        url = f"spark://127.0.0.1:{port}"
        with open(worker_log, "w") as out:
            procs.append(subprocess.Popen(
                [str(spark_home / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker", url,
                 "--host", "127.0.0.1", "--cores", "2", "--memory", "1g", "--webui-port", str(_free_port()),
                 "--work-dir", str(tmp_path / "work")],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        _wait_for(worker_log, "Successfully registered with master", procs[1], 90)
        yield url, env
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def test_pipeline_on_standalone_cluster_with_shipped_third_party_transform(tmp_path, standalone_cluster):
    url, worker_env = standalone_cluster
    src = tmp_path / "upper-src"
    src.mkdir()
    (src / "pyproject.toml").write_text(PYPROJECT)
    (src / "cdcflow_upper.py").write_text(TRANSFORM_SRC)
    site = tmp_path / "site"
    subprocess.run([PYTHON, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(src)], check=True, timeout=180)
    # the worker's Python really cannot import it on its own
    probe = subprocess.run([PYTHON, "-c", "import cdcflow_upper"], env=worker_env, capture_output=True)
    assert probe.returncode != 0

    path = write_pipeline(tmp_path / "cluster.yaml", textwrap.dedent("""\
        version: "2.2"
        engine:
          batch-size: 200
        pipelines:
          - id: c
            connectors:
              - id: gen
                type: source
                plugin: builtin:generator
                settings:
                  format.type: structured
                  format.options.id: int
                  format.options.name: string
                  recordCount: "2000"
                  partitions: "2"
              - id: rec
                type: destination
                plugin: test-recorder
                settings:
                  path: ${CDCFLOW_FILE_DIR}/out.bin
            processors:
              - id: up
                plugin: test.upper
        """))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(PLUGIN_PKG)])  # the driver only
    res = subprocess.run([PYTHON, "-m", "cdcflow.cli", "run", str(path), "--master", url, "--until-idle"],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    from cdcflow_engine_testplugins import read_records

    records = read_records(tmp_path / "out.bin")
    assert len(records) == 2000
    assert all(r.after["name"] == r.after["name"].upper() and r.after["name"] for r in records)
    assert any(ch.isalpha() for r in records for ch in r.after["name"])
    assert sorted(r.position for r in records) == sorted(f"{p}/{s}".encode() for p in (0, 1) for s in range(1000))
