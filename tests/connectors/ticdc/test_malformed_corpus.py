"""Malformed open-protocol messages, each giving its typed error with the offending
position; plus a shared fuzz runner: no decoder lets a library error escape."""

from __future__ import annotations

import datetime
import struct
from decimal import Decimal

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.connectors.ticdc import open_protocol as op
from cdcflow.connectors.ticdc.errors import CodecError, MalformedMessage
from cdcflow.connectors.ticdc.events import RowChange
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

L = struct.Struct(">Q").pack
ROW_KEY = b'{"ts":1,"scm":"s","tbl":"t","t":1}'
ROW_VALUE = b'{"u":{"id":{"t":3,"h":true,"f":10,"v":1}}}'


def key(*docs: bytes, version: int = 1) -> bytes:
    return L(version) + b"".join(L(len(d)) + d for d in docs)


def value(*docs: bytes) -> bytes:
    return b"".join(L(len(d)) + d for d in docs)


def col(t, v, f=64) -> bytes:
    return b'{"u":{"c":' + orjson.dumps({"t": t, "f": f, "v": v}) + b"}}"


# name, key bytes, value bytes, error class, text the position must contain, text the message must contain
CORPUS = [
    ("empty key", b"", b"", MalformedMessage, None, "shorter than the 8-byte"),
    ("short version", b"\x00\x00\x01", b"", MalformedMessage, None, "shorter than"),
    ("version 2", key(ROW_KEY, version=2), value(ROW_VALUE), op.VersionMismatch, None, "version is 2"),
    ("version 0", key(ROW_KEY, version=0), value(ROW_VALUE), op.VersionMismatch, None, "expected 1"),
    ("truncated key length", L(1) + b"\x00\x00\x00", value(ROW_VALUE), MalformedMessage, "key byte 8", "truncated key"),
    ("key length past end", L(1) + L(500) + ROW_KEY, value(ROW_VALUE), MalformedMessage, "key byte 8",
     "length 500 exceeds"),
    ("huge key length", L(1) + b"\xff" * 8 + ROW_KEY, value(ROW_VALUE), MalformedMessage, "key byte 8", "exceeds"),
    ("value length past end", key(ROW_KEY), L(999) + ROW_VALUE, MalformedMessage, "value byte 0", "length 999"),
    ("truncated value length", key(ROW_KEY), b"\x00\x00", MalformedMessage, "value byte 0", "truncated value"),
    ("second value truncated", key(ROW_KEY, ROW_KEY), value(ROW_VALUE) + b"\x00\x00\x00\x00",
     MalformedMessage, f"value byte {8 + len(ROW_VALUE)}", "truncated value"),
    ("fewer values than keys", key(ROW_KEY, ROW_KEY), value(ROW_VALUE), MalformedMessage,
     f"value byte {8 + len(ROW_VALUE)}", "fewer entries"),
    ("more values than keys", key(ROW_KEY), value(ROW_VALUE, ROW_VALUE), MalformedMessage,
     f"value byte {8 + len(ROW_VALUE)}", "more entries"),
    ("key not JSON", key(b"{ts:1"), value(ROW_VALUE), MalformedMessage, "key byte 16", "key JSON is invalid"),
    ("key JSON array", key(b"[1]"), value(ROW_VALUE), MalformedMessage, "key byte 16", "not an object"),
    ("key without ts", key(b'{"t":1}'), value(ROW_VALUE), MalformedMessage, "key byte 16", "'ts'"),
    ("negative ts", key(b'{"ts":-1,"t":1}'), value(ROW_VALUE), MalformedMessage, "key byte 16", "'ts'"),
    ("unknown message type", key(b'{"ts":1,"t":9}'), value(ROW_VALUE), MalformedMessage, "key byte 16",
     "unknown message type"),
    ("value not JSON", key(ROW_KEY), value(b'{"u":'), MalformedMessage, "value byte 8", "value JSON is invalid"),
    ("value not object", key(ROW_KEY), value(b'"x"'), MalformedMessage, "value byte 8", "not an object"),
    ("row without image", key(ROW_KEY), value(b'{"x":{}}'), MalformedMessage, "value byte 8", "none of 'u', 'd'"),
    ("column not object", key(ROW_KEY), value(b'{"u":{"c":1}}'), MalformedMessage, "value byte 8", "not an object"),
    ("type code not int", key(ROW_KEY), value(b'{"u":{"c":{"t":"3","f":0,"v":1}}}'), MalformedMessage,
     "value byte 8", "must be integers"),
    # TiCDC's column type is one byte: other codes pass its decoder (tests/connectors/ticdc/test_open_protocol.py)
    ("type code beyond a byte", key(ROW_KEY), value(col(256, 1)), op.UnknownTypeCode, "value byte 8, column c",
     "MySQL type code 256 is not a byte"),
    ("negative type code", key(ROW_KEY), value(col(-1, "[1]")), op.UnknownTypeCode, "column c", "-1"),
    ("column without v", key(ROW_KEY), value(b'{"u":{"c":{"t":3,"f":0}}}'), MalformedMessage, "u.c", "is not {t, f, v}"),
    ("int as string", key(ROW_KEY), value(col(3, "1")), MalformedMessage, "value byte 8, u.c", "bad value"),
    ("int as float", key(ROW_KEY), value(col(3, 1.5)), MalformedMessage, "u.c", "bad value"),
    ("tinyint out of range", key(ROW_KEY), value(col(1, 300)), MalformedMessage, "u.c", "range"),
    ("unsigned negative", key(ROW_KEY), value(col(8, -1, 0x80)), MalformedMessage, "u.c", "range"),
    ("int beyond 64 bits", key(ROW_KEY), value(b'{"u":{"c":{"t":8,"f":128,"v":18446744073709551616}}}'),
     MalformedMessage, "u.c", "bad value"),
    ("bad decimal", key(ROW_KEY), value(col(246, "1.2.3")), MalformedMessage, "u.c", "bad value"),
    ("decimal NaN", key(ROW_KEY), value(col(246, "NaN")), MalformedMessage, "u.c", "finite"),
    ("bad date", key(ROW_KEY), value(col(10, "2020-13-01")), MalformedMessage, "u.c", "bad value"),
    ("zero date", key(ROW_KEY), value(col(10, "0000-00-00")), MalformedMessage, "u.c", "bad value"),
    ("datetime with zone", key(ROW_KEY), value(col(12, "2020-01-01 00:00:00+08:00")), MalformedMessage, "u.c",
     "bad value"),
    ("time out of range", key(ROW_KEY), value(col(11, "839:00:00")), MalformedMessage, "u.c", "bad value"),
    ("bad base64", key(ROW_KEY), value(col(252, "@@@", 65)), MalformedMessage, "u.c", "bad value"),
    ("text blob not UTF-8", key(ROW_KEY), value(col(252, "/w==", 64)), MalformedMessage, "u.c", "bad value"),
    ("bad Go escape", key(ROW_KEY), value(col(15, "\\q", 65)), MalformedMessage, "u.c", "invalid escape"),
    ("enum not int", key(ROW_KEY), value(col(247, "a")), MalformedMessage, "u.c", "bad value"),
    ("float as string", key(ROW_KEY), value(col(5, "1.0")), MalformedMessage, "u.c", "bad value"),
    ("old image column not in row", key(ROW_KEY),
     value(b'{"u":{"c":{"t":3,"f":64,"v":1}},"p":{"z":{"t":3,"f":64,"v":1}}}'), MalformedMessage, "p.z",
     "does not match"),
    ("resolved with a value", key(b'{"ts":1,"t":3}'), value(b"{}"), MalformedMessage, "value byte 8", "must be empty"),
    ("DDL without query", key(b'{"ts":1,"scm":"s","t":2}'), value(b'{"t":3}'), MalformedMessage, "value byte 8",
     '"q"'),
    ("partition not int", key(b'{"ts":1,"scm":"s","tbl":"t","ptn":"x","t":1}'), value(ROW_VALUE),
     MalformedMessage, "value byte 8", "'ptn'"),
]


