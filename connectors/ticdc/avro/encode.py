"""TiCDC Avro encoding: events -> Confluent-framed messages (``0x00`` + 4-byte schema id + body).

Per table the encoder registers the key and value schemas once and keeps one converter per
column (``schema._encoder_for``); fastavro writes the body. A DELETE is key + tombstone (None).

A row's encoding (``_encode_row``: converters, then the body) has one compiled twin, ``_encode.c``
(``accel`` kernel ``cdcflow.connectors.ticdc.avro._encode``): per schema a ``KernelPlan`` says,
per field, which row key it reads, which converter (a C twin or the Python one), which union
branch is null and which primitive is written. The converters and fastavro stay the reference: a
row the kernel does not decide (a value a converter rejects, text that is not UTF-8, a missing
column) is encoded here, which gives the same bytes or raises the error naming the column.
"""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any, Callable, Iterable, NamedTuple

from fastavro import parse_schema, schemaless_writer
from fastavro.validation import validate as _fastavro_validate

from cdcflow import accel
from cdcflow.errors import InfrastructureError, SchemaError
from cdcflow.record import Record
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

from ..errors import UnrepresentableValue, UnsupportedEvent
from ..events import DELETE, INSERT, DDLEvent, Event, ResolvedEvent, RowChange, from_record
from .schema import (
    _2_63,
    _2_64,
    _HEADER,
    _INT_RANGES,
    _U64,
    CHECKPOINT_BYTE,
    CODEC,
    COMMIT_TS_FIELD,
    DDL_BYTE,
    MAGIC,
    NAME_PROP,
    OP_FIELD,
    PHYSICAL_TIME_FIELD,
    AvroOptions,
    _encoder_for,
    _go_json,
    _unique_field_names,
    build_schema,
    schema_text,
    topic_subject,
)

_kernel = accel.load("cdcflow.connectors.ticdc.avro._encode")


class KernelField(NamedTuple):
    """How the compiled writer converts and writes one Avro field (``_encode.c``)."""

    key: str  #: the row key (the column name; unused for the extension fields)
    avro: int  #: the primitive written, ``_encode.AVRO_*`` (int and long write alike)
    null_branch: int  #: -1: not a union; 0 / 1: the index of the union's "null" branch
    conv: int  #: ``_encode.CONV_*``: none, a C twin of ``call``'s check, CONV_CALL, or CONV_EXT
    call: Any  #: the column's Python converter (``schema._encoder_for``), or None
    lo: int  #: CONV_INT_RANGE: the lowest value; CONV_EXT: the index in the ``ext`` tuple
    hi: int  #: CONV_INT_RANGE: the highest value


class KernelPlan(NamedTuple):
    """One schema's fields in order, what ``_encode.Writer`` compiles."""

    fields: tuple[KernelField, ...]


def _kernel_writer(schema: dict | None, columns: Iterable[Column], opts: AvroOptions, table: str) -> Any:
    """The compiled writer of a schema's rows (a flat record of primitives or [null, T] unions of
    one; a decimal is bytes once converted), or None: the reference only."""
    if _kernel is None or schema is None:
        return None
    k = _kernel
    ids = {"int": k.AVRO_LONG, "long": k.AVRO_LONG, "float": k.AVRO_FLOAT, "double": k.AVRO_DOUBLE,
           "string": k.AVRO_STRING, "bytes": k.AVRO_BYTES}
    columns = list(columns)
    fields = []
    for i, f in enumerate(schema["fields"]):
        t, null_branch = f["type"], -1
        if isinstance(t, list):
            if len(t) != 2 or "null" not in t:
                return None
            null_branch = t.index("null")
            t = t[1 - null_branch]
        if isinstance(t, dict):
            if t.get("logicalType") not in (None, "decimal"):
                return None
            t = t.get("type")
        if t not in ids:
            return None
        if i >= len(columns):  # the TiDB extension fields, in order
            fields.append(KernelField("", ids[t], null_branch, k.CONV_EXT, None, i - len(columns), 0))
            continue
        col = columns[i]
        call = _encoder_for(col, opts, table)
        conv, lo, hi = _kernel_conv(col, opts, call)
        fields.append(KernelField(col.name, ids[t], null_branch, conv, call, lo, hi))
    return k.Writer(KernelPlan(tuple(fields)))


