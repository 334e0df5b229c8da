"""TiCDC open protocol: batch-framed JSON keys and values, both directions.

Pure functions over bytes (no I/O). A Kafka key is the batch version (1) then
repeated ``[8-byte big-endian length][key JSON]``; the value is repeated
``[length][value JSON]``, the n-th value belonging to the n-th key. See
``docs/codec-open-protocol.md`` for the wire shape and for what the format does
not carry (decimal scale/precision, ENUM/SET elements, fsp, lengths, defaults).

The decoder builds one ``TableSchema`` per distinct column signature and keeps
per-column converters with it, so a batch of rows of one table costs one dict
lookup per row plus one converter call per non-NULL value.
"""

from __future__ import annotations

import binascii
import datetime as _dt
import re
import struct
import threading
from decimal import Decimal, InvalidOperation
from sys import intern as _intern
from typing import Any, Callable, Iterable, Mapping

import orjson

from cdcflow import accel
from cdcflow.errors import ConfigError
from cdcflow.record import META_PAYLOAD_SCHEMA_SUBJECT, META_PAYLOAD_SCHEMA_VERSION, Operation, Record
from cdcflow.tidb import (
    BINARY_TYPES,
    INLINE_NAMES,
    Column,
    TableSchema,
    b64decode_strict,
    inline_parse_expr,
    inline_text_expr,
    parse_date,
    parse_datetime,
)
from cdcflow.tidb import format_date as date_text
from cdcflow.tidb import format_datetime as datetime_text
from cdcflow.tidb import format_decimal as decimal_text
from cdcflow.tidb import format_time as time_text

# TiDB's text forms of DECIMAL and temporal values have one implementation, shared
# by the text codecs; open protocol writes the same text inside JSON strings.
from .canal_json import parse_time
from .errors import CodecError, MalformedMessage, UnrepresentableValue, UnsupportedEvent
from .events import (
    DELETE,
    INSERT,
    META_CLAIM_CHECK_LOCATION,
    META_COMMIT_TS,
    META_CONTROL,
    META_ONLY_HANDLE_KEY,
    META_PARTITION,
    UPDATE,
    DDLEvent,
    Event,
    ResolvedEvent,
    RowChange,
    from_record,
    from_records,
    referenced_table,
)

CODEC = "open-protocol"
BATCH_VERSION = 1

# Message types (key "t").
TYPE_ROW, TYPE_DDL, TYPE_RESOLVED = 1, 2, 3

# Column flags ("f").
FLAG_BINARY = 0x01
FLAG_HANDLE_KEY = 0x02
FLAG_GENERATED = 0x04
FLAG_PRIMARY_KEY = 0x08
FLAG_UNIQUE_KEY = 0x10
FLAG_MULTIPLE_KEY = 0x20
FLAG_NULLABLE = 0x40
FLAG_UNSIGNED = 0x80

# MySQL type codes ("t") <-> the column model's base type.
TYPE_CODES: dict[str, int] = {
    "TINYINT": 1, "SMALLINT": 2, "INT": 3, "FLOAT": 4, "DOUBLE": 5, "TIMESTAMP": 7,
    "BIGINT": 8, "MEDIUMINT": 9, "DATE": 10, "TIME": 11, "DATETIME": 12, "YEAR": 13,
    "VARCHAR": 15, "VARBINARY": 15, "BIT": 16, "JSON": 245, "DECIMAL": 246, "ENUM": 247,
    "SET": 248, "TINYTEXT": 249, "TINYBLOB": 249, "MEDIUMTEXT": 250, "MEDIUMBLOB": 250,
    "LONGTEXT": 251, "LONGBLOB": 251, "TEXT": 252, "BLOB": 252, "CHAR": 254, "BINARY": 254,
}
# Decoding: (text type, binary twin). 253 (var_string) is read as VARCHAR.
_CODE_TYPES: dict[int, tuple[str, str]] = {
    1: ("TINYINT", "TINYINT"), 2: ("SMALLINT", "SMALLINT"), 3: ("INT", "INT"),
    4: ("FLOAT", "FLOAT"), 5: ("DOUBLE", "DOUBLE"), 7: ("TIMESTAMP", "TIMESTAMP"),
    8: ("BIGINT", "BIGINT"), 9: ("MEDIUMINT", "MEDIUMINT"), 10: ("DATE", "DATE"),
    11: ("TIME", "TIME"), 12: ("DATETIME", "DATETIME"), 13: ("YEAR", "YEAR"),
    15: ("VARCHAR", "VARBINARY"), 16: ("BIT", "BIT"), 245: ("JSON", "JSON"),
    246: ("DECIMAL", "DECIMAL"), 247: ("ENUM", "ENUM"), 248: ("SET", "SET"),
    249: ("TINYTEXT", "TINYBLOB"), 250: ("MEDIUMTEXT", "MEDIUMBLOB"),
    251: ("LONGTEXT", "LONGBLOB"), 252: ("TEXT", "BLOB"), 253: ("VARCHAR", "VARBINARY"),
    254: ("CHAR", "BINARY"), 14: ("DATE", "DATE"),  # 14: MySQL's NEWDATE, a date
}
# Type codes TiCDC does not write but its consumer passes through with their JSON value (any
# byte): columns named after the MySQL type, values kept as their JSON text (strings as they are).
_PASS_THROUGH_TYPES = {6: "NULL", 225: "VECTOR", 255: "GEOMETRY"}
_INT_CODES = frozenset({1, 2, 3, 8, 9})
_BLOB_CODES = frozenset({249, 250, 251, 252})
_STRING_CODES = frozenset({15, 253, 254})

# Extra metadata (``ticdc.*``) for key fields the event model has no slot for.
EXTRA_ROW_ID = "ticdc.row-id"
EXTRA_ONLY_HANDLE_KEY = META_ONLY_HANDLE_KEY
EXTRA_CLAIM_CHECK = META_CLAIM_CHECK_LOCATION

# Kafka's per-record overhead TiCDC adds when sizing a message, and its per-row slack.
_RECORD_OVERHEAD = 36
_ROW_SLACK = 16

_LEN = struct.Struct(">Q")
_VERSION_BYTES = _LEN.pack(BATCH_VERSION)
_ZERO_LEN = _LEN.pack(0)

_INT_RANGE = {  # signed, unsigned bounds per integer type
    1: ((-(1 << 7), (1 << 7) - 1), (0, (1 << 8) - 1)),
    2: ((-(1 << 15), (1 << 15) - 1), (0, (1 << 16) - 1)),
    9: ((-(1 << 23), (1 << 23) - 1), (0, (1 << 24) - 1)),
    3: ((-(1 << 31), (1 << 31) - 1), (0, (1 << 32) - 1)),
    8: ((-(1 << 63), (1 << 63) - 1), (0, (1 << 64) - 1)),
}
_MAX_TIME = _dt.timedelta(hours=838, minutes=59, seconds=59)


class VersionMismatch(MalformedMessage):
    """The key's batch version is not 1."""


class UnknownTypeCode(MalformedMessage):
    """A column's ``t`` is not a MySQL type code this codec knows."""


class MessageTooLarge(CodecError):
    """One row alone exceeds ``max-message-bytes``."""


# ---------------------------------------------------------------------------
# Go string quoting (VARCHAR/CHAR/VARBINARY values with a binary charset)
# ---------------------------------------------------------------------------

_GO_SIMPLE_ESC = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                  "\t": "\\t", "\v": "\\v", '"': '\\"', "\\": "\\\\"}
_GO_PLAIN = re.compile(r'[ !#-\[\]-~]*')  # printable ASCII except " and \
_GO_UNESC = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, '"': 34, "'": 39}
_GO_ESCAPE = re.compile(r"\\(?:x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|([0-7]{3})|(.))", re.S)


