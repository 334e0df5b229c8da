"""AvroEncoder against an independent oracle: same bytes, same typed errors.

``reference_encode`` below is the encoder as it was before cdcflow had its own Avro writers
(per-column converters, the datum written by ``fastavro.schemaless_writer`` after the Confluent
header, ``_diagnose`` naming the column), kept here as the oracle.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import re
from decimal import Decimal

import pytest
from helpers.avro_registry import store_registry
from fastavro import parse_schema, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.leakcheck import traced_growth
from helpers.tidb_strategies import TIME_MAX_US, tables, values

from cdcflow.connectors.ticdc.avro import encode as avro_encode
from cdcflow.connectors.ticdc.avro import schema as avro_schema
from cdcflow.connectors.ticdc.avro import (
    COMMIT_TS_FIELD, OP_FIELD, PHYSICAL_TIME_FIELD, AvroDecoder, AvroEncoder, AvroOptions, build_schema,
    schema_text, topic_subject,
)
from cdcflow.connectors.ticdc.errors import UnrepresentableValue, UnsupportedEvent
from cdcflow.connectors.ticdc.events import DELETE, INSERT, UPDATE, RowChange
from cdcflow.record import Record
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

CODEC = "avro"
_INT_TYPES = ("TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT")
OPTIONS = st.builds(AvroOptions, st.booleans(), st.sampled_from(["precise", "string"]),
                    st.sampled_from(["long", "string"]))
TOPIC = "db.topic"


# --------------------------------------------------------------------------- the old encoder (oracle)

def _old_datum(columns, table, row, opts):
    """The old generated converter: ints and doubles checked inline, the rest through _encoder_for."""
    coll = table.collection
    names = avro_schema._unique_field_names(columns, table)
    out = {}
    for col, fname in zip(columns, names):
        v = row[col.name]
        if v is not None:
            t = col.type
            if t in _INT_TYPES and not (t == "BIGINT" and col.unsigned) or t == "YEAR":
                lo, hi = (0, 2155) if t == "YEAR" else avro_schema._INT_RANGES[t][1 if col.unsigned else 0]
                if type(v) is not int or not lo <= v <= hi:
                    raise UnrepresentableValue(CODEC, coll, col.name, v, f"not a {t} value")
            elif t == "DOUBLE":
                if type(v) is not float:
                    raise UnrepresentableValue(CODEC, coll, col.name, v, "DOUBLE needs a float")
            else:
                conv = avro_schema._encoder_for(col, opts, coll)
                if conv is not None:
                    v = conv(v)
        out[fname] = v
    return out


def _old_write(schema, schema_id, datum, coll):
    buf = io.BytesIO()
    buf.write(avro_schema._HEADER.pack(0, schema_id))
    try:
        schemaless_writer(buf, parse_schema(schema), datum)
    except Exception as e:  # noqa: BLE001 - as the old encoder did
        raise avro_encode._diagnose(datum, {f["name"]: f for f in schema["fields"]}, coll, e) from None
    return buf.getvalue()


def reference_encode(opts, registry, ev, topic):
    """One RowChange as the fastavro-based encoder wrote it (or the error it raised)."""
    table, row = ev.table, ev.row
    coll = table.collection
    vschema = build_schema(table, opts, key=False)
    kschema = build_schema(table, opts, key=True)
    vid = registry.register(topic_subject(topic, False), schema_text(vschema))
    kid = registry.register(topic_subject(topic, True), schema_text(kschema)) if kschema else None
    if row is None:
        raise UnsupportedEvent(CODEC, coll, "row change without a row")
    if kschema is None and ev.kind == DELETE:
        raise UnsupportedEvent(CODEC, coll, "a DELETE needs a handle key: Avro sends only the key")
    key = None
    if kschema is not None:
        try:
            kd = _old_datum(table.handle_key, table, row, opts)
        except KeyError as e:
            raise UnrepresentableValue(CODEC, coll, e.args[0], None, "handle-key column missing from the row")
        key = _old_write(kschema, kid, kd, coll)
    if ev.kind == DELETE:
        return key, None
    names = {c.name for c in table.columns}
    if row.keys() != names:
        missing, extra = sorted(names - row.keys()), sorted(row.keys() - names)
        name = (missing or extra)[0]
        raise UnrepresentableValue(CODEC, coll, name, row.get(name),
                                   f"row does not match the table's columns (missing {missing}, extra {extra})")
    datum = _old_datum(table.columns, table, row, opts)
    if opts.enable_tidb_extension:
        datum[OP_FIELD] = "c" if ev.kind == INSERT else "u"
        ts = ev.commit_ts
        datum[COMMIT_TS_FIELD] = ts - 2**64 if ts >= 2**63 else ts
        datum[PHYSICAL_TIME_FIELD] = ts >> 18
    return key, _old_write(vschema, vid, datum, coll)


def outcome(fn):
    """The result, or the error as (type, message, column, value repr): what a caller sees."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - compared, not swallowed
        return (type(e).__name__, str(e), getattr(e, "column", None), repr(getattr(e, "value", None)))


