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

The standalone path works on batch messages (``repeated opencdc.v1.Record
records = 1``): ``to_batch`` builds one, ``batch_bytes`` serializes one, ``from_wire``
reads the records of one's bytes. upb (protobuf's compiled runtime) does all the wire
work; this module only maps records to and from its messages.

A payload with one raw and one structured side cannot share one schema
reference (the raw side would be decoded too), so its structured side is
sent as Struct.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from google.protobuf import struct_pb2

from .. import accel
from .avro import Codec
from ..errors import ConversionError, SchemaError
from ..pb.connector.v2 import destination_pb2
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
#: Every batch message of the plugin protocols (Destination.Run.Request, Source.Run.Response,
#: transform Process.Request) is ``repeated opencdc.v1.Record records = 1``: one type reads and writes them all.
BatchMessage = destination_pb2.Destination.Run.Request
_OPERATIONS = tuple(Operation)
_N_OPERATIONS = len(_OPERATIONS)
_KEY_SUBJECT = META_KEYS[KEY][0]
_PAYLOAD_SUBJECT = META_KEYS[PAYLOAD][0]
_AVRO, _STRUCT = "avro", "struct"
#: the compiled twin of ``batch_bytes`` and ``from_wire`` (None: upb does it all)
_kernel = accel.load("cdcflow.convert._wire")


def _encode(codec: Codec, value: Any) -> bytes:
    return codec.encode(value)


def to_proto(
    records: Iterable[Record], store: SchemaStore | None = None, structured: str = _AVRO
) -> list[PbRecord]:
    """Build protobuf records; ``store`` defaults to the process's schema store (only used for dicts)."""
    out: list[PbRecord] = []

    def add(**fields: Any) -> PbRecord:
        pb = PbRecord(**fields)
        out.append(pb)
        return pb

    _fill(add, records, _Preparer(store, structured))
    return out


def _fill(add, records: Iterable[Record], prepare: _Preparer) -> None:
    """``add(position=, operation=)`` a message per record, then set its metadata and data."""
    for r in records:
        key, before, after = r.key, r.before, r.after
        if type(key) is dict or type(before) is dict or type(after) is dict:
            position, operation, metadata, key, before, after = prepare(r)
        else:  # raw data goes as it is, without a call per record
            position, operation, metadata = r.position, r.operation, r.metadata
        _set(add(position=position, operation=operation), metadata, key, before, after)


def _set(pb: PbRecord, metadata: Mapping[str, str], key: Any, before: Any, after: Any) -> None:
    pb_metadata = pb.metadata
    for k, v in metadata.items():  # faster than metadata= (upb fills a map through MutableMapping.update)
        pb_metadata[k] = v
    if key is not None:
        if type(key) is bytes:
            pb.key.raw_data = key
        else:
            pb.key.structured_data.CopyFrom(key)
    if before is None and after is None:
        return
    payload = pb.payload
    if before is not None:
        if type(before) is bytes:
            payload.before.raw_data = before
        else:
            payload.before.structured_data.CopyFrom(before)
    if after is not None:
        if type(after) is bytes:
            payload.after.raw_data = after
        else:
            payload.after.structured_data.CopyFrom(after)


def _record_bytes(prepared: tuple) -> bytes:
    """One record's bytes from (position, operation, metadata, key, before, after), by upb: what the
    kernel hands back for values it does not write itself (Structs, odd types), with upb's errors."""
    position, operation, metadata, key, before, after = prepared
    pb = PbRecord(position=position, operation=operation)
    _set(pb, metadata, key, before, after)
    return pb.SerializeToString(deterministic=True)


def to_wire(records: Iterable[Record], store: SchemaStore | None = None, structured: str = _AVRO) -> list[bytes]:
    """Each record's ``opencdc.v1.Record`` bytes (upb serializes ``to_proto``'s messages)."""
    return [pb.SerializeToString(deterministic=True) for pb in to_proto(records, store, structured)]


def to_batch(
    records: Iterable[Record], store: SchemaStore | None = None, structured: str = _AVRO
) -> BatchMessage:
    """A batch message holding the records (field 1 of every batch message of the protocols).

    Why: records built in place in the batch message's repeated field are serialized with
    it in one upb call; ``to_proto``'s messages would be copied into it.
    """
    batch = BatchMessage()
    _fill(batch.records.add, records, _Preparer(store, structured))
    return batch