def go_quote(data: bytes) -> str:
    """Go's ``strconv.Quote`` without the outer quotes, as TiCDC writes binary strings:
    printable runes as they are, invalid UTF-8 bytes and control bytes as ``\\xNN``."""
    text = data.decode("utf-8", "surrogateescape")
    if _GO_PLAIN.fullmatch(text):
        return text
    out = []
    for ch in text:
        o = ord(ch)
        if 0xDC80 <= o <= 0xDCFF:  # a byte that is not valid UTF-8
            out.append("\\x%02x" % (o - 0xDC00))
        elif ch in _GO_SIMPLE_ESC:
            out.append(_GO_SIMPLE_ESC[ch])
        elif ch.isprintable():  # Python's and Go's "printable" are the same categories
            out.append(ch)
        elif o < 0x20 or o == 0x7F:
            out.append("\\x%02x" % o)
        elif o < 0x10000:
            out.append("\\u%04x" % o)
        else:
            out.append("\\U%08x" % o)
    return "".join(out)


def go_unquote(text: str) -> bytes:
    """Inverse of ``go_quote`` (Go's ``strconv.Unquote`` of ``"`` + text + ``"``).
    Raises ValueError on an escape Go would reject."""
    if "\\" not in text:
        return text.encode("utf-8")
    out = bytearray()
    pos = 0
    for m in _GO_ESCAPE.finditer(text):
        out += text[pos:m.start()].encode("utf-8")
        pos = m.end()
        hx, u4, u8, octal, simple = m.groups()
        if hx is not None:
            out.append(int(hx, 16))
        elif octal is not None:
            n = int(octal, 8)
            if n > 255:
                raise ValueError(f"octal escape \\{octal} out of range at char {m.start()}")
            out.append(n)
        elif u4 is not None or u8 is not None:
            n = int(u4 or u8, 16)
            if n > 0x10FFFF or 0xD800 <= n <= 0xDFFF:
                raise ValueError(f"invalid code point escape {m.group(0)} at char {m.start()}")
            out += chr(n).encode("utf-8")
        else:
            code = _GO_UNESC.get(simple)
            if code is None or simple == "'":
                raise ValueError(f"invalid escape \\{simple} at char {m.start()}")
            out.append(code)
    if text.find("\\", pos) != -1:
        raise ValueError(f"dangling backslash at char {text.find(chr(92), pos)}")
    out += text[pos:].encode("utf-8")
    return bytes(out)


# ---------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------

_F32 = struct.Struct("<f")
_INF = float("inf")


def to_float32(v: float) -> float:
    """The float32 a FLOAT column holds for this number (TiDB FLOAT is 32-bit)."""
    try:
        return _F32.unpack(_F32.pack(v))[0]
    except OverflowError:
        raise ValueError(f"{v!r} is out of FLOAT range") from None


def float32_short(v: float) -> float | None:
    """The double with the shortest text that still reads back as float32 ``v``
    (so JSON carries ``0.1`` for FLOAT 0.1, as TiCDC writes it), or None when
    ``v`` is not exactly a float32."""
    try:
        if to_float32(v) != v:
            return None
    except ValueError:
        return None
    for digits in range(1, 10):
        short = float("%.*g" % (digits, v))
        try:
            if to_float32(short) == v:
                return short
        except ValueError:  # rounded past the float32 range
            continue
    return v


# ---------------------------------------------------------------------------
# Column model <-> type code and flags
# ---------------------------------------------------------------------------

def type_code(column: Column) -> int:
    try:
        return TYPE_CODES[column.type]
    except KeyError:
        raise UnsupportedEvent(CODEC, column.name, f"column type {column.type} has no open-protocol type code") from None


def is_binary(column: Column) -> bool:
    return column.binary or column.type in BINARY_TYPES


def column_flags(column: Column) -> int:
    f = 0
    if is_binary(column):
        f |= FLAG_BINARY
    if column.handle_key:
        f |= FLAG_HANDLE_KEY
    if column.generated:
        f |= FLAG_GENERATED
    if column.primary_key:
        f |= FLAG_PRIMARY_KEY
    if column.unique_key:
        f |= FLAG_UNIQUE_KEY
    if column.multiple_key:
        f |= FLAG_MULTIPLE_KEY
    if column.nullable:
        f |= FLAG_NULLABLE
    if column.unsigned:
        f |= FLAG_UNSIGNED
    return f


def _code_types(code: int) -> tuple[str, str]:
    hit = _CODE_TYPES.get(code)
    if hit is None:
        name = _PASS_THROUGH_TYPES.get(code) or f"MYSQL_TYPE_{code}"
        return name, name
    return hit


def column_from_wire(name: str, code: int, flags: int, handle: bool = False) -> Column:
    """Fill the column model as far as a type code and flags carry it."""
    text_type, binary_type = _code_types(code)
    binary = bool(flags & FLAG_BINARY) and text_type != binary_type
    return Column(
        name=name,
        type=binary_type if binary else text_type,
        unsigned=bool(flags & FLAG_UNSIGNED),
        nullable=bool(flags & FLAG_NULLABLE),
        primary_key=bool(flags & FLAG_PRIMARY_KEY),
        handle_key=bool(flags & FLAG_HANDLE_KEY) or handle,
        unique_key=bool(flags & FLAG_UNIQUE_KEY),
        multiple_key=bool(flags & FLAG_MULTIPLE_KEY),
        binary=binary,
        generated=bool(flags & FLAG_GENERATED),
    )


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------

# The compiled decoder (None: pure Python). It reads messages of table signatures this module
# has seen (a ``RowPlan`` per ``_TableDecoding``) and returns None for anything else, which the
# Python path below then decodes or rejects with the typed error.
_decode_kernel = accel.load("cdcflow.connectors.ticdc._open_protocol_decode")

def _wire_to_native(code: int, flags: int, hint: Column | None) -> Callable[[Any], Any]:
    """Converter for one column's JSON value (never called with None).
    Raises TypeError/ValueError; the caller wraps them with context."""
    if code in _INT_CODES:
        lo, hi = _INT_RANGE[code][1 if flags & FLAG_UNSIGNED else 0]

        def conv_int(v):
            if type(v) is not int or not lo <= v <= hi:
                raise ValueError("not an integer in the column's range")
            return v
        return conv_int
    if code == 13 or code == 16:
        hi = 2155 if code == 13 else (1 << 64) - 1

        def conv_uint(v):
            if type(v) is not int or not 0 <= v <= hi:
                raise ValueError("not a non-negative integer in range")
            return v
        return conv_uint
    if code == 5:
        def conv_double(v):
            t = type(v)
            if t is float:
                return v
            if t is int:
                return float(v)
            raise ValueError("not a number")
        return conv_double
    if code == 4:
        def conv_float(v):
            t = type(v)
            if t is not float and t is not int:
                raise ValueError("not a number")
            return to_float32(v)
        return conv_float
    if code == 246:
        def conv_decimal(v):
            d = Decimal(v)
            if not d.is_finite():
                raise ValueError("not a finite decimal")
            return d
        return conv_decimal
    if code == 10 or code == 14:
        return _text_then(parse_date)
    if code == 7 or code == 12:
        return _text_then(parse_datetime)
    if code == 11:
        return _text_then(parse_time)
    if code == 245:
        return _expect_str
    if code == 247:
        elements = hint.elements if hint is not None and hint.type == "ENUM" else ()
        if not elements:
            return _uint_text
        names = ("",) + tuple(elements)

        def conv_enum(v):
            if type(v) is not int or not 0 <= v < len(names):
                raise ValueError(f"ENUM index is not an integer in 0..{len(names) - 1}")
            return names[v]
        conv_enum.names = names
        return conv_enum
    if code == 248:
        elements = hint.elements if hint is not None and hint.type == "SET" else ()
        if not elements:
            return _uint_text
        members = tuple(elements)
        limit = 1 << len(members)

        def conv_set(v):
            if type(v) is not int or not 0 <= v < limit:
                raise ValueError("SET bitmask is not an integer within the elements")
            return ",".join(e for i, e in enumerate(members) if v >> i & 1)
        return conv_set
    if code in _BLOB_CODES:
        if flags & FLAG_BINARY:
            return _b64_bytes
        return _b64_text
    if code in _STRING_CODES:
        if flags & FLAG_BINARY:
            return _go_bytes
        return _expect_str
    return _json_text


