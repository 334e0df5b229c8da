"""TiCDC's canal-json protocol, both directions, as pure functions over bytes.

One message is one JSON object: a DML row, a DDL statement or (with the TiDB
extension) a ``TIDB_WATERMARK``. Every column value is a JSON string in TiDB's
text form (see ``docs/codec-canal-json.md``); this module turns those strings
into the native values of ``cdcflow.connectors.ticdc.tidb`` and back.

Hot paths: the column model and per-column converters are built once per table
(and cached), a message then costs one ``orjson`` call plus one converter call
per non-NULL value.

The text forms shared with the CSV and open-protocol codecs (DECIMAL, dates and
times, floats) are ``cdcflow.connectors.ticdc.tidb``'s; the ``*_text`` / ``parse_*`` names here are aliases.
"""

from __future__ import annotations

import base64
import decimal
import functools
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from cdcflow import accel
from cdcflow.connectors.ticdc.errors import (
    CodecError,
    MalformedMessage,
    UnrepresentableValue,
    UnsupportedEvent,
)
from cdcflow.connectors.ticdc.events import (
    DELETE,
    INSERT,
    META_CLAIM_CHECK_LOCATION,
    META_ONLY_HANDLE_KEY,
    UPDATE,
    DDLEvent,
    Event,
    ResolvedEvent,
    RowChange,
)
from cdcflow.params import option_bool
from cdcflow.connectors.ticdc.tidb import (
    BINARY_TYPES,
    INLINE_NAMES,
    INTEGER_TYPES,
    TEXT_TYPES,
    TIME_MAX_US,
    Column,
    TableSchema,
    ValueMismatch,
    format_date,
    format_datetime,
    format_decimal,
    format_float,
    format_go_float,
    format_time,
    inline_parse_expr,
    inline_text_expr,
    parse_date,
    parse_datetime,
)
from cdcflow.connectors.ticdc.tidb import parse_time as _parse_time_any

CODEC = "canal-json"

_kernel = accel.load("cdcflow.connectors.ticdc._canal_json")
"""The compiled row-message writer (``_canal_json.c``), or None: the Python path below is the
reference and the fallback (tests switch the kernel off by setting this to None)."""

META_CANAL_TYPE = "ticdc.canal.type"
"""Canal event type of a DDL whose TiDB action code the message cannot tell."""

WATERMARK = "TIDB_WATERMARK"
DML_TYPES = {"INSERT": INSERT, "UPDATE": UPDATE, "DELETE": DELETE}
_KIND_TYPE = {v: k for k, v in DML_TYPES.items()}
DDL_TYPES = frozenset({"CREATE", "RENAME", "CINDEX", "DINDEX", "ALTER", "ERASE", "TRUNCATE", "QUERY"})

# TiDB DDL action code -> canal event type (TiCDC's mapping; anything else is QUERY).
_ACTION_CANAL = {3: "CREATE", 14: "RENAME", 47: "RENAME", 7: "CINDEX", 9: "CINDEX", 32: "CINDEX",
                 8: "DINDEX", 10: "DINDEX", 33: "DINDEX", 4: "ERASE", 11: "TRUNCATE"}
_ACTION_CANAL.update({code: "ALTER" for code in (5, 6, 12, 13, 15, 17, 18, 19, 20, 22, 23, 37, 38, 41,
                                                  61, 64, 71, 72)})
# The reverse is only defined where one action code maps to the canal type.
_CANAL_ACTION = {"CREATE": 3, "ERASE": 4, "TRUNCATE": 11}

# java.sql.Types codes TiCDC writes in ``sqlType``.
_SQL_TYPE = {"TINYINT": -6, "SMALLINT": 5, "MEDIUMINT": 4, "INT": 4, "BIGINT": -5, "FLOAT": 7, "DOUBLE": 8,
             "DECIMAL": 3, "CHAR": 1, "VARCHAR": 12, "DATE": 91, "TIME": 92, "DATETIME": 93,
             "TIMESTAMP": 93, "YEAR": 12, "JSON": 12, "ENUM": 4, "SET": -7, "BIT": -7}
_SQL_TYPE.update({t: 2004 for t in BINARY_TYPES})
_SQL_TYPE.update({t: 2005 for t in ("TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT")})
# Unsigned values above the signed maximum get the next wider code.
_UNSIGNED_PROMOTION = {"TINYINT": (2**7 - 1, 5), "SMALLINT": (2**15 - 1, 4), "INT": (2**31 - 1, -5),
                       "BIGINT": (2**63 - 1, 3)}
# Fallback type when a column has a ``sqlType`` but no ``mysqlType`` entry.
_SQL_CODE_TYPE = {-6: "TINYINT", 5: "SMALLINT", 4: "INT", -5: "BIGINT", 7: "FLOAT", 8: "DOUBLE",
                  3: "DECIMAL", 1: "CHAR", 12: "VARCHAR", 91: "DATE", 92: "TIME", 93: "DATETIME",
                  -7: "BIT", 2004: "BLOB", 2005: "TEXT"}
# Display widths TiDB shows for integer types without an explicit one (signed, unsigned).
_INT_WIDTH = {"TINYINT": (4, 3), "SMALLINT": (6, 5), "MEDIUMINT": (9, 8), "INT": (11, 10), "BIGINT": (20, 20)}
_MYSQL_BASE_TYPES = INTEGER_TYPES | TEXT_TYPES | BINARY_TYPES | {
    "FLOAT", "DOUBLE", "DECIMAL", "DATE", "DATETIME", "TIMESTAMP", "TIME", "YEAR", "BIT", "ENUM", "SET", "JSON"}
_MYSQL_ALIASES = {"INTEGER": "INT", "BOOL": "TINYINT", "BOOLEAN": "TINYINT", "NUMERIC": "DECIMAL",
                  "REAL": "DOUBLE", "DOUBLE PRECISION": "DOUBLE"}


# --------------------------------------------------------------------------- options

@dataclass(frozen=True, slots=True)
class CanalJsonOptions:
    """Encoder options, named as in TiCDC's sink URI / ``[sink]`` config."""

    enable_tidb_extension: bool = False
    content_compatible: bool = False
    only_output_updated_columns: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any], plugin: str = CODEC) -> "CanalJsonOptions":
        """Build from TiCDC option names (``enable-tidb-extension`` ...); unknown names are ignored
        so one connector config can carry other settings."""
        return cls(
            enable_tidb_extension=option_bool(plugin, "enable-tidb-extension",
                                               config.get("enable-tidb-extension", False)),
            content_compatible=option_bool(plugin, "content-compatible", config.get("content-compatible", False)),
            only_output_updated_columns=option_bool(plugin, "only-output-updated-columns",
                                                     config.get("only-output-updated-columns", False)),
        )

    @property
    def old_changed_only(self) -> bool:
        """``old`` holds only changed columns (TiCDC's option, or official Canal's shape)."""
        return self.only_output_updated_columns or self.content_compatible


