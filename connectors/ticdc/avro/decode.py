"""TiCDC Avro decoding: Confluent-framed messages -> events.

Per schema id the decoder parses the schema and rebuilds the column model once
(``schema._tidb_column``); fastavro reads each body, then the columns that need it are
converted to native values (unsigned BIGINT, DECIMAL bytes, temporal texts, BIT).

That read (``AvroDecoder._read``) has one compiled twin, ``_decode.c`` (``accel`` kernel
``cdcflow.connectors.ticdc.avro._decode``): per schema a ``KernelPlan`` says how each field is
read and converted, and the kernel does both in one pass over the bytes. fastavro stays the
reference: a message the kernel does not decide (anything malformed, see ``_decode.c``) is read
again here, which returns the row or raises the typed error; a schema the plan does not cover
(renamed columns, types other than TiCDC's flat primitives) is read here only.
"""

from __future__ import annotations

import dataclasses
import io
import json
import time
from typing import Any, Callable, Iterable, NamedTuple

from fastavro import parse_schema, schemaless_reader

from cdcflow import accel
from cdcflow.errors import InfrastructureError, SchemaError
from cdcflow.record import Record
from cdcflow.connectors.ticdc.tidb import TableSchema, parse_datetime, parse_time

from ..errors import MalformedMessage, UnknownSchema
from ..events import DELETE, INSERT, UPDATE, DDLEvent, Event, ResolvedEvent, RowChange, to_records
from .schema import (
    _2_64,
    _HEADER,
    _U64,
    CHECKPOINT_BYTE,
    CHECKSUM_FIELD,
    CHECKSUM_VERSION_FIELD,
    CODEC,
    COMMIT_TS_FIELD,
    CORRUPTED_FIELD,
    DDL_BYTE,
    EXTRA_CHECKSUM,
    EXTRA_CHECKSUM_VERSION,
    EXTRA_CORRUPTED,
    MAGIC,
    NAME_PROP,
    OP_FIELD,
    PHYSICAL_TIME_FIELD,
    TABLE_PROP,
    AvroOptions,
    _bits_to_int,
    _decimal_text,
    _int_text,
    _parse_date_once,
    _strip_decimal_logical,
    _tidb_column,
    _unwrap_u64,
)

#: the compiled twin of ``AvroDecoder._read`` (None: fastavro only)
_kernel = accel.load("cdcflow.connectors.ticdc.avro._decode")


@dataclasses.dataclass
class _DecodePlan:
    schema: Any  # parsed
    table: TableSchema
    convs: list[tuple[str, str, Callable[[Any], Any] | None]]  # (avro name, column name, conv)
    renames: bool
    extension: bool
    extra_fields: tuple[str, ...]  # _tidb_* fields beyond the three (checksums)
    in_place: tuple[tuple[str, Callable[[Any], Any]], ...] = ()  # (name, conv) when nothing is renamed
    kernel: Any = None  # the compiled reader (``_decode.Reader`` of a KernelPlan), None: fastavro only


class KernelField(NamedTuple):
    """How the compiled reader reads and converts one Avro field (``_decode.c``)."""

    name: str  #: the row key: the Avro field name (plans with renamed columns have no kernel)
    avro: int  #: the primitive read, ``_decode.AVRO_*`` (int and long read alike)
    null_branch: int  #: -1 when the field is not a union, else the index of its null branch (0 / 1)
    conv: int  #: ``_decode.CONV_*``: none, the C twin of ``call``, or CONV_CALL (call ``call``)
    call: Callable[[Any], Any] | None  #: the reference converter (schema._tidb_column), None if none
    precision: int  #: DECIMAL bytes only (else 0)
    scale: int  #: DECIMAL bytes only (else 0)


class KernelPlan(NamedTuple):
    """One schema's fields in order, what ``_decode.Reader`` compiles."""

    fields: tuple[KernelField, ...]


