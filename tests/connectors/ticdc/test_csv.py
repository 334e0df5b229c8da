"""CSV codec: seed 001 golden rows byte for byte, options, quoting/escaping, malformed corpus with
line/column positions, hypothesis round trips (type-strict, through the OpenCDC mapping)."""

from __future__ import annotations

import dataclasses
import datetime
import decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.tidb_strategies import rows, tables

from cdcflow.connectors.ticdc import csv as tcsv
from cdcflow.connectors.ticdc.csv import decode as tcsv_decode
from cdcflow.connectors.ticdc.csv import encode as tcsv_encode
from cdcflow.connectors.ticdc.csv import options as tcsv_options
from cdcflow.connectors.ticdc.errors import MalformedMessage, UnrepresentableValue, UnsupportedEvent
from cdcflow.connectors.ticdc.events import RowChange, to_record
from cdcflow.errors import ConfigError
from cdcflow.schemas import SchemaStore
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

EMPLOYEE = TableSchema("hr", "employee", (
    Column("Id", "INT", nullable=False),
    Column("LastName", "VARCHAR", length=20),
    Column("FirstName", "VARCHAR", length=30),
    Column("HireDate", "DATE"),
    Column("OfficeLocation", "VARCHAR", length=20),
))


def _emp(i, last, first, hired, office):
    return {"Id": i, "LastName": last, "FirstName": first, "HireDate": datetime.date.fromisoformat(hired),
            "OfficeLocation": office}


SEED_EVENTS = [
    RowChange(EMPLOYEE, "insert", 433305438660591626, _emp(101, "Smith", "Bob", "2014-06-04", "New York")),
    RowChange(EMPLOYEE, "update", 433305438660591627, _emp(101, "Smith", "Bob", "2015-10-08", "Los Angeles")),
    RowChange(EMPLOYEE, "delete", 433305438660591629, _emp(101, "Smith", "Bob", "2017-03-13", "Dallas")),
    RowChange(EMPLOYEE, "insert", 433305438660591630, _emp(102, "Alex", "Alice", "2017-03-14", "Shanghai")),
    RowChange(EMPLOYEE, "update", 433305438660591630, _emp(102, "Alex", "Alice", "2018-06-15", "Beijing")),
]
# seed 001, "Definition of the data format" (include-commit-ts = true)
SEED_ROWS = [
    '"I","employee","hr",433305438660591626,101,"Smith","Bob","2014-06-04","New York"',
    '"U","employee","hr",433305438660591627,101,"Smith","Bob","2015-10-08","Los Angeles"',
    '"D","employee","hr",433305438660591629,101,"Smith","Bob","2017-03-13","Dallas"',
    '"I","employee","hr",433305438660591630,102,"Alex","Alice","2017-03-14","Shanghai"',
    '"U","employee","hr",433305438660591630,102,"Alex","Alice","2018-06-15","Beijing"',
]


# --------------------------------------------------------------------------- golden

@pytest.mark.parametrize("terminator", ["\r\n", "\n"])
def test_seed_001_employee_rows_byte_for_byte(terminator):
    opts = tcsv.CsvOptions(include_commit_ts=True, terminator=terminator)
    expected = "".join(r + terminator for r in SEED_ROWS).encode()
    assert tcsv.encode_rows(SEED_EVENTS, EMPLOYEE, opts) == expected
    back = tcsv.CsvDecoder(EMPLOYEE, opts).decode(expected)
    assert [(e.kind, e.commit_ts, e.row) for e in back] == [(e.kind, e.commit_ts, e.row) for e in SEED_EVENTS]


