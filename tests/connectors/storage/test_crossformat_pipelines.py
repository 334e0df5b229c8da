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

REPO = Path(__file__).resolve().parents[3]
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


# --------------------------------------------------------------------------- ENUM/SET: CSV -> canal-json
ENUM_COUNT = 300


def _csv_to_canal(tmp_path: Path, kafka_broker: str, topic: str, group: str, root: Path, tag: str) -> Path:
    """storage CSV (stop at its checkpoint) -> kafka canal-json content-compatible; the DLQ is a file."""
    dlq = tmp_path / f"dlq-{tag}.jsonl"
    cfg = tmp_path / f"csv-to-canal-{tag}.yaml"
    cfg.write_text(f"""\
version: "2.2"
pipelines:
  - id: csv-to-canal-{tag}
    connectors:
      - id: files
        type: source
        plugin: builtin:storage
        settings:
          uri: file://{root}?protocol=csv
          stop-at-checkpoint: "true"
      - id: bus
        type: destination
        plugin: builtin:kafka
        settings:
          uri: kafka://{kafka_broker}/{topic}?protocol=canal-json&content-compatible=true&enable-tidb-extension=true&partition-num=1
    dead-letter-queue:
      plugin: builtin:file
      settings:
        path: {dlq}
      window-size: 1000
      window-nack-threshold: 1000
""")
    _run(cfg, tmp_path / f"state-{tag}")
    return dlq


def _generate_csv(tmp_path: Path, root: Path) -> list[list[str]]:
    cfg = tmp_path / "gen-to-csv.yaml"
    cfg.write_text(f"""\
version: "2.2"
pipelines:
  - id: gen-to-csv
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          format.type: tidb
          recordCount: "{ENUM_COUNT}"
          partitions: "1"
          seed: "11"
      - id: store
        type: destination
        plugin: builtin:storage
        settings:
          uri: file://{root}?protocol=csv
""")
    _run(cfg, tmp_path / "state-gen")
    return _csv_rows(sorted(_table_dir(root).rglob("CDC*.csv")))


@pytest.mark.timeout(1200)
def test_storage_csv_enum_set_to_canal_json_content_compatible(tmp_path, kafka_broker, unique_name):
    from cdcflow.connectors.generator import all_types_columns

    names = [c.name for c in all_types_columns()]
    at = {n: 3 + names.index(n) for n in ("id", "c_enum", "c_set")}  # I/U/D, table, schema, then columns
    root = tmp_path / "csv"
    rows = _generate_csv(tmp_path, root)
    assert len(rows) == ENUM_COUNT
    sent = {int(r[at["id"]]): (r[at["c_enum"]], r[at["c_set"]]) for r in rows}
    assert {e for e, _ in sent.values()} - {r"\N"} <= {"red", "green", "blue"}

    # 1. the schema file written without a DDL carries no members: no index can be written, so each
    #    row goes to the DLQ naming table, column and value (nothing reaches Kafka with a made-up index)
    topic1 = f"{unique_name}-nomembers"
    dlq = _csv_to_canal(tmp_path, kafka_broker, topic1, unique_name, root, "nomembers")
    dead = [json.loads(line) for line in dlq.read_text().splitlines()]
    with_enum = [i for i, (e, s) in sent.items() if e not in (r"\N", "") or s not in (r"\N", "")]
    assert len(dead) == len(with_enum) > 0
    err = dead[0]["metadata"]["conduit.dlq.nack.error"]
    assert "cdcflow_gen.all_types" in err and ("c_enum" in err or "c_set" in err), err
    assert "elements are unknown" in err, err

    # 2. TiCDC writes the DDL that started a version as its schema file's Query: a CREATE TABLE
    #    defines the members (the checksum in the name does not cover Query, so the file stays valid)
    meta = _table_dir(root) / "meta"
    (schema_file,) = list(meta.iterdir())
    doc = json.loads(schema_file.read_text())
    doc["Query"] = ("CREATE TABLE `all_types` (`id` BIGINT PRIMARY KEY, `c_enum` ENUM('red','green','blue'), "
                    "`c_set` SET('a','b','c','d'))")
    doc["Type"] = 3
    schema_file.write_text(json.dumps(doc, indent=4))
    topic2 = f"{unique_name}-members"
    dlq2 = _csv_to_canal(tmp_path, kafka_broker, topic2, unique_name, root, "members")
    assert not dlq2.exists() or not dlq2.read_text().strip()

    # read back: kafka canal-json (content-compatible mysqlType carries the members) -> file
    out = tmp_path / "back.jsonl"
    cfg = tmp_path / "back.yaml"
    cfg.write_text(f"""\
version: "2.2"
pipelines:
  - id: back
    connectors:
      - id: bus
        type: source
        plugin: builtin:kafka
        settings:
          uri: kafka://{kafka_broker}/{topic2}?protocol=canal-json&enable-tidb-extension=true
          group.id: {unique_name}-back
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {out}
""")
    _run(cfg, tmp_path / "state-back")
    back = {}
    ddls = 0
    for line in out.read_text().splitlines():
        rec = json.loads(line)
        if rec["metadata"].get("cdcflow.control") == "ddl":  # the version's DDL travels too
            ddls += 1
            continue
        after = rec["payload"]["after"]
        back[int(after["id"])] = (after["c_enum"], after["c_set"])
    assert ddls == 1
    assert len(back) == len(sent)
    nul = lambda v: None if v == r"\N" else v  # noqa: E731 - CSV's NULL
    assert back == {i: (nul(e), nul(s)) for i, (e, s) in sent.items()}
