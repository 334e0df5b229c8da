"""TiCDC Avro codec: golden schemas and values from the seeds/reference, options, errors."""

import datetime
import json
import struct
import time
from decimal import Decimal

import pytest
from helpers.avro_registry import store_registry

from cdcflow.connectors.ticdc.avro import (
    AvroDecoder,
    AvroEncoder,
    AvroOptions,
    build_schema,
    schema_text,
    topic_subject,
)
from cdcflow.connectors.ticdc.errors import (
    CodecError,
    UnknownSchema,
    UnrepresentableValue,
    UnsupportedEvent,
)
from cdcflow.connectors.ticdc.events import DELETE, INSERT, UPDATE, DDLEvent, ResolvedEvent, RowChange
from cdcflow.errors import ConfigError
from cdcflow.connectors.ticdc.tidb import Column, TableSchema
from helpers.avro_cases import malformed_cases

KEY = Column("id", "INT", nullable=False, primary_key=True, handle_key=True)


def table(*cols, schema="test", name="t"):
    return TableSchema(schema, name, (KEY,) + cols)


def field(col, opts=AvroOptions()):
    return build_schema(table(col), opts, key=False)["fields"][1]


# ---------------------------------------------------------------- golden column blocks (seed 002)

def test_bit64_block():
    assert field(Column("b", "BIT", length=64, nullable=False)) == {
        "name": "b", "type": {"connect.parameters": {"tidb_type": "BIT", "length": "64"}, "type": "bytes"}}


@pytest.mark.parametrize("t", ["ENUM", "SET"])
def test_enum_set_block(t):
    assert field(Column("e", t, elements=("a", "b", "c"), nullable=False)) == {
        "name": "e", "type": {"connect.parameters": {"tidb_type": t, "allowed": "a,b,c"}, "type": "string"}}


def test_enum_allowed_escapes_commas():
    f = field(Column("e", "ENUM", elements=("a,b", "c"), nullable=False))
    assert f["type"]["connect.parameters"]["allowed"] == "a\\,b,c"


def test_decimal_10_4_block():
    assert field(Column("d", "DECIMAL", precision=10, scale=4, nullable=False)) == {
        "name": "d", "type": {"connect.parameters": {"tidb_type": "DECIMAL"}, "logicalType": "decimal",
                              "precision": 10, "scale": 4, "type": "bytes"}}
    s = field(Column("d", "DECIMAL", precision=10, scale=4, nullable=False),
              AvroOptions(decimal_handling_mode="string"))
    assert s["type"] == {"connect.parameters": {"tidb_type": "DECIMAL"}, "type": "string"}


def test_nullable_unions_both_orders():
    assert field(Column("c", "VARCHAR", length=5)) == {
        "default": None, "name": "c",
        "type": ["null", {"connect.parameters": {"tidb_type": "TEXT"}, "type": "string"}]}
    assert field(Column("c", "INT", has_default=True, default=7)) == {
        "default": 7, "name": "c", "type": [{"connect.parameters": {"tidb_type": "INT"}, "type": "int"}, "null"]}
    assert field(Column("c", "INT", nullable=False, has_default=True, default=7)) == {
        "default": 7, "name": "c", "type": {"connect.parameters": {"tidb_type": "INT"}, "type": "int"}}
    # logical types never get a default (TiCDC: goavro cannot hold one)
    assert field(Column("c", "DECIMAL", precision=5, scale=2, has_default=True, default=Decimal("1.00"))) == {
        "default": None, "name": "c", "type": ["null", {"connect.parameters": {"tidb_type": "DECIMAL"},
                                                        "logicalType": "decimal", "precision": 5, "scale": 2,
                                                        "type": "bytes"}]}