def test_output_old_value_and_header_as_in_ticdc_docs():
    """TiCDC docs: include-commit-ts, output-old-value and output-field-header all true."""
    opts = tcsv.CsvOptions(include_commit_ts=True, output_old_value=True, output_field_header=True,
                           terminator="\n")
    events = [
        RowChange(EMPLOYEE, "insert", 433305438660591626, _emp(101, "Smith", "Bob", "2014-06-04", "New York")),
        RowChange(EMPLOYEE, "update", 433305438660591627, _emp(101, "Smith", "Bob", "2015-10-08", "Los Angeles"),
                  _emp(101, "Smith", "Bob", "2015-10-08", "Shanghai")),
        RowChange(EMPLOYEE, "delete", 433305438660591629, _emp(101, "Smith", "Bob", "2017-03-13", "Dallas")),
    ]
    expected = (
        "ticdc-meta$operation,ticdc-meta$table,ticdc-meta$schema,ticdc-meta$commit-ts,ticdc-meta$is-update,"
        "Id,LastName,FirstName,HireDate,OfficeLocation\n"
        '"I","employee","hr",433305438660591626,false,101,"Smith","Bob","2014-06-04","New York"\n'
        '"D","employee","hr",433305438660591627,true,101,"Smith","Bob","2015-10-08","Shanghai"\n'
        '"I","employee","hr",433305438660591627,true,101,"Smith","Bob","2015-10-08","Los Angeles"\n'
        '"D","employee","hr",433305438660591629,false,101,"Smith","Bob","2017-03-13","Dallas"\n'
    ).encode()
    assert tcsv.encode_rows(events, EMPLOYEE, opts) == expected
    back = tcsv.CsvDecoder(EMPLOYEE, opts).decode(expected)
    assert [(e.kind, e.commit_ts, e.row, e.old) for e in back] == [
        (e.kind, e.commit_ts, e.row, e.old) for e in events]


def test_header_with_space_delimiter_and_no_options():
    t = TableSchema("s", "t", (Column("col1", "INT"), Column("col2", "INT")))
    o = tcsv.CsvOptions(delimiter=" ", include_commit_ts=True, output_old_value=True)
    assert tcsv.header_line(t, o) == ("ticdc-meta$operation ticdc-meta$table ticdc-meta$schema "
                                      "ticdc-meta$commit-ts ticdc-meta$is-update col1 col2\r\n")
    assert tcsv.header_line(t, tcsv.CsvOptions()) == \
        "ticdc-meta$operation,ticdc-meta$table,ticdc-meta$schema,col1,col2\r\n"


ALL_TYPES = TableSchema("s", "all", (
    Column("i", "BIGINT", unsigned=True), Column("f", "DOUBLE"), Column("d", "DECIMAL", precision=10, scale=7),
    Column("dt", "DATETIME", fsp=6), Column("tm", "TIME", fsp=0), Column("y", "YEAR"), Column("b", "BLOB", binary=True),
    Column("bit", "BIT", length=8), Column("e", "ENUM", elements=("a", "b")), Column("st", "SET", elements=("a", "b")),
    Column("j", "JSON"), Column("n", "INT"),
))
ALL_ROW = {"i": 2**64 - 1, "f": 153.123, "d": decimal.Decimal("129012.1230000"),
           "dt": datetime.datetime(1973, 12, 30, 15, 30, 0, 123456), "tm": datetime.timedelta(hours=23, minutes=59,
                                                                                               seconds=59),
           "y": 1970, "b": "阿斯".encode(), "bit": 81, "e": "a", "st": "a,b", "j": '{"k": "v"}', "n": None}


def test_type_mapping_table_of_seed_001():
    line = tcsv.encode_rows([RowChange(ALL_TYPES, "insert", 1, ALL_ROW)], ALL_TYPES)
    assert line == ('"I","all","s",18446744073709551615,153.123,"129012.1230000","1973-12-30 15:30:00.123456",'
                    '"23:59:59",1970,"6Zi/5pav",81,"a","a,b","{""k"": ""v""}",\\N\r\n').encode()
    hexed = tcsv.encode_rows([RowChange(ALL_TYPES, "insert", 1, ALL_ROW)], ALL_TYPES,
                             tcsv.CsvOptions(binary_encoding_method="hex"))
    assert b'"e998bfe696af"' in hexed
    for data, o in [(line, tcsv.CsvOptions()), (hexed, tcsv.CsvOptions(binary_encoding_method="hex"))]:
        assert tcsv.CsvDecoder(ALL_TYPES, o).decode(data)[0].row == ALL_ROW


def test_floats_are_written_as_go_prints_them():
    t = TableSchema("s", "f", (Column("f", "DOUBLE"),))
    out = [tcsv.encode_rows([RowChange(t, "insert", 1, {"f": v})], t).decode().split(",")[-1].strip()
           for v in (1e6, 123456789.0, 1.5e-5, 0.0001, 100000.0, -2.0, 5e-324)]
    assert out == ["1e+06", "1.23456789e+08", "1.5e-05", "0.0001", "100000", "-2", "5e-324"]