class AvroDecoder:
    """Confluent-framed TiCDC Avro messages -> events.

    ``decode(key, value)``: key + value -> INSERT/UPDATE (``_tidb_op``; without
    the extension every row is an INSERT), key + None -> DELETE of that key,
    None + ``0x01``/``0x02`` message -> DDL / resolved event. Without the
    extension a message carries no commit ts: ``commit_ts`` (e.g. the Kafka
    message time as a TSO) is used, else 0.

    A DELETE (key + tombstone) carries no commit ts in the message. ``decode`` takes
    ``commit_ts`` as its commit ts when the caller knows it (the Kafka source: the
    ``cdcflow-commit-ts`` header cdcflow's Kafka destination adds to tombstones); else it gives
    it the best value the stream has, per ``partition`` (any hashable naming where the message
    was read: TiCDC orders rows by commit ts per table within a partition, not across tables):

    1. a lower bound: the commit ts of the last row of the same table read on the partition,
       or one past the newest DDL / resolved ts read on it, whichever is higher;
    2. before any of these, an estimate (``ts_estimated`` set on the event): ``message_ms``
       (the Kafka message time, ms) as a TSO (``ms << 18``), else the current time as a TSO.
       Never 0.

    An estimate can lie above the delete's real commit ts, so it never becomes a lower bound
    here, and the Kafka source's replay filter never takes it as a mark (which would drop the
    later rows of the table as replays).
    """

    def __init__(self, options: AvroOptions | None, registry):
        self.options = options or AvroOptions()
        self.registry = registry
        self._parsed: dict[int, tuple[dict, Any]] = {}
        self._plans: dict[tuple[int | None, int], _DecodePlan] = {}
        # partition -> [one past the newest DDL / resolved ts, {(schema, table): newest row ts}]
        self._floors: dict[Any, list] = {}

    def decode(self, key: bytes | None, value: bytes | None, commit_ts: int | None = None,
               partition: Any = None, message_ms: int | None = None) -> Event:
        if not value and key is not None:  # a tombstone: DELETE of the key
            return self._delete(key, value, commit_ts, partition, message_ms)
        ev = self._decode(key, value, commit_ts)
        t = type(ev)
        floors = self._floors.get(partition)
        if floors is None:
            floors = self._floors[partition] = [0, {}]
        if t is RowChange:
            ts = ev.commit_ts
            if ts:  # the table's latest row on the partition (a replay after a TiCDC restart lowers it)
                tab = ev.table
                floors[1][tab.schema, tab.table] = ts
        elif t is DDLEvent:
            if ev.commit_ts >= floors[0]:
                floors[0] = ev.commit_ts + 1
        elif t is ResolvedEvent and ev.ts >= floors[0]:
            floors[0] = ev.ts + 1
        return ev

    def _delete(self, key: bytes, value: bytes | None, commit_ts: int | None, partition: Any,
                message_ms: int | None) -> RowChange:
        """A tombstone's DELETE with its commit ts by the rule of the class doc."""
        ev = self._decode(key, value, None)
        floors = self._floors.get(partition)
        if floors is None:
            floors = self._floors[partition] = [0, {}]
        t = ev.table
        tables, tk = floors[1], (t.schema, t.table)
        if commit_ts:  # known to the caller
            ev.commit_ts = tables[tk] = commit_ts
            return ev
        floor = tables.get(tk, 0)
        if floors[0] > floor:
            floor = floors[0]
        if floor:
            ev.commit_ts = floor
        else:
            ev.commit_ts = _estimate_ts(message_ms)
            ev.ts_estimated = True
        return ev

    def _decode(self, key: bytes | None, value: bytes | None, commit_ts: int | None) -> Event:
        if value is None:
            if key is None:
                raise MalformedMessage(CODEC, None, "message has neither key nor value")
            kid = self._frame(key, "key")
            plan = self._plan(None, kid, "key")
            row = self._read(plan, key, "key")
            return RowChange(plan.table, DELETE, commit_ts or 0, row)
        if not value:  # a tombstone is a missing value; an empty one is not a DELETE but broken
            raise MalformedMessage(CODEC, "value byte 0", "value is empty (0 bytes); a DELETE has no value at all")
        first = value[0]
        if key is None and first == DDL_BYTE:
            return self._ddl(value)
        if key is None and first == CHECKPOINT_BYTE:
            if len(value) != 9:
                raise MalformedMessage(CODEC, f"value byte {len(value)}",
                                       f"checkpoint message needs 9 bytes, got {len(value)}")
            return ResolvedEvent(_U64.unpack_from(value, 1)[0])
        # the framing inline (the common case); ``_frame`` names what is wrong otherwise
        if first != MAGIC or len(value) < 5:
            self._frame(value, "value")
        vid = _HEADER.unpack_from(value)[1]
        kid = None
        if key is not None:
            if len(key) < 5 or key[0] != MAGIC:
                self._frame(key, "key")
            kid = _HEADER.unpack_from(key)[1]
        plan = self._plans.get((kid, vid)) or self._plan(kid, vid, "value")
        row = self._read(plan, value, "value")
        kind, ts, extra = INSERT, commit_ts or 0, None
        if plan.extension:
            pop = row.pop
            op = pop(OP_FIELD)
            t = pop(COMMIT_TS_FIELD)
            pop(PHYSICAL_TIME_FIELD)
            if op == "u":
                kind = UPDATE
            elif op != "c":
                raise MalformedMessage(CODEC, f"value field {OP_FIELD}", f"unknown operation {op!r}")
            ts = t + _2_64 if t < 0 else t
            if plan.extra_fields:
                extra = {}
                for f in plan.extra_fields:
                    v = pop(f)
                    extra[_EXTRA_KEYS.get(f, "ticdc." + f.lstrip("_"))] = str(v).lower() if isinstance(v, bool) \
                        else str(v)
        ev = RowChange(plan.table, kind, ts, row)
        if extra:
            ev.extra = extra
        return ev

    def decode_many(self, messages: Iterable[tuple[bytes | None, bytes | None]]) -> list[Event]:
        decode = self.decode
        return [decode(k, v) for k, v in messages]

    def decode_records(self, messages, positions, store=None) -> list[Record]:
        """Messages -> OpenCDC records (the column model registered in ``store``)."""
        decode = self.decode
        return to_records([decode(k, v) for k, v in messages], positions, store)

    # -- framing and schemas ---------------------------------------------------
    @staticmethod
    def _frame(data: bytes, part: str) -> int:
        """The schema id of a Confluent-framed message, or the error naming what is wrong."""
        if len(data) < 5:
            raise MalformedMessage(CODEC, f"{part} byte {len(data)}",
                                   f"Confluent Avro needs at least 5 bytes, got {len(data)}")
        magic, schema_id = _HEADER.unpack_from(data)
        if magic != MAGIC:
            raise MalformedMessage(CODEC, f"{part} byte 0", f"magic byte is {data[0]:#04x}, expected 0x00")
        return schema_id

    def _schema(self, schema_id: int, part: str) -> tuple[dict, Any]:
        hit = self._parsed.get(schema_id)
        if hit is not None:
            return hit
        try:
            text = self.registry.schema_by_id(schema_id)
        except InfrastructureError:
            raise  # the registry is down, not the message wrong: never this record's error
        except (SchemaError, KeyError, LookupError) as e:
            raise UnknownSchema(CODEC, f"{part} byte 1", f"schema id {schema_id} is not in the registry: {e}",
                                schema_id=schema_id) from None
        try:
            raw = json.loads(text)
            parsed = parse_schema(_strip_decimal_logical(raw) if isinstance(raw, dict) else raw)
        except Exception as e:  # noqa: BLE001
            raise UnknownSchema(CODEC, f"{part} byte 1", f"schema id {schema_id} is not a valid Avro schema: {e}",
                                schema_id=schema_id) from None
        if not isinstance(raw, dict) or raw.get("type") != "record":
            raise UnknownSchema(CODEC, f"{part} byte 1", f"schema id {schema_id} is not an Avro record",
                                schema_id=schema_id)
        self._parsed[schema_id] = (raw, parsed)
        return raw, parsed

    def _plan(self, key_id: int | None, schema_id: int, part: str) -> _DecodePlan:
        plan = self._plans.get((key_id, schema_id))
        if plan is not None:
            return plan
        raw, parsed = self._schema(schema_id, part)
        if key_id is not None:
            kraw = self._schema(key_id, "key")[0]
            key_names = frozenset(f.get(NAME_PROP, f["name"]) for f in kraw["fields"])
        elif part == "key":
            key_names = frozenset(f.get(NAME_PROP, f["name"]) for f in raw["fields"])
        else:
            key_names = frozenset()
        cols, convs, renames, extension, extra_fields, field_convs = [], [], False, False, [], []
        for f in raw["fields"]:
            fname = f["name"]
            if fname == OP_FIELD:
                extension = True
            if extension:
                if fname not in (OP_FIELD, COMMIT_TS_FIELD, PHYSICAL_TIME_FIELD):
                    extra_fields.append(fname)
                field_convs.append((f, None))
                continue
            try:
                col, conv = _tidb_column(f, key_names)
            except (ValueError, KeyError, TypeError) as e:
                raise UnknownSchema(CODEC, f"{part} byte 1", f"schema id {schema_id} is not a TiCDC schema: {e}",
                                    schema_id=schema_id) from None
            cols.append(col)
            field_convs.append((f, conv))
            if conv is not None or col.name != fname:
                convs.append((fname, col.name, conv))
                renames = renames or col.name != fname
        if extension and not {COMMIT_TS_FIELD, PHYSICAL_TIME_FIELD} <= {f["name"] for f in raw["fields"]}:
            raise UnknownSchema(CODEC, f"{part} byte 1", f"schema id {schema_id} has {OP_FIELD} but not "
                                f"{COMMIT_TS_FIELD}/{PHYSICAL_TIME_FIELD}", schema_id=schema_id)
        names = raw.get(TABLE_PROP) or {}
        namespace = raw.get("namespace") or ""
        schema_name = names.get("schema") or (namespace.split(".", 1)[1] if "." in namespace else namespace)
        table = TableSchema(schema_name, names.get("table") or raw["name"], tuple(cols))
        kernel = None
        if _kernel is not None and not renames:
            kplan = _kernel_plan(field_convs)
            kernel = _kernel.Reader(kplan) if kplan is not None else None
        plan = _DecodePlan(parsed, table, convs, renames, extension, tuple(extra_fields),
                           tuple((name, conv) for name, _, conv in convs if conv is not None), kernel)
        self._plans[(key_id, schema_id)] = plan
        return plan

    @staticmethod
    def _read(plan: _DecodePlan, data: bytes, part: str) -> dict:
        """The row of a framed message (its body starts at byte 5), columns converted."""
        if plan.kernel is not None and _kernel is not None:
            row = plan.kernel.read(data)
            if row is not None:
                return row
        buf = io.BytesIO(data)  # shares the bytes: no copy of the body
        buf.seek(5)
        try:
            row = schemaless_reader(buf, plan.schema, None)
        except Exception as e:  # noqa: BLE001 - truncated or not matching its schema
            raise MalformedMessage(CODEC, f"{part} byte {buf.tell()}",
                                   f"body does not match schema ({type(e).__name__}: {e})") from None
        if buf.tell() != len(data):
            raise MalformedMessage(CODEC, f"{part} byte {buf.tell()}",
                                   f"{len(data) - buf.tell()} bytes left after the Avro body")
        if plan.renames:
            return _convert_renamed(plan, row, part)
        name = None
        try:
            for name, conv in plan.in_place:
                v = row[name]
                if v is not None:
                    row[name] = conv(v)
        except (ValueError, TypeError, OverflowError) as e:
            raise MalformedMessage(CODEC, f"{part} field {name}", f"bad value: {e}") from None
        return row

    def _ddl(self, value: bytes) -> DDLEvent:
        try:
            body = json.loads(bytes(value[1:]))
            return DDLEvent(body["schema"], body["table"], body["query"], int(body["commitTs"]),
                            int(body["type"]) if body.get("type") is not None else None)
        except (ValueError, KeyError, TypeError) as e:
            raise MalformedMessage(CODEC, "value byte 1", f"bad DDL message: {e}") from None