TYPE_TABLE = [  # (column, Avro type, tidb_type) — reference §1 table
    (Column("c", "TINYINT"), "int", "INT"),
    (Column("c", "SMALLINT", unsigned=True), "int", "INT UNSIGNED"),
    (Column("c", "MEDIUMINT"), "int", "INT"),
    (Column("c", "INT"), "int", "INT"),
    (Column("c", "INT", unsigned=True), "long", "INT UNSIGNED"),
    (Column("c", "BIGINT"), "long", "BIGINT"),
    (Column("c", "BIGINT", unsigned=True), "long", "BIGINT UNSIGNED"),
    (Column("c", "FLOAT"), "float", "FLOAT"),
    (Column("c", "DOUBLE"), "double", "DOUBLE"),
    (Column("c", "CHAR", length=3), "string", "TEXT"),
    (Column("c", "LONGTEXT"), "string", "TEXT"),
    (Column("c", "VARBINARY", length=3, binary=True), "bytes", "BLOB"),
    (Column("c", "TINYBLOB", binary=True), "bytes", "BLOB"),
    (Column("c", "JSON"), "string", "JSON"),
    (Column("c", "DATE"), "string", "DATE"),
    (Column("c", "DATETIME", fsp=6), "string", "DATETIME"),
    (Column("c", "TIMESTAMP"), "string", "TIMESTAMP"),
    (Column("c", "TIME"), "string", "TIME"),
    (Column("c", "YEAR"), "int", "YEAR"),
]


@pytest.mark.parametrize("col,avro_type,tidb_type", TYPE_TABLE, ids=[f"{c.type}{c.unsigned}" for c, _, _ in TYPE_TABLE])
def test_type_mapping(col, avro_type, tidb_type):
    block = field(col)["type"][1]
    assert block == {"type": avro_type, "connect.parameters": {"tidb_type": tidb_type}}


def test_bigint_unsigned_string_mode():
    f = field(Column("c", "BIGINT", unsigned=True, nullable=False), AvroOptions(bigint_unsigned_handling_mode="string"))
    assert f["type"]["type"] == "string"


def test_record_names_key_schema_and_extension():
    t = TableSchema("9shop", "order-items", (
        Column("a", "INT"), KEY, Column("k2", "VARCHAR", length=9, nullable=False, handle_key=True)))
    value = build_schema(t, AvroOptions(enable_tidb_extension=True), key=False)
    key = build_schema(t, AvroOptions(enable_tidb_extension=True), key=True)
    assert (value["name"], value["namespace"]) == (key["name"], key["namespace"]) == ("order_items", "default._9shop")
    assert [f["name"] for f in key["fields"]] == ["id", "k2"]  # handle key only, table order, no extension
    assert [f["name"] for f in value["fields"]] == [
        "a", "id", "k2", "_tidb_op", "_tidb_commit_ts", "_tidb_commit_physical_time"]
    assert value["fields"][-3:] == [
        {"default": "", "name": "_tidb_op", "type": "string"},
        {"default": 0, "name": "_tidb_commit_ts", "type": "long"},
        {"default": 0, "name": "_tidb_commit_physical_time", "type": "long"},
    ]
    # compact, Go-ordered text as TiCDC registers it
    text = schema_text(build_schema(table(schema="s"), AvroOptions(), key=True))
    assert text == ('{"type":"record","name":"t","namespace":"default.s","fields":[{"name":"id","type":'
                    '{"type":"int","connect.parameters":{"tidb_type":"INT"}}}]}')


def test_subjects():
    assert topic_subject("tidb.test.t", key=True) == "tidb_test_t-key"
    assert topic_subject("tidb.test.t", key=False) == "tidb_test_t-value"


def test_options_validated():
    with pytest.raises(ConfigError):
        AvroOptions(decimal_handling_mode="exact")
    with pytest.raises(ConfigError):
        AvroOptions.from_config({"avro-bigint-unsigned-handling-mode": "int"})
    with pytest.raises(ConfigError):
        AvroOptions.from_config({"enable-tidb-extension": "yes"})
    o = AvroOptions.from_config({"enable-tidb-extension": "true", "avro-decimal-handling-mode": "string"})
    assert o.enable_tidb_extension and o.decimal_handling_mode == "string"


# ---------------------------------------------------------------- golden values

def body(msg):
    assert msg[0] == 0
    return msg[5:]


def encode_value(col, value, opts=AvroOptions()):
    t = table(col)
    enc = AvroEncoder(opts, store_registry())
    _, v = enc.encode([RowChange(t, INSERT, 1, {"id": 1, col.name: value})], "t")[0]
    return body(v)[1:]  # after id=1 (zigzag 0x02)