def _kernel_conv(col: Column, opts: AvroOptions, call: Any) -> tuple[int, int, int]:
    """(conv, lo, hi) of ``_encode.c`` for a column whose reference converter is ``call``: the
    checks of ``schema._encoder_for`` that have a C twin; any other converter is called."""
    k, t = _kernel, col.type
    if call is None:
        return k.CONV_NONE, 0, 0
    if t == "BIGINT" and col.unsigned:
        return (k.CONV_CALL if opts.bigint_unsigned_handling_mode == "string" else k.CONV_U64_WRAP), 0, 0
    if t in _INT_RANGES:
        return (k.CONV_INT_RANGE, *_INT_RANGES[t][1 if col.unsigned else 0])
    if t == "YEAR":
        return k.CONV_INT_RANGE, 0, 2155
    if t == "FLOAT":
        return k.CONV_FLOAT32, 0, 0
    if t == "DOUBLE":
        return k.CONV_DOUBLE, 0, 0
    return k.CONV_CALL, 0, 0


def _row_converter(columns: Iterable[Column], fnames: list[str], opts: AvroOptions, table: str,
                   extension: bool = False) -> Callable[..., dict]:
    """Native row -> Avro datum for one table, each column through its converter. With
    ``extension`` it is ``convert(row, op, commit_ts, physical_time)`` and the datum ends with
    the three ``_tidb_*`` fields."""
    plan = [(col.name, fname, _encoder_for(col, opts, table)) for col, fname in zip(columns, fnames)]

    def convert(row: dict, *ext: Any) -> dict:
        datum = {}
        for name, fname, conv in plan:
            v = row[name]
            datum[fname] = v if v is None or conv is None else conv(v)
        if extension:
            datum[OP_FIELD], datum[COMMIT_TS_FIELD], datum[PHYSICAL_TIME_FIELD] = ext
        return datum

    return convert


@dataclasses.dataclass
class _EncodePlan:
    value_schema: Any  # parsed (fastavro)
    key_schema: Any | None
    value_id: int
    key_id: int | None
    names: frozenset  # column names a row must have
    width: int  # how many
    key_names: tuple[str, ...]
    convert: Callable[..., dict]  # row -> value datum
    convert_key: Callable[[dict], dict] | None
    value_fields: dict  # avro field name -> field schema (error diagnosis)
    key_fields: dict
    value_head: bytes  # 0x00 + 4-byte schema id
    key_head: bytes
    value_writer: Any = None  # the compiled row writers (``_encode.Writer``), None: the reference only
    key_writer: Any = None


