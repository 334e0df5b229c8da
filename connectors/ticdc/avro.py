"""TiCDC's Avro protocol (Confluent framing), both directions, as pure functions.

Schemas are built exactly as TiCDC builds them (see docs/codec-avro.md):
record name = sanitized table, namespace ``default.<schema>``,
column blocks with ``connect.parameters``, nullable unions in both orders,
decimal logical type, ``_tidb_*`` extension fields. Messages are ``0x00`` +
4-byte big-endian schema id + Avro body; a DELETE is key + tombstone (None).

The registry is passed in: any object with ``register(subject, schema_text) -> id``
and ``schema_by_id(id) -> text`` (``StoreRegistry`` adapts ``cdcflow.schemas.SchemaStore``).
Per table the encoder precomputes schemas and per-column converters once; per
schema id the decoder parses the schema and rebuilds the column model once.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import io
import json
import struct
import time
from typing import Any, Callable, Iterable

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.validation import validate as _fastavro_validate

from cdcflow.avro_codegen import Generator, Unsupported
from cdcflow.avro_values import codec_for
from cdcflow.errors import ConfigError, ConversionError, InfrastructureError, SchemaError
from cdcflow.record import Record
from cdcflow.connectors.ticdc.tidb import (
    BINARY_TYPES,
    Column,
    TableSchema,
    format_date,
    format_datetime,
    format_decimal,
    format_time,
    parse_date,
    parse_datetime,
    parse_time,
)

from .errors import MalformedMessage, UnknownSchema, UnrepresentableValue, UnsupportedEvent
from .events import DELETE, INSERT, UPDATE, DDLEvent, Event, ResolvedEvent, RowChange, from_record, to_records
from .schema import sanitize_name

CODEC = "avro"
MAGIC = 0x00
DDL_BYTE = 0x01
CHECKPOINT_BYTE = 0x02
NAMESPACE = "default"  # TiCDC's changefeed namespace
OP_FIELD, COMMIT_TS_FIELD, PHYSICAL_TIME_FIELD = "_tidb_op", "_tidb_commit_ts", "_tidb_commit_physical_time"
CHECKSUM_FIELD, CORRUPTED_FIELD, CHECKSUM_VERSION_FIELD = (
    "_tidb_row_level_checksum", "_tidb_corrupted", "_tidb_checksum_version")
NAME_PROP = "cdcflow.name"  # original column name, only when sanitizing changed it
TABLE_PROP = "cdcflow.table"  # original schema/table names, only when sanitizing changed them
EXTRA_CHECKSUM = "ticdc.row-checksum"
EXTRA_CORRUPTED = "ticdc.corrupted"
EXTRA_CHECKSUM_VERSION = "ticdc.checksum-version"

_HEADER = struct.Struct(">bI")
_U64 = struct.Struct(">Q")
_F32 = struct.Struct("<f")
_2_63, _2_64 = 1 << 63, 1 << 64
_INT_RANGES = {
    "TINYINT": ((-(1 << 7), (1 << 7) - 1), (0, (1 << 8) - 1)),
    "SMALLINT": ((-(1 << 15), (1 << 15) - 1), (0, (1 << 16) - 1)),
    "MEDIUMINT": ((-(1 << 23), (1 << 23) - 1), (0, (1 << 24) - 1)),
    "INT": ((-(1 << 31), (1 << 31) - 1), (0, (1 << 32) - 1)),
    "BIGINT": ((-(1 << 63), (1 << 63) - 1), (0, (1 << 64) - 1)),
}
_EXACT = decimal.Context(prec=200, Emax=999_999, Emin=-999_999)


# --------------------------------------------------------------------------- options


@dataclasses.dataclass(frozen=True)
class AvroOptions:
    """TiCDC's Avro settings (same names in connector settings and sink URIs)."""

    enable_tidb_extension: bool = False
    decimal_handling_mode: str = "precise"  # precise | string
    bigint_unsigned_handling_mode: str = "long"  # long | string
    enable_watermark: bool = False  # avro-enable-watermark: DDL/checkpoint messages (needs the extension)

    def __post_init__(self) -> None:
        if self.decimal_handling_mode not in ("precise", "string"):
            raise ConfigError(CODEC, "avro-decimal-handling-mode", "one of precise|string",
                              f"invalid value {self.decimal_handling_mode!r}")
        if self.bigint_unsigned_handling_mode not in ("long", "string"):
            raise ConfigError(CODEC, "avro-bigint-unsigned-handling-mode", "one of long|string",
                              f"invalid value {self.bigint_unsigned_handling_mode!r}")

    @classmethod
    def from_config(cls, config: dict[str, str] | None) -> "AvroOptions":
        """From TiCDC-named settings; unknown keys are ignored (they belong to the sink)."""
        config = config or {}

        def flag(name: str) -> bool:
            v = str(config.get(name, "false")).strip().lower()
            if v not in ("true", "false"):
                raise ConfigError(CODEC, name, "true|false", f"invalid value {config[name]!r}")
            return v == "true"

        return cls(
            enable_tidb_extension=flag("enable-tidb-extension"),
            decimal_handling_mode=str(config.get("avro-decimal-handling-mode", "precise")).lower(),
            bigint_unsigned_handling_mode=str(config.get("avro-bigint-unsigned-handling-mode", "long")).lower(),
            enable_watermark=flag("avro-enable-watermark"),
        )


# --------------------------------------------------------------------------- registry


class StoreRegistry:
    """Adapts ``cdcflow.schemas.SchemaStore`` to the registry interface the codec uses."""

    def __init__(self, store):
        self.store = store

    def register(self, subject: str, schema_text: str) -> int:
        return self.store.register(subject, schema_text).id

    def schema_by_id(self, schema_id: int) -> str:
        return self.store.by_id(schema_id)[1]


def topic_subject(topic: str, key: bool) -> str:
    """TopicNameStrategy subject, ``.`` in the topic replaced by ``_`` as TiCDC does."""
    return topic.replace(".", "_") + ("-key" if key else "-value")


# --------------------------------------------------------------------------- schema building

