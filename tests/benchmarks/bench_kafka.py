"""Kafka source throughput: cdcflow engine (local[2]) vs a hand-written confluent-kafka + fastavro loop.

    .venv/bin/python tests/benchmarks/bench_kafka.py [--rows 1000000]

Data: N TiCDC Avro rows (10 columns, extension on) in a 4-partition topic on the embedded
Tansu broker, produced in large batches (linger.ms=50, batch.num.messages=100000: Tansu returns
one record batch per fetch, so small batches make every consumer slow). Registry: cdcflow's
built-in schema store. Pipeline: kafka source → field.set → file destination, `cdcflow run
--until-idle` on local[2]. Baseline: one process, consumer assign() + fastavro
schemaless_reader + json lines written to a file. Prints records/s of both and the ratio.
First, per-record CPU of the kafka source alone (one partition, in this process, process_time)
against the same consume + fastavro loop: the figure that does not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import decimal
import io
import json
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from fastavro import parse_schema, schemaless_reader

from cdcflow.connectors.ticdc.avro import AvroEncoder, AvroOptions, StoreRegistry
from cdcflow.connectors.ticdc.events import RowChange
from cdcflow.dev.broker import Broker
from cdcflow.schemas import SchemaStore
from cdcflow.connectors.ticdc.tidb import Column, TableSchema
from timing import alternate, run_tree

PARTITIONS = 4
TABLE = TableSchema("bench", "rows", (
    Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
    Column("a", "INT"), Column("b", "BIGINT"), Column("c", "VARCHAR", length=32), Column("d", "VARCHAR", length=64),
    Column("e", "DOUBLE"), Column("f", "DECIMAL", precision=12, scale=2), Column("g", "DATE"),
    Column("h", "TINYINT"), Column("i", "TEXT"),
))

PIPELINE = """version: "2.2"
pipelines:
  - id: bench
    status: running
    connectors:
      - id: in
        type: source
        plugin: builtin:kafka
        settings:
          uri: kafka://{servers}/{topic}?protocol=avro&enable-tidb-extension=true
          group.id: {group}
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {out}
    processors:
      - id: tag
        plugin: field.set
        settings:
          field: .Metadata["bench"]
          value: "x"
    dead-letter-queue:
      plugin: builtin:log