@pytest.mark.parametrize("name, k, v, error, position, text", CORPUS, ids=[c[0] for c in CORPUS])
def test_malformed_open_protocol(name, k, v, error, position, text):
    with pytest.raises(error) as info:
        op.OpenProtocolDecoder().decode(k, v)
    e = info.value
    assert e.codec == "open-protocol"
    assert text in str(e)
    if position is None:
        assert e.position in (0, None)
    else:
        assert position in str(e.position)


def test_none_key_is_malformed():
    with pytest.raises(MalformedMessage):
        op.OpenProtocolDecoder().decode(None, b"")


# --------------------------------------------------------------------------- shared fuzz runner

_TABLE = TableSchema("db", "t", (
    Column("id", "BIGINT", unsigned=True, nullable=False, primary_key=True, handle_key=True),
    Column("d", "DECIMAL", precision=10, scale=2), Column("s", "VARCHAR", length=10),
    Column("b", "VARBINARY", length=10, binary=True), Column("t", "DATETIME", fsp=3),
    Column("e", "ENUM", elements=("a", "b")),
))
_ROW = {"id": 2**64 - 1, "d": Decimal("-1.50"), "s": "x,\"y", "b": b"\x00\xff",
        "t": datetime.datetime(2020, 1, 1, 0, 0, 0, 123000), "e": "b"}
