"""Hypothesis round trips through the TiCDC Avro codec over every TiDB type."""

import dataclasses

from helpers.avro_registry import store_registry
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.tidb_strategies import rows, tables

from cdcflow.connectors.ticdc.avro import AvroDecoder, AvroEncoder, AvroOptions
from cdcflow.connectors.ticdc.events import DELETE, INSERT, UPDATE, RowChange, from_record, to_record
from cdcflow.record import Record
from cdcflow.schemas import SchemaStore

OPTIONS = st.builds(AvroOptions, st.booleans(), st.sampled_from(["precise", "string"]),
                    st.sampled_from(["long", "string"]))


def avro_view(col, opts):
    """The column facts TiCDC's Avro schema carries (docs/codec-avro.md, 'What decoding restores')."""
    t = col.type
    if t in ("TINYINT", "SMALLINT", "MEDIUMINT"):
        t = "MEDIUMINT" if col.unsigned else "INT"
    elif col.binary or t in ("BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB"):
        t = "LONGBLOB"
    elif t in ("CHAR", "VARCHAR", "TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT"):
        t = "LONGTEXT"
    precise = t == "DECIMAL" and opts.decimal_handling_mode == "precise"
    unsigned = col.unsigned if t in ("MEDIUMINT", "INT", "BIGINT") else t == "BIT"
    return (col.name, t, unsigned, col.nullable, col.handle_key,
            col.elements if t in ("ENUM", "SET") else (),
            col.length if t == "BIT" else None,
            (col.precision, col.scale) if precise else (None, None))


def decoded_view(col):
    return (col.name, col.type, col.unsigned, col.nullable, col.handle_key, col.elements, col.length,
            (col.precision, col.scale))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), tables(handle_key=True), OPTIONS, st.sampled_from([INSERT, UPDATE, DELETE]),
       st.integers(0, 2**64 - 1))
def test_events_round_trip(data, table, opts, kind, ts):
    row = data.draw(rows(table))
    reg = store_registry()
    ev = RowChange(table, kind, ts, row)
    key, value = AvroEncoder(opts, reg).encode([ev], "topic.x")[0]
    back = AvroDecoder(opts, reg).decode(key, value)
    if kind == DELETE:
        assert value is None
        keyed = {c.name: row[c.name] for c in table.handle_key}
        assert Record(after=back.row) == Record(after=keyed)
        assert back.kind == DELETE
        return
    assert Record(after=back.row) == Record(after=row)  # type-strict values
    assert list(back.row) == [c.name for c in table.columns]
    assert [decoded_view(c) for c in back.table.columns] == [avro_view(c, opts) for c in table.columns]
    assert (back.table.schema, back.table.table) == (table.schema, table.table)
    if opts.enable_tidb_extension:
        assert (back.kind, back.commit_ts) == (kind, ts)
    else:
        assert back.kind == INSERT


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), tables(handle_key=True))
def test_records_round_trip_via_opencdc(data, table):
    """OpenCDC record -> Avro -> OpenCDC record: operation, key, values unchanged."""
    store = SchemaStore()
    reg = store_registry()
    opts = AvroOptions(enable_tidb_extension=True)
    rs = data.draw(st.lists(rows(table), min_size=1, max_size=4))
    records = [to_record(RowChange(table, INSERT if i % 2 == 0 else UPDATE, 1 << 18 | i, r), b"p%d" % i, store)
               for i, r in enumerate(rs)]
    msgs = AvroEncoder(opts, reg).encode_records(records, "t", store)
    back = AvroDecoder(opts, reg).decode_records(msgs, [r.position for r in records], store)
    for a, b in zip(records, back):
        assert (b.operation, b.position, b.key, b.after) == (a.operation, a.position, a.key, a.after)
        assert Record(after=b.after) == Record(after=a.after)
        ev = from_record(b, store)
        assert dataclasses.replace(ev, table=None) == dataclasses.replace(from_record(a, store), table=None,
                                                                          old=None)
