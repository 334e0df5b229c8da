"""Unsigned base-128 varints, shared by Avro (zig-zag longs, lengths) and protobuf wire encoding."""

from __future__ import annotations

TABLE_SIZE = 1 << 14  # every one- and two-byte varint, precomputed


def _encode(z: int) -> bytes:
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


#: the encodings of 0 .. TABLE_SIZE-1
TABLE: tuple[bytes, ...] = tuple(_encode(z) for z in range(TABLE_SIZE))


def uvarint(n: int) -> bytes:
    """The varint encoding of ``n`` (≥ 0)."""
    return TABLE[n] if n < TABLE_SIZE else _encode(n)
