"""Kafka source throughput: cdcflow engine (local[2]) vs a hand-written confluent-kafka + fastavro loop.

    .venv/bin/python tests/benchmarks/bench_kafka.py [--rows 1000000] [--protocol avro|canal-json|open-protocol]
                                                     [--engine-only] [--sink]

Data: N TiCDC Avro rows (10 columns, extension on) in a 4-partition topic on the embedded
Tansu broker, produced in large batches (linger.ms=50, batch.num.messages=100000: Tansu returns
one record batch per fetch, so small batches make every consumer slow). Registry: cdcflow's
built-in schema store. Pipeline: kafka source → field.set → file destination, `cdcflow run
--until-idle` on local[2]. Baseline: one process, consumer assign() + fastavro
schemaless_reader + json lines written to a file. Prints records/s of both and the ratio.
First, per-record CPU of the kafka source alone (one partition, in this process, process_time)
against the same consume + fastavro loop: the figure that does not depend on the machine's load.

``--protocol`` picks the topic's TiCDC format (the text codecs' decoders then run in the engine);
``--engine-only`` skips the in-process and hand-loop figures (what a kernel on/off comparison
times: ``CDCFLOW_KERNELS_OFF=_open_protocol_decode``); ``--sink`` also runs the way back, the
engine's JSON lines file -> a second topic in the same format (the encoders). Each engine run
prints its wall seconds and the CPU seconds of the ``cdcflow run`` process tree.
"""

from __future__ import annotations

import argparse
import decimal
import io
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from fastavro import parse_schema, schemaless_reader

from cdcflow.connectors.ticdc.avro import AvroEncoder, AvroOptions, StoreRegistry
from cdcflow.connectors.ticdc.canal_json import CanalJsonEncoder, CanalJsonOptions
from cdcflow.connectors.ticdc.open_protocol import OpenProtocolEncoder
from cdcflow.connectors.ticdc.events import RowChange
from cdcflow.dev.broker import Broker
from cdcflow.schemas import SchemaStore
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

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
          uri: kafka://{servers}/{topic}?protocol={protocol}&enable-tidb-extension=true
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


SINK = """version: "2.2"
pipelines:
  - id: bench-sink
    status: running
    connectors:
      - id: in
        type: source
        plugin: builtin:file
        settings:
          path: {path}
      - id: out
        type: destination
        plugin: builtin:kafka
        settings:
          uri: kafka://{servers}/{topic}?protocol={protocol}&enable-tidb-extension=true
"""


def _encode(protocol: str, store: SchemaStore):
    """([RowChange], topic) -> [(key, value)] in ``protocol`` (open protocol batches the rows
    into one message, as TiCDC does; the others write one message per row)."""
    if protocol == "avro":
        enc = AvroEncoder(AvroOptions(enable_tidb_extension=True), StoreRegistry(store))
        return lambda evs, topic: [enc.encode_one(ev, topic) for ev in evs]
    if protocol == "canal-json":
        cj = CanalJsonEncoder(CanalJsonOptions(enable_tidb_extension=True))
        return lambda evs, topic: [(None, cj.encode(ev)) for ev in evs]
    op = OpenProtocolEncoder()
    return lambda evs, topic: op.encode(evs)


