"""Send → output latency of a streaming run by topic partitions and rate (issue 18).

    .venv/bin/python tests/benchmarks/bench_latency.py [--partitions 1,4,16] [--rates 100,5000]
        [--seconds 10] [--master local[2]] [--python OTHER_TREE/.venv/bin/python --repo OTHER_TREE]

Pipeline: kafka (canal-json, TiDB extension) → ``file``, ``cdcflow run`` without
``--until-idle`` on ``local[2]``, an embedded Tansu broker. Each row carries its send time;
the output file is tailed, and a row's latency is when its line was seen minus when it was
sent. One run per partition count, warmed up, then each rate for ``--seconds`` in turn.
Prints one Markdown row per (partitions, rate): p50, p99, max, rows seen / sent.
``--python``/``--repo`` run another tree's cdcflow (before/after comparisons).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers

from cdcflow.dev.broker import Broker  # noqa: E402
from helpers.latency import REPO, Phase, measure  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", default="1,4,16")
    ap.add_argument("--rates", default="100,5000")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--engine", default="", help="extra top-level engine: lines, e.g. 'engine:\\n  trigger-interval: 1s\\n'")
    ap.add_argument("--settle", type=float, default=60.0, help="seconds the run gets to write every row at the end")
    ap.add_argument("--dump", help="directory: write each run's rows (id, partition, sent, seen) as p<N>.csv")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--repo", default=str(REPO))
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    print(f"load {open('/proc/loadavg').read().split()[:3]}", flush=True)
    print("| partitions | rate | p50 | p99 | max | rows seen |\n| --- | --- | --- | --- | --- | --- |", flush=True)
    broker = Broker().start()
    try:
        with tempfile.TemporaryDirectory(prefix="cdcflow-latency-") as tmp:
            for n in (int(p) for p in args.partitions.split(",")):
                results = measure(broker.bootstrap_servers, Path(tmp) / f"p{n}", n,
                                  [Phase(r, args.seconds) for r in rates], master=args.master,
                                  engine=args.engine.replace("\\n", "\n"), python=args.python,
                                  repo=Path(args.repo), settle=args.settle,
                                  dump=Path(args.dump) / f"p{n}.csv" if args.dump else None)
                for r in results:
                    print(r.row(n), flush=True)
    finally:
        broker.stop()
    print(f"load {open('/proc/loadavg').read().split()[:3]}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
