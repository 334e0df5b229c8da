"""The compiled record builder (``_csv.c`` ``records``) and float fast path against Python.

``CsvColumns.records`` / ``numbered_records`` build OpenCDC records from a CSV file's columns;
with the kernel they must be exactly what ``events.rows_to_records`` (the generated Python
comprehension) builds: positions, operation objects, metadata (values, key order, and that every
record owns its metadata dict), key, before and after, type-strict. What the kernel
does not take (a commit ts beyond 64 bits, odd shapes) it hands back and Python builds.
"""

from __future__ import annotations

import gc
import math
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.kernels import CSV, both
from helpers.tidb_strategies import rows, tables

from cdcflow.connectors.ticdc import csv as tcsv
from cdcflow.connectors.ticdc.events import RowChange, records_plan
from cdcflow.record import Operation, Record
from cdcflow.schemas import SchemaStore
from cdcflow.connectors.ticdc.tidb import Column, TableSchema
from helpers.leakcheck import traced_growth

_csv = pytest.importorskip("cdcflow.connectors.ticdc.csv._csv", reason="the CSV kernel is not built")

pytestmark = CSV.required()

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OPTIONS = [
    tcsv.CsvOptions(include_commit_ts=True),
    tcsv.CsvOptions(),
    tcsv.CsvOptions(include_commit_ts=True, output_field_header=True, output_handle_key=True),
    tcsv.CsvOptions(quote="'", delimiter=";", terminator="\n", null="", include_commit_ts=True),
]
STORE = SchemaStore()


def strict_records(records: list[Record]) -> list:
    """Everything a record holds, type-strict (repr tells 1 from 1.0 from True, Decimal exponents,
    str from bytes, date from datetime, dict key order), plus which records share a metadata dict."""
    first_with: dict[int, int] = {}
    out = []
    for i, r in enumerate(records):
        assert type(r) is Record
        out.append((type(r.position), r.position, type(r.operation), r.operation, repr(r.metadata),
                    first_with.setdefault(id(r.metadata), i), repr(r.key), repr(r.before), repr(r.after)))
    return out


@st.composite
def batches(draw, max_rows: int = 8):
    table = draw(tables())
    ts = st.one_of(st.integers(0, 2**40), st.integers(0, 2**64 - 1), st.sampled_from([0, 1 << 18, 2**62]))
    n = draw(st.integers(1, max_rows))
    same_ts = draw(st.booleans())  # rows of one transaction share their metadata texts
    shared = draw(ts)
    return table, [RowChange(table, draw(st.sampled_from(["insert", "update", "delete"])),
                             shared if same_ts else draw(ts), draw(rows(table))) for _ in range(n)]


def columns_of(table: TableSchema, o: tcsv.CsvOptions, batch: list[RowChange]):
    got = tcsv.CsvDecoder(table, o).decode_columns(tcsv.encode_rows(batch, table, o))
    return got if isinstance(got, tcsv.CsvColumns) else None


@SETTINGS
@given(batches(), st.sampled_from(range(len(OPTIONS))), st.data())
def test_records_of_generated_rows_equal_python(data, which, draw):
    table, batch = data
    o = OPTIONS[which]
    columns = columns_of(table, o, batch)
    if columns is None:  # a quoted NULL text: the decoder read it row-wise, nothing column-wise to build
        return
    n = len(columns)
    start = draw.draw(st.integers(0, n))
    end = draw.draw(st.integers(start, n + 2))
    store = draw.draw(st.sampled_from([None, STORE]))
    prefix = draw.draw(st.sampled_from([b"7|2024-01-02|3|", b"1|%d|2|", b""]))
    positions = [b"p%d" % i for i in range(end - start)]
    with CSV.off():
        numbered = strict_records(columns.numbered_records(prefix, store, start, end))
        listed = strict_records(columns.records(iter(positions), store, start, end))
    assert strict_records(columns.numbered_records(prefix, store, start, end)) == numbered
    assert strict_records(columns.records(iter(positions), store, start, end)) == listed
    # the kernel took them (else this compared Python with itself): commit ts within 64-bit texts
    if start < end <= n and all((t >> 18) * 1_000_000 < 2**64 for t in (columns.commit_ts or [0])):
        assert _csv.records(records_plan(table, store), prefix, columns.operations, columns.commit_ts,
                            columns.columns, start, end) is not None