def produce(servers: str, topic: str, n: int, store: SchemaStore, protocol: str = "avro") -> None:
    admin = AdminClient({"bootstrap.servers": servers})  # keep a reference until the future resolves
    admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(15)
    encode = _encode(protocol, store)
    p = Producer({"bootstrap.servers": servers, "linger.ms": 50, "batch.num.messages": 100000,
                  "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000})
    import datetime

    day = datetime.date(2024, 1, 1)
    for start in range(0, n, 16):  # 16 rows a message in open protocol (TiCDC's default batch)
        evs = []
        for i in range(start, min(start + 16, n)):
            row = {"id": i, "a": i % 1000, "b": i * 7, "c": f"c{i}", "d": "d" * 40, "e": i / 3,
                   "f": decimal.Decimal(i % 100000) / 100, "g": day, "h": i % 100, "i": "text"}
            evs.append(RowChange(TABLE, "insert", (1_700_000_000_000 + i) << 18, row))
        for k, v in encode(evs, topic):
            while True:
                try:
                    p.produce(topic, key=k, value=v, partition=(start // 16) % PARTITIONS)
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


def _run(cfg: Path, work: Path) -> tuple[subprocess.CompletedProcess, float]:
    """One ``cdcflow run --until-idle`` on local[2]; prints its wall and CPU seconds."""
    env = dict(os.environ, CDCFLOW_SCHEMA_STORE=str(work / "state" / "schemas.sqlite"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    cp = subprocess.run([str(Path(sys.executable).with_name("cdcflow")), "run", str(cfg), "--until-idle", "--master", "local[2]",
                         "--state-dir", str(work / "state")], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    print(f"ENGINE {cfg.stem}: {wall:.1f} s wall, {cpu:.1f} s cpu (cdcflow run and its children)")
    return cp, wall


def engine(servers: str, topic: str, n: int, work: Path, protocol: str = "avro") -> tuple[float, float, float]:
    """(records/s over the whole wall time, wall seconds, records/s of the running part only)."""
    out = work / "engine.jsonl"
    cfg = work / "bench.yaml"
    cfg.write_text(PIPELINE.format(servers=servers, topic=topic, out=out, protocol=protocol))
    cp, wall = _run(cfg, work)
    if cp.returncode != 0:
        raise SystemExit(f"cdcflow run failed ({cp.returncode}):\n{cp.stdout[-2000:]}\n{cp.stderr[-4000:]}")
    lines = sum(1 for _ in open(out, "rb"))
    if lines != n:
        raise SystemExit(f"engine wrote {lines} records, expected {n}")
    m = re.search(r"finished: ([0-9.]+)s running \+ ([0-9.]+)s Spark start-up", cp.stdout + cp.stderr)
    running = float(m.group(1)) if m else wall
    return n / wall, wall, n / running


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--source-only", action="store_true", help="only the in-process kafka source CPU figures")
    ap.add_argument("--protocol", default="avro", choices=("avro", "canal-json", "open-protocol"))
    ap.add_argument("--engine-only", action="store_true", help="only the cdcflow run(s), no in-process figures")
    ap.add_argument("--sink", action="store_true", help="also time file -> kafka in the same protocol")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    (work / "state").mkdir()
    store = SchemaStore(work / "state" / "schemas.sqlite")  # the run's store: the engine decodes with it
    broker = Broker().start()
    try:
        topic = "bench-rows"
        t0 = time.perf_counter()
        produce(broker.bootstrap_servers, topic, args.rows, store, args.protocol)
        print(f"produced {args.rows} {args.protocol} rows in {time.perf_counter() - t0:.1f}s "
              "(linger.ms=50, batch.num.messages=100000, 4 partitions)")
        os.environ["CDCFLOW_SCHEMA_STORE"] = str(work / "state" / "schemas.sqlite")  # the source's registry
        if args.engine_only:
            engine(broker.bootstrap_servers, topic, args.rows, work, args.protocol)
            if args.sink:
                cfg = work / "sink.yaml"
                AdminClient({"bootstrap.servers": broker.bootstrap_servers}).create_topics(
                    [NewTopic("bench-back", PARTITIONS)])["bench-back"].result(60)
                cfg.write_text(SINK.format(path=work / "engine.jsonl", servers=broker.bootstrap_servers,
                                           topic="bench-back", protocol=args.protocol))
                cp, _ = _run(cfg, work)
                if cp.returncode != 0:
                    raise SystemExit(f"cdcflow run failed ({cp.returncode}):\n{cp.stdout[-2000:]}\n{cp.stderr[-4000:]}")
            return
        per_partition = (args.rows + PARTITIONS - 1) // PARTITIONS
        src_us, hand_us = source_cpu(broker.bootstrap_servers, topic, per_partition, store)
        print(f"in-process CPU per record, partition 0 ({per_partition} rows, best of 3): kafka source "
              f"{src_us:.2f} µs, hand consume+fastavro {hand_us:.2f} µs (ratio {src_us / hand_us:.2f})")
        if args.source_only:
            return
        base = baseline(broker.bootstrap_servers, topic, args.rows, store, work / "baseline.jsonl")
        rate, wall, steady = engine(broker.bootstrap_servers, topic, args.rows, work)
        print(f"{'path':<50}{'records/s':>12}{'ratio':>8}")
        print(f"{'hand loop (confluent-kafka + fastavro, 1 proc)':<50}{base:>12,.0f}{1:>8.2f}")
        print(f"{'cdcflow run, local[2] (wall incl. Spark start)':<50}{rate:>12,.0f}{rate / base:>8.2f}")
        print(f"{'cdcflow run, local[2] (running part only)':<50}{steady:>12,.0f}{steady / base:>8.2f}")
        print(f"engine wall {wall:.1f}s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