# --------------------------------------------------------------------------- TiDB text forms
# The one implementation lives in ``cdcflow.connectors.ticdc.tidb``; these names stay for callers of this module.

_ValueProblem = ValueMismatch
decimal_text = format_decimal
float_text = format_float
go_float_text = format_go_float
date_text = format_date
datetime_text = format_datetime
time_text = format_time
parse_time = functools.partial(_parse_time_any, max_us=TIME_MAX_US)
"""canal-json's TIME: TiDB's range is enforced."""


def enum_index_text(col: Column) -> Callable[[Any], str]:
    """ENUM name -> 1-based index text. Without known elements the value must already be the index
    text (what this decoder yields for a default ``mysqlType``)."""
    if not col.elements:
        return _digits_passthrough("ENUM")
    index = {name: str(i + 1) for i, name in enumerate(col.elements)}
    index.setdefault("", "0")  # MySQL's error value

    def conv(v: Any) -> str:
        try:
            return index[v]
        except (KeyError, TypeError):
            raise _ValueProblem(f"is not one of the ENUM elements {list(col.elements)}") from None
    return conv


def set_mask_text(col: Column) -> Callable[[Any], str]:
    """SET comma-joined names -> bitmask text."""
    if not col.elements:
        return _digits_passthrough("SET")
    bits = {name: 1 << i for i, name in enumerate(col.elements)}

    def conv(v: Any) -> str:
        if type(v) is not str:
            raise _ValueProblem("SET needs a str of comma-joined names")
        if not v:
            return "0"
        mask = 0
        for name in v.split(","):
            try:
                mask |= bits[name]
            except KeyError:
                raise _ValueProblem(f"{name!r} is not one of the SET elements {list(col.elements)}") from None
        return str(mask)
    return conv


def _digits_passthrough(kind: str) -> Callable[[Any], str]:
    def conv(v: Any) -> str:
        if type(v) is str and v.isdigit() and v.isascii():
            return v
        what = "index" if kind == "ENUM" else "bitmask"
        raise _ValueProblem(f"{kind} elements are unknown (the source did not carry them), so this name has no "
                            f"{what} to write; only an {what} text passes through")
    return conv


def _int_text(v: Any) -> str:
    if type(v) is not int:
        raise _ValueProblem("needs an int")
    return str(v)


def _binary_text(v: Any) -> str:
    if type(v) is not bytes:
        raise _ValueProblem("binary column needs bytes")
    return v.decode("latin-1")


def _str_text(v: Any) -> str:
    if type(v) is not str:
        raise _ValueProblem("needs a str")
    return v


def _parse_enum(col: Column) -> Callable[[str], str] | None:
    if not col.elements:
        return None  # documented fallback: the index text stays as it is
    names = ("",) + col.elements

    def conv(text: str) -> str:
        i = int(text)
        if not 0 <= i < len(names):
            raise ValueError(f"ENUM index {text} out of range 1..{len(col.elements)}")
        return names[i]
    return conv


def _parse_set(col: Column) -> Callable[[str], str] | None:
    if not col.elements:
        return None
    elements = col.elements
    limit = 1 << len(elements)

    def conv(text: str) -> str:
        mask = int(text)
        if not 0 <= mask < limit:
            raise ValueError(f"SET bitmask {text} has bits beyond its {len(elements)} elements")
        return ",".join(e for i, e in enumerate(elements) if mask >> i & 1)
    return conv


def _parse_binary(text: str) -> bytes:
    return text.encode("latin-1")


def value_parser(col: Column) -> Callable[[str], Any] | None:
    """canal-json text -> native value for ``col``; None where the text is the value."""
    t = col.type
    if t in INTEGER_TYPES or t in ("BIT", "YEAR"):
        return int
    if t in ("FLOAT", "DOUBLE"):
        return float
    if t == "DECIMAL":
        return decimal.Decimal
    if t in BINARY_TYPES:
        return _parse_binary
    if t == "DATE":
        return parse_date
    if t in ("DATETIME", "TIMESTAMP"):
        return parse_datetime
    if t == "TIME":
        return parse_time
    if t == "ENUM":
        return _parse_enum(col)
    if t == "SET":
        return _parse_set(col)
    return None  # CHAR/VARCHAR/TEXT family, JSON


def value_formatter(col: Column) -> Callable[[Any], str]:
    """Native value -> canal-json text for ``col`` (raises ``_ValueProblem``)."""
    t = col.type
    if t in INTEGER_TYPES or t in ("BIT", "YEAR"):
        return _int_text
    if t in ("FLOAT", "DOUBLE"):
        return float_text
    if t == "DECIMAL":
        scale = col.scale
        return lambda v: decimal_text(v, scale)
    if t in BINARY_TYPES:
        return _binary_text
    if t == "DATE":
        return date_text
    if t in ("DATETIME", "TIMESTAMP"):
        fsp = col.fsp
        return lambda v: datetime_text(v, fsp)
    if t == "TIME":
        fsp = col.fsp
        return lambda v: time_text(v, fsp)
    if t == "ENUM":
        return enum_index_text(col)
    if t == "SET":
        return set_mask_text(col)
    return _str_text


# --------------------------------------------------------------------------- mysqlType <-> Column

def _quote_element(e: str) -> str:
    return "'" + e.replace("'", "''") + "'"


