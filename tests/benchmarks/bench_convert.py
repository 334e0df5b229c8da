"""Records/s of the record wire forms (single thread).

protobuf: to_proto + SerializeToString, and FromString + from_proto, for a raw
1 KB payload and a structured 10-field row (Avro in raw_data, schema in the
store); JSON form: dumps_lines / loads_lines of the same structured row, and of the
10-column TiCDC row (``bench_storage``'s table, metadata naming the TiDB column-type schema;
decimals at the column's scale as TiDB sends them, and as ``bench_storage`` generates them:
one in ten of another scale, which travels with a derived schema). Also CPU µs per record
(``time.process_time``, one thread) for the JSON form rows: the budget figures.
Run: .venv/bin/python tests/benchmarks/bench_convert.py [N]
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
from decimal import Decimal

from cdcflow.convert.jsonform import dumps_lines, loads_lines
from cdcflow.convert.protobuf import PbRecord, from_proto, to_proto
from cdcflow.record import Operation, Record
from cdcflow.schemas import SchemaStore

BATCH = 1000


def _row(i: int) -> dict:
    return {
        "id": i, "uid": (1 << 64) - 1 - i, "name": f"customer-{i}", "price": Decimal(f"{i}.25"),
        "qty": i % 17, "ratio": i / 7, "ok": i % 2 == 0, "blob": b"\x00\x01" * 8,
        "at": dt.datetime(2024, 1, 1, 12, 0, 0, i % 1000000), "note": None,
    }


def _ticdc_records(n: int, store: SchemaStore, column_scale: bool) -> list[Record]:
    from bench_storage import rows, table
    from cdcflow.connectors.ticdc.events import INSERT, RowChange, to_record

    t = table(0)
    out = []
    for k, row in enumerate(rows(n, t, 0)):
        if column_scale:
            row["d"] = row["d"].quantize(Decimal("0.01"))
        out.append(to_record(RowChange(t, INSERT, (1 << 18) * 10 + k, row), b"", store))
    return out


def _cpu_us(fn, batches: list, repeat: int = 5) -> float:
    """CPU µs per record, best of ``repeat``; ``fn`` returns the records it handled."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        n = sum(len(fn(b)) for b in batches)
        best = min(best, (time.process_time() - start) / n * 1e6)
    return best


def _rate(fn, batches: list, repeat: int = 3) -> float:
    """Records per second, best of ``repeat`` runs (the machine may be shared); ``fn`` returns the records it handled."""
    best = 0.0
    for _ in range(repeat):
        start = time.perf_counter()
        n = 0
        for b in batches:
            n += len(fn(b))
        best = max(best, n / (time.perf_counter() - start))
    return best


def main(n: int) -> None:
    store = SchemaStore()
    raw = [Record(str(i).encode(), Operation.CREATE, {"opencdc.collection": "db.t"}, str(i).encode(), None, os.urandom(1024))
           for i in range(n)]
    structured = [Record(str(i).encode(), Operation.CREATE, {"opencdc.collection": "db.t"}, {"id": i}, None, _row(i))
                  for i in range(n)]
    rows = []
    for name, recs in (("raw 1 KB", raw), ("structured 10 fields", structured)):
        batches = [recs[i:i + BATCH] for i in range(0, n, BATCH)]
        to_proto(batches[0], store)  # warm: schema derived and registered once
        wire = [[p.SerializeToString() for p in to_proto(b, store)] for b in batches]
        enc = _rate(lambda b: [p.SerializeToString() for p in to_proto(b, store)], batches)
        dec = _rate(lambda w: from_proto([PbRecord.FromString(x) for x in w], store), wire)
        rows.append((f"protobuf {name}", enc, dec))
    batches = [structured[i:i + BATCH] for i in range(0, n, BATCH)]
    dumps_lines(batches[0])
    lines = [dumps_lines(b) for b in batches]
    rows.append(("JSON form structured 10 fields", _rate(lambda b: (dumps_lines(b), b)[1], batches),
                 _rate(lambda d: loads_lines(d, store), lines)))
    cpu = [("JSON form structured 10 fields", _cpu_us(lambda b: (dumps_lines(b), b)[1], batches),
            _cpu_us(lambda d: loads_lines(d, store), lines))]
    for name, column_scale in (("JSON form TiCDC 10 col", True), ("JSON form TiCDC 10 col, 1/10 derived", False)):
        recs = _ticdc_records(n, store, column_scale)
        batches = [recs[i:i + BATCH] for i in range(0, n, BATCH)]
        lines = [dumps_lines(b) for b in batches]
        rows.append((name, _rate(lambda b: (dumps_lines(b), b)[1], batches),
                     _rate(lambda d: loads_lines(d, store), lines)))
        cpu.append((name, _cpu_us(lambda b: (dumps_lines(b), b)[1], batches),
                    _cpu_us(lambda d: loads_lines(d, store), lines)))
    print(f"{'form':<38} {'encode rec/s':>14} {'decode rec/s':>14}")
    for name, enc, dec in rows:
        print(f"{name:<38} {enc:>14,.0f} {dec:>14,.0f}")
    print(f"\n{'CPU per record, one thread':<38} {'dumps_lines µs':>14} {'loads_lines µs':>14}")
    for name, enc, dec in cpu:
        print(f"{name:<38} {enc:>14.2f} {dec:>14.2f}")
    store.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)
