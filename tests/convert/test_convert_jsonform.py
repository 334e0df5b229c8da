"""Conduit's JSON form: layout, text forms of values, schema-based restoration, errors with line numbers."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from cdcflow.convert.jsonform import dumps_lines, dumps_record, loads_lines, loads_record
from cdcflow.errors import ConversionError, SchemaError
from cdcflow.record import Operation, Record
from cdcflow.schemas import SchemaStore


@pytest.fixture()
def store():
    s = SchemaStore()
    yield s
    s.close()


ROW = {
    "u64": (1 << 64) - 1, "huge": -(10 ** 30), "dec": Decimal("1.50"), "b": b"\x00\x01", "d": dt.date(2020, 2, 20),
    "ts": dt.datetime(2020, 2, 20, 2, 20, 20, 123456), "ts0": dt.datetime(2020, 2, 20, 2, 20, 20),
    "t": dt.timedelta(hours=-838, minutes=-59, seconds=-59), "f": float("inf"), "n": None, "s": "x",
}


def test_layout_and_text_forms():
    r = Record(b"\x01\x02", Operation.SNAPSHOT, {"m": "v"}, b"k", None, ROW)
    line = dumps_record(r)
    obj = json.loads(line)
    assert list(obj) == ["position", "operation", "metadata", "key", "payload"]
    assert obj["position"] == "AQI=" and obj["operation"] == "snapshot" and obj["key"] == "aw=="
    assert obj["payload"]["before"] is None
    assert obj["payload"]["after"] == {
        "u64": 18446744073709551615, "huge": -(10 ** 30), "dec": "1.50", "b": "AAE=", "d": "2020-02-20",
        "ts": "2020-02-20 02:20:20.123456", "ts0": "2020-02-20 02:20:20", "t": "-838:59:59", "f": "Infinity",
        "n": None, "s": "x",
    }
    assert b"1000000000000000000000000000000" in line  # exact JSON integer, not a float


def test_without_store_reader_returns_plain_json_types():
    r = Record(b"p", Operation.CREATE, {}, None, None, ROW)
    (back,) = loads_lines(dumps_lines([r]))
    assert back.after["dec"] == "1.50" and back.after["u64"] == (1 << 64) - 1 and back.after["huge"] == -(10 ** 30)
    assert back.metadata == {}


def test_with_store_values_are_restored(store):
    r = Record(b"p", Operation.UPDATE, {"opencdc.collection": "db.t"}, {"id": 1}, dict(ROW, s="y"), ROW)
    data = dumps_lines([r, r], store)
    assert data.count(b"\n") == 2
    assert loads_lines(data, store) == [r, r]


def test_ambiguous_union_uses_avro_json_union_form(store):
    r = Record(b"p", Operation.CREATE, {}, None, None, {"l": ["2020-02-20", b"x", dt.date(2020, 2, 20), None]})
    line = dumps_record(r, store)
    assert json.loads(line)["payload"]["after"]["l"] == [
        {"string": "2020-02-20"}, {"bytes": "eA=="}, {"int": "2020-02-20"}, None]
    assert loads_record(line, store) == r


def test_mixed_raw_and_structured_payload_is_lossless(store):
    r = Record(b"p", Operation.UPDATE, {}, None, b"raw", {"d": Decimal("0.10")})
    assert loads_lines(dumps_lines([r], store), store) == [r]


@pytest.mark.parametrize(
    "line, error, text",
    [
        (b'{"position": "***", "operation": "create"}', ConversionError, "base64"),
        (b'{"position": "", "operation": "insert"}', ConversionError, "unknown operation"),
        (b'{"position": "", "operation": "create", "key": "%%%"}', ConversionError, "base64"),
        (b'{"position": "", "metadata": {"a": 1}}', ConversionError, "metadata"),
        (b'[1, 2]', ConversionError, "object"),
        (b'{"position": "", "payload": {"after": 5}}', ConversionError, "payload.after"),
        (b'{"metadata": {"opencdc.payload.schema.subject": "nope", "opencdc.payload.schema.version": "1"},'
         b' "payload": {"after": {"a": 1}}}', SchemaError, "nope"),
        (b'{"position": "", "operation"', ConversionError, "invalid JSON"),
    ],
)
def test_malformed_lines_name_the_line(line, error, text, store):
    good = dumps_record(Record(b"ok", Operation.CREATE, {}, None, None, b"x"))
    with pytest.raises(error, match=text) as info:
        loads_lines(good + b"\n\n" + line + b"\n", store)
    assert "line 3" in str(info.value)


def test_value_not_matching_its_schema(store):
    line = dumps_record(Record(b"p", Operation.CREATE, {}, None, None, {"d": dt.date(2020, 1, 1)}), store)
    tampered = line.replace(b"2020-01-01", b"not a date")
    with pytest.raises(ConversionError, match="line 1.*date") as info:
        loads_lines(tampered, store)
    assert info.value.path == "$.d"


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
    (dt.datetime(2020, 2, 20, 2, 20, 20, 123456), "2020-02-20 02:20:20.123456"),
    (dt.date(2020, 2, 20), "2020-02-20"),
])
def test_text_forms_round_trip_through_a_line(value, text, store):
    rec = Record(b"p", Operation.CREATE, {}, None, None, {"v": value})
    line = dumps_record(rec, store)
    assert json.loads(line)["payload"]["after"]["v"] == text
    assert loads_record(line, store).after == {"v": value}