#: records per piece of ``batch_bytes``: a piece of a few hundred KB is still in the CPU's
#: cache when upb serializes it, one of a few MB is not
PIECE_RECORDS = 200


class _WritePlan:
    """What the kernel's ``batch_bytes`` calls back: ``prepare`` for a record with a dict side,
    ``serialize`` (``_record_bytes``) for values it does not write, and the operation enum."""

    __slots__ = ("prepare", "serialize", "operation_type")

    def __init__(self, prepare: _Preparer):
        self.prepare = prepare
        self.serialize = _record_bytes
        self.operation_type = Operation


def batch_bytes(records: Sequence[Record], store: SchemaStore | None = None, structured: str = _AVRO) -> bytes:
    """The bytes of a batch message holding the records: ``to_batch(records)`` serialized.

    Serialization is deterministic (map entries in upb's sorted order), so the compiled twin
    writes the same bytes. Why in pieces: upb serializes a batch built ``PIECE_RECORDS`` records
    at a time while it is still in the CPU's cache; the pieces' bytes, concatenated, are one batch
    message with all their records (protobuf appends the elements of a repeated field across
    concatenated messages). The pieces share one ``_Preparer``, so the schema choice of a batch
    is made once, as in ``to_batch``.
    """
    prepare = _Preparer(store, structured)
    if _kernel is not None:
        return _kernel.batch_bytes(records, _WritePlan(prepare))
    parts: list[bytes] = []
    for start in range(0, len(records), PIECE_RECORDS):
        piece = BatchMessage()
        _fill(piece.records.add, records[start:start + PIECE_RECORDS], prepare)
        parts.append(piece.SerializeToString(deterministic=True))
    return b"".join(parts)


class _Preparer:
    """Prepares the structured records of one batch one by one: per record (position, operation,
    metadata, key, before, after), each data side None, the bytes for ``raw_data`` or a Struct
    for ``structured_data``; metadata with the schema references.

    Records of a batch mostly look alike: a structured record with the same metadata and the
    same data shape as the one before tries the schemas that one got first, which is the choice
    ``SchemaRefs.attach`` makes too (a named schema that fit is tried first again; a derived one
    is the default subject's most recent). Such records share one metadata dict (read only).
    """

    __slots__ = ("store", "as_struct", "refs", "last")

    def __init__(self, store: SchemaStore | None, structured: str):
        if structured not in (_AVRO, _STRUCT):
            raise ValueError(f"structured must be 'avro' or 'struct', not {structured!r}")
        self.store = store
        self.as_struct = structured == _STRUCT
        self.refs: SchemaRefs | None = None
        self.last: _LastChoice | None = None

    def __call__(self, r: Record) -> tuple:
        """``r`` prepared; ``r`` has a dict on at least one side (``_fill`` passes raw records by)."""
        if self.as_struct:
            return _structured(r, None, True)[0]
        last = self.last
        if last is not None and r.metadata == last.metadata:
            same = last.again(r)
            if same is not None:
                return same
        if self.refs is None:
            self.refs = refs_for(self.store)
        prepared, self.last = _structured(r, self.refs, False)
        return prepared


class _LastChoice:
    """The schemas a structured record got, to try first on the next record (see ``_Preparer``)."""

    __slots__ = ("metadata", "types", "encode_key", "encode_payload", "out_metadata")

    def __init__(self, r: Record, key_codec: Codec | None, payload_codec: Codec | None, out_metadata: dict):
        self.metadata = dict(r.metadata)
        self.types = (type(r.key), type(r.before), type(r.after))
        # the codecs' encoders (fastavro behind the strict check)
        self.encode_key = key_codec.encoder() if key_codec is not None else None
        self.encode_payload = payload_codec.encoder() if payload_codec is not None else None
        self.out_metadata = out_metadata

    def again(self, r: Record) -> tuple | None:
        """``r`` prepared with the same schemas, or None when its data does not fit them."""
        key, before, after = r.key, r.before, r.after
        if (type(key), type(before), type(after)) != self.types:
            return None
        try:
            if self.encode_key is not None:
                key = self.encode_key(key)
            encode = self.encode_payload
            if encode is not None:
                if before is not None:
                    before = encode(before)
                if after is not None:
                    after = encode(after)
        except ConversionError:
            return None  # the full choice below says what fits, or why nothing does
        return r.position, r.operation, self.out_metadata, key, before, after


