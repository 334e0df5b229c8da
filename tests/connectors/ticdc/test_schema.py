"""The column model travelling as an Avro schema (connectors/ticdc/schema.py)."""

import json
from decimal import Decimal

import fastavro
import pytest
from hypothesis import given, settings
from helpers.tidb_strategies import tables

from cdcflow.connectors.ticdc import schema as ts
from cdcflow.connectors.ticdc.events import INSERT, RowChange, to_record
from cdcflow.errors import SchemaError
from cdcflow.record import Record
from cdcflow.schemas import SchemaStore
from cdcflow.connectors.ticdc.tidb import Column, TableSchema


@settings(max_examples=150, deadline=None)
@given(tables())
def test_table_schema_round_trips(table):
    schema = ts.table_schema_avro(table)
    fastavro.parse_schema(schema)  # a valid Avro schema
    assert ts.table_from_avro(json.dumps(schema)) == table
    key = ts.key_schema_avro(table)
    assert (key is None) == (not table.handle_key)
    if key is not None:
        fastavro.parse_schema(key)
        assert [c.name for c in ts.table_from_avro(key).columns] == [c.name for c in table.handle_key]


def test_field_types_and_column_facts():
    t = TableSchema("db", "t", (
        Column("id", "BIGINT", unsigned=True, nullable=False, handle_key=True, primary_key=True),
        Column("a-b", "DECIMAL", precision=65, scale=30, has_default=True, default=Decimal("0.5")),
        Column("a_b", "BIT", length=3),
        Column("e", "ENUM", elements=("x,y", "z")),
    ))
    s = ts.table_schema_avro(t)
    f = {x.get("cdcflow.name", x["name"]): x for x in s["fields"]}
    assert f["id"]["cdcflow.column"] == {"type": "BIGINT", "unsigned": True, "nullable": False,
                                         "primary_key": True, "handle_key": True}
    assert f["a-b"]["name"] == "a_b" and f["a_b"]["name"] == "a_b_1"  # sanitized, no collision
    assert f["a-b"]["type"][0] == "null" and f["a-b"]["default"] is None
    assert f["a-b"]["type"][1]["logicalType"] == "decimal" and f["a-b"]["type"][1]["scale"] == 30
    assert f["a-b"]["cdcflow.column"]["default"] == {"decimal": "0.5"}
    assert f["e"]["cdcflow.column"]["elements"] == ["x,y", "z"]
    assert s["cdcflow.table"] == {"schema": "db", "table": "t", "version": 0}


def test_sanitize_like_ticdc():
    assert ts.sanitize_name("9db") == "_9db"
    assert ts.sanitize_name("a-b.c") == "a_b_c"
    assert ts.sanitize_name("表") == "_"
    assert ts.sanitize_name("ok_1") == "ok_1"


def test_attach_registers_once_and_table_of_reads_back():
    store = SchemaStore()
    t = TableSchema("db", "t", (Column("id", "INT", nullable=False, handle_key=True),))
    r1 = to_record(RowChange(t, INSERT, 1, {"id": 1}), b"", store)
    # an equal table built anew hits the same subject/version
    t2 = TableSchema("db", "t", (Column("id", "INT", nullable=False, handle_key=True),))
    r2 = to_record(RowChange(t2, INSERT, 1, {"id": 2}), b"", store)
    assert r1.metadata["opencdc.payload.schema.version"] == r2.metadata["opencdc.payload.schema.version"] == "1"
    assert store.versions("db.t.payload") == [1]
    assert ts.table_of(r1, store) == t
    assert ts.table_of(r1, store) is ts.table_of(r2, store)  # cached
    t3 = TableSchema("db", "t", t.columns + (Column("x", "JSON"),), version=9)
    r3 = to_record(RowChange(t3, INSERT, 1, {"id": 2, "x": None}), b"", store)
    assert r3.metadata["opencdc.payload.schema.version"] == "2"
    assert ts.table_of(r3, store) == t3


