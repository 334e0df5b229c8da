"""Every TiCDC codec in one table: decode-to-OpenCDC and encode-from-OpenCDC records/s,
single core, next to the raw library floor on the same bytes.

Run: .venv/bin/python tests/benchmarks/bench_codecs.py [ROWS]

Avro and open protocol come from their own bench modules (bench_codec_avro.main,
bench_codec_open.run). canal-json and CSV reuse bench_codec_canal_csv's rows and
timer with the same call pattern as the others: decode = codec decode +
``events.to_records``; encode = ``events.from_records`` (column model from the
schema store) + codec encode. Floors: orjson.loads/dumps, csv.reader/writer,
fastavro schemaless_reader/writer.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import sys

import orjson

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_codec_avro  # noqa: E402
import bench_codec_canal_csv as canal_csv_bench  # noqa: E402
import bench_codec_open  # noqa: E402

from cdcflow.connectors.ticdc import canal_json as cj  # noqa: E402
from cdcflow.connectors.ticdc import csv as tcsv  # noqa: E402
from cdcflow.connectors.ticdc.events import from_records, to_record, to_records  # noqa: E402
from cdcflow.schemas import SchemaStore  # noqa: E402


def canal_and_csv(n: int) -> list[tuple[str, str, float, float, str]]:
    events = canal_csv_bench.make_events(n)
    table = canal_csv_bench.TABLE
    rate = canal_csv_bench.rate
    store = SchemaStore()
    records = [to_record(e, b"", store) for e in events]
    positions = [b""] * n
    out = []

    enc = cj.CanalJsonEncoder(cj.CanalJsonOptions(enable_tidb_extension=True), now_ms=lambda: 1)
    messages = enc.encode_many(events)
    parsed = [orjson.loads(m) for m in messages]
    dec = cj.CanalJsonDecoder({table.collection: table})
    out.append(("canal-json", "decode->OpenCDC", rate(lambda: to_records(dec.decode_many(messages), positions), n),
                rate(lambda: [orjson.loads(m) for m in messages], n), "orjson.loads"))
    out.append(("canal-json", "encode<-OpenCDC", rate(lambda: enc.encode_many(from_records(records, store)), n),
                rate(lambda: [orjson.dumps(o) for o in parsed], n), "orjson.dumps"))

    opts = tcsv.CsvOptions(include_commit_ts=True)
    data = tcsv.encode_rows(events, table, opts)
    str_rows = list(csv.reader(io.StringIO(data.decode(), newline="")))
    cdec = tcsv.CsvDecoder(table, opts)

    def floor_read():
        return list(csv.reader(io.StringIO(data.decode(), newline="")))

    def floor_write():
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\r\n").writerows(str_rows)
        return buf.getvalue().encode()

    out.append(("csv", "decode->OpenCDC", rate(lambda: to_records(cdec.decode(data), positions), n),
                rate(floor_read, n), "csv.reader"))
    out.append(("csv", "encode<-OpenCDC",
                rate(lambda: tcsv.encode_rows(from_records(records, store), table, opts), n),
                rate(floor_write, n), "csv.writer"))
    store.close()
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    rows: list[tuple[str, str, float, float, str]] = []
    with contextlib.redirect_stdout(io.StringIO()):
        avro = bench_codec_avro.main(n)
    floors = ("fastavro.schemaless_reader", "fastavro.schemaless_writer")
    rows += [("avro", "decode->OpenCDC" if "decode" in name else "encode<-OpenCDC", ours, floor, lib)
             for (name, ours, floor), lib in zip(avro, floors)]
    rows += canal_and_csv(n)
    rows += [("open-protocol", name, ours, floor, "orjson.loads" if name.startswith("decode") else "orjson.dumps")
             for name, ours, floor in bench_codec_open.run(n)]
    print(f"TiCDC codecs, {n} rows of 10 mixed columns, single core (target ratio >= 0.50)")
    print(f"{'codec':<15}{'operation':<17}{'records/s':>12}{'floor/s':>12}{'ratio':>7}  floor")
    for codec, op, ours, floor, lib in rows:
        print(f"{codec:<15}{op:<17}{ours:>12,.0f}{floor:>12,.0f}{ours / floor:>7.2f}  {lib}")


if __name__ == "__main__":
    main()