VALID: dict[str, bytes] = {}


def _decoders():
    """(name, decode(bytes) callable) for every codec present in the package."""
    out = [("open-protocol/key", lambda b: op.OpenProtocolDecoder().decode(b, value(ROW_VALUE))),
           ("open-protocol/value", lambda b: op.OpenProtocolDecoder().decode(key(ROW_KEY), b))]
    try:
        from cdcflow.connectors.ticdc.canal_json import CanalJsonDecoder
        out.append(("canal-json", lambda b: CanalJsonDecoder().decode(b)))
    except ImportError:
        pass
    try:
        from cdcflow.connectors.ticdc.csv import CsvDecoder
        out.append(("csv", lambda b: CsvDecoder(_TABLE).decode(b)))
    except ImportError:
        pass
    try:
        from cdcflow.connectors.ticdc.avro import AvroDecoder, AvroEncoder, AvroOptions, StoreRegistry
        from cdcflow.schemas import SchemaStore

        registry = StoreRegistry(SchemaStore())
        opts = AvroOptions(enable_tidb_extension=True)
        k, v = AvroEncoder(opts, registry).encode_one(RowChange(_TABLE, "insert", 5, _ROW), "fuzz")
        VALID["avro/value"], VALID["avro/key"] = v, k
        out.append(("avro/value", lambda b: AvroDecoder(opts, registry).decode(k, b)))
        out.append(("avro/key", lambda b: AvroDecoder(opts, registry).decode(b, None)))
    except ImportError:
        pass
    return out


VALID.update({
    "open-protocol/key": key(ROW_KEY),
    "open-protocol/value": value(ROW_VALUE),
    "canal-json": (b'{"id":0,"database":"d","table":"t","pkNames":["id"],"isDdl":false,"type":"INSERT",'
                   b'"es":1,"ts":2,"sql":"","sqlType":{"id":4},"mysqlType":{"id":"int"},"old":null,'
                   b'"data":[{"id":"1"}]}'),
    "csv": b'"I","t","db",18446744073709551615,"-1.50","x,""y","AP8=","2020-01-01 00:00:00.123","b"\r\n',
})
DECODERS = _decoders()


@pytest.mark.parametrize("name, decode", DECODERS, ids=[d[0] for d in DECODERS])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_messages_raise_only_codec_errors(name, decode, data):
    """Flip, cut or insert bytes of a valid message: the decoder returns events or
    raises a CodecError — never IndexError/KeyError/JSON/struct errors."""
    base = bytearray(VALID[name])
    decode(bytes(base))  # the unmutated message is valid
    ops = data.draw(st.lists(st.tuples(st.sampled_from(["flip", "cut", "insert"]),
                                       st.integers(0, max(len(base) - 1, 0)), st.integers(0, 255)),
                             min_size=1, max_size=4))
    for kind, at, byte in ops:
        at = min(at, len(base))
        if kind == "flip" and at < len(base):
            base[at] = byte
        elif kind == "cut":
            del base[at:]
        else:
            base.insert(at, byte)
    try:
        decode(bytes(base))
    except CodecError:
        pass