def assert_same(opts, ev, topic=TOPIC):
    reg = store_registry()
    new = outcome(lambda: AvroEncoder(opts, reg).encode([ev], topic)[0])
    old = outcome(lambda: reference_encode(opts, reg, ev, topic))
    assert new == old
    return new, reg


# --------------------------------------------------------------------------- strategies

@st.composite
def tables_with_unset_fsp(draw, **kw):
    """Tables whose temporal columns sometimes have no fsp (None): isoformat / format_time decide."""
    table = draw(tables(**kw))
    cols = tuple(dataclasses.replace(c, fsp=None) if c.type in ("DATETIME", "TIMESTAMP", "TIME") and draw(
        st.booleans()) else c for c in table.columns)
    return dataclasses.replace(table, columns=cols)


def column_values(col):
    if col.fsp is None and col.type in ("DATETIME", "TIMESTAMP", "TIME"):
        return values(dataclasses.replace(col, fsp=6))  # fsp None keeps any fraction
    return values(col)


def full_rows(table):
    return st.fixed_dictionaries({c.name: st.one_of(st.none(), column_values(c)) if c.nullable else column_values(c)
                                  for c in table.columns})


# Values a column may not hold (or that only fastavro's lenience accepts): each must give the
# same bytes or the same typed error as before.
ODD_VALUES = [
    None, True, False, 0, -1, 1, 2**31, -(2**31) - 1, 2**63, 2**64, -(2**63) - 1, 2**70, 1.5, 0.1, 1e39, float("nan"),
    float("inf"), -0.0, Decimal("1.005"), Decimal("NaN"), Decimal("-Infinity"), Decimal("-0"), Decimal("1E+70"),
    Decimal("12345678901234567890.5"), "", "x", "\ud800", "a\u2028b\x00\U0001F600", b"", b"\xff", bytearray(b"ab"),
    memoryview(b"ab"), datetime.date(2020, 1, 1), datetime.datetime(2020, 1, 1, 1, 2, 3, 4500),
    datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc), datetime.timedelta(days=-1, microseconds=7),
    datetime.timedelta(hours=30), datetime.timedelta(seconds=5, microseconds=10), [1], {"a": 1},
]


# --------------------------------------------------------------------------- tests

@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.data(), tables_with_unset_fsp(), OPTIONS, st.sampled_from([INSERT, UPDATE, DELETE]),
       st.one_of(st.sampled_from([0, 2**63 - 1, 2**63, 2**64 - 1]), st.integers(0, 2**64 - 1)))
def test_same_bytes_as_fastavro_and_decodes_back(data, table, opts, kind, ts):
    row = data.draw(full_rows(table))
    result, reg = assert_same(opts, RowChange(table, kind, ts, row))
    if type(result) is not tuple or type(result[0]) is str:
        assert kind == DELETE and not table.handle_key  # the only error valid rows give
        return
    key, value = result
    back = AvroDecoder(opts, reg).decode(key, value)
    if kind == DELETE:
        assert value is None and back.kind == DELETE
        assert Record(after=back.row) == Record(after={c.name: row[c.name] for c in table.handle_key})
        return
    assert Record(after=back.row) == Record(after=row)
    if opts.enable_tidb_extension:
        assert (back.kind, back.commit_ts) == (kind, ts)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.data(), tables_with_unset_fsp(handle_key=True), OPTIONS, st.sampled_from([INSERT, DELETE]),
       st.sampled_from(ODD_VALUES))
def test_odd_values_give_the_same_bytes_or_error(data, table, opts, kind, odd):
    row = data.draw(full_rows(table))
    target = data.draw(st.sampled_from(table.columns))
    row[target.name] = odd
    assert_same(opts, RowChange(table, kind, 5, row))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from([None, 0, 1, 2, 3, 4, 5, 6]), st.sampled_from(["DATETIME", "TIMESTAMP", "TIME"]),
       st.data())
