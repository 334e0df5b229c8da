"""Interop: cdcflow's TiCDC Avro messages vs confluent_kafka's serializers and Apache Avro.

The registry is confluent_kafka's own in-memory client (``mock://``), so its
AvroSerializer/AvroDeserializer and cdcflow share schema ids without a server.
"""

import datetime
import io
import json
import struct
from decimal import Decimal

import avro.io
import avro.schema
import fastavro
from helpers.avro_registry import ConfluentRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from cdcflow.connectors.ticdc.avro import AvroDecoder, AvroEncoder, AvroOptions, build_schema, schema_text
from cdcflow.connectors.ticdc.events import DELETE, INSERT, UPDATE, RowChange
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

TABLE = TableSchema("shop", "orders", (
    Column("id", "BIGINT", unsigned=True, nullable=False, primary_key=True, handle_key=True),
    Column("qty", "SMALLINT", has_default=True, default=1),
    Column("price", "DECIMAL", precision=10, scale=4),
    Column("flags", "BIT", length=64),
    Column("state", "ENUM", elements=("new", "paid,ok")),
    Column("tags", "SET", elements=("a", "b", "c")),
    Column("note", "VARCHAR", length=20),
    Column("blob", "BLOB", binary=True),
    Column("at", "DATETIME", fsp=6),
    Column("dur", "TIME"),
    Column("ratio", "FLOAT"),
    Column("doc", "JSON"),
))
ROW = {"id": 2**64 - 1, "qty": -5, "price": Decimal("-123456.7890"), "flags": 2**64 - 1, "state": "paid,ok",
       "tags": "a,c", "note": "héllo", "blob": b"\x00\xff", "at": datetime.datetime(2020, 2, 20, 2, 20, 20, 123456),
       "dur": -datetime.timedelta(hours=838, minutes=59, seconds=59), "ratio": 0.5, "doc": '{"k": [1, 2]}'}
# What an Avro-only reader sees: TiCDC's wire values
WIRE = {"id": -1, "qty": -5, "price": Decimal("-123456.7890"), "flags": b"\xff" * 8, "state": "paid,ok",
        "tags": "a,c", "note": "héllo", "blob": b"\x00\xff", "at": "2020-02-20 02:20:20.123456",
        "dur": "-838:59:59", "ratio": 0.5, "doc": '{"k": [1, 2]}'}
EXT = {"_tidb_op": "c", "_tidb_commit_ts": 449_000_000 << 18 | 1, "_tidb_commit_physical_time": 449_000_000}


def encode(reg, opts=AvroOptions(enable_tidb_extension=True), kind=INSERT):
    return AvroEncoder(opts, reg).encode([RowChange(TABLE, kind, EXT["_tidb_commit_ts"], ROW)], "shop_orders")[0]


def test_confluent_deserializer_reads_cdcflow_messages():
    reg = ConfluentRegistry()
    key, value = encode(reg)
    de = AvroDeserializer(reg.client)
    assert de(value, SerializationContext("shop_orders", MessageField.VALUE)) == WIRE | EXT
    assert de(key, SerializationContext("shop_orders", MessageField.KEY)) == {"id": -1}
    assert reg.client.get_subjects() == ["shop_orders-key", "shop_orders-value"] or \
        sorted(reg.client.get_subjects()) == ["shop_orders-key", "shop_orders-value"]


def test_apache_avro_reads_cdcflow_messages():
    reg = ConfluentRegistry()
    key, value = encode(reg, AvroOptions())
    (schema_id,) = struct.unpack(">I", value[1:5])
    schema = avro.schema.parse(reg.schema_by_id(schema_id))
    datum = avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(io.BytesIO(value[5:])))
    assert datum == WIRE
    (key_id,) = struct.unpack(">I", key[1:5])
    kschema = avro.schema.parse(reg.schema_by_id(key_id))
    assert avro.io.DatumReader(kschema).read(avro.io.BinaryDecoder(io.BytesIO(key[5:]))) == {"id": -1}


def test_cdcflow_reads_confluent_serializer_messages():
    """Messages written by confluent_kafka's AvroSerializer with TiCDC-shaped schemas."""
    reg = ConfluentRegistry()
    opts = AvroOptions(enable_tidb_extension=True)
    vtext = schema_text(build_schema(TABLE, opts, key=False))
    ktext = schema_text(build_schema(TABLE, opts, key=True))
    ser_v = AvroSerializer(reg.client, vtext)
    ser_k = AvroSerializer(reg.client, ktext)
    value = ser_v(WIRE | EXT | {"_tidb_op": "u"}, SerializationContext("shop_orders", MessageField.VALUE))
    key = ser_k({"id": -1}, SerializationContext("shop_orders", MessageField.KEY))
    ev = AvroDecoder(opts, reg).decode(key, value)
    assert ev.kind == UPDATE and ev.commit_ts == EXT["_tidb_commit_ts"]
    assert ev.row == ROW
    assert [type(ev.row[c]) for c in ROW] == [type(v) for v in ROW.values()]
    cols = {c.name: c for c in ev.table.columns}
    assert cols["id"].handle_key and cols["id"].unsigned and not cols["id"].nullable
    assert (cols["price"].precision, cols["price"].scale) == (10, 4)
    assert cols["state"].elements == ("new", "paid,ok") and cols["flags"].length == 64
    assert cols["qty"].default == 1 and cols["qty"].has_default
    assert (ev.table.schema, ev.table.table) == ("shop", "orders")
    dele = AvroDecoder(opts, reg).decode(key, None)
    assert dele.kind == DELETE and dele.row == {"id": 2**64 - 1}


def test_cdcflow_reads_fastavro_framed_bytes_string_modes():
    """Confluent framing written by hand (fastavro + header), string decimal/bigint modes."""
    reg = ConfluentRegistry()
    opts = AvroOptions(decimal_handling_mode="string", bigint_unsigned_handling_mode="string")
    vschema = build_schema(TABLE, opts, key=False)
    sid = reg.register("shop_orders-value", schema_text(vschema))
    buf = io.BytesIO()
    buf.write(b"\x00" + struct.pack(">I", sid))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(vschema),
                               WIRE | {"id": str(2**64 - 1), "price": "-123456.7890"})
    ev = AvroDecoder(opts, reg).decode(None, buf.getvalue())
    assert ev.kind == INSERT and ev.row == ROW
    assert json.loads(reg.schema_by_id(sid))["fields"][0]["type"]["type"] == "string"
