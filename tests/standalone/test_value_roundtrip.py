"""Every native value kind survives host -> plugin -> host unchanged (echo transform, transform.v1)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.record import Operation, Record
from cdcflow.standalone.host import StandaloneTransform

from helpers.standalone import served

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def echo(tmp_path_factory: pytest.TempPathFactory):
    t = StandaloneTransform(served(tmp_path_factory.mktemp("plugins"), "echo", "EchoTransform"))
    t.configure({})
    t.open()
    assert t.proc.is_cdcflow  # so structured data travels as Avro (lossless)
    yield t
    t.teardown()


def _strip_schema_refs(r: Record) -> Record:
    """The host names the schemas it registered in metadata; values are what must not change."""
    c = r.copy()
    c.metadata = {k: v for k, v in c.metadata.items() if ".schema." not in k}
    return c


def test_edge_values(echo: StandaloneTransform) -> None:
    row = {
        "u64": 2**64 - 1, "i64": -(2**63), "huge": 10**40, "dec": Decimal("-12345678901234567890.123456789012345678901234567890"),
        "dec0": Decimal("0.000000000000000000000000000000"), "empty": b"", "blob": bytes(range(256)) * 4096,
        "time": -dt.timedelta(hours=838, minutes=59, seconds=59), "long_time": dt.timedelta(hours=500, microseconds=1),
        "date": dt.date(2020, 2, 29), "ts": dt.datetime(2020, 2, 20, 2, 20, 20, 123456), "null": None,
        "f": 0.1, "b": True, "s": "ünïcode", "list": [1, 2, 3], "obj": {"a": Decimal("1.50"), "b": None},
    }
    assert len(row["blob"]) == MIB
    recs = [
        Record(position=b"p1", operation=Operation.UPDATE, metadata={"opencdc.collection": "db.t"},
               key={"id": 2**64 - 1}, before=dict(row, null=1), after=row),
        Record(position=b"p2", operation=Operation.DELETE, key=b"", before=row),
        Record(position=b"", operation=Operation.SNAPSHOT, key=None, after=b""),
    ]
    out = echo.process(recs)
    assert [_strip_schema_refs(o) for o in out] == [_strip_schema_refs(r) for r in recs]


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False), st.text(max_size=20), st.binary(max_size=64),
    st.decimals(allow_nan=False, allow_infinity=False, places=30,
                min_value=Decimal("-1e34"), max_value=Decimal("1e34")),
    st.timedeltas(min_value=-dt.timedelta(hours=838, minutes=59, seconds=59),
                  max_value=dt.timedelta(hours=838, minutes=59, seconds=59)),
    st.dates(), st.datetimes(),
)
rows = st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), scalars, max_size=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(st.tuples(rows, st.one_of(st.none(), rows, st.binary(max_size=32))), min_size=1, max_size=5))
def test_rows_roundtrip(echo: StandaloneTransform, batch: list) -> None:
    recs = [Record(position=f"{i}".encode(), operation=Operation.UPDATE, key=key,
                   before=after, after=after) for i, (after, key) in enumerate(batch)]
    out = echo.process(recs)
    assert [_strip_schema_refs(o) for o in out] == [_strip_schema_refs(r) for r in recs]
