"""The generated per-schema Avro code against its reference (the strict check + fastavro).

For every value, the generated encoder must write exactly the bytes fastavro
writes, and the generated decoder must return exactly what the reference path
returns (type-strict equality), including for Avro data fastavro itself does not
write (blocks with byte sizes)."""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.avro_values import Codec, derive_shared_schema
from cdcflow.errors import ConversionError
from cdcflow.record import _data_eq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from avro_value_strategies import HAND_SCHEMA, hand_value, rows  # noqa: E402  (tests/core: shared value strategies)


def _same_as_reference(codec: Codec, value) -> None:
    assert codec._fast_encode is not None
    data = codec.encode(value)
    assert data == codec._reference_encode(value)
    back = codec.decode(data)
    assert _data_eq(back, codec._reference_decode(data))
    assert _data_eq(back, value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(rows(), min_size=1, max_size=2))
def test_generated_code_writes_and_reads_what_fastavro_does(values):
    codec = Codec(derive_shared_schema(values, "Payload"))
    for value in values:
        _same_as_reference(codec, value)


@settings(max_examples=200, deadline=None)
@given(hand_value(2))
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
