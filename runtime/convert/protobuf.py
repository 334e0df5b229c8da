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
_AVRO, _STRUCT = "avro", "struct"


def _encode(codec: Codec, value: Any) -> bytes:
    return codec.encode(value)


def to_proto(
    records: Iterable[Record], store: SchemaStore | None = None, structured: str = _AVRO
) -> list[PbRecord]:
    """Build protobuf records; ``store`` defaults to the process's schema store (only used for dicts)."""
    if structured not in (_AVRO, _STRUCT):
        raise ValueError(f"structured must be 'avro' or 'struct', not {structured!r}")
    refs: SchemaRefs | None = None
    out = []
    append = out.append
    for r in records:
        key, before, after = r.key, r.before, r.after
        pb = PbRecord(position=r.position, operation=r.operation)
        if type(key) is dict or type(before) is dict or type(after) is dict:
            if structured == _AVRO and refs is None:
                refs = refs_for(store)
            _structured(pb, r, refs, structured == _STRUCT)
            append(pb)
            continue
        if r.metadata:
            pb.metadata.update(r.metadata)
        if key is not None:
            pb.key.raw_data = key
        if before is not None:
            pb.payload.before.raw_data = before
        if after is not None:
            pb.payload.after.raw_data = after
        append(pb)
    return out


def _structured(pb: PbRecord, r: Record, refs: SchemaRefs | None, as_struct: bool) -> None:
    metadata = dict(r.metadata)
    derived: list[str] = []
    position = r.position
    # key
    key = r.key
    if type(key) is dict:
        if as_struct:
            pb.key.structured_data.CopyFrom(_struct(key, position, "key"))
        else:
            (data,), subject, version, was_derived = _attach(refs, metadata, KEY, [key], position)
            _set_ref(metadata, KEY, subject, version, was_derived, derived)
            pb.key.raw_data = data
    elif key is not None:
        pb.key.raw_data = key
    # payload
    before, after = r.before, r.after
    dict_sides = [v for v in (before, after) if type(v) is dict]
    raw_side = any(v is not None and type(v) is not dict for v in (before, after))
    if dict_sides and not as_struct and not raw_side:
        encoded, subject, version, was_derived = _attach(refs, metadata, PAYLOAD, dict_sides, position)
        _set_ref(metadata, PAYLOAD, subject, version, was_derived, derived)
        it = iter(encoded)
        if before is not None:
            pb.payload.before.raw_data = next(it)
        if after is not None:
            pb.payload.after.raw_data = next(it)
    else:
        for side, value in (("before", before), ("after", after)):
            if value is None:
                continue
            target = getattr(pb.payload, side)
            if type(value) is dict:
                target.structured_data.CopyFrom(_struct(value, position, f"payload.{side}"))
            else:
                target.raw_data = value
    mark_derived(metadata, derived)
    pb.metadata.update(metadata)


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
    out = []
    append = out.append
    for pb in pbs:
        pb_metadata = pb.metadata
        metadata = {k: pb_metadata[k] for k in pb_metadata}  # faster than dict() on a pb map
        try:
            operation = _OPERATIONS[pb.operation]
        except IndexError:
            raise ConversionError(
                f"record at position {pb.position!r}: unknown operation number {pb.operation}"
            ) from None
        key = _data(pb.key)
        payload = pb.payload
        before = _data(payload.before)
        after = _data(payload.after)
        if (
            type(key) is bytes and META_KEYS[KEY][0] in metadata
            or type(before) is bytes and META_KEYS[PAYLOAD][0] in metadata
            or type(after) is bytes and META_KEYS[PAYLOAD][0] in metadata
        ):
            if refs is None:
                refs = refs_for(store)
            derived = pop_derived(metadata)
            key = _decode(refs, metadata, KEY, key, pb.position)
            before = _decode(refs, metadata, PAYLOAD, before, pb.position)
            after = _decode(refs, metadata, PAYLOAD, after, pb.position)
            drop_refs(metadata, derived)
        append(Record(pb.position, operation, metadata, key, before, after))
    return out


def _data(d: opencdc_pb2.Data) -> Any:
    which = d.WhichOneof("data")
    if which == "raw_data":
        return d.raw_data
    if which == "structured_data":
        return from_struct(d.structured_data)
    return None


def _decode(refs: SchemaRefs, metadata: dict, part: str, value: Any, position: bytes) -> Any:
    if type(value) is not bytes:
        return value
    subject_key, version_key = META_KEYS[part]
    subject = metadata.get(subject_key)
    if not subject:
        return value
    version = metadata.get(version_key, "-1")
    try:
        codec = refs.codec(subject, version)
    except SchemaError as e:
        raise SchemaError(f"record at position {position!r}: {part}: {e}") from None
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