def mysql_type(col: Column, full: bool) -> str:
    """``mysqlType`` text: lowercase base type (``int unsigned``) or, with ``full``
    (content-compatible), the column type with its parameters (``decimal(5,2)``)."""
    t = col.type
    base = t.lower()
    unsigned = " unsigned" if col.unsigned and (t in INTEGER_TYPES or t in ("DECIMAL", "FLOAT", "DOUBLE")) else ""
    if not full:
        return base + unsigned
    if t in INTEGER_TYPES:
        width = col.length or _INT_WIDTH[t][1 if col.unsigned else 0]
        return f"{base}({width}){unsigned}"
    if t == "DECIMAL":
        p = col.precision if col.precision is not None else 10
        s = col.scale if col.scale is not None else 0
        return f"decimal({p},{s}){unsigned}"
    if t in ("CHAR", "VARCHAR", "BINARY", "VARBINARY"):
        n = col.length if col.length is not None else (1 if t in ("CHAR", "BINARY") else None)
        return f"{base}({n})" if n is not None else base
    if t == "BIT":
        return f"bit({col.length or 1})"
    if t in ("DATETIME", "TIMESTAMP", "TIME"):
        return f"{base}({col.fsp})" if col.fsp else base
    if t == "YEAR":
        return "year(4)"
    if t in ("ENUM", "SET"):  # members unknown: the bare type, never an empty list that claims none
        return f"{base}({','.join(_quote_element(e) for e in col.elements)})" if col.elements else base
    return base + unsigned