def _text_then(parse: Callable[[str], Any]) -> Callable[[Any], Any]:
    def conv(v):
        if type(v) is not str:
            raise ValueError("not a string")
        return parse(v)
    return conv


def _expect_str(v):
    if type(v) is not str:
        raise ValueError("not a string")
    return v


def _json_text(v):
    """A value of a type code TiCDC passes through: a string as it is, anything else its JSON text."""
    return v if type(v) is str else orjson.dumps(v).decode()


def _uint_text(v):
    """ENUM index / SET bitmask whose elements are unknown: kept as its decimal
    text, the same fallback the canal-json decoder uses."""
    if type(v) is not int or v < 0:
        raise ValueError("not a non-negative integer")
    return str(v)


def _b64_bytes(v):
    if type(v) is not str:
        raise ValueError("not a base64 string")
    return b64decode_strict(v)


def _b64_text(v):
    return _b64_bytes(v).decode("utf-8")


def _go_bytes(v):
    if type(v) is not str:
        raise ValueError("not a string")
    return go_unquote(v)


class _TableDecoding:
    """A table as one column signature shows it, with a converter per column."""

    __slots__ = ("table", "columns", "specs", "convert", "kernel_plan", "key_suffix")

    def __init__(self, table: TableSchema, columns: dict[str, tuple[int, int, Callable]]):
        self.table = table
        self.columns = columns  # name -> (type code, flags, converter)
        # the same in the message's column order, for the fast path
        self.specs = tuple((name, t, f, conv) for name, (t, f, conv) in columns.items())
        self.convert = _compile_convert(self.specs)
        self.kernel_plan = None  # the compiled decoder's RowPlan, once registered (_register_plan)
        self.key_suffix = b""  # the key JSON after '{"ts":N' that names this table


def _native_expr(code: int, flags: int, conv: Callable[[Any], Any], v: str, ns: dict[str, Any], i: int) -> str:
    """Python expression converting the JSON value in variable ``v`` as ``conv`` (from
    ``_wire_to_native``) does, inline for the common types; anything else calls ``conv``."""
    if code in _INT_CODES:
        lo, hi = _INT_RANGE[code][1 if flags & FLAG_UNSIGNED else 0]
        return f"({v} if type({v}) is int and {lo} <= {v} <= {hi} else _bad())"
    if conv is _expect_str:
        return f"({v} if type({v}) is str else _bad())"
    if code == 5:
        return f"({v} if type({v}) is float else float({v}) if type({v}) is int else _bad())"
    if code == 246:
        return f"(x if (x := Decimal({v})).is_finite() else _bad())"
    if code == 10:
        ns[f"m{i}"] = {}
        return inline_parse_expr("DATE", v, "_bad()", memo=f"m{i}")
    if code == 7 or code == 12:
        return inline_parse_expr("DATETIME", v, "_bad()")
    if conv is _b64_text:
        return f"_a2b({v}).decode('utf-8')"
    if conv is _b64_bytes:
        return f"_a2b({v})"
    ns[f"f{i}"] = conv
    if conv.__name__ == "conv_enum":  # element names by index, range-checked
        ns[f"e{i}"] = conv.names
        return f"(e{i}[{v}] if type({v}) is int and 0 <= {v} < {len(conv.names)} else _bad())"
    return f"f{i}({v})"


def _compile_convert(specs) -> Callable[[dict], dict | None]:
    """Generate ``image -> row`` for one column signature: type code and flags checked and the
    value converted per column in one function body (the common types inline, see
    ``_native_expr``); None on any surprise, so the checked path can say what is wrong."""
    namespace: dict[str, Any] = {"_expect_str": _expect_str, "Decimal": Decimal, "_a2b": b64decode_strict,
                                 **INLINE_NAMES}
    checks, items = [], []
    for i, (name, t, f, conv) in enumerate(specs):
        c, v = f"c{i}", f"v{i}"
        checks.append(f"{c} = image[{name!r}]")
        checks.append(f"if {c}['t'] != {t} or {c}['f'] != {f}: return None")
        items.append(f"{name!r}: None if ({v} := {c}['v']) is None else {_native_expr(t, f, conv, v, namespace, i)}")
    source = ("def convert(image):\n"
              f"    if len(image) != {len(specs)}:\n        return None\n"
              "    try:\n"
              + "".join(f"        {line}\n" for line in checks)
              + "        return {" + ", ".join(items) + "}\n"
              "    except Exception:\n        return None\n")
    namespace["_bad"] = _bad_value
    exec(compile(source, "<cdcflow.open-protocol row converter>", "exec"), namespace)
    return namespace["convert"]


def _bad_value():
    raise ValueError("value does not fit its column")


