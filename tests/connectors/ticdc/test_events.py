"""Mapping TiCDC events to OpenCDC records and back (connectors/ticdc/events.py)."""

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers.tidb_strategies import rows, tables

from cdcflow.connectors.ticdc.events import (
    DELETE,
    INSERT,
    UPDATE,
    DDLEvent,
    ResolvedEvent,
    RowChange,
    from_record,
    to_record,
    to_records,
)
from cdcflow.errors import RecordError
from cdcflow.record import META_CONTROL, Operation, Record
from cdcflow.schemas import SchemaStore
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

ORDERS = TableSchema("shop", "orders", (
    Column("id", "BIGINT", unsigned=True, nullable=False, primary_key=True, handle_key=True),
    Column("price", "DECIMAL", precision=10, scale=4),
    Column("note", "VARCHAR", length=20),
))
TS = (1_700_000_000_123 << 18) | 7  # physical ms 1700000000123, logical 7


@pytest.fixture
def store():
    s = SchemaStore()
    yield s
    s.close()


def test_insert_maps_to_create_with_ticdc_metadata(store):
    ev = RowChange(ORDERS, INSERT, TS, {"id": 2**64 - 1, "price": Decimal("1.5000"), "note": None})
    rec = to_record(ev, b"pos-1", store)
    assert rec.operation is Operation.CREATE
    assert rec.position == b"pos-1"
    assert rec.key == {"id": 2**64 - 1}
    assert rec.before is None and rec.after == ev.row
    md = rec.metadata
    assert md["opencdc.collection"] == "shop.orders"
    assert md["opencdc.createdAt"] == "1700000000123000000"
    assert md["ticdc.commit-ts"] == str(TS)
    assert (md["ticdc.schema"], md["ticdc.table"]) == ("shop", "orders")
    assert md["opencdc.payload.schema.subject"] == "shop.orders.payload"
    assert md["opencdc.key.schema.subject"] == "shop.orders.key"
    assert META_CONTROL not in md
    assert from_record(rec, store) == ev


def test_update_keeps_old_image_and_delete_puts_row_in_before(store):
    upd = RowChange(ORDERS, UPDATE, TS, {"id": 1, "price": None, "note": "b"},
                    {"id": 1, "price": None, "note": "a"})
    rec = to_record(upd, b"", store)
    assert rec.operation is Operation.UPDATE and rec.before == upd.old and rec.after == upd.row
    assert from_record(rec, store) == upd
    dele = RowChange(ORDERS, DELETE, TS, {"id": 1})  # key-only delete (Avro, handle-key-only)
    rec = to_record(dele, b"", store)
    assert rec.operation is Operation.DELETE and rec.before == {"id": 1} and rec.after is None
    assert rec.key == {"id": 1}
    assert from_record(rec, store) == dele


def test_extra_and_partition_travel(store):
    part = TableSchema("shop", "orders", ORDERS.columns, partition=42)
    ev = RowChange(part, INSERT, TS, {"id": 1, "price": None, "note": None}, extra={"ticdc.claim-check": "s3://x"})
    rec = to_record(ev, b"", store)
    assert rec.metadata["ticdc.partition"] == "42"
    assert rec.metadata["ticdc.claim-check"] == "s3://x"
    back = from_record(rec, store)
    assert back.table.partition == 42 and back.extra == {"ticdc.claim-check": "s3://x"}
    assert back == ev


def test_ddl_control_record_shape(store):
    ev = DDLEvent("shop", "orders", "ALTER TABLE orders ADD note VARCHAR(20)", TS, 5, ORDERS)
    rec = to_record(ev, b"d", store)
    assert rec.operation is Operation.CREATE
    assert rec.metadata[META_CONTROL] == "ddl"
    assert rec.after == {"query": ev.query, "type": 5, "schema": "shop", "table": "orders", "commitTs": TS}
    assert rec.metadata["ticdc.table.schema.subject"] == "shop.orders.payload"
    assert "opencdc.payload.schema.subject" not in rec.metadata
    assert from_record(rec, store) == ev
    schema_ddl = DDLEvent("shop", "", "CREATE DATABASE shop", TS, 1)
    rec = to_record(schema_ddl, b"", store)
    assert rec.metadata["opencdc.collection"] == "shop"
    assert from_record(rec, store) == schema_ddl


def test_resolved_control_record_shape(store):
    rec = to_record(ResolvedEvent(TS, {"ticdc.partition-id": "3"}), b"r", store)
    assert rec.metadata[META_CONTROL] == "resolved"
    assert rec.after == {"ts": TS}
    assert rec.metadata["ticdc.resolved-ts"] == str(TS)
    assert from_record(rec, store) == ResolvedEvent(TS, {"ticdc.partition-id": "3"})


