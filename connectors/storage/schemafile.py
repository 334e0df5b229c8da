"""TiCDC storage schema files: ``schema_{version}_{checksum}.json`` for tables and databases.

The file name carries a CRC-32 of the table's columns so a reader can tell two
versions with the same columns apart from a changed table, and a writer that
restarts can find the version it was writing. Content and checksum follow
TiCDC's ``TableDefinition`` byte for byte (4-space JSON, fixed key order; see
``/work/shared/reference/ticdc-formats.md`` §4 and docs/connector-storage.md).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
import re
import zlib
from dataclasses import dataclass
from typing import Any

from cdcflow.connectors.ticdc.canal_json import ddl_elements
from cdcflow.errors import CdcflowError
from cdcflow.tidb import BINARY_TYPES, FLOAT_TYPES, INTEGER_TYPES, TEXT_TYPES, Column, TableSchema, format_date

#: protocol version of the storage sink written into every schema file
PROTOCOL_VERSION = 1
SCHEMA_FILE_RE = re.compile(r"^schema_(\d+)_(\d{10})\.json$")


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


def _dumps(obj: Any) -> str:
    """Go's ``json.MarshalIndent(v, "", "    ")``: 4 spaces, no HTML escaping of text we write."""
    return json.dumps(obj, indent=4, ensure_ascii=False)


def checksum(schema: str, table: TableSchema | None) -> int:
    """TiCDC's CRC-32 (IEEE) over name, schema and name-sorted columns (no versions, query or type)."""
    cols = [] if table is None else [_column_json(c) for c in sorted(table.columns, key=lambda c: c.name)]
    body = {"Table": "" if table is None else table.table, "Schema": schema, "Version": 0,
            "TableColumns": cols, "TableColumnsTotal": len(cols)}
    return zlib.crc32(_dumps(body).encode("utf-8"))


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
    return file_name(table_version, checksum(schema, table)), _dumps(body).encode("utf-8")


def file_name(table_version: int, crc: int) -> str:
    return f"schema_{table_version}_{crc:010d}.json"


def parse_name(name: str) -> tuple[int, int] | None:
    """(table version, checksum) of a schema file name; None for other files."""
    m = SCHEMA_FILE_RE.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse(path: str, data: bytes, verify: bool = True) -> SchemaFile:
    """Parse a schema file; with ``verify`` the checksum in its name must match its columns."""
    name = path.rsplit("/", 1)[-1]
    parsed = parse_name(name)
    if parsed is None:
        raise SchemaFileError(path, "not a schema file name (schema_{version}_{checksum}.json)")
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise SchemaFileError(path, f"not JSON: {e}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("Schema"), str):
        raise SchemaFileError(path, "not a TiCDC schema file (no Schema field)")
    schema, table_name = obj["Schema"], obj.get("Table") or ""
    cols = obj.get("TableColumns") or []
    if not isinstance(cols, list):
        raise SchemaFileError(path, "TableColumns must be a list or null")
    try:
        version = int(obj.get("TableVersion", parsed[0]))
        ddl_type = int(obj.get("Type") or 0)
    except (TypeError, ValueError):
        raise SchemaFileError(path, "TableVersion and Type must be integers") from None
    table = None
    if table_name:
        table = TableSchema(schema, table_name, tuple(_column_from_json(c, path) for c in cols), version)
    crc = checksum(schema, table)
    if verify and crc != parsed[1]:
        raise SchemaFileError(path, f"checksum in the name ({parsed[1]}) does not match the content ({crc}); "
                                    "the file was changed or is not TiCDC's")
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
