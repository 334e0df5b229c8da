"""TiCDC storage schema files: ``schema_{version}_{checksum}.json`` for tables and databases.

The file name carries a CRC-32 of the table's columns so a reader can tell two
versions with the same columns apart from a changed table, and a writer that
restarts can find the version it was writing. Content and checksum follow
TiCDC's ``TableDefinition`` byte for byte: Go's indented JSON (4 spaces, fixed key
order, ``&``, ``<``, ``>`` written as ``\u0026``, ``\u003c``, ``\u003e``). A file read
is checked against the checksum of its fields as written (numbers, escapes and
``ColumnId`` as they are in the file), as TiCDC's consumer checks it, not against
cdcflow's rendering of the parsed table. See docs/connector-storage.md.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
import json.decoder
import json.scanner
import re
import zlib
from dataclasses import dataclass
from typing import Any

from cdcflow.connectors.ticdc.canal_json import ddl_elements
from cdcflow.errors import CdcflowError
from cdcflow.connectors.ticdc.tidb import BINARY_TYPES, FLOAT_TYPES, INTEGER_TYPES, TEXT_TYPES, Column, TableSchema, format_date

#: protocol version of the storage sink written into every schema file
PROTOCOL_VERSION = 1
SCHEMA_FILE_RE = re.compile(r"^schema_(\d+)_(\d{10})\.json$")
#: the schema file of a version in the layout TiCDC v6.5.0-7.0 wrote ({schema}/{table}/{version}/schema.json)
LEGACY_SCHEMA_FILE = "schema.json"
# TiCDC's TableCol fields in its order; the first two are always written, the others only when not empty
_COLUMN_KEYS = ("ColumnId", "ColumnName", "ColumnType", "ColumnDefault", "ColumnPrecision", "ColumnScale",
                "ColumnNullable", "ColumnIsPk")
_ALWAYS = ("ColumnName", "ColumnType")


class SchemaFileError(CdcflowError):
    """A schema file is unreadable, or its name's checksum does not match its content."""

    def __init__(self, path: str, message: str):
        self.path = path
        super().__init__(f"{path}: {message}")


@dataclass(frozen=True)
class SchemaFile:
    """One parsed schema file. ``table`` is None for a database schema file."""

    schema: str
    table_name: str
    table_version: int
    query: str
    ddl_type: int
    table: TableSchema | None
    checksum: int


# --------------------------------------------------------------------------- columns


def _column_json(col: Column) -> dict[str, Any]:
    """TiCDC's ``TableCol``: keys in its order, empty optional keys left out."""
    out: dict[str, Any] = {"ColumnName": col.name, "ColumnType": col.type + (" UNSIGNED" if col.unsigned else "")}
    if col.has_default and col.default is not None:
        out["ColumnDefault"] = _default_text(col.default)
    t = col.type
    precision = scale = None
    if t == "DECIMAL":
        precision, scale = col.precision, col.scale
    elif t in FLOAT_TYPES:
        precision, scale = col.precision, col.scale
    elif t in ("DATETIME", "TIMESTAMP", "TIME"):
        scale = col.fsp if col.fsp else None  # 0 is TiDB's default fsp: not written
    elif t in INTEGER_TYPES or t in ("BIT", "YEAR") or t in TEXT_TYPES or t in BINARY_TYPES:
        precision = col.length
    if precision is not None:
        out["ColumnPrecision"] = str(precision)
    if scale is not None:
        out["ColumnScale"] = str(scale)
    if not col.nullable:
        out["ColumnNullable"] = "false"
    if col.primary_key:
        out["ColumnIsPk"] = "true"
    return out


def _default_text(v: Any) -> Any:
    if isinstance(v, (str, bool)) or v is None:
        return v
    if isinstance(v, (int, float, decimal.Decimal)):
        return str(v)
    if isinstance(v, bytes):
        return v.decode("latin-1")
    if isinstance(v, datetime.datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, datetime.date):
        return format_date(v)
    return str(v)