@SETTINGS
@given(batches(), st.sampled_from(range(len(OPTIONS))))
def test_decode_and_build_with_kernels_equal_the_pure_python_source_path(data, which):
    table, batch = data
    o = OPTIONS[which]
    encoded = tcsv.encode_rows(batch, table, o)

    def read():
        got = tcsv.CsvDecoder(table, o, source="f.csv").decode_columns(encoded)
        if not isinstance(got, tcsv.CsvColumns):
            return "row-wise", [(e.kind, e.commit_ts, repr(e.row)) for e in got]
        half = len(got) // 2
        return strict_records(got.numbered_records(b"1||1|", STORE, 0, half)
                              + got.numbered_records(b"1||1|", STORE, half, len(got)))
    with CSV.off():
        reference = read()
    assert read() == reference


def test_the_kernel_takes_the_usual_rows():
    table = TableSchema("db", "t", (Column("id", "BIGINT", handle_key=True, primary_key=True, nullable=False),
                                    Column("v", "VARCHAR")))
    plan = records_plan(table, STORE)
    cols = [[1, 2, 3], ["a", None, "\u2028\U0001f600"]]
    ops = [Operation.CREATE, Operation.UPDATE, Operation.DELETE]
    got = _csv.records(plan, b"9|d|1|", ops, [5 << 18, 5 << 18, 6 << 18], cols, 0, 3)
    assert got is not None
    assert [r.position for r in got] == [b"9|d|1|1", b"9|d|1|2", b"9|d|1|3"]
    assert [r.operation for r in got] == ops
    assert got[0].metadata is not got[1].metadata  # each record owns its metadata, as in Python
    assert got[0].metadata["opencdc.createdAt"] == "5000000" and got[2].metadata["ticdc.commit-ts"] == str(6 << 18)
    assert got[0].key == {"id": 1} and got[0].after == {"id": 1, "v": "a"} and got[0].before is None
    assert got[2].before == {"id": 3, "v": "\u2028\U0001f600"} and got[2].after is None
    assert gc.isenabled()


@pytest.mark.parametrize("ts", [2**64, -1, 2**63 + (1 << 60), True, 1.0, "7"])
def test_a_commit_ts_beyond_the_fast_texts_is_handed_back(ts):
    table = TableSchema("db", "t", (Column("id", "BIGINT"),))
    plan = records_plan(table, None)
    assert _csv.records(plan, b"", None, [1, ts], [[1, 2]], 0, 2) is None
    columns = tcsv.CsvColumns(table, None, [1, ts], [[1, 2]])
    compiled, reference = both(CSV, lambda: columns.numbered_records(b"x", None), strict_records)
    assert compiled == reference
    assert gc.isenabled()


def test_short_or_odd_inputs_are_handed_back_and_python_decides():
    table = TableSchema("db", "t", (Column("id", "BIGINT", handle_key=True), Column("v", "INT")))
    plan = records_plan(table, None)
    assert _csv.records(plan, b"", None, None, [[1, 2], [3]], 0, 2) is None  # a short column
    assert _csv.records(plan, [b"a"], None, None, [[1, 2], [3, 4]], 0, 2) is None  # too few positions
    assert _csv.records(plan, b"", [Operation.CREATE], None, [[1, 2], [3, 4]], 0, 2) is None
    assert _csv.records(plan, b"", None, None, [[1, 2]], 0, 2) is None  # a column missing
    assert _csv.records(plan, "text", None, None, [[1, 2], [3, 4]], 0, 2) is None
    assert _csv.records(plan, b"", None, None, [[1, 2], [3, 4]], 1, 2)[0].position == b"2"
    assert _csv.records(plan, b"", None, None, [[1, 2], [3, 4]], 2, 2) == []
    columns = tcsv.CsvColumns(table, None, None, [[1, 2], [3, 4]])
    got = columns.records(iter([b"only one"]), None)  # zip semantics: as many records as positions
    with CSV.off():
        assert strict_records(got) == strict_records(columns.records(iter([b"only one"]), None))
    assert len(got) == 1


def test_a_table_without_handle_key_and_with_a_repeated_name_builds_as_python():
    table = TableSchema("db", "t", (Column("a", "INT"), Column("b", "INT"), Column("a", "INT")))
    columns = tcsv.CsvColumns(table, [Operation.DELETE, Operation.CREATE], [3, 3], [[1, 2], [3, 4], [5, 6]])
    got = columns.numbered_records(b"p", STORE)
    with CSV.off():
        assert strict_records(got) == strict_records(columns.numbered_records(b"p", STORE))
    assert got[0].key is None and got[0].before == {"a": 5, "b": 3}


