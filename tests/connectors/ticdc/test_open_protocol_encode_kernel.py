"""The compiled open-protocol encoder (``_open_protocol_encode.c``) gives exactly what the Python
path gives: ``OpenProtocolEncoder.encode_records(records, store)`` with the kernel against
``encode(from_records(records, store))`` without it, byte for byte, or the same typed error.

The kernel is switched off with ``helpers.kernels.OPEN_ENCODE.off()`` (``_encode_kernel = None``:
the same code minus the kernel, not a mock; ``encode_records`` then is ``encode(from_records(...))``). Where a test must know the kernel itself wrote the rows (not
its Python fallback), it calls the kernel directly with a fallback that counts what it is given.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.connectors.ticdc import open_protocol as op
from cdcflow.connectors.ticdc.open_protocol import encode as op_encode
from cdcflow.connectors.ticdc.open_protocol import schema as op_schema
from cdcflow.connectors.ticdc.events import (
    DDLEvent,
    ResolvedEvent,
    RowChange,
    from_records,
    to_record,
)
from cdcflow.record import Operation, Record
from cdcflow.schemas import SchemaStore
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

from helpers.kernels import OPEN_ENCODE, both
from helpers.tidb_strategies import tables_and_rows
from helpers.leakcheck import traced_growth

needs_kernel = OPEN_ENCODE.required()
SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
OPTIONS = st.fixed_dictionaries({
    "max-batch-size": st.integers(1, 5),
    "output-old-value": st.booleans(),
    "only-output-updated-columns": st.booleans(),
    "delete-only-output-handle-key-columns": st.booleans(),
})

TABLE = TableSchema("shop", "orders", (
    Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
    Column("qty", "INT", unsigned=True),
    Column("name", "VARCHAR", length=64),
    Column("price", "DECIMAL", precision=10, scale=2),
    Column("weight", "DOUBLE"),
    Column("ratio", "FLOAT"),
    Column("created", "DATETIME", fsp=3),
    Column("day", "DATE"),
    Column("span", "TIME", fsp=2),
    Column("note", "TEXT"),
    Column("data", "BLOB", binary=True),
    Column("raw", "VARBINARY", length=32, binary=True),
    Column("state", "ENUM", elements=("new", "paid", "shipped")),
    Column("tags", "SET", elements=("a", "b", "c")),
    Column("doc", "JSON"),
    Column("big", "BIGINT", unsigned=True),
    Column("bits", "BIT", length=64),
    Column("yr", "YEAR"),
    Column("spare", "INT"),
))

ROW = {"id": 7, "qty": 3, "name": "customer \u2028 \"q\" \x01 \U0001F600", "price": Decimal("12.50"),
       "weight": 0.25, "ratio": op_schema.to_float32(0.1), "created": dt.datetime(2024, 5, 1, 12, 0, 0, 123000),
       "day": dt.date(2024, 5, 1), "span": dt.timedelta(hours=-838, minutes=-59, seconds=-59),
       "note": "a note\n\tof modest length", "data": b"\x00\xff\x10abc", "raw": b"plain-bytes",
       "state": "paid", "tags": "a,c", "doc": '{"k": [1, 2.5, null]}', "big": 2**64 - 1, "bits": 2**64 - 1,
       "yr": 2155, "spare": None}


@pytest.fixture(scope="module")
def store():
    s = SchemaStore()
    yield s
    s.close()


def python_path(records, store, options=None):
    with OPEN_ENCODE.off():
        return op.OpenProtocolEncoder(options).encode(from_records(records, store))


def encode_both(records, store, options=None):
    """(``encode_records`` outcome with the kernel, the same with it off: the Python path)."""
    return both(OPEN_ENCODE, lambda: op.OpenProtocolEncoder(options).encode_records(records, store))


def kernel_direct(records, store, options=None):
    """The kernel itself: (messages, records it handed to the Python fallback)."""
    enc = op.OpenProtocolEncoder(options)
    plan_for, fallback = enc._kernel_callables(store)
    taken = []

    def counting(record):
        taken.append(record)
        return fallback(record)
    return enc._kernel_encoder().encode(list(records), plan_for, counting), taken


def row_records(table, rows, kinds, store, ts0=1_700_000_000_000):
    out = []
    for i, (row, kind) in enumerate(zip(rows, kinds)):
        old = rows[i - 1] if kind == "update" and i else None
        ev = RowChange(table, kind, (ts0 + i) << 18, row, old)
        out.append(to_record(ev, b"%d" % i, store))
    return out


def base_record(store, row=None, **md):
    rec = to_record(RowChange(TABLE, "insert", 445644800000000000, dict(ROW if row is None else row)), b"p", store)
    rec.metadata.update(md)
    return rec


# --------------------------------------------------------------------------- differential, generated

@needs_kernel
@SETTINGS
@given(data=tables_and_rows(min_rows=1, max_rows=5), kinds=st.lists(st.sampled_from(["insert", "update", "delete"]),
                                                                   min_size=5, max_size=5),
       options=OPTIONS, controls=st.lists(st.integers(0, 6), max_size=2))
def test_kernel_equals_python_on_generated_rows(store, data, kinds, options, controls):
    table, rows = data
    records = row_records(table, rows, kinds, store)
    for at in controls:  # DDL and resolved records mixed into the batch
        at = min(at, len(records))
        records.insert(at, to_record(ResolvedEvent(at + 5), b"r", store) if at % 2 else
                       to_record(DDLEvent(table.schema, table.table, "ALTER TABLE t ADD c INT", at + 7, 5, table),
                                 b"d", store))
    expected = python_path(records, store, options)
    assert op.OpenProtocolEncoder(options).encode_records(records, store) == expected
    messages, taken = kernel_direct(records, store, options)
    assert messages == expected
    # the kernel wrote every row itself except those whose shape the options send to Python
    handle = any(c.handle_key for c in table.columns)
    must_take = []
    for r in records:
        if "cdcflow.control" in r.metadata:
            must_take.append(r)
        elif r.operation is Operation.UPDATE and r.before is not None and options["output-old-value"] \
                and options["only-output-updated-columns"]:
            must_take.append(r)
        elif r.operation is Operation.DELETE and handle and options["delete-only-output-handle-key-columns"]:
            must_take.append(r)
    assert [id(r) for r in taken] == [id(r) for r in must_take]


@needs_kernel
@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float_text_is_orjsons(x):
    assert op_encode._encode_kernel.json_float(x) == orjson.dumps(x)


@needs_kernel
@pytest.mark.parametrize("x", [0.0, -0.0, 1e-5, 1.5e-5, -9.999999999999999e-06, 1e-6, 1e-4, 1e15, 1e16, -1e16,
                               9999999999999998.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 0.1,
                               123456789.125, 1 / 3])
def test_float_text_edges(x):
    assert op_encode._encode_kernel.json_float(x) == orjson.dumps(x)


@needs_kernel
@settings(max_examples=200, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float32_shortest_digits_equal_python(x):
    assert op_schema.float32_short(x) is not None
    t = TableSchema("s", "f", (Column("f", "FLOAT"),))
    s = SchemaStore()
    try:
        rec = to_record(RowChange(t, "insert", 1, {"f": x}), b"", s)
        (k, v), = op.OpenProtocolEncoder().encode_records([rec], s)
        assert v == op.OpenProtocolEncoder().encode([RowChange(t, "insert", 1, {"f": x})])[0][1]
    finally:
        s.close()


# --------------------------------------------------------------------------- the usual shapes, by hand

@needs_kernel
@pytest.mark.parametrize("options", [None, {"max-batch-size": 2}, {"output-old-value": False},
                                     {"max-message-bytes": 2500}])
def test_every_type_insert_update_delete(store, options):
    other = dict(ROW, id=8, name="", price=Decimal("-0.01"), weight=-1e-5, span=dt.timedelta(0), state="new",
                 tags="", data=b"", raw=b"", big=0, bits=0, yr=0, spare=-(2**31))
    records = row_records(TABLE, [ROW, other, other, ROW], ["insert", "insert", "update", "delete"], store)
    expected = python_path(records, store, options)
    messages, taken = kernel_direct(records, store, options)
    assert taken == []
    assert messages == expected
    assert op.OpenProtocolEncoder(options).encode_records(records, store) == expected


@needs_kernel
def test_snapshot_reads_as_insert_and_partitions_keep_their_plan(store):
    part = dataclasses.replace(TABLE, partition=3)
    records = row_records(TABLE, [ROW], ["insert"], store) + row_records(part, [ROW, ROW], ["insert"] * 2, store)
    records[0].operation = Operation.SNAPSHOT
    messages, taken = kernel_direct(records, store)
    assert taken == [] and messages == python_path(records, store)
    assert b'"ptn":3' in messages[0][0]


# --------------------------------------------------------------------------- handed back to Python

BAD_VALUES = [
    ("qty", -1), ("qty", 2**32), ("qty", True), ("qty", 1.0), ("id", 2**63), ("big", 2**64), ("yr", 2156),
    ("weight", float("nan")), ("weight", float("inf")), ("weight", 1), ("ratio", 0.1), ("ratio", 1e300),
    ("price", Decimal("1.5")), ("price", Decimal("1.234")), ("price", Decimal("NaN")), ("price", Decimal("1E+3")),
    ("price", 1.5), ("created", dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)),
    ("created", dt.datetime(2024, 1, 1, 0, 0, 0, 1)), ("day", dt.datetime(2024, 1, 1)), ("day", "2024-01-01"),
    ("span", dt.timedelta(hours=839)), ("span", dt.timedelta(days=10**6)), ("span", dt.timedelta.max), ("span", dt.timedelta.min), ("span", dt.timedelta(microseconds=1)),
    ("name", b"bytes"), ("name", "\ud800"), ("note", "\udfff"), ("note", b"text as bytes"), ("data", "str"),
    ("raw", b"\x00quoted\xff\"\\"), ("raw", "str"), ("state", "gone"), ("state", ""), ("state", 2),
    ("tags", "b,a"), ("tags", "zz"), ("doc", {"not": "text"}), ("bits", -1), ("name", "\x7f\u2029\u00e9"),
]


@needs_kernel
@pytest.mark.parametrize("column,value", BAD_VALUES, ids=[f"{c}={v!r}"[:40] for c, v in BAD_VALUES])
def test_values_outside_the_fast_path(store, column, value):
    good = base_record(store)
    bad = base_record(store, dict(ROW, **{column: value}))
    kernel, python = encode_both([good, bad, good], store)
    assert kernel == python


class _Dict(dict):
    pass


def _mutations():
    """(name, records-builder(store)) of record shapes the kernel hands back."""
    def md(**kw):
        return lambda s: [base_record(s), base_record(s, **kw), base_record(s)]

    def edit(fn):
        def build(s):
            recs = [base_record(s), base_record(s), base_record(s)]
            fn(recs[1])
            return recs
        return build

    def drop_reference(r):
        del r.metadata["opencdc.payload.schema.subject"]

    def set_(attr, value):
        return edit(lambda r: setattr(r, attr, value))

    class MyRecord(Record):
        __slots__ = ()

    return [
        ("row-id", md(**{"ticdc.row-id": "42"})),
        ("bad row-id", md(**{"ticdc.row-id": "x"})),
        ("only-handle-key", md(**{"ticdc.only-handle-key": "true"})),
        ("claim-check", md(**{"ticdc.claim-check-location": "s3://b/k"})),
        ("other extra", md(**{"ticdc.something": "else"})),
        ("ts with spaces", md(**{"ticdc.commit-ts": " 12 "})),
        ("ts not a number", md(**{"ticdc.commit-ts": "abc"})),
        ("ts beyond 64 bits", md(**{"ticdc.commit-ts": str(2**70)})),
        ("ts leading zeros", md(**{"ticdc.commit-ts": "00012"})),
        ("ts non-ascii digits", md(**{"ticdc.commit-ts": "\u0661\u0662"})),
        ("ts missing", edit(lambda r: r.metadata.pop("ticdc.commit-ts"))),
        ("no schema reference", edit(drop_reference)),
        ("unknown schema version", md(**{"opencdc.payload.schema.version": "999"})),
        ("unknown control", md(**{"cdcflow.control": "what"})),
        ("unspecified operation", set_("operation", Operation.UNSPECIFIED)),
        ("int operation", set_("operation", 1)),
        ("raw payload", set_("after", b"raw")),
        ("no payload", set_("after", None)),
        ("missing column", edit(lambda r: r.after.pop("spare"))),
        ("unknown column", edit(lambda r: r.after.__setitem__("zzz", 1))),
        ("renamed column", edit(lambda r: r.after.__setitem__("zzz", r.after.pop("spare")))),
        ("delete by key", edit(lambda r: (setattr(r, "operation", Operation.DELETE), setattr(r, "after", None)))),
        ("delete full", edit(lambda r: (setattr(r, "operation", Operation.DELETE), setattr(r, "before", r.after),
                                        setattr(r, "after", None)))),
        ("update partial old", edit(lambda r: (setattr(r, "operation", Operation.UPDATE),
                                               setattr(r, "before", {"id": 1})))),
        ("update raw old", edit(lambda r: (setattr(r, "operation", Operation.UPDATE), setattr(r, "before", b"x")))),
        ("update old is a dict subclass", edit(lambda r: (setattr(r, "operation", Operation.UPDATE),
                                                          setattr(r, "before", _Dict(r.after))))),
        ("update with old unset", edit(lambda r: (setattr(r, "operation", Operation.UPDATE), delattr(r, "before")))),
        ("update with new unset", edit(lambda r: (setattr(r, "operation", Operation.UPDATE), delattr(r, "after")))),
        ("update changed", edit(lambda r: (setattr(r, "operation", Operation.UPDATE),
                                           setattr(r, "before", dict(r.after, qty=99))))),
        ("operation unset", edit(lambda r: delattr(r, "operation"))),
        ("record subclass", lambda s: [base_record(s), MyRecord(b"", Operation.CREATE, base_record(s).metadata,
                                                                None, None, dict(ROW))]),
        ("metadata not a dict", edit(lambda r: setattr(r, "metadata", list(r.metadata.items())))),
        ("two errors, later one first in from_records", lambda s: [
            base_record(s, dict(ROW, qty=-1)), base_record(s, **{"ticdc.commit-ts": "abc"})]),
    ]


MUTATIONS = _mutations()


@needs_kernel
@pytest.mark.parametrize("options", [None, {"output-old-value": False, "delete-only-output-handle-key-columns": True},
                                     {"only-output-updated-columns": True}], ids=["default", "no-old", "only-updated"])
@pytest.mark.parametrize("build", [b for _, b in MUTATIONS], ids=[n for n, _ in MUTATIONS])
def test_unusual_records_go_the_python_way(store, build, options):
    kernel, python = encode_both(build(store), store, options)
    assert kernel == python


@needs_kernel
@pytest.mark.parametrize("limit", [100, 700, 1200, 5000])
def test_max_message_bytes(store, limit):
    records = [base_record(store) for _ in range(5)]
    kernel, python = encode_both(records, store, {"max-message-bytes": limit, "max-batch-size": 16})
    assert kernel == python
    if limit == 100:
        assert kernel[:2] == ("error", op.MessageTooLarge)


@needs_kernel
def test_max_message_bytes_boundaries(store):
    """Limits one byte either side of where a row alone, and a second row, still fit."""
    records = [base_record(store) for _ in range(3)]
    (key, value), = python_path(records[:1], store)
    row_bytes = (len(key) - 16) + (len(value) - 8) + 16  # the row's key and value JSON plus the slack
    alone, second = row_bytes + 8 + 36, 2 * row_bytes + 36
    for limit in (alone - 1, alone, alone + 1, second - 1, second, second + 1):
        kernel, python = encode_both(records, store, {"max-message-bytes": limit})
        assert kernel == python, limit
    assert encode_both(records, store, {"max-message-bytes": alone - 1})[0][:2] == ("error", op.MessageTooLarge)


@needs_kernel
def test_every_byte_and_ascii_char(store):
    """Each byte alone in VARBINARY (Go quoting vs plain) and BLOB, each char below U+0100 in text."""
    records = [base_record(store, dict(ROW, raw=bytes([b]), data=bytes([b]) * (b % 4), name=chr(b) * 2,
                                       note=chr(b), doc=chr(b))) for b in range(256)]
    kernel, python = encode_both(records, store, {"max-batch-size": 16})
    assert kernel == python
    messages, taken = kernel_direct(records, store)
    assert ("ok", messages) == python
    assert taken == []  # non-plain bytes go through the column's converter (go_quote), not the fallback


@needs_kernel
def test_unicode_names(store):
    t = TableSchema("数据", "t-2\u2028", (Column("ü\x01\"k", "INT", nullable=False, primary_key=True, handle_key=True),
                                        Column("x y\U0001F600", "VARCHAR", length=8)))
    records = row_records(t, [{"ü\x01\"k": 1, "x y\U0001F600": "\x00\x1f\u2028"}] * 3,
                          ["insert", "update", "delete"], store)
    messages, taken = kernel_direct(records, store)
    assert taken == [] and messages == python_path(records, store)


@needs_kernel
def test_records_without_a_store_and_iterators(store):
    records = [base_record(store) for _ in range(3)]
    assert op.OpenProtocolEncoder().encode_records(iter(records), store) == python_path(records, store)
    assert op.OpenProtocolEncoder().encode_records(records) == op.OpenProtocolEncoder().encode(from_records(records))


def test_kernel_off_is_the_python_path(store):
    records = [base_record(store), to_record(ResolvedEvent(9), b"", store)]
    with OPEN_ENCODE.off():
        assert op.OpenProtocolEncoder().encode_records(records, store) == \
            op.OpenProtocolEncoder().encode(from_records(records, store))


# --------------------------------------------------------------------------- references held and released

def _traced_growth(fn, rounds: int) -> int:
    return traced_growth(fn, rounds, warmup=1)


@needs_kernel
def test_no_leak_on_rows_fallbacks_and_errors(store):
    rows = [base_record(store) for _ in range(48)]
    updates = row_records(TABLE, [ROW, ROW], ["insert", "update"], store)
    mixed = rows[:8] + updates + [to_record(ResolvedEvent(5), b"", store), base_record(store, **{"ticdc.row-id": "1"})]
    bad_value = rows[:8] + [base_record(store, dict(ROW, qty=-1))]  # the converter raises inside the kernel
    surrogate = rows[:8] + [base_record(store, dict(ROW, name="\ud800"))]  # HandBack inside the kernel
    enc = op.OpenProtocolEncoder({"max-batch-size": 7})
    kernel = enc._kernel_encoder()
    plan_for, fallback = enc._kernel_callables(store)

    def run():
        kernel.encode(rows, plan_for, fallback)
        kernel.encode(mixed, plan_for, fallback)
        for batch in (bad_value, surrogate):
            try:
                kernel.encode(batch, plan_for, fallback)
            except Exception:  # noqa: BLE001 - the error path is what is measured
                pass
    growth = _traced_growth(run, 300)
    assert growth < 32 * 1024, f"traced memory grew by {growth} bytes over 300 rounds"