def test_value_encodings():
    bit = Column("b", "BIT", length=64, nullable=False)
    assert encode_value(bit, 0) == b"\x02\x00"  # 0 -> one 00 byte
    assert encode_value(bit, 65) == b"\x02A"
    assert encode_value(bit, 2**64 - 1) == b"\x10" + b"\xff" * 8
    dec = Column("d", "DECIMAL", precision=10, scale=4, nullable=False)
    assert encode_value(dec, Decimal("-0.0128")) == b"\x02\x80"  # shortest two's complement
    assert encode_value(dec, Decimal("0.0128")) == b"\x04\x00\x80"
    assert encode_value(dec, Decimal("0.0000")) == b"\x02\x00"
    ubig = Column("u", "BIGINT", unsigned=True, nullable=False)
    assert encode_value(ubig, 2**64 - 1) == b"\x01"  # long -1: wraps as TiCDC does
    assert encode_value(ubig, 2**64 - 1, AvroOptions(bigint_unsigned_handling_mode="string")) == \
        b"\x28" + b"18446744073709551615"
    tm = Column("t", "TIME", fsp=2, nullable=False)
    assert encode_value(tm, -datetime.timedelta(hours=838, minutes=59, seconds=59)) == b"\x1a-838:59:59.00"
    dt = Column("t", "DATETIME", fsp=6, nullable=False)
    assert encode_value(dt, datetime.datetime(2020, 2, 20, 2, 20, 20, 5)) == b"\x34" + b"2020-02-20 02:20:20.000005"
    nul = Column("n", "VARCHAR", length=3)
    assert encode_value(nul, None) == b"\x00"  # union branch 0 = null


def test_tombstone_and_extension_values():
    t = table(Column("v", "VARCHAR", length=5))
    reg = store_registry()
    enc = AvroEncoder(AvroOptions(enable_tidb_extension=True), reg)
    ts = (1_700_000_000_000 << 18) + 3
    ins, upd, dele = enc.encode([RowChange(t, INSERT, ts, {"id": 1, "v": "x"}),
                                 RowChange(t, UPDATE, ts, {"id": 1, "v": "y"}, {"id": 1, "v": "x"}),
                                 RowChange(t, DELETE, ts, {"id": 1, "v": "y"})], "tidb_test_t")
    assert dele[1] is None and dele[0] == ins[0] == upd[0]
    assert reg.store.subjects() == ["tidb_test_t-key", "tidb_test_t-value"]
    dec = AvroDecoder(None, reg)
    e = dec.decode(*ins)
    assert (e.kind, e.commit_ts, e.row) == (INSERT, ts, {"id": 1, "v": "x"})
    e = dec.decode(*upd)
    assert (e.kind, e.old) == (UPDATE, None)  # Avro carries no old image
    e = dec.decode(*dele)
    # a tombstone carries no commit ts: the newest one read before it is its lower bound
    assert (e.kind, e.row, e.commit_ts) == (DELETE, {"id": 1}, ts)
    assert [c.name for c in e.table.columns] == ["id"] and e.table.columns[0].handle_key
    assert not e.ts_estimated
    # before anything bounds it: an estimate, flagged, never 0 -- the message time as a TSO, else now
    fresh = AvroDecoder(None, reg)
    e = fresh.decode(*dele, message_ms=1_700_000_000_123)
    assert (e.commit_ts, e.ts_estimated) == (1_700_000_000_123 << 18, True)
    before = time.time_ns() // 1_000_000
    e = fresh.decode(*dele)
    assert e.ts_estimated and before <= e.commit_ts >> 18 <= time.time_ns() // 1_000_000
    # an estimate bounds nothing: the next delete is estimated again
    assert fresh.decode(*dele, message_ms=1).commit_ts == 1 << 18
    # after a resolved / DDL event at R, a later row has a commit ts above R
    fresh.decode(None, b"\x02" + (ts + 10).to_bytes(8, "big"))
    e = fresh.decode(*dele, message_ms=1)
    assert (e.commit_ts, e.ts_estimated) == (ts + 11, False)
    # a commit ts the caller knows (cdcflow's header on the tombstone) is the delete's own
    e = fresh.decode(*dele, commit_ts=ts + 5, message_ms=1)
    assert (e.commit_ts, e.ts_estimated) == (ts + 5, False)


