"""The compiled CSV kernel (``_csv.c``) against the pure-Python path it shortens.

Differential: for generated tables, rows and options, for crafted field texts of every column
kind, for corrupted files and for values the fast text forms do not cover, decoding and encoding
with the kernel give exactly (type-strict) what the Python path gives, or the same typed error
with the same message. The kernel must also actually take clean data (else these tests would
compare Python with itself). A tracemalloc check catches missed DECREFs.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.kernels import CSV, both, strict
from helpers.tidb_strategies import rows, tables

from cdcflow.connectors.ticdc import csv as tcsv
from cdcflow.connectors.ticdc.csv import decode as tcsv_decode
from cdcflow.connectors.ticdc.csv import encode as tcsv_encode
from cdcflow.connectors.ticdc.events import RowChange
from cdcflow.connectors.ticdc.tidb import Column, TableSchema
from helpers.leakcheck import traced_growth

_csv = pytest.importorskip("cdcflow.connectors.ticdc.csv._csv", reason="the CSV kernel is not built")

pytestmark = CSV.required()

OPTIONS = [
    tcsv.CsvOptions(),
    tcsv.CsvOptions(include_commit_ts=True, output_field_header=True),
    tcsv.CsvOptions(quote="'", delimiter=";", terminator="\n", null=""),
    tcsv.CsvOptions(delimiter="\t", null="NULL", output_handle_key=True, include_commit_ts=True),
    tcsv.CsvOptions(include_commit_ts=True, binary_encoding_method="hex", output_field_header=True,
                    output_handle_key=True),
    tcsv.CsvOptions(quote="/", delimiter="|"),  # a quote base64 can contain
    tcsv.CsvOptions(quote="1", delimiter=","),  # a quote digits contain: DECIMAL/DATE forms go careful
]
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_same_decode(table: TableSchema, o: tcsv.CsvOptions, data: bytes, start_line: int = 1) -> None:
    dec = tcsv.CsvDecoder(table, o, source="f.csv")
    k, p = both(CSV, lambda: dec.decode(data, start_line), strict)
    assert k == p, data
    k, p = both(CSV, lambda: dec.decode_columns(data, start_line), strict)
    assert k == p, data


def kernel_takes(table: TableSchema, o: tcsv.CsvOptions, data: bytes) -> bool:
    plan = tcsv_decode._decode_plan(table, o)
    return plan is not None and _csv.decode(plan, data, o.output_field_header) is not None


# --------------------------------------------------------------------------- decode

@st.composite
def batches(draw, max_rows: int = 6):
    table = draw(tables())
    n = draw(st.integers(0, max_rows))
    return table, [RowChange(table, draw(st.sampled_from(["insert", "update", "delete"])),
                             draw(st.integers(0, 2**64 - 1)), draw(rows(table))) for _ in range(n)]


@SETTINGS
@given(batches(), st.sampled_from(range(len(OPTIONS))))
def test_decode_generated_rows_equals_python_and_is_taken(data, which):
    table, batch = data
    o = OPTIONS[which]
    encoded = tcsv.encode_rows(batch, table, o)
    assert_same_decode(table, o, encoded)
    quoted_null = (o.quote + o.null.replace(o.quote, o.quote * 2) + o.quote).encode()
    if quoted_null not in encoded and o.quote != "1":  # unquoted numbers hold that quote: Python reads those
        assert kernel_takes(table, o, encoded), encoded


_SNIPPETS = [b'"', b"'", b",", b";", b"\r", b"\n", b"\r\n", b"\x00", b"\xff", b"\xc3", b"\\N", b'"\\N"', b"+",
             b" ", b"e", b"E5", b".", b"-", b"=", b"\xe2\x80\xa8", b"\xf0\x9f\x98\x80", b"\x85", b"NULL", b"",
             b"9" * 30, b"\t"]


@SETTINGS
@given(batches(max_rows=3), st.sampled_from(range(len(OPTIONS))),
       st.lists(st.tuples(st.floats(0, 1), st.integers(0, 3), st.sampled_from(_SNIPPETS)), min_size=1, max_size=4),
       st.integers(1, 3))
def test_decode_corrupted_files_equals_python(data, which, edits, start_line):
    table, batch = data
    o = OPTIONS[which]
    encoded = tcsv.encode_rows(batch, table, o)
    for where, cut, snippet in edits:
        at = int(where * len(encoded))
        encoded = encoded[:at] + snippet + encoded[at + cut:]
    assert_same_decode(table, o, encoded, start_line)


KINDS = TableSchema("db", "kinds", (
    Column("i", "BIGINT", unsigned=True, handle_key=True, primary_key=True, nullable=False),
    Column("f", "DOUBLE"), Column("d", "DECIMAL", precision=20, scale=3), Column("day", "DATE"),
    Column("at", "DATETIME", fsp=6), Column("t", "TIME", fsp=6), Column("b", "VARBINARY", binary=True),
    Column("s", "VARCHAR"), Column("e", "ENUM", elements=("a", "b")), Column("y", "YEAR"), Column("j", "JSON"),
))
_EDGE_TEXTS = {
    "i": ["0", "-1", "007", "+5", " 5", "1_000", "\u0663", "18446744073709551615", "18446744073709551616",
          "-9223372036854775809", "1.0", ""],
    "f": ["1.5", "-0", "1e+06", "1E-05", "1e999", ".5", "5.", "inf", "nan", "1_0.5", " 2", "0x10", ""],
    "d": ["1.250", "-0.000", "12", "1E+3", "NaN", "-Infinity", " 1", "1_0", "9" * 70, "0.1234", "abc", ""],
    "day": ["2024-02-29", "2023-02-29", "0000-01-01", "2024-13-01", "2024-1-01", "20240101", "\u0663024-01-01",
            "9999-12-31", "0001-01-01", ""],
    "at": ["2024-01-02 03:04:05", "2024-01-02 03:04:05.1", "2024-01-02 03:04:05.123456",
           "2024-01-02 03:04:05.1234567", "2024-01-02T03:04:05", "2024-01-02 24:00:00", "2024-01-02 03:04",
           "2024-01-02 03:04:05.", "2024-01-02 03:04:05+08:00", ""],
    "t": ["00:00:00", "-838:59:59", "838:59:59.000001", "839:00:00", "12:60:00", "1:02:03", "-00:00:00.5",
          "100:00:00.123456", ""],
    "b": ["", "QQ==", "QUI=", "QUJD", "QR==", "QQ", "Q===", "QUJD\nRA==", "not base64!", "QUJ D"],
    "s": ["", "plain", "with \"quotes\"", "comma, inside", "line\r\nbreak", "\u2028", "\x01\x1f", "\U0001f600", "\\N"],
    "e": ["a", "b", "", "zz"],
    "y": ["2024", "0", "-1", "+1", ""],
    "j": ['{"a": 1}', "[]", "null", ""],
}


@st.composite
def kind_rows(draw):
    """CSV lines of KINDS with edge texts for every column, each field maybe quoted or NULL."""
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["I", "U", "D", "X", ""]))
        meta = [op, "kinds", draw(st.sampled_from(["db", "other"])),
                draw(st.sampled_from(["5", "0", "-1", "+5", "18446744073709551615", "18446744073709551616", "x"]))]
        fields = []
        for col in KINDS.columns:
            text = draw(st.sampled_from(_EDGE_TEXTS[col.name]))
            how = draw(st.sampled_from(["plain", "quoted", "null", "quoted-null"]))
            if how == "null":
                fields.append("\\N")
            elif how == "quoted-null":
                fields.append('"\\N"')
            elif how == "quoted" or any(c in text for c in ',"\r\n'):
                fields.append('"' + text.replace('"', '""') + '"')
            else:
                fields.append(text)
        lines.append(",".join(meta + fields))
    terminator = draw(st.sampled_from(["\r\n", "\n"]))
    return (terminator.join(lines) + draw(st.sampled_from([terminator, ""]))).encode("utf-8", "surrogatepass")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind_rows())
def test_decode_edge_texts_of_every_kind_equals_python(data):
    assert_same_decode(KINDS, tcsv.CsvOptions(include_commit_ts=True), data)


def test_decode_takes_canonical_texts_of_every_kind():
    line = ('"I","kinds","db",7,18446744073709551615,-1.5e-07,-12.500,2024-02-29,"2024-01-02 03:04:05.000001",'
            '"-838:59:58.5","QUJD","a ""b""\u2028\U0001f600","a",2024,"{}"\r\n')
    o = tcsv.CsvOptions(include_commit_ts=True)
    assert kernel_takes(KINDS, o, line.encode())
    assert_same_decode(KINDS, o, line.encode() * 3)
    columns = tcsv.CsvDecoder(KINDS, o).decode_columns(line.encode())
    assert [c[0] for c in columns.columns] == [
        2**64 - 1, -1.5e-07, decimal.Decimal("-12.500"), datetime.date(2024, 2, 29),
        datetime.datetime(2024, 1, 2, 3, 4, 5, 1), -datetime.timedelta(hours=838, minutes=59, seconds=58.5),
        b"ABC", 'a "b"\u2028\U0001f600', "a", 2024, "{}"]


def test_decode_hands_back_what_python_rejects_with_its_position():
    o = tcsv.CsvOptions(include_commit_ts=True)
    bad = b'"I","kinds","db",7,1,1.5,1.000,2024-02-30,\\N,\\N,\\N,\\N,\\N,\\N,\\N\r\n'
    plan = tcsv_decode._decode_plan(KINDS, o)
    assert _csv.decode(plan, bad, False) is None
    with pytest.raises(tcsv_decode.MalformedMessage, match=r"f.csv line 1, column 8 \(day\)"):
        tcsv.CsvDecoder(KINDS, o, source="f.csv").decode(bad)


# --------------------------------------------------------------------------- encode

_ODD_VALUES = [True, 1, 1.5, -0.0, float("nan"), float("inf"), 1e20, 1e-5, 2**70, -2**70, 2**64 - 1,
               decimal.Decimal("1.5"), decimal.Decimal("NaN"), decimal.Decimal("1E+2"), decimal.Decimal("-0.000"),
               "x\"y'/1", "\ud800", "", "\\N", "NULL", b"\xfb\xff\xfe", b"", bytearray(b"x"),
               datetime.date(2024, 1, 2), datetime.datetime(2024, 1, 2, 3, 4, 5, 120000),
               datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone.utc), datetime.timedelta(hours=-5), None]


@st.composite
def odd_batches(draw):
    """Rows with a valid value or an odd one per column, sometimes a missing column, an odd kind."""
    table = draw(tables())
    out_kinds, out_ts, out_rows = [], [], []
    for _ in range(draw(st.integers(1, 4))):
        row = dict(draw(rows(table)))
        for name in list(row):
            pick = draw(st.integers(0, 9))
            if pick == 0:
                row[name] = draw(st.sampled_from(_ODD_VALUES))
            elif pick == 1 and draw(st.booleans()):
                del row[name]
        out_kinds.append(draw(st.sampled_from(["insert", "update", "delete", "upsert"])))
        out_ts.append(draw(st.sampled_from([0, 5, 2**64 - 1, 2**70, -1, True, "7"])))
        out_rows.append(draw(st.sampled_from([row, row, row, None])))
    return table, out_kinds, out_ts, out_rows


@SETTINGS
@given(odd_batches(), st.sampled_from(range(len(OPTIONS))))
def test_encode_odd_values_equals_python(data, which):
    table, kinds, ts, rows_ = data
    o = OPTIONS[which]
    k, p = both(CSV, lambda: tcsv.encode_table_rows(table, kinds, ts, rows_, None, o), strict)
    assert k == p


@SETTINGS
@given(batches(), st.sampled_from(range(len(OPTIONS))), st.booleans())
def test_encode_generated_rows_equals_python_and_is_taken(data, which, header):
    table, batch = data
    o = OPTIONS[which]
    k, p = both(CSV, lambda: tcsv.encode_rows(batch, table, o, header), strict)
    assert k == p
    w = tcsv_encode._writer(table, o)
    if w.plan is not None and k[0] == "ok":
        assert _csv.encode(w.plan, [e.kind for e in batch], [e.commit_ts for e in batch],
                           [e.row for e in batch]) is not None


def test_encode_plan_covers_the_usual_options_and_forms():
    w = tcsv_encode._writer(KINDS, tcsv.CsvOptions(include_commit_ts=True))
    assert w.plan is not None
    e = tcsv_encode
    assert [c.kind for c in w.plan.columns] == [e._EK_INT, e._EK_GO_FLOAT, e._EK_DECIMAL, e._EK_DATE, e._EK_DATETIME,
                                                e._EK_CALL, e._EK_BASE64, e._EK_STR, e._EK_STR, e._EK_INT, e._EK_STR]
    assert tcsv_encode._writer(KINDS, tcsv.CsvOptions(quote="")).plan is None
    assert tcsv_encode._writer(KINDS, tcsv.CsvOptions(output_old_value=True)).plan is None


# --------------------------------------------------------------------------- leaks

def test_no_leak_over_repeated_batches_including_hand_backs_and_errors():
    o = tcsv.CsvOptions(include_commit_ts=True)
    good = ('"I","kinds","db",7,1,-1.5,-12.500,2024-02-29,"2024-01-02 03:04:05.000001","01:02:03","QUJD",'
            '"s ""q""","a",2024,"{}"\r\n').encode() * 50
    handed_back = good + b'"I","kinds","db",7,2,1.5,1.000,2024-02-30,\\N,\\N,\\N,\\N,\\N,\\N,\\N\r\n'
    dec = tcsv.CsvDecoder(KINDS, o)
    rows_ = dec.decode(good)
    kinds = [e.kind for e in rows_]
    ts = [e.commit_ts for e in rows_]
    dicts = [e.row for e in rows_]
    odd = dicts[:-1] + [{**dicts[-1], "d": decimal.Decimal("1.23456")}]  # the careful writer raises
    decode_plan = dec._kernel_plan
    encode_plan = tcsv_encode._writer(KINDS, o).plan

    def work():
        for _ in range(300):
            _csv.decode(decode_plan, good, False)
            assert _csv.decode(decode_plan, handed_back, False) is None
            _csv.encode(encode_plan, kinds, ts, dicts)
            assert _csv.encode(encode_plan, kinds, ts, odd) is None

    grown = traced_growth(work, 1)  # work() itself repeats the batches
    assert grown < 64 * 1024, grown


def test_plans_are_made_once_per_decoder_and_writer():
    dec = tcsv.CsvDecoder(KINDS, tcsv.CsvOptions())
    assert dec._kernel_plan is not None
    o = dataclasses.replace(tcsv.CsvOptions(), output_old_value=True)
    assert tcsv.CsvDecoder(KINDS, o)._kernel_plan is None


def test_fields_beyond_the_csv_field_size_limit_go_back_to_python():
    import csv

    saved = csv.field_size_limit(16)
    try:
        o = tcsv.CsvOptions()
        data = b'"I","kinds","db",1,\\N,\\N,\\N,\\N,\\N,\\N,"' + b"x" * 20 + b'",\\N,\\N,\\N\r\n'
        assert tcsv_decode._decode_plan(KINDS, o).field_limit == 16
        assert not kernel_takes(KINDS, o, data)
        assert_same_decode(KINDS, o, data)
    finally:
        csv.field_size_limit(saved)
    assert kernel_takes(KINDS, tcsv.CsvOptions(), data)