def _split_params(text: str) -> list[str]:
    """Split ``'a','b,c','it''s'`` or ``5,2`` at top-level commas, unquoting elements."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text[i] == "'":
            j, buf = i + 1, []
            while True:
                k = text.find("'", j)
                if k < 0:
                    raise ValueError("unterminated quoted element")
                if text.startswith("''", k):
                    buf.append(text[j:k + 1])
                    j = k + 2
                    continue
                buf.append(text[j:k])
                i = k + 1
                break
            out.append("".join(buf))
        else:
            k = text.find(",", i)
            k = n if k < 0 else k
            out.append(text[i:k].strip())
            i = k
        if i < n:
            if text[i] != ",":
                raise ValueError(f"unexpected {text[i]!r} in type parameters")
            i += 1
    return out


_DDL_ENUM_SET = re.compile(r"(`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_$]*)\s+(ENUM|SET)\s*\(", re.IGNORECASE)


def ddl_elements(query: str) -> dict[str, tuple[str, ...]]:
    """ENUM/SET members of the columns a DDL statement defines (``CREATE TABLE``, ``ALTER TABLE ...
    ADD/MODIFY/CHANGE COLUMN``): column name -> elements. TiCDC's storage schema file has no place
    for members, but the schema file of a version a DDL started carries that DDL as its ``Query``.
    A column defined twice keeps its last definition; text that does not parse is skipped."""
    out: dict[str, tuple[str, ...]] = {}
    for m in _DDL_ENUM_SET.finditer(query):
        name = m.group(1)
        if name.startswith("`"):
            name = name[1:-1].replace("``", "`")
        elif name.upper() in ("COLUMN", "MODIFY", "ADD", "CHANGE", "TABLE"):
            continue
        i, depth, quoted = m.end(), 1, False
        while i < len(query) and depth:
            c = query[i]
            if c == "'":
                quoted = not quoted  # a doubled '' toggles twice: still inside
            elif not quoted:
                depth += (c == "(") - (c == ")")
            i += 1
        if depth:
            continue
        try:
            out[name] = tuple(_split_params(query[m.end():i - 1]))
        except ValueError:
            continue
    return out


def parse_mysql_type(name: str, text: str, primary: bool) -> Column:
    """Column model from a ``mysqlType`` text (base or content-compatible full form)."""
    raw = text.strip()
    paren = raw.find("(")
    if paren >= 0:
        close = raw.rfind(")")
        if close < paren:
            raise ValueError(f"unbalanced parentheses in {text!r}")
        base, params, tail = raw[:paren].strip(), raw[paren + 1:close], raw[close + 1:]
    else:
        base, params, tail = raw, None, ""
    words = base.upper().split()
    flags = tail.upper().split()
    unsigned = False
    while words and words[-1] in ("UNSIGNED", "ZEROFILL", "SIGNED"):
        unsigned |= words.pop() == "UNSIGNED"
    unsigned |= "UNSIGNED" in flags
    t = " ".join(words)
    t = _MYSQL_ALIASES.get(t, t)
    if t not in _MYSQL_BASE_TYPES:
        raise ValueError(f"unknown MySQL type {text!r}")
    kw: dict[str, Any] = {}
    if params is not None:
        if t in ("ENUM", "SET"):
            kw["elements"] = tuple(_split_params(params))
        else:
            nums = [int(p) for p in _split_params(params)]
            if t == "DECIMAL":
                kw["precision"] = nums[0]
                kw["scale"] = nums[1] if len(nums) > 1 else 0
            elif t in ("DATETIME", "TIMESTAMP", "TIME"):
                kw["fsp"] = nums[0]
            elif t != "YEAR" and nums:
                kw["length"] = nums[0]
    return Column(name, t, unsigned=unsigned, binary=t in BINARY_TYPES,
                  primary_key=primary, handle_key=primary, nullable=not primary, **kw)


# --------------------------------------------------------------------------- JSON writing

_HTML_FIXES = ((b"<", b"\\u003c"), (b">", b"\\u003e"), (b"&", b"\\u0026"),
               (b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))
_SHORT_ESCAPE_RE = re.compile(rb"\\(\\|b|f)")
_SHORT_ESCAPE = {b"\\": b"\\\\", b"b": b"\\u0008", b"f": b"\\u000c"}


def _dumps(obj: Any) -> bytes:
    """orjson output rewritten to TiCDC's (Go) string escaping: ``<``, ``>``, ``&``, U+2028/9
    and the control bytes orjson writes as ``\\b``/``\\f`` become ``\\u00xx`` (lowercase)."""
    out = orjson.dumps(obj)
    for raw, esc in _HTML_FIXES:
        if raw in out:
            out = out.replace(raw, esc)
    if b"\\b" in out or b"\\f" in out:
        out = _SHORT_ESCAPE_RE.sub(lambda m: _SHORT_ESCAPE[m.group(1)], out)
    return out


# --------------------------------------------------------------------------- encoder

def _fail(why: str):
    """Raise from inside a generated expression (``x if ok else _fail(...)``)."""
    raise _ValueProblem(why)


def _text_expr(col: Column, conv: Callable[[Any], str], v: str, ns: dict[str, Any], i: int) -> str:
    """Python expression turning the native value in variable ``v`` into ``col``'s canal-json
    text. The common types are formatted inline with C calls (``str``, ``format``, ``isoformat``)
    guarded by checks that make the result exactly what ``value_formatter(col)`` returns; anything
    else (and every value failing a guard) goes to that formatter, which raises the precise error."""
    t = col.type
    ns[f"c{i}"] = conv
    slow = f"c{i}({v})"
    if t in INTEGER_TYPES or t in ("BIT", "YEAR"):
        return f"(str({v}) if type({v}) is int else _fail('needs an int'))"
    if conv is _str_text:
        return f"({v} if type({v}) is str else _fail('needs a str'))"
    if conv is _binary_text:
        return f"({v}.decode('latin-1') if type({v}) is bytes else _fail('binary column needs bytes'))"
    inline = inline_text_expr(col, v, slow)
    if inline is not None:
        return inline
    if t == "ENUM" and col.elements:
        ns[f"e{i}"] = {name: str(k + 1) for k, name in enumerate(col.elements)}
        return f"(x if type({v}) is str and (x := e{i}.get({v})) is not None else {slow})"
    return slow


# Whether orjson's output needs ``_dumps``'s rewrite, in two C calls: deleting the bytes that start
# what Go escapes and orjson does not (<, >, &, and \xe2 of U+2028/9) changes the length, or a
# ``\b``/``\f`` escape is present. False positives only cost the exact rewrite.
_GO_DIFFERS = b"<>&\xe2"
_SHORT_ESCAPE_SEARCH = re.compile(rb"\\[bf]").search


def _texts_display(table: TableSchema, columns, namespace: dict[str, Any]) -> str:
    """The dict display ``{column: text, ...}`` of a full row in variable ``row`` (see ``_text_expr``)."""
    items = []
    for i, (col, (name, conv)) in enumerate(zip(table.columns, columns)):
        v = f"v{i}"
        items.append(f"{name!r}: None if ({v} := row[{name!r}]) is None else "
                     f"{_text_expr(col, conv, v, namespace, i)}")
    return "{" + ", ".join(items) + "}"


def _compile_message(plan: "_EncodePlan", table: TableSchema,
                     changed_only: bool) -> Callable[[RowChange, int], bytes | None]:
    """Generate ``(event, now) -> message bytes`` for one table and the encoder's options: the row
    texts as one dict display (the common types formatted inline), one ``orjson`` call per row
    image, one ``%`` into the per-kind template. Returns None whenever the general path must
    decide (partial images, extra, sqlType promotion, a value that does not fit: the general path
    then writes the message or raises the error naming the column)."""
    ns: dict[str, Any] = {"_fail": _fail, "dumps": orjson.dumps, "go_dumps": _dumps, "GO": _GO_DIFFERS,
                          "short_escape": _SHORT_ESCAPE_SEARCH, "texts": plan.texts,
                          "T_INSERT": plan.templates[INSERT], "T_UPDATE": plan.templates[UPDATE],
                          "T_DELETE": plan.templates[DELETE], **INLINE_NAMES}
    display = _texts_display(table, plan.columns, ns)
    n = len(plan.columns)
    promote = "".join(f"    if type(x := row.get({name!r})) is int and x > {limit}:\n        return None\n"
                      for name, limit, _ in plan.promote)
    changed = "            o = {k: v for k, v in o.items() if data[k] != v}\n" if changed_only else ""
    slots = "(ts >> 18, now, old_part, data_part" + (", ts)" if plan.commit_ts_slot else ")")
    source = (
        "def message(ev, now):\n"
        "    row = ev.row\n"
        f"    if type(row) is not dict or len(row) != {n} or ev.extra:\n        return None\n"
        "    ts = ev.commit_ts\n"
        "    if type(ts) is not int or type(now) is not int:\n        return None\n"
        "    kind = ev.kind\n"
        f"    if kind == {INSERT!r}:\n        template = T_INSERT\n"
        f"    elif kind == {UPDATE!r}:\n        template = T_UPDATE\n"
        f"    elif kind == {DELETE!r}:\n        template = T_DELETE\n"
        "    else:\n        return None\n"
        + promote +
        "    try:\n"
        f"        data = {display}\n"
        "        old_part = b'null'\n"
        f"        if kind == {UPDATE!r} and (old := ev.old) is not None:\n"
        f"            if type(old) is not dict or len(old) != {n}:\n                return None\n"
        "            o = texts(old)\n"
        + changed +
        "            old_part = dumps(o)\n"
        "            if len(old_part.translate(None, GO)) != len(old_part) or short_escape(old_part):\n"
        "                old_part = go_dumps(o)\n"
        "            old_part = b'[' + old_part + b']'\n"
        "        data_part = dumps(data)\n"
        "        if len(data_part.translate(None, GO)) != len(data_part) or short_escape(data_part):\n"
        "            data_part = go_dumps(data)\n"
        "    except Exception:\n        return None\n"
        f"    return template % {slots}\n")
    exec(compile(source, f"<cdcflow.canal-json message {table.collection}>", "exec"), ns)
    return ns["message"]


def _compile_texts(table: TableSchema, columns) -> Callable[[dict], dict]:
    """Generate ``row -> {column: canal-json text}`` for a row holding every column of the table:
    one dict display, the common types formatted inline (see ``_text_expr``). Raises
    ``_ValueProblem``/``KeyError`` (or whatever a bad value raises); the caller then takes the
    general path, which names the column."""
    namespace: dict[str, Any] = {"_fail": _fail, **INLINE_NAMES}
    source = "def texts(row):\n    return " + _texts_display(table, columns, namespace) + "\n"
    exec(compile(source, f"<cdcflow.canal-json texts {table.collection}>", "exec"), namespace)
    return namespace["texts"]


def _percent_safe(fragment: bytes) -> bytes:
    return fragment.replace(b"%", b"%%")


def _kernel_kind(col: Column, conv: Callable[[Any], str]) -> tuple[int, int]:
    """(kind, scale or fsp or -1) of ``col`` for the kernel: the same split as ``_text_expr``
    (exact type checks inline, the formatter for the rest); TIME too, whose C text is
    ``format_time``'s."""
    t, k = col.type, _kernel
    if t in INTEGER_TYPES or t in ("BIT", "YEAR"):
        return k.K_INT, -1
    if conv is _str_text:
        return k.K_STR, -1
    if conv is _binary_text:
        return k.K_BYTES, -1
    if t == "DECIMAL" and col.scale is not None:
        return k.K_DECIMAL, col.scale
    if t in ("DATETIME", "TIMESTAMP") and (col.fsp is None or 0 <= col.fsp <= 6):
        return k.K_DATETIME, -1 if col.fsp is None else col.fsp
    if t == "TIME" and (col.fsp is None or 0 <= col.fsp <= 6):
        return k.K_TIME, -1 if col.fsp is None else col.fsp
    if t == "DATE":
        return k.K_DATE, -1
    if t in ("FLOAT", "DOUBLE"):
        return k.K_FLOAT, -1
    if t == "ENUM" and col.elements:
        return k.K_ENUM, -1
    return k.K_CALL, -1