def _column_from_json(obj: dict, path: str) -> Column:
    try:
        name = obj["ColumnName"]
        tp = obj["ColumnType"]
    except (KeyError, TypeError):
        raise SchemaFileError(path, f"column entry without ColumnName/ColumnType: {obj!r}") from None
    if not isinstance(name, str) or not isinstance(tp, str):
        raise SchemaFileError(path, f"ColumnName and ColumnType must be strings: {obj!r}")
    tp = tp.upper().strip()
    unsigned = tp.endswith(" UNSIGNED")
    if unsigned:
        tp = tp[: -len(" UNSIGNED")].strip()
    tp = {"INTEGER": "INT", "NUMERIC": "DECIMAL", "BOOL": "TINYINT", "BOOLEAN": "TINYINT"}.get(tp, tp)

    def num(key: str) -> int | None:
        v = obj.get(key)
        if v is None or v == "":
            return None
        try:
            return int(v)
        except (TypeError, ValueError):
            raise SchemaFileError(path, f"column {name!r}: {key} {v!r} is not an integer") from None

    precision, scale = num("ColumnPrecision"), num("ColumnScale")
    if precision is None:
        precision = num("ColumnLength")  # the design doc's spelling; TiCDC's code writes Precision
    kw: dict[str, Any] = {}
    if tp == "DECIMAL" or tp in FLOAT_TYPES:
        kw.update(precision=precision, scale=scale)
    elif tp in ("DATETIME", "TIMESTAMP", "TIME"):
        kw["fsp"] = scale or 0
    elif precision is not None:
        kw["length"] = precision
    nullable = str(obj.get("ColumnNullable", "true")).lower() != "false"
    pk = str(obj.get("ColumnIsPk", "false")).lower() == "true"
    if "ColumnDefault" in obj and obj["ColumnDefault"] is not None:
        kw.update(default=obj["ColumnDefault"], has_default=True)
    return Column(name, tp, unsigned=unsigned, nullable=nullable, primary_key=pk, handle_key=pk,
                  binary=tp in BINARY_TYPES, **kw)


# --------------------------------------------------------------------------- checksum and content


class _Token(str):
    """A JSON scalar read from a file: the decoded string (or number text) plus ``raw``, its text
    in the file, so the checksum is taken over the bytes the writer wrote."""

    raw: str


def _token(value: str, raw: str) -> _Token:
    t = _Token(value)
    t.raw = raw
    return t


def _number(text: str) -> _Token:
    return _token(text, text)


class _RawDecoder(json.JSONDecoder):
    """``json`` on the pure-Python scanner, with strings and numbers kept as ``_Token``s."""

    def __init__(self):
        super().__init__(parse_int=_number, parse_float=_number)

        def parse_string(s: str, end: int, strict: bool = True):
            value, stop = json.decoder.scanstring(s, end, strict)
            return _token(value, s[end - 1:stop]), stop

        self.parse_string = parse_string
        self.scan_once = json.scanner.py_make_scanner(self)


_HTML_ESCAPES = str.maketrans({"&": "\\u0026", "<": "\\u003c", ">": "\\u003e", "\u2028": "\\u2028",
                               "\u2029": "\\u2029"})


def _go_json(obj: Any, indent: str = "") -> str:
    """Go's ``json.MarshalIndent(v, "", "    ")``: 4 spaces, ``&<>`` and U+2028/9 escaped in text;
    a ``_Token`` is written as it was read."""
    if type(obj) is _Token:
        return obj.raw
    if isinstance(obj, dict) and obj:
        inner = indent + "    "
        return "{\n" + ",\n".join(f"{inner}{_go_json(k)}: {_go_json(v, inner)}" for k, v in obj.items()) \
            + f"\n{indent}}}"
    if isinstance(obj, list) and obj:
        inner = indent + "    "
        return "[\n" + ",\n".join(inner + _go_json(v, inner) for v in obj) + f"\n{indent}]"
    return json.dumps(obj, ensure_ascii=False).translate(_HTML_ESCAPES)


def _checksum_body(table: str, schema: str, columns: list[dict], total: int) -> int:
    """TiCDC's CRC-32 (IEEE) over name, schema and name-sorted columns (Version 0; no table
    version, query or type), each column with the fields TiCDC writes, in its order."""
    body = {"Table": table, "Schema": schema, "Version": 0,
            "TableColumns": sorted(columns, key=lambda c: str(c["ColumnName"]).encode("utf-8", "surrogatepass")),
            "TableColumnsTotal": total}
    return zlib.crc32(_go_json(body).encode("utf-8", "surrogatepass"))


def checksum(schema: str, table: TableSchema | None) -> int:
    """The checksum of the file ``render`` writes for ``table`` (None: the database ``schema``)."""
    cols = [] if table is None else [_column_json(c) for c in table.columns]
    return _checksum_body("" if table is None else table.table, schema, cols, len(cols))


