"""Conduit's JSON form: layout, text forms of values, plain JSON on reading, errors with line numbers."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from cdcflow.convert.avro import avro_type
from cdcflow.convert.jsonform import dumps_lines, dumps_record, loads_lines, loads_record
from cdcflow.errors import ConversionError
from cdcflow.record import Operation, Record

ROW = {
    "u64": (1 << 64) - 1, "huge": -(10 ** 30), "dec": Decimal("1.50"), "b": b"\x00\x01", "d": dt.date(2020, 2, 20),
    "ts": dt.datetime(2020, 2, 20, 2, 20, 20, 123456), "ts0": dt.datetime(2020, 2, 20, 2, 20, 20),
    "t": dt.timedelta(hours=-838, minutes=-59, seconds=-59), "f": float("inf"), "n": None, "s": "x",
}
ROW_JSON = {
    "u64": 18446744073709551615, "huge": -(10 ** 30), "dec": "1.50", "b": "AAE=", "d": "2020-02-20",
    "ts": "2020-02-20T02:20:20.123456Z", "ts0": "2020-02-20T02:20:20Z", "t": "-838:59:59", "f": "Infinity",
    "n": None, "s": "x",
}


def test_layout_and_text_forms():
    r = Record(b"\x01\x02", Operation.SNAPSHOT, {"m": "v"}, b"k", None, ROW)
    line = dumps_record(r)
    obj = json.loads(line)
    assert list(obj) == ["position", "operation", "metadata", "key", "payload"]
    assert list(obj["payload"]) == ["before", "after"]
    assert obj["position"] == "AQI=" and obj["operation"] == "snapshot" and obj["key"] == "aw=="
    assert obj["payload"]["before"] is None
    assert obj["payload"]["after"] == ROW_JSON
    assert list(obj["payload"]["after"]) == sorted(ROW_JSON)  # Go sorts map keys
    assert b"1000000000000000000000000000000" in line  # exact JSON integer, not a float


def test_reader_returns_plain_json_values():
    r = Record(b"p", Operation.CREATE, {}, None, None, ROW)
    (back,) = loads_lines(dumps_lines([r]))
    assert back.after == ROW_JSON
    assert back.metadata == {}


def test_no_schema_reference_is_added():
    """Issue 15: the writer adds nothing to the metadata; the metadata a record carries is written as is."""
    meta = {"opencdc.collection": "db.t", "opencdc.payload.schema.subject": "db.t.payload",
            "opencdc.payload.schema.version": "3"}
    r = Record(b"p", Operation.UPDATE, meta, {"id": 1}, dict(ROW, s="y"), ROW)
    obj = json.loads(dumps_record(r))
    assert obj["metadata"] == meta
    assert not any(k.startswith("cdcflow.schema") for k in obj["metadata"])
    assert loads_record(dumps_record(r)).metadata == meta


def test_lines_round_trip_in_their_json_form():
    r = Record(b"p", Operation.UPDATE, {"a": "1"}, {"id": 1}, b"raw", {"d": Decimal("0.10"), "l": [1, "x", None]})
    once = dumps_lines([r, r])
    assert once.count(b"\n") == 2
    assert dumps_lines(loads_lines(once)) == once


@pytest.mark.parametrize(
    "line, text",
    [
        (b'{"position": "***", "operation": "create"}', "base64"),
        (b'{"position": "", "operation": "insert"}', "unknown operation"),
        (b'{"position": "", "operation": "Operation(9)"}', "unknown operation"),
        (b'{"position": "", "operation": "create", "key": "%%%"}', "base64"),
        (b'{"position": "", "metadata": {"a": 1}}', "metadata"),
        (b'[1, 2]', "object"),
        (b'{"position": "", "payload": {"after": 5}}', "payload.after"),
        (b'{"position": "", "operation"', "invalid JSON"),
    ],
)
def test_malformed_lines_name_the_line(line, text):
    good = dumps_record(Record(b"ok", Operation.CREATE, {}, None, None, b"x"))
    with pytest.raises(ConversionError, match=text) as info:
        loads_lines(good + b"\n\n" + line + b"\n")
    assert "line 3" in str(info.value)


def test_the_generic_json_form_does_not_load_tidb():
    """Issue 17: the OpenCDC JSON form is generic; TiDB's text rules live with the TiCDC connectors."""
    import subprocess
    import sys

    probe = "import sys, cdcflow.convert.jsonform; print(sorted(m for m in sys.modules if 'tidb' in m))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"


@pytest.mark.parametrize("value, text", [
    (dt.timedelta(hours=-838, minutes=-59, seconds=-59), "-838:59:59"),
    (dt.timedelta(days=3, microseconds=5), "72:00:00.000005"),
    (dt.timedelta(hours=1000), "1000:00:00"),  # a duration, not bounded to TiDB's TIME range
    # RFC 3339 as Go's time.Time writes it: fraction without trailing zeros, Z for UTC
    (dt.datetime(2020, 2, 20, 2, 20, 20, 123456), "2020-02-20T02:20:20.123456Z"),
    (dt.datetime(2020, 2, 20, 2, 20, 20, 500000), "2020-02-20T02:20:20.5Z"),
    (dt.datetime(2020, 2, 20, 2, 20, 20, tzinfo=dt.timezone.utc), "2020-02-20T02:20:20Z"),
    (dt.datetime(2020, 2, 20, 2, 20, 20, 10, tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30))),
     "2020-02-20T02:20:20.00001-05:30"),
    (dt.datetime(99, 1, 2, 3, 4, 5), "0099-01-02T03:04:05Z"),
    (dt.date(2020, 2, 20), "2020-02-20"),
])
def test_text_forms_of_a_line(value, text):
    rec = Record(b"p", Operation.CREATE, {}, None, None, {"v": value})
    line = dumps_record(rec)
    assert json.loads(line)["payload"]["after"]["v"] == text
    assert loads_record(line).after == {"v": text}


