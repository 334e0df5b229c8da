"""Kafka pipeline helpers shared by the kafka tests: TiCDC Avro rows produced, `cdcflow run` subprocesses, offsets."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
from cdcflow.connectors.ticdc.avro import AvroEncoder, AvroOptions
from cdcflow.connectors.ticdc.events import RowChange
from cdcflow.schemaregistry.client import RegistryClient
from confluent_kafka import Consumer, Producer, TopicPartition

from helpers.kafka import ORDERS, raw_messages, row, tso

REPO = Path(__file__).resolve().parents[2]
OPTIONS = AvroOptions(enable_tidb_extension=True)


def produce(servers: str, registry: str, topic: str, events: list[tuple[int, RowChange]]) -> None:
    """(partition, row) pairs as TiCDC Avro messages, in order, idempotent producer."""
    enc = AvroEncoder(OPTIONS, RegistryClient(registry))
    p = Producer({"bootstrap.servers": servers, "enable.idempotence": True, "linger.ms": 20})
    for part, ev in events:
        key, value = enc.encode_one(ev, topic)
        p.produce(topic, key=key, value=value, partition=part)
        p.poll(0)
    assert p.flush(30) == 0


def orders(ids, ts_base: int = 1000) -> list[RowChange]:
    return [row(ORDERS, i, tso(ts_base + i)) for i in ids]


def pipeline_file(tmp: Path, text: str) -> Path:
    path = tmp / "pipeline.yaml"
    path.write_text(text)
    return path


def source_yaml(servers: str, registry: str, topic: str, group: str) -> str:
    return f"""      - id: in
        type: source
        plugin: builtin:kafka
        settings:
          uri: kafka://{servers}/{topic}?protocol=avro&enable-tidb-extension=true
          schema-registry: {registry}
          group.id: {group}
"""


def kafka_to_file(tmp: Path, servers: str, registry: str, topic: str, group: str, out: Path, pid: str,
                  batch: int | None = None) -> Path:
    """A pipeline file: ``topic`` (Avro, extension on) into the JSON-lines file ``out``."""
    engine = f"engine:\n  batch-size: {batch}\n" if batch else ""
    return pipeline_file(tmp, f"""version: "2.2"
{engine}pipelines:
  - id: {pid}
    status: running
    connectors:
{source_yaml(servers, registry, topic, group)}      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {out}
""")


def start_run(cfg: Path, state: Path) -> subprocess.Popen:
    """`cdcflow run --until-idle` in its own session (so the whole tree can be killed at once)."""
    return subprocess.Popen([sys.executable, "-m", "cdcflow.cli", "run", str(cfg), "--until-idle",
                             "--master", "local[2]", "--state-dir", str(state)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float = 180) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-4000:]
    return out


def run_to_end(cfg: Path, state: Path) -> str:
    return finish(start_run(cfg, state))


def lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_bytes().splitlines()]


def ids(path: Path) -> list[int]:
    return [rec["key"]["id"] for rec in lines(path)]


def kill_when(proc: subprocess.Popen, out: Path, at_least: int, timeout: float = 120) -> int:
    """SIGKILL the run's process group once ``out`` has ``at_least`` lines; returns the count then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = sum(1 for _ in open(out, "rb")) if out.exists() else 0
        if n >= at_least:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            _wait_group_gone(proc.pid)
            return n
        if proc.poll() is not None:
            pytest.fail(f"run ended before it could be killed at {at_least} lines (had {n}): "
                        f"{proc.stdout.read()[-3000:]}")
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail(f"no {at_least} lines within {timeout}s")


def _wait_group_gone(pgid: int, timeout: float = 15) -> None:
    """Until every process of the killed run (Spark's Python workers too) is gone: one still
    dying could write a state file after the test went on to delete the state."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def committed(servers: str, group: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": servers, "group.id": group})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)]
    finally:
        c.close()


def end_offsets(servers: str, topic: str, partitions: int) -> list[int]:
    """Offset after each partition's last message, counted by reading (Tansu 0.6 reports the
    high watermark as the last record *batch*'s base offset + 1, so it cannot be asked)."""
    last = [-1] * partitions
    for m in raw_messages(servers, topic, idle=0.5):
        last[m.partition()] = max(last[m.partition()], m.offset())
    return [x + 1 for x in last]


def saved_offsets(state: Path, pipeline_id: str) -> dict[int, int]:
    """Kafka partition -> next offset the saved position of source ``in`` continues at (row mode)."""
    out = {}
    for f in (state / "positions" / pipeline_id / "in").glob("*.json"):
        pos = json.loads(f.read_text())["position"]
        if pos is not None:  # file name: the engine partition "topic:N", URL-quoted
            out[int(urllib.parse.unquote(f.stem).rsplit(":", 1)[1])] = json.loads(base64.b64decode(pos))[1]
    return out
