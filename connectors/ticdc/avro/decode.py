"""TiCDC Avro decoding: Confluent-framed messages -> events.

Per schema id the decoder parses the schema and rebuilds the column model once
(``schema._tidb_column``); fastavro reads each body, then the columns that need it are
converted to native values (unsigned BIGINT, DECIMAL bytes, temporal texts, BIT).
"""

from __future__ import annotations

import dataclasses
import io
import json
import time
from typing import Any, Callable, Iterable

from fastavro import parse_schema, schemaless_reader

from cdcflow.errors import InfrastructureError, SchemaError
from cdcflow.record import Record
from cdcflow.connectors.ticdc.tidb import TableSchema

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
    _strip_decimal_logical,
    _tidb_column,
)


@dataclasses.dataclass
class _DecodePlan:
    schema: Any  # parsed
    table: TableSchema
    convs: list[tuple[str, str, Callable[[Any], Any] | None]]  # (avro name, column name, conv)
    renames: bool
    extension: bool
    extra_fields: tuple[str, ...]  # _tidb_* fields beyond the three (checksums)
    in_place: tuple[tuple[str, Callable[[Any], Any]], ...] = ()  # (name, conv) when nothing is renamed


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
        cols, convs, renames, extension, extra_fields = [], [], False, False, []
        for f in raw["fields"]:
            fname = f["name"]
            if fname == OP_FIELD:
                extension = True
            if extension:
                if fname not in (OP_FIELD, COMMIT_TS_FIELD, PHYSICAL_TIME_FIELD):
                    extra_fields.append(fname)
                continue
            try:
                col, conv = _tidb_column(f, key_names)
            except (ValueError, KeyError, TypeError) as e:
                raise UnknownSchema(CODEC, f"{part} byte 1", f"schema id {schema_id} is not a TiCDC schema: {e}",
                                    schema_id=schema_id) from None
            cols.append(col)
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
        plan = _DecodePlan(parsed, table, convs, renames, extension, tuple(extra_fields),
                           tuple((name, conv) for name, _, conv in convs if conv is not None))
        self._plans[(key_id, schema_id)] = plan
        return plan

    @staticmethod
    def _read(plan: _DecodePlan, data: bytes, part: str) -> dict:
        """The row of a framed message (its body starts at byte 5), columns converted."""
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


def _estimate_ts(message_ms: int | None) -> int:
    """A DELETE's commit ts when nothing bounds it: the message time, else now, as a TSO
    (physical ms << 18)."""
    if message_ms is not None and message_ms > 0:
        return message_ms << 18
    return time.time_ns() // 1_000_000 << 18


_EXTRA_KEYS = {CHECKSUM_FIELD: EXTRA_CHECKSUM, CORRUPTED_FIELD: EXTRA_CORRUPTED,
               CHECKSUM_VERSION_FIELD: EXTRA_CHECKSUM_VERSION}