def test_delete_bound_is_per_table_and_per_partition():
    """TiCDC orders a partition's rows by commit ts per table, not across tables: a delete's lower
    bound is the newest commit ts of its own table on its partition (or one past a DDL / resolved ts)."""
    a, b = table(Column("v", "INT")), table(Column("v", "INT"), name="u")
    reg = store_registry()
    enc = AvroEncoder(AvroOptions(enable_tidb_extension=True), reg)
    (a_ins, a_del) = enc.encode([RowChange(a, INSERT, 100 << 18, {"id": 1, "v": 1}),
                                 RowChange(a, DELETE, 0, {"id": 1, "v": 1})], "tidb_test_t")
    (b_ins,) = enc.encode([RowChange(b, INSERT, 900 << 18, {"id": 1, "v": 1})], "tidb_test_u")
    dec = AvroDecoder(None, reg)
    dec.decode(*a_ins, partition=("t", 0))
    dec.decode(*b_ins, partition=("t", 0))  # another table, later commit ts, same partition
    e = dec.decode(*a_del, partition=("t", 0))
    assert (e.commit_ts, e.ts_estimated) == (100 << 18, False)  # not 900 << 18: above its own
    # another partition read by the same decoder (consistency: transaction) knows nothing yet
    e = dec.decode(*a_del, partition=("t", 1), message_ms=5)
    assert (e.commit_ts, e.ts_estimated) == (5 << 18, True)
    # a resolved ts newer than the table's rows raises the bound past it, on its partition only
    dec.decode(None, b"\x02" + (500 << 18).to_bytes(8, "big"), partition=("t", 0))
    assert dec.decode(*a_del, partition=("t", 0)).commit_ts == (500 << 18) + 1
    assert dec.decode(*a_del, partition=("t", 1), message_ms=5).ts_estimated


def test_without_extension_rows_decode_as_insert_with_fallback_ts():
    t = table(Column("v", "VARCHAR", length=5))
    reg = store_registry()
    k, v = AvroEncoder(None, reg).encode([RowChange(t, UPDATE, 99, {"id": 1, "v": "y"})], "t")[0]
    e = AvroDecoder(None, reg).decode(k, v, commit_ts=5 << 18)
    assert (e.kind, e.commit_ts) == (INSERT, 5 << 18)


def test_ddl_and_checkpoint_messages():
    reg = store_registry()
    quiet = AvroEncoder(AvroOptions(enable_tidb_extension=True), reg)
    ddl = DDLEvent("test", "t", "CREATE TABLE t (id INT PRIMARY KEY)", 77, 3)
    assert quiet.encode([ddl, ResolvedEvent(5)], "t") == [None, None]  # as TiCDC: no message
    loud = AvroEncoder(AvroOptions(enable_tidb_extension=True, enable_watermark=True), reg)
    (k1, v1), (k2, v2) = loud.encode([ddl, ResolvedEvent(2**64 - 1)], "t")
    assert k1 is None and v1[0] == 1 and json.loads(v1[1:]) == {
        "query": ddl.query, "type": 3, "schema": "test", "table": "t", "commitTs": 77}
    assert k2 is None and v2 == b"\x02" + b"\xff" * 8
    dec = AvroDecoder(None, reg)
    assert dec.decode(k1, v1) == ddl
    assert dec.decode(k2, v2) == ResolvedEvent(2**64 - 1)


def test_defaults_round_trip_through_the_schema():
    cols = (Column("i", "INT", has_default=True, default=-3),
            Column("s", "VARCHAR", length=4, nullable=False, has_default=True, default="a<b"),
            Column("d", "DATE", has_default=True, default=datetime.date(2020, 1, 2)),
            Column("b", "VARBINARY", length=3, binary=True, has_default=True, default=b"\x00\xff"),
            Column("f", "DOUBLE", has_default=True, default=1.5))
    t = table(*cols)
    reg = store_registry()
    k, v = AvroEncoder(None, reg).encode([RowChange(t, INSERT, 0, {"id": 1, "i": None, "s": "", "d": None,
                                                                   "b": None, "f": None})], "t")[0]
    assert "\\u003c" in reg.schema_by_id(struct.unpack(">I", v[1:5])[0])  # Go-style escaping of '<'
    got = {c.name: (c.default, c.has_default) for c in AvroDecoder(None, reg).decode(k, v).table.columns}
    assert got == {"id": (None, False), "i": (-3, True), "s": ("a<b", True),
                   "d": (datetime.date(2020, 1, 2), True), "b": (b"\x00\xff", True), "f": (1.5, True)}


