"""A pipeline on a standalone Spark master + worker started by the test, with a
pluggy-registered third-party transform installed with ``pip --target`` into a
directory only the driver sees (PYTHONPATH of the driver process): the engine must
ship it to the executors (zip of the package + its .dist-info)."""

from __future__ import annotations

import os
import subprocess
import textwrap

import pytest

from helpers.engine import PLUGIN_PKG, PYTHON, REPO, write_pipeline
from helpers.spark_cluster import StandaloneCluster

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


@pytest.fixture
def standalone_cluster(tmp_path):
    cluster = StandaloneCluster(tmp_path)
    try:
        url = cluster.start_master()
        cluster.add_worker(cores=2, memory="1g", private=False)
        yield url, cluster.env
    finally:
        cluster.stop()


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