class OpenProtocolDecoder:
    """Decode one Kafka message (key, value) into its events.

    ``tables`` optionally gives the full column model per ``schema.table`` (a
    mapping or a callable returning a ``TableSchema`` or None), e.g. from a
    schema registry or the travelling schema. With it, ENUM indexes and SET
    bitmasks decode to element names and the event carries that richer table;
    without it they decode to their decimal text (``"2"``, the format has no
    elements; canal-json's decoder does the same) and the table is built from
    type codes and flags alone.
    """

    def __init__(self, tables: Mapping[str, TableSchema] | Callable[[str], TableSchema | None] | None = None):
        if tables is None:
            self._lookup = None
        elif callable(tables):
            self._lookup = tables
        else:
            self._lookup = tables.get
        self._cache: dict[tuple, _TableDecoding] = {}
        # for the compiled decoder: key suffix -> RowPlans of the cached tables it names
        self._plans: dict[bytes, list] = {}
        self._kernel = None  # the compiled decoder (_open_protocol_decode.Decoder), made on first use

    # -- framing -----------------------------------------------------------

    def decode(self, key: bytes, value: bytes | None) -> list[Event]:
        """All events of one message, in order."""
        if _decode_kernel is not None:
            kernel = self._kernel
            if kernel is None or type(kernel) is not _decode_kernel.Decoder:
                kernel = self._kernel = _decode_kernel.Decoder(self._plans, RowChange, ResolvedEvent,
                                                               INSERT, UPDATE, DELETE)
            events = kernel.decode(key, value)
            if events is not None:
                return events
        return self._decode(key, value)

    def _decode(self, key: bytes, value: bytes | None) -> list[Event]:
        """``decode`` on the Python path: every message, and the errors with their position."""
        if key is None:
            raise MalformedMessage(CODEC, None, "open-protocol messages always have a key")
        key = bytes(key) if not isinstance(key, bytes) else key
        value = b"" if value is None else bytes(value) if not isinstance(value, bytes) else value
        if len(key) < 8:
            raise MalformedMessage(CODEC, 0, f"key of {len(key)} bytes is shorter than the 8-byte batch version")
        version = _LEN.unpack_from(key, 0)[0]
        if version != BATCH_VERSION:
            raise VersionMismatch(CODEC, 0, f"key batch version is {version}, expected {BATCH_VERSION}")
        events: list[Event] = []
        kpos, vpos = 8, 0
        klen, vlen = len(key), len(value)
        while kpos < klen:
            kstart, k, kpos = _object_entry(key, kpos, klen, "key")
            mtype = k.get("t")
            ts = k.get("ts")
            if type(ts) is not int or ts < 0:
                raise MalformedMessage(CODEC, f"key byte {kstart}", f"key 'ts' must be an unsigned integer, got {ts!r}")
            if mtype == TYPE_RESOLVED:
                if vpos < vlen:
                    vstart, vdoc, vpos = _frame(value, vpos, vlen, "value")
                    if vdoc:
                        raise MalformedMessage(CODEC, f"value byte {vstart}",
                                               "resolved event value must be empty")
                events.append(ResolvedEvent(ts))
                continue
            if vpos >= vlen:
                raise MalformedMessage(CODEC, f"value byte {vpos}",
                                       f"value has fewer entries than the key (key entry at byte {kstart})")
            vstart, v, vpos = _object_entry(value, vpos, vlen, "value")
            if mtype == TYPE_ROW:
                events.append(self._row(k, v, ts, vstart))
            elif mtype == TYPE_DDL:
                events.append(_ddl(k, v, ts, vstart))
            else:
                raise MalformedMessage(CODEC, f"key byte {kstart}", f"unknown message type t={mtype!r}")
        if vpos < vlen:
            raise MalformedMessage(CODEC, f"value byte {vpos}", "value has more entries than the key")
        return events

    def decode_many(self, messages: Iterable[tuple[bytes, bytes | None]]) -> list[Event]:
        out: list[Event] = []
        for key, value in messages:
            out.extend(self.decode(key, value))
        return out

    # -- rows --------------------------------------------------------------

    def _row(self, k: dict, v: dict, ts: int, vstart: int) -> RowChange:
        scm = k.get("scm", "")
        tbl = k.get("tbl", "")
        if type(scm) is not str or type(tbl) is not str:
            raise MalformedMessage(CODEC, f"value byte {vstart}", "key 'scm'/'tbl' must be strings")
        ptn = k.get("ptn")
        new = v.get("u")
        if new is not None:
            old = v.get("p")
            kind = UPDATE if old is not None else INSERT
            image = new
        else:
            image = v.get("d")
            if image is None:
                raise MalformedMessage(CODEC, f"value byte {vstart}", "row value has none of 'u', 'd'")
            old = None
            kind = DELETE
        if type(image) is not dict or (old is not None and type(old) is not dict):
            raise MalformedMessage(CODEC, f"value byte {vstart}", "row image is not an object")
        part = "u" if kind != DELETE else "d"
        dec = self._cache.get((scm, tbl, ptn, tuple(image)))
        if dec is None:
            dec = self._table_for(scm, tbl, ptn, image, vstart)
        row = dec.convert(image)
        if row is None:  # something is off: the checked path says what, or the schema changed
            try:
                row = _convert(dec, image, vstart, part)
            except _SignatureChanged:  # same column names, other types/flags
                self._forget(self._cache.pop((scm, tbl, ptn, tuple(image)), None))
                dec = self._table_for(scm, tbl, ptn, image, vstart)
                row = _convert(dec, image, vstart, part, strict=True)
        if dec.kernel_plan is None and _decode_kernel is not None:
            self._register_plan(dec, scm, tbl, ptn)
        old_row = None
        if old is not None:
            if len(old) == len(image):
                old_row = dec.convert(old)
            if old_row is None:
                old_row = _convert(dec, old, vstart, "p", strict=True)
        extra = None
        if len(k) > 4:  # only rid/ohk/ccl make a key longer than ts, scm, tbl, t (+ptn)
            extra = {}
            rid = k.get("rid")
            if rid:
                extra[EXTRA_ROW_ID] = str(rid)
            if k.get("ohk"):
                extra[EXTRA_ONLY_HANDLE_KEY] = "true"
            ccl = k.get("ccl")
            if ccl:
                extra[EXTRA_CLAIM_CHECK] = str(ccl)
        return RowChange(dec.table, kind, ts, row, old_row, extra if extra else {})

    def _table_for(self, scm: str, tbl: str, ptn, image: dict, vstart: int) -> _TableDecoding:
        sig = (scm, tbl, ptn, tuple(image))
        dec = self._cache.get(sig)
        if dec is not None:
            return dec
        if ptn is not None and type(ptn) is not int:
            raise MalformedMessage(CODEC, f"value byte {vstart}", f"key 'ptn' must be an integer, got {ptn!r}")
        hint = self._lookup(f"{scm}.{tbl}") if self._lookup is not None else None
        columns: list[Column] = []
        convs: dict[str, tuple[int, int, Callable]] = {}
        for name, c in image.items():
            if type(c) is not dict:
                raise MalformedMessage(CODEC, f"value byte {vstart}", f"column {name!r} is not an object")
            code, flags = c.get("t"), c.get("f", 0)
            if type(code) is not int or type(flags) is not int:
                raise MalformedMessage(CODEC, f"value byte {vstart}",
                                       f"column {name!r}: 't' and 'f' must be integers")
            if not 0 <= code <= 255:  # TiCDC's column type is one byte
                raise UnknownTypeCode(CODEC, f"value byte {vstart}, column {name}",
                                      f"MySQL type code {code} is not a byte ({scm}.{tbl})")
            hint_col = None
            if hint is not None and name in hint.index:
                hint_col = hint.column(name)
            columns.append(column_from_wire(name, code, flags, c.get("h") is True))
            convs[name] = (code, flags, _wire_to_native(code, flags, hint_col))
        table = TableSchema(scm, tbl, tuple(columns), partition=ptn)
        if hint is not None and _hint_fits(hint, table, ptn):
            table = hint
        dec = _TableDecoding(table, convs)
        if len(self._cache) > 4096:
            self._cache.clear()
            self._plans.clear()
        self._cache[sig] = dec
        return dec

    # -- the compiled decoder's plans mirror the cache ----------------------

    def _register_plan(self, dec: _TableDecoding, scm: str, tbl: str, ptn) -> None:
        """Let the compiled decoder read rows of ``dec``'s signature: keyed by the key JSON after
        the ts as TiCDC writes it for this table (Go's field order, empty names omitted)."""
        head: dict[str, Any] = {}
        if scm:
            head["scm"] = scm
        if tbl:
            head["tbl"] = tbl
        if ptn is not None:
            head["ptn"] = ptn
        head["t"] = TYPE_ROW
        dec.key_suffix = b"," + orjson.dumps(head)[1:]
        dec.kernel_plan = _decode_plan(dec)
        self._plans.setdefault(dec.key_suffix, []).append(dec.kernel_plan)

    def _forget(self, dec: _TableDecoding | None) -> None:
        """Drop a table signature the cache dropped (its columns changed type or flags)."""
        if dec is not None and dec.kernel_plan is not None:
            plans = self._plans.get(dec.key_suffix, [])
            if dec.kernel_plan in plans:
                plans.remove(dec.kernel_plan)


