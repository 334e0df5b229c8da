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

The standalone path skips message objects: ``to_wire`` writes each record's
bytes (``wire_messages``, compiled, frames them straight into batch messages),
``from_wire`` reads the records of a batch message's bytes (what
``from_proto`` makes of the parsed message).

A payload with one raw and one structured side cannot share one schema
reference (the raw side would be decoded too), so its structured side is
sent as Struct.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from google.protobuf import struct_pb2

from .. import accel
from ..varint import read_uvarint, uvarint as _varint
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
    last: list = [_NO_METADATA, b""]  # the last metadata dict and its block of map entries
    for prepared in _prepared(records, store, structured):
        append(_record_wire(prepared, entries, last))
    return out


def _record_wire(prepared: tuple, entries: dict[tuple[str, str], bytes], last: list) -> bytes:
    """One prepared record's bytes; ``entries`` and ``last`` carry encoded metadata across records."""
    position, operation, metadata, key, before, after = prepared
    parts = [b"\x0a", _varint(len(position)), position] if position else []
    if operation:
        parts += (b"\x10", _varint(operation))
    if metadata is not last[0] and metadata != last[0]:  # most records of a batch: equal
        block_parts = []
        for item in metadata.items():
            entry = entries.get(item)
            if entry is None:
                entry = entries[item] = _map_entry(*item)
            block_parts.append(entry)
        last[:] = metadata, b"".join(block_parts)
    parts.append(last[1])
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
    return b"".join(parts)


def wire_messages(
    records: Iterable[Record], store: SchemaStore | None, structured: str, budget: int, frame_overhead: int,
    first_index: int = 0,
) -> tuple[list[tuple[bytes, list[int]]], dict[int, int]] | None:
    """Records straight to batch messages by the kernel, or None without it (then ``to_wire``).

    The message bytes are the records of ``to_wire`` each framed as field 1, a new message
    whenever the next record's size plus ``frame_overhead`` would take it past ``budget``;
    a record that alone would is left out and named in the second result by its index
    (from ``first_index``) and size. What frames a message is ``cdcflow.standalone.framing``'s.
    """
    if _writer is None:
        return None
    records = records if isinstance(records, list) else list(records)
    return _writer.frame(records, _Preparer(store, structured), _serialize_one, budget, frame_overhead, first_index)


def _serialize_one(prepared: tuple) -> bytes:
    """A record the kernel does not write itself (Struct data, unusual types): Python's bytes or error."""
    return _record_wire(prepared, {}, [_NO_METADATA, b""])


_NO_METADATA = object()  # no metadata encoded yet: the first record's is, whatever it is


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
    prepare = _Preparer(store, structured)
    for r in records:
        yield prepare(r)


