"""Conduit's built-in processors beyond their documented examples (those run as written in
test_conduit_processor_examples.py): edge values, bad settings, per-record failures."""

from __future__ import annotations

import datetime as dt

import pytest
from helpers.transforms import chain, configure_only, make

from cdcflow.convert.textforms import GoTime
from cdcflow.errors import ConfigError
from cdcflow.record import Operation, Record
from cdcflow.sdk import FILTERED, Failed

# -- field.rename ------------------------------------------------------------------


def test_field_rename_nested_bracket_and_missing():
    t = make("field.rename", mapping='.Key.a.b:c, .Payload.Before["first name"]:first_name, .Payload.After.nope:x')
    r = Record(key={"a": {"b": 1}}, before={"first name": "Ann"}, after={"y": 1})
    t.process([r])
    assert r.key == {"a": {"c": 1}} and r.before == {"first_name": "Ann"} and r.after == {"y": 1}


def test_field_rename_raw_data_fails_that_record_only():
    t = make("field.rename", mapping=".Payload.After.a:b")
    good, raw = Record(after={"a": 1}), Record(after=b"{}")
    out = t.process([good, raw])
    assert out[0] is good and good.after == {"b": 1}
    assert isinstance(out[1], Failed) and "raw data" in out[1].message


@pytest.mark.parametrize(
    "mapping, fragment",
    [
        (".Payload.After:x", "top-level"),
        (".Metadata:x", "top-level"),
        (".Position:x", "top-level"),
        (".Payload.After.a", "not reference:newName"),
        (".Payload.After.a:", "empty name"),
        ("Payload.After.a:b", "starts with '.'"),
        ("", "value is required"),
    ],
)
def test_field_rename_bad_mapping(mapping, fragment):
    with pytest.raises(ConfigError, match=fragment) as e:
        configure_only("field.rename", mapping=mapping)
    assert e.value.parameter == "mapping"


# -- field.convert -----------------------------------------------------------------




@pytest.mark.parametrize(
    "value, type_, expected",
    [
        (True, "int", 1), ("-42", "int", -42), (4.0, "int", 4), ("2.5", "float", 2.5), (False, "float", 0.0),
        ("t", "bool", True), ("FALSE", "bool", False), (1e20, "string", "100000000000000000000"),
        (True, "string", "true"), ("2024-01-02T12:34:56Z", "time", dt.datetime(2024, 1, 2, 12, 34, 56)),
        (1704198896123456000, "time", dt.datetime(2024, 1, 2, 12, 34, 56, 123456)),
    ],
)
def test_field_convert_values(value, type_, expected):
    t = make("field.convert", field=".Payload.After.v", type=type_)
    r = Record(after={"v": value})
    t.process([r])
    assert r.after["v"] == expected and type(r.after["v"]) is type(expected)


# Conduit's field.convert keeps what Go's time.Time keeps (github.com/ConduitIO/conduit,
# pkg/plugin/processor/builtin/impl/field: convert_test.go "int to time" / "string to time",
# convert_examples_test.go intTotime, whose output shows "2024-01-02T12:34:56.123456789Z").
# Old code: nanoseconds truncated, the zone converted to UTC.
@pytest.mark.parametrize(
    "value, utc, text",
    [
        (1611254412345678999, dt.datetime(2021, 1, 21, 18, 40, 12, 345678), "2021-01-21T18:40:12.345678999Z"),
        ("2021-01-21T18:40:12.345678999Z", dt.datetime(2021, 1, 21, 18, 40, 12, 345678),
         "2021-01-21T18:40:12.345678999Z"),
        (1704198896123456789, dt.datetime(2024, 1, 2, 12, 34, 56, 123456), "2024-01-02T12:34:56.123456789Z"),
        ("2024-01-02T14:34:56+02:00", dt.datetime(2024, 1, 2, 12, 34, 56), "2024-01-02T14:34:56+02:00"),
        ("2024-01-02T14:34:56.5-07:30", dt.datetime(2024, 1, 2, 22, 4, 56, 500000), "2024-01-02T14:34:56.5-07:30"),
    ],
)
def test_field_convert_to_time_keeps_nanoseconds_and_the_zone_as_conduit(value, utc, text):
    import pickle

    from cdcflow.convert import jsonform

    t = make("field.convert", field=".Key.id", type="time")
    r = Record(key={"id": value})
    t.process([r])
    got = r.key["id"]
    assert got == utc and got.tzinfo is None  # every other encoder reads the naive UTC instant
    line = jsonform.dumps_record(r)
    assert f'"key":{{"id":"{text}"}}'.encode() in line
    assert jsonform.dumps_record(pickle.loads(pickle.dumps(r))) == line  # it travels between Spark tasks


def test_field_convert_to_time_refuses_what_go_cannot_parse():
    t = make("field.convert", field=".Key.id", type="time")
    out = t.process([Record(key={"id": "21.01.2021 18:40:12"})])  # convert_test.go "invalid format"
    assert isinstance(out[0], Failed)