def test_empty_quote_uses_backslash_escapes_and_multichar_delimiter():
    t = TableSchema("s", "t", (Column("a", "VARCHAR", length=50), Column("b", "INT")))
    o = tcsv.CsvOptions(quote="", delimiter="|;")
    value = "x|;y\\z\r\nw;|"
    data = tcsv.encode_rows([RowChange(t, "insert", 1, {"a": value, "b": None})], t, o)
    assert data == b"I|;t|;s|;x\\|\\;y\\\\z\\r\\nw;||;\\N\r\n"
    assert tcsv.CsvDecoder(t, o).decode(data)[0].row == {"a": value, "b": None}
    with pytest.raises(UnrepresentableValue, match="NULL text"):
        tcsv.encode_rows([RowChange(t, "insert", 1, {"a": "", "b": 1})], t, dataclasses.replace(o, null=""))


def test_quoted_null_text_is_a_value_not_null():
    t = TableSchema("s", "t", (Column("a", "VARCHAR", length=5), Column("b", "BLOB", binary=True)))
    for null in ("\\N", ""):
        o = tcsv.CsvOptions(null=null)
        evs = [RowChange(t, "insert", 1, {"a": null, "b": b""}), RowChange(t, "insert", 1, {"a": None, "b": None})]
        data = tcsv.encode_rows(evs, t, o)
        assert [e.row for e in tcsv.CsvDecoder(t, o).decode(data)] == [e.row for e in evs]


def test_output_handle_key_column():
    t = TableSchema("s", "t", (Column("a", "INT", handle_key=True, primary_key=True, nullable=False),
                               Column("v", "VARCHAR", length=5)))
    o = tcsv.CsvOptions(output_handle_key=True)
    data = tcsv.encode_rows([RowChange(t, "insert", 1, {"a": 7, "v": "x"})], t, o)
    assert data == b'"I","t","s","7",7,"x"\r\n'
    assert tcsv.CsvDecoder(t, o).decode(data)[0].row == {"a": 7, "v": "x"}
    # TiCDC v8 ignores the option ("not support output handle key"): such files read too
    assert tcsv.CsvDecoder(t, o).decode(b'"I","t","s",7,"x"\r\n')[0].row == {"a": 7, "v": "x"}


def test_options_from_config_and_validation():
    o = tcsv.CsvOptions.from_config({"delimiter": "|", "quote": "'", "include-commit-ts": "true",
                                     "binary-encoding-method": "hex", "output-old-value": True})
    assert (o.delimiter, o.quote, o.include_commit_ts, o.binary_encoding_method, o.output_old_value) == (
        "|", "'", True, "hex", True)
    for bad in ({"delimiter": ""}, {"delimiter": "abcd"}, {"quote": "ab"}, {"delimiter": "\"", "quote": "\""},
                {"binary-encoding-method": "base32"}, {"include-commit-ts": "perhaps"}):
        with pytest.raises(ConfigError):
            tcsv.CsvOptions.from_config(bad)


def test_encode_refuses_what_csv_cannot_carry():
    with pytest.raises(UnrepresentableValue) as e:
        tcsv.encode_rows([RowChange(EMPLOYEE, "insert", 1, {**SEED_EVENTS[0].row, "Id": "101"})], EMPLOYEE)
    assert e.value.table == "hr.employee" and e.value.column == "Id" and e.value.value == "101"
    with pytest.raises(UnrepresentableValue, match="LastName"):
        tcsv.encode_rows([RowChange(EMPLOYEE, "insert", 1, {"Id": 1})], EMPLOYEE)
    other = dataclasses.replace(EMPLOYEE, table="other")
    with pytest.raises(UnsupportedEvent):
        tcsv.encode_rows([RowChange(other, "insert", 1, SEED_EVENTS[0].row)], EMPLOYEE)


# --------------------------------------------------------------------------- malformed corpus

_OPTS = tcsv.CsvOptions(include_commit_ts=True)
_GOOD = SEED_ROWS[0]