def test_record_without_schema_gets_an_inferred_table():
    rec = Record(b"", Operation.CREATE, {"opencdc.collection": "db.t", "opencdc.createdAt": "5000000"},
                 {"id": 7}, None, {"id": 7, "big": 2**64 - 1, "d": Decimal("-1.50"), "b": b"", "s": None})
    ev = from_record(rec)
    assert ev.commit_ts == 5 << 18
    cols = {c.name: c for c in ev.table.columns}
    assert cols["id"].handle_key and not cols["id"].nullable
    assert cols["big"].type == "BIGINT" and cols["big"].unsigned
    assert (cols["d"].type, cols["d"].precision, cols["d"].scale) == ("DECIMAL", 3, 2)
    assert cols["b"].type == "LONGBLOB" and cols["b"].binary
    assert cols["s"].type == "LONGTEXT"


def test_bad_records_raise_typed_errors():
    with pytest.raises(RecordError, match="commit-ts"):
        from_record(Record(b"", Operation.CREATE, {"ticdc.commit-ts": "x"}, None, None, {"a": 1}))
    with pytest.raises(RecordError, match="raw bytes"):
        from_record(Record(b"", Operation.CREATE, {"ticdc.commit-ts": "1"}, None, None, b"raw"))
    with pytest.raises(RecordError, match="control"):
        from_record(Record(b"", Operation.CREATE, {META_CONTROL: "nope"}, None, None, {}))
    with pytest.raises(RecordError, match="no TiDB column type"):
        from_record(Record(b"", Operation.CREATE, {"ticdc.commit-ts": "1"}, None, None, {"a": {"x": 1}}))


@settings(max_examples=60, deadline=None)
@given(st.data(), tables(), st.sampled_from([INSERT, UPDATE, DELETE]), st.integers(0, 2**64 - 1))
def test_round_trip_every_type(data, table, kind, ts):
    store = SchemaStore()
    row = data.draw(rows(table))
    old = data.draw(rows(table)) if kind == UPDATE else None
    ev = RowChange(table, kind, ts, row, old)
    rec = to_record(ev, b"p", store)
    assert from_record(rec, store) == ev
    store.close()


# --------------------------------------------------------------------------- records_to_rows
# A batch mapped without RowChanges must give exactly what from_records gives, record by record.

_ROWS_STORE = SchemaStore()  # one store for every example (tables register once per schema)
_OTHER = TableSchema("shop", "other", (Column("k", "INT", nullable=False, primary_key=True, handle_key=True),
                                       Column("v", "VARCHAR", length=8)))


@st.composite
def _mixed_batches(draw):
    """Records of two tables (runs and interleavings), with DDL/resolved control records, a
    partitioned version, and records from_records sends to from_record (no schema reference,
    raw payloads, bad or missing commit ts, dict subclasses, SNAPSHOT, key-only deletes)."""
    table = draw(tables(max_columns=5))
    parted = TableSchema(table.schema, table.table, table.columns, partition=7)
    out = []
    for _ in range(draw(st.integers(1, 12))):
        what = draw(st.sampled_from(["row", "row", "row", "other", "parted", "ddl", "resolved", "noref", "raw",
                                     "badts", "nots", "subclass", "snapshot", "keydelete"]))
        ts = draw(st.integers(0, 2**64 - 1))
        if what == "ddl":
            out.append(to_record(DDLEvent(table.schema, table.table, "ALTER TABLE x", ts, 5, table), b"d",
                                 _ROWS_STORE))
            continue
        if what == "resolved":
            out.append(to_record(ResolvedEvent(ts), b"r", _ROWS_STORE))
            continue
        t = {"other": _OTHER, "parted": parted}.get(what, table)
        kind = draw(st.sampled_from([INSERT, UPDATE, DELETE])) if what != "keydelete" else DELETE
        row = draw(rows(t))
        ev = RowChange(t, kind, ts, row, draw(rows(t)) if kind == UPDATE and draw(st.booleans()) else None)
        rec = to_record(ev, b"p", _ROWS_STORE)
        md = rec.metadata
        if what == "noref":
            for k in [k for k in md if k.startswith("opencdc.payload.schema") or k.startswith("opencdc.key.schema")]:
                del md[k]
        elif what == "raw":
            rec.after = b"raw"
        elif what == "badts":
            md["ticdc.commit-ts"] = "x"
        elif what == "nots":
            del md["ticdc.commit-ts"]
        elif what == "subclass" and rec.after is not None:
            rec.after = type("Row", (dict,), {})(rec.after)
        elif what == "snapshot" and kind == INSERT:
            rec.operation = Operation.SNAPSHOT
        elif what == "keydelete":
            rec.before = None
        if draw(st.booleans()):
            md["ticdc.claim-check-location"] = "s3://x"  # an extra
        out.append(rec)
    return out


