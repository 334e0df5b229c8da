"""Unsigned base-128 varints for the generated Avro readers and writers (zig-zag longs, lengths),
which read the first bytes inline and call here for the rest. (Protobuf's are upb's.)"""

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


class VarintError(ValueError):
    """A varint longer than 10 bytes or holding more than 64 bits."""


def read_uvarint(buf: bytes, p: int, value: int = 0, shift: int = 0) -> tuple[int, int]:
    """The varint continuing at ``buf[p]`` and the index after it.

    ``value`` holds the bits of the bytes a caller already read inline and ``shift`` their
    count times 7 (both 0 to read from the first byte). IndexError when ``buf`` ends inside it.
    """
    while True:
        b = buf[p]
        p += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value >> 64:
                raise VarintError("varint beyond 64 bits")
            return value, p
        shift += 7
        if shift > 63:
            raise VarintError("varint longer than 10 bytes")