def _kernel_plan(plan: "_EncodePlan", head: bytes, tidb_extension: bool, changed_only: bool):
    """The compiled writer for ``plan``'s table: the message's constant JSON pieces (the same
    bytes as the ``%`` templates), and per column its key, kind and Python formatter."""
    table = plan.table
    limits = {name: limit for name, limit, _ in plan.promote}
    columns = []
    for col, (name, conv) in zip(table.columns, plan.columns):
        key = _dumps(name) + b":"  # names _dumps cannot write failed the templates already
        kind, param = _kernel_kind(col, conv)
        enum_texts = {e: str(i + 1) for i, e in enumerate(col.elements)} if kind == _kernel.K_ENUM else None
        columns.append((name, key, kind, param, conv, enum_texts, limits.get(name)))
    kinds = (INSERT, UPDATE, DELETE)
    return _kernel.Plan(
        table=table, row_change_type=RowChange, kinds=kinds,
        prefixes=tuple(head + b',"type":"' + _KIND_TYPE[k].encode() + b'","es":' for k in kinds),
        ts_part=b',"ts":',
        types_part=b',"sql":"","sqlType":' + _dumps(plan.sql) + b',"mysqlType":' + _dumps(plan.mysql) + b',"old":',
        data_part=b',"data":[', tail=b'],"_tidb":{"commitTs":' if tidb_extension else b"]}",
        tidb_extension=tidb_extension, changed_only=changed_only, columns=tuple(columns))


class _EncodePlan:
    """Per-table state for encoding: column converters, mysqlType and sqlType objects, and for
    the fast path of full rows the whole message as one ``%`` template per row kind (constant
    JSON escaped once; slots for es, ts, old, data and the commit ts)."""

    __slots__ = ("table", "columns", "mysql", "sql", "promote", "pk_names", "texts", "templates", "commit_ts_slot",
                 "message", "kernel")

    def __init__(self, table: TableSchema, full_types: bool, tidb_extension: bool, changed_only: bool):
        self.table = table
        self.columns = tuple((c.name, value_formatter(c)) for c in table.columns)
        self.mysql = {c.name: mysql_type(c, full_types) for c in table.columns}
        self.sql = {c.name: _SQL_TYPE[c.type] for c in table.columns}
        self.promote = tuple((c.name, *_UNSIGNED_PROMOTION[c.type]) for c in table.columns
                             if c.unsigned and c.type in _UNSIGNED_PROMOTION)
        names = [c.name for c in table.columns if c.handle_key]
        self.pk_names = names or None
        self.texts = _compile_texts(table, self.columns)
        # {"id":0,"database":..,"table":..,"pkNames":..,"isDdl":false   (no closing brace)
        head = _dumps({"id": 0, "database": table.schema, "table": table.table,
                       "pkNames": self.pk_names, "isDdl": False})[:-1]
        types = _percent_safe(b',"sql":"","sqlType":' + _dumps(self.sql) + b',"mysqlType":' + _dumps(self.mysql))
        self.commit_ts_slot = tidb_extension
        tail = b',"_tidb":{"commitTs":%d}}' if tidb_extension else b"}"
        self.templates = {kind: b"".join((_percent_safe(head), b',"type":"', typ.encode(), b'","es":%d,"ts":%d',
                                          types, b',"old":%b,"data":[%b]', tail))
                          for kind, typ in _KIND_TYPE.items()}
        self.message = _compile_message(self, table, changed_only)
        self.kernel = _kernel_plan(self, head, tidb_extension, changed_only) if _kernel is not None else None


