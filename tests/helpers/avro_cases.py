"""The TiCDC Avro malformed-message corpus, shared by the Avro decoder tests and the kernel harness."""

from __future__ import annotations

import struct

from cdcflow.connectors.ticdc.errors import (
    MalformedMessage,
    UnknownSchema,
)


def malformed_cases(k, v):
    vid = struct.unpack(">I", v[1:5])[0]
    bad_date = v.replace(b"2020-01-01", b"2020-13-01")
    return [
        ("wrong magic byte", k, b"\x01" + v[1:], MalformedMessage, "value byte 0"),
        ("wrong magic in key", b"\x07" + k[1:], v, MalformedMessage, "key byte 0"),
        ("short header", k, v[:3], MalformedMessage, "value byte 3"),
        ("short key", k[:2], v, MalformedMessage, "key byte 2"),
        ("tombstone key with trailing bytes", k + b"\x00", None, MalformedMessage, f"key byte {len(k)}"),
        ("unknown schema id", k, b"\x00" + struct.pack(">I", 9999) + v[5:], UnknownSchema, "value byte 1"),
        ("truncated body", k, v[:-4], MalformedMessage, None),
        ("trailing bytes", k, v + b"\x00\x00", MalformedMessage, f"value byte {len(v)}"),
        ("bad union index", k, v[:5] + b"\x02\x08" + v[7:], MalformedMessage, None),
        ("string overruns", k, v[:5] + b"\x02\x02\x7e" + v[8:], MalformedMessage, None),
        ("bad date text", k, bad_date, MalformedMessage, "value field d"),
        ("value framed with key schema", k, b"\x00" + k[1:5] + v[5:], MalformedMessage, None),
        ("empty message", None, None, MalformedMessage, None),
        ("checkpoint wrong length", None, b"\x02\x00\x01", MalformedMessage, "value byte 3"),
        ("ddl not json", None, b"\x01{not json", MalformedMessage, "value byte 1"),
        ("ddl missing fields", None, b'\x01{"query":"x"}', MalformedMessage, "value byte 1"),
        ("bad op", k, v.replace(b"\x02c", b"\x02x"), MalformedMessage, "value field _tidb_op"),
        ("schema id not a record", k, b"\x00" + struct.pack(">I", vid + 100) + v[5:], UnknownSchema, None),
    ]
