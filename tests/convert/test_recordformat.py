"""Conduit's record formats (``sdk.record.format``), the bytes its SDK writes.

Cases from github.com/ConduitIO/conduit-connector-sdk, record_serializer_test.go
(TestJSONEncoder, TestDebeziumConverter_Structured, TestDebeziumConverter_RawData,
TestTemplateRecordSerializer): the same records, the expected output written as the bytes Go's
encoder gives for the expected values (the SDK sorts the schema's fields of maps before comparing;
cdcflow writes them sorted).
"""

from __future__ import annotations

import orjson
import pytest

from cdcflow.convert.recordformat import parse_options, record_format
from cdcflow.errors import ConfigError
from cdcflow.record import Operation, Record

META = {"conduit.source.plugin.name": "example"}
TRANSACTION = ('{"type":"struct","optional":true,"fields":[{"type":"string","field":"id"},'
               '{"type":"int64","field":"total_order"},{"type":"int64","field":"data_collection_order"}],'
               '"field":"transaction"}')
SOURCE = ('{"type":"struct","optional":true,"fields":[{"type":"string","field":"conduit.source.plugin.name"}],'
          '"field":"source"}')


def sdk_record() -> Record:
    return Record(b"foo", Operation.CREATE, dict(META), b"bar", None, {"foo": "bar", "baz": "qux"})


def test_opencdc_json_is_the_sdks_json_encoder_output():
    data, errors = record_format("opencdc/json").lines([sdk_record()])
    assert errors is None
    assert data == (b'{"position":"Zm9v","operation":"create","metadata":{"conduit.source.plugin.name":"example"},'
                    b'"key":"YmFy","payload":{"before":null,"after":{"baz":"qux","foo":"bar"}}}\n')


def test_debezium_structured_record():
    r = Record(b"foo", Operation.UPDATE, dict(META), b"bar", {"bar": 123}, {"foo": "bar", "baz": "qux"})
    got = record_format("debezium/json", "debezium.schema.name=custom.name").serialize(r)
    assert got.decode() == (
        '{"schema":{"type":"struct","name":"custom.name","fields":['
        '{"type":"struct","optional":true,"fields":[{"type":"int64","field":"bar"}],"field":"before"},'
        '{"type":"struct","optional":true,"fields":[{"type":"string","field":"baz"},'
        '{"type":"string","field":"foo"}],"field":"after"},'
        + SOURCE + ',{"type":"string","field":"op"},{"type":"int64","optional":true,"field":"ts_ms"},'
        + TRANSACTION + ']},"payload":{"before":{"bar":123},"after":{"baz":"qux","foo":"bar"},'
        '"source":{"conduit.source.plugin.name":"example"},"op":"u","transaction":null}}')


def test_debezium_raw_data_is_hoisted_under_the_raw_data_key():
    r = Record(b"foo", Operation.CREATE, dict(META), b"bar", b"foo", None)
    got = orjson.loads(record_format("debezium/json").serialize(r))
    raw_field = [{"type": "bytes", "optional": True, "field": "opencdc.rawData"}]
    assert got["schema"]["fields"][0] == {"type": "struct", "optional": True, "fields": raw_field, "field": "before"}
    assert got["schema"]["fields"][1] == {"type": "struct", "optional": True, "fields": raw_field, "field": "after"}
    assert "name" not in got["schema"]
    assert got["payload"] == {"before": {"opencdc.rawData": "Zm9v"}, "after": None,
                              "source": META, "op": "c", "transaction": None}
    other_key = record_format("debezium/json", "debezium.rawData.key=line").serialize(r)
    assert orjson.loads(other_key)["payload"]["before"] == {"line": "Zm9v"}


def test_debezium_raw_json_becomes_structured_with_go_doubles_and_read_at_is_ts_ms():
    r = Record(b"p", Operation.SNAPSHOT, {"opencdc.readAt": "1700000000123456789"}, None, None,
               b'{"id": 7, "tags": ["a"], "nested": {"ok": true}, "none": null}')
    got = record_format("debezium/json").serialize(r)
    doc = orjson.loads(got)
    assert b'"after":{"id":7,"nested":{"ok":true},"none":null,"tags":["a"]}' in got
    assert doc["payload"]["op"] == "r" and doc["payload"]["ts_ms"] == 1700000000123
    after = doc["schema"]["fields"][1]
    assert after["fields"] == [
        {"type": "double", "field": "id"},  # Go decodes JSON numbers into float64
        {"type": "struct", "optional": True, "fields": [{"type": "boolean", "field": "ok"}], "field": "nested"},
        {"type": "string", "optional": True, "field": "none"},
        {"type": "array", "optional": True, "items": {"type": "string"}, "field": "tags"}]
    assert doc["schema"]["fields"][0]["fields"] == after["fields"]  # before takes after's schema


def test_template_renders_each_record_and_a_failing_record_fails_alone():
    fmt = record_format("template", "{{ Payload.After.foo }}-{{ Key }}")
    data, errors = fmt.lines([sdk_record(), sdk_record()])
    assert data == b"bar-bar\nbar-bar\n" and errors is None
    bad = record_format("template", "{{ Payload.After.foo.x }}")  # a field of text: an error for that record
    data, errors = bad.lines([Record(b"1", after={"foo": {"x": "ok"}}), sdk_record()])
    assert data == b"ok\n" and errors[0] is None and "template" in errors[1]


def test_options_parse_as_conduit_and_a_bad_template_is_a_config_error():
    assert parse_options(" a=1,b=x=y,c ") == {"a": "1", "b": "x=y", "c": ""}
    assert parse_options("") == {}
    with pytest.raises(ConfigError, match="sdk.record.format.options"):
        record_format("template", "{{ Payload.After.foo ")
    with pytest.raises(ConfigError, match="debezium/json"):
        record_format("xml")