def _decode_plan(dec: _TableDecoding):
    """The compiled decoder's RowPlan for one table signature: per column the exact bytes
    around its value (``"name":{"t":CODE,`` and ``"f":FLAGS,"v":``), the value kind with its
    bounds, and the Python converter the kernel calls for values off the kind's fast path."""
    k = _decode_kernel
    specs = []
    for name, t, f, conv in dec.specs:
        lo = hi = 0
        aux = None
        if t in _INT_CODES or t == 13 or t == 16:
            kind = k.K_INT
            lo, hi = (_INT_RANGE[t][1 if f & FLAG_UNSIGNED else 0] if t in _INT_CODES
                      else (0, 2155) if t == 13 else (0, (1 << 64) - 1))
        elif t == 5 or t == 4:
            kind = k.K_DOUBLE if t == 5 else k.K_FLOAT
        elif t == 246:
            kind = k.K_DECIMAL
        elif t == 10:
            kind = k.K_DATE
        elif t == 7 or t == 12:
            kind = k.K_DATETIME
        elif t == 11:
            kind = k.K_TIME
        elif conv is _expect_str:
            kind = k.K_STR
        elif conv is _go_bytes:
            kind = k.K_GO_BYTES
        elif conv is _b64_bytes:
            kind = k.K_B64_BYTES
        elif conv is _b64_text:
            kind = k.K_B64_TEXT
        elif conv is _uint_text:
            kind = k.K_UINT_TEXT
        elif getattr(conv, "names", None) is not None:  # conv_enum with the hint's elements
            kind, aux = k.K_ENUM_NAME, conv.names
        else:  # SET with elements: the converter does it
            kind = k.K_CONV
        specs.append((orjson.dumps(name) + b':{"t":%d,' % t, b'"f":%d,"v":' % f, name, kind, lo, hi, conv, aux))
    return k.RowPlan(dec.table, tuple(specs))


def _hint_fits(hint: TableSchema, wire: TableSchema, ptn) -> bool:
    """The hinted table replaces the wire one only when it describes the same
    columns with the same type codes (otherwise the schema moved on)."""
    if len(hint.columns) != len(wire.columns) or hint.partition != ptn:
        return False
    for col in wire.columns:
        if col.name not in hint.index:
            return False
        h = hint.column(col.name)
        if TYPE_CODES.get(h.type) != TYPE_CODES.get(col.type, -1) and not (
                col.type == "VARCHAR" and h.type in ("VARCHAR", "VARBINARY")):
            return False
    return True


class _SignatureChanged(Exception):
    """A column's type code or flags differ from the cached table's."""


def _convert(dec: _TableDecoding, image: dict, vstart: int, part: str, strict: bool = False) -> dict:
    convs = dec.columns
    out = {}
    for name, c in image.items():
        spec = convs.get(name)
        try:
            v = c["v"]
            if spec is None or c["t"] != spec[0] or c.get("f", 0) != spec[1]:
                if not strict and spec is not None:
                    raise _SignatureChanged
                raise MalformedMessage(
                    CODEC, f"value byte {vstart}, {part}.{name}",
                    f"column {name!r} does not match the row's columns ({dec.table.collection})")
            out[name] = None if v is None else spec[2](v)
        except (CodecError, _SignatureChanged):
            raise
        except (KeyError, TypeError) as e:
            raise MalformedMessage(CODEC, f"value byte {vstart}, {part}.{name}",
                                   f"column {name!r} is not {{t, f, v}} ({dec.table.collection}): {e!r}") from None
        except (ValueError, InvalidOperation, binascii.Error, UnicodeDecodeError, IndexError, OverflowError) as e:
            raise MalformedMessage(CODEC, f"value byte {vstart}, {part}.{name}",
                                   f"bad value {c.get('v')!r} for type code {c.get('t')} "
                                   f"({dec.table.collection}): {e}") from None
    return out


def _ddl(k: dict, v: dict, ts: int, vstart: int) -> DDLEvent:
    query = v.get("q")
    ddl_type = v.get("t", 0)
    if type(query) is not str or type(ddl_type) is not int:
        raise MalformedMessage(CODEC, f"value byte {vstart}", "DDL value must be {\"q\": string, \"t\": integer}")
    scm, tbl = k.get("scm", ""), k.get("tbl", "")
    if type(scm) is not str or type(tbl) is not str:
        raise MalformedMessage(CODEC, f"value byte {vstart}", "key 'scm'/'tbl' must be strings")
    return DDLEvent(scm, tbl, query, ts, ddl_type or None)


def _frame(buf: bytes, pos: int, end: int, what: str) -> tuple[int, bytes, int]:
    """One ``[length][payload]`` entry at ``pos`` -> (payload start, payload, next pos)."""
    if pos + 8 > end:
        raise MalformedMessage(CODEC, f"{what} byte {pos}",
                               f"truncated {what}: {end - pos} bytes left where an 8-byte length belongs")
    n = _LEN.unpack_from(buf, pos)[0]
    start = pos + 8
    if n > end - start:
        raise MalformedMessage(CODEC, f"{what} byte {pos}",
                               f"{what} entry length {n} exceeds the {end - start} bytes left")
    return start, buf[start:start + n], start + n


def _object_entry(buf: bytes, pos: int, end: int, what: str) -> tuple[int, dict, int]:
    """The JSON object of the ``[length][payload]`` entry at ``pos`` -> (payload start, object, next pos).

    The in-bounds case is checked inline; ``_frame`` words the error otherwise."""
    start = pos + 8
    if start > end or (stop := start + _LEN.unpack_from(buf, pos)[0]) > end:
        _frame(buf, pos, end, what)  # raises the error naming the byte
    try:
        obj = orjson.loads(buf[start:stop])
    except orjson.JSONDecodeError as e:
        raise MalformedMessage(CODEC, f"{what} byte {start}", f"{what} JSON is invalid: {e}") from None
    if type(obj) is not dict:
        raise MalformedMessage(CODEC, f"{what} byte {start}", f"{what} JSON is not an object")
    return start, obj, stop


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------

DEFAULT_OPTIONS = {
    "max-batch-size": 16,
    "max-message-bytes": 10 * 1024 * 1024,
    "output-old-value": True,
    "only-output-updated-columns": False,
    "delete-only-output-handle-key-columns": False,
}


def _options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(DEFAULT_OPTIONS)
    for name, value in (options or {}).items():
        if name not in DEFAULT_OPTIONS:
            raise ConfigError(CODEC, name, "known-option", f"unknown option; known: {sorted(DEFAULT_OPTIONS)}")
        default = DEFAULT_OPTIONS[name]
        if isinstance(default, bool):
            if isinstance(value, str) and value.lower() in ("true", "false"):
                value = value.lower() == "true"
            if not isinstance(value, bool):
                raise ConfigError(CODEC, name, "bool", f"expected true or false, got {value!r}")
        else:
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise ConfigError(CODEC, name, "int", f"expected an integer, got {value!r}") from None
            if value < 1:
                raise ConfigError(CODEC, name, "positive", f"must be at least 1, got {value}")
        out[name] = value
    return out


def _int_bounds(code: int, col) -> tuple[int, int]:
    """Inclusive range of an integer-coded column: its TiDB int type, YEAR (13) or BIT(n) (16)."""
    if code in _INT_CODES:
        return _INT_RANGE[code][1 if col.unsigned else 0]
    if code == 13:
        return 0, 2155
    return 0, (1 << (col.length or 64)) - 1


