"""Cross-format journeys into and out of the storage layout, through ``cdcflow run`` on the real
Tansu broker and the built-in schema registry.

- TiCDC Avro with deletes -> storage CSV: an Avro DELETE is a tombstone with the key only; it must
  land in the table version of the rows around it (a version changes only at a DDL) and carry a
  real commit ts (never 0: no ``1970-01-01`` date directory).
- storage CSV -> Kafka canal-json (content-compatible) -> back: ENUM/SET values travel as element
  names in CSV and as indexes in canal-json; where the schema file's DDL defines the elements
  they round-trip, where nothing carries them each record goes to the DLQ naming table, column
  and value (never a silently wrong index).
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cdcflow.connectors.storage import layout

REPO = Path(__file__).resolve().parents[2]
COUNT = 3000

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _run(cfg: Path, state: Path, timeout: float = 420) -> str:
    proc = subprocess.run([sys.executable, "-m", "cdcflow.cli", "run", str(cfg), "--until-idle",
                           "--master", "local[2]", "--state-dir", str(state)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return proc.stdout


def _table_dir(root: Path) -> Path:
    schema_dirs = [d for d in root.iterdir() if d.is_dir()]
    assert [d.name for d in schema_dirs] == ["cdcflow_gen"], schema_dirs
    return schema_dirs[0] / "all_types"


def _csv_rows(files: list[Path]) -> list[list[str]]:
    out = []
    for f in files:
        out.extend(csv.reader(io.StringIO(f.read_text(encoding="utf-8"), newline="")))
    return out


def test_avro_deletes_to_storage_csv_one_version_real_commit_ts(tmp_path, kafka_broker, schema_registry,
                                                                unique_name):
    prefix = unique_name.replace("-", "_")
    root = tmp_path / "out"
    to_kafka = tmp_path / "to-kafka.yaml"
    to_kafka.write_text(f"""\
version: "2.2"
pipelines:
  - id: to-kafka
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          format.type: tidb
          operations: create,update,delete
          recordCount: "{COUNT}"
          partitions: "1"
          seed: "7"
      - id: avro
        type: destination
        plugin: builtin:kafka
        settings:
          uri: kafka://{kafka_broker}/{prefix}_{{schema}}_{{table}}?protocol=avro&enable-tidb-extension=true&partition-num=1
          schema-registry: {schema_registry}
""")
    _run(to_kafka, tmp_path / "state1")
    to_storage = tmp_path / "to-storage.yaml"
    to_storage.write_text(f"""\
version: "2.2"
pipelines:
  - id: to-storage
    connectors:
      - id: in
        type: source
        plugin: builtin:kafka
        settings:
          uri: kafka://{kafka_broker}/{prefix}_cdcflow_gen_all_types?protocol=avro&enable-tidb-extension=true
          schema-registry: {schema_registry}
          group.id: {unique_name}
      - id: store
        type: destination
        plugin: builtin:storage
        settings:
          uri: file://{root}?protocol=csv&include-commit-ts=true
    dead-letter-queue:
      plugin: builtin:log
      window-size: 1
      window-nack-threshold: 0
""")
    _run(to_storage, tmp_path / "state2")

    table = _table_dir(root)
    versions = sorted(d.name for d in table.iterdir() if d.is_dir() and d.name != "meta")
    schema_files = sorted(p.name for p in (table / "meta").iterdir())
    # no DDL in the stream: one table version, one schema file (the old code made one per delete)
    assert len(versions) == 1, versions[:10]
    assert len(schema_files) == 1, schema_files[:10]
    dates = sorted(d.name for d in (table / versions[0]).iterdir() if d.is_dir())
    assert "1970-01-01" not in dates, dates
    files = sorted((table / versions[0]).rglob("CDC*.csv"))
    rows = _csv_rows(files)
    assert len(rows) == COUNT
    ncols = len(rows[0])
    assert all(len(r) == ncols for r in rows)  # a key-only delete is written with every column
    deletes = [r for r in rows if r[0] == "D"]
    assert len(deletes) > 100
    commit_ts = [int(r[3]) for r in rows]
    assert min(commit_ts) > 0
    # a delete's commit ts is a lower bound from the rows before it: the file order stays monotonic
    assert commit_ts == sorted(commit_ts)
    # each delete is filed under the date of its commit ts
    for r in deletes:
        ts = int(r[3])
        assert any(f.parent.name == layout.date_dir(ts, "day") for f in files)
    # the columns the key does not carry are NULL (\N), the key is there
    assert all(r[5] == r"\N" for r in deletes)
    assert all(r[4] not in ("", r"\N") for r in deletes)