@pytest.mark.parametrize("value, text", [
    # Go's encoding/json float64: shortest digits, fixed notation for 1e-6 <= |v| < 1e21
    (1.0, b"1"), (-0.0, b"-0"), (1.2, b"1.2"), (100.0, b"100"), (1e16, b"10000000000000000"),
    (1.5e20, b"150000000000000000000"), (1e21, b"1e+21"), (2.5e-5, b"0.000025"), (1e-6, b"0.000001"),
    (1e-7, b"1e-07"), (-1.5e-300, b"-1.5e-300"), (123456.789, b"123456.789"),
])
def test_floats_are_written_as_go_writes_them(value, text):
    line = dumps_record(Record(b"", Operation.CREATE, {}, None, None, {"v": value}))
    assert b'"after":{"v":' + text + b"}" in line
    assert loads_record(line).after["v"] == value


def test_strings_are_escaped_as_go_escapes_them():
    """goccy/go-json (what conduit-commons marshals records with) escapes HTML characters and the
    JavaScript line separators by default, and control characters other than \\n \\r \\t as \\u00XX."""
    text = 'a<b>&c\u2028\u2029\b\f\n\r\t\x01\x7f"\\é'
    line = dumps_record(Record(b"", Operation.CREATE, {"k<": text}, None, None, {text: text}))
    escaped = b'"a\\u003cb\\u003e\\u0026c\\u2028\\u2029\\u0008\\u000c\\n\\r\\t\\u0001\x7f\\"\\\\\xc3\xa9"'
    assert line.count(escaped) == 3
    assert b'"k\\u003c":' in line
    back = loads_record(line)
    assert back.metadata == {"k<": text} and back.after == {text: text}


def test_a_backslash_before_b_or_f_is_not_taken_for_an_escape():
    line = dumps_record(Record(b"", Operation.CREATE, {}, None, None, {"v": "\\b\\f\\\b"}))
    assert b'"v":"\\\\b\\\\f\\\\\\u0008"' in line
    assert loads_record(line).after == {"v": "\\b\\f\\\b"}


def test_operation_zero_and_empty_fields_as_conduit_writes_them():
    line = dumps_record(Record(b"", Operation.UNSPECIFIED, {}, None, None, None))
    assert line == (b'{"position":null,"operation":"Operation(0)","metadata":null,"key":null,'
                    b'"payload":{"before":null,"after":null}}')
    assert loads_record(line) == Record(b"", Operation.UNSPECIFIED, {}, None, None, None)


@pytest.mark.parametrize("line", [
    b'{"operation":"Operation(0)"}', b'{"operation":""}', b'{}',
    b'{"position":null,"operation":null,"metadata":null,"key":null,"payload":null}',
])
def test_conduit_reads_a_missing_or_empty_operation_as_operation_zero(line):
    # conduit-commons opencdc/operation.go: UnmarshalText leaves an empty text as 0 and accepts "Operation(n)"
    assert loads_record(line) == Record(b"", Operation.UNSPECIFIED, {}, None, None, None)


def test_operation_n_names_a_known_operation():
    assert loads_record(b'{"operation":"Operation(3)"}').operation is Operation.DELETE


# ---------------------------------------------------------------------------- optional restoring
TABLE_SCHEMA = {
    "type": "record", "name": "Payload", "fields": [
        {"name": "id", "type": avro_type("long")},
        {"name": "dec", "type": ["null", avro_type("decimal", precision=10, scale=2)]},
        {"name": "ts", "type": avro_type("datetime")},
        {"name": "b", "type": avro_type("bytes")},
    ]}


@pytest.fixture()
def store():
    from cdcflow.schemas import SchemaStore

    s = SchemaStore()
    yield s
    s.close()


def _named_record(store) -> Record:
    import orjson

    stored = store.register("db.t.payload", orjson.dumps(TABLE_SCHEMA).decode())
    meta = {"opencdc.payload.schema.subject": "db.t.payload", "opencdc.payload.schema.version": str(stored.version)}
    return Record(b"p", Operation.CREATE, meta, None, None,
                  {"id": 7, "dec": Decimal("1.50"), "ts": dt.datetime(2020, 2, 20, 2, 20, 20, 5), "b": b"\x00"})


def test_a_store_holding_the_named_schema_restores_the_values(store):
    r = _named_record(store)
    line = dumps_record(r)
    assert json.loads(line)["payload"]["after"] == {"b": "AA==", "dec": "1.50", "id": 7, "ts": "2020-02-20T02:20:20.000005Z"}
    back = loads_record(line, store)
    assert back == r
    assert list(back.after) == ["id", "dec", "ts", "b"]  # the schema's field order, not the line's sorted one


def test_without_the_named_schema_the_values_stay_plain_json(store):
    """Another run's store does not hold the schema: no error, the JSON values as they are."""
    from cdcflow.schemas import SchemaStore

    line = dumps_record(_named_record(store))
    other = SchemaStore()
    try:
        back = loads_record(line, other)
    finally:
        other.close()
    assert back.after == {"b": "AA==", "dec": "1.50", "id": 7, "ts": "2020-02-20T02:20:20.000005Z"}
    assert back.metadata["opencdc.payload.schema.subject"] == "db.t.payload"


def test_values_that_do_not_fit_the_named_schema_stay_plain_json(store):
    r = _named_record(store)
    r.after["dec"] = "not a decimal"
    (back,) = loads_lines(dumps_lines([r]), store)
    assert back.after == {"b": "AA==", "dec": "not a decimal", "id": 7, "ts": "2020-02-20T02:20:20.000005Z"}
