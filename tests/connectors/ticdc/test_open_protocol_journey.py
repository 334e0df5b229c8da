"""``cdcflow run``: open-protocol messages with type codes TiCDC does not write but its decoder
passes through (6 NULL, 14 NEWDATE, 225 vector) go from a real Kafka broker (Tansu) to a file."""

from __future__ import annotations

import datetime as dt
import struct
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from cdcflow.connectors.ticdc.events import RowChange, from_record
from cdcflow.convert.jsonform import loads_lines
from cdcflow.schemas import SchemaStore

REPO = Path(__file__).resolve().parents[3]

from helpers.kafka import create_topic

L = struct.Struct(">Q").pack

PIPELINE = """\
version: "2.2"
pipelines:
  - id: op
    connectors:
      - id: in
        type: source
        plugin: builtin:kafka
        settings:
          uri: kafka://{servers}/{topic}?protocol=open-protocol
          group.id: {topic}
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: "{out}"
"""


def message(ts: int, image: dict) -> tuple[bytes, bytes]:
    key = orjson.dumps({"ts": ts, "scm": "s", "tbl": "t", "t": 1})
    value = orjson.dumps({"u": image})
    return L(1) + L(len(key)) + key, L(len(value)) + value


@pytest.mark.slow
def test_pass_through_type_codes_reach_the_file(kafka_broker, unique_name, tmp_path):
    create_topic(kafka_broker, unique_name, 1)
    p = Producer({"bootstrap.servers": kafka_broker})
    for i, day in ((1, "2024-02-29"), (2, "2023-12-31")):
        key, value = message(449_000_000_000_000_000 + i, {
            "id": {"t": 3, "h": True, "f": 11, "v": i}, "n": {"t": 6, "f": 64, "v": None},
            "d": {"t": 14, "f": 64, "v": day}, "vec": {"t": 225, "f": 64, "v": f"[{i},0.5]"}})
        p.produce(unique_name, key=key, value=value, partition=0)
    assert p.flush(30) == 0
    out = tmp_path / "out.jsonl"
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(PIPELINE.format(servers=kafka_broker, topic=unique_name, out=out))
    proc = subprocess.run([sys.executable, "-m", "cdcflow.cli", "run", str(cfg), "--until-idle",
                           "--state-dir", str(tmp_path / "state")], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    store = SchemaStore(str(tmp_path / "state" / "schemas.sqlite"))
    events = [from_record(r, store) for r in loads_lines(out.read_bytes(), store)]
    assert [type(ev) for ev in events] == [RowChange, RowChange]
    assert [ev.row for ev in events] == [
        {"id": 1, "n": None, "d": dt.date(2024, 2, 29), "vec": "[1,0.5]"},
        {"id": 2, "n": None, "d": dt.date(2023, 12, 31), "vec": "[2,0.5]"}]
