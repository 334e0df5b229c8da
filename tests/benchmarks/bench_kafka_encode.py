"""Avro encoding end to end: OpenCDC JSON lines (TiDB rows) → kafka destination, TiCDC Avro.

    .venv/bin/python tests/benchmarks/bench_kafka_encode.py [--rows 300000] [--repeat 3]
        [--compare-env CDCFLOW_KERNELS_OFF=_jsonform]

Data: bench_kafka.py's rows (10 columns, TiCDC Avro, extension on) produced to a topic and read
once into a file by `cdcflow run` (OpenCDC JSON lines with their column model in the run's schema
store), not timed. Timed: `cdcflow run --until-idle` on local[2] of file → kafka (protocol avro,
TiDB extension on, the run's built-in schema store), each run into fresh topics on the embedded
Tansu broker. Prints wall and CPU seconds of each run (CPU: the whole process tree, Spark's JVM
and Python workers included) and the best of ``--repeat``; with ``--compare-env`` the runs
alternate with and without that setting.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from cdcflow.dev.broker import Broker
from bench_kafka import copy_store, engine, produce
from cdcflow.schemas import SchemaStore
from timing import alternate, run_tree

TABLE = "bench.rows"

ENCODE = """version: "2.2"
pipelines:
  - id: enc
    status: running
    connectors:
      - id: in
        type: source
        plugin: builtin:file
        settings:
          path: {src}
          format: opencdc/json
      - id: out
        type: destination
        plugin: builtin:kafka
        settings:
          uri: kafka://{servers}/{topic}_{{schema}}_{{table}}?protocol=avro&enable-tidb-extension=true&partition-num=2
    dead-letter-queue:
      plugin: builtin:log
      window-size: 0
"""


def cdcflow_run(cfg: Path, state: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `cdcflow run --until-idle` on local[2]."""
    rc, stdout, stderr, wall, cpu = run_tree(
        [str(Path(sys.executable).with_name("cdcflow")), "run", str(cfg), "--until-idle", "--master", "local[2]",
         "--state-dir", str(state)], env)
    if rc != 0 or "records nacked               0" not in stdout + stderr:
        raise SystemExit(f"cdcflow run failed ({rc}):\n{stdout[-3000:]}\n{stderr[-3000:]}")
    return wall, cpu


def written(servers: str, topic: str) -> int:
    """Messages in ``topic``, counted by reading it to the end."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": servers, "group.id": "bench-count", "enable.auto.commit": False})
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        c.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        n, idle = 0, time.monotonic()
        while time.monotonic() - idle < 3:
            got = [m for m in c.consume(10000, 0.5) if not m.error()]
            if got:
                n, idle = n + len(got), time.monotonic()
        return n
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--compare-env", metavar="VAR=VALUE")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-kafka-encode-"))
    env = dict(os.environ)
    broker = Broker().start()
    try:
        (work / "gen" / "state").mkdir(parents=True)
        store = SchemaStore(work / "gen" / "state" / "schemas.sqlite")
        t0 = time.perf_counter()
        produce(broker.bootstrap_servers, "bench-in", args.rows, store)
        engine(broker.bootstrap_servers, "bench-in", args.rows, work / "gen")  # kafka -> gen/engine.jsonl
        store.close()
        src = work / "gen" / "engine.jsonl"
        print(f"prepared {args.rows} rows in {time.perf_counter() - t0:.1f}s", flush=True)
        runs = 0

        def run(extra: dict[str, str]) -> tuple[float, float]:
            nonlocal runs
            runs += 1
            topic = f"enc-{runs}"
            cfg = work / f"enc-{runs}.yaml"
            cfg.write_text(ENCODE.format(src=src, servers=broker.bootstrap_servers, topic=topic))
            state = work / f"state-{runs}"
            state.mkdir()  # the records name schemas of the generating run's store: a copy of it
            copy_store(work / "gen" / "run-0" / "schemas.sqlite", state / "schemas.sqlite")
            wall, cpu = cdcflow_run(cfg, state, {**env, **extra})
            got = written(broker.bootstrap_servers, f"{topic}_{TABLE.replace('.', '_')}")
            if got != args.rows:
                raise SystemExit(f"run {runs} wrote {got} messages, expected {args.rows}")
            return wall, cpu

        alternate(args.compare_env, args.repeat, run)
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
