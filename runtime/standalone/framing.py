"""Record batches as gRPC messages, within the record size limit.

Every batch message of the protocols (``Destination.Run.Request``,
``Source.Run.Response``, ``Process.Request``) holds its records in field 1;
``cdcflow.convert.protobuf.batch_bytes`` writes them (its compiled twin, or upb). A batch
too big for one message is split at record boundaries. A single record over the
limit cannot be sent at all and gets an error instead.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ..convert.protobuf import BatchMessage, batch_bytes, to_batch
from ..pb.connector.v2 import destination_pb2
from ..record import Record
from ..schemas import SchemaStore

_HEADROOM = 64  # message overhead beyond the records
_FRAME = 11  # a record's tag + the longest length prefix, in its batch message
_AckResponse = destination_pb2.Destination.Run.Response
#: records per message at most: upb serializes a message of a few MB several times faster per
#: record than one of tens of MB (its buffer grows by copying), and the peer starts on it sooner
MESSAGE_RECORDS = 2_000


def too_big(size: int, limit: int) -> str:
    return f"record of {size} bytes exceeds the maximum record size of {limit} bytes"


def frame_records(
    records: Sequence[Record], store: SchemaStore | None, structured: str, limit: int, first_index: int = 0
) -> tuple[list[tuple[bytes, list[int]]], dict[int, str]]:
    """The records (``convert.protobuf`` conversion) as batch messages of at most ``limit`` bytes.

    Returns ``(message bytes, indexes of the records in it)`` per message, and an error per
    index of a record too big to send. Indexes start at ``first_index``.
    """
    messages: list[tuple[bytes, list[int]]] = []
    oversized: dict[int, str] = {}
    for start in range(0, len(records), MESSAGE_RECORDS):
        chunk = records[start:start + MESSAGE_RECORDS]
        data = batch_bytes(chunk, store, structured)
        first = first_index + start
        if len(data) <= limit - _HEADROOM:  # the usual case: the records fit one message
            messages.append((data, list(range(first, first + len(chunk)))))
        else:  # rare (records of MBs): upb's messages tell each record's size
            more, too_big_here = _split(to_batch(chunk, store, structured).records, limit, first)
            messages += more
            oversized.update(too_big_here)
    return messages, oversized


def _split(pbs: Sequence, limit: int, first_index: int) -> tuple[list[tuple[bytes, list[int]]], dict[int, str]]:
    """Records too many (or too big) for one message, in messages filled up to the budget."""
    budget = limit - _HEADROOM
    messages: list[tuple[bytes, list[int]]] = []
    oversized: dict[int, str] = {}
    group: list = []
    indexes: list[int] = []
    size = 0
    for i, pb in enumerate(pbs, first_index):
        record_size = pb.ByteSize()
        n = record_size + _FRAME
        if n > budget:
            oversized[i] = too_big(record_size, limit)
            continue
        if size + n > budget and group:
            messages.append((BatchMessage(records=group).SerializeToString(deterministic=True), indexes))
            group, indexes, size = [], [], 0
        group.append(pb)
        indexes.append(i)
        size += n
    if group:
        messages.append((BatchMessage(records=group).SerializeToString(deterministic=True), indexes))
    return messages, oversized


def encode_acks(positions: Sequence[bytes], errors: Mapping[int, str] | None = None) -> bytes:
    """``Destination.Run.Response`` bytes acknowledging ``positions`` in order (``errors`` by index).

    upb writes the same bytes for the same acks (fields in number order, empty ones left
    out): the plugin answers with them, and the host compares what arrives with them to
    check a whole message of acks at once.
    """
    response = _AckResponse()
    add = response.acks.add
    if not errors:
        for position in positions:
            add(position=position)
    else:
        for i, position in enumerate(positions):
            add(position=position, error=errors.get(i) or "")
    return response.SerializeToString()
