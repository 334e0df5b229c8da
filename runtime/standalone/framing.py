"""Record batches as gRPC messages, within the record size limit.

Every batch message of the protocols (``Destination.Run.Request``,
``Source.Run.Response``, ``Process.Request``) holds its records in field 1.
The host writes those messages itself from records serialized one by one: it
skips copying every record into a request message, and a batch too big for
one message is split at record boundaries. A single record over the limit
cannot be sent at all and gets an error instead.
"""

from __future__ import annotations

from typing import Sequence

from ..pb.opencdc.v1 import opencdc_pb2
from ..varint import uvarint as _varint

_FIELD1 = b"\x0a"  # field 1, length-delimited
_HEADROOM = 64  # message overhead beyond the records
_FRAME = 11  # tag + the longest varint length


def too_big(size: int, limit: int) -> str:
    return f"record of {size} bytes exceeds the maximum record size of {limit} bytes"


def encode_batches(
    pbs: Sequence[opencdc_pb2.Record], limit: int, first_index: int = 0
) -> tuple[list[tuple[bytes, list[int]]], dict[int, str]]:
    """Serialize ``pbs`` into messages of at most ``limit`` bytes.

    Returns ``(message bytes, indexes of the records in it)`` per message, and
    an error per index of a record too big to send. Indexes start at ``first_index``.
    """
    return frame_batches([pb.SerializeToString() for pb in pbs], limit, first_index)


def frame_batches(
    serialized: Sequence[bytes], limit: int, first_index: int = 0
) -> tuple[list[tuple[bytes, list[int]]], dict[int, str]]:
    """:func:`encode_batches` for records already serialized (``cdcflow.convert.protobuf.to_wire``)."""
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


def split_ranges(pbs: Sequence[opencdc_pb2.Record], limit: int) -> tuple[list[tuple[int, int]], dict[int, str]]:
    """Index ranges of ``pbs`` that fit one message each (for servers building messages)."""
    budget = limit - _HEADROOM
    ranges: list[tuple[int, int]] = []
    oversized: dict[int, str] = {}
    start, size = 0, 0
    for i, pb in enumerate(pbs):
        n = pb.ByteSize() + _FRAME
        if n > budget:
            if start < i:
                ranges.append((start, i))
            oversized[i] = too_big(n - _FRAME, limit)
            start, size = i + 1, 0
            continue
        if size + n > budget and start < i:
            ranges.append((start, i))
            start, size = i, 0
        size += n
    if start < len(pbs):
        ranges.append((start, len(pbs)))
    return ranges, oversized
