"""Property tests: records of every native value kind round-trip unchanged (``Record.__eq__``,
type-strict) through protobuf (serialized to bytes and parsed back); through the JSON form, which
holds plain JSON values, a record read back is written again to the same bytes."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcflow.convert.jsonform import dumps_lines, loads_lines
from cdcflow.convert.protobuf import PbRecord, from_proto, to_proto
from cdcflow.errors import ConversionError
from cdcflow.record import Operation, Record
from cdcflow.schemas import SchemaStore

from helpers.record_strategies import MIB, SETTINGS, TIME_MIN, names, records, scalar


@pytest.fixture(scope="module")
def store():
    s = SchemaStore()
    yield s
    s.close()


def _via_proto(batch: list[Record], store: SchemaStore) -> list[Record]:
    wire = [p.SerializeToString() for p in to_proto(batch, store)]
    return from_proto([PbRecord.FromString(b) for b in wire], store)


@SETTINGS
@given(st.lists(records(mixed_payload=False), min_size=1, max_size=3))
def test_protobuf_round_trip(store, batch):
    originals = [r.copy() for r in batch]
    assert _via_proto(batch, store) == originals
    assert batch == originals  # inputs untouched


@SETTINGS
@given(st.lists(records(mixed_payload=True), min_size=1, max_size=3))
def test_json_form_round_trip(batch):
    assert_json_fixed_point(batch)


def assert_json_fixed_point(batch: list[Record]) -> None:
    """Read back, the records keep position, operation and metadata, and are written to the same bytes."""
    once = dumps_lines(batch)
    back = loads_lines(once)
    assert [(r.position, r.operation, r.metadata) for r in back] == [(r.position, r.operation, r.metadata)
                                                                       for r in batch]
    assert dumps_lines(back) == once


@settings(max_examples=150, deadline=None)
@given(value=st.recursive(scalar, lambda c: st.lists(c, max_size=3) | st.dictionaries(names, c, max_size=3), max_leaves=12))
def test_any_value_round_trips_or_is_refused(value, store):
    """Arbitrary nesting: either exact both ways or a ConversionError naming the path."""
    r = Record(b"p", Operation.CREATE, {}, None, None, {"v": value})
    try:
        back = _via_proto([r], store)
    except ConversionError as e:
        assert e.path and e.path.startswith("$")
        return
    assert back == [r]
    assert_json_fixed_point([r])


def test_acceptance_values(store):
    """The values the issue names, explicitly."""
    row = {
        "u64": (1 << 64) - 1, "i64": -(1 << 63), "dec": Decimal("-12345678901234567890123456789012345.123456789012345678901234567890"),
        "zero": Decimal("0"), "empty": b"", "big": MIB, "t": TIME_MIN, "ts": dt.datetime(2020, 2, 20, 2, 20, 20, 123456),
        "null": None, "nested": {"l": [1, 2, None], "d": {"x": [b"a", b""]}},
    }
    r = Record(b"\x00\x01", Operation.UPDATE, {"opencdc.collection": "db.t"}, {"u64": (1 << 64) - 1}, dict(row, null=1), row)
    assert _via_proto([r], store) == [r]
    assert_json_fixed_point([r])


def test_mixed_raw_and_structured_payload_goes_as_struct(store):
    """Documented: one schema reference cannot cover a raw side, so the dict side is sent as Struct (lossy)."""
    r = Record(b"p", Operation.UPDATE, {}, None, b"raw-before", {"n": 5, "b": b"\x01"})
    pb = to_proto([r], store)[0]
    assert pb.payload.before.raw_data == b"raw-before"
    assert pb.payload.after.WhichOneof("data") == "structured_data"
    back = from_proto([pb], store)[0]
    assert back.before == b"raw-before" and back.after == {"n": 5, "b": "AQ=="}