def _structured(r: Record, refs: SchemaRefs | None, as_struct: bool) -> tuple[tuple, _LastChoice | None]:
    """The prepared record, and what the next record may try first (None: nothing to reuse)."""
    metadata = dict(r.metadata)
    derived: list[str] = []
    position = r.position
    key = r.key
    reusable = not as_struct
    key_codec = payload_codec = None
    if type(key) is dict:
        if as_struct:
            key = _struct(key, position, "key")
        else:
            (key,), subject, version, was_derived = _attach(refs, metadata, KEY, [key], position)
            _set_ref(metadata, KEY, subject, version, was_derived, derived)
            key_codec = refs.codec(subject, version)
            reusable = reusable and _first_choice_again(r.metadata, KEY, was_derived)
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
        payload_codec = refs.codec(subject, version)
        reusable = reusable and _first_choice_again(r.metadata, PAYLOAD, was_derived)
    else:
        reusable = False
        if before_dict:
            before = _struct(before, position, "payload.before")
        if after_dict:
            after = _struct(after, position, "payload.after")
    mark_derived(metadata, derived)
    prepared = (position, r.operation, metadata, key, before, after)
    return prepared, _LastChoice(r, key_codec, payload_codec, metadata) if reusable else None


def _first_choice_again(metadata: Mapping[str, str], part: str, was_derived: bool) -> bool:
    """Would ``SchemaRefs.attach`` try the schema it just picked first for the next record with
    this metadata? Yes for a schema the metadata named, and for a derived one when the metadata
    names none (then the default subject's most recent schema, the one just used, comes first)."""
    subject_key, version_key = META_KEYS[part]
    return not was_derived or (subject_key not in metadata and version_key not in metadata)


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
    finish = _Finisher(store, None)
    return [finish(index, *_fields(pb)) for index, pb in enumerate(pbs)]


def _fields(pb: PbRecord) -> tuple:
    """(position, operation number, metadata, key, before, after) of a message: raw data as bytes,
    structured data as dicts (``_Finisher`` decodes what a schema reference names)."""
    pb_metadata = pb.metadata
    metadata = {k: pb_metadata[k] for k in pb_metadata}  # faster than dict() on a pb map
    # raw data read in line, without a call per side
    key = before = after = None
    if pb.HasField("key"):
        d = pb.key
        key = d.raw_data if d.HasField("raw_data") else _structured_data(d)
    if pb.HasField("payload"):
        payload = pb.payload
        if payload.HasField("before"):
            d = payload.before
            before = d.raw_data if d.HasField("raw_data") else _structured_data(d)
        if payload.HasField("after"):
            d = payload.after
            after = d.raw_data if d.HasField("raw_data") else _structured_data(d)
    return pb.position, pb.operation, metadata, key, before, after


class _Finisher:
    """The last step of reading a record, shared by upb's path and the kernel's: the operation
    checked, raw data a schema reference names decoded (the batch's schemas looked up once), the
    Record built. With ``failed``, a record that does not convert is None, its error kept by index."""

    __slots__ = ("store", "refs", "codecs", "failed")

    def __init__(self, store: SchemaStore | None, failed: dict[int, tuple[bytes, Exception]] | None):
        self.store = store
        self.refs: SchemaRefs | None = None  # looked up once, when the first reference shows up
        self.codecs: dict[tuple[str, str], Codec] = {}  # by the metadata's (subject, version)
        self.failed = failed

    def __call__(self, index: int, position: bytes, operation: int, metadata: dict, key, before, after):
        if self.failed is None:
            return self.record(position, operation, metadata, key, before, after)
        try:
            return self.record(position, operation, metadata, key, before, after)
        except (ConversionError, SchemaError) as e:
            self.failed[index] = (position, e)
            return None

    def record(self, position: bytes, operation: int, metadata: dict, key, before, after) -> Record:
        if not 0 <= operation < _N_OPERATIONS:
            raise ConversionError(f"record at position {position!r}: unknown operation number {operation}")
        if (
            type(key) is bytes and _KEY_SUBJECT in metadata
            or (type(before) is bytes or type(after) is bytes) and _PAYLOAD_SUBJECT in metadata
        ):
            if self.refs is None:
                self.refs = refs_for(self.store)
            refs, codecs = self.refs, self.codecs
            derived = pop_derived(metadata)
            if type(key) is bytes:
                key = _decode(refs, codecs, metadata, KEY, key, position)
            if type(before) is bytes:
                before = _decode(refs, codecs, metadata, PAYLOAD, before, position)
            if type(after) is bytes:
                after = _decode(refs, codecs, metadata, PAYLOAD, after, position)
            if derived:
                drop_refs(metadata, derived)
        return Record(position, _OPERATIONS[operation], metadata, key, before, after)