class CanalJsonEncoder:
    """Events -> canal-json messages, as TiCDC writes them.

    ``now_ms`` supplies the ``ts`` field (encode wall-clock ms); tests pass a fixed clock.
    """

    def __init__(self, options: CanalJsonOptions | None = None, now_ms: Callable[[], int] | None = None):
        self.options = options or CanalJsonOptions()
        self._now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self._plans: dict[int, _EncodePlan] = {}

    def encode(self, event: Event) -> bytes:
        if type(event) is RowChange:
            now = self._now_ms()
            kernel = self._plan(event.table).kernel
            if kernel is not None:
                msg = kernel.message(event, now)
                if msg is not None:
                    return msg
            return self._encode_row(event, now)
        if type(event) is DDLEvent:
            return self._encode_ddl(event)
        if type(event) is ResolvedEvent:
            return self._encode_watermark(event)
        raise TypeError(f"not a TiCDC event: {type(event).__name__}")

    def encode_many(self, events: Iterable[Event]) -> list[bytes]:
        now = self._now_ms()
        if type(events) is not list:
            events = list(events)
        out: list[bytes] = []
        append = out.append
        i, n = 0, len(events)
        while i < n:
            ev = events[i]
            if type(ev) is not RowChange:
                append(self.encode(ev))
                i += 1
                continue
            plan = self._plan(ev.table)
            if plan.kernel is not None:
                # the kernel takes the run of rows of this table; rows it hands back go to _encode_row
                j = plan.kernel.run(events, i, now, out, self._encode_row)
                if j > i:
                    i = j
                    continue
            table, message = ev.table, plan.message
            while True:
                msg = message(ev, now)
                append(msg if msg is not None else self._encode_row(ev, now, fast=False))
                i += 1
                if i == n or type(ev := events[i]) is not RowChange or ev.table is not table:
                    break
        return out

    # -- DML
    def _plan(self, table: TableSchema) -> _EncodePlan:
        plan = self._plans.get(id(table))
        if plan is None or plan.table is not table:
            if len(self._plans) > 1024:
                self._plans.clear()
            plan = self._plans[id(table)] = _EncodePlan(
                table, self.options.content_compatible, self.options.enable_tidb_extension,
                self.options.old_changed_only)
        return plan

    def _encode_row(self, ev: RowChange, now: int, fast: bool = True) -> bytes:
        plan = self._plan(ev.table)
        if fast:
            msg = plan.message(ev, now)
            if msg is not None:
                return msg
        kind_type = _KIND_TYPE.get(ev.kind)
        if kind_type is None:
            raise UnsupportedEvent(CODEC, None, f"RowChange.kind must be insert/update/delete, not {ev.kind!r}")
        row = ev.row
        if row is None:
            raise UnsupportedEvent(CODEC, None, f"{ev.table.collection}: a {ev.kind} row without values")
        partial = len(row) != len(plan.columns)
        data = self._texts(plan, row, partial, ev.table, "data")
        old = None
        if ev.kind == UPDATE and ev.old is not None:
            old = self._texts(plan, ev.old, len(ev.old) != len(plan.columns), ev.table, "old")
            if self.options.old_changed_only:
                old = {k: v for k, v in old.items() if k not in data or data[k] != v}
        if partial:
            mysql = {k: v for k, v in plan.mysql.items() if k in row}
            sql = {k: v for k, v in plan.sql.items() if k in row}
        else:
            mysql, sql = plan.mysql, plan.sql
        for name, limit, code in plan.promote:
            v = row.get(name)
            if v is not None and type(v) is int and v > limit:
                if sql is plan.sql:
                    sql = dict(sql)
                sql[name] = code
        msg = {
            "id": 0, "database": ev.table.schema, "table": ev.table.table, "pkNames": plan.pk_names,
            "isDdl": False, "type": kind_type, "es": ev.commit_ts >> 18, "ts": now, "sql": "",
            "sqlType": sql, "mysqlType": mysql, "old": [old] if old is not None else None, "data": [data],
        }
        if self.options.enable_tidb_extension:
            msg["_tidb"] = self._tidb_dml(ev)
        try:
            return _dumps(msg)
        except orjson.JSONEncodeError as e:
            raise UnrepresentableValue(CODEC, ev.table.collection, "?", None, f"cannot write JSON: {e}") from None

    def _tidb_dml(self, ev: RowChange) -> dict:
        ext: dict[str, Any] = {"commitTs": ev.commit_ts}
        if ev.extra:
            if ev.extra.get(META_ONLY_HANDLE_KEY) == "true":
                ext["onlyHandleKey"] = True
            loc = ev.extra.get(META_CLAIM_CHECK_LOCATION)
            if loc:
                ext["claimCheckLocation"] = loc
        return ext

    @staticmethod
    def _texts(plan: _EncodePlan, row: dict, partial: bool, table: TableSchema, where: str) -> dict:
        out = {}
        name = None
        try:
            if not partial:
                for name, conv in plan.columns:
                    v = row[name]
                    out[name] = None if v is None else conv(v)
            else:
                for name, conv in plan.columns:
                    if name in row:
                        v = row[name]
                        out[name] = None if v is None else conv(v)
                unknown = row.keys() - out.keys()
                if unknown:
                    name = sorted(unknown)[0]
                    raise _ValueProblem("is not a column of the table")
        except _ValueProblem as e:
            raise UnrepresentableValue(CODEC, table.collection, name, row.get(name), str(e),
                                       position=f"{where}.{name}") from None
        except KeyError:
            raise UnrepresentableValue(CODEC, table.collection, name, None, "row has no value for the column",
                                       position=f"{where}.{name}") from None
        return out

    # -- DDL and watermark
    def _encode_ddl(self, ev: DDLEvent) -> bytes:
        canal_type = _ACTION_CANAL.get(ev.ddl_type) if ev.ddl_type is not None else None
        if canal_type is None:
            canal_type = ev.extra.get(META_CANAL_TYPE) or "QUERY"
            if canal_type not in DDL_TYPES:
                raise UnsupportedEvent(CODEC, None, f"unknown canal DDL type {canal_type!r}")
        msg = {
            "id": 0, "database": ev.schema, "table": ev.table_name, "pkNames": None, "isDdl": True,
            "type": canal_type, "es": ev.commit_ts >> 18, "ts": self._now_ms(), "sql": ev.query,
            "sqlType": None, "mysqlType": None, "data": None, "old": None,
        }
        if self.options.enable_tidb_extension:
            msg["_tidb"] = {"commitTs": ev.commit_ts}
        return _dumps(msg)

    def _encode_watermark(self, ev: ResolvedEvent) -> bytes:
        if not self.options.enable_tidb_extension:
            raise UnsupportedEvent(CODEC, None, "watermark messages need enable-tidb-extension=true")
        msg = {
            "id": 0, "database": "", "table": "", "pkNames": None, "isDdl": False, "type": WATERMARK,
            "es": ev.ts >> 18, "ts": self._now_ms(), "sql": "", "sqlType": None, "mysqlType": None,
            "data": None, "old": None, "_tidb": {"watermarkTs": ev.ts},
        }
        return _dumps(msg)


# --------------------------------------------------------------------------- decoder

class _DecodePlan:
    """Per (table, mysqlType, pkNames): the column model, a parser per column and a generated
    converter for rows holding every column."""

    __slots__ = ("table", "mysql", "pk", "columns", "convert")

    def __init__(self, table: TableSchema, mysql: dict, pk: list | None):
        self.table = table
        self.mysql = mysql
        self.pk = pk
        self.columns = tuple((c.name, value_parser(c)) for c in table.columns)
        self.convert = _compile_values(table, self.columns)


def _bad():
    raise ValueError("value does not fit its column")


def _parse_expr(col: Column, conv: Callable[[str], Any] | None, v: str, ns: dict[str, Any], i: int) -> str:
    """Python expression giving ``conv(v)`` for the text in variable ``v`` (``v`` itself when
    ``conv`` is None), inline for the common types; raises when ``v`` is not a str."""
    t = col.type
    if conv is None:
        return f"({v} if type({v}) is str else _bad())"
    if conv is int or conv is float or conv is decimal.Decimal:
        ns[f"p{i}"] = conv
        return f"(p{i}({v}) if type({v}) is str else _bad())"
    if conv is _parse_binary:
        return f"({v}.encode('latin-1') if type({v}) is str else _bad())"
    if t == "DATE":
        ns[f"m{i}"] = {}
        return inline_parse_expr("DATE", v, "_bad()", memo=f"m{i}")
    if t in ("DATETIME", "TIMESTAMP"):
        return inline_parse_expr(t, v, "_bad()")
    if t == "ENUM":
        ns[f"e{i}"] = names = ("",) + col.elements
        return f"(e{i}[x] if type({v}) is str and 0 <= (x := int({v})) < {len(names)} else _bad())"
    ns[f"p{i}"] = conv
    return f"(p{i}({v}) if type({v}) is str else _bad())"


