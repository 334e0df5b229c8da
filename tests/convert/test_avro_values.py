"""The native-value <-> Avro mapping: types per kind, schema derivation, strict compiled codecs."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from cdcflow.convert.avro import (
    CDCFLOW_NAME,
    Codec,
    avro_type,
    codec_for,
    conforms,
    derive_schema,
    derive_shared_schema,
)
from cdcflow.errors import ConversionError, SchemaError
from cdcflow.record import _data_eq


def _rt(schema, value):
    c = codec_for(schema)
    return c.decode(c.encode(value))


def test_avro_types_per_kind():
    assert avro_type("double") == "double"
    assert avro_type("bigint")["cdcflow.type"] == "int" and avro_type("bigint")["scale"] == 0
    assert avro_type("decimal", precision=10, scale=2) == {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}
    assert avro_type("date") == {"type": "int", "logicalType": "date"}
    assert avro_type("datetime") == {"type": "long", "logicalType": "local-timestamp-micros"}
    assert avro_type("time") == {"type": "long", "cdcflow.type": "time-micros"}
    with pytest.raises(SchemaError):
        avro_type("float")
    with pytest.raises(SchemaError):
        avro_type("decimal", precision=2, scale=3)


def test_derive_uses_double_for_floats_and_bigint_past_int64():
    s = derive_schema({"f": 1.5, "small": 1 << 62, "big": 1 << 64})
    types = {f["name"]: f["type"] for f in s["fields"]}
    assert types["f"] == "double" and types["small"] == "long"
    assert types["big"]["cdcflow.type"] == "int"


@pytest.mark.parametrize(
    "value",
    [
        (1 << 64) - 1, -(1 << 63), -(10 ** 90), 0, Decimal("-0.000000000000000000000000000001"), Decimal("0"),
        Decimal("NaN"), Decimal("-Infinity"), Decimal("-0.00"), Decimal("1E+5"), b"", b"\x00" * 300,
        dt.timedelta(hours=-838, minutes=-59, seconds=-59), dt.timedelta(hours=838, microseconds=999999),
        dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.date(1000, 1, 1),
        float("nan"), float("-inf"), -0.0, "", "ünïcødé", True, None, [], [None, 1], {"": {"x y": []}},
    ],
)
def test_every_kind_round_trips_exactly(value):
    row = {"v": value}
    assert _data_eq(_rt(derive_schema(row), row), row)


def test_invalid_names_are_sanitized_and_restored():
    row = {"a b": 1, "a_b": 2, "1st": 3, "": 4, "ö": 5}
    s = derive_schema(row)
    names = [f["name"] for f in s["fields"]]
    assert len(set(names)) == 5 and all(n.replace("_", "a").isalnum() and not n[0].isdigit() for n in names)
    assert {f.get(CDCFLOW_NAME, f["name"]) for f in s["fields"]} == set(row)
    assert _rt(s, row) == row


def test_nested_records_get_unique_names():
    row = {"a": {"b": {"c": 1}}, "a_b": {"c": "x"}, "l": [{"k": 1}, {"k": None}]}
    s = derive_schema(row)
    text = json.dumps(s)
    assert _data_eq(_rt(s, row), row)
    record_names = [n for n in _names(s)]
    assert len(record_names) == len(set(record_names)), text


def _names(t):
    if isinstance(t, dict):
        if t.get("type") == "record":
            yield t["name"]
            for f in t["fields"]:
                yield from _names(f["type"])
        elif t.get("type") == "array":
            yield from _names(t["items"])
    elif isinstance(t, list):
        for b in t:
            yield from _names(b)


def test_list_is_array_of_union_of_element_types():
    s = derive_schema({"l": [1, "a", None, 2.5, 1 << 70]})
    items = s["fields"][0]["type"]["items"]
    assert items[0] == "null" and "string" in items and "double" in items
    assert any(isinstance(b, dict) and b.get("cdcflow.type") == "int" for b in items)  # long merged into bigint
    assert _data_eq(_rt(s, {"l": [1, "a", None, 2.5, 1 << 70]}), {"l": [1, "a", None, 2.5, 1 << 70]})


@pytest.mark.parametrize(
    "row, path",
    [
        ({"l": [{"a": 1}, {"b": 1}]}, "$.l[1]"),
        ({"l": [dt.datetime(2020, 1, 1), 5]}, "$.l[1]"),
        ({"l": [b"x", Decimal("1.5")]}, "$.l[1]"),
        ({"t": dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)}, "$.t"),
        ({"s": {1, 2}}, "$.s"),
        ({"d": {1: "x"}}, "$.d"),
    ],
)
def test_shapes_avro_cannot_express_raise_with_path(row, path):
    with pytest.raises(ConversionError) as info:
        derive_schema(row)
    assert info.value.path == path


def test_shared_schema_merges_or_unions_records():
    merged = derive_shared_schema([{"a": 1, "b": "x"}, {"a": None, "b": "y"}], "P")
    assert merged["type"] == "record" and merged["fields"][0]["type"] == ["null", "long"]
    union = derive_shared_schema([{"a": 1}, {"a": 1, "b": 2}], "P")
    assert isinstance(union, list) and [b["name"] for b in union] == ["P", "P_1"]
    c = codec_for(union)
    assert c.decode(c.encode({"a": 1})) == {"a": 1} and c.decode(c.encode({"a": 1, "b": 2})) == {"a": 1, "b": 2}


@pytest.mark.parametrize(
    "schema, good, bad",
    [
        ("long", 5, True),
        ("long", 5, 1 << 63),
        ("double", 1.0, 1),
        ("string", "x", b"x"),
        (avro_type("decimal", precision=10, scale=2), Decimal("1.50"), Decimal("1.5")),
        (avro_type("decimal", precision=4, scale=2), Decimal("10.00"), Decimal("100.00")),
        (avro_type("bigint"), (1 << 64) - 1, 10 ** 20),
        (avro_type("date"), dt.date(2020, 1, 1), dt.datetime(2020, 1, 1)),
        (avro_type("datetime"), dt.datetime(2020, 1, 1), dt.date(2020, 1, 1)),
        (avro_type("time"), dt.timedelta(0), 0),
        ({"type": "enum", "name": "E", "symbols": ["a"]}, "a", "b"),
        ({"type": "fixed", "name": "F", "size": 2}, b"ab", b"abc"),
        ({"type": "map", "values": "long"}, {"k": 1}, {"k": "1"}),
        ("int", 1, 1 << 40),
        ("float", 0.5, 0.1),
    ],
)
def test_codec_is_strict(schema, good, bad):
    row_schema = {"type": "record", "name": "R", "fields": [{"name": "v", "type": schema}]}
    assert conforms({"v": good}, row_schema) and _data_eq(_rt(row_schema, {"v": good}), {"v": good})
    assert not conforms({"v": bad}, row_schema)
    with pytest.raises(ConversionError) as info:
        codec_for(row_schema).encode({"v": bad})
    assert info.value.path.startswith("$.v")


def test_record_key_set_must_match_exactly():
    s = derive_schema({"a": 1})
    assert not conforms({"a": 1, "b": 2}, s)
    assert not conforms({}, s)


def test_tidb_table_schema_built_from_avro_type_carries_values():
    """Another module builds column-type schemas with avro_type; values of those columns fit them."""
    schema = {"type": "record", "name": "t", "fields": [
        {"name": "id", "type": avro_type("bigint")},
        {"name": "price", "type": ["null", avro_type("decimal", precision=65, scale=30)]},
        {"name": "d", "type": ["null", avro_type("date")]},
        {"name": "t", "type": ["null", avro_type("time")]},
        {"name": "j", "type": ["null", "string"]},
    ]}
    row = {"id": (1 << 64) - 1, "price": Decimal("-1." + "0" * 29 + "1"), "d": None,
           "t": dt.timedelta(hours=-838, minutes=-59, seconds=-59), "j": '{"a": 1}'}
    assert _data_eq(_rt(schema, row), row)


def test_decode_rejects_data_that_does_not_match():
    c = codec_for(derive_schema({"s": "text", "n": 1}))
    good = c.encode({"s": "text", "n": 1})
    for bad in (good[:-1], good + b"\x00", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"):
        with pytest.raises(ConversionError):
            c.decode(bad)


def test_codecs_are_cached_and_bad_schemas_typed():
    s = derive_schema({"a": 1})
    assert codec_for(s) is codec_for(json.dumps(s, sort_keys=True, separators=(",", ":")))
    with pytest.raises(SchemaError):
        Codec("{not json")
    with pytest.raises(SchemaError):
        Codec({"type": "record", "name": "R", "fields": [{"name": "a", "type": "nosuchtype"}]})


def test_merged_branch_that_collides_with_another_is_refused():
    """Two decimals of different scales merge into decimal text, a string: beside a str
    in the same list Avro cannot tell the branches apart, so deriving must refuse."""
    from decimal import Decimal

    import pytest

    from cdcflow.convert.avro import derive_schema
    from cdcflow.errors import ConversionError

    with pytest.raises(ConversionError, match="cannot be told apart"):
        derive_schema({"l": ["", Decimal("0E-30"), Decimal("0.00")]})