MALFORMED = [
    # (data, match, line in position)
    (_GOOD + "\r\n" + '"I","employee","hr",1,101,"Smith"\r\n', "expected 9 fields", "line 2"),
    (_GOOD + ',"extra"\r\n', "expected 9 fields", "line 1"),
    ('"X","employee","hr",1,101,"a","b","2014-06-04","c"\r\n', "operation must be I, U or D", "line 1, column 1"),
    ('"I","employee","hr",abc,101,"a","b","2014-06-04","c"\r\n', "commit-ts", "line 1, column 4"),
    ('"I","employee","hr",1,1x1,"a","b","2014-06-04","c"\r\n', "as INT", "line 1, column 5 (Id)"),
    ('"I","employee","hr",1,101,"a","b","2014-13-04","c"\r\n', "as DATE", "line 1, column 8 (HireDate)"),
    ('"I","employee","hr",1,101,"a","b","2014/06/04","c"\r\n', "as DATE", "line 1, column 8"),
    ('"I","other","hr",1,101,"a","b","2014-06-04","c"\r\n', "in a reader for hr.employee", "line 1, column 2"),
    ('"I","employee","hr",1,101,"a,"b","2014-06-04","c"\r\n', "after a quoted field", "line 1, column 6"),
    ('"I","employee","hr",1,101,"a","b","2014-06-04","c\r\n', "not closed", "line 1, column 9"),
    ("\r\n", "expected 9 fields", "line 1"),
]


@pytest.mark.parametrize("data,match,where", MALFORMED, ids=[str(i) for i in range(len(MALFORMED))])
def test_malformed_corpus_names_line_and_column(data, match, where):
    with pytest.raises(MalformedMessage, match=match) as e:
        tcsv.CsvDecoder(EMPLOYEE, _OPTS, source="hr/employee/1/CDC1.csv").decode(data.encode(), start_line=1)
    assert e.value.codec == "csv"
    assert e.value.position.startswith("hr/employee/1/CDC1.csv " + where)


def test_start_line_offsets_positions_and_bad_binary():
    t = TableSchema("s", "t", (Column("b", "BLOB", binary=True),))
    with pytest.raises(MalformedMessage, match="as BLOB") as e:
        tcsv.CsvDecoder(t).decode(b'"I","t","s","AAA="\r\n"I","t","s","**"\r\n', start_line=40)
    assert e.value.position == "line 41, column 4 (b)"
    with pytest.raises(MalformedMessage, match="not hex"):
        tcsv.CsvDecoder(t, tcsv.CsvOptions(binary_encoding_method="hex")).decode(b'"I","t","s","0g"\r\n')
    with pytest.raises(MalformedMessage, match="not UTF-8"):
        tcsv.CsvDecoder(t).decode(b'"I","t","s","\xff"\r\n')


def test_unpaired_update_rows_and_bad_header():
    o = tcsv.CsvOptions(output_old_value=True)
    d_only = b'"D","employee","hr",true,101,"Smith","Bob","2015-10-08","Shanghai"\r\n'
    with pytest.raises(MalformedMessage, match="is-update D row"):
        tcsv.CsvDecoder(EMPLOYEE, o).decode(d_only)
    with pytest.raises(MalformedMessage, match="is-update must be"):
        tcsv.CsvDecoder(EMPLOYEE, o).decode(d_only.replace(b"true", b"yes"))
    h = tcsv.CsvOptions(output_field_header=True)
    with pytest.raises(MalformedMessage, match="header"):
        tcsv.CsvDecoder(EMPLOYEE, h).decode(b"a,b,c\r\n")


# --------------------------------------------------------------------------- round trips

OPTION_SETS = [
    tcsv.CsvOptions(),
    tcsv.CsvOptions(include_commit_ts=True, output_old_value=True, output_field_header=True),
    tcsv.CsvOptions(quote="", delimiter="|;", binary_encoding_method="hex", include_commit_ts=True),
    tcsv.CsvOptions(quote="'", delimiter=";", terminator="\n", null=""),
    tcsv.CsvOptions(delimiter="\t", null="NULL", output_handle_key=True, include_commit_ts=True),
    tcsv.CsvOptions(delimiter="::", terminator="\n", include_commit_ts=True),
]


@st.composite
def _events(draw):
    table = draw(tables())
    out = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["insert", "update", "delete"]))
        old = draw(rows(table)) if kind == "update" else None
        out.append(RowChange(table, kind, draw(st.integers(0, 2**64 - 1)), draw(rows(table)), old))
    return table, out