class AvroEncoder:
    """Events -> Confluent-framed Avro messages, one ``(key, value)`` per event.

    A DELETE gives ``(key, None)``; DDL and resolved events give ``None`` (no
    message, as TiCDC) unless ``enable_watermark`` and the extension are on,
    then ``(None, 0x01+JSON)`` / ``(None, 0x02+ts)``.
    """

    def __init__(self, options: AvroOptions | None, registry):
        self.options = options or AvroOptions()
        self.registry = registry
        self._plans: dict[tuple[str, int], tuple[TableSchema, _EncodePlan]] = {}
        self._plans_by_value: dict[tuple[str, TableSchema], _EncodePlan] = {}

    # -- plans ---------------------------------------------------------------
    def _plan(self, table: TableSchema, topic: str) -> _EncodePlan:
        hit = self._plans.get((topic, id(table)))
        if hit is not None and hit[0] is table:
            return hit[1]
        plan = self._plans_by_value.get((topic, table))
        if plan is None:
            plan = self._build_plan(table, topic)
            self._plans_by_value[(topic, table)] = plan
        if len(self._plans) > 10_000:
            self._plans.clear()
        self._plans[(topic, id(table))] = (table, plan)
        return plan

    def _build_plan(self, table: TableSchema, topic: str) -> _EncodePlan:
        opts = self.options
        vschema = build_schema(table, opts, key=False)
        if vschema is None:
            raise UnsupportedEvent(CODEC, table.collection, "a table without columns has no Avro schema")
        kschema = build_schema(table, opts, key=True)
        value_id = self._register(topic_subject(topic, False), schema_text(vschema))
        key_id = self._register(topic_subject(topic, True), schema_text(kschema)) if kschema else None

        try:
            parsed_v = parse_schema(vschema)
            parsed_k = parse_schema(kschema) if kschema else None
        except Exception as e:  # noqa: BLE001 - a schema fastavro rejects is our bug or a bad default
            raise UnsupportedEvent(CODEC, table.collection, f"schema rejected by Avro: {e}") from None
        return _EncodePlan(
            parsed_v, parsed_k, value_id, key_id,
            frozenset(c.name for c in table.columns), len(table.columns), tuple(c.name for c in table.handle_key),
            _row_converter(table.columns, _unique_field_names(table.columns, table), opts, table.collection,
                           extension=opts.enable_tidb_extension),
            _row_converter(table.handle_key, _unique_field_names(table.handle_key, table), opts,
                           table.collection) if kschema else None,
            {f["name"]: f for f in vschema["fields"]}, {f["name"]: f for f in kschema["fields"]} if kschema else {},
            _HEADER.pack(MAGIC, value_id),
            _HEADER.pack(MAGIC, key_id) if key_id is not None else b"",
            *((_kernel_writer(vschema, table.columns, opts, table.collection),
               _kernel_writer(kschema, table.handle_key, opts, table.collection)) if kschema else (None, None)),
        )

    def _register(self, subject: str, text: str) -> int:
        try:
            return int(self.registry.register(subject, text))
        except InfrastructureError:
            raise  # the registry is down: the batch fails, no record is to blame
        except SchemaError as e:
            raise UnsupportedEvent(CODEC, subject, f"registry refused the schema: {e}") from None

    # -- encoding ------------------------------------------------------------
    def encode(self, events: Iterable[Event], topic: str) -> list[tuple[bytes | None, bytes | None] | None]:
        out: list = []
        append = out.append
        table = plan = None
        for ev in events:
            if type(ev) is RowChange:
                if ev.table is not table:  # runs of one table's rows share the plan lookup
                    table = ev.table
                    plan = self._plan(table, topic)
                append(self._encode_row(ev, plan))
            else:
                append(self._encode_control(ev))
        return out

    def encode_one(self, event: Event, topic: str) -> tuple[bytes | None, bytes | None] | None:
        return self.encode((event,), topic)[0]

    def encode_records(self, records: Iterable[Record], topic: str, store=None) -> list:
        """OpenCDC records -> messages (the column model from each record's schema)."""
        return self.encode([from_record(r, store) for r in records], topic)

    def _encode_row(self, ev: RowChange, plan: _EncodePlan) -> tuple[bytes | None, bytes | None]:
        if plan.value_writer is not None and _kernel is not None:
            out = self._kernel_row(ev, plan)
            if out is not None:
                return out
        row = ev.row
        if row is None:
            raise UnsupportedEvent(CODEC, ev.table.collection, "row change without a row")
        kind = ev.kind
        key_bytes = None
        if plan.key_schema is not None:
            try:
                key_datum = plan.convert_key(row)
            except KeyError as e:
                raise UnrepresentableValue(CODEC, ev.table.collection, e.args[0], None,
                                           "handle-key column missing from the row")
            key_bytes = _write(plan.key_schema, plan.key_head, key_datum, plan.key_fields, ev.table.collection)
        elif kind == DELETE:
            raise UnsupportedEvent(CODEC, ev.table.collection, "a DELETE needs a handle key: Avro sends only the key")
        if kind == DELETE:
            return key_bytes, None
        # the converter reads every column, so a row of the right size that converts has exactly the
        # table's columns; otherwise the column check runs first, as its error comes first
        try:
            if self.options.enable_tidb_extension:
                ts = ev.commit_ts
                datum = plan.convert(row, "c" if kind == INSERT else "u", ts - _2_64 if ts >= _2_63 else ts, ts >> 18)
            else:
                datum = plan.convert(row)
        except Exception:
            _check_columns(plan, row, ev.table.collection)
            raise
        if len(row) != plan.width:
            _check_columns(plan, row, ev.table.collection)
        return key_bytes, _write(plan.value_schema, plan.value_head, datum, plan.value_fields, ev.table.collection)

    def _kernel_row(self, ev: RowChange, plan: _EncodePlan) -> tuple[bytes, bytes | None] | None:
        """The compiled twin of ``_encode_row`` for the rows it takes; None: the reference decides."""
        row, ts = ev.row, ev.commit_ts
        if type(row) is not dict:
            return None
        key = plan.key_writer.write(plan.key_head, row, None)
        if key is None:
            return None
        if ev.kind == DELETE:
            return key, None
        if len(row) != plan.width or type(ts) is not int:
            return None
        ext = (("c" if ev.kind == INSERT else "u", ts - _2_64 if ts >= _2_63 else ts, ts >> 18)
               if self.options.enable_tidb_extension else None)
        value = plan.value_writer.write(plan.value_head, row, ext)
        return None if value is None else (key, value)

    def _encode_control(self, ev: Event) -> tuple[None, bytes] | None:
        opts = self.options
        if not (opts.enable_watermark and opts.enable_tidb_extension):
            return None
        if type(ev) is ResolvedEvent:
            return None, bytes([CHECKPOINT_BYTE]) + _U64.pack(ev.ts)
        if type(ev) is DDLEvent:
            body = {"query": ev.query, "type": ev.ddl_type if ev.ddl_type is not None else 0,
                    "schema": ev.schema, "table": ev.table_name, "commitTs": ev.commit_ts}
            return None, bytes([DDL_BYTE]) + _go_json(body).encode()
        raise TypeError(f"not a TiCDC event: {type(ev).__name__}")


