"""What open protocol's encoder and decoder share: the wire constants, Go string quoting, number
forms and the MySQL type codes and column flags <-> column model.

A Kafka key is the batch version (1) then repeated ``[8-byte big-endian length][key JSON]``; the
value is repeated ``[length][value JSON]``, the n-th value belonging to the n-th key. See
``docs/codec-open-protocol.md`` for the wire shape and for what the format does not carry
(decimal scale/precision, ENUM/SET elements, fsp, lengths, defaults).
"""

from __future__ import annotations

import datetime as _dt
import re
import struct

from cdcflow.connectors.ticdc.tidb import (
    BINARY_TYPES,
    Column,
)

# TiDB's text forms of DECIMAL and temporal values have one implementation, shared
# by the text codecs; open protocol writes the same text inside JSON strings.
from ..errors import CodecError, MalformedMessage, UnsupportedEvent
from ..events import (
    META_CLAIM_CHECK_LOCATION,
    META_ONLY_HANDLE_KEY,
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