"""


def copy_store(src: Path, dst: Path) -> None:
    """A consistent copy of a SQLite schema store (its WAL included)."""
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)


def produce(servers: str, topic: str, n: int, store: SchemaStore) -> None:
    admin = AdminClient({"bootstrap.servers": servers})  # keep a reference until the future resolves
    admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(15)
    enc = AvroEncoder(AvroOptions(enable_tidb_extension=True), StoreRegistry(store))
    p = Producer({"bootstrap.servers": servers, "linger.ms": 50, "batch.num.messages": 100000,
                  "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000})
    import datetime

    day = datetime.date(2024, 1, 1)
    for i in range(n):
        row = {"id": i, "a": i % 1000, "b": i * 7, "c": f"c{i}", "d": "d" * 40, "e": i / 3,
               "f": decimal.Decimal(i % 100000) / 100, "g": day, "h": i % 100, "i": "text"}
        k, v = enc.encode_one(RowChange(TABLE, "insert", (1_700_000_000_000 + i) << 18, row), topic)
        while True:
            try:
                p.produce(topic, key=k, value=v, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.1)
    p.flush(120)


def baseline(servers: str, topic: str, n: int, store: SchemaStore, out: Path) -> float:
    """Single process, by hand: consume, decode with fastavro, write JSON lines."""
    schemas: dict[int, object] = {}
    c = Consumer({"bootstrap.servers": servers, "group.id": "bench-baseline", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen = 0
    t0 = time.perf_counter()
    with open(out, "wb") as f:
        while seen < n:
            lines = []
            for m in c.consume(100000, 1.0):
                if m.error():
                    continue
                v = m.value()
                sid = int.from_bytes(v[1:5], "big")
                s = schemas.get(sid)
                if s is None:
                    s = schemas[sid] = parse_schema(json.loads(store.by_id(sid)[1]))
                rec = schemaless_reader(io.BytesIO(v[5:]), s, None)
                lines.append(json.dumps(rec, default=str))
                seen += 1
            f.write(("\n".join(lines) + "\n").encode() if lines else b"")
        f.flush()
        os.fsync(f.fileno())
    c.close()
    return n / (time.perf_counter() - t0)


def source_cpu(servers: str, topic: str, n: int, store: SchemaStore, repeat: int = 3) -> tuple[float, float]:
    """Per-record CPU (process_time, µs) of partition 0 read in this process: (kafka source
    ``read(10000)`` until drained, hand consume + fastavro loop), best of ``repeat``, interleaved."""
    from cdcflow.connectors.kafka.source import KafkaSource

    def ours() -> float:
        src = KafkaSource()
        src.configure({"uri": f"kafka://{servers}/{topic}?protocol=avro&enable-tidb-extension=true"})
        src.open(None, f"{topic}:0")
        try:
            got = len(src.read(1000))  # the first fetch waits for the broker: not timed
            t0 = time.process_time()
            while got < n:
                got += len(src.read(10000))
            return (time.process_time() - t0) / (n - 1000) * 1e6
        finally:
            src.teardown()

    schemas: dict[int, object] = {}

    def hand() -> float:
        c = Consumer({"bootstrap.servers": servers, "group.id": "bench-cpu", "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, 0)])
        try:
            got = len(c.consume(1000, 5.0))
            t0 = time.process_time()
            while got < n:
                out = []
                for m in c.consume(10000, 1.0):
                    v = m.value()
                    sid = int.from_bytes(v[1:5], "big")
                    s = schemas.get(sid)
                    if s is None:
                        s = schemas[sid] = parse_schema(json.loads(store.by_id(sid)[1]))
                    out.append(schemaless_reader(io.BytesIO(v[5:]), s, None))
                    got += 1
            return (time.process_time() - t0) / (n - 1000) * 1e6
        finally:
            c.close()

    a, b = [], []
    for _ in range(repeat):
        a.append(ours())
        b.append(hand())
    return min(a), min(b)


def engine(servers: str, topic: str, n: int, work: Path, extra_env: dict[str, str] | None = None
           ) -> tuple[float, float, float, float]:
    """(records/s over the whole wall time, wall seconds, records/s of the running part only,
    CPU seconds of the whole process tree: Spark's JVM and Python workers included)."""
    out = work / "engine.jsonl"
    out.unlink(missing_ok=True)
    cfg = work / "bench.yaml"
    run = len(list(work.glob("run-*")))  # each run reads the topic from the start: its own group and state
    state = work / f"run-{run}"
    state.mkdir()
    copy_store(work / "state" / "schemas.sqlite", state / "schemas.sqlite")  # the run's store is <state-dir>/schemas.sqlite
    cfg.write_text(PIPELINE.format(servers=servers, topic=topic, out=out, group=f"bench-{run}"))
    env = dict(os.environ, CDCFLOW_SCHEMA_STORE=str(work / "state" / "schemas.sqlite"), **(extra_env or {}))
    rc, stdout, stderr, wall, cpu = run_tree(
        [str(Path(sys.executable).with_name("cdcflow")), "run", str(cfg), "--until-idle", "--master", "local[2]",
         "--state-dir", str(state)], env)
    if rc != 0:
        raise SystemExit(f"cdcflow run failed ({rc}):\n{stdout[-2000:]}\n{stderr[-4000:]}")
    lines = sum(1 for _ in open(out, "rb"))
    if lines != n:
        raise SystemExit(f"engine wrote {lines} records, expected {n}")
    m = re.search(r"finished: ([0-9.]+)s running \+ ([0-9.]+)s Spark start-up", stdout + stderr)
    running = float(m.group(1)) if m else wall
    return n / wall, wall, n / running, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--source-only", action="store_true", help="only the in-process kafka source CPU figures")
    ap.add_argument("--compare-env", metavar="VAR=VALUE", help="engine runs only, interleaved with and without "
                    "this environment setting (e.g. CDCFLOW_KERNELS_OFF=_jsonform), --repeat times each")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    (work / "state").mkdir()
    store = SchemaStore(work / "state" / "schemas.sqlite")  # the run's store: the engine decodes with it
    broker = Broker().start()
    try:
        topic = "bench-rows"
        t0 = time.perf_counter()
        produce(broker.bootstrap_servers, topic, args.rows, store)
        print(f"produced {args.rows} rows in {time.perf_counter() - t0:.1f}s "
              "(linger.ms=50, batch.num.messages=100000, 4 partitions)")
        os.environ["CDCFLOW_SCHEMA_STORE"] = str(work / "state" / "schemas.sqlite")  # the source's registry
        per_partition = (args.rows + PARTITIONS - 1) // PARTITIONS
        src_us, hand_us = source_cpu(broker.bootstrap_servers, topic, per_partition, store)
        print(f"in-process CPU per record, partition 0 ({per_partition} rows, best of 3): kafka source "
              f"{src_us:.2f} µs, hand consume+fastavro {hand_us:.2f} µs (ratio {src_us / hand_us:.2f})")
        if args.compare_env:
            alternate(args.compare_env, args.repeat,
                      lambda extra: engine(broker.bootstrap_servers, topic, args.rows, work, extra)[1::2])
            return
        if args.source_only:
            return
        base = baseline(broker.bootstrap_servers, topic, args.rows, store, work / "baseline.jsonl")
        rate, wall, steady, cpu = engine(broker.bootstrap_servers, topic, args.rows, work)
        print(f"{'path':<50}{'records/s':>12}{'ratio':>8}")
        print(f"{'hand loop (confluent-kafka + fastavro, 1 proc)':<50}{base:>12,.0f}{1:>8.2f}")
        print(f"{'cdcflow run, local[2] (wall incl. Spark start)':<50}{rate:>12,.0f}{rate / base:>8.2f}")
        print(f"{'cdcflow run, local[2] (running part only)':<50}{steady:>12,.0f}{steady / base:>8.2f}")
        print(f"engine wall {wall:.1f}s, cpu {cpu:.1f}s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
