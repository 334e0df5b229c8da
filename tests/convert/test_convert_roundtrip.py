"""Property tests: records of every native value kind round-trip unchanged (``Record.__eq__``,
type-strict) through protobuf (serialized to bytes and parsed back); through the JSON form, which
holds plain JSON values, a record read back is written again to the same bytes."""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.convert.jsonform import dumps_lines, loads_lines
from cdcflow.convert.protobuf import PbRecord, from_proto, to_proto
from cdcflow.errors import ConversionError
from cdcflow.record import Operation, Record
from cdcflow.schemas import SchemaStore

MIB = os.urandom(1 << 20)
TIME_MIN = dt.timedelta(hours=-838, minutes=-59, seconds=-59)
TIME_MAX = -TIME_MIN

ints = st.one_of(
    st.integers(-(1 << 63), (1 << 64) - 1),
    st.sampled_from([(1 << 64) - 1, -(1 << 63), (1 << 63) - 1, 1 << 63, 0]),
    st.integers(-(10 ** 80), 10 ** 80),
)
decimals = st.one_of(
    st.decimals(places=30, min_value=-(10 ** 35) + 1, max_value=10 ** 35 - 1, allow_nan=False, allow_infinity=False),
    st.decimals(places=2, allow_nan=False, allow_infinity=False),
    st.sampled_from([Decimal("0"), Decimal("-1.50"), Decimal("0.000"), Decimal("-0"), Decimal("NaN"),
                     Decimal("1E+2"), Decimal("99999999999999999999999999999999999.999999999999999999999999999999")]),
)
blobs = st.one_of(st.binary(max_size=40), st.just(b""), st.just(MIB))
times = st.one_of(st.timedeltas(min_value=TIME_MIN, max_value=TIME_MAX), st.sampled_from([TIME_MIN, dt.timedelta(days=1, microseconds=1)]))
SCALARS = [
    st.none(), st.booleans(), ints, st.floats(), st.text(max_size=20), blobs, decimals,
    st.dates(), st.datetimes(), times,
]
scalar = st.one_of(SCALARS)
names = st.text(max_size=8)


def _homogeneous_list(elements: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(st.one_of(st.none(), elements), max_size=4)


def _row(depth: int = 2) -> st.SearchStrategy:
    """A structured value: every scalar kind, nested dicts, lists of one kind (plus nulls)."""
    values = [scalar, *[_homogeneous_list(s) for s in SCALARS[1:]]]
    if depth:
        inner = _row(depth - 1)
        values.append(inner)
        values.append(inner.flatmap(lambda d: st.lists(st.just(d), max_size=3)))  # list of one shape
    return st.dictionaries(names, st.one_of(values), max_size=6)


rows = _row()
metadata = st.dictionaries(st.text(max_size=10).filter(lambda k: not k.startswith(("opencdc.key.schema", "opencdc.payload.schema", "cdcflow.schema"))),
                           st.text(max_size=10), max_size=4)


@st.composite
def records(draw, mixed_payload: bool) -> Record:
    key = draw(st.one_of(st.none(), st.binary(max_size=20), rows))
    if mixed_payload:
        before, after = draw(st.one_of(st.none(), st.binary(max_size=20), rows)), draw(st.one_of(st.none(), st.binary(max_size=20), rows))
    elif draw(st.booleans()):
        before, after = draw(st.one_of(st.none(), rows)), draw(st.one_of(st.none(), rows))
    else:
        before, after = draw(st.one_of(st.none(), st.binary())), draw(st.one_of(st.none(), st.binary()))
    md = draw(metadata)
    if draw(st.booleans()):
        md["opencdc.collection"] = draw(st.sampled_from(["db.t1", "db.t2"]))
    return Record(draw(st.binary(max_size=20)), draw(st.sampled_from(list(Operation))), md, key, before, after)


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


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
