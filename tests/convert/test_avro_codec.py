"""The Avro codec (``cdcflow.convert.avro.Codec``): what it writes, fastavro reads back; what it
reads, it gives back as the native values that were written (type-strict), also for Avro data
fastavro itself does not write (blocks with byte sizes) and for values near the edges."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import struct
from decimal import Context, Decimal

import pytest
from fastavro import parse_schema, schemaless_reader
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.avro_strategies import HAND_SCHEMA, hand_value, rows
from cdcflow.convert.avro import Codec, avro_type, codec_for, derive_shared_schema
from cdcflow.errors import ConversionError
from cdcflow.record import Record, _data_eq


def _round_trip(codec: Codec, value) -> bytes:
    data = codec.encode(value)
    assert _data_eq(codec.decode(data), value)
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(rows(), min_size=1, max_size=2))
def test_derived_schemas_round_trip(values):
    codec = Codec(derive_shared_schema(values, "Payload"))
    for value in values:
        _round_trip(codec, value)


@settings(max_examples=200, deadline=None)
@given(hand_value(2))
def test_named_recursive_enum_fixed_map_and_union_schemas(value):
    _round_trip(Codec(HAND_SCHEMA), value)


def test_union_of_enum_and_string_takes_the_first_branch_that_fits():
    codec = Codec(["null", {"type": "enum", "name": "E", "symbols": ["a"]}, "string"])
    assert codec.encode(None) == b"\x00"
    assert codec.encode("a") == b"\x02\x00"  # the enum, branch 1
    assert codec.encode("b") == b"\x04\x02b"  # not a symbol: the string, branch 2
    assert [codec.decode(codec.encode(v)) for v in (None, "a", "b")] == [None, "a", "b"]


def test_a_union_of_a_map_and_a_record_tries_them_in_order():
    codec = Codec({"type": "record", "name": "M", "fields": [{"name": "u", "type": [
        {"type": "map", "values": "long"}, {"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]}]}]})
    assert codec.encode({"u": {"a": 1}}) == b"\x00\x02\x02a\x02\x00"  # the map
    assert codec.encode({"u": {"a": "x"}}) == b"\x02\x02x"  # the map refuses it: the record
    with pytest.raises(ConversionError):
        codec.encode({"u": {"a": "\ud800"}})


def test_non_record_roots():
    for schema, value in (({"type": "long"}, 5), (["null", "string"], "é"), ({"type": "array", "items": "long"}, [1, 2, 3]),
                          ({"type": "map", "values": "string"}, {"k": "v", "é": ""}), ({"type": "null"}, None)):
        data = _round_trip(Codec(schema), value)
        assert schemaless_reader(io.BytesIO(data), parse_schema(schema), None) == value


def test_deep_recursion_encodes_and_decodes():
    codec = Codec({"type": "record", "name": "N", "fields": [{"name": "next", "type": ["null", "N"]}]})
    v = None
    for _ in range(200):
        v = {"next": v}
    assert _round_trip(codec, v) == b"\x02" * 199 + b"\x00"


def test_blocks_with_byte_sizes_decode():
    codec = Codec({"type": "record", "name": "R", "fields": [{"name": "xs", "type": {"type": "array", "items": "long"}},
                                                             {"name": "m", "type": {"type": "map", "values": "long"}}]})
    # array: a block of -2 items with a byte size, then 1 item, then the end; map: one block with a size
    data = bytes([3, 4, 2, 4, 2, 6, 0]) + bytes([1, 6, 2]) + b"k" + bytes([8, 0])
    assert codec.decode(data) == {"xs": [1, 2, 3], "m": {"k": 4}}


@pytest.mark.parametrize("data", [b"", b"\x02", b"\x02\x00\x00", b"\xff" * 12, b"\x01"])
def test_malformed_data_fails_with_a_conversion_error(data):
    codec = Codec({"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]})
    with pytest.raises(ConversionError):
        codec.decode(data)


def test_foreign_logical_types_are_converted_by_fastavro():
    codec = Codec({"type": "record", "name": "R", "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]})
    value = {"ts": dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)}
    assert codec.decode(codec.encode(value)) == value


def test_big_strings_and_bytes_use_multi_byte_lengths():
    codec = Codec(derive_shared_schema([{"s": "x" * 70000, "b": os.urandom(9000)}]))
    data = _round_trip(codec, {"s": "é" * 70000, "b": os.urandom(9000)})
    assert data[:3] == bytes([0xC0, 0x8B, 0x11])  # zig-zag varint of 140000 bytes of UTF-8


def test_encoder_and_decoder_behave_as_encode_and_decode():
    codec = Codec(derive_shared_schema([{"a": 1, "b": "x"}]))
    data = codec.encoder()({"a": 2, "b": "y"})
    assert data == codec.encode({"a": 2, "b": "y"}) and codec.decoder()(data) == {"a": 2, "b": "y"}
    with pytest.raises(ConversionError):
        codec.encoder()({"a": True, "b": "y"})  # a bool is not a long


# -- table-row schemas: scalar fields and nullable unions of them ---------------------------------

SCALAR_TYPES = {
    "null": st.none(),
    "boolean": st.booleans(),
    "long": st.integers(-(1 << 63), (1 << 63) - 1),
    "double": st.floats(),
    "bytes": st.binary(max_size=40),
    "string": st.text(max_size=20) | st.sampled_from(["\u2028\u2029", "\x00\x1f", "𝔘𝔫", "é"]),
    "date": st.dates(),
    "datetime": st.datetimes(),
    "time": st.timedeltas(min_value=dt.timedelta(hours=-838), max_value=dt.timedelta(hours=838)),
    "bigint": st.integers(-(10 ** 30), 10 ** 30) | st.sampled_from([(1 << 64) - 1, 0, -1]),
    "decimal_text": st.decimals(allow_nan=False, allow_infinity=False) | st.sampled_from([Decimal("-0.00"), Decimal("1E+5")]),
}


def _decimal_column(draw):
    """(Avro type, values) of a DECIMAL(precision, scale) column."""
    precision = draw(st.integers(1, 65))
    scale = draw(st.integers(0, min(precision, 30)))
    exact = Context(prec=100)
    values = st.integers(-(10 ** precision) + 1, 10 ** precision - 1).map(lambda u: Decimal(u).scaleb(-scale, exact))
    return avro_type("decimal", precision=precision, scale=scale), values


@st.composite
def _scalar_records(draw):
    """(schema, values): a record of scalar fields and unions of them (nullable columns)."""
    n = draw(st.integers(0, 8))
    kinds = [draw(st.sampled_from(sorted(SCALAR_TYPES) + ["decimal", "decimal", "int", "float"])) for _ in range(n)]
    fields, strategies = [], {}
    for i, kind in enumerate(kinds):
        if kind == "decimal":
            avro, values = _decimal_column(draw)
        elif kind in ("int", "float"):
            avro, values = kind, (st.integers(-(1 << 31), (1 << 31) - 1) if kind == "int" else st.floats(width=32))
        else:
            avro, values = avro_type(kind, precision=40) if kind == "bigint" else avro_type(kind), SCALAR_TYPES[kind]
        nullable = kind != "null" and draw(st.booleans())
        name = f"f{i}"
        fields.append({"name": name, "type": ["null", avro] if nullable else avro})
        strategies[name] = st.one_of(st.none(), values) if nullable else values
    schema = {"type": "record", "name": "r", "fields": fields}
    return schema, draw(st.lists(st.fixed_dictionaries(strategies), min_size=1, max_size=4))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_scalar_records(), st.data())
def test_table_rows_decode_to_their_values_and_broken_bytes_fail_typed(schema_values, data):
    schema, values = schema_values
    codec = codec_for(json.dumps(schema))
    for value in values:
        encoded = codec.encode(value)
        got = codec.decode(encoded)
        assert Record(after=got) == Record(after=value)
        assert list(got) == [f["name"] for f in schema["fields"]]  # keys in field order
        assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in value.items()}
        broken = bytearray(encoded)
        at = data.draw(st.integers(0, len(broken)))
        broken[at:at + data.draw(st.integers(0, 2))] = data.draw(st.binary(max_size=2))
        try:
            codec.decode(bytes(broken))
        except ConversionError:
            pass  # a typed error, or a value: never anything else


def test_edge_values_round_trip():
    schema = {"type": "record", "name": "r", "fields": [
        {"name": "l", "type": "long"}, {"name": "d", "type": avro_type("date")},
        {"name": "ts", "type": avro_type("datetime")}, {"name": "t", "type": avro_type("time")},
        {"name": "f", "type": "float"}, {"name": "u", "type": ["null", "string", "long"]},
        {"name": "m", "type": ["null", avro_type("decimal", precision=65, scale=30)]},
        {"name": "b", "type": avro_type("bigint", precision=40)}]}
    codec = codec_for(json.dumps(schema))
    for value in [
        {"l": -(1 << 63), "d": dt.date.min, "ts": dt.datetime.min, "t": -dt.timedelta(hours=838, seconds=1),
         "f": float("inf"), "u": None, "m": Decimal("-" + "9" * 35 + "." + "9" * 30), "b": -(1 << 127)},
        {"l": (1 << 63) - 1, "d": dt.date.max, "ts": dt.datetime.max, "t": dt.timedelta(microseconds=-1),
         "f": -0.0, "u": "\u2028", "m": Decimal("0E-30"), "b": 0},
        {"l": 0, "d": dt.date(1970, 1, 1), "ts": dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
         "t": dt.timedelta(days=1, microseconds=1), "f": struct.unpack("<f", b"\x01\x00\x80\x7f")[0], "u": 7,
         "m": None, "b": (1 << 64) - 1},
    ]:
        assert Record(after=codec.decode(codec.encode(value))) == Record(after=value)
    # out-of-range dates, a varint beyond 64 bits, a bad union index: a typed error
    for data in [b"\x00" + b"\xfe\xff\xff\xff\x0f" + b"\x00" * 20, b"\x80" * 10 + b"\x02", b"\x00" * 17 + b"\x06"]:
        with pytest.raises(ConversionError):
            codec.decode(data)


def test_a_value_that_does_not_convert_back_is_a_conversion_error():
    """Decimal text that is not a number (damaged or foreign data) fails typed, not with decimal's
    InvalidOperation."""
    codec = Codec({"type": "record", "name": "r", "fields": [{"name": "d", "type": avro_type("decimal_text")}]})
    assert codec.decode(b"\x061.5") == {"d": Decimal("1.5")}
    with pytest.raises(ConversionError, match="InvalidOperation"):
        codec.decode(b"\x06x.y")