def _expected(ev: RowChange, o: tcsv.CsvOptions) -> RowChange:
    """What CSV can carry: no commit ts without include-commit-ts, no old image without output-old-value."""
    return dataclasses.replace(ev, commit_ts=ev.commit_ts if o.include_commit_ts else 0,
                               old=ev.old if o.output_old_value else None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_events(), st.sampled_from(range(len(OPTION_SETS))))
def test_round_trip(data, which):
    table, batch = data
    o = OPTION_SETS[which]
    if not o.quote and o.null == "":
        return
    encoded = tcsv.encode_rows(batch, table, o)
    back = tcsv.CsvDecoder(table, o).decode(encoded)
    assert len(back) == len(batch)
    for orig, got in zip(batch, back):
        assert to_record(got, b"") == to_record(_expected(orig, o), b""), encoded


# --------------------------------------------------------------------------- fast paths vs careful paths
# The column-wise decoder and the generated line writer must give exactly what the row-wise
# decoder and the per-row ``_Writer.line`` give, or leave the data to them.

_STORE = SchemaStore()  # one in-memory store for every example
FAST_OPTION_SETS = [o for o in OPTION_SETS if len(o.delimiter) == 1 and len(o.quote) == 1] + [
    tcsv.CsvOptions(include_commit_ts=True, binary_encoding_method="hex", output_field_header=True),
    tcsv.CsvOptions(quote="'", null="NULL", terminator="\n"),
]


def _row_wise(dec: tcsv.CsvDecoder, data: bytes) -> list[RowChange]:
    return dec._events(dec._records(data.decode(), 1), 1)


def _careful_lines(events, table, o: tcsv.CsvOptions) -> bytes:
    w = tcsv_encode._Writer(table, o)
    head = [tcsv.header_line(table, o)] if o.output_field_header else []
    return "".join(head + [w.line(tcsv_options._OPS[e.kind], e.commit_ts, e.row, e.kind == "update") for e in events]).encode()


@st.composite
def _plain_events(draw, min_rows=1, max_rows=6):
    """Rows without old images (what the column-wise reader takes)."""
    table = draw(tables())
    n = draw(st.integers(min_rows, max_rows))
    return table, [RowChange(table, draw(st.sampled_from(["insert", "update", "delete"])),
                             draw(st.integers(0, 2**64 - 1)), draw(rows(table))) for _ in range(n)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_plain_events(), st.sampled_from(range(len(FAST_OPTION_SETS))))
def test_fast_paths_equal_careful_paths(data, which):
    table, batch = data
    o = FAST_OPTION_SETS[which]
    if o.output_old_value:
        o = dataclasses.replace(o, output_old_value=False)
    encoded = tcsv.encode_rows(batch, table, o)
    assert encoded == _careful_lines(batch, table, o)
    dec = tcsv.CsvDecoder(table, o)
    slow = _row_wise(dec, encoded)
    fast = dec.decode(encoded)
    assert [to_record(e, b"") for e in fast] == [to_record(e, b"") for e in slow]
    columns = dec.decode_columns(encoded)
    positions = [b"p%d" % k for k in range(len(slow))]
    store = _STORE
    expected = [to_record(e, p, store) for e, p in zip(slow, positions)]
    if isinstance(columns, tcsv.CsvColumns):
        assert columns.records(positions, store) == expected
        assert columns.records(positions[1:], store, 1) == expected[1:]
    else:  # left to the row-wise reader (e.g. a quoted value equal to the NULL text)
        assert [to_record(e, b"") for e in columns] == [to_record(e, b"") for e in slow]


MANY = TableSchema("db", "many", (
    Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
    Column("d", "DATE"), Column("ts", "DATETIME", fsp=3), Column("price", "DECIMAL", precision=10, scale=2),
    Column("b", "VARBINARY", length=16, binary=True), Column("s", "VARCHAR", length=20), Column("f", "DOUBLE"),
))


def _many(n: int, null_at: int | None = None) -> list[RowChange]:
    out = []
    for i in range(n):
        row = {"id": i, "d": datetime.date(2024, 1, 1 + i % 28),
               "ts": datetime.datetime(2024, 1, 1, 12, 0, i % 60, (i % 1000) * 1000),
               "price": decimal.Decimal(i) / 100 if i % 3 else decimal.Decimal(f"{i}.00"), "b": bytes([i % 256, 7]),
               "s": f"row {i}, \"q\"", "f": i / 7 if i % 5 else 1e20}
        if i == null_at:
            row = {**row, "d": None, "ts": None, "price": None, "b": None, "s": None, "f": None}
        out.append(RowChange(MANY, "insert" if i % 4 else "update", (1 << 18) * (100 + i), row))
    return out


