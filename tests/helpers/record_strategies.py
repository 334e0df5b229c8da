"""Hypothesis strategies for records of every native value kind, shared by the record-form tests
(protobuf, JSON form, wire kernel)."""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from cdcflow.record import Operation, Record

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
