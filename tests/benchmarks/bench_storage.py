"""Storage connector throughput: N CSV rows (10 columns, 20 files, 4 tables).

Read: the storage source (in-process, one instance per table partition) vs a
single-process loop of ``csv.reader`` with the same type conversion by hand.
Write: the storage destination vs ``csv.writer`` with the same formatting by hand.

    .venv/bin/python tests/benchmarks/bench_storage.py [--rows 1000000]

UNFINISHED: the issue asks for the read/write through the Spark engine on
local[2] (``cdcflow run --until-idle``); the engine was not runnable when this was
written, so this measures the connectors in one process (the per-partition work
an executor does).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import decimal
import io
import os
import tempfile
import time

from cdcflow.connectors.storage.destination import StorageDestination
from cdcflow.connectors.storage.settings import DESTINATION_PARAMS, SOURCE_PARAMS
from cdcflow.connectors.storage.source import StorageSource
from cdcflow.connectors.ticdc.events import INSERT, RowChange, to_record
from cdcflow.params import validate
from cdcflow.schemas import default_store
from cdcflow.tidb import Column, TableSchema

TABLES = 4
FILES = 20


def table(i: int) -> TableSchema:
    return TableSchema("bench", f"t{i}", (
        Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True), Column("a", "INT"),
        Column("b", "BIGINT"), Column("c", "DOUBLE"), Column("d", "DECIMAL", precision=12, scale=2),
        Column("e", "VARCHAR", length=64), Column("f", "VARCHAR", length=64), Column("g", "DATE"),
        Column("h", "DATETIME", fsp=0), Column("i", "TINYINT")), version=1 << 18)


def rows(n: int, t: TableSchema, start: int):
    base = dt.datetime(2024, 1, 1)
    for k in range(start, start + n):
        yield {"id": k, "a": k % 1000, "b": k * 7, "c": k / 3, "d": decimal.Decimal(k % 100000) / 100,
               "e": f"name {k}", "f": "x,y\"z", "g": dt.date(2024, 1, 1 + k % 28),
               "h": base + dt.timedelta(seconds=k), "i": k % 100}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    n = ap.parse_args().rows
    root = tempfile.mkdtemp(prefix="bench_storage_")
    settings = {"uri": root, "include-commit-ts": "true", "date-separator": "none"}
    store = default_store()
    per_table = n // TABLES
    batches = []
    for i in range(TABLES):
        t = table(i)
        evs = [RowChange(t, INSERT, (1 << 18) * 10 + k, r) for k, r in enumerate(rows(per_table, t, 0))]
        step = per_table // (FILES // TABLES)
        batches += [[to_record(e, b"", store) for e in evs[s:s + step]] for s in range(0, per_table, step)]

    d = StorageDestination()
    d.configure(validate("storage", DESTINATION_PARAMS, settings))
    d.open()
    t0 = time.perf_counter()
    for b in batches:
        d.write(b)
    write_s = time.perf_counter() - t0

    out = io.StringIO()
    t0 = time.perf_counter()
    for b in batches:  # same formatting by hand with csv.writer
        w = csv.writer(out, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\r\n")
        for r in b:
            a = r.after
            w.writerow(["I", "t", "bench", 1, a["id"], a["a"], a["b"], repr(a["c"]), format(a["d"], "f"), a["e"],
                        a["f"], a["g"].isoformat(), a["h"].isoformat(" "), a["i"]])
    base_write_s = time.perf_counter() - t0

    src = StorageSource()
    src.configure(validate("storage", SOURCE_PARAMS, settings))
    t0 = time.perf_counter()
    got = 0
    for part in src.partitions():
        s = StorageSource()
        s.configure(validate("storage", SOURCE_PARAMS, settings))
        s.open(None, part)
        while batch := s.read(10_000):
            got += len(batch)
    read_s = time.perf_counter() - t0
    assert got == per_table * TABLES, got

    t0 = time.perf_counter()
    cnt = 0
    for dirpath, _, names in os.walk(root):
        for name in sorted(names):
            if not name.endswith(".csv"):
                continue
            with open(os.path.join(dirpath, name), newline="") as f:
                for rec in csv.reader(f):
                    (int(rec[3]), int(rec[4]), int(rec[5]), int(rec[6]), float(rec[7]), decimal.Decimal(rec[8]),
                     rec[9], rec[10], dt.date.fromisoformat(rec[11]), dt.datetime.fromisoformat(rec[12]), int(rec[13]))
                    cnt += 1
    base_read_s = time.perf_counter() - t0
    print(f"rows={got} tables={TABLES} files={len(batches)}")
    print(f"{'case':<8}{'storage rows/s':>16}{'csv loop rows/s':>17}{'ratio':>8}")
    print(f"{'read':<8}{got / read_s:>16,.0f}{cnt / base_read_s:>17,.0f}{base_read_s / read_s:>8.2f}")
    print(f"{'write':<8}{got / write_s:>16,.0f}{got / base_write_s:>17,.0f}{base_write_s / write_s:>8.2f}")


if __name__ == "__main__":
    main()