def test_gc_stays_off_when_the_caller_turned_it_off():
    table = TableSchema("db", "t", (Column("id", "BIGINT"),))
    gc.disable()
    try:
        assert _csv.records(records_plan(table, None), b"", None, None, [[1]], 0, 1) is not None
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_plan_with_a_record_type_of_another_layout_is_refused():
    class NoAfter:
        __slots__ = ("position", "operation", "metadata", "key", "before")

    class AfterProperty:
        __slots__ = ("position", "operation", "metadata", "key", "before")
        after = property(lambda self: None)

    table = TableSchema("db", "t", (Column("id", "BIGINT"),))
    with pytest.raises(SystemError, match="Record.after is not an object slot"):
        _csv.records((NoAfter,) + records_plan(table, None)[1:], b"", None, None, [[1]], 0, 1)
    with pytest.raises(SystemError, match="Record.after is not an object slot"):
        _csv.records((AfterProperty,) + records_plan(table, None)[1:], b"", None, None, [[1]], 0, 1)


def test_no_leak_over_repeated_batches_including_hand_backs():
    table = TableSchema("db", "t", (Column("id", "BIGINT", handle_key=True, primary_key=True, nullable=False),
                                    Column("v", "VARCHAR"), Column("d", "DATE")))
    plan = records_plan(table, STORE)
    n = 200
    cols = [list(range(n)), [f"v{i}" for i in range(n)], [None] * n]
    ops = [Operation.CREATE, Operation.UPDATE, Operation.DELETE] * (n // 3) + [Operation.CREATE] * (n % 3)
    ts = [(i // 3) << 18 for i in range(n)]
    huge = ts[:-1] + [2**70]
    positions = [b"p%d" % i for i in range(n)]

    def work():
        for _ in range(60):
            assert len(_csv.records(plan, b"1|d|2|", ops, ts, cols, 0, n)) == n
            assert len(_csv.records(plan, positions, None, None, cols, 0, n)) == n
            assert _csv.records(plan, b"1|d|2|", ops, huge, cols, 0, n) is None

    grown = traced_growth(work, 1)
    assert grown < 64 * 1024, grown


# --------------------------------------------------------------------------- the float fast path

FAST_FLOAT = -2  # parse_value kind of the kernel's own float parser (tidbparse_float is kind 2)


def _same_float(text: str) -> None:
    got = _csv.parse_value(FAST_FLOAT, text)
    if got is NotImplemented:
        assert _csv.parse_value(2, text) is NotImplemented, text
        return
    want = float(text)
    assert type(got) is float and struct.pack("<d", got) == struct.pack("<d", want), text


@settings(max_examples=2000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_fast_float_parses_every_repr_as_float_does(x):
    _same_float(repr(x))
    _same_float(f"{x:f}")
    _same_float(f"{x:.17f}")


@settings(max_examples=1000, deadline=None)
@given(st.integers(0, 2**64), st.integers(0, 30), st.booleans())
def test_fast_float_parses_digit_strings_as_float_does(m, fraction_digits, negative):
    digits = str(m).rjust(fraction_digits + 1, "0")
    text = ("-" if negative else "") + (digits[:-fraction_digits] + "." + digits[-fraction_digits:]
                                        if fraction_digits else digits)
    _same_float(text)


@pytest.mark.parametrize("text", ["0", "-0", "0.0", "-0.0", "9007199254740992", "9007199254740993", "0.1",
                                  "1.7976931348623157", "1e5", "1.5E-7", "1.", ".5", "-", "", "1..2", "1.2.3",
                                  "+1", " 1", "1_0", "\u0661", "0.0000000000000000000001", "123456789.12345678"])
def test_fast_float_edge_texts(text):
    _same_float(text)
    assert math.isfinite(_csv.parse_value(2, "1.5"))


# --------------------------------------------------------------------------- decode: repeated values

def test_repeated_values_with_doubled_quotes_decode_as_python():
    """The kernel reuses the previous row's value for the same text, unescaped texts included
    (kept in a copy, as their scratch buffer is reused): same-length different texts must not
    match, and the reused value must be the one of that text."""
    table = TableSchema("db", "t", (Column("s", "VARCHAR"), Column("d", "DECIMAL", precision=10, scale=2)))
    texts = ['"x,y""z"', '"x,y""z"', '"x,y""q"', '"x,y""z"', '""""', '""""', '"a"', '""', '""', '"x,y""z"']
    decimals = ["1.50", "1.50", "1.5", "-1.50", "1.50", "1.50", '"1.50"', "2.00", "2.00", "1.50"]
    data = "".join(f'"I","t","db",{s},{d}\r\n' for s, d in zip(texts, decimals)).encode()
    dec = tcsv.CsvDecoder(table, tcsv.CsvOptions(), source="f.csv")
    got = dec.decode_columns(data)
    assert isinstance(got, tcsv.CsvColumns)
    with CSV.off():
        pure = dec.decode_columns(data)
    assert repr(got.columns) == repr(pure.columns)
    assert got.columns[0] == ['x,y"z', 'x,y"z', 'x,y"q', 'x,y"z', '"', '"', "a", "", "", 'x,y"z']