class _Preparer:
    """Prepares the records of one batch one by one (see ``_prepared``).

    Records of a batch mostly look alike: a structured record with the same metadata and the
    same data shape as the one before tries the schemas that one got first, which is the choice
    ``SchemaRefs.attach`` makes too (a named schema that fit is tried first again; a derived one
    is the default subject's most recent). Such records share one metadata dict (read only).
    The write kernel calls it for the records it does not write as they are (structured data).
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
        key, before, after = r.key, r.before, r.after
        if not (type(key) is dict or type(before) is dict or type(after) is dict):
            return r.position, r.operation, r.metadata, key, before, after
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
    """The schemas a structured record got, to try first on the next record (see ``_prepared``)."""

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
    refs: list[SchemaRefs | None] = [None]  # looked up once, when the first reference shows up
    codecs: dict[tuple[str, str], Codec] = {}  # this batch's schemas by the metadata's (subject, version)
    return [_from_pb(pb, store, refs, codecs) for pb in pbs]


def _from_pb(pb: PbRecord, store: SchemaStore | None, refs: list, codecs: dict) -> Record:
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
        if refs[0] is None:
            refs[0] = refs_for(store)
        derived = pop_derived(metadata)
        position = pb.position
        if type(key) is bytes:
            key = _decode(refs[0], codecs, metadata, KEY, key, position)
        if type(before) is bytes:
            before = _decode(refs[0], codecs, metadata, PAYLOAD, before, position)
        if type(after) is bytes:
            after = _decode(refs[0], codecs, metadata, PAYLOAD, after, position)
        if derived:
            drop_refs(metadata, derived)
    return Record(pb.position, _OPERATIONS[operation], metadata, key, before, after)


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


# -- reading batch messages straight from their bytes ------------------------------------
#
# Every batch message of the plugin protocols (Destination.Run.Request,
# Source.Run.Response, transform Process.Request) is ``repeated opencdc.v1.Record
# records = 1``. Reading the records' fields through the upb message costs one
# Python object per field access and, above all, a map read per record for
# metadata that is the same on most records of a batch. ``from_wire`` reads
# the bytes itself when a record has the shape every protobuf encoder writes
# (fields in number order, raw data only) and resolves each distinct metadata
# block once per message; any other record (Struct data, unknown or repeated
# fields, odd varints) is parsed by upb, so the answer is always
# ``from_proto`` of the parsed message. The compiled kernel (``_wire.c``) does the
# same reading in C, with the same plans, and hands the other records back here.

_BatchMessage = destination_pb2.Destination.Run.Request  # like every batch message: records = 1
_OTHER = object()  # "not the simple shape": parse this record with upb


#: what a plan says of a part's schema reference (``_MetadataPlan.key_mode``, the kernel reads it)
_REF_NONE, _REF_EMPTY_SUBJECT, _REF_DECODE = 0, 1, 2


class _MetadataPlan:
    """What one distinct metadata block means for the records carrying it."""

    __slots__ = ("metadata", "refs_metadata", "key_ref", "payload_ref", "key_codec", "payload_codec",
                 "key_mode", "payload_mode")

    def __init__(self, metadata: dict[str, str]):
        self.metadata = metadata
        # (subject, version) per part, None without the subject key (an empty subject leaves data raw)
        self.key_ref = self._ref(metadata, KEY)
        self.payload_ref = self._ref(metadata, PAYLOAD)
        self.key_mode = self._mode(self.key_ref)
        self.payload_mode = self._mode(self.payload_ref)
        self.refs_metadata: dict[str, str] | None = None  # the metadata once the references were used
        if self.key_ref is not None or self.payload_ref is not None:
            resolved = dict(metadata)
            drop_refs(resolved, pop_derived(resolved))
            self.refs_metadata = resolved
        self.key_codec: Codec | None = None
        self.payload_codec: Codec | None = None

    @staticmethod
    def _ref(metadata: dict[str, str], part: str) -> tuple[str, str] | None:
        subject_key, version_key = META_KEYS[part]
        if subject_key not in metadata:
            return None
        return metadata[subject_key], metadata.get(version_key, "-1")

    @staticmethod
    def _mode(ref: tuple[str, str] | None) -> int:
        if ref is None:
            return _REF_NONE
        return _REF_DECODE if ref[0] else _REF_EMPTY_SUBJECT


def _data_at(buf: bytes, p: int, end: int) -> Any:
    """The ``raw_data`` of the Data message in ``buf[p:end]``: bytes, None for an empty Data, else _OTHER."""
    if p == end:
        return None
    if buf[p] != 0x0A:
        return _OTHER
    n = buf[p + 1]
    if n < 0x80:
        q = p + 2
    elif buf[p + 2] < 0x80:
        n, q = (n & 0x7F) | buf[p + 2] << 7, p + 3
    else:
        n, q = _read_length(buf, p + 1)
    return buf[q:end] if q + n == end else _OTHER


def from_wire(
    message: bytes, store: SchemaStore | None = None,
    failed: dict[int, tuple[bytes, Exception]] | None = None,
) -> list[Record | None]:
    """The records of a batch message's bytes: ``from_proto`` of the parsed message's ``records``.

    Without ``failed`` the first record that does not convert raises. With it,
    such a record is None in the list and ``failed[index] = (position, error)``.
    Bytes that are not a valid message raise ConversionError either way.
    """
    if _reader is not None and _kernel is not None:
        out = _from_wire_kernel(message, store, failed)
        if out is not None:
            return out
    return _from_wire_python(message, store, failed)


# The compiled reader (``_wire.c``) reads the usual record shape as ``_from_wire_python`` does
# and hands every other record back through ``fallback``; plans and codecs stay Python's.
_kernel = accel.load("cdcflow.convert._wire")
#: exceptions that make the kernel hand a record back (what ``_from_wire_python`` catches per record)
_HAND_BACK = (IndexError, ValueError, ConversionError, SchemaError)
_reader = _kernel.Reader(Record, _OPERATIONS, _HAND_BACK) if _kernel is not None else None
#: the compiled writer (``wire_messages``): plain records as they are, the rest through ``_Preparer``
_writer = _kernel.Writer(Record) if _kernel is not None else None


def _from_wire_kernel(
    message: bytes, store: SchemaStore | None, failed: dict | None
) -> list[Record | None] | None:
    """``from_wire`` by the kernel; None for a message that is not a plain run of records."""
    refs: list[SchemaRefs | None] = [None]
    codecs: dict[tuple[str, str], Codec] = {}
    plans: dict[bytes, _MetadataPlan] = {}

    def new_plan(block: bytes) -> _MetadataPlan:
        plan = plans[block] = _MetadataPlan(_metadata_of(block) if block else {})
        return plan

    def resolve(plan: _MetadataPlan, part: int, position: bytes) -> Any:
        if refs[0] is None:
            refs[0] = refs_for(store)
        if part == 0:
            codec = plan.key_codec = _codec(refs[0], codecs, *plan.key_ref, KEY, position)
        else:
            codec = plan.payload_codec = _codec(refs[0], codecs, *plan.payload_ref, PAYLOAD, position)
        return codec.decoder()

    def fallback(start: int, end: int, index: int) -> Record | None:
        pb = _parse_record(message[start:end])
        return _convert(lambda: _from_pb(pb, store, refs, codecs), pb.position, index, failed)

    try:
        return _reader.read(message, plans, new_plan, resolve, fallback)
    except (IndexError, ValueError) as e:  # from upb in ``fallback``: the message is malformed
        raise ConversionError(f"malformed batch message ({len(message)} bytes): {e}") from None
    except (ConversionError, SchemaError):
        _batch_message(message)  # a malformed message is the error, as upb would have refused it whole
        raise


def _from_wire_python(
    message: bytes, store: SchemaStore | None, failed: dict[int, tuple[bytes, Exception]] | None
) -> list[Record | None]:
    """``from_wire`` in Python: the reference the kernel must match, and the path without it."""
    n = len(message)
    out: list[Record | None] = []
    append = out.append
    refs: list[SchemaRefs | None] = [None]
    codecs: dict[tuple[str, str], Codec] = {}
    plans: dict[bytes, _MetadataPlan] = {}
    operations = _OPERATIONS
    block = b"\xff"  # the last record's metadata block (never a real one: it would start with 0x1A)
    plan = _MetadataPlan({})
    i = 0
    # Lengths are read inline for one and two varint bytes (records up to 16 KiB), else by read_uvarint.
    # Reading past a record's end is harmless: the record then fails ``k != end`` (or IndexError
    # at the message's end) and goes to upb, which has the last word on any odd shape.
    try:
        while i < n:
            if message[i] != 0x0A:  # a field other than records: not what our peers send
                return _from_batch_message(message, store, failed)
            size = message[i + 1]
            if size < 0x80:
                start = i + 2
            elif message[i + 2] < 0x80:
                size, start = (size & 0x7F) | message[i + 2] << 7, i + 3
            else:
                size, start = _read_length(message, i + 1)
            end = i = start + size
            if end > n:
                raise ValueError("a record extends past the end of the message")
            position = b""
            key = before = after = None
            operation = 0
            try:
                k = start
                if message[k] == 0x0A:  # position = 1
                    size = message[k + 1]
                    k += 2
                    if size >= 0x80:
                        size, k = _read_length(message, k - 1)
                    position = message[k:k + size]
                    k += size
                if message[k] == 0x10:  # operation = 2: a valid number is one byte
                    operation = message[k + 1]
                    if operation >= _N_OPERATIONS:
                        raise _Unusual
                    k += 2
                if message.startswith(block, k) and message[k + len(block)] != 0x1A:
                    k += len(block)  # metadata = 3: the same block of map entries as the last record
                else:
                    meta_start = k
                    while message[k] == 0x1A:
                        size = message[k + 1]
                        k += 2 + size if size < 0x80 else _varint_sum(message, k + 1)
                    this_block = message[meta_start:k]
                    this_plan = plans.get(this_block)
                    if this_plan is None:
                        this_plan = plans[this_block] = _MetadataPlan(_metadata_of(this_block) if this_block else {})
                    block, plan = this_block, this_plan  # together: a failed plan leaves the last pair
                if message[k] == 0x22:  # key = 4
                    size = message[k + 1]
                    if size < 0x80 and message[k + 2] == 0x0A and message[k + 3] + 2 == size:
                        key = message[k + 4:k + 2 + size]  # short raw data: the usual key
                        k += 2 + size
                    else:
                        if size < 0x80:
                            p = k + 2
                        elif message[k + 2] < 0x80:
                            size, p = (size & 0x7F) | message[k + 2] << 7, k + 3
                        else:
                            size, p = _read_length(message, k + 1)
                        k = p + size
                        key = _data_at(message, p, k)
                if k < end and message[k] == 0x2A:  # payload = 5: Change{before = 1, after = 2}
                    size = message[k + 1]
                    if size < 0x80:
                        p = k + 2
                    elif message[k + 2] < 0x80:
                        size, p = (size & 0x7F) | message[k + 2] << 7, k + 3
                    else:
                        size, p = _read_length(message, k + 1)
                    k = p + size
                    if p < k and message[p] == 0x0A:
                        size = message[p + 1]
                        if size < 0x80:
                            q = p + 2
                        elif message[p + 2] < 0x80:
                            size, q = (size & 0x7F) | message[p + 2] << 7, p + 3
                        else:
                            size, q = _read_length(message, p + 1)
                        p = q + size
                        before = _data_at(message, q, p)
                    if p < k and message[p] == 0x12:
                        size = message[p + 1]
                        if size < 0x80:
                            q = p + 2
                        elif message[p + 2] < 0x80:
                            size, q = (size & 0x7F) | message[p + 2] << 7, p + 3
                        else:
                            size, q = _read_length(message, p + 1)
                        p = q + size
                        if message[q] == 0x0A and q < p:  # Data{raw_data = 1}, inline: the usual case
                            size = message[q + 1]
                            if size < 0x80:
                                q += 2
                            elif message[q + 2] < 0x80:
                                size, q = (size & 0x7F) | message[q + 2] << 7, q + 3
                            else:
                                size, q = _read_length(message, q + 1)
                            after = message[q:p] if q + size == p else _OTHER
                        else:
                            after = _data_at(message, q, p)
                    if p != k:
                        raise _Unusual
                if k != end or key is _OTHER or before is _OTHER or after is _OTHER:
                    raise _Unusual
                if plan.refs_metadata is not None and (
                    key is not None and plan.key_ref is not None
                    or (before is not None or after is not None) and plan.payload_ref is not None
                ):
                    if refs[0] is None:
                        refs[0] = refs_for(store)
                    metadata = dict(plan.refs_metadata)
                    if key is not None and plan.key_ref is not None and plan.key_ref[0]:
                        codec = plan.key_codec
                        if codec is None:
                            codec = plan.key_codec = _codec(refs[0], codecs, *plan.key_ref, KEY, position)
                        key = codec.decode(key)
                    if plan.payload_ref is not None and plan.payload_ref[0] and (
                        before is not None or after is not None
                    ):
                        codec = plan.payload_codec
                        if codec is None:
                            codec = plan.payload_codec = _codec(
                                refs[0], codecs, *plan.payload_ref, PAYLOAD, position)
                        if before is not None:
                            before = codec.decode(before)
                        if after is not None:
                            after = codec.decode(after)
                else:
                    metadata = dict(plan.metadata)
                append(Record(position, operations[operation], metadata, key, before, after))
            except (_Unusual, IndexError, ValueError, ConversionError, SchemaError):
                # upb and from_proto's conversion: the reference, also for the error and its context
                pb = _parse_record(message[start:end])
                _convert_into(append, lambda: _from_pb(pb, store, refs, codecs), pb.position, len(out), failed)
    except (IndexError, ValueError) as e:
        raise ConversionError(f"malformed batch message ({n} bytes): {e}") from None
    except (ConversionError, SchemaError):
        _batch_message(message)  # a malformed message is the error, as upb would have refused it whole
        raise
    return out


def _read_length(buf: bytes, i: int) -> tuple[int, int]:
    """A length prefix at ``buf[i]`` and the index after it; upb refuses one of over 5 bytes."""
    size, p = read_uvarint(buf, i)
    if p - i > 5:
        raise ValueError("a length prefix longer than 5 bytes")
    return size, p


def _varint_sum(buf: bytes, i: int) -> int:
    """Bytes from the field tag at ``buf[i - 1]`` to the end of its length-delimited value."""
    size, p = _read_length(buf, i)
    return p - i + 1 + size


class _Unusual(Exception):
    """A record not in the simple shape (see ``from_wire``)."""


def _metadata_of(block: bytes) -> dict[str, str]:
    """The metadata map of a block of map-entry fields (upb: duplicate keys, UTF-8 checks, defaults)."""
    pb_metadata = _parse_record(block).metadata
    return {k: pb_metadata[k] for k in pb_metadata}


def _parse_record(data: bytes) -> PbRecord:
    try:
        return PbRecord.FromString(data)
    except Exception as e:  # noqa: BLE001 - upb's DecodeError; the message is malformed
        raise ValueError(f"record does not parse: {e}") from None


def _convert_into(append, convert, position: bytes, index: int, failed: dict | None) -> None:
    append(_convert(convert, position, index, failed))


def _convert(convert, position: bytes, index: int, failed: dict | None) -> Record | None:
    """``convert()``, or None with ``failed[index]`` set when it fails and ``failed`` is given."""
    try:
        return convert()
    except (ConversionError, SchemaError) as e:
        if failed is None:
            raise
        failed[index] = (position, e)
        return None


def _batch_message(message: bytes) -> Any:
    """upb's parse of a batch message; ConversionError when it refuses it."""
    try:
        return _BatchMessage.FromString(message)
    except Exception as e:  # noqa: BLE001 - upb's DecodeError
        raise ConversionError(f"malformed batch message ({len(message)} bytes): {e}") from None


def _from_batch_message(message: bytes, store: SchemaStore | None, failed: dict | None) -> list[Record | None]:
    """A batch message with fields other than its records: upb parses it, ``from_proto`` converts."""
    refs: list[SchemaRefs | None] = [None]
    codecs: dict = {}
    out: list[Record | None] = []
    for pb in _batch_message(message).records:
        _convert_into(out.append, lambda: _from_pb(pb, store, refs, codecs), pb.position, len(out), failed)
    return out


def record_to_proto(record: Record, store: SchemaStore | None = None, structured: str = _AVRO) -> PbRecord:
    return to_proto((record,), store, structured)[0]


def record_from_proto(pb: PbRecord, store: SchemaStore | None = None) -> Record:
    return from_proto((pb,), store)[0]