def test_column_wise_decode_across_chunks_with_nulls_and_header():
    o = tcsv.CsvOptions(include_commit_ts=True, output_field_header=True)
    events = _many(3 * tcsv_decode._COLUMN_CHUNK + 17, null_at=2 * tcsv_decode._COLUMN_CHUNK + 5)
    data = tcsv.encode_rows(events, MANY, o)
    assert data == _careful_lines(events, MANY, o)
    dec = tcsv.CsvDecoder(MANY, o)
    columns = dec.decode_columns(data)
    assert isinstance(columns, tcsv.CsvColumns) and len(columns) == len(events)
    slow = _row_wise(dec, data)
    assert [(e.kind, e.commit_ts, e.row) for e in slow] == [(e.kind, e.commit_ts, e.row) for e in events]
    assert [to_record(e, b"") for e in dec.decode(data)] == [to_record(e, b"") for e in slow]
    assert columns.records([b""] * len(events)) == [to_record(e, b"") for e in slow]
    assert columns.records([b""] * 300, None, 250, 550) == [to_record(e, b"") for e in slow[250:550]]


def test_column_wise_decode_leaves_bad_values_to_the_row_wise_reader_which_names_line_and_column():
    o = tcsv.CsvOptions(include_commit_ts=True)
    events = _many(600)
    lines = tcsv.encode_rows(events, MANY, o).decode().split("\r\n")
    lines[400] = lines[400].replace('"2024-', '"2024-W', 1)  # an ISO week date: fromisoformat takes it, TiDB not
    with pytest.raises(MalformedMessage, match=r"line 401, column 6 \(d\)"):
        tcsv.CsvDecoder(MANY, o).decode_columns("\r\n".join(lines).encode())
    lines = tcsv.encode_rows(events, MANY, o).decode().split("\r\n")
    lines[599] = lines[599].replace(",7", ",x7", 1) if ",7" in lines[599] else lines[599] + ",1"
    with pytest.raises(MalformedMessage, match="line 600"):
        tcsv.CsvDecoder(MANY, o).decode("\r\n".join(lines).encode())


def test_column_wise_decode_quoted_null_text_and_lax_base64():
    t = TableSchema("s", "t", (Column("a", "INT"), Column("v", "VARCHAR", length=8),
                               Column("b", "BLOB", binary=True)))
    data = b'"I","t","s",1,"\\N","AQI="\r\n"I","t","s",\\N,\\N,\\N\r\n'
    got = tcsv.CsvDecoder(t).decode_columns(data)
    assert [e.row for e in got] == [{"a": 1, "v": "\\N", "b": b"\x01\x02"}, {"a": None, "v": None, "b": None}]
    # "AQJ=" is not the canonical encoding of b"\x01\x02" (trailing bits set): the strict parser decides
    for text in (b"AQJ=", b"AQI"):
        data = b'"I","t","s",1,"x","' + text + b'"\r\n'
        try:
            want = [e.row for e in _row_wise(tcsv.CsvDecoder(t), data)]
        except MalformedMessage:
            with pytest.raises(MalformedMessage, match="column 6"):
                tcsv.CsvDecoder(t).decode_columns(data)
            continue
        assert [e.row for e in tcsv.CsvDecoder(t).decode(data)] == want


def test_fast_writer_leaves_odd_values_to_the_careful_writer():
    o = tcsv.CsvOptions(include_commit_ts=True)
    ev = _many(3)
    padded = RowChange(MANY, "insert", 5, {**ev[1].row, "price": decimal.Decimal("1.5"), "f": 1e-7,
                                           "ts": datetime.datetime(2024, 1, 1)})
    assert tcsv.encode_rows(ev + [padded], MANY, o) == _careful_lines(ev + [padded], MANY, o)
    assert b'"1.50"' in tcsv.encode_rows([padded], MANY, o) and b"1e-07" in tcsv.encode_rows([padded], MANY, o)
    for column, value in (("price", decimal.Decimal("1.234")), ("ts", datetime.datetime(2024, 1, 1, 0, 0, 0, 1)),
                          ("id", "7"), ("b", "text")):
        bad = RowChange(MANY, "insert", 5, {**ev[1].row, column: value})
        with pytest.raises(UnrepresentableValue, match=column):
            tcsv.encode_rows(ev + [bad], MANY, o)


