"""Records to and from ``opencdc.v1.Record`` — lossless.

Raw data goes to ``raw_data`` unchanged. Structured data (dicts of native
values) is, in the default ``structured="avro"`` mode, encoded as Avro into
``raw_data`` with its schema registered in the SchemaStore and named by the
``opencdc.key.schema.*`` / ``opencdc.payload.schema.*`` metadata (schema choice:
:mod:`cdcflow.convert.schemaref`). ``structured="struct"`` sends
``google.protobuf.Struct`` instead, for peers that need it (lossy, see
:mod:`cdcflow.convert.structpb`).

Reading: ``raw_data`` whose metadata names a schema is decoded back to a dict
(as Conduit's SDK does); ``raw_data`` without one stays bytes;
``structured_data`` becomes a dict via Struct's rules.

A payload with one raw and one structured side cannot share one schema
reference (the raw side would be decoded too), so its structured side is
sent as Struct.
"""

from __future__ import annotations

from typing import Any, Iterable

from google.protobuf import struct_pb2

from ..varint import uvarint as _varint
from ..avro_values import Codec
from ..errors import ConversionError, SchemaError
from ..pb.opencdc.v1 import opencdc_pb2
from ..record import Operation, Record
from ..schemas import SchemaStore
from .schemaref import (
    KEY,
    META_KEYS,
    PAYLOAD,
    SchemaRefs,
    drop_refs,
    in_context,
    mark_derived,
    pop_derived,
    refs_for,
)
from .structpb import from_struct, to_struct

PbRecord = opencdc_pb2.Record
_OPERATIONS = tuple(Operation)
_N_OPERATIONS = len(_OPERATIONS)
_KEY_SUBJECT = META_KEYS[KEY][0]
_PAYLOAD_SUBJECT = META_KEYS[PAYLOAD][0]
_AVRO, _STRUCT = "avro", "struct"


def _encode(codec: Codec, value: Any) -> bytes:
    return codec.encode(value)


def to_proto(
    records: Iterable[Record], store: SchemaStore | None = None, structured: str = _AVRO
) -> list[PbRecord]:
    """Build protobuf records; ``store`` defaults to the process's schema store (only used for dicts)."""
    out = []
    append = out.append
    for position, operation, metadata, key, before, after in _prepared(records, store, structured):
        pb = PbRecord(position=position, operation=operation, metadata=metadata)
        if key is not None:
            if type(key) is bytes:
                pb.key.raw_data = key
            else:
                pb.key.structured_data.CopyFrom(key)
        if before is not None:
            if type(before) is bytes:
                pb.payload.before.raw_data = before
            else:
                pb.payload.before.structured_data.CopyFrom(before)
        if after is not None:
            if type(after) is bytes:
                pb.payload.after.raw_data = after
            else:
                pb.payload.after.structured_data.CopyFrom(after)
        append(pb)
    return out


def to_wire(records: Iterable[Record], store: SchemaStore | None = None, structured: str = _AVRO) -> list[bytes]:
    """``[pb.SerializeToString() for pb in to_proto(...)]`` without building the messages.

    Why: building an ``opencdc.v1.Record`` (its metadata map above all) costs
    more than the conversion itself; the standalone host only needs the bytes.
    The bytes parse to a message equal to ``to_proto``'s (map entries may be in
    another order, which protobuf ignores). Metadata entries repeat across a
    batch, so each distinct one is encoded once per call.
    """
    entries: dict[tuple[str, str], bytes] = {}
    out = []
    append = out.append
    for position, operation, metadata, key, before, after in _prepared(records, store, structured):
        parts = [b"\x0a", _varint(len(position)), position] if position else []
        if operation:
            parts += (b"\x10", _varint(operation))
        for item in metadata.items():
            entry = entries.get(item)
            if entry is None:
                entry = entries[item] = _map_entry(*item)
            parts.append(entry)
        if key is not None:
            data = _data_wire(key)
            parts += (b"\x22", _varint(len(data)), data)
        if before is not None or after is not None:
            change = []
            if before is not None:
                data = _data_wire(before)
                change += (b"\x0a", _varint(len(data)), data)
            if after is not None:
                data = _data_wire(after)
                change += (b"\x12", _varint(len(data)), data)
            change_bytes = b"".join(change)
            parts += (b"\x2a", _varint(len(change_bytes)), change_bytes)
        append(b"".join(parts))
    return out


def _map_entry(key: str, value: str) -> bytes:
    k, v = key.encode(), value.encode()
    entry = b"".join((b"\x0a", _varint(len(k)), k, b"\x12", _varint(len(v)), v))
    return b"".join((b"\x1a", _varint(len(entry)), entry))


def _data_wire(value: bytes | struct_pb2.Struct) -> bytes:
    if type(value) is bytes:
        return b"".join((b"\x0a", _varint(len(value)), value))
    data = value.SerializeToString()
    return b"".join((b"\x12", _varint(len(data)), data))


def _prepared(records: Iterable[Record], store: SchemaStore | None, structured: str):
    """Per record: (position, operation, metadata, key, before, after), each data side None, the
    bytes for ``raw_data`` or a Struct for ``structured_data``; metadata with the schema references."""
    if structured not in (_AVRO, _STRUCT):
        raise ValueError(f"structured must be 'avro' or 'struct', not {structured!r}")
    as_struct = structured == _STRUCT
    refs: SchemaRefs | None = None
    for r in records:
        key, before, after = r.key, r.before, r.after
        if type(key) is dict or type(before) is dict or type(after) is dict:
            if not as_struct and refs is None:
                refs = refs_for(store)
            yield _structured(r, refs, as_struct)
        else:
            yield r.position, r.operation, r.metadata, key, before, after