def _native_to_wire(table: TableSchema, col: Column) -> Callable[[Any], Any]:
    """Converter for one column's native value (never None) to its JSON value.
    Raises UnrepresentableValue naming table, column and value."""
    code = type_code(col)
    where = table.collection

    def bad(v, why):
        return UnrepresentableValue(CODEC, where, col.name, v, why)

    if code in _INT_CODES or code == 13 or code == 16:
        lo, hi = _int_bounds(code, col)

        def enc_int(v):
            if type(v) is not int or not lo <= v <= hi:
                raise bad(v, f"{col.type} needs an int in [{lo}, {hi}]")
            return v
        return enc_int
    if code == 5:
        def enc_double(v):
            if type(v) is not float or v != v or v in (_INF, -_INF):
                raise bad(v, "DOUBLE needs a finite float")
            return v
        return enc_double
    if code == 4:
        def enc_float(v):
            if type(v) is not float or v != v or v in (_INF, -_INF):
                raise bad(v, "FLOAT needs a finite float")
            short = float32_short(v)
            if short is None:
                raise bad(v, "FLOAT holds 32-bit floats; this value has no exact float32 form")
            return short
        return enc_float
    if code == 246:
        scale = col.scale

        def enc_decimal(v):
            try:
                return decimal_text(v, scale)
            except ValueError as e:
                raise bad(v, f"DECIMAL: {e}") from None
        return enc_decimal
    if code == 10:
        def enc_date(v):
            try:
                return date_text(v)
            except ValueError as e:
                raise bad(v, str(e)) from None
        return enc_date
    if code == 7 or code == 12:
        fsp = col.fsp

        def enc_datetime(v):
            try:
                return datetime_text(v, fsp)
            except ValueError as e:
                raise bad(v, f"{col.type}: {e}") from None
        return enc_datetime
    if code == 11:
        fsp = col.fsp

        def enc_time(v):
            if type(v) is _dt.timedelta and abs(v) > _MAX_TIME:
                raise bad(v, "TIME is limited to -838:59:59..838:59:59")
            try:
                return time_text(v, fsp)
            except ValueError as e:
                raise bad(v, f"TIME: {e}") from None
        return enc_time
    if code == 245:
        def enc_json(v):
            if type(v) is not str:
                raise bad(v, "JSON needs its text as str")
            return v
        return enc_json
    if code == 247:
        index = {name: i + 1 for i, name in enumerate(col.elements)}

        def enc_enum(v):
            if type(v) is str:
                i = index.get(v)
                if i is not None:
                    return i
                if v == "":
                    return 0  # MySQL's error value '' has index 0
                if not index and v.isdigit() and v.isascii():
                    return int(v)  # index text decoded from a format without elements
                raise bad(v, "ENUM name is not one of the column's elements" if index
                          else "ENUM elements unknown: only an index text can be written")
            raise bad(v, "ENUM needs an element name (str)")
        return enc_enum
    if code == 248:
        bits = {name: 1 << i for i, name in enumerate(col.elements)}

        def enc_set(v):
            if type(v) is str:
                if v == "":
                    return 0
                if not bits and v.isdigit() and v.isascii():
                    return int(v)  # bitmask text decoded from a format without elements
                mask = 0
                for name in v.split(","):
                    b = bits.get(name)
                    if b is None:
                        raise bad(v, f"SET member {name!r} is not one of the column's elements" if bits
                                  else "SET elements unknown: only a bitmask text can be written")
                    mask |= b
                return mask
            raise bad(v, "SET needs comma-joined names (str)")
        return enc_set
    binary = is_binary(col)
    if code in _BLOB_CODES:
        def enc_blob(v):
            t = type(v)
            if t is bytes:
                return binascii.b2a_base64(v, newline=False).decode("ascii")
            if t is str and not binary:
                return binascii.b2a_base64(v.encode("utf-8"), newline=False).decode("ascii")
            raise bad(v, f"{col.type} needs {'bytes' if binary else 'str'}")
        return enc_blob
    if binary:  # VARBINARY / BINARY
        def enc_binstr(v):
            if type(v) is not bytes:
                raise bad(v, f"{col.type} needs bytes")
            return go_quote(v)
        return enc_binstr

    def enc_text(v):
        if type(v) is not str:
            raise bad(v, f"{col.type} needs a str")
        return v
    return enc_text


class _TableEncoding:
    """Per-table precomputation: key JSON prefix, and per column its name, the
    constant part of its column object and its value converter; plus two generated
    image builders (new and old image) for rows holding every column."""

    __slots__ = ("table", "key_suffix", "columns", "by_name", "handle", "new_image", "old_image", "kernel_plan")

    def __init__(self, table: TableSchema):
        self.table = table
        head = {"scm": table.schema} if table.schema else {}
        if table.table:
            head["tbl"] = table.table
        if table.partition is not None:
            head["ptn"] = table.partition
        head["t"] = TYPE_ROW
        # the key JSON after '{"ts":N': ',"scm":..,"tbl":..,"ptn":..,"t":1}'
        self.key_suffix = b"," + orjson.dumps(head)[1:]
        self.columns = tuple((col.name, type_code(col), col.handle_key, column_flags(col),
                              _native_to_wire(table, col)) for col in table.columns)
        self.by_name = {c[0] for c in self.columns}
        self.handle = frozenset(c.name for c in table.columns if c.handle_key)
        self.new_image = _compile_image(table, self.columns)
        self.old_image = _compile_image(table, self.columns)
        self.kernel_plan = None  # the compiled encoder's TablePlan, built on first use (_kernel_plan)


def _wire_expr(col: Column, code: int, conv: Callable[[Any], Any], v: str, ns: dict[str, Any], i: int) -> str:
    """Python expression for the JSON value of the native value in variable ``v``: what ``conv``
    (``_native_to_wire``) returns, inline for the common types; a value failing an inline check
    goes to ``conv`` (which raises the error naming the column) or raises ``_NotFast``."""
    ns[f"f{i}"] = conv
    slow = f"f{i}({v})"
    kind = conv.__name__
    if kind == "enc_int":
        lo, hi = _int_bounds(code, col)
        return f"({v} if type({v}) is int and {lo} <= {v} <= {hi} else {slow})"
    if kind in ("enc_text", "enc_json"):
        return f"({v} if type({v}) is str else {slow})"
    if kind == "enc_double":
        return f"({v} if type({v}) is float and -_INF < {v} < _INF else {slow})"
    if kind == "enc_enum" and col.elements:
        ns[f"e{i}"] = {name: k + 1 for k, name in enumerate(col.elements)}
        return f"(x if type({v}) is str and (x := e{i}.get({v})) is not None else {slow})"
    if kind == "enc_blob":
        encode = "" if is_binary(col) else ".encode()"
        want = "bytes" if is_binary(col) else "str"
        return f"(_b64({v}{encode}, newline=False).decode('ascii') if type({v}) is {want} else {slow})"
    if kind in ("enc_decimal", "enc_date", "enc_datetime"):
        return inline_text_expr(col, v, slow) or slow
    return slow


