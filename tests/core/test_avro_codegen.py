"""The generated per-schema Avro code against its reference (the strict check + fastavro).

For every value, the generated encoder must write exactly the bytes fastavro
writes, and the generated decoder must return exactly what the reference path
returns (type-strict equality), including for Avro data fastavro itself does not
write (blocks with byte sizes)."""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.avro_values import Codec, derive_shared_schema
from cdcflow.errors import ConversionError
from cdcflow.record import _data_eq

TIME_MIN = dt.timedelta(hours=-838, minutes=-59, seconds=-59)
ints = st.one_of(st.integers(-(1 << 63), (1 << 64) - 1), st.integers(-(10 ** 40), 10 ** 40),
                 st.sampled_from([0, -1, 63, 64, -65, 8191, 8192, -(1 << 63), (1 << 63) - 1, 1 << 63]))
decimals = st.one_of(
    st.decimals(places=30, min_value=-(10 ** 35) + 1, max_value=10 ** 35 - 1, allow_nan=False, allow_infinity=False),
    st.decimals(places=2, allow_nan=False, allow_infinity=False),
    st.sampled_from([Decimal("-1.28"), Decimal("1.27"), Decimal("-0"), Decimal("NaN"), Decimal("1E+2")]),
)
SCALARS = [
    st.none(), st.booleans(), ints, st.floats(), st.text(max_size=20), st.binary(max_size=300), decimals,
    st.dates(), st.datetimes(), st.timedeltas(min_value=TIME_MIN, max_value=-TIME_MIN),
]


def _row(depth: int = 2) -> st.SearchStrategy:
    values = [st.one_of(SCALARS), *[st.lists(st.one_of(st.none(), s), max_size=4) for s in SCALARS[1:]]]
    if depth:
        inner = _row(depth - 1)
        values += [inner, inner.flatmap(lambda d: st.lists(st.just(d), max_size=3))]
    return st.dictionaries(st.text(max_size=8), st.one_of(values), max_size=6)


def _same_as_reference(codec: Codec, value) -> None:
    assert codec._fast_encode is not None
    data = codec.encode(value)
    assert data == codec._reference_encode(value)
    back = codec.decode(data)
    assert _data_eq(back, codec._reference_decode(data))
    assert _data_eq(back, value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_row(), min_size=1, max_size=2))
def test_generated_code_writes_and_reads_what_fastavro_does(values):
    codec = Codec(derive_shared_schema(values, "Payload"))
    for value in values:
        _same_as_reference(codec, value)


HAND_SCHEMA = {
    "type": "record", "name": "Hand", "namespace": "t", "fields": [
        {"name": "i", "type": "int"},
        {"name": "f", "type": "float"},
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "m", "type": {"type": "map", "values": ["null", "long", "Color"]}},
        {"name": "ch", "type": ["null", {"type": "record", "name": "A", "fields": [{"name": "x", "type": "long"}]},
                               {"type": "record", "name": "B", "fields": [{"name": "y", "type": "string"}]},
                               {"type": "array", "items": "Four"}]},
        {"name": "next", "type": ["null", "Hand"]},  # recursive
        {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 1}},
    ]}
HAND_VALUES = st.recursive(
    st.none(),
    lambda nxt: st.fixed_dictionaries({
        "i": st.integers(-(1 << 31), (1 << 31) - 1), "f": st.sampled_from([1.5, -0.0, float("inf"), 3.25]),
        "e": st.sampled_from(["RED", "GREEN"]), "fx": st.binary(min_size=4, max_size=4),
        "m": st.dictionaries(st.text(max_size=5), st.one_of(st.none(), st.integers(-5, 5 ** 20), st.just("RED"))),
        "ch": st.one_of(st.none(), st.builds(lambda x: {"x": x}, st.integers(-100, 100)),
                        st.builds(lambda y: {"y": y}, st.text(max_size=5)), st.lists(st.binary(min_size=4, max_size=4))),
        "next": nxt, "d": st.sampled_from([Decimal("1234.5"), Decimal("-0.1"), Decimal("0.0"), Decimal("-9999.9")]),
    }),
    max_leaves=3,
).filter(lambda v: v is not None)


@settings(max_examples=200, deadline=None)
@given(HAND_VALUES)
def test_named_recursive_enum_fixed_map_and_union_schemas(value):
    _same_as_reference(Codec(HAND_SCHEMA), value)


def test_union_of_enum_and_string_keeps_the_reference_branch_order():
    codec = Codec(["null", {"type": "enum", "name": "E", "symbols": ["a"]}, "string"])
    for value in (None, "a", "b"):
        assert codec.encode(value) == codec._reference_encode(value)


def test_blocks_with_byte_sizes_decode_as_the_reference_does():
    codec = Codec({"type": "record", "name": "R", "fields": [{"name": "xs", "type": {"type": "array", "items": "long"}},
                                                             {"name": "m", "type": {"type": "map", "values": "long"}}]})
    # array: a block of -2 items with a byte size, then 1 item, then the end; map: one block with a size
    data = bytes([3, 4, 2, 4, 2, 6, 0]) + bytes([1, 6, 2]) + b"k" + bytes([8, 0])
    assert codec.decode(data) == codec._reference_decode(data) == {"xs": [1, 2, 3], "m": {"k": 4}}


@pytest.mark.parametrize("data", [b"", b"\x02", b"\x02\x00\x00", b"\xff" * 12, b"\x01"])
def test_malformed_data_fails_as_the_reference_does(data):
    codec = Codec({"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]})
    with pytest.raises(ConversionError):
        codec.decode(data)


def test_foreign_logical_types_stay_with_fastavro():
    codec = Codec({"type": "record", "name": "R", "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]})
    assert codec._fast_encode is None
    value = {"ts": dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)}
    assert codec.decode(codec.encode(value)) == value


def test_big_strings_and_bytes_use_multi_byte_lengths():
    codec = Codec(derive_shared_schema([{"s": "x" * 70000, "b": os.urandom(9000)}]))
    _same_as_reference(codec, {"s": "é" * 70000, "b": os.urandom(9000)})