def _check_columns(plan: _EncodePlan, row: dict, coll: str) -> None:
    """Raises when ``row`` does not have exactly the table's columns, naming the first odd one."""
    if row.keys() != plan.names:
        missing = sorted(plan.names - row.keys())
        extra = sorted(row.keys() - plan.names)
        name = (missing or extra)[0]
        raise UnrepresentableValue(CODEC, coll, name, row.get(name),
                                   f"row does not match the table's columns (missing {missing}, extra {extra})")


def _write(schema: Any, head: bytes, datum: dict, fields: dict, coll: str) -> bytes:
    """``head`` + the Avro body fastavro writes for ``datum``; when fastavro refuses a value,
    the error names the column."""
    buf = io.BytesIO()
    buf.write(head)
    try:
        schemaless_writer(buf, schema, datum)
    except Exception as e:  # noqa: BLE001 - find the column and say so
        raise _diagnose(datum, fields, coll, e) from None
    return buf.getvalue()


def _diagnose(datum: dict, fields: dict, coll: str, error: Exception) -> UnrepresentableValue:
    for name, field in fields.items():
        value = datum.get(name)
        try:
            ok = _fastavro_validate(value, parse_schema(field["type"]) if not isinstance(field["type"], str)
                                    else field["type"], raise_errors=False)
        except Exception:  # noqa: BLE001
            ok = False
        if not ok:
            return UnrepresentableValue(CODEC, coll, field.get(NAME_PROP, name), value,
                                        f"value does not fit the Avro type {json.dumps(field['type'])}")
    return UnrepresentableValue(CODEC, coll, "?", None, f"Avro writer failed: {error}")