def _mapped(record, store):
    try:
        return from_record(record, store)
    except RecordError as e:
        return type(e)


@settings(max_examples=150, deadline=None)
@given(_mixed_batches())
def test_records_to_rows_equals_from_records(batch):
    from cdcflow.connectors.ticdc.events import TableRows, from_records, records_to_rows

    store = _ROWS_STORE
    items = records_to_rows(batch, store)
    seen = []
    for item in items:
        if type(item) is int:
            seen.append(item)
            continue
        assert isinstance(item, TableRows) and len(item) == len(item.kinds) == len(item.rows) == len(item.olds)
        seen += item.indexes
        got = item.events(batch)
        assert got == [_mapped(batch[i], store) for i in item.indexes]
        try:
            assert got == from_records([batch[i] for i in item.indexes], store)
        except RecordError:
            raise AssertionError("a run from_records cannot map came back as TableRows")
        assert {id(ev.table) for ev in got} == {id(item.table)}
    assert seen == list(range(len(batch)))


def test_table_rows_extend_select_take_keep_each_rows_table(store):
    from cdcflow.connectors.ticdc.events import TableRows, records_to_rows

    evs = [RowChange(ORDERS, INSERT, TS + k, {"id": k, "price": None, "note": str(k)}) for k in range(4)]
    twin = TableSchema("shop", "orders", ORDERS.columns, version=9)  # equal columns, another object
    recs = [to_record(e, b"", store) for e in evs] + [to_record(RowChange(twin, DELETE, TS, {"id": 9}), b"", store)]
    first, second = records_to_rows(recs, store)
    assert (first.indexes, second.indexes, second.kinds) == ([0, 1, 2, 3], [4], [DELETE])
    assert first.tables is None
    orders = first.table  # the store's copy of ORDERS
    assert orders == ORDERS and second.table.version == 9 and second.table is not orders
    first.extend(second)
    assert first.table is orders and first.tables[-1] is second.table and len(first) == 5
    assert [e.table for e in first.events(recs)] == [orders] * 4 + [second.table]
    part = first.take([4, 0])
    assert (part.indexes, part.rows) == ([4, 0], [{"id": 9}, evs[0].row])
    assert part.tables[0] is second.table and part.tables[1] is orders
    assert first.select(1, 3).commit_ts == [TS + 1, TS + 2]
    assert TableRows.of_event(evs[2], 7).events(recs[:3] + [recs[2]] * 5)[0] == evs[2]
    assert records_to_rows(recs, None) == [0, 1, 2, 3, 4]


def test_batch_mapping_equals_one_by_one_across_commit_ts_runs_and_tables(store):
    """``to_records`` shares the commit ts texts between rows of one transaction and the
    template between rows of one table: each record must still equal its own ``to_record``."""
    other = TableSchema("shop", "items", (Column("sku", "VARCHAR", length=8, nullable=False, primary_key=True,
                                                 handle_key=True), Column("n", "INT")))
    events = [
        RowChange(ORDERS, INSERT, TS, {"id": 1, "price": Decimal("1.0000"), "note": "a"}),
        RowChange(ORDERS, UPDATE, TS, {"id": 2, "price": Decimal("2.0000"), "note": None},
                  old={"id": 2, "price": Decimal("1.5000"), "note": None}, extra={"ticdc.row-checksum": "9"}),
        RowChange(other, DELETE, TS, {"sku": "x", "n": 3}),
        DDLEvent("shop", "orders", "ALTER TABLE orders ADD c INT", TS + (5 << 18)),
        RowChange(ORDERS, INSERT, TS + (5 << 18), {"id": 3, "price": Decimal("3.0000"), "note": "c"}),
        ResolvedEvent(TS + (6 << 18)),
        RowChange(ORDERS, DELETE, TS + (9 << 18), {"id": 4, "price": None, "note": None}),
    ]
    positions = [b"p%d" % i for i in range(len(events))]
    batch = to_records(events, positions, store)
    one_by_one = [to_record(ev, pos, store) for ev, pos in zip(events, positions)]

    def shape(r):
        return r.position, r.operation, r.metadata, r.key, r.before, r.after

    assert [shape(r) for r in batch] == [shape(r) for r in one_by_one]
    assert [r.metadata.get("ticdc.commit-ts") for r in batch] == [
        str(TS), str(TS), str(TS), str(TS + (5 << 18)), str(TS + (5 << 18)), None, str(TS + (9 << 18))]
    assert batch[4].metadata["opencdc.createdAt"] == str(((TS >> 18) + 5) * 1_000_000)
    assert batch[1].metadata["ticdc.row-checksum"] == "9" and "ticdc.row-checksum" not in batch[0].metadata
    assert batch[2].key == {"sku": "x"} and batch[2].before == {"sku": "x", "n": 3} and batch[2].after is None