def _convert_renamed(plan: _DecodePlan, row: dict, part: str) -> dict:
    """Convert and rename (a sanitized Avro name -> its column's name), in table column order."""
    name = None
    try:
        for name, col_name, conv in plan.convs:
            v = row.pop(name) if name != col_name else row[name]
            if v is not None and conv is not None:
                v = conv(v)
            row[col_name] = v
    except (ValueError, TypeError, OverflowError) as e:
        raise MalformedMessage(CODEC, f"{part} field {name}", f"bad value: {e}") from None
    return {c.name: row[c.name] for c in plan.table.columns} | {k: v for k, v in row.items() if k.startswith("_tidb_")}


_KERNEL_AVRO = ("boolean", "int", "long", "float", "double", "string", "bytes")  # index: _decode.AVRO_*


def _kernel_plan(field_convs: list[tuple[dict, Callable[[Any], Any] | None]]) -> KernelPlan | None:
    """The compiled reader's plan for a schema's fields and their reference converters; None
    when a field is not one the kernel reads (not a primitive or a [null, T] union of one, a
    logical type other than decimal), so the schema stays with fastavro."""
    k = _kernel
    avro_ids = {"boolean": k.AVRO_BOOLEAN, "int": k.AVRO_LONG, "long": k.AVRO_LONG, "float": k.AVRO_FLOAT,
                "double": k.AVRO_DOUBLE, "string": k.AVRO_STRING, "bytes": k.AVRO_BYTES}
    # reference converter -> (its C twin, the Avro type the twin reads)
    twins = {_unwrap_u64: (k.CONV_UNWRAP_U64, "long"), float: (k.CONV_FLOAT, "long"),
             _int_text: (k.CONV_INT_TEXT, "string"), _bits_to_int: (k.CONV_BITS_TO_INT, "bytes"),
             _decimal_text: (k.CONV_DECIMAL_TEXT, "string"), _parse_date_once: (k.CONV_PARSE_DATE, "string"),
             parse_datetime: (k.CONV_PARSE_DATETIME, "string"), parse_time: (k.CONV_PARSE_TIME, "string")}
    fields = []
    for f, conv in field_convs:
        ftype, null_branch = f["type"], -1
        if isinstance(ftype, list):
            if len(ftype) != 2 or ftype.count("null") != 1:
                return None
            null_branch = ftype.index("null")
            ftype = ftype[1 - null_branch]
        if isinstance(ftype, dict):
            if ftype.get("logicalType") not in (None, "decimal"):
                return None
            ftype = ftype.get("type")
        if ftype not in avro_ids:
            return None
        kind, precision, scale = k.CONV_NONE, 0, 0
        if conv is not None:
            kind, reads = twins.get(conv, (k.CONV_CALL, None))
            decimal_ps = getattr(conv, "decimal", None)
            if decimal_ps is not None and ftype == "bytes" and 0 <= decimal_ps[0] <= 1000 and 0 <= decimal_ps[1] <= 1000:
                (precision, scale), kind, reads = decimal_ps, k.CONV_DECIMAL_FROM_UNSCALED, "bytes"
            if reads is not None and reads != ("long" if ftype == "int" else ftype):
                kind = k.CONV_CALL  # the twin reads another type: the reference converter decides
        fields.append(KernelField(f["name"], avro_ids[ftype], null_branch, kind, conv, precision, scale))
    return KernelPlan(tuple(fields))


def _estimate_ts(message_ms: int | None) -> int:
    """A DELETE's commit ts when nothing bounds it: the message time, else now, as a TSO
    (physical ms << 18)."""
    if message_ms is not None and message_ms > 0:
        return message_ms << 18
    return time.time_ns() // 1_000_000 << 18


_EXTRA_KEYS = {CHECKSUM_FIELD: EXTRA_CHECKSUM, CORRUPTED_FIELD: EXTRA_CORRUPTED,
               CHECKSUM_VERSION_FIELD: EXTRA_CHECKSUM_VERSION}

