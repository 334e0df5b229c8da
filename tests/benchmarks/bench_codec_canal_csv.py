"""canal-json and CSV codec throughput on a 10-column mixed row, single core, next to the raw
library floor on the same bytes (orjson.loads/dumps, csv.reader/writer).

Run: .venv/bin/python tests/benchmarks/bench_codec_canal_csv.py [rows]
"""

from __future__ import annotations

import csv
import datetime
import decimal
import io
import sys

import orjson

from cdcflow.connectors.ticdc import canal_json as cj
from cdcflow.connectors.ticdc import csv as tcsv
from cdcflow.connectors.ticdc.events import RowChange, from_records, records_to_rows, to_records
from cdcflow.schemas import SchemaStore
from cdcflow.connectors.ticdc.tidb import Column, TableSchema
from timing import best_rates

TABLE = TableSchema("shop", "orders", (
    Column("id", "BIGINT", primary_key=True, handle_key=True, nullable=False),
    Column("customer", "VARCHAR", length=64),
    Column("qty", "INT"),
    Column("price", "DECIMAL", precision=10, scale=2),
    Column("weight", "DOUBLE"),
    Column("created", "DATETIME", fsp=3),
    Column("ship_date", "DATE"),
    Column("status", "ENUM", elements=("new", "paid", "shipped")),
    Column("note", "TEXT"),
    Column("blob", "VARBINARY", length=32, binary=True),
))


def make_events(n: int) -> list[RowChange]:
    out = []
    for i in range(n):
        row = {"id": i, "customer": f"customer-{i % 977}", "qty": i % 50, "price": decimal.Decimal(f"{i % 9999}.95"),
               "weight": 1.25 + i % 7, "created": datetime.datetime(2024, 5, 1, 12, 30, 15, (i % 1000) * 1000),
               "ship_date": datetime.date(2024, 5, 1 + i % 28), "status": ("new", "paid", "shipped")[i % 3],
               "note": "fragile, handle with care" if i % 2 else None, "blob": bytes([i % 256, 1, 2, 3])}
        out.append(RowChange(TABLE, "insert", (1_700_000_000_000 + i) << 18, row))
    return out


def rate(fn, n: int, repeat: int = 3) -> float:
    """Records/s of ``fn`` alone (see timing.best_rates)."""
    return best_rates([fn], n, repeat)[0]


def rates(ours, floors, n: int, repeat: int = 5) -> list[float]:
    """Records/s of ``ours`` and of each floor, timed interleaved (see timing.best_rates)."""
    return best_rates([ours, *floors], n, repeat)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    events = make_events(n)
    positions = [b""] * n
    rows_out = []

    # canal-json
    enc = cj.CanalJsonEncoder(cj.CanalJsonOptions(enable_tidb_extension=True), now_ms=lambda: 1)
    messages = enc.encode_many(events)
    parsed = [orjson.loads(m) for m in messages]
    dec = cj.CanalJsonDecoder({TABLE.collection: TABLE})
    floor_dec = rate(lambda: [orjson.loads(m) for m in messages], n)
    ours_dec = rate(lambda: dec.decode_many(messages), n)
    ours_dec_rec = rate(lambda: to_records(dec.decode_many(messages), positions), n)
    floor_enc = rate(lambda: [orjson.dumps(o) for o in parsed], n)
    ours_enc = rate(lambda: enc.encode_many(events), n)
    size = sum(map(len, messages)) / n
    rows_out += [("canal-json decode", ours_dec, floor_dec, "orjson.loads"),
                 ("canal-json decode+to_record", ours_dec_rec, floor_dec, "orjson.loads"),
                 ("canal-json encode", ours_enc, floor_enc, "orjson.dumps")]

    # CSV
    opts = tcsv.CsvOptions(include_commit_ts=True)
    data = tcsv.encode_rows(events, TABLE, opts)
    text = data.decode()
    str_rows = list(csv.reader(io.StringIO(text, newline="")))
    cdec = tcsv.CsvDecoder(TABLE, opts)

    def csv_floor_read():
        return list(csv.reader(io.StringIO(data.decode(), newline="")))

    def csv_floor_write():
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\r\n").writerows(str_rows)
        return buf.getvalue().encode()

    store = SchemaStore()
    records = to_records(events, positions, store)

    def csv_from_records():  # the storage destination's path: no RowChange per row
        return b"".join(tcsv.encode_table_rows(r.table, r.kinds, r.commit_ts, r.rows, r.olds, opts)
                        for r in records_to_rows(records, store))

    assert csv_from_records() == tcsv.encode_rows(from_records(records, store), TABLE, opts) == data
    rows_out += [("csv decode", rate(lambda: cdec.decode(data), n), rate(csv_floor_read, n), "csv.reader"),
                 ("csv decode+to_record", rate(lambda: to_records(cdec.decode(data), positions), n),
                  rate(csv_floor_read, n), "csv.reader"),
                 ("csv decode_columns+records", rate(lambda: cdec.decode_columns(data).records(positions), n),
                  rate(csv_floor_read, n), "csv.reader"),
                 ("csv encode", rate(lambda: tcsv.encode_rows(events, TABLE, opts), n), rate(csv_floor_write, n),
                  "csv.writer"),
                 ("csv encode <- from_records", rate(lambda: tcsv.encode_rows(from_records(records, store), TABLE, opts),
                                                     n), rate(csv_floor_write, n), "csv.writer"),
                 ("csv encode <- records_to_rows", rate(csv_from_records, n), rate(csv_floor_write, n), "csv.writer")]

    print(f"{n} rows, 10 mixed columns; canal-json message {size:.0f} B, CSV row {len(data) / n:.0f} B")
    print(f"{'path':30} {'cdcflow rec/s':>14} {'floor rec/s':>12} {'ratio':>6}  floor")
    for name, ours, floor, what in rows_out:
        print(f"{name:30} {ours:14,.0f} {floor:12,.0f} {ours / floor:6.2f}  {what}")


if __name__ == "__main__":
    main()
