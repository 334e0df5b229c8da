"""TiCDC Avro codec throughput vs the raw fastavro floor, single core.

decode: Confluent-framed key+value messages -> OpenCDC records (AvroDecoder.decode_records)
        vs fastavro.schemaless_reader on the same value bodies.
encode: OpenCDC records -> framed key+value messages (AvroEncoder.encode_records)
        vs fastavro.schemaless_writer of the same value datums.
Row: 10 columns of mixed types, TiDB extension on. Run:
    .venv/bin/python tests/benchmarks/bench_codec_avro.py [N]
"""

from __future__ import annotations

import datetime
import io
import json
import struct
import sys
import time
from decimal import Decimal

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from cdcflow.connectors.ticdc.avro import AvroDecoder, AvroEncoder, AvroOptions, StoreRegistry
from cdcflow.connectors.ticdc.events import INSERT, RowChange, to_record
from cdcflow.schemas import SchemaStore
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

TABLE = TableSchema("shop", "orders", (
    Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
    Column("qty", "INT"),
    Column("price", "DECIMAL", precision=10, scale=2),
    Column("name", "VARCHAR", length=64),
    Column("note", "TEXT"),
    Column("created", "DATETIME", fsp=6),
    Column("flag", "TINYINT"),
    Column("ratio", "DOUBLE"),
    Column("payload", "VARBINARY", length=64, binary=True),
    Column("state", "ENUM", elements=("new", "paid", "shipped")),
))


def row(i: int) -> dict:
    return {"id": i, "qty": i % 1000, "price": Decimal(f"{i % 100000}.{i % 100:02d}"), "name": f"customer-{i}",
            "note": None if i % 3 else "fragile, handle with care", "created": datetime.datetime(
                2024, 1, 1, 12, 0, 0, i % 1_000_000), "flag": i % 2, "ratio": i / 7, "payload": b"\x01\x02" * 8,
            "state": ("new", "paid", "shipped")[i % 3]}


def best_pair(ours, floor, repeat: int = 7) -> tuple[float, float]:
    """Best time of each, runs interleaved so load from other processes hits both alike."""
    a, b = [], []
    for _ in range(repeat):
        for fn, out in ((ours, a), (floor, b)):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return min(a), min(b)


def main(n: int = 20_000) -> list[tuple[str, float, float]]:
    store = SchemaStore()
    reg = StoreRegistry(store)
    opts = AvroOptions(enable_tidb_extension=True)
    records = [to_record(RowChange(TABLE, INSERT, (1_700_000_000_000 + i) << 18, row(i)), b"%d" % i, store)
               for i in range(n)]
    enc, dec = AvroEncoder(opts, reg), AvroDecoder(opts, reg)
    msgs = enc.encode_records(records, "shop_orders", store)
    positions = [r.position for r in records]
    (vid,) = struct.unpack(">I", msgs[0][1][1:5])
    schema = parse_schema(json.loads(reg.schema_by_id(vid)))
    bodies = [v[5:] for _, v in msgs]
    datums = [schemaless_reader(io.BytesIO(b), schema, None) for b in bodies]

    def floor_read():
        for b in bodies:
            schemaless_reader(io.BytesIO(b), schema, None)

    def floor_write():
        for d in datums:
            schemaless_writer(io.BytesIO(), schema, d)

    d_ours, d_floor = best_pair(lambda: dec.decode_records(msgs, positions, store), floor_read)
    e_ours, e_floor = best_pair(lambda: enc.encode_records(records, "shop_orders", store), floor_write)
    out = [("decode -> OpenCDC", n / d_ours, n / d_floor), ("encode <- OpenCDC", n / e_ours, n / e_floor)]
    print(f"TiCDC Avro codec, {n} rows x 10 columns, single core")
    print(f"{'direction':<20}{'cdcflow rec/s':>15}{'fastavro floor':>16}{'ratio':>8}")
    for name, ours, floor in out:
        print(f"{name:<20}{ours:>15,.0f}{floor:>16,.0f}{ours / floor:>8.2f}")
    store.close()
    return out


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)
