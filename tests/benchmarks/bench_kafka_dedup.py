"""The kafka source's replay filter (``consistency.Dedup``), which runs once per row and whose
state goes into every record position: CPU per row and position bytes per row, for rows with
their own commit ts and for one transaction whose rows all share a commit ts.

    taskset -c 0 .venv/bin/python tests/benchmarks/bench_kafka_dedup.py [ROWS]

Before session 6 a transaction's positions carried all its handles: 20 000 rows took 32 s and
2 GB of positions (quadratic).
"""

import decimal
import gc
import sys
import time

from cdcflow.connectors.kafka.consistency import Dedup
from cdcflow.connectors.ticdc.events import RowChange
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
TABLE = TableSchema("shop", "orders", (
    Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
    Column("name", "VARCHAR", length=64),
    Column("price", "DECIMAL", precision=10, scale=2),
))


def rows(shared_ts: bool) -> list[RowChange]:
    return [RowChange(TABLE, "insert", (1000 if shared_ts else 1000 + i) << 18,
                      {"id": i, "name": f"n{i}", "price": decimal.Decimal("1.25")}) for i in range(N)]


def run(events: list[RowChange]) -> tuple[float, float]:
    """Best of 3: µs of CPU per row, mean position bytes per row."""
    best, size = float("inf"), 0
    for _ in range(3):
        d = Dedup()
        admit = d.admit_row_json
        gc.disable()
        t0 = time.process_time()
        total = 0
        for at, ev in enumerate(events):
            total += len(admit(ev, at))
        best = min(best, time.process_time() - t0)
        gc.enable()
        size = total / len(events)
    return best / len(events) * 1e6, size


if __name__ == "__main__":
    print(f"{'rows':<40} {'µs/row':>8} {'position bytes/row':>20}")
    for label, shared in (("own commit ts each", False), (f"one transaction of {N} rows", True)):
        us, size = run(rows(shared))
        print(f"{label:<40} {us:8.2f} {size:20.1f}")