def _tidb_type(col: Column) -> str:
    t = col.type
    if t in ("TINYINT", "SMALLINT", "MEDIUMINT", "INT"):
        return "INT UNSIGNED" if col.unsigned else "INT"
    if t == "BIGINT":
        return "BIGINT UNSIGNED" if col.unsigned else "BIGINT"
    if t in BINARY_TYPES or col.binary and t not in ("BIT", "ENUM", "SET", "JSON"):
        return "BLOB"
    if t in ("CHAR", "VARCHAR", "TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT"):
        return "TEXT"
    return t  # FLOAT DOUBLE BIT DECIMAL ENUM SET JSON DATE DATETIME TIMESTAMP TIME YEAR


def _escape_element(e: str) -> str:
    return e.replace(",", "\\,")


def _split_allowed(text: str) -> tuple[str, ...]:
    """Inverse of TiCDC's ``allowed`` join: split at commas not escaped as ``\\,``."""
    if text == "":
        return ("",)
    out, cur, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] == ",":
            cur.append(",")
            i += 2
            continue
        if ch == ",":
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    out.append("".join(cur))
    return tuple(out)


def _column_type(col: Column, opts: AvroOptions) -> tuple[dict, bool]:
    """TiCDC's column type block, and whether it is a logical (decimal) type."""
    tt = _tidb_type(col)
    t = col.type
    if t in ("TINYINT", "SMALLINT", "MEDIUMINT"):
        return {"type": "int", "connect.parameters": {"tidb_type": tt}}, False
    if t == "INT":
        return {"type": "long" if col.unsigned else "int", "connect.parameters": {"tidb_type": tt}}, False
    if t == "BIGINT":
        string = col.unsigned and opts.bigint_unsigned_handling_mode == "string"
        return {"type": "string" if string else "long", "connect.parameters": {"tidb_type": tt}}, False
    if t == "FLOAT":
        return {"type": "float", "connect.parameters": {"tidb_type": tt}}, False
    if t == "DOUBLE":
        return {"type": "double", "connect.parameters": {"tidb_type": tt}}, False
    if t == "BIT":
        length = col.length if col.length is not None else 1  # MySQL's default BIT width
        return {"type": "bytes", "connect.parameters": {"tidb_type": tt, "length": str(length)}}, False
    if t == "DECIMAL":
        if opts.decimal_handling_mode == "precise" and col.scale is not None:
            precision = col.precision if col.precision is not None else 10  # MySQL default DECIMAL(10,0)
            return {"type": "bytes", "connect.parameters": {"tidb_type": tt}, "logicalType": "decimal",
                    "precision": precision, "scale": col.scale}, True
        # string mode, or scale unknown (documented fallback): the text keeps every value exact
        return {"type": "string", "connect.parameters": {"tidb_type": tt}}, False
    if t in ("ENUM", "SET"):
        allowed = ",".join(_escape_element(e) for e in col.elements)
        return {"type": "string", "connect.parameters": {"tidb_type": tt, "allowed": allowed}}, False
    if tt == "BLOB":
        return {"type": "bytes", "connect.parameters": {"tidb_type": tt}}, False
    if t == "YEAR":
        return {"type": "int", "connect.parameters": {"tidb_type": tt}}, False
    # TEXT family, JSON, DATE, DATETIME, TIMESTAMP, TIME
    return {"type": "string", "connect.parameters": {"tidb_type": tt}}, False


def _field_block(col: Column, fname: str, opts: AvroOptions, table: TableSchema) -> dict:
    avro_t, logical = _column_type(col, opts)
    field: dict[str, Any] = {}
    if logical:  # no defaults for logical types (as TiCDC: goavro cannot hold them)
        if col.nullable:
            field["default"] = None
            field["name"] = fname
            field["type"] = ["null", avro_t]
        else:
            field["name"] = fname
            field["type"] = avro_t
    else:
        default = None
        if col.has_default and col.default is not None:
            default = _default_datum(col, opts, table, avro_t["type"])
        if col.nullable:
            field["default"] = default
            field["name"] = fname
            field["type"] = ["null", avro_t] if default is None else [avro_t, "null"]
        else:
            if default is not None:
                field["default"] = default
            field["name"] = fname
            field["type"] = avro_t
    if fname != col.name:
        field[NAME_PROP] = col.name
    return field


def _default_datum(col: Column, opts: AvroOptions, table: TableSchema, avro_type: str) -> Any:
    """A column default as the JSON value Avro expects (bytes as ISO-8859-1 text)."""
    conv = _encoder_for(col, opts, table.collection)
    value = col.default
    if isinstance(value, str) and col.type not in ("CHAR", "VARCHAR", "TINYTEXT", "TEXT", "MEDIUMTEXT",
                                                   "LONGTEXT", "ENUM", "SET", "JSON"):
        value = _native_from_text(col, value)  # TiDB keeps many defaults as text ('0', '2020-01-01')
    datum = conv(value) if conv is not None else value
    if isinstance(datum, bytes):
        return datum.decode("latin-1")
    if avro_type in ("float", "double") and isinstance(datum, int):
        return float(datum)
    return datum


def _native_from_text(col: Column, text: str) -> Any:
    t = col.type
    try:
        if t in _INT_RANGES or t in ("YEAR", "BIT"):
            return int(text, 0) if t == "BIT" else int(text)
        if t in ("FLOAT", "DOUBLE"):
            return float(text)
        if t == "DECIMAL":
            return decimal.Decimal(text)
        if t == "DATE":
            return parse_date(text)
        if t in ("DATETIME", "TIMESTAMP"):
            return parse_datetime(text)
        if t == "TIME":
            return parse_time(text)
        if t in BINARY_TYPES:
            return text.encode("latin-1")
    except ValueError:
        pass
    return text