def _file_checksum(text: str, path: str) -> int:
    """The checksum of a schema file's fields as written, computed as TiCDC's consumer does
    (fields of ``TableCol`` in its order, empty optional ones left out)."""
    try:
        obj = _RawDecoder().decode(text)
    except ValueError as e:
        raise SchemaFileError(path, f"not JSON: {e}") from None
    columns = []
    for c in obj.get("TableColumns") or []:
        col = {}
        for key in _COLUMN_KEYS:
            v = c.get(key)
            if key in _ALWAYS:
                col[key] = "" if v is None else v
            elif v is not None and (v != "" or key == "ColumnDefault"):
                col[key] = v
        columns.append(col)
    try:
        total = int(obj.get("TableColumnsTotal") or 0)
    except ValueError:
        raise SchemaFileError(path, "TableColumnsTotal must be an integer") from None
    return _checksum_body(obj.get("Table") or "", obj.get("Schema") or "", columns, total)


def render(schema: str, table: TableSchema | None, table_version: int, query: str = "",
           ddl_type: int = 0) -> tuple[str, bytes]:
    """(file name, content) of the schema file of ``table`` (None: the database ``schema``)."""
    if table is None:
        cols, total, name = None, 0, ""
    else:
        cols = [_column_json(c) for c in table.columns]
        total, name = len(cols), table.table
    body = {"Table": name, "Schema": schema, "Version": PROTOCOL_VERSION, "TableVersion": table_version,
            "Query": query, "Type": ddl_type, "TableColumns": cols, "TableColumnsTotal": total}
    return file_name(table_version, checksum(schema, table)), _go_json(body).encode("utf-8")


def file_name(table_version: int, crc: int) -> str:
    return f"schema_{table_version}_{crc:010d}.json"


def parse_name(name: str) -> tuple[int, int] | None:
    """(table version, checksum) of a schema file name; None for other files."""
    m = SCHEMA_FILE_RE.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse(path: str, data: bytes, verify: bool = True) -> SchemaFile:
    """Parse a schema file; with ``verify`` the checksum and table version in its name must match
    its content. A legacy ``schema.json`` (v6.5.0-7.0 layout) has neither in its name."""
    name = path.rsplit("/", 1)[-1]
    parsed = None if name == LEGACY_SCHEMA_FILE else parse_name(name)
    if parsed is None and name != LEGACY_SCHEMA_FILE:
        raise SchemaFileError(path, "not a schema file name (schema_{version}_{checksum}.json)")
    try:
        text = data.decode("utf-8")
        obj = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise SchemaFileError(path, f"not JSON: {e}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("Schema"), str):
        raise SchemaFileError(path, "not a TiCDC schema file (no Schema field)")
    schema, table_name = obj["Schema"], obj.get("Table") or ""
    cols = obj.get("TableColumns") or []
    if not isinstance(cols, list) or not all(isinstance(c, dict) for c in cols):
        raise SchemaFileError(path, "TableColumns must be a list of objects or null")
    try:
        version = int(obj.get("TableVersion", parsed[0] if parsed else 0))
        ddl_type = int(obj.get("Type") or 0)
    except (TypeError, ValueError):
        raise SchemaFileError(path, "TableVersion and Type must be integers") from None
    table = None
    if table_name:
        table = TableSchema(schema, table_name, tuple(_column_from_json(c, path) for c in cols), version)
    crc = _file_checksum(text, path)
    if verify and parsed is not None:
        if crc != parsed[1]:
            raise SchemaFileError(path, f"checksum in the name ({parsed[1]}) does not match the content ({crc}); "
                                        "the file was changed or is not TiCDC's")
        if version != parsed[0]:
            raise SchemaFileError(path, f"TableVersion {version} differs from the version in the name ({parsed[0]})")
    return SchemaFile(schema, table_name, version, str(obj.get("Query") or ""), ddl_type, table, crc)


def with_ddl_elements(table: TableSchema, query: str) -> TableSchema:
    """The table with ENUM/SET members its DDL defines (a schema file has no place for them, so
    without this a CSV reader knows the names but not their order: no index can be written)."""
    missing = [c.name for c in table.columns if c.type in ("ENUM", "SET") and not c.elements]
    if not missing:
        return table
    found = ddl_elements(query)
    if not any(n in found for n in missing):
        return table
    cols = tuple(dataclasses.replace(c, elements=found[c.name]) if c.name in found and c.name in missing else c
                 for c in table.columns)
    return dataclasses.replace(table, columns=cols, index={})
