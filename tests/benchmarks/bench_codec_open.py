"""Open protocol: decode-to-OpenCDC and encode-from-OpenCDC records/s, single core,
next to the orjson floor on the same bytes.

Run: .venv/bin/python tests/benchmarks/bench_codec_open.py [--rows N]

Row: 10 columns of mixed types (BIGINT key, INT UNSIGNED, VARCHAR, DECIMAL(10,2),
DOUBLE, DATETIME(3), DATE, TEXT (base64 on the wire), ENUM, a NULL INT), batched
16 rows per message (TiCDC's default). Floors: ``orjson.loads`` of every key and
value JSON document of those messages, ``orjson.dumps`` of the same key/value
structures already built as dicts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import struct
from decimal import Decimal

import orjson

from cdcflow.connectors.ticdc import open_protocol as op
from cdcflow.engine.spark.heap import keep_freed_memory
from cdcflow.connectors.ticdc.events import RowChange, to_record, to_records
from cdcflow.schemas import SchemaStore
from cdcflow.connectors.ticdc.tidb import Column, TableSchema
from timing import best_rates

TABLE = TableSchema("shop", "orders", (
    Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
    Column("qty", "INT", unsigned=True),
    Column("name", "VARCHAR", length=64),
    Column("price", "DECIMAL", precision=10, scale=2),
    Column("weight", "DOUBLE"),
    Column("created", "DATETIME", fsp=3),
    Column("day", "DATE"),
    Column("note", "TEXT"),
    Column("state", "ENUM", elements=("new", "paid", "shipped")),
    Column("spare", "INT"),
))


def make_events(n: int) -> list[RowChange]:
    base = dt.datetime(2024, 5, 1, 12, 0, 0)
    return [RowChange(TABLE, "insert", (1_700_000_000_000 + i) << 18, {
        "id": i, "qty": i % 1000, "name": f"customer-{i}", "price": Decimal(f"{i % 10000}.{i % 100:02d}"),
        "weight": i * 0.25, "created": base + dt.timedelta(milliseconds=i), "day": dt.date(2024, 5, 1),
        "note": "a note of modest length", "state": ("new", "paid", "shipped")[i % 3], "spare": None,
    }) for i in range(n)]


def steady_heap() -> None:
    """Keep freed memory in the process (``cdcflow.engine.spark.heap``, as the engine's workers and plugins do),
    so a timed round does not page-fault its output buffers back in. On this VM those faults cost
    ≈ 2 µs per fresh 4 KiB page of kernel time and swung one floor 5× between runs; without
    them every side is timed on its own work, and no floor gets slower."""
    keep_freed_memory()


def split_docs(messages):
    """The JSON documents inside the framing (what the orjson floor parses)."""
    unpack = struct.Struct(">Q").unpack_from
    docs = []
    for key, value in messages:
        for buf, pos in ((key, 8), (value, 0)):
            while pos < len(buf):
                n = unpack(buf, pos)[0]
                docs.append(buf[pos + 8:pos + 8 + n])
                pos += 8 + n
    return docs


def run(n: int = 20_000) -> list[tuple[str, float, float]]:
    """[(operation, codec records/s, orjson floor records/s, json floor records/s)]."""
    events = make_events(n)
    encoder = op.OpenProtocolEncoder()
    messages = encoder.encode(events)
    docs = split_docs(messages)
    store = SchemaStore()
    records = [to_record(e, b"", store) for e in events]

    def decode():
        # a source maps each message's events as one batch (events.to_records)
        dec = op.OpenProtocolDecoder()
        pos = 0
        for key, value in messages:
            events = dec.decode(key, value)
            to_records(events, [b"%d" % i for i in range(pos, pos + len(events))])
            pos += len(events)

    def floor_loads():
        loads = orjson.loads
        for d in docs:
            loads(d)

    def encode():
        op.OpenProtocolEncoder().encode_records(records, store)  # = encode(from_records(records, store))

    structures = [orjson.loads(d) for d in docs]

    def floor_dumps():
        dumps = orjson.dumps
        for s in structures:
            dumps(s)

    texts = [d.decode() for d in docs]

    def floor_json_loads():
        loads = json.loads
        for d in texts:
            loads(d)

    def floor_json_dumps():
        dumps = json.dumps
        for s in structures:
            dumps(s, separators=(",", ":")).encode()

    dec_rates = best_rates([decode, floor_loads, floor_json_loads], n)
    enc_rates = best_rates([encode, floor_dumps, floor_json_dumps], n)
    store.close()
    return [("decode->OpenCDC", *dec_rates), ("encode<-OpenCDC", *enc_rates)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000)
    args = ap.parse_args()
    steady_heap()
    print(f"open protocol, {args.rows} rows of 10 mixed columns, 16 rows/message, single core")
    print(f"{'operation':<18}{'records/s':>12}{'orjson/s':>12}{'ratio':>8}{'json/s':>12}{'ratio':>8}")
    for name, rate, floor, json_floor in run(args.rows):
        print(f"{name:<18}{rate:>12,.0f}{floor:>12,.0f}{rate / floor:>8.2f}{json_floor:>12,.0f}"
              f"{rate / json_floor:>8.2f}")
    print("target: ratio >= 0.50 against the orjson floor (the stricter of the two)")


if __name__ == "__main__":
    main()