def _compile_values(table: TableSchema, columns) -> Callable[[dict], dict | None]:
    """Generate ``row texts -> row`` for a row holding every column: one dict display with the
    parsers inline; None on any surprise (missing column, bad text), so ``_values`` can raise
    the error naming the column."""
    namespace: dict[str, Any] = {"_bad": _bad, **INLINE_NAMES}
    items = []
    for i, (col, (name, conv)) in enumerate(zip(table.columns, columns)):
        v = f"v{i}"
        items.append(f"{name!r}: None if ({v} := texts[{name!r}]) is None else "
                     f"{_parse_expr(col, conv, v, namespace, i)}")
    source = ("def convert(texts):\n"
              f"    if len(texts) != {len(columns)}:\n        return None\n"
              "    try:\n"
              "        return {" + ", ".join(items) + "}\n"
              "    except Exception:\n        return None\n")
    exec(compile(source, f"<cdcflow.canal-json row converter {table.collection}>", "exec"), namespace)
    return namespace["convert"]


def _field(obj: dict, name: str, kind: type | tuple, nullable: bool = False) -> Any:
    try:
        v = obj[name]
    except KeyError:
        raise MalformedMessage(CODEC, name, f"not canal-json: field {name!r} is missing") from None
    if v is None and nullable:
        return None
    if not isinstance(v, kind) or (kind is int and type(v) is bool):
        want = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise MalformedMessage(CODEC, name, f"field {name!r} must be {want}, got {type(v).__name__}")
    return v


class CanalJsonDecoder:
    """canal-json messages -> events.

    ``tables`` optionally maps ``schema.table`` to a known ``TableSchema`` (from a
    schema file or registry); its columns then supply what a default ``mysqlType``
    lacks (ENUM/SET elements, DECIMAL scale, fsp) when the column names match.
    """

    def __init__(self, tables: Mapping[str, TableSchema] | None = None):
        self._known = tables or {}
        self._plans: dict[tuple[str, str], _DecodePlan] = {}

    def decode(self, message: bytes) -> Event:
        try:
            obj = orjson.loads(message)
        except orjson.JSONDecodeError as e:
            raise MalformedMessage(CODEC, e.pos, f"not JSON: {e.msg}") from None
        if type(obj) is not dict:
            raise MalformedMessage(CODEC, 0, f"not canal-json: a JSON {type(obj).__name__}, not an object")
        return self._event(obj)

    def decode_many(self, messages: Iterable[bytes]) -> list[Event]:
        out = []
        for i, m in enumerate(messages):
            try:
                out.append(self.decode(m))
            except CodecError as e:
                e.args = (f"message {i}: {e.args[0]}",)
                raise
        return out

    def _event(self, obj: dict) -> Event:
        # each field: the exact type in one check, else _field (which raises the precise error)
        typ = obj.get("type")
        if type(typ) is not str:
            typ = _field(obj, "type", str)
        is_ddl = obj.get("isDdl")
        if type(is_ddl) is not bool:
            is_ddl = _field(obj, "isDdl", bool)
        tidb = obj.get("_tidb")
        if tidb is not None and type(tidb) is not dict:
            raise MalformedMessage(CODEC, "_tidb", "field '_tidb' must be an object")
        if typ == WATERMARK and not is_ddl:
            ts = tidb.get("watermarkTs") if tidb else None
            if type(ts) is not int:
                raise MalformedMessage(CODEC, "_tidb.watermarkTs", "TIDB_WATERMARK without an integer watermarkTs")
            return ResolvedEvent(ts)
        schema = obj.get("database")
        if type(schema) is not str:
            schema = _field(obj, "database", str)
        table = obj.get("table")
        if type(table) is not str:
            table = _field(obj, "table", str)
        if tidb is not None and type(commit_ts := tidb.get("commitTs")) is int and commit_ts >= 0:
            pass  # the _commit_ts rule's common case
        else:
            commit_ts = self._commit_ts(obj, tidb)
        if is_ddl:
            if typ not in DDL_TYPES:
                raise MalformedMessage(CODEC, "type", f"unknown DDL type {typ!r}")
            query = _field(obj, "sql", str)
            action = _CANAL_ACTION.get(typ)
            extra = {} if action is not None else {META_CANAL_TYPE: typ}
            return DDLEvent(schema, table, query, commit_ts, action, None, extra)
        kind = DML_TYPES.get(typ)
        if kind is None:
            raise MalformedMessage(CODEC, "type", f"unknown DML type {typ!r}")
        return self._row(obj, schema, table, kind, commit_ts, tidb)

    @staticmethod
    def _commit_ts(obj: dict, tidb: dict | None) -> int:
        if tidb is not None and "commitTs" in tidb:
            ts = tidb["commitTs"]
            if type(ts) is not int or ts < 0:
                raise MalformedMessage(CODEC, "_tidb.commitTs", "commitTs must be a non-negative integer")
            return ts
        es = _field(obj, "es", int)  # no extension: only the physical ms is known
        if es < 0:
            raise MalformedMessage(CODEC, "es", "es must be non-negative")
        return es << 18

    def _row(self, obj: dict, schema: str, table: str, kind: str, commit_ts: int, tidb: dict | None) -> RowChange:
        data = obj.get("data")
        if type(data) is not list:
            data = _field(obj, "data", list)
        if len(data) != 1 or type(data[0]) is not dict:
            raise MalformedMessage(CODEC, "data", f"data must hold exactly one row object, got {len(data)} items")
        row_text = data[0]
        mysql = obj.get("mysqlType")
        if type(mysql) is not dict:
            mysql = _field(obj, "mysqlType", dict)
        pk = obj.get("pkNames")
        if type(pk) is not list:
            pk = _field(obj, "pkNames", list, nullable=True)
        plan = self._plans.get((schema, table))
        if plan is None or plan.mysql != mysql or plan.pk != pk:
            plan = self._new_plan(obj, schema, table, row_text, mysql, pk)
        row = plan.convert(row_text)
        if row is None:
            row = self._values(plan, row_text, "data[0]")
        extra: dict[str, str] = {}
        only_key = False
        if tidb:
            if tidb.get("onlyHandleKey") is True:
                extra[META_ONLY_HANDLE_KEY] = "true"
                only_key = True
            loc = tidb.get("claimCheckLocation")
            if loc:
                if type(loc) is not str:
                    raise MalformedMessage(CODEC, "_tidb.claimCheckLocation", "must be a string")
                extra[META_CLAIM_CHECK_LOCATION] = loc
        old = None
        old_list = obj.get("old")
        if old_list is not None:
            if type(old_list) is not list or len(old_list) != 1 or type(old_list[0]) is not dict:
                raise MalformedMessage(CODEC, "old", "old must be null or hold exactly one row object")
            if kind == UPDATE:  # TiCDC writes old only for updates; elsewhere it carries nothing
                old = plan.convert(old_list[0])
                if old is None:
                    old = self._values(plan, old_list[0], "old[0]")
                if len(old) < len(row) and not only_key:
                    # only changed columns were written: the others equal the new image
                    old = {name: (old[name] if name in old else row[name]) for name in row}
        return RowChange(plan.table, kind, commit_ts, row, old, extra)

    def _new_plan(self, obj: dict, schema: str, table: str, row_text: dict, mysql: dict,
                  pk: list | None) -> _DecodePlan:
        sql = obj.get("sqlType")
        if sql is not None and type(sql) is not dict:
            raise MalformedMessage(CODEC, "sqlType", "sqlType must be an object or null")
        pk_set = set(pk or ())
        for p in pk_set:
            if type(p) is not str:
                raise MalformedMessage(CODEC, "pkNames", "pkNames must hold column names")
        known = self._known.get(f"{schema}.{table}")
        known_cols = {c.name: c for c in known.columns} if known is not None else {}
        names = list(row_text)
        names += [n for n in mysql if n not in row_text]
        cols = []
        for name in names:
            hint = known_cols.get(name)
            text = mysql.get(name)
            if text is None:
                code = sql.get(name) if sql else None
                if hint is not None:
                    cols.append(hint)
                    continue
                if type(code) is not int or code not in _SQL_CODE_TYPE:
                    raise MalformedMessage(CODEC, f"mysqlType.{name}", f"column {name!r} has no mysqlType")
                cols.append(Column(name, _SQL_CODE_TYPE[code], primary_key=name in pk_set,
                                   handle_key=name in pk_set, nullable=name not in pk_set))
                continue
            if type(text) is not str:
                raise MalformedMessage(CODEC, f"mysqlType.{name}", "mysqlType values must be strings")
            try:
                col = parse_mysql_type(name, text, name in pk_set)
            except ValueError as e:
                raise MalformedMessage(CODEC, f"mysqlType.{name}", str(e)) from None
            if sql is not None and name in sql and type(sql[name]) is not int:
                raise MalformedMessage(CODEC, f"sqlType.{name}", "sqlType values must be integers")
            if hint is not None and hint.type == col.type:
                col = hint  # the known schema carries elements, scale, fsp, nullability
            cols.append(col)
        plan = _DecodePlan(TableSchema(schema, table, tuple(cols)), mysql, pk)
        if len(self._plans) > 4096:
            self._plans.clear()
        self._plans[(schema, table)] = plan
        return plan

    @staticmethod
    def _values(plan: _DecodePlan, row_text: dict, where: str) -> dict:
        out = {}
        try:
            if len(row_text) == len(plan.columns):
                for name, conv in plan.columns:
                    v = row_text[name]
                    if v is not None:
                        if type(v) is not str:
                            raise TypeError
                        if conv is not None:
                            v = conv(v)
                    out[name] = v
            else:
                for name, conv in plan.columns:
                    if name in row_text:
                        v = row_text[name]
                        if v is not None:
                            if type(v) is not str:
                                raise TypeError
                            if conv is not None:
                                v = conv(v)
                        out[name] = v
                if len(out) != len(row_text):
                    raise KeyError
        except (ValueError, TypeError, KeyError, ArithmeticError, UnicodeError):
            _raise_value_error(plan, row_text, where)
        return out