def test_temporal_texts_match_format_functions(fsp, kind, data):
    """The inlined DATETIME/TIME texts, near their branch points (one day, ten hours, fractions)."""
    if kind == "TIME":
        us = data.draw(st.one_of(st.integers(-86_400_000_001, 86_400_000_001), st.integers(-TIME_MAX_US, TIME_MAX_US),
                                 st.sampled_from([0, 35_999_999_999, 36_000_000_000, 86_399_999_999, -1])))
        v = datetime.timedelta(microseconds=us)
    else:
        v = data.draw(st.datetimes(datetime.datetime(1, 1, 1), datetime.datetime(9999, 12, 31, 23, 59, 59, 999999)))
    if data.draw(st.booleans()) and fsp is not None:  # mostly values the column holds
        step = 10 ** (6 - fsp)
        v = (datetime.timedelta(microseconds=us // step * step) if kind == "TIME"
             else v.replace(microsecond=v.microsecond // step * step))
    t = TableSchema("s", "t", (Column("k", "INT", nullable=False, primary_key=True, handle_key=True),
                               Column("c", kind, fsp=fsp)))
    assert_same(AvroOptions(), RowChange(t, INSERT, 1, {"k": 1, "c": v}))


@pytest.mark.parametrize("col, value, why", [
    (Column("c", "TINYINT"), 128, "not a TINYINT value"),
    (Column("c", "INT", unsigned=True), -1, "not a INT value"),
    (Column("c", "BIGINT", unsigned=True), 2**64, "not a BIGINT UNSIGNED value"),
    (Column("c", "YEAR"), "2020", "not a YEAR value"),
    (Column("c", "FLOAT"), 0.1, "not exact in a 32-bit FLOAT"),
    (Column("c", "DOUBLE"), Decimal(1), "DOUBLE needs a float"),
    (Column("c", "DECIMAL", precision=5, scale=2), Decimal("1.005"), "more fractional digits"),
    (Column("c", "DECIMAL", precision=5, scale=2), Decimal("1234.5"), "does not fit DECIMAL(5,2)"),
    (Column("c", "DECIMAL", precision=5, scale=2), 1.5, "DECIMAL needs a finite Decimal"),
    (Column("c", "BIT", length=3), 8, "not a BIT(3) value"),
    (Column("c", "ENUM", elements=("a",)), "b", "not a member of the ENUM"),
    (Column("c", "DATE"), datetime.datetime(2020, 1, 1), "DATE needs a datetime.date"),
    (Column("c", "TIME", fsp=2), datetime.timedelta(microseconds=1), "fraction finer than the column's fsp 2"),
    (Column("c", "VARCHAR", length=3), b"bytes", "does not fit the Avro type"),
    (Column("c", "TEXT"), "\ud800", "Avro writer failed"),
    (Column("c", "BLOB", binary=True), "text", "does not fit the Avro type"),
    (Column("c", "INT", nullable=False), None, "does not fit the Avro type"),
], ids=lambda x: getattr(x, "type", repr(x)[:20]))
def test_errors_name_the_column(col, value, why):
    t = TableSchema("db", "t", (Column("k", "INT", nullable=False, primary_key=True, handle_key=True), col))
    with pytest.raises(UnrepresentableValue, match=re.escape(why)) as info:
        AvroEncoder(None, store_registry()).encode([RowChange(t, INSERT, 1, {"k": 1, "c": value})], "t")
    err = info.value
    assert err.table == "db.t"
    assert err.column == ("?" if why == "Avro writer failed" else "c")  # fastavro names no column for it
    assert_same(AvroOptions(), RowChange(t, INSERT, 1, {"k": 1, "c": value}))


def test_fastavro_lenience_kept_for_bytes_like_blobs():
    """fastavro wrote a bytearray into a bytes field (and a memoryview outside a union); the strict
    writer refuses both and the reference writer takes over, so such rows encode exactly as before."""
    t = TableSchema("db", "t", (Column("k", "VARBINARY", length=8, binary=True, nullable=False, primary_key=True,
                                       handle_key=True), Column("b", "BLOB", binary=True)))
    (key, value), = AvroEncoder(None, store_registry()).encode(
        [RowChange(t, INSERT, 1, {"k": memoryview(b"k"), "b": bytearray(b"xy")})], "t")
    assert key[5:] == b"\x02k" and value[5:] == b"\x02k\x02\x04xy"
    assert_same(AvroOptions(), RowChange(t, INSERT, 1, {"k": memoryview(b"k"), "b": memoryview(b"xy")}))


def _wide_table():
    return TableSchema("shop", "wide", (
        Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
        Column("ub", "BIGINT", unsigned=True), Column("f", "FLOAT"), Column("d", "DOUBLE"),
        Column("dec", "DECIMAL", precision=12, scale=3), Column("vc", "VARCHAR", length=64),
        Column("vb", "VARBINARY", length=32, binary=True), Column("dt", "DATE"), Column("dtm", "DATETIME", fsp=3),
        Column("tm", "TIME", fsp=0), Column("b", "BIT", length=8, unsigned=True),
        Column("e", "ENUM", elements=("a", "b")), Column("j", "JSON")))


def _wide_row(i):
    return {"id": i, "ub": 2**63 + i, "f": 1.5, "d": i / 7, "dec": Decimal(f"-{i}.125"), "vc": f"n-{i}\u2028",
            "vb": b"\x00\x01", "dt": datetime.date(2024, 1, 1 + i % 28),
            "dtm": datetime.datetime(2024, 1, 1, 12, 0, 0, (i % 1000) * 1000), "tm": datetime.timedelta(seconds=i),
            "b": i % 256, "e": "ab"[i % 2], "j": None}


def test_no_leak_over_many_batches():
    enc = AvroEncoder(AvroOptions(enable_tidb_extension=True), store_registry())
    events = [RowChange(_wide_table(), UPDATE if i % 2 else INSERT, i << 18, _wide_row(i)) for i in range(100)]
    growth = traced_growth(lambda: enc.encode(events, "t"), rounds=300)
    assert growth < 64 * 1024, growth


def test_no_leak_on_handed_back_and_failing_rows():
    """Odd rows: a bytearray (fastavro writes it) and a lone surrogate (an error)."""
    enc = AvroEncoder(None, store_registry())
    t = _wide_table()
    lenient = [RowChange(t, INSERT, 1, dict(_wide_row(i), vb=bytearray(b"ab"))) for i in range(20)]
    failing = RowChange(t, INSERT, 1, dict(_wide_row(1), vc="\ud800"))

    def run():
        enc.encode(lenient, "t")
        for _ in range(5):
            with pytest.raises(UnrepresentableValue):
                enc.encode([failing], "t")

    growth = traced_growth(run, rounds=300)
    assert growth < 64 * 1024, growth


# --------------------------------------------------------------------------- decode, warm and cold

def _decoded(dec, key, value):
    try:
        ev = dec.decode(key, value, message_ms=1)  # a fixed message time: a first DELETE's estimate
    except Exception as e:  # noqa: BLE001 - compared, not swallowed
        return (type(e).__name__, getattr(e, "position", None))
    row = {k: (type(v).__name__, v.as_tuple() if isinstance(v, Decimal) else v) for k, v in (ev.row or {}).items()}
    return (ev.kind, ev.commit_ts, list(ev.row or ()), row, ev.table.collection, ev.table.columns)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), tables_with_unset_fsp(handle_key=True), OPTIONS, st.sampled_from([INSERT, UPDATE, DELETE]),
       st.integers(0, 2**64 - 1))
def test_decode_warm_equals_cold_also_on_damaged_bytes(data, table, opts, kind, ts):
    """A decoder that has read the message's schemas (its plans cached) against fresh decoders, on
    the message and on damaged copies (a byte changed, cut short, a byte appended): the same rows,
    and for damaged bytes the same typed cdcflow error at the same position."""
    reg = store_registry()
    key, value = AvroEncoder(opts, reg).encode([RowChange(table, kind, ts, data.draw(full_rows(table)))], "t")[0]
    target = value if value is not None else key
    i = data.draw(st.integers(0, len(target) - 1))
    damaged = [target[:i] + bytes([data.draw(st.integers(0, 255))]) + target[i + 1:], target[:i], target + b"\x00"]
    messages = [(key, value)] + [(key, d) if value is not None else (d, None) for d in damaged]
    warm = AvroDecoder(opts, reg)
    warm.decode(key, value)
    expected = [_decoded(AvroDecoder(opts, reg), k, v) for k, v in messages]
    assert [_decoded(warm, k, v) for k, v in messages] == expected
    assert expected[0][0] == (kind if opts.enable_tidb_extension or kind == DELETE else INSERT)
    assert not any(name in ("KeyError", "IndexError", "TypeError", "ValueError")
                   for name, *_ in expected[1:] if isinstance(name, str))
