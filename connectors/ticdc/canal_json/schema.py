"""What canal-json's encoder and decoder share: the options, TiDB's value texts (the text forms
are ``cdcflow.connectors.ticdc.tidb``'s; the ``*_text`` / ``parse_*`` names here are aliases)
and ``mysqlType`` <-> column model.

One message is one JSON object: a DML row, a DDL statement or (with the TiDB extension) a
``TIDB_WATERMARK``; every column value is a JSON string in TiDB's text form (see
``docs/codec-canal-json.md``).
"""

from __future__ import annotations

import decimal
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from cdcflow.connectors.ticdc.events import (
    DELETE,
    INSERT,
    UPDATE,
)
from cdcflow.connectors.ticdc.tidb import (
    BINARY_TYPES,
    INTEGER_TYPES,
    TEXT_TYPES,
    TIME_MAX_US,
    Column,
    ValueMismatch,
    format_date,
    format_datetime,
    format_decimal,
    format_float,
    format_go_float,
    format_time,
    parse_date,
    parse_datetime,
)
from cdcflow.connectors.ticdc.tidb import parse_time as _parse_time_any
from cdcflow.params import option_bool

CODEC = "canal-json"


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


