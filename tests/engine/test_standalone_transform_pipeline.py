"""A standalone transform executable (transform/v1 over gRPC) inside a Spark pipeline:
started by the executors, records changed, filtered and failed (to the DLQ) per record."""

from __future__ import annotations

import stat
import sys
import textwrap
from pathlib import Path

import pytest

from cdcflow.convert.jsonform import loads_lines
from cdcflow.schemas import SchemaStore

from helpers.engine import cli, write_pipeline

pytestmark = pytest.mark.spark

TRANSFORM = """\
#!{python}
import sys
from cdcflow.sdk import FILTERED, Failed, Transform
from cdcflow.standalone.server import serve

class Shout(Transform):
    name = "shout"
    version = "v1.0.0"
    summary = "upper-cases .Payload.After.name; drops ids divisible by 5; fails multiples of 7"

    def process_record(self, record):
        rid = record.after["id"]
        if rid % 5 == 0:
            return FILTERED
        if rid % 7 == 0:
            return Failed("multiples of seven are not allowed")
        out = record.copy()
        out.after["name"] = out.after["name"].upper()
        out.metadata["shout.pid"] = str(__import__("os").getpid())
        return out

sys.exit(serve(Shout))
"""

PIPELINE = """\
version: "2.2"
engine:
  master: local[2]
pipelines:
  - id: shout
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          format.type: structured
          format.options.id: int
          format.options.name: string
          recordCount: "40"
          partitions: "2"
          seed: "3"
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: ${{CDCFLOW_FILE_DIR}}/out.jsonl
    processors:
      - id: sh
        plugin: standalone:shout
    dead-letter-queue:
      plugin: builtin:file
      settings:
        path: ${{CDCFLOW_FILE_DIR}}/dlq.jsonl
      window-size: 0
"""


def test_standalone_transform_runs_inside_spark_partitions(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    exe = plugins / "shout"
    exe.write_text(TRANSFORM.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    path = write_pipeline(tmp_path / "p.yaml", PIPELINE.format())
    res = cli(["--plugins-dir", str(plugins), "run", str(path), "--until-idle"], timeout=300)
    assert res.returncode == 0, res.stderr

    store_path = tmp_path / ".cdcflow" / "schemas.sqlite"
    store = SchemaStore(store_path) if store_path.exists() else None
    out = loads_lines((tmp_path / "out.jsonl").read_bytes(), store)
    dlq = loads_lines((tmp_path / "dlq.jsonl").read_bytes(), store)

    generated = _generated({"format.type": "structured", "format.options.id": "int",
                            "format.options.name": "string", "recordCount": "40", "partitions": "2", "seed": "3"})
    kept = [r for r in generated if r.after["id"] % 5 != 0]
    want_out = sorted((r.after["id"], r.after["name"].upper()) for r in kept if r.after["id"] % 7 != 0)
    want_dlq = sorted(r.after["id"] for r in kept if r.after["id"] % 7 == 0)
    assert sorted((r.after["id"], r.after["name"]) for r in out) == want_out
    assert sorted(r.after["id"] for r in dlq) == want_dlq
    for r in dlq:
        assert "multiples of seven" in r.metadata["conduit.dlq.nack.error"]
        assert r.metadata["conduit.dlq.nack.node.id"] == "sh"
    # the transform ran in plugin processes started for the executors, not in this one
    assert all(r.metadata["shout.pid"] != str(__import__("os").getpid()) for r in out)


def _generated(settings: dict[str, str]) -> list:
    """The generator's records, read without the engine (the expectation)."""
    from cdcflow.registry import load_registry

    info = load_registry().connector("builtin:generator")
    config = info.validate("source", settings)
    out = []
    probe = info.new_source()
    probe.configure(config)
    for part in probe.partitions():
        src = info.new_source()
        src.configure(config)
        src.open(None, part)
        while (batch := src.read(1000)) is not None:
            out.extend(batch)
    return out
