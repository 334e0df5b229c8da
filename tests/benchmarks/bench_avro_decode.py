"""Codec.decode CPU per record: the C kernel vs the generated Python reader vs fastavro.

Columns: fastavro (the reference path), the generated Python reader (the kernel off),
``codec.decode`` with the kernel, and ``codec.decoder()`` (the kernel plan called directly,
no Python frame per record: what a batch reader such as ``from_wire`` can hold).

Rows: the 10-field structured row of bench_standalone.py (long, 2 strings, double,
boolean, long, a 700-char string, 3 strings) and a TiCDC-typed row holding every
TiDB type cdcflow maps to Avro (nullable unions, decimals as bytes, big unsigned
ints, dates, datetimes, TIME, enums/sets as strings). CPU time (process_time),
best of 5, GC off. Pin it to one core for steady figures:

    taskset -c 0 .venv/bin/python tests/benchmarks/bench_avro_decode.py [N]
"""

from __future__ import annotations

import datetime
import sys
from decimal import Decimal

from timing import cpu_per_record

from cdcflow import avro_values
from cdcflow.avro_values import Codec
from cdcflow.connectors.ticdc.schema import table_schema_avro
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

TIDB_TABLE = TableSchema("shop", "every_type", (
    Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
    Column("u64", "BIGINT", unsigned=True),
    Column("tiny", "TINYINT"),
    Column("year", "YEAR"),
    Column("bits", "BIT", length=64, unsigned=True),
    Column("f", "FLOAT"),
    Column("d", "DOUBLE"),
    Column("price", "DECIMAL", precision=10, scale=2),
    Column("wide", "DECIMAL", precision=65, scale=30),
    Column("name", "VARCHAR", length=64),
    Column("note", "TEXT"),
    Column("bin", "VARBINARY", length=64, binary=True),
    Column("day", "DATE"),
    Column("created", "DATETIME", fsp=6),
    Column("ts", "TIMESTAMP", fsp=3),
    Column("dur", "TIME", fsp=6),
    Column("state", "ENUM", elements=("new", "paid", "shipped")),
    Column("tags", "SET", elements=("a", "b", "c")),
    Column("doc", "JSON"),
    Column("gone", "INT"),
))


def structured_row(i: int) -> dict:
    return {"id": i, "name": f"name-{i:08d}", "email": f"user{i}@example.com", "score": i * 0.5,
            "active": bool(i & 1), "count": i * 7, "note": "x" * 700, "city": "Amsterdam", "zip": "1011AB",
            "tags": "a,b,c,d"}


def tidb_row(i: int) -> dict:
    return {"id": i, "u64": 2**64 - 1 - i, "tiny": i % 128, "year": 1901 + i % 255, "bits": 2**63 + i,
            "f": 1.5, "d": i / 7, "price": Decimal(f"{i % 100000}.{i % 100:02d}"),
            "wide": Decimal(f"{i}.{'1' * 30}"), "name": f"customer-{i}", "note": "fragile, handle with care",
            "bin": b"\x01\x02" * 8, "day": datetime.date(2024, 1, 1 + i % 28),
            "created": datetime.datetime(2024, 1, 1, 12, 0, 0, i % 1_000_000),
            "ts": datetime.datetime(2030, 6, 1, 1, 2, 3, 123000), "dur": datetime.timedelta(hours=-800, microseconds=i),
            "state": ("new", "paid", "shipped")[i % 3], "tags": "a,c", "doc": '{"k": [1, 2]}', "gone": None}


def measure(label: str, schema: dict, rows: list[dict]) -> tuple[str, float, float, float, float]:
    codec = Codec(schema)
    blobs = [codec.encode(r) for r in rows]
    kernel = avro_values._kernel
    assert kernel is not None, "kernel not built (or CDCFLOW_PURE_PYTHON=1): nothing to compare"
    assert all(codec.decode(b) == r for b, r in zip(blobs, rows)), "kernel decode differs from the rows"
    k_us = cpu_per_record([codec.decode], blobs)[0]
    direct_us = cpu_per_record([codec.decoder()], blobs)[0]
    avro_values._kernel = None
    try:
        assert all(codec.decode(b) == r for b, r in zip(blobs, rows))
        py_us = cpu_per_record([codec.decode], blobs)[0]
    finally:
        avro_values._kernel = kernel
    ref_us = cpu_per_record([codec._reference_decode], blobs)[0]
    return label, ref_us, py_us, k_us, direct_us


def main(n: int = 20_000) -> None:
    results = [
        measure("structured 10 fields", avro_values.derive_schema(structured_row(0), "Record"),
                [structured_row(i) for i in range(n)]),
        measure("TiCDC row, 20 types", table_schema_avro(TIDB_TABLE), [tidb_row(i) for i in range(n)]),
    ]
    print(f"{'row':24} {'fastavro µs':>12} {'generated µs':>13} {'kernel µs':>10} {'speed-up':>9}"
          f" {'decoder() µs':>13}")
    for label, ref_us, py_us, k_us, direct_us in results:
        print(f"{label:24} {ref_us:12.2f} {py_us:13.2f} {k_us:10.2f} {py_us / k_us:8.1f}x {direct_us:13.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)