def _structured_data(d: opencdc_pb2.Data) -> Any:
    """A ``Data`` without raw bytes: its Struct as a dict, or None when neither is set."""
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
    codec = _codec(refs, codecs, subject, version, part, position)
    try:
        return codec.decode(value)
    except ConversionError as e:
        raise ConversionError(
            f"record at position {position!r}: {part} (schema {subject!r} version {version}): {e}"
        ) from None


def _codec(refs: SchemaRefs, codecs: dict, subject: str, version: str, part: str, position: bytes) -> Codec:
    codec = codecs.get((subject, version))
    if codec is None:
        try:
            codec = refs.codec(subject, version)
        except SchemaError as e:
            raise SchemaError(f"record at position {position!r}: {part}: {e}") from None
        codecs[(subject, version)] = codec  # "latest" too: one batch reads one version of it
    return codec


# -- batch messages ---------------------------------------------------------------------

class _Block:
    """A run of metadata map entries as upb reads it, for the kernel: the metadata, and whether
    it names a schema (then the kernel leaves the record to ``_Finisher``)."""

    __slots__ = ("metadata", "decode")

    def __init__(self, metadata: dict[str, str]):
        self.metadata = metadata
        self.decode = _KEY_SUBJECT in metadata or _PAYLOAD_SUBJECT in metadata


def _block_of(block: bytes) -> _Block | None:
    """``block``'s ``_Block``; None when upb refuses it (upb's path then names the error)."""
    try:
        return _Block(_metadata_of(block))
    except ValueError:
        return None


class _ReadPlan:
    """What the kernel's ``from_wire`` builds records with and calls back."""

    __slots__ = ("record_type", "operations", "block_of", "finish")

    def __init__(self, finish: _Finisher):
        self.record_type = Record
        self.operations = _OPERATIONS
        self.block_of = _block_of
        self.finish = finish


def from_wire(
    message: bytes, store: SchemaStore | None = None,
    failed: dict[int, tuple[bytes, Exception]] | None = None,
) -> list[Record | None]:
    """The records of a batch message's bytes: upb parses the message, ``_Finisher`` converts.

    Without ``failed`` the first record that does not convert raises. With it,
    such a record is None in the list and ``failed[index] = (position, error)``.
    Bytes that are not a valid message raise ConversionError either way.
    """
    finish = _Finisher(store, failed)
    if _kernel is not None and type(message) is bytes:  # a buffer of another type: upb reads it
        records = _kernel.from_wire(message, _ReadPlan(finish))
        if records is not None:
            return records
    try:
        pbs = BatchMessage.FromString(message).records
    except Exception as e:  # noqa: BLE001 - upb's DecodeError
        raise ConversionError(f"malformed batch message ({len(message)} bytes): {e}") from None
    return [finish(index, *_fields(pb)) for index, pb in enumerate(pbs)]


def _metadata_of(block: bytes) -> dict[str, str]:
    """The metadata map of a block of ``Record.metadata`` map entries, as upb reads it (duplicate
    keys, UTF-8 checks, defaults); ValueError when upb refuses it. ``jsonform.dumps_wire`` uses it."""
    try:
        pb_metadata = PbRecord.FromString(block).metadata
    except Exception as e:  # noqa: BLE001 - upb's DecodeError
        raise ValueError(f"metadata does not parse: {e}") from None
    return {k: pb_metadata[k] for k in pb_metadata}


def record_to_proto(record: Record, store: SchemaStore | None = None, structured: str = _AVRO) -> PbRecord:
    return to_proto((record,), store, structured)[0]


def record_from_proto(pb: PbRecord, store: SchemaStore | None = None) -> Record:
    return from_proto((pb,), store)[0]
