"""Breadth: the same rows over more partitions or tables should not cost more (issue 18).

    .venv/bin/python tests/benchmarks/bench_breadth.py [--rows 400000] [--repeat 3]
        [--partitions 4,16] [--tables 4,1000] [--only kafka|storage]
        [--python OTHER_TREE/.venv/bin/python --repo OTHER_TREE]

kafka: ``--rows`` canal-json rows (TiDB extension) in a topic of each ``--partitions`` count on
an embedded Tansu broker → ``file``. storage: the same number of CSV rows in a lake
(``date-separator: none``) spread over each ``--tables`` count → ``file``. Every run is
``cdcflow run --until-idle --master local[2]`` from a fresh state; the figure is the summary's
"running" seconds (Spark start-up excluded), best of ``--repeat`` runs taken in turn across the
cases (so load from other processes hits all alike). Prints the load average with the figures.
``--python``/``--repo``: the cdcflow of another tree (before/after comparisons).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers

from confluent_kafka import Producer  # noqa: E402

from cdcflow.connectors.ticdc.canal_json import CanalJsonEncoder, CanalJsonOptions  # noqa: E402
from cdcflow.connectors.ticdc.events import RowChange  # noqa: E402
from cdcflow.dev.broker import Broker  # noqa: E402
from helpers import breadth  # noqa: E402
from helpers.kafka import create_topic  # noqa: E402
from helpers.latency import PIPELINE as KAFKA_PIPELINE  # noqa: E402
from helpers.latency import REPO  # noqa: E402

def produce(servers: str, topic: str, partitions: int, rows: int) -> None:
    create_topic(servers, topic, partitions)
    enc = CanalJsonEncoder(CanalJsonOptions(enable_tidb_extension=True))
    # large batches: Tansu returns one record batch per fetch, so small ones make every consumer slow
    p = Producer({"bootstrap.servers": servers, "linger.ms": 50, "batch.num.messages": 100000,
                  "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000})
    tab = breadth.table(0)
    step = 10_000
    for start in range(0, rows, step):
        evs = [RowChange(tab, "insert", (1_700_000_000_000 + i) << 18, {"id": i, "seq": i, "name": f"r{i}"})
               for i in range(start, min(rows, start + step))]
        for i, v in zip(range(start, start + len(evs)), enc.encode_many(evs)):
            while True:
                try:
                    p.produce(topic, value=v, key=str(i).encode(), partition=i % partitions)
                    break
                except BufferError:
                    p.poll(0.1)
    assert p.flush(120) == 0


def run(cfg: Path, state: Path, python: str, repo: Path, rows: int, out: Path) -> float:
    """The "running" seconds of one ``cdcflow run --until-idle`` (checked: every row written)."""
    shutil.rmtree(state, ignore_errors=True)
    out.unlink(missing_ok=True)
    res = subprocess.run([python, "-m", "cdcflow.cli", "run", str(cfg), "--until-idle", "--master", "local[2]",
                          "--state-dir", str(state)], cwd=repo, capture_output=True, text=True, timeout=1800)
    text = res.stdout + res.stderr
    m = re.search(r"finished: ([0-9.]+)s running", text)
    if res.returncode != 0 or not m:
        raise SystemExit(f"run failed ({res.returncode}):\n{text[-3000:]}")
    lines = sum(1 for _ in open(out, "rb"))
    if lines < rows:
        raise SystemExit(f"{cfg}: {lines} rows written, expected {rows}")
    return float(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--partitions", default="4,16")
    ap.add_argument("--tables", default="4,1000")
    ap.add_argument("--only", choices=("kafka", "storage"))
    ap.add_argument("--engine", default="", help="top-level engine: lines, e.g. 'engine:\\n  batch-size: 5000\\n'")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--repo", default=str(REPO))
    args = ap.parse_args()
    engine = args.engine.replace("\\n", "\n")
    work = Path(tempfile.mkdtemp(prefix="bench-breadth-"))
    cases: list[tuple[str, Path]] = []  # (label, pipeline file)
    broker = None
    try:
        if args.only != "storage":
            broker = Broker().start()
            for n in (int(x) for x in args.partitions.split(",")):
                topic = f"breadth-{n}"
                t0 = time.perf_counter()
                produce(broker.bootstrap_servers, topic, n, args.rows)
                print(f"produced {args.rows} rows into {n} partitions in {time.perf_counter() - t0:.1f}s", flush=True)
                cfg = work / f"kafka-{n}.yaml"
                cfg.write_text(KAFKA_PIPELINE.format(engine=engine, servers=broker.bootstrap_servers, topic=topic,
                                                     group=f"g-{topic}", out=work / f"kafka-{n}.jsonl"))
                cases.append((f"kafka, {n} partitions", cfg))
        if args.only != "kafka":
            for n in (int(x) for x in args.tables.split(",")):
                root = work / f"lake-{n}"
                breadth.write_lake(root, n, args.rows)
                cfg = work / f"storage-{n}.yaml"
                cfg.write_text(breadth.PIPELINE.format(engine=engine, root=root, out=work / f"storage-{n}.jsonl"))
                cases.append((f"storage, {n} tables", cfg))
        best = {label: float("inf") for label, _ in cases}
        print(f"load before {open('/proc/loadavg').read().split()[:3]}", flush=True)
        for _ in range(args.repeat):
            for label, cfg in cases:
                seconds = run(cfg, work / "state", args.python, Path(args.repo), args.rows,
                              cfg.with_suffix(".jsonl"))
                best[label] = min(best[label], seconds)
                print(f"  {label}: {seconds:.1f}s", flush=True)
        print(f"load after {open('/proc/loadavg').read().split()[:3]}")
        print(f"| case ({args.rows:,} rows) | running, best of {args.repeat} |\n| --- | --- |")
        for label, _ in cases:
            print(f"| {label} | {best[label]:.1f} s |")
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