def _compile_image(table: TableSchema, columns) -> Callable[[dict], dict]:
    """Generate ``row -> {column: {"t", "h"?, "f", "v"}}`` for a row holding exactly the table's
    columns. The column objects are built once and only their ``"v"`` is replaced per row, so a
    row costs one store per column plus its value's conversion (inline for the common types);
    the returned dict is the same object every call, valid until the next call (the encoder
    serialises it at once and is used by one thread at a time). Raises ``_NotFast`` (or KeyError,
    or the converter's ``UnrepresentableValue``); ``_image`` then takes the checked path."""
    namespace: dict[str, Any] = {"_not_fast": _not_fast, "_INF": _INF, "_b64": binascii.b2a_base64,
                                 **INLINE_NAMES}
    image: dict[str, dict] = {}
    lines = []
    for i, (name, t, h, f, conv) in enumerate(columns):
        v = f"v{i}"
        image[name] = {"t": t, "h": True, "f": f, "v": None} if h else {"t": t, "f": f, "v": None}
        namespace[f"c{i}"] = image[name]
        expr = _wire_expr(table.column(name), t, conv, v, namespace, i)
        lines.append(f"    c{i}['v'] = None if ({v} := row[{name!r}]) is None else {expr}\n")
    namespace["IMAGE"] = image
    source = ("def image(row):\n"
              f"    if len(row) != {len(columns)}:\n        _not_fast()\n"
              + "".join(lines) + "    return IMAGE\n")
    exec(compile(source, f"<cdcflow.open-protocol image {table.collection}>", "exec"), namespace)
    return namespace["image"]


class _NotFast(Exception):
    """The generated image builder cannot take this row; the checked path will."""


def _not_fast():
    raise _NotFast


def _no_fast(row):
    raise _NotFast


# -- the compiled encoder (_open_protocol_encode.c), for OpenProtocolEncoder.encode_records --------
_encode_kernel = accel.load("cdcflow.connectors.ticdc._open_protocol_encode")
"""The compiled encoder, or None: the Python path is the reference and the fallback (tests switch
the kernel off by setting this to None)."""


def _kernel_kind(col: Column, code: int, conv: Callable[[Any], Any]) -> tuple[int, int, int, int, dict | None]:
    """(kind, scale or fsp or binary flag, lo, hi, ENUM index) of a column for the kernel: the same
    split as ``_wire_expr`` (the common types in C, ``conv`` for the rest and for every value the
    fast path does not take)."""
    k = _encode_kernel
    kind = conv.__name__
    if kind == "enc_int":
        lo, hi = _int_bounds(code, col)
        if -(1 << 63) <= lo and hi < (1 << 64):
            return k.K_INT, -1, lo, hi, None
    elif kind == "enc_double":
        return k.K_DOUBLE, -1, 0, 0, None
    elif kind == "enc_float":
        return k.K_FLOAT32, -1, 0, 0, None
    elif kind == "enc_decimal" and col.scale is not None and col.scale >= 0:
        return k.K_DECIMAL, col.scale, 0, 0, None
    elif kind == "enc_date":
        return k.K_DATE, -1, 0, 0, None
    elif kind in ("enc_datetime", "enc_time") and (col.fsp is None or 0 <= col.fsp <= 6):
        return k.K_DATETIME if kind == "enc_datetime" else k.K_TIME, -1 if col.fsp is None else col.fsp, 0, 0, None
    elif kind in ("enc_text", "enc_json"):
        return k.K_STR, -1, 0, 0, None
    elif kind == "enc_enum" and col.elements:
        return k.K_ENUM, -1, 0, 0, {name: i + 1 for i, name in enumerate(col.elements)}
    elif kind == "enc_blob":
        return k.K_BLOB, int(is_binary(col)), 0, 0, None
    elif kind == "enc_binstr":
        return k.K_BINSTR, -1, 0, 0, None
    return k.K_CONV, -1, 0, 0, None


def _kernel_plan(enc: _TableEncoding):
    """The kernel's ``TablePlan`` for ``enc``'s table: per column its name, the constant JSON before
    its value (the bytes orjson writes for the column object up to ``"v":``), its kind and its
    converter."""
    columns = []
    tail = b"null}}"
    for name, code, handle, flags, conv in enc.columns:
        obj = {"t": code, "h": True, "f": flags, "v": None} if handle else {"t": code, "f": flags, "v": None}
        prefix = orjson.dumps({name: obj})[1:-len(tail)]
        kind, param, lo, hi, index = _kernel_kind(enc.table.column(name), code, conv)
        # interned: row dicts whose keys are interned (code constants) then match by identity
        columns.append((_intern(name), prefix, kind, param, lo, hi, index, conv))
    return _encode_kernel.TablePlan(enc.key_suffix, bool(enc.handle), tuple(columns))