def test_table_of_without_reference_or_with_foreign_schema():
    store = SchemaStore()
    assert ts.table_of(Record(), store) is None
    v = store.register("x.payload", json.dumps({"type": "record", "name": "x", "fields": []}))
    rec = Record(metadata={"opencdc.payload.schema.subject": "x.payload",
                           "opencdc.payload.schema.version": str(v.version)})
    assert ts.table_of(rec, store) is None
    with pytest.raises(SchemaError):
        ts.table_from_avro({"type": "record", "name": "x", "fields": []})


# ---- TiDB text forms (connectors/ticdc/tidb.py), shared by the text-carrying codecs
import datetime  # noqa: E402

from hypothesis import strategies as st  # noqa: E402
from helpers.tidb_strategies import values  # noqa: E402

from cdcflow.connectors.ticdc import tidb  # noqa: E402


def test_text_forms_golden():
    assert tidb.format_time(datetime.timedelta(hours=-838, minutes=-59, seconds=-59)) == "-838:59:59"
    assert tidb.format_time(datetime.timedelta(hours=838, minutes=59, seconds=59), 6) == "838:59:59.000000"
    assert tidb.format_time(datetime.timedelta(microseconds=-1000), 3) == "-00:00:00.001"
    assert tidb.format_datetime(datetime.datetime(2020, 2, 20, 2, 20, 20, 123000), 3) == "2020-02-20 02:20:20.123"
    # a fraction finer than the column's fsp would be lost: raise, never cut
    with pytest.raises(ValueError):
        tidb.format_time(datetime.timedelta(microseconds=-1500), 3)
    with pytest.raises(ValueError):
        tidb.format_datetime(datetime.datetime(2020, 2, 20, 2, 20, 20, 123456), 3)
    for bad_date in ("2020-W01-1", "20200220", "2020-02-2x"):
        with pytest.raises(ValueError):
            tidb.parse_date(bad_date)
    for bad_dt in ("2020-02-20T02:20:20", "2020-02-20 02:20:20+00:00", "2020-02-20 02:20:20."):
        with pytest.raises(ValueError):
            tidb.parse_datetime(bad_dt)
    assert tidb.format_datetime(datetime.datetime(2020, 2, 20, 2, 20, 20), None) == "2020-02-20 02:20:20"
    assert tidb.format_decimal(Decimal("0E-30")) == "0." + "0" * 30
    assert tidb.parse_time("-838:59:59.5") == -datetime.timedelta(hours=838, minutes=59, seconds=59.5)
    assert tidb.set_to_bitmask("a,c", ("a", "b", "c")) == 5
    assert tidb.bitmask_to_set(5, ("a", "b", "c")) == "a,c"
    assert tidb.enum_index("b", ("a", "b")) == 2 and tidb.enum_name(2, ("a", "b")) == "b"
    for bad in ("12:3:00", "x", "1:00:00.1234567"):
        with pytest.raises(ValueError):
            tidb.parse_time(bad)


@settings(max_examples=200, deadline=None)
@given(st.data(), st.sampled_from(["DATE", "DATETIME", "TIME"]), st.integers(0, 6))
def test_text_forms_round_trip(data, t, fsp):
    v = data.draw(values(Column("c", t, fsp=fsp)))
    if t == "DATE":
        assert tidb.parse_date(tidb.format_date(v)) == v
    elif t == "DATETIME":
        assert tidb.parse_datetime(tidb.format_datetime(v, fsp)) == v
    else:
        assert tidb.parse_time(tidb.format_time(v, fsp)) == v


@settings(max_examples=60, deadline=None)
@given(st.data(), tables())
def test_rows_conform_to_the_travelling_schema(data, table):
    """The lossless record forms reuse the table schema: every valid row encodes and comes back."""
    from helpers.tidb_strategies import rows

    from cdcflow.convert.avro import Codec

    codec = Codec(ts.table_schema_avro(table))
    row = data.draw(rows(table))
    assert Record(after=codec.decode(codec.encode(row))) == Record(after=row)
