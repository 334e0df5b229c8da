"""Records/s of the record wire forms (single thread).

protobuf: to_proto + SerializeToString, and FromString + from_proto, for a raw
1 KB payload and a structured 10-field row (Avro in raw_data, schema in the
store); JSON form: dumps_lines / loads_lines of the same structured row.
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
    dumps_lines(batches[0], store)
    lines = [dumps_lines(b, store) for b in batches]
    rows.append(("JSON form structured 10 fields", _rate(lambda b: (dumps_lines(b, store), b)[1], batches),
                 _rate(lambda d: loads_lines(d, store), lines)))
    print(f"{'form':<34} {'encode rec/s':>14} {'decode rec/s':>14}")
    for name, enc, dec in rows:
        print(f"{name:<34} {enc:>14,.0f} {dec:>14,.0f}")
    store.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)