def test_field_convert_failure_names_the_field():
    t = make("field.convert", field=".Payload.After.v", type="int")
    out = t.process([Record(after={"v": "1.5"}), Record(after={"v": "7"}), Record(after={"v": 2})])
    assert isinstance(out[0], Failed) and ".Payload.After.v" in out[0].message
    assert out[1].after["v"] == 7 and out[2].after["v"] == 2


@pytest.mark.parametrize(
    "settings, parameter, rule",
    [
        ({"field": ".Metadata.x", "type": "int"}, "field", "regex"),
        ({"field": ".Key.x", "type": "decimal"}, "type", "inclusion"),
        ({"type": "int"}, "field", "required"),
    ],
)
def test_field_convert_bad_settings(settings, parameter, rule):
    with pytest.raises(ConfigError) as e:
        configure_only("field.convert", **settings)
    assert (e.value.parameter, e.value.rule) == (parameter, rule)


# -- json.decode / json.encode -------------------------------------------------------


def test_json_decode_edges():
    t = make("json.decode", field=".Payload.After")
    big = Record(after=b'{"u": 18446744073709551615, "w": 123456789012345678901234}')
    null, empty, structured = Record(after=None), Record(after=b""), Record(after={"a": 1})
    bad, array = Record(after=b"{nope"), Record(after=b"[1,2]")
    out = t.process([big, null, empty, structured, bad, array])
    assert big.after == {"u": 18446744073709551615, "w": 123456789012345678901234}
    assert null.after is None and empty.after is None and structured.after == {"a": 1}
    assert isinstance(out[4], Failed) and "invalid JSON" in out[4].message
    assert isinstance(out[5], Failed) and "expected an object" in out[5].message


def test_json_round_trip_and_bad_settings():
    enc, dec = make("json.encode", field=".Payload.After"), make("json.decode", field=".Payload.After")
    r = Record(after={"b": [1, {"c": None}], "a": "x"})
    dec.process(enc.process([r]))
    assert r.after == {"a": "x", "b": [1, {"c": None}]}
    for name in ("json.decode", "json.encode"):
        with pytest.raises(ConfigError, match="must not be one of .Payload"):
            configure_only(name, field=".Payload")
        with pytest.raises(ConfigError, match="must match"):
            configure_only(name, field=".Metadata.x")


# -- base64 --------------------------------------------------------------------------


def test_base64_edges():
    dec = make("base64.decode", field=".Payload.After.v")
    binary, bad, null = Record(after={"v": "/w=="}), Record(after={"v": "**"}), Record(after={"v": None})
    out = dec.process([binary, bad, null])
    assert binary.after["v"] == b"\xff" and null.after["v"] is None
    assert isinstance(out[1], Failed) and "failed to decode" in out[1].message
    enc = make("base64.encode", field=".Payload.After.v")
    n, m = Record(after={"v": 12}), Record(after={"v": {"a": 1}})
    out = enc.process([n, m])
    assert n.after["v"] == "MTI=" and isinstance(out[1], Failed)
    with pytest.raises(ConfigError, match="must not be one of .Position"):
        configure_only("base64.encode", field=".Position")


# -- unwrap --------------------------------------------------------------------------

def test_unwrap_debezium_operations_and_errors():
    t = make("unwrap.debezium")
    ev = {"payload": {"before": {"id": 1}, "after": None, "op": "d", "source": {"db": {"name": "x"}}, "ts_ms": 5,
                      "extra": {"k": 1}}}
    bad_op = {"payload": {"after": None, "op": "z", "source": {}}}
    missing = {"payload": {"after": None}}
    out = t.process([Record(after=ev), Record(after=bad_op), Record(after=missing), Record(after=b"not json")])
    assert out[0].operation is Operation.DELETE and out[0].before == {"id": 1} and out[0].after is None
    assert out[0].metadata == {"db.name": "x", "debezium.extra.k": "1", "opencdc.readAt": "5000000"}
    assert isinstance(out[1], Failed) and "invalid operation" in out[1].message
    assert isinstance(out[2], Failed) and "'source'" in out[2].message and "'op'" in out[2].message
    assert isinstance(out[3], Failed) and "invalid JSON" in out[3].message
    with pytest.raises(ConfigError, match="must match"):
        configure_only("unwrap.debezium", field=".Key")


def test_unwrap_kafkaconnect_without_payload_fails():
    [bad] = make("unwrap.kafkaconnect").process([Record(after={"schema": {}})])
    assert isinstance(bad, Failed) and "payload" in bad.message


def test_unwrap_opencdc_from_json_form():
    from cdcflow.convert.jsonform import dumps_record

    inner = Record(b"p", Operation.DELETE, {"opencdc.collection": "db.t", "n": "1"}, b"raw-key", {"id": 1}, None)
    t = make("unwrap.opencdc", field=".Payload.After")
    [out] = t.process([Record(b"outer", after=dumps_record(inner))])
    assert out == Record(b"outer", Operation.DELETE, inner.metadata, b"raw-key", {"id": 1}, None)
    [bad] = t.process([Record(after={"operation": "create", "payload": {}})])
    assert isinstance(bad, Failed) and "no metadata" in bad.message


# -- split / clone / error -----------------------------------------------------------