# ---------------------------------------------------------------- unrepresentable values

@pytest.mark.parametrize("col,value", [
    (Column("c", "TINYINT"), 300),
    (Column("c", "INT", unsigned=True), -1),
    (Column("c", "BIGINT", unsigned=True), 2**64),
    (Column("c", "BIGINT"), "12"),
    (Column("c", "INT"), True),
    (Column("c", "FLOAT"), 0.1),
    (Column("c", "DOUBLE"), 1),
    (Column("c", "DECIMAL", precision=5, scale=2), Decimal("1.005")),
    (Column("c", "DECIMAL", precision=5, scale=2), Decimal("1234.5")),
    (Column("c", "DECIMAL", precision=5, scale=2), Decimal("NaN")),
    (Column("c", "BIT", length=3), 8),
    (Column("c", "ENUM", elements=("a",)), "b"),
    (Column("c", "DATETIME", fsp=2), datetime.datetime(2020, 1, 1, 0, 0, 0, 1000)),
    (Column("c", "TIME", fsp=0), datetime.timedelta(microseconds=1)),
    (Column("c", "DATE"), "2020-01-01"),
    (Column("c", "VARCHAR", length=3), b"bytes"),
    (Column("c", "BLOB", binary=True), "text"),
], ids=lambda x: getattr(x, "type", repr(x)[:20]))
def test_unrepresentable_values_name_table_column_value(col, value):
    with pytest.raises(UnrepresentableValue) as info:
        encode_value(col, value)
    err = info.value
    assert (err.table, err.column, err.value) == ("test.t", "c", value)
    assert "test.t" in str(err) and "c" in str(err)


def test_row_must_match_columns_and_delete_needs_key():
    t = table(Column("v", "INT"))
    enc = AvroEncoder(None, store_registry())
    with pytest.raises(UnrepresentableValue, match="missing"):
        enc.encode([RowChange(t, INSERT, 0, {"id": 1})], "t")
    with pytest.raises(UnrepresentableValue, match="extra"):
        enc.encode([RowChange(t, INSERT, 0, {"id": 1, "v": 1, "w": 2})], "t")
    keyless = TableSchema("s", "t", (Column("v", "INT"),))
    with pytest.raises(UnsupportedEvent):
        enc.encode([RowChange(keyless, DELETE, 0, {"v": 1})], "t")
    k, v = enc.encode([RowChange(keyless, INSERT, 0, {"v": 1})], "t")[0]
    assert k is None and AvroDecoder(None, enc.registry).decode(k, v).row == {"v": 1}


# ---------------------------------------------------------------- malformed corpus

@pytest.fixture(scope="module")
def corpus():
    reg = store_registry()
    t = table(Column("v", "VARCHAR", length=9), Column("d", "DATE"))
    k, v = AvroEncoder(AvroOptions(enable_tidb_extension=True), reg).encode(
        [RowChange(t, INSERT, 1 << 18, {"id": 1, "v": "hello", "d": datetime.date(2020, 1, 1)})], "t")[0]
    return reg, k, v


def test_malformed_corpus(corpus):
    reg, k, v = corpus
    reg.store.register("other", '"string"')  # an id that is not a record schema
    dec = AvroDecoder(None, reg)
    cases = malformed_cases(k, v)
    # point the "not a record" case at the real id of that schema
    not_record_id = reg.store.get("other", 1).id
    cases[-1] = (cases[-1][0], k, b"\x00" + struct.pack(">I", not_record_id) + v[5:], UnknownSchema, "value byte 1")
    for name, key, value, err, position in cases:
        with pytest.raises(err) as info:
            dec.decode(key, value)
        assert isinstance(info.value, CodecError) and info.value.codec == "avro", name
        if position is not None:
            assert info.value.position == position, (name, info.value.position)
        else:
            assert info.value.position is None or "byte" in str(info.value.position) or "field" in str(
                info.value.position), name
    # the intact message still decodes
    assert dec.decode(k, v).row["v"] == "hello"