class OpenProtocolEncoder:
    """Encode events into open-protocol Kafka messages ``(key, value)``.

    Rows are batched up to ``max-batch-size`` per message within
    ``max-message-bytes``; a DDL or resolved event closes the current batch and
    travels in a message of its own, so the message order keeps the event order.
    """

    def __init__(self, options: Mapping[str, Any] | None = None):
        self.options = _options(options)
        self._max_batch = self.options["max-batch-size"]
        self._max_bytes = self.options["max-message-bytes"]
        self._old_value = self.options["output-old-value"]
        self._only_updated = self.options["only-output-updated-columns"]
        self._delete_handle_only = self.options["delete-only-output-handle-key-columns"]
        self._tables: dict[int, _TableEncoding] = {}
        self._busy = threading.Lock()
        self._kernel = None  # the compiled encoder (_open_protocol_encode.Encoder), made on first use
        self._kernel_store: tuple | None = None  # (store, plan_for, fallback) of the last store

    def encode_records(self, records: Iterable[Record], store=None) -> list[tuple[bytes, bytes]]:
        """OpenCDC records -> messages: exactly ``encode(events.from_records(records, store))``.

        With the compiled kernel, row records in the usual shape go from the record to the
        message bytes with no event per row; every other record is mapped and encoded here, in
        its place. Whatever the kernel leaves undecided (a bad value, a row over
        ``max-message-bytes``) is redone on the Python path, which raises the error it names."""
        records = records if type(records) is list else list(records)
        if _encode_kernel is None or store is None:
            return self.encode(from_records(records, store))
        if not self._busy.acquire(blocking=False):  # see encode
            return OpenProtocolEncoder(self.options).encode_records(records, store)
        try:
            try:
                return self._kernel_encoder().encode(records, *self._kernel_callables(store))
            except MemoryError:
                raise
            except Exception:  # noqa: BLE001 - the kernel does not word errors; the Python path does
                pass
            return self._encode(from_records(records, store))
        finally:
            self._busy.release()

    def _kernel_encoder(self):
        if self._kernel is None or type(self._kernel) is not _encode_kernel.Encoder:
            self._kernel = _encode_kernel.Encoder(
                (self._max_batch, self._max_bytes, self._old_value, self._only_updated, self._delete_handle_only),
                Record, (Operation.CREATE, Operation.SNAPSHOT, Operation.UPDATE, Operation.DELETE),
                (META_CONTROL, META_PAYLOAD_SCHEMA_SUBJECT, META_PAYLOAD_SCHEMA_VERSION, META_PARTITION,
                 META_COMMIT_TS, EXTRA_ROW_ID, EXTRA_ONLY_HANDLE_KEY, EXTRA_CLAIM_CHECK))
        return self._kernel

    def _kernel_callables(self, store) -> tuple[Callable, Callable]:
        """The kernel's two ways back into Python for ``store``: ``plan_for(record)`` (the table
        plan of a row record's schema reference, None without a TiDB table) and
        ``fallback(record)`` (the message parts of any record the kernel does not write)."""
        if self._kernel_store is not None and self._kernel_store[0] is store:
            return self._kernel_store[1:]

        def plan_for(record: Record):
            table = referenced_table(record, store)
            if table is None:
                return None
            enc = self._encoding(table)
            if enc.kernel_plan is None:
                enc.kernel_plan = _kernel_plan(enc)
            return enc.kernel_plan

        def fallback(record: Record) -> tuple[bytes, bytes, bool]:
            return self._parts(from_record(record, store))

        self._kernel_store = (store, plan_for, fallback)
        return plan_for, fallback

    def _parts(self, ev: Event) -> tuple[bytes, bytes, bool]:
        """(key JSON, value JSON, True) of a row, to be batched; (key, value, False) of the message
        a DDL or resolved event travels in alone."""
        t = type(ev)
        if t is RowChange:
            return (*self._row(ev, self._encoding(ev.table)), True)
        if t is DDLEvent:
            return (*self._ddl(ev), False)
        if t is ResolvedEvent:
            return (*self._resolved(ev), False)
        raise UnsupportedEvent(CODEC, None, f"not a TiCDC event: {t.__name__}")

    def encode(self, events: Iterable[Event]) -> list[tuple[bytes, bytes]]:
        # the generated image builders reuse their column objects, so one thread at a time
        # uses this encoder's tables; a concurrent caller gets a private encoder
        if not self._busy.acquire(blocking=False):
            return OpenProtocolEncoder(self.options).encode(events)
        try:
            return self._encode(events)
        finally:
            self._busy.release()

    def _encode(self, events: Iterable[Event]) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        keys: list[bytes] = []  # [length, key JSON, length, key JSON, ...] of the open batch
        values: list[bytes] = []
        rows = size = 0  # rows and framed bytes of the open batch
        max_bytes, max_batch = self._max_bytes, self._max_batch
        pack = _LEN.pack
        last_table = enc = None
        for ev in events:
            t = type(ev)
            if t is RowChange:
                if ev.table is not last_table:
                    last_table = ev.table
                    enc = self._encoding(last_table)
                k, v = self._row(ev, enc)
                klen, vlen = len(k), len(v)
                row_bytes = klen + vlen + _ROW_SLACK
                if row_bytes + 8 + _RECORD_OVERHEAD > max_bytes:
                    raise MessageTooLarge(
                        CODEC, ev.table.collection,
                        f"one row needs {row_bytes + 8 + _RECORD_OVERHEAD} bytes, max-message-bytes is {max_bytes}")
                if rows and (rows >= max_batch or size + _RECORD_OVERHEAD + row_bytes > max_bytes):
                    out.append(_join(keys, values))
                    keys, values, rows, size = [], [], 0, 0
                keys += (pack(klen), k)
                values += (pack(vlen), v)
                rows += 1
                size += row_bytes
                continue
            if keys:
                out.append(_join(keys, values))
                keys, values, rows, size = [], [], 0, 0
            if t is DDLEvent:
                out.append(self._ddl(ev))
            elif t is ResolvedEvent:
                out.append(self._resolved(ev))
            else:
                raise UnsupportedEvent(CODEC, None, f"not a TiCDC event: {t.__name__}")
        if keys:
            out.append(_join(keys, values))
        return out

    def _encoding(self, table: TableSchema) -> _TableEncoding:
        enc = self._tables.get(id(table))
        if enc is None or enc.table is not table:
            enc = _TableEncoding(table)
            if len(self._tables) > 4096:
                self._tables.clear()
            self._tables[id(table)] = enc
        return enc

    def _row(self, ev: RowChange, enc: _TableEncoding) -> tuple[bytes, bytes]:
        extra = ev.extra
        kind = ev.kind
        ts = ev.commit_ts
        if extra and (EXTRA_ROW_ID in extra or EXTRA_ONLY_HANDLE_KEY in extra or EXTRA_CLAIM_CHECK in extra):
            key = self._key_with_extra(ev, enc)
        elif type(ts) is int:
            key = b'{"ts":%d%b' % (ts, enc.key_suffix)
            if kind == INSERT:  # the common case, without the branches below
                row = ev.row
                try:
                    image = enc.new_image(row)
                except (_NotFast, KeyError, TypeError):
                    image = _image(enc, row, None, _no_fast)
                return key, orjson.dumps({"u": image})
        else:
            key = b'{"ts":' + str(ts).encode() + enc.key_suffix
        if kind == DELETE:
            names = enc.handle if self._delete_handle_only and enc.handle else None
            value = {"d": _image(enc, ev.row, names, enc.new_image)}
        elif kind == INSERT or kind == UPDATE:
            value = {"u": _image(enc, ev.row, None, enc.new_image)}
            if kind == UPDATE and self._old_value and ev.old is not None:
                names = None
                if self._only_updated:
                    new = ev.row or {}
                    names = {n for n, v in ev.old.items() if n not in new or new[n] != v}
                value["p"] = _image(enc, ev.old, names, enc.old_image)
        else:
            raise UnsupportedEvent(CODEC, ev.table.collection, f"row kind {kind!r} is not insert/update/delete")
        return key, orjson.dumps(value)

    def _key_with_extra(self, ev: RowChange, enc: _TableEncoding) -> bytes:
        table = ev.table
        key: dict[str, Any] = {"ts": ev.commit_ts}
        if table.schema:
            key["scm"] = table.schema
        if table.table:
            key["tbl"] = table.table
        rid = ev.extra.get(EXTRA_ROW_ID)
        if rid:
            try:
                key["rid"] = int(rid)
            except ValueError:
                raise UnrepresentableValue(CODEC, table.collection, EXTRA_ROW_ID, rid, "row id is not an integer") from None
        if table.partition is not None:
            key["ptn"] = table.partition
        key["t"] = TYPE_ROW
        if ev.extra.get(EXTRA_ONLY_HANDLE_KEY) == "true":
            key["ohk"] = True
        ccl = ev.extra.get(EXTRA_CLAIM_CHECK)
        if ccl:
            key["ccl"] = ccl
        return orjson.dumps(key)

    @staticmethod
    def _resolved(ev: ResolvedEvent) -> tuple[bytes, bytes]:
        k = orjson.dumps({"ts": ev.ts, "t": TYPE_RESOLVED})
        return _VERSION_BYTES + _LEN.pack(len(k)) + k, _ZERO_LEN

    def _ddl(self, ev: DDLEvent) -> tuple[bytes, bytes]:
        key: dict[str, Any] = {"ts": ev.commit_ts}
        if ev.schema:
            key["scm"] = ev.schema
        if ev.table_name:
            key["tbl"] = ev.table_name
        key["t"] = TYPE_DDL
        k = orjson.dumps(key)
        v = orjson.dumps({"q": ev.query, "t": ev.ddl_type or 0})
        return _VERSION_BYTES + _LEN.pack(len(k)) + k, _LEN.pack(len(v)) + v


def _image(enc: _TableEncoding, row: dict | None, names, fast: Callable[[dict], dict]) -> dict:
    """One row image as ``{column: {"t", "h"?, "f", "v"}}`` in table order (``fast`` for full rows)."""
    if row is None:
        raise UnsupportedEvent(CODEC, enc.table.collection, "row image is missing")
    if names is None:
        try:
            return fast(row)
        except (_NotFast, KeyError):
            pass  # the checked loop below raises the precise error (or takes a partial row)
    out = {}
    n = 0
    for name, t, h, f, conv in enc.columns:
        if name in row and (names is None or name in names):
            v = row[name]
            if v is not None:
                v = conv(v)
            out[name] = {"t": t, "h": True, "f": f, "v": v} if h else {"t": t, "f": f, "v": v}
            n += 1
    if n != len(row) and names is None:
        unknown = next(k for k in row if k not in enc.by_name)
        raise UnrepresentableValue(CODEC, enc.table.collection, unknown, row[unknown],
                                   "column is not in the table schema")
    return out


def _join(keys: list[bytes], values: list[bytes]) -> tuple[bytes, bytes]:
    """One message from the batch's framed entries (``[length, JSON, length, JSON, ...]``)."""
    return _VERSION_BYTES + b"".join(keys), b"".join(values)