def _raise_value_error(plan: _DecodePlan, row_text: dict, where: str) -> None:
    """Slow path: find the offending column and raise a typed error naming it."""
    convs = dict(plan.columns)
    for name, text in row_text.items():
        if name not in convs:
            raise MalformedMessage(CODEC, f"{where}.{name}", f"column {name!r} has no mysqlType")
        if text is None:
            continue
        if type(text) is not str:
            raise MalformedMessage(CODEC, f"{where}.{name}",
                                   f"column values must be JSON strings or null, got {type(text).__name__}")
        conv = convs[name]
        if conv is None:
            continue
        try:
            conv(text)
        except (ValueError, TypeError, ArithmeticError, UnicodeError) as e:
            col = plan.table.column(name)
            detail = "code point above U+00FF in a binary column" if isinstance(e, UnicodeError) else str(e)
            raise MalformedMessage(CODEC, f"{where}.{name}",
                                   f"{plan.table.collection}.{name}: cannot read {text[:80]!r} as "
                                   f"{col.type}: {detail}") from None
    for name, _ in plan.columns:  # pragma: no cover - defensive
        if name not in row_text:
            raise MalformedMessage(CODEC, f"{where}.{name}", f"column {name!r} missing from the row")
    raise MalformedMessage(CODEC, where, "row does not match its mysqlType")


# --------------------------------------------------------------------------- claim check

def decode_claim_check(file_bytes: bytes, decoder: CanalJsonDecoder | None = None) -> Event:
    """Decode the file TiCDC's ``claim-check`` wrote: ``{"key": <base64>, "value": <base64>}``,
    whose value is the full canal-json message."""
    try:
        obj = orjson.loads(file_bytes)
    except orjson.JSONDecodeError as e:
        raise MalformedMessage(CODEC, e.pos, f"claim-check file is not JSON: {e.msg}") from None
    if type(obj) is not dict or type(obj.get("value")) is not str:
        raise MalformedMessage(CODEC, "value", "claim-check file needs a base64 'value' string")
    try:
        value = base64.b64decode(obj["value"], validate=True)
    except ValueError as e:
        raise MalformedMessage(CODEC, "value", f"claim-check value is not base64: {e}") from None
    return (decoder or CanalJsonDecoder()).decode(value)


def encode(event: Event, options: CanalJsonOptions | None = None) -> bytes:
    """One-off convenience; use ``CanalJsonEncoder`` on hot paths (it caches per table)."""
    return CanalJsonEncoder(options).encode(event)


def decode(message: bytes) -> Event:
    """One-off convenience; use ``CanalJsonDecoder`` on hot paths (it caches per table)."""
    return CanalJsonDecoder().decode(message)


def decode_many(messages: Iterable[bytes]) -> list[Event]:
    return CanalJsonDecoder().decode_many(messages)