def _go_json(obj: Any) -> str:
    """Compact JSON as Go's encoding/json writes it (``<``, ``>``, ``&``, U+2028/9 escaped)."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _unique_field_names(columns: Iterable[Column], table: TableSchema) -> list[str]:
    names, seen = [], set()
    for col in columns:
        n = sanitize_name(col.name)
        if n in seen or n.startswith("_tidb_") and n in (OP_FIELD, COMMIT_TS_FIELD, PHYSICAL_TIME_FIELD):
            raise UnrepresentableValue(CODEC, table.collection, col.name, col.name,
                                       f"column name sanitizes to {n!r}, which another field already uses")
        seen.add(n)
        names.append(n)
    return names


def build_schema(table: TableSchema, opts: AvroOptions, key: bool) -> dict | None:
    """The key (handle-key columns) or value (all columns) schema TiCDC registers for ``table``.
    None for a key schema of a table without handle key (TiCDC then sends a null key)."""
    columns = table.handle_key if key else table.columns
    if not columns:
        return None
    names = _unique_field_names(columns, table)
    fields = [_field_block(c, n, opts, table) for c, n in zip(columns, names)]
    if opts.enable_tidb_extension and not key:
        fields += [
            {"default": "", "name": OP_FIELD, "type": "string"},
            {"default": 0, "name": COMMIT_TS_FIELD, "type": "long"},
            {"default": 0, "name": PHYSICAL_TIME_FIELD, "type": "long"},
        ]
    schema: dict[str, Any] = {
        "type": "record",
        "name": sanitize_name(table.table),
        "namespace": NAMESPACE + "." + sanitize_name(table.schema),
        "fields": fields,
    }
    if sanitize_name(table.table) != table.table or sanitize_name(table.schema) != table.schema:
        schema[TABLE_PROP] = {"schema": table.schema, "table": table.table}
    return schema


def schema_text(schema: dict) -> str:
    return _go_json(schema)


# --------------------------------------------------------------------------- value converters (encode)

Conv = Callable[[Any], Any]


def _bad(table: str, col: Column, value: Any, why: str) -> UnrepresentableValue:
    return UnrepresentableValue(CODEC, table, col.name, value, why)


def _encoder_for(col: Column, opts: AvroOptions, table: str) -> Conv | None:
    """Native value -> Avro datum for one column; None when the value goes through as is.

    Every converter checks what Avro would otherwise change silently (range,
    float32 precision, decimal scale, fractional seconds beyond fsp)."""
    t = col.type
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t][1 if col.unsigned else 0]
        if t == "BIGINT" and col.unsigned:
            if opts.bigint_unsigned_handling_mode == "string":
                def conv(v: Any) -> Any:
                    if type(v) is not int or not 0 <= v < _2_64:
                        raise _bad(table, col, v, "not a BIGINT UNSIGNED value")
                    return str(v)
                return conv

            def conv(v: Any) -> Any:  # long mode wraps above 2^63-1, as TiCDC does
                if type(v) is not int or not 0 <= v < _2_64:
                    raise _bad(table, col, v, "not a BIGINT UNSIGNED value")
                return v - _2_64 if v >= _2_63 else v
            return conv

        def conv(v: Any) -> Any:
            if type(v) is not int or not lo <= v <= hi:
                raise _bad(table, col, v, f"not a {t}{' UNSIGNED' if col.unsigned else ''} value")
            return v
        return conv
    if t == "YEAR":
        def conv(v: Any) -> Any:
            if type(v) is not int or not 0 <= v <= 2155:
                raise _bad(table, col, v, "not a YEAR value")
            return v
        return conv
    if t == "FLOAT":
        pack, unpack = _F32.pack, _F32.unpack

        def conv(v: Any) -> Any:
            if type(v) is not float:
                raise _bad(table, col, v, "FLOAT needs a float")
            try:
                if unpack(pack(v))[0] == v or v != v:
                    return v
            except OverflowError:
                pass
            raise _bad(table, col, v, "value is not exact in a 32-bit FLOAT")
        return conv
    if t == "DOUBLE":
        def conv(v: Any) -> Any:
            if type(v) is not float:
                raise _bad(table, col, v, "DOUBLE needs a float")
            return v
        return conv
    if t == "BIT":
        width = col.length if col.length is not None else 64
        top = 1 << width

        def conv(v: Any) -> Any:
            if type(v) is not int or not 0 <= v < top:
                raise _bad(table, col, v, f"not a BIT({width}) value")
            return v.to_bytes((v.bit_length() + 7) // 8 or 1, "big")
        return conv
    if t == "DECIMAL":
        if opts.decimal_handling_mode == "precise" and col.scale is not None:
            return _decimal_bytes_conv(col, table)

        def conv(v: Any) -> Any:
            if type(v) is not decimal.Decimal or not v.is_finite():
                raise _bad(table, col, v, "DECIMAL needs a finite Decimal")
            return format_decimal(v)
        return conv
    if t == "ENUM" and col.elements:
        members = frozenset(col.elements)

        def conv(v: Any) -> Any:
            if v not in members and v != "":
                raise _bad(table, col, v, "not a member of the ENUM")
            return v
        return conv
    if t == "DATE":
        def conv(v: Any) -> Any:
            if type(v) is not datetime.date:
                raise _bad(table, col, v, "DATE needs a datetime.date")
            return format_date(v)
        return conv
    if t in ("DATETIME", "TIMESTAMP"):
        fsp = col.fsp
        step = 10 ** (6 - fsp) if fsp is not None else 1

        def conv(v: Any) -> Any:
            if type(v) is not datetime.datetime or v.tzinfo is not None:
                raise _bad(table, col, v, f"{t} needs a naive datetime.datetime")
            if v.microsecond % step:
                raise _bad(table, col, v, f"fraction finer than the column's fsp {fsp}")
            return format_datetime(v, fsp)
        return conv
    if t == "TIME":
        fsp = col.fsp
        step = 10 ** (6 - fsp) if fsp is not None else 1

        def conv(v: Any) -> Any:
            if type(v) is not datetime.timedelta:
                raise _bad(table, col, v, "TIME needs a datetime.timedelta")
            if v.microseconds % step:
                raise _bad(table, col, v, f"fraction finer than the column's fsp {fsp}")
            return format_time(v, fsp)
        return conv
    return None  # strings, bytes, JSON text, SET: fastavro checks their type


def _decimal_bytes_conv(col: Column, table: str) -> Conv:
    """Decimal -> unscaled big-endian two's complement, shortest form (as TiCDC writes)."""
    scale = col.scale or 0
    precision = col.precision if col.precision is not None else 10
    limit = 10 ** precision
    scaleb = decimal.Decimal.scaleb

    def conv(v: Any) -> Any:
        if type(v) is not decimal.Decimal or not v.is_finite():
            raise _bad(table, col, v, "DECIMAL needs a finite Decimal")
        q = scaleb(v, scale, _EXACT)
        n = int(q)
        if n != q:
            raise _bad(table, col, v, f"more fractional digits than DECIMAL({precision},{scale}) holds")
        if not -limit < n < limit:
            raise _bad(table, col, v, f"does not fit DECIMAL({precision},{scale})")
        if n >= 0:
            return n.to_bytes(n.bit_length() // 8 + 1, "big", signed=True)
        return n.to_bytes((~n).bit_length() // 8 + 1, "big", signed=True)
    return conv


def _raiser(table: str, col: Column) -> Callable[[Any, str], None]:
    def fail(v: Any, why: str) -> None:
        raise _bad(table, col, v, why)
    return fail


def _compile_row_converter(columns, fnames, opts: AvroOptions, table: str,
                           extension: bool = False) -> Callable[..., dict]:
    """One generated function per table: native row -> Avro datum, every column's
    check and conversion inlined (``_inline_conversion``; no call per column for the
    usual types). With ``extension`` it is ``convert(row, op, commit_ts, physical_time)``
    and the datum ends with the three ``_tidb_*`` fields."""
    env: dict[str, Any] = {"_int": int, "_float": float, "_str": str, "_Decimal": decimal.Decimal,
                           "_date": datetime.date, "_datetime": datetime.datetime,
                           "_timedelta": datetime.timedelta, "_scaleb": decimal.Decimal.scaleb,
                           "_EXACT": _EXACT, "_pack": _F32.pack, "_unpack": _F32.unpack,
                           "_format_time": format_time}
    lines = ["def convert(row, op, commit_ts, physical_time):" if extension else "def convert(row):"]
    items = []
    for i, (col, fname) in enumerate(zip(columns, fnames)):
        env[f"_bad{i}"] = _raiser(table, col)
        lines.append(f"    v = row[{col.name!r}]")
        lines.append("    if v is not None:")
        body = _inline_conversion(col, opts, i, env)
        if body is None:
            conv = _encoder_for(col, opts, table)
            body = ["pass"] if conv is None else [f"v = _conv{i}(v)"]
            if conv is not None:
                env[f"_conv{i}"] = conv
        lines += ["        " + line for line in body]
        lines.append(f"    d{i} = v")
        items.append(f"{fname!r}: d{i}")
    if extension:
        items += [f"{OP_FIELD!r}: op", f"{COMMIT_TS_FIELD!r}: commit_ts", f"{PHYSICAL_TIME_FIELD!r}: physical_time"]
    lines.append("    return {" + ", ".join(items) + "}")
    exec(compile("\n".join(lines), f"<avro converter {table}>", "exec"), env)  # noqa: S102 - generated from column facts
    return env["convert"]


def _date_text_memo(limit: int = 4096) -> tuple[dict[datetime.date, str], Callable[[datetime.date], str]]:
    """(memo, format): ``memo.get(d) or format(d)`` is ``format_date(d)``, each date formatted once."""
    memo: dict[datetime.date, str] = {}

    def format_once(d: datetime.date) -> str:
        text = d.isoformat()
        if len(memo) >= limit:
            memo.clear()
        memo[d] = text
        return text
    return memo, format_once


def _inline_conversion(col: Column, opts: AvroOptions, i: int, env: dict[str, Any]) -> list[str] | None:
    """Source lines (run when ``v`` is not None) that check and convert ``v`` as
    ``_encoder_for(col)`` does, raising the same error through ``_bad<i>``; None for
    the rare shapes left to that converter. Why: a call per column (the converter,
    then ``format_*``) cost more than the work itself."""
    t = col.type
    bad = f"_bad{i}"
    if t in _INT_RANGES and not (t == "BIGINT" and col.unsigned) or t == "YEAR":
        lo, hi = (0, 2155) if t == "YEAR" else _INT_RANGES[t][1 if col.unsigned else 0]
        return [f"if type(v) is not _int or not {lo} <= v <= {hi}: {bad}(v, 'not a {t} value')"]
    if t == "BIGINT":  # unsigned
        check = f"if type(v) is not _int or not 0 <= v < {_2_64}: {bad}(v, 'not a BIGINT UNSIGNED value')"
        if opts.bigint_unsigned_handling_mode == "string":
            return [check, "v = _str(v)"]
        return [check, f"if v >= {_2_63}: v -= {_2_64}"]  # long mode wraps above 2^63-1, as TiCDC does
    if t == "DOUBLE":
        return [f"if type(v) is not _float: {bad}(v, 'DOUBLE needs a float')"]
    if t == "FLOAT":
        return [f"if type(v) is not _float: {bad}(v, 'FLOAT needs a float')",
                "if v == v:",  # NaN passes, as in _encoder_for
                "    try:",
                "        exact = _unpack(_pack(v))[0] == v",
                "    except OverflowError:",
                "        exact = False",
                f"    if not exact: {bad}(v, 'value is not exact in a 32-bit FLOAT')"]
    if t == "BIT":
        width = col.length if col.length is not None else 64
        return [f"if type(v) is not _int or not 0 <= v < {1 << width}: {bad}(v, 'not a BIT({width}) value')",
                "v = v.to_bytes((v.bit_length() + 7) // 8 or 1, 'big')"]
    if t == "DECIMAL" and opts.decimal_handling_mode == "precise" and col.scale is not None:
        scale = col.scale
        precision = col.precision if col.precision is not None else 10
        limit = 10 ** precision
        return [f"if type(v) is not _Decimal or not v.is_finite(): {bad}(v, 'DECIMAL needs a finite Decimal')",
                f"q = _scaleb(v, {scale}, _EXACT)",
                "n = _int(q)",
                f"if n != q: {bad}(v, 'more fractional digits than DECIMAL({precision},{scale}) holds')",
                f"if not -{limit} < n < {limit}: {bad}(v, 'does not fit DECIMAL({precision},{scale})')",
                # shortest big-endian two's complement, as TiCDC writes (_decimal_bytes_conv)
                "v = n.to_bytes((n.bit_length() if n >= 0 else (~n).bit_length()) // 8 + 1, 'big', signed=True)"]
    if t == "ENUM" and col.elements:
        env[f"_members{i}"] = frozenset(col.elements)
        return [f"if v not in _members{i} and v != '': {bad}(v, 'not a member of the ENUM')"]
    if t == "DATE":  # dates repeat: each formatted once (a bounded memo per converter)
        env[f"_dtext{i}"], env[f"_dformat{i}"] = _date_text_memo()
        return [f"if type(v) is not _date: {bad}(v, 'DATE needs a datetime.date')",
                f"v = _dtext{i}.get(v) or _dformat{i}(v)"]
    fsp = col.fsp
    if t in ("DATETIME", "TIMESTAMP", "TIME") and fsp is not None and not 0 <= fsp <= 6:
        return None
    fraction = [] if fsp is None else [
        f"if v.{'microseconds' if t == 'TIME' else 'microsecond'} % {10 ** (6 - fsp)}: "
        f"{bad}(v, \"fraction finer than the column's fsp {fsp}\")"]
    if t in ("DATETIME", "TIMESTAMP"):
        check = f"if type(v) is not _datetime or v.tzinfo is not None: {bad}(v, '{t} needs a naive datetime.datetime')"
        if not fsp:  # None: isoformat's six digits when non-zero; 0: no fraction (checked above)
            return [check, *fraction, "v = v.isoformat(' ')"]
        return [check, *fraction,  # the fraction cut or padded to fsp digits (format_datetime)
                f"v = v.isoformat(' ')[:{20 + fsp}] if v.microsecond else v.isoformat(' ') + '.{'0' * fsp}'"]
    if t == "TIME":
        # within one day str(timedelta) is "H:MM:SS[.ffffff]": format_time's text once the hour has two
        # digits and the fraction fsp digits; other TIMEs (negative, 24 h and more) through format_time
        text = "t" if not fsp else f"t[:{9 + fsp}] if v.microseconds else t + '.{'0' * fsp}'"
        return [f"if type(v) is not _timedelta: {bad}(v, 'TIME needs a datetime.timedelta')", *fraction,
                "if v.days == 0:",
                "    t = _str(v)",
                "    if v.seconds < 36000: t = '0' + t",
                f"    v = {text}",
                "else:",
                f"    v = _format_time(v, {fsp})"]
    return None


# --------------------------------------------------------------------------- encoder


@dataclasses.dataclass
class _EncodePlan:
    value_schema: Any  # parsed (fastavro): the reference writer for datums the codec refuses
    key_schema: Any | None
    value_id: int
    key_id: int | None
    names: frozenset  # column names a row must have
    width: int  # how many
    key_names: tuple[str, ...]
    convert: Callable[[dict], dict]  # row -> value datum (generated per table)
    convert_key: Callable[[dict], dict] | None
    value_fields: dict  # avro field name -> field schema (error diagnosis)
    key_fields: dict
    write_value: Callable[[dict], bytes]  # datum -> Avro body (cdcflow's compiled writer)
    write_key: Callable[[dict], bytes] | None
    value_head: bytes  # 0x00 + 4-byte schema id
    key_head: bytes


def _codec_schema(schema: dict) -> dict:
    """The schema ``cdcflow.avro_values`` writes datums with: the registered one minus what the
    datum already settles. Decimal blocks lose their logical type (the converter writes TiCDC's
    shortest two's complement itself; Avro's decimal encoding pads negative values differently),
    and ``cdcflow.name`` goes (the codec would key the datum by it; converters key by field name).
    Same Avro binary layout, so the bytes are those of the registered schema."""
    def plain(t: Any) -> Any:
        if isinstance(t, list):
            return [plain(b) for b in t]
        if isinstance(t, dict) and t.get("logicalType") == "decimal":
            return {k: v for k, v in t.items() if k not in ("logicalType", "precision", "scale")}
        return t

    fields = [{k: (plain(v) if k == "type" else v) for k, v in f.items() if k != NAME_PROP}
              for f in schema["fields"]]
    return {k: v for k, v in schema.items() if k != TABLE_PROP} | {"fields": fields}


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
            write_value = codec_for(_codec_schema(vschema)).encoder()
            write_key = codec_for(_codec_schema(kschema)).encoder() if kschema else None
        except Exception as e:  # noqa: BLE001 - a schema fastavro rejects is our bug or a bad default
            raise UnsupportedEvent(CODEC, table.collection, f"schema rejected by Avro: {e}") from None
        return _EncodePlan(
            parsed_v, parsed_k, value_id, key_id,
            frozenset(c.name for c in table.columns), len(table.columns), tuple(c.name for c in table.handle_key),
            _compile_row_converter(table.columns, _unique_field_names(table.columns, table), opts, table.collection,
                                   extension=opts.enable_tidb_extension),
            _compile_row_converter(table.handle_key, _unique_field_names(table.handle_key, table), opts,
                                   table.collection) if kschema else None,
            {f["name"]: f for f in vschema["fields"]}, {f["name"]: f for f in kschema["fields"]} if kschema else {},
            write_value, write_key, _HEADER.pack(MAGIC, value_id),
            _HEADER.pack(MAGIC, key_id) if key_id is not None else b"",
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
            try:
                key_bytes = plan.key_head + plan.write_key(key_datum)
            except ConversionError:  # not a value the strict writer takes: fastavro writes or names the column
                key_bytes = _write_reference(plan.key_schema, plan.key_head, key_datum, plan.key_fields,
                                             ev.table.collection)
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
        try:
            return key_bytes, plan.value_head + plan.write_value(datum)
        except ConversionError:  # as for the key
            return key_bytes, _write_reference(plan.value_schema, plan.value_head, datum, plan.value_fields,
                                               ev.table.collection)

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


def _write_reference(schema: Any, head: bytes, datum: dict, fields: dict, coll: str) -> bytes:
    """fastavro's writer, for a datum cdcflow's strict writer refused: it writes what fastavro
    also accepts (a bytearray for bytes) as before, or fails and the column is named."""
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


# --------------------------------------------------------------------------- decoder


def _tidb_column(field: dict, key_names: frozenset) -> tuple[Column, Callable[[Any], Any] | None]:
    """Column model and Avro-datum -> native converter for one TiCDC field."""
    name = field.get(NAME_PROP, field["name"])
    ftype = field["type"]
    nullable = False
    first_null = True
    if isinstance(ftype, list):
        branches = [b for b in ftype if b != "null"]
        nullable = len(branches) < len(ftype)
        first_null = ftype[0] == "null"
        if len(branches) != 1:
            raise ValueError(f"field {name!r}: unions other than [null, T] are not TiCDC columns")
        ftype = branches[0]
    block = ftype if isinstance(ftype, dict) else {"type": ftype}
    avro = block["type"]
    params = block.get("connect.parameters") or {}
    tt = params.get("tidb_type") or _fallback_tidb_type(block)
    handle = name in key_names
    kw: dict[str, Any] = {"nullable": nullable, "handle_key": handle, "primary_key": handle}
    conv: Callable[[Any], Any] | None = None
    if tt in ("INT", "INT UNSIGNED"):
        unsigned = tt == "INT UNSIGNED"
        col = Column(name, "INT" if avro == "long" or not unsigned else "MEDIUMINT", unsigned=unsigned, **kw)
    elif tt in ("BIGINT", "BIGINT UNSIGNED"):
        unsigned = tt == "BIGINT UNSIGNED"
        col = Column(name, "BIGINT", unsigned=unsigned, **kw)
        if unsigned:
            conv = _int_text if avro == "string" else _unwrap_u64
    elif tt in ("FLOAT", "DOUBLE"):
        col = Column(name, tt, **kw)
        if avro in ("int", "long"):
            conv = float
    elif tt == "BIT":
        col = Column(name, "BIT", length=int(params.get("length", 64)), unsigned=True, **kw)
        conv = _bits_to_int
    elif tt == "DECIMAL":
        if block.get("logicalType") == "decimal":
            col = Column(name, "DECIMAL", precision=int(block["precision"]), scale=int(block.get("scale", 0)), **kw)
            conv = _decimal_from_unscaled(col.precision, col.scale)
        else:
            col = Column(name, "DECIMAL", **kw)
            conv = _decimal_text
    elif tt in ("ENUM", "SET"):
        allowed = params.get("allowed")
        col = Column(name, tt, elements=_split_allowed(allowed) if allowed is not None else (), **kw)
    elif tt == "BLOB":
        col = Column(name, "LONGBLOB", binary=True, **kw)
    elif tt == "TEXT":
        col = Column(name, "LONGTEXT", **kw)
    elif tt in ("JSON", "YEAR"):
        col = Column(name, tt, **kw)
    elif tt == "DATE":
        col, conv = Column(name, tt, **kw), parse_date
    elif tt in ("DATETIME", "TIMESTAMP"):
        col, conv = Column(name, tt, **kw), parse_datetime
    elif tt == "TIME":
        col, conv = Column(name, tt, **kw), parse_time
    else:
        raise ValueError(f"field {name!r}: unknown tidb_type {tt!r}")
    if "default" in field and not (nullable and first_null):
        d = field["default"]
        if d is not None:
            if isinstance(d, str) and avro == "bytes":
                d = d.encode("latin-1")
            if conv is not None:
                d = conv(d)
            elif isinstance(d, (int, float)) and avro in ("float", "double"):
                d = float(d)
        col = dataclasses.replace(col, default=d, has_default=True)
    return col, conv


def _fallback_tidb_type(block: dict) -> str:
    """For Avro fields without ``connect.parameters`` (not written by TiCDC)."""
    if block.get("logicalType") == "decimal":
        return "DECIMAL"
    return {"int": "INT", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE", "string": "TEXT",
            "bytes": "BLOB", "boolean": "INT"}.get(block["type"], "?")


def _unwrap_u64(v: int) -> int:
    return v + _2_64 if v < 0 else v


def _int_text(v: str) -> int:
    n = int(v)
    if not 0 <= n < _2_64:
        raise ValueError(f"{v!r} is not a BIGINT UNSIGNED value")
    return n


def _bits_to_int(v: bytes) -> int:
    return int.from_bytes(v, "big")


def _decimal_from_unscaled(precision: int, scale: int) -> Callable[[bytes], decimal.Decimal]:
    """Avro decimal bytes -> Decimal with exponent ``-scale``, exact; more digits than
    ``precision`` is a corrupt message (fastavro would round it silently)."""
    limit = 10 ** precision
    from_bytes, dec, multiply = int.from_bytes, decimal.Decimal, _EXACT.multiply
    unit = decimal.Decimal((0, (1,), -scale))  # n * 1E-scale: exact, exponent -scale

    def conv(v: bytes) -> decimal.Decimal:
        n = from_bytes(v, "big", signed=True)
        if not -limit < n < limit:
            raise ValueError(f"unscaled value {n} has more than the {precision} digits of its DECIMAL")
        return multiply(dec(n), unit)
    conv.decimal = (precision, scale)  # type: ignore[attr-defined]  # the fast reader inlines it
    return conv


def _strip_decimal_logical(raw: dict) -> dict:
    """The schema fastavro reads: decimal blocks as plain bytes (``_decimal_from_unscaled`` converts)."""
    fields = []
    for f in raw.get("fields", ()):
        t = f.get("type")
        if isinstance(t, dict) and t.get("logicalType") == "decimal":
            f = dict(f, type={k: v for k, v in t.items() if k != "logicalType"})
        elif isinstance(t, list) and any(isinstance(b, dict) and b.get("logicalType") == "decimal" for b in t):
            f = dict(f, type=[{k: v for k, v in b.items() if k != "logicalType"} if isinstance(b, dict) else b
                              for b in t])
        fields.append(f)
    return dict(raw, fields=fields)


def _decimal_text(v: str) -> decimal.Decimal:
    d = decimal.Decimal(v)
    if not d.is_finite():
        raise ValueError(f"{v!r} is not a DECIMAL value")
    return d


@dataclasses.dataclass
class _DecodePlan:
    schema: Any  # parsed
    table: TableSchema
    convs: list[tuple[str, str, Callable[[Any], Any] | None]]  # (avro name, column name, conv)
    renames: bool
    extension: bool
    extra_fields: tuple[str, ...]  # _tidb_* fields beyond the three (checksums)
    fast: Callable[[bytes, int | None, str], RowChange] | None = None  # generated reader (None: fastavro only)


_FAST_TYPES = frozenset({"int", "long", "float", "double", "string", "bytes"})


def _date_memo(limit: int = 4096) -> tuple[dict[str, datetime.date], Callable[[str], datetime.date]]:
    """(memo, parse): ``memo.get(text) or parse(text)`` is ``parse_date(text)``, each text parsed once."""
    memo: dict[str, datetime.date] = {}

    def parse(text: str) -> datetime.date:
        d = parse_date(text)
        if len(memo) >= limit:
            memo.clear()
        memo[text] = d
        return d
    return memo, parse


class _RowReaderGen(Generator):
    """One function per TiCDC schema: ``read(message, commit_ts, kind) -> RowChange``.

    Why: cdcflow's Avro reader (``Codec.decoder()``: the compiled kernel when built, else
    generated Python) reads the body into a dict in one pass, where fastavro walks its
    parsed schema per message; this function then converts only the columns that need it
    (unsigned BIGINT, DECIMAL bytes, temporal texts, BIT) and builds the row in table order.
    Anything unexpected (truncation, a bad union index, invalid UTF-8, a value out of its
    column's range, trailing bytes, an unknown ``_tidb_op``) raises; ``AvroDecoder`` then
    reruns the fastavro path, which names the problem, so errors stay exactly as before.
    """

    label = "<cdcflow ticdc avro row reader>"

    @staticmethod
    def _check_field(ftype: Any) -> bool:
        """Whether the field is nullable; Unsupported unless it is ``T`` or a ``[null, T]`` union (either
        order) of a plain primitive (or decimal bytes): the types the column converters expect."""
        branches = ftype if isinstance(ftype, list) else [ftype]
        if not 1 <= len(branches) <= 2 or branches.count("null") != len(branches) - 1:
            raise Unsupported("not a TiCDC column type")
        block = next(b for b in branches if b != "null")
        base = block.get("type") if isinstance(block, dict) else block
        if base not in _FAST_TYPES or isinstance(block, dict) and block.get("logicalType") not in (None, "decimal"):
            raise Unsupported("not a TiCDC column type")
        return len(branches) == 2

    def build_reader(self, fields: list[dict], columns: list[tuple[Column, Callable | None]], table: TableSchema,
                     extension: bool) -> Callable[[bytes, int | None, str], RowChange]:
        """``kind`` is used when the schema has no ``_tidb_op``; Unsupported when a type is left to fastavro."""
        nullable = [self._check_field(f["type"]) for f in fields]
        try:
            decode = codec_for(_codec_schema({"type": "record", "name": "row", "fields": list(fields)})).decoder()
        except Exception as e:  # noqa: BLE001 - a schema the codec does not take stays with fastavro
            raise Unsupported(f"schema the Avro codec refuses: {e}") from None
        s = self.src
        s.ns.update(_RC=RowChange, _table=table, _INSERT=INSERT, _UPDATE=UPDATE, _decode=decode,
                    _mul=_EXACT.multiply)
        s.emit(0, "def read(d, commit_ts, kind):")
        s.emit(1, "x = _decode(d[5:])")
        items, roles = [], {}
        cols = iter(columns)
        in_extension = False  # from _tidb_op on every field is an extension field (as AvroDecoder._plan)
        for f, null in zip(fields, nullable):
            name = f["name"]
            in_extension = in_extension or extension and name == OP_FIELD
            if in_extension and name not in (OP_FIELD, COMMIT_TS_FIELD, PHYSICAL_TIME_FIELD):
                raise Unsupported("extension fields beyond the three")
            if in_extension:
                roles[name] = f"x[{name!r}]"
                continue
            col, conv = next(cols)
            v = s.var("v")
            s.emit(1, f"{v} = x[{name!r}]")
            items.append(f"{col.name!r}: {v}")
            if conv is None:
                continue
            i = 1
            if null:
                s.emit(1, f"if {v} is not None:")
                i = 2
            decimal_ps = getattr(conv, "decimal", None)
            if conv is _unwrap_u64:
                s.emit(i, f"if {v} < 0:")
                s.emit(i + 1, f"{v} += {_2_64}")
            elif conv is parse_date:  # dates repeat: parse each text once (bounded memo per reader)
                memo, parse = _date_memo()
                m, c = s.const(memo, "_dm"), s.const(parse, "_dp")
                s.emit(i, f"{v} = {m}.get({v}) or {c}({v})")
            elif decimal_ps is not None:  # what _decimal_from_unscaled does
                precision, scale = decimal_ps
                s.emit(i, f"{v} = _from_bytes({v}, 'big', signed=True)")
                s.emit(i, f"if not -{10 ** precision} < {v} < {10 ** precision}:")
                s.emit(i + 1, "raise _M")
                unit = s.const(decimal.Decimal((0, (1,), -scale)), "_unit")
                s.emit(i, f"{v} = _mul(_Decimal({v}), {unit})")
            else:
                s.emit(i, f"{v} = {s.const(conv, '_c')}({v})")
        if next(cols, None) is not None:
            raise Unsupported("fields and columns differ")
        row = "{" + ", ".join(items) + "}"
        if extension:
            op, ts = roles[OP_FIELD], roles[COMMIT_TS_FIELD]
            s.emit(1, f"op = {op}")
            s.emit(1, "if op == 'c':")
            s.emit(2, "k = _INSERT")
            s.emit(1, "elif op == 'u':")
            s.emit(2, "k = _UPDATE")
            s.emit(1, "else:")
            s.emit(2, "raise _M")
            s.emit(1, f"ts = {ts}")
            s.emit(1, "if ts < 0:")
            s.emit(2, f"ts += {_2_64}")
            s.emit(1, f"return _RC(_table, k, ts, {row})")
        else:
            s.emit(1, f"return _RC(_table, kind, commit_ts or 0, {row})")
        return self._finish("read")


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
        # generated readers by the messages' first five bytes (magic + schema id), filled once the
        # fastavro path has checked a message with those headers: (key head, value head) / value
        # head (no key) for rows, key head for deletes
        self._fast: dict[Any, Callable] = {}
        self._fast_delete: dict[bytes, Callable] = {}
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
        if type(value) is bytes:
            if key is None:
                fast = self._fast.get(value[:5])
            else:
                fast = self._fast.get((key[:5], value[:5])) if type(key) is bytes else None
            if fast is not None:
                try:
                    return fast(value, commit_ts, INSERT)
                except Exception:  # noqa: BLE001 - the fastavro path below names what is wrong
                    pass
        elif value is None and type(key) is bytes:
            fast = self._fast_delete.get(key[:5])
            if fast is not None:
                try:
                    return fast(key, commit_ts, DELETE)
                except Exception:  # noqa: BLE001 - as above
                    pass
        if value is None:
            if key is None:
                raise MalformedMessage(CODEC, None, "message has neither key nor value")
            kid, kbody = self._frame(key, "key")
            plan = self._plan(None, kid, "key")
            row = self._read(plan, kbody, "key", 5)
            if plan.fast is not None and not plan.extension and type(key) is bytes and len(self._fast_delete) < 4096:
                self._fast_delete[key[:5]] = plan.fast
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
        vid, vbody = self._frame(value, "value")
        kid = None
        if key is not None:
            kid = self._frame(key, "key")[0]
        plan = self._plan(kid, vid, "value")
        row = self._read(plan, vbody, "value", 5)
        if plan.fast is not None and type(value) is bytes and len(self._fast) < 4096:
            if key is None:
                self._fast[value[:5]] = plan.fast
            elif type(key) is bytes:
                self._fast[(key[:5], value[:5])] = plan.fast
        kind, ts, extra = INSERT, commit_ts or 0, None
        if plan.extension:
            op = row.pop(OP_FIELD)
            t = row.pop(COMMIT_TS_FIELD)
            row.pop(PHYSICAL_TIME_FIELD)
            if op == "u":
                kind = UPDATE
            elif op != "c":
                raise MalformedMessage(CODEC, f"value field {OP_FIELD}", f"unknown operation {op!r}")
            ts = t + _2_64 if t < 0 else t
            if plan.extra_fields:
                extra = {}
                for f in plan.extra_fields:
                    v = row.pop(f)
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
    def _frame(data: bytes, part: str) -> tuple[int, memoryview]:
        if len(data) < 5:
            raise MalformedMessage(CODEC, f"{part} byte {len(data)}",
                                   f"Confluent Avro needs at least 5 bytes, got {len(data)}")
        magic, schema_id = _HEADER.unpack_from(data)
        if magic != MAGIC:
            raise MalformedMessage(CODEC, f"{part} byte 0", f"magic byte is {data[0]:#04x}, expected 0x00")
        return schema_id, memoryview(data)[5:]

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
        cols, convs, renames, extension, extra_fields, col_convs = [], [], False, False, [], []
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
            col_convs.append((col, conv))
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
        fast = None
        if not extra_fields:
            try:
                fast = _RowReaderGen().build_reader(raw["fields"], col_convs, table, extension)
            except Unsupported:
                fast = None
        plan = _DecodePlan(parsed, table, convs, renames, extension, tuple(extra_fields), fast)
        self._plans[(key_id, schema_id)] = plan
        return plan

    @staticmethod
    def _read(plan: _DecodePlan, body: memoryview, part: str, offset: int) -> dict:
        buf = io.BytesIO(body)
        try:
            row = schemaless_reader(buf, plan.schema, None)
        except Exception as e:  # noqa: BLE001 - truncated or not matching its schema
            raise MalformedMessage(CODEC, f"{part} byte {offset + buf.tell()}",
                                   f"body does not match schema ({type(e).__name__}: {e})") from None
        if buf.tell() != len(body):
            raise MalformedMessage(CODEC, f"{part} byte {offset + buf.tell()}",
                                   f"{len(body) - buf.tell()} bytes left after the Avro body")
        if plan.convs:
            name = None
            try:
                for name, col_name, conv in plan.convs:
                    v = row.pop(name) if plan.renames and name != col_name else row[name]
                    if v is not None and conv is not None:
                        v = conv(v)
                    row[col_name] = v
            except (ValueError, TypeError, OverflowError) as e:
                raise MalformedMessage(CODEC, f"{part} field {name}", f"bad value: {e}") from None
            if plan.renames:  # restore table column order
                row = {c.name: row[c.name] for c in plan.table.columns} | {
                    k: v for k, v in row.items() if k.startswith("_tidb_")}
        return row

    def _ddl(self, value: bytes) -> DDLEvent:
        try:
            body = json.loads(bytes(value[1:]))
            return DDLEvent(body["schema"], body["table"], body["query"], int(body["commitTs"]),
                            int(body["type"]) if body.get("type") is not None else None)
        except (ValueError, KeyError, TypeError) as e:
            raise MalformedMessage(CODEC, "value byte 1", f"bad DDL message: {e}") from None


def _estimate_ts(message_ms: int | None) -> int:
    """A DELETE's commit ts when nothing bounds it: the message time, else now, as a TSO
    (physical ms << 18)."""
    if message_ms is not None and message_ms > 0:
        return message_ms << 18
    return time.time_ns() // 1_000_000 << 18


_EXTRA_KEYS = {CHECKSUM_FIELD: EXTRA_CHECKSUM, CORRUPTED_FIELD: EXTRA_CORRUPTED,
               CHECKSUM_VERSION_FIELD: EXTRA_CHECKSUM_VERSION}

__all__ = [
    "AvroDecoder", "AvroEncoder", "AvroOptions", "StoreRegistry", "build_schema", "schema_text", "topic_subject",
]
