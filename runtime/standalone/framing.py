"""Record batches as gRPC messages, within the record size limit.

Every batch message of the protocols (``Destination.Run.Request``,
``Source.Run.Response``, ``Process.Request``) holds its records in field 1.
The host writes those messages itself from records serialized one by one: it
skips copying every record into a request message, and a batch too big for
one message is split at record boundaries. A single record over the limit
cannot be sent at all and gets an error instead.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ..convert.protobuf import to_wire, wire_messages
from ..record import Record
from ..schemas import SchemaStore
from ..varint import uvarint as _varint

_FIELD1 = b"\x0a"  # field 1, length-delimited
_HEADROOM = 64  # message overhead beyond the records
_FRAME = 11  # tag + the longest varint length


def too_big(size: int, limit: int) -> str:
    return f"record of {size} bytes exceeds the maximum record size of {limit} bytes"


def frame_batches(
    serialized: Sequence[bytes], limit: int, first_index: int = 0
) -> tuple[list[tuple[bytes, list[int]]], dict[int, str]]:
    """Records serialized one by one (``cdcflow.convert.protobuf.to_wire``) as messages of at most ``limit`` bytes.

    Returns ``(message bytes, indexes of the records in it)`` per message, and
    an error per index of a record too big to send. Indexes start at ``first_index``.
    """
    budget = limit - _HEADROOM
    messages: list[tuple[bytes, list[int]]] = []
    oversized: dict[int, str] = {}
    parts: list[bytes] = []
    indexes: list[int] = []
    size = 0
    for i, data in enumerate(serialized, first_index):
        n = len(data) + _FRAME
        if n > budget:
            oversized[i] = too_big(len(data), limit)
            continue
        if size + n > budget and parts:
            messages.append((b"".join(parts), indexes))
            parts, indexes, size = [], [], 0
        parts += (_FIELD1, _varint(len(data)), data)
        indexes.append(i)
        size += n
    if parts:
        messages.append((b"".join(parts), indexes))
    return messages, oversized


def frame_records(
    records: Sequence[Record], store: SchemaStore | None, structured: str, limit: int, first_index: int = 0
) -> tuple[list[tuple[bytes, list[int]]], dict[int, str]]:
    """``frame_batches(to_wire(records, store, structured), limit, first_index)``.

    The compiled writer frames the records straight into the messages (no bytes object
    per record, no second copy); without it, Python serializes, then frames.
    """
    framed = wire_messages(records, store, structured, limit - _HEADROOM, _FRAME, first_index)
    if framed is None:
        return frame_batches(to_wire(records, store, structured), limit, first_index)
    messages, sizes = framed
    return messages, {i: too_big(size, limit) for i, size in sizes.items()}


def _ack_head(n: int) -> bytes:
    """The bytes of a successful ack before its ``n``-byte position."""
    if not n:
        return _FIELD1 + b"\x00"
    inner = _FIELD1 + _varint(n)
    return _FIELD1 + _varint(len(inner) + n) + inner


_ACK_HEADS: dict[int, bytes] = {}


def encode_acks(positions: Sequence[bytes], errors: Mapping[int, str] | None = None) -> bytes:
    """``Destination.Run.Response`` bytes acknowledging ``positions`` in order (``errors`` by index).

    Canonical encoding (fields in number order, empty fields left out), the bytes
    protobuf writes for the same message: the plugin answers with it, and the
    host compares what arrives with it to check a whole message of acks at once.
    """
    parts: list[bytes] = []
    if not errors:
        heads = _ACK_HEADS
        for position in positions:
            head = heads.get(len(position))
            if head is None:
                head = heads[len(position)] = _ack_head(len(position))
            parts += (head, position)
        return b"".join(parts)
    for i, position in enumerate(positions):
        ack = b"".join((_FIELD1, _varint(len(position)), position)) if position else b""
        error = errors.get(i)
        if error:
            text = error.encode()
            ack = b"".join((ack, b"\x12", _varint(len(text)), text))
        parts += (_FIELD1, _varint(len(ack)), ack)
    return b"".join(parts)