# --------------------------------------------------------------------------- one writer, inline forms

@settings(max_examples=400, deadline=None)
@given(st.one_of(st.floats(), st.floats(-1e7, 1e7), st.floats(-1e-3, 1e-3), st.integers(), st.none(),
                 st.sampled_from([0.0, -0.0, 1e-4, -1e-4, 1e6, -1e6, 999999.9999999999, 9.999999999999999e-05])))
def test_inline_go_float_expr_equals_format_go_float(value):
    from cdcflow.connectors.ticdc import tidb

    def outcome(fn):
        try:
            return fn(value)
        except Exception as e:
            return type(e)
    ns = {"slow": tidb.format_go_float}
    exec(f"def f(v):\n    return {tidb.inline_go_float_expr('v', 'slow(v)')}\n", ns)
    assert outcome(ns["f"]) == outcome(tidb.format_go_float)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_events(), st.sampled_from(range(len(OPTION_SETS))))
def test_encode_table_rows_is_encode_rows(data, which):
    table, batch = data
    o = OPTION_SETS[which]
    try:
        want = tcsv.encode_rows(batch, table, o)
    except UnrepresentableValue as e:
        with pytest.raises(UnrepresentableValue) as got:
            tcsv.encode_table_rows(table, [e.kind for e in batch], [e.commit_ts for e in batch],
                                   [e.row for e in batch], [e.old for e in batch], o)
        assert str(got.value) == str(e)
        return
    assert tcsv.encode_table_rows(table, [e.kind for e in batch], [e.commit_ts for e in batch],
                                  [e.row for e in batch], [e.old for e in batch], o) == want


def test_quote_or_delimiter_inside_a_text_form_is_still_escaped():
    """A quote character that can occur in a DATE/DECIMAL/DATETIME text ('-', '.', ':') must be
    doubled, and with backslash escaping a delimiter that can occur in one must be escaped: the
    inline forms step aside there and the careful writer (which does both) takes the column."""
    t = TableSchema("s", "t", (Column("d", "DATE"), Column("p", "DECIMAL", precision=6, scale=2),
                               Column("ts", "DATETIME", fsp=0)))
    row = {"d": datetime.date(2024, 5, 6), "p": decimal.Decimal("-1.50"), "ts": datetime.datetime(2024, 5, 6, 7, 8, 9)}
    ev = RowChange(t, "insert", 0, row)
    for o in (tcsv.CsvOptions(quote="-"), tcsv.CsvOptions(quote="."), tcsv.CsvOptions(quote=":"),
              tcsv.CsvOptions(quote="", delimiter="-"), tcsv.CsvOptions(quote="", delimiter=":", null="1.50"),
              tcsv.CsvOptions(quote="", delimiter="|")):
        data = tcsv.encode_rows([ev], t, o)
        assert data == _careful_lines([ev], t, o), o
        assert [e.row for e in tcsv.CsvDecoder(t, o).decode(data)] == [row], (o, data)
    assert tcsv.encode_rows([ev], t, tcsv.CsvOptions(quote="-")).startswith(b'-I-,-t-,-s-,-2024--05--06-,---1.50-,')


def test_encode_rows_refuses_other_events_and_tables():
    from cdcflow.connectors.ticdc.events import ResolvedEvent

    ev = _many(2)
    with pytest.raises(UnsupportedEvent, match="rows only, not ResolvedEvent"):
        tcsv.encode_rows(ev + [ResolvedEvent(1)], MANY)
    other = TableSchema("db", "other", MANY.columns)
    with pytest.raises(UnsupportedEvent, match="row of db.other in a CSV file of db.many"):
        tcsv.encode_rows(ev + [dataclasses.replace(ev[0], table=other)], MANY)
    twin = TableSchema("db", "many", MANY.columns)  # another object of the same table: written
    assert tcsv.encode_rows([dataclasses.replace(e, table=twin) for e in ev], MANY) == tcsv.encode_rows(ev, MANY)
    with pytest.raises(UnsupportedEvent, match="row without values"):
        tcsv.encode_rows([dataclasses.replace(ev[0], row=None)], MANY)
