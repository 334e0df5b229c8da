"""CPU per record of the standalone path's record conversion, both directions.

``framing.frame_records`` (records → batch messages, what the host sends) and
``convert.protobuf.from_wire`` (batch messages → records, what the plugin reads), on
10 000 records: the ``bench_standalone`` raw 1 KB and structured (Avro, ten fields) records.
process_time, best of N, one thread, with the heap policy both processes use; run it pinned,
with the wire kernel (as installed) and without it (upb's path):

    taskset -c 0 .venv/bin/python tests/benchmarks/bench_wire.py [--records N] [--rounds N]
    CDCFLOW_KERNELS_OFF=_wire taskset -c 0 .venv/bin/python tests/benchmarks/bench_wire.py
"""

from __future__ import annotations

import argparse
import time

from bench_standalone import raw_records, structured_records

from cdcflow.convert import protobuf
from cdcflow.engine.spark.heap import keep_freed_memory
from cdcflow.schemas import SchemaStore
from cdcflow.standalone.framing import frame_records


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
    keep_freed_memory()  # as host and plugin do (standalone.serve): freed batch buffers stay mapped
    print(f"{'payload':<12}{'frame_records µs/rec':>22}{'from_wire µs/rec':>18}")
    for label, make in (("raw 1KB", raw_records), ("structured", structured_records)):
        store = SchemaStore()
        records = make(args.records)
        write = lambda: frame_records(records, store, "avro", 1 << 30)  # noqa: E731
        messages = [data for data, _ in write()[0]]  # of framing.MESSAGE_RECORDS records each
        read = lambda: [protobuf.from_wire(data, store, {}) for data in messages]  # noqa: E731
        print(f"{label:<12}{best_us(write, args.records, args.rounds):>22.2f}"
              f"{best_us(read, args.records, args.rounds):>18.2f}")


if __name__ == "__main__":
    main()