def test_split_copies_share_nothing():
    r = Record(operation=Operation.UPDATE, key={"id": 123}, after={"users": [{"name": "A"}, {"name": "B"}]})
    [out] = make("split", field=".Payload.After.users").process([r])
    out[0].key["id"] = 0
    assert out[1].key == {"id": 123}


def test_split_in_a_chain_keeps_order_and_fails_non_lists():
    c = chain(("split", "split", None, {"field": ".Payload.After.xs"}))
    result = c.process([Record(after={"xs": [1, 2]}), Record(after={"xs": "no"}), Record(after={"xs": []}),
                        Record(after={"xs": [3]})])
    assert [r.after["xs"] for r in result.records] == [1, 2, 3]
    assert len(result.nacks) == 1 and "not a list" in result.nacks[0].error and result.filtered == 1


def test_clone_copies_share_nothing():
    r = Record(operation=Operation.CREATE, metadata={"foo": "bar"}, key={"id": 123}, after={"name": "Alice", "age": 30})
    [out] = make("clone", count="1").process([r])
    out[1].after["name"] = "Bob"
    assert out[0].after["name"] == "Alice"
    with pytest.raises(ConfigError, match="greater than 0"):
        configure_only("clone", count="0")


def test_error_message_in_either_syntax_and_default():
    r = Record(operation=Operation.CREATE, metadata={"foo": "bar"}, before={"bar": "baz"}, after={"foo": "bar"})
    t = make("error", message="custom error message with data from record: {{ Metadata.foo }}")  # the older syntax
    assert t.process([r]) == [Failed("custom error message with data from record: bar")]
    assert make("error").process([r]) == [Failed("error processor triggered")]
    for bad in ("{{ Metadata. }}", "{{ .Metadata. }}"):
        with pytest.raises(ConfigError, match="message"):
            configure_only("error", message=bad)


def test_error_with_condition_nacks_only_matching_records():
    c = chain(("boom", "error", 'Metadata.bad == "yes"', {"message": "bad {{ Key.id }}"}))
    result = c.process([Record(metadata={"bad": "yes"}, key={"id": 1}), Record(metadata={"bad": "no"}, key={"id": 2})])
    assert [r.key for r in result.records] == [{"id": 2}]
    assert [(n.node_id, n.error) for n in result.nacks] == [("boom", "bad 1")]


# -- conditions true / false / invalid, on every built-in ------------------------------

SETTINGS = {
    "field.rename": {"mapping": ".Payload.After.a:b"},
    "field.convert": {"field": ".Payload.After.a", "type": "string"},
    "json.encode": {"field": ".Payload.After.a"},
    "base64.encode": {"field": ".Payload.After.a"},
    "clone": {"count": "1"},
    "split": {"field": ".Payload.After.l"},
    "cdc.route": {"routes": "db.*:x.y"},
    "cdc.mask": {"columns": "a"},
    "cdc.filter": {"columns.exclude": "a"},
}


@pytest.mark.parametrize("plugin", sorted(SETTINGS))
def test_conditions_true_false_invalid(plugin):
    c = chain(("p", plugin, 'Metadata.go == "yes"', SETTINGS[plugin]))

    def rec(go):
        md = {"opencdc.collection": "db.t"}
        if go is not None:
            md["go"] = go
        return Record(metadata=md, after={"a": 1, "l": [1]})

    skipped = rec("no")
    result = c.process([skipped, rec("yes")])
    assert result.records[0] is skipped and skipped.after == {"a": 1, "l": [1]}
    processed = result.records[1:]
    assert processed and processed != [rec("yes")]  # the true condition ran the processor
    bad = chain(("p", plugin, "Metadata.go + 1", SETTINGS[plugin])).process([rec("yes")])
    assert bad.records == [] and bad.nacks[0].node_id == "p" and "condition" in bad.nacks[0].error
    with pytest.raises(ConfigError, match="condition"):
        chain(("p", plugin, "Metadata.go ==", SETTINGS[plugin]))


def test_registry_describes_every_builtin():
    from helpers.transforms import registry

    names = {i.name: i for i in registry().transforms() if i.type == "builtin"}
    conduit = {"field.set", "field.rename", "field.exclude", "field.convert", "filter", "json.decode", "json.encode",
               "avro.decode", "avro.encode", "base64.decode", "base64.encode", "unwrap.debezium",
               "unwrap.kafkaconnect", "unwrap.opencdc", "split", "clone", "error", "webhook.http"}
    assert conduit | {"cdc.route", "cdc.filter", "cdc.mask", "cdc.dedup"} <= set(names)
    for info in names.values():
        assert info.summary and info.description, info.name
    assert names["webhook.http"].params["request.url"].required
    assert names["cdc.mask"].params["hash.salt"].secret


def test_filter_result_is_acknowledged_not_nacked():
    result = chain(("f", "filter", 'Operation == "delete"', {})).process(
        [Record(operation=Operation.DELETE), Record(operation=Operation.CREATE)])
    assert [r.operation for r in result.records] == [Operation.CREATE] and result.filtered == 1
    assert make("filter").process([Record()]) == [FILTERED]
