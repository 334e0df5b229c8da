"""Send → output latency of a streaming `cdcflow run`: kafka canal-json → ``file`` (issue 18).

Shared by the latency test (tests/engine/test_partition_groups.py) and
tests/benchmarks/bench_latency.py. Each message carries its send time (a column); the run's
output file is tailed, and a row's latency is the moment its line is seen minus its send time.
One run serves several phases (rates) in turn, so a measurement costs one Spark start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from cdcflow.connectors.ticdc.canal_json import CanalJsonEncoder, CanalJsonOptions
from cdcflow.connectors.ticdc.events import RowChange
from cdcflow.connectors.ticdc.tidb import Column, TableSchema
from helpers.kafka import create_topic, tso

REPO = Path(__file__).resolve().parents[2]
TABLE = TableSchema("lat", "events", (
    Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
    Column("sent_us", "BIGINT"),
))

PIPELINE = """version: "2.2"
{engine}pipelines:
  - id: lat
    status: running
    connectors:
      - id: in
        type: source
        plugin: builtin:kafka
        settings:
          uri: kafka://{servers}/{topic}?protocol=canal-json&enable-tidb-extension=true
          group.id: {group}
          read-from: earliest
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {out}
"""


@dataclass
class Phase:
    rate: float  # messages per second, over every partition
    seconds: float


@dataclass
class Latency:
    rate: float
    sent: int
    seen: int
    p50: float
    p99: float
    max: float

    def row(self, partitions: int) -> str:
        return (f"| {partitions} | {self.rate:,.0f} msg/s | {self.p50 * 1000:,.0f} ms | {self.p99 * 1000:,.0f} ms "
                f"| {self.max:.2f} s | {self.seen}/{self.sent} |")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class _Tail(threading.Thread):
    """Reads the output file as it grows: id → when its line was seen (and its send time)."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path, self.seen, self.order = path, {}, {}
        self._done = threading.Event()

    def run(self) -> None:
        rest, f = b"", None
        while not self._done.is_set():
            if f is None:
                try:
                    f = open(self.path, "rb")
                except FileNotFoundError:
                    time.sleep(0.005)
                    continue
            chunk = f.read()
            now = time.time()
            if not chunk:
                time.sleep(0.005)
                continue
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                after = json.loads(line)["payload"]["after"]
                i = int(after["id"])
                self.seen.setdefault(i, (now, int(after["sent_us"]) / 1e6))
                self.order.setdefault(i, len(self.order))
        if f is not None:
            f.close()

    def stop(self) -> None:
        self._done.set()
        self.join(5)


def _send(producer: Producer, enc: CanalJsonEncoder, topic: str, partitions: int, first: int, n: int) -> None:
    now = time.time()
    for i in range(first, first + n):
        ev = RowChange(TABLE, "insert", tso(int(now * 1000)), {"id": i, "sent_us": int(time.time() * 1e6)})
        producer.produce(topic, value=enc.encode(ev), key=str(i).encode(), partition=i % partitions)
    producer.poll(0)


def measure(servers: str, work: Path, partitions: int, phases: list[Phase], *, master: str = "local[2]",
            engine: str = "", python: str = sys.executable, repo: Path = REPO, settle: float = 30.0,
            start_timeout: float = 180.0, dump: Path | None = None) -> list[Latency]:
    """Latencies of each phase of a streaming run on a new ``partitions``-partition topic.

    The run is started, warmed up (one message per partition, until every one is seen), then
    each phase sends ``rate`` messages/s for ``seconds``, rows spread over the partitions;
    after the last phase the run gets ``settle`` seconds to write every row, then SIGTERM."""
    work.mkdir(parents=True, exist_ok=True)
    topic = f"lat-{uuid.uuid4().hex[:10]}"
    create_topic(servers, topic, partitions)
    out = work / "out.jsonl"
    cfg = work / "pipeline.yaml"
    cfg.write_text(PIPELINE.format(engine=engine, servers=servers, topic=topic, group=f"g-{topic}", out=out))
    log = open(work / "run.log", "wb")
    proc = subprocess.Popen([python, "-m", "cdcflow.cli", "run", str(cfg), "--master", master, "--state-dir",
                             str(work / "state")], stdout=log, stderr=subprocess.STDOUT, cwd=repo,
                            start_new_session=True)
    tail = _Tail(out)
    tail.start()
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 2, "enable.idempotence": True})
    enc = CanalJsonEncoder(CanalJsonOptions(enable_tidb_extension=True))
    results = []
    try:
        _send(producer, enc, topic, partitions, 0, partitions)  # warm-up: Spark starts, every partition opens
        producer.flush(30)
        deadline = time.monotonic() + start_timeout
        while len(tail.seen) < partitions:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the run did not start reading: {(work / 'run.log').read_text()[-3000:]}")
            time.sleep(0.05)
        first = partitions
        spans = []
        for ph in phases:
            n = int(ph.rate * ph.seconds)
            tick = 0.01 if ph.rate >= 100 else 1.0 / ph.rate
            per_tick = ph.rate * tick
            start, sent, due = time.monotonic(), 0, 0.0
            while sent < n:
                due += per_tick
                k = min(n - sent, int(due) - sent)
                if k > 0:
                    _send(producer, enc, topic, partitions, first + sent, k)
                    sent += k
                time.sleep(max(0.0, start + (sent / ph.rate) - time.monotonic()))
            producer.flush(30)
            spans.append((ph, first, n))
            first += n
        deadline = time.monotonic() + settle
        while len(tail.seen) < first and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        if dump is not None:  # every row: id, partition, send time, seen time (for a closer look)
            with open(dump, "w") as f:
                for i, (seen, sent) in sorted(tail.seen.items()):
                    f.write(f"{i},{i % partitions},{sent:.6f},{seen:.6f}\n")
        for ph, start_id, n in spans:
            got = [tail.seen[i][0] - tail.seen[i][1] for i in range(start_id, start_id + n) if i in tail.seen]
            results.append(Latency(ph.rate, n, len(got), percentile(got, 0.5), percentile(got, 0.99),
                                   max(got, default=float("nan"))))
    finally:
        tail.stop()
        stop(proc)
        log.close()
    return results


def stop(proc: subprocess.Popen, timeout: float = 60) -> int:
    """SIGTERM the run (it finishes its micro-batch and exits); SIGKILL its group if it does not."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    return proc.returncode