def _structured(r: Record, refs: SchemaRefs | None, as_struct: bool) -> tuple:
    metadata = dict(r.metadata)
    derived: list[str] = []
    position = r.position
    key = r.key
    if type(key) is dict:
        if as_struct:
            key = _struct(key, position, "key")
        else:
            (key,), subject, version, was_derived = _attach(refs, metadata, KEY, [key], position)
            _set_ref(metadata, KEY, subject, version, was_derived, derived)
    before, after = r.before, r.after
    before_dict, after_dict = type(before) is dict, type(after) is dict
    raw_side = before is not None and not before_dict or after is not None and not after_dict
    if (before_dict or after_dict) and not as_struct and not raw_side:
        dict_sides = [v for v in (before, after) if v is not None]
        encoded, subject, version, was_derived = _attach(refs, metadata, PAYLOAD, dict_sides, position)
        _set_ref(metadata, PAYLOAD, subject, version, was_derived, derived)
        if before is not None:
            before = encoded[0]
        if after is not None:
            after = encoded[-1]
    else:
        if before_dict:
            before = _struct(before, position, "payload.before")
        if after_dict:
            after = _struct(after, position, "payload.after")
    mark_derived(metadata, derived)
    return position, r.operation, metadata, key, before, after


def _attach(refs: SchemaRefs, metadata: dict, part: str, values: list, position: bytes):
    try:
        return refs.attach(metadata, part, values, _encode)
    except ConversionError as e:
        raise in_context(e, f"record at position {position!r}: {part}") from None


def _set_ref(metadata: dict, part: str, subject: str, version: str, was_derived: bool, derived: list[str]) -> None:
    subject_key, version_key = META_KEYS[part]
    metadata[subject_key] = subject
    metadata[version_key] = version
    if was_derived:
        derived.append(part)


def _struct(value: dict, position: bytes, where: str) -> struct_pb2.Struct:
    try:
        return to_struct(value, where)
    except ConversionError as e:
        raise in_context(e, f"record at position {position!r}") from None


def from_proto(pbs: Iterable[PbRecord], store: SchemaStore | None = None) -> list[Record]:
    """Build records; raw data named by a schema reference is decoded with the store's schema."""
    refs: SchemaRefs | None = None
    codecs: dict[tuple[str, str], Codec] = {}  # this batch's schemas by the metadata's (subject, version)
    out = []
    append = out.append
    for pb in pbs:
        pb_metadata = pb.metadata
        metadata = {k: pb_metadata[k] for k in pb_metadata}  # faster than dict() on a pb map
        operation = pb.operation
        if not 0 <= operation < _N_OPERATIONS:
            raise ConversionError(f"record at position {pb.position!r}: unknown operation number {operation}")
        key = _data(pb.key) if pb.HasField("key") else None
        if pb.HasField("payload"):
            payload = pb.payload
            before = _data(payload.before) if payload.HasField("before") else None
            after = _data(payload.after) if payload.HasField("after") else None
        else:
            before = after = None
        if (
            type(key) is bytes and _KEY_SUBJECT in metadata
            or (type(before) is bytes or type(after) is bytes) and _PAYLOAD_SUBJECT in metadata
        ):
            if refs is None:
                refs = refs_for(store)
            derived = pop_derived(metadata)
            position = pb.position
            if type(key) is bytes:
                key = _decode(refs, codecs, metadata, KEY, key, position)
            if type(before) is bytes:
                before = _decode(refs, codecs, metadata, PAYLOAD, before, position)
            if type(after) is bytes:
                after = _decode(refs, codecs, metadata, PAYLOAD, after, position)
            if derived:
                drop_refs(metadata, derived)
        append(Record(pb.position, _OPERATIONS[operation], metadata, key, before, after))
    return out


def _data(d: opencdc_pb2.Data) -> Any:
    if d.HasField("raw_data"):
        return d.raw_data
    if d.HasField("structured_data"):
        return from_struct(d.structured_data)
    return None


def _decode(
    refs: SchemaRefs, codecs: dict[tuple[str, str], Codec], metadata: dict, part: str, value: bytes, position: bytes
) -> Any:
    subject_key, version_key = META_KEYS[part]
    subject = metadata.get(subject_key)
    if not subject:
        return value
    version = metadata.get(version_key, "-1")
    codec = codecs.get((subject, version))
    if codec is None:
        try:
            codec = refs.codec(subject, version)
        except SchemaError as e:
            raise SchemaError(f"record at position {position!r}: {part}: {e}") from None
        codecs[(subject, version)] = codec  # "latest" too: one batch reads one version of it
    try:
        return codec.decode(value)
    except ConversionError as e:
        raise ConversionError(
            f"record at position {position!r}: {part} (schema {subject!r} version {version}): {e}"
        ) from None


def record_to_proto(record: Record, store: SchemaStore | None = None, structured: str = _AVRO) -> PbRecord:
    return to_proto((record,), store, structured)[0]


def record_from_proto(pb: PbRecord, store: SchemaStore | None = None) -> Record:
    return from_proto((pb,), store)[0]
