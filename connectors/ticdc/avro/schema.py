"""TiCDC's Avro schemas and the one mapping between TiDB column values and Avro datums.

Schemas are built exactly as TiCDC builds them (see docs/codec-avro.md): record name = sanitized
table, namespace ``default.<schema>``, column blocks with ``connect.parameters``, nullable unions
in both orders, decimal logical type, ``_tidb_*`` extension fields. Per column, one
converter each way: native value -> Avro datum, checking what Avro would otherwise change
silently (``_encoder_for``), and back (``_tidb_column``: a registered field -> column model and
Avro datum -> native value). The encoder, the decoder and the schema defaults all use these.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import functools
import json
import struct
from typing import Any, Callable, Iterable

from cdcflow.errors import ConfigError
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

from ..errors import UnrepresentableValue
from ..schema import sanitize_name

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


# --------------------------------------------------------------------------- native value -> Avro datum

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
                raise _bad(table, col, v, f"not a {t} value")
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



# --------------------------------------------------------------------------- Avro field -> column, datum -> native value


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
        col, conv = Column(name, tt, **kw), _parse_date_once
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


#: DATE texts repeat across rows: each parsed once (a bounded cache; dates are immutable)
_parse_date_once = functools.lru_cache(maxsize=4096)(parse_date)


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
    conv.decimal = (precision, scale)  # type: ignore[attr-defined]  # what the compiled twin reads (decode.py)
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

