"""CPU per record of the standalone plugin's record reader, compiled kernel vs pure Python.

``convert.protobuf.from_wire`` on one batch message of 10 000 records as the host sends
them (``to_wire`` + ``framing.frame_batches``): the ``bench_standalone`` raw 1 KB and
structured (Avro, ten fields) records. process_time, best of N, one thread; run it pinned:

    taskset -c 0 .venv/bin/python tests/benchmarks/bench_wire.py [--records N] [--rounds N]
"""

from __future__ import annotations

import argparse
import time

from bench_standalone import raw_records, structured_records

from cdcflow.convert import protobuf
from cdcflow.schemas import SchemaStore
from cdcflow.standalone.framing import frame_batches


def best_us(fn, n: int, rounds: int) -> float:
    fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    kernel = protobuf._kernel
    print(f"kernel: {'compiled' if kernel is not None else 'not available'}")
    print(f"{'payload':<12}{'python µs/rec':>15}{'kernel µs/rec':>15}{'speed-up':>10}")
    for label, make in (("raw 1KB", raw_records), ("structured", structured_records)):
        store = SchemaStore()
        message = frame_batches(protobuf.to_wire(make(args.records), store), 1 << 30)[0][0][0]
        run = lambda: protobuf.from_wire(message, store, {})  # noqa: E731
        protobuf._kernel = None
        try:
            python = best_us(run, args.records, args.rounds)
        finally:
            protobuf._kernel = kernel
        if kernel is None:
            print(f"{label:<12}{python:>15.2f}{'-':>15}{'-':>10}")
            continue
        compiled = best_us(run, args.records, args.rounds)
        print(f"{label:<12}{python:>15.2f}{compiled:>15.2f}{python / compiled:>9.1f}x")


if __name__ == "__main__":
    main()
