"""CsvDecoder.transcode / CsvJsonRows.lines: CSV bytes straight to Conduit JSON-form lines.

The reference is the path the storage source takes without it: ``decode_columns`` ->
``CsvColumns.numbered_records`` -> the engine's metadata stamp -> ``jsonform.dumps_lines``. The
transcoder must write exactly those bytes, or hand the whole file back (None) and leave it to
that path, which then returns the data or raises the typed error as before.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.tidb_strategies import columns, rows, tables, values

from cdcflow.connectors.ticdc import csv as tcsv
from cdcflow.connectors.ticdc.csv import decode as tcsv_decode
from cdcflow.connectors.ticdc.errors import MalformedMessage
from cdcflow.connectors.ticdc.events import RowChange
from cdcflow.convert import jsonform
from cdcflow.schemas import SchemaStore
from cdcflow.connectors.ticdc.tidb import Column, TableSchema
from helpers.leakcheck import traced_growth

pytest.importorskip("cdcflow.connectors.ticdc.csv._csv", reason="the CSV kernel is not built")
pytestmark = pytest.mark.skipif(tcsv_decode._kernel is None, reason="kernels are off (CDCFLOW_PURE_PYTHON=1)")

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STORE = SchemaStore()
OPTIONS = [
    tcsv.CsvOptions(include_commit_ts=True),
    tcsv.CsvOptions(),
    tcsv.CsvOptions(include_commit_ts=True, output_field_header=True, output_handle_key=True),
    tcsv.CsvOptions(quote="'", delimiter=";", terminator="\n", null="", include_commit_ts=True),
]
PREFIX = b"1|2024-01-01|3|"
# the types the transcoder writes (others hand the file back)
SUPPORTED = {"TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DECIMAL", "CHAR", "VARCHAR",
             "TEXT", "TINYTEXT", "MEDIUMTEXT", "LONGTEXT", "DATE", "DATETIME", "TIMESTAMP", "ENUM", "SET", "JSON",
             "YEAR", "BIT"}
TRICKY_TEXT = ["", "\\N", "NULL", "a,b", 'x,y"z', "'", ";", "line\nbreak", "cr\r\nlf", "\u2028\u2029", "\x00\x01\x1f\x7f",
               "tab\t\b\f", "😀 astral 𝄞", "é ü 数据", '"', '""', "\\", "\\\\N"]


def expected_lines(decoder: tcsv.CsvDecoder, data: bytes, store, start: int, end: int, prefix: bytes,
                   extra: dict | None) -> bytes:
    """The reference: records of the rows, stamped like the engine does, as JSON lines."""
    cols = decoder.decode_columns(data)
    assert isinstance(cols, tcsv.CsvColumns)
    recs = cols.numbered_records(prefix, store, start, end)
    for r in recs:
        r.metadata.update(extra or {})
    return jsonform.dumps_lines(recs, store)


@st.composite
def supported_tables(draw) -> TableSchema:
    """Tables of the supported column types only (0-2 NOT NULL key columns, any order)."""
    n = draw(st.integers(1, 10))
    cols = []
    nkey = draw(st.integers(0, min(2, n)))
    for i in range(n):
        c = draw(columns(f"c{i}", key_capable=i < nkey).filter(lambda c: c.type in SUPPORTED))
        if c.type in ("DATE", "DATETIME", "TIMESTAMP") and draw(st.booleans()):
            c = dataclasses.replace(c, fsp=draw(st.sampled_from([None, 0, 3, 6]))) if c.type != "DATE" else c
        if i < nkey:
            c = dataclasses.replace(c, nullable=False, primary_key=True, handle_key=True)
        cols.append(c)
    order = draw(st.permutations(range(n)))
    return TableSchema(draw(st.sampled_from(["db", "数据"])), draw(st.sampled_from(["t", "t-2"])),
                       tuple(cols[i] for i in order), version=draw(st.integers(0, 2**40)))


def row_values(table: TableSchema):
    """A row: the shared value strategies, with delimiters, quotes, NULL texts and unicode mixed
    into the text columns."""
    fields = {}
    for col in table.columns:
        v = values(col)
        if col.type in ("CHAR", "VARCHAR") or "TEXT" in col.type:
            tricky = st.sampled_from(TRICKY_TEXT)
            if col.type == "CHAR":
                tricky = tricky.map(lambda s: s.rstrip(" "))
            v = st.one_of(v, tricky)
        fields[col.name] = st.one_of(st.none(), v) if col.nullable else v
    return st.fixed_dictionaries(fields)


@st.composite
def files(draw, table_strategy=None):
    table = draw(supported_tables() if table_strategy is None else table_strategy)
    o = draw(st.sampled_from(OPTIONS))
    n = draw(st.integers(0, 12))
    ts = st.one_of(st.integers(0, 2**40), st.sampled_from([0, 1 << 18, 2**62, 2**64 - 1]))
    shared = draw(ts)
    batch = [RowChange(table, draw(st.sampled_from(["insert", "update", "delete"])),
                       draw(st.one_of(st.just(shared), ts)), draw(row_values(table))) for _ in range(n)]
    data = tcsv.encode_rows(batch, table, o)
    return table, o, data, n


extras = st.one_of(st.none(), st.just({}), st.dictionaries(
    st.one_of(st.sampled_from(["opencdc.readAt", "cdcflow.x"]), st.text(max_size=5)), st.text(max_size=5), max_size=3))


@SETTINGS
@given(files(), st.data())
def test_lines_equal_the_record_path(f, data):
    table, o, raw, n = f
    store = data.draw(st.sampled_from([STORE, None]))
    decoder = tcsv.CsvDecoder(table, o)
    rows_ = decoder.transcode(raw, store)
    if rows_ is None:  # handed back: the reference path still reads the file
        decoder.decode_columns(raw)
        return
    assert len(rows_) == rows_.count == n
    start = data.draw(st.integers(0, n))
    end = data.draw(st.integers(start, n + 2))
    extra = data.draw(extras)
    got = rows_.lines(start, end, PREFIX, extra)
    if got is None:
        assert extra and any(k in ("opencdc.collection", "opencdc.createdAt", "ticdc.commit-ts", "ticdc.schema",
                                   "ticdc.table") or k.startswith("opencdc.") for k in extra)
        return
    assert got == expected_lines(decoder, raw, store, start, end, PREFIX, extra)
    cols = decoder.decode_columns(raw)
    assert [rows_.commit_ts_at(k) for k in range(n)] == [cols.commit_ts_at(k) for k in range(n)]


@SETTINGS
@given(files(tables(max_columns=6)), st.data())
def test_any_table_is_written_exactly_or_handed_back(f, data):
    """Every TiDB type (unsupported ones hand the file back)."""
    table, o, raw, n = f
    decoder = tcsv.CsvDecoder(table, o)
    rows_ = decoder.transcode(raw, STORE)
    if rows_ is None:
        return
    assert all(c.type in SUPPORTED for c in table.columns)
    assert rows_.lines(0, n, PREFIX, {"opencdc.readAt": "1"}) == expected_lines(
        decoder, raw, STORE, 0, n, PREFIX, {"opencdc.readAt": "1"})


def bench_table() -> TableSchema:  # the storage benchmark's table (tests/benchmarks/bench_storage.py)
    return TableSchema("bench", "t0", (
        Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True), Column("a", "INT"),
        Column("b", "BIGINT"), Column("c", "DOUBLE"), Column("d", "DECIMAL", precision=12, scale=2),
        Column("e", "VARCHAR", length=64), Column("f", "VARCHAR", length=64), Column("g", "DATE"),
        Column("h", "DATETIME", fsp=0), Column("i", "TINYINT")), version=1 << 18)


def bench_rows(n: int):
    base = datetime.datetime(2024, 1, 1)
    for k in range(n):
        yield {"id": k, "a": k % 1000, "b": k * 7, "c": k / 3, "d": decimal.Decimal(k % 100000).scaleb(-2),
               "e": f"name {k}", "f": "x,y\"z", "g": datetime.date(2024, 1, 1 + k % 28),
               "h": base + datetime.timedelta(seconds=k), "i": k % 100}


@pytest.mark.parametrize("include_commit_ts", [True, False])
@pytest.mark.parametrize("store", [STORE, None], ids=["store", "no-store"])
def test_the_benchmark_table_is_taken_with_every_operation_and_nulls(include_commit_ts, store):
    table = bench_table()
    o = tcsv.CsvOptions(include_commit_ts=include_commit_ts)
    rows_ = list(bench_rows(300))
    for k in range(0, 300, 7):  # NULLs in every nullable column
        rows_[k] = {name: (v if name == "id" else None) for name, v in rows_[k].items()}
    kinds = ["insert", "update", "delete"] * 100
    raw = tcsv.encode_table_rows(table, kinds, [(1 << 18) * 10 + k // 5 for k in range(300)], rows_, None, o)
    decoder = tcsv.CsvDecoder(table, o)
    got = decoder.transcode(raw, store)
    assert got is not None and len(got) == 300
    for start, end in ((0, 300), (10, 11), (299, 400), (5, 5)):
        assert got.lines(start, end, PREFIX, {"opencdc.readAt": "9"}) == expected_lines(
            decoder, raw, store, start, end, PREFIX, {"opencdc.readAt": "9"})
    got.truncate(100)
    assert len(got) == 100 and got.lines(0, 300, PREFIX) == expected_lines(decoder, raw, store, 0, 100, PREFIX, None)
    with pytest.raises(IndexError):
        got.commit_ts_at(100)


def csv_file(table: TableSchema, *lines: str) -> bytes:
    return "".join(f'"I","{table.table}","{table.schema}",{line}\r\n' for line in lines).encode()


ONE = TableSchema("s", "t", (Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
                             Column("x", "DOUBLE"), Column("v", "VARCHAR", length=20),
                             Column("d", "DECIMAL", precision=6, scale=2), Column("h", "DATETIME", fsp=3),
                             Column("u", "BIGINT", unsigned=True)))


@pytest.mark.parametrize("x", ["5", "-0", "0", "0.0001", "0.00001", "1e16", "1E+2", "123456789012345",
                               "1234567890123456", "0.1", "0.30000000000000004", "1.7976931348623157e308",
                               "5e-324", "1e400", "-1e400", "12.5", "100", "9007199254740993"])
def test_float_texts_are_written_as_the_json_writer_writes_their_value(x):
    raw = csv_file(ONE, f'1,{x},"a","1.50","2024-01-01 00:00:00.500",18446744073709551615')
    decoder = tcsv.CsvDecoder(ONE, tcsv.CsvOptions())
    got = decoder.transcode(raw, STORE)
    assert got is not None
    assert got.lines(0, 1, PREFIX) == expected_lines(decoder, raw, STORE, 0, 1, PREFIX, None)


@pytest.mark.parametrize("line, why", [
    ('007,1.5,"a","1.50",\\N,1', "a non-canonical int"),
    ('-0,1.5,"a","1.50",\\N,1', "a negative zero int"),
    ('9223372036854775808,1.5,"a","1.50",\\N,1', "an int past int64 in a BIGINT"),
    ('1,1.5,"a","1.5",\\N,1', "a decimal without its scale"),
    ('1,1.5,"a","01.50",\\N,1', "a decimal with a leading zero"),
    ('1,1.5,"a","-0.00",\\N,1', "a negative zero decimal"),
    ('1,1.5,"a","99999.00",\\N,1', "a decimal past its precision"),
    ('1,NaN,"a","1.50",\\N,1', "a float text outside the plain shapes"),
    ('1,1.5,"\\N","1.50",\\N,1', "a quoted NULL text"),
    ('\\N,1.5,"a","1.50",\\N,1', "NULL in a NOT NULL column"),
    ('1,1.5,"a","1.50","2024-02-30 00:00:00",1', "a datetime that is no date"),
    ('1,1.5,"a","1.50",\\N,123456789012345678901', "an unsigned int of 21 digits"),
])
def test_values_it_does_not_write_exactly_hand_the_file_back(line, why):
    raw = csv_file(ONE, '1,2.5,"ok","1.00",\\N,5', line)
    decoder = tcsv.CsvDecoder(ONE, tcsv.CsvOptions())
    assert decoder.transcode(raw, STORE) is None, why
    try:  # and the reference path decides as before
        decoder.decode_columns(raw)
    except MalformedMessage:
        pass


@pytest.mark.parametrize("raw, error", [
    (b'"I","t","s",1,1.5,"a","1.50",\\N\r\n', "column count"),
    (b'"I","t","s",1,1.5,"a"x,"1.50",\\N,1\r\n', "text after a quoted field"),
    (b'"X","t","s",1,1.5,"a","1.50",\\N,1\r\n', "operation"),
    (b'"I","other","s",1,1.5,"a","1.50",\\N,1\r\n', "another table"),
    (b'"I","t","s",abc,1.5,"a","1.50",\\N,1\r\n', "a bad int"),
    (b'"I","t","s",1,1.5,"\xff\xfe","1.50",\\N,1\r\n', "not UTF-8"),
])
def test_malformed_files_are_handed_back_and_still_raise(raw, error):
    decoder = tcsv.CsvDecoder(ONE, tcsv.CsvOptions(), source="f.csv")
    assert decoder.transcode(raw, STORE) is None, error
    with pytest.raises(MalformedMessage):
        decoder.decode_columns(raw)


def test_tables_with_a_type_it_does_not_write_are_handed_back():
    for col in (Column("t", "TIME", fsp=0), Column("b", "BLOB", binary=True),
                Column("v", "VARBINARY", length=3, binary=True), Column("d", "DECIMAL")):
        table = TableSchema("s", "t", (Column("id", "INT"), col))
        o = tcsv.CsvOptions()
        raw = tcsv.encode_table_rows(table, ["insert"], [1], [{"id": 1, col.name: None}], None, o)
        decoder = tcsv.CsvDecoder(table, o)
        assert decoder.transcode(raw, STORE) is None, col.type
        assert isinstance(decoder.decode_columns(raw), tcsv.CsvColumns)


def test_is_update_pairs_and_odd_dialects_are_handed_back():
    table = bench_table()
    row = next(bench_rows(1))
    for o in (tcsv.CsvOptions(output_old_value=True), tcsv.CsvOptions(delimiter="||"), tcsv.CsvOptions(quote="")):
        raw = tcsv.encode_table_rows(table, ["insert"], [1], [row], None, o)
        assert tcsv.CsvDecoder(table, o).transcode(raw, STORE) is None


@SETTINGS
@given(st.lists(st.binary(max_size=12).filter(lambda b: not set(b) & set(b'",\r\n\\')), min_size=1, max_size=5))
def test_text_is_taken_exactly_when_it_is_utf8(texts):
    table = TableSchema("s", "t", (Column("v", "VARCHAR", length=50),))
    raw = b"".join(b'"I","t","s","' + t + b'"\r\n' for t in texts)
    decoder = tcsv.CsvDecoder(table, tcsv.CsvOptions())
    got = decoder.transcode(raw, None)
    valid = all(_is_utf8(t) for t in texts)
    assert (got is not None) == valid
    if valid:
        assert got.lines(0, len(texts), PREFIX) == expected_lines(decoder, raw, None, 0, len(texts), PREFIX, None)


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_extra_keys_the_rows_have_leave_it_to_python():
    table = bench_table()
    o = tcsv.CsvOptions(include_commit_ts=True)
    raw = tcsv.encode_table_rows(table, ["insert"], [1 << 20], list(bench_rows(1)), None, o)
    got = tcsv.CsvDecoder(table, o).transcode(raw, STORE)
    assert got.lines(0, 1, PREFIX, {"ticdc.commit-ts": "5"}) is None
    assert got.lines(0, 1, PREFIX, {"x": 5}) is None  # not str: the records path writes it


def test_with_the_kernel_off_it_hands_back(monkeypatch):
    table = bench_table()
    raw = tcsv.encode_table_rows(table, ["insert"], [1], list(bench_rows(1)), None, tcsv.CsvOptions())
    monkeypatch.setattr(tcsv_decode, "_kernel", None)
    assert tcsv.CsvDecoder(table, tcsv.CsvOptions()).transcode(raw, STORE) is None


def test_no_leak_over_repeated_files_including_hand_backs():
    table = bench_table()
    o = tcsv.CsvOptions(include_commit_ts=True)
    raw = tcsv.encode_table_rows(table, ["insert", "update", "delete"] * 100, list(range(300)), list(bench_rows(300)),
                                 None, o)
    bad = raw + b'"I","t0","bench",1,007,1,1,1,"1.00","a","b","2024-01-01","2024-01-01 00:00:00",1\r\n'
    decoder = tcsv.CsvDecoder(table, o)
    x_table = TableSchema("s", "t", (Column("x", "DOUBLE"),))  # floats through orjson and the fallback
    x_raw = csv_file(x_table, "1e400", "0.30000000000000004", "1e-7")
    x_decoder = tcsv.CsvDecoder(x_table, tcsv.CsvOptions())

    def run():
        rows_ = decoder.transcode(raw, STORE)
        rows_.lines(0, 300, PREFIX, {"opencdc.readAt": "1"})
        assert decoder.transcode(bad, STORE) is None
        x_decoder.transcode(x_raw, STORE).lines(0, 3, PREFIX)

    assert traced_growth(run, rounds=200, warmup=3) < 64 * 1024
