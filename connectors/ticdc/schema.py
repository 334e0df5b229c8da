"""The TiDB column model as it travels with records: an Avro record schema in the schema store.

A decoded TiCDC row carries its table's columns (type, unsigned, precision,
elements, handle key, ...) so a later hop can encode another format. The
record's payload schema (``opencdc.payload.schema.subject/version``) is an
Avro record schema whose field types make the row dict conform (so the
lossless protobuf/JSON forms reuse it, see ``cdcflow.convert.avro``) and whose
field properties keep the column facts:

    {"type": "record", "name": "t1", "namespace": "cdcflow.connectors.ticdc.tidb.db1",
     "cdcflow.table": {"schema": "db1", "table": "t1", "version": 0},
     "fields": [{"name": "id", "type": "long",
                 "cdcflow.column": {"type": "BIGINT", "nullable": false, "handle_key": true, ...}},
                ...]}

Subjects: ``<schema>.<table>.payload`` (all columns) and ``<schema>.<table>.key``
(handle-key columns). A DDL control record references the table after the DDL
with ``ticdc.table.schema.subject/version`` instead (its payload is the statement).
See docs/ticdc-records.md.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import json
import re
import threading
import weakref
from typing import Any

from cdcflow.errors import RecordError, SchemaError
from cdcflow.record import (
    META_COLLECTION,
    META_CONTROL,
    META_KEY_SCHEMA_SUBJECT,
    META_KEY_SCHEMA_VERSION,
    META_PAYLOAD_SCHEMA_SUBJECT,
    META_PAYLOAD_SCHEMA_VERSION,
    Record,
)
from cdcflow.connectors.ticdc.tidb import BINARY_TYPES, FLOAT_TYPES, INTEGER_TYPES, Column, TableSchema

from .events import (
    CONTROL_DDL,
    META_PARTITION,
    META_SCHEMA,
    META_TABLE,
    META_TABLE_SCHEMA_SUBJECT,
    META_TABLE_SCHEMA_VERSION,
)

TABLE_PROP = "cdcflow.table"
COLUMN_PROP = "cdcflow.column"
NAME_PROP = "cdcflow.name"

# --------------------------------------------------------------------------- names

_INVALID = re.compile(r"[^A-Za-z0-9_]")


def sanitize_name(name: str) -> str:
    """An Avro name the way TiCDC makes one: invalid characters become ``_``,
    a leading digit gets a ``_`` prefix, an empty name becomes ``_``."""
    out = _INVALID.sub("_", name)
    if not out:
        return "_"
    if out[0].isdigit():
        out = "_" + out
    return out


def payload_subject(table: TableSchema) -> str:
    return f"{table.schema}.{table.table}.payload"


def key_subject(table: TableSchema) -> str:
    return f"{table.schema}.{table.table}.key"


# --------------------------------------------------------------------------- value kinds


def value_kind(col: Column) -> tuple[str, dict]:
    """The ``cdcflow.convert.avro`` kind (and its parameters) of a column's native value."""
    t = col.type
    if t in INTEGER_TYPES:
        if t == "BIGINT" and col.unsigned:
            return "bigint", {}
        return "long", {}
    if t == "YEAR":
        return "long", {}
    if t == "BIT":
        return ("long", {}) if col.length is not None and col.length < 64 else ("bigint", {})
    if t in FLOAT_TYPES:
        return "double", {}
    if t == "DECIMAL":
        if col.precision is None or col.scale is None:
            # Scale unknown (canal-json's default mysqlType, open protocol): keep each
            # value's own scale by carrying the decimal text.
            return "decimal_text", {}
        return "decimal", {"precision": col.precision, "scale": col.scale}
    if t in BINARY_TYPES:
        return "bytes", {}
    if t == "DATE":
        return "date", {}
    if t in ("DATETIME", "TIMESTAMP"):
        return "datetime", {}
    if t == "TIME":
        return "time", {}
    # text family, ENUM, SET, JSON: strings
    return "string", {}


def _avro_type(kind: str, params: dict) -> Any:
    from cdcflow.convert.avro import avro_type  # the one native<->Avro mapping

    return avro_type(kind, **params)


# --------------------------------------------------------------------------- column facts <-> JSON

_FIELDS = [f for f in dataclasses.fields(Column) if f.name not in ("name", "type")]
_DEFAULTS = {f.name: f.default for f in _FIELDS}


def _default_to_json(v: Any) -> Any:
    """Column defaults as JSON, tagged when JSON has no such type."""
    if v is None or isinstance(v, (bool, str, float)):
        return v
    if isinstance(v, int):
        return v if -(2**53) < v < 2**53 else {"int": str(v)}
    if isinstance(v, decimal.Decimal):
        return {"decimal": str(v)}
    if isinstance(v, bytes):
        return {"base64": base64.b64encode(v).decode()}
    if isinstance(v, datetime.datetime):
        return {"datetime": v.isoformat()}
    if isinstance(v, datetime.date):
        return {"date": v.isoformat()}
    if isinstance(v, datetime.timedelta):
        return {"time_us": (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds}
    raise SchemaError(f"column default {v!r} has no JSON form")


def _default_from_json(v: Any) -> Any:
    if not isinstance(v, dict):
        return v
    (tag, text), = v.items()
    if tag == "int":
        return int(text)
    if tag == "decimal":
        return decimal.Decimal(text)
    if tag == "base64":
        return base64.b64decode(text)
    if tag == "datetime":
        return datetime.datetime.fromisoformat(text)
    if tag == "date":
        return datetime.date.fromisoformat(text)
    if tag == "time_us":
        return datetime.timedelta(microseconds=text)
    raise SchemaError(f"unknown tagged column default {v!r}")


def column_facts(col: Column) -> dict:
    """The column's facts that differ from the dataclass defaults, JSON-ready."""
    facts: dict[str, Any] = {"type": col.type}
    for name, dflt in _DEFAULTS.items():
        v = getattr(col, name)
        if v != dflt or (name == "default" and col.has_default):
            if name == "elements":
                v = list(v)
            elif name == "default":
                v = _default_to_json(v)
            facts[name] = v
    return facts


def column_from_facts(name: str, facts: dict) -> Column:
    kw = {k: v for k, v in facts.items() if k in _DEFAULTS}
    if "elements" in kw:
        kw["elements"] = tuple(kw["elements"])
    if "default" in kw:
        kw["default"] = _default_from_json(kw["default"])
    return Column(name=name, type=facts["type"], **kw)


# --------------------------------------------------------------------------- schema <-> table


def _record_schema(table: TableSchema, columns, key: bool) -> dict:
    fields = []
    used: set[str] = set()
    for col in columns:
        fname = sanitize_name(col.name)
        base, n = fname, 1
        while fname in used:  # two columns sanitize alike ("a-b", "a_b"): keep both
            fname = f"{base}_{n}"
            n += 1
        used.add(fname)
        kind, params = value_kind(col)
        t = _avro_type(kind, params)
        field: dict[str, Any] = {"name": fname}
        if col.nullable:
            field["type"] = ["null", t]
            field["default"] = None
        else:
            field["type"] = t
        if fname != col.name:
            field[NAME_PROP] = col.name
        field[COLUMN_PROP] = column_facts(col)
        fields.append(field)
    props: dict[str, Any] = {"schema": table.schema, "table": table.table, "version": table.version}
    if key:
        props["key"] = True
    return {
        "type": "record",
        "name": sanitize_name(table.table),
        "namespace": "cdcflow.connectors.ticdc.tidb." + sanitize_name(table.schema),
        TABLE_PROP: props,
        "fields": fields,
    }


def table_schema_avro(table: TableSchema) -> dict:
    """Avro record schema of all columns (the payload schema)."""
    return _record_schema(table, table.columns, key=False)


def key_schema_avro(table: TableSchema) -> dict | None:
    """Avro record schema of the handle-key columns; None when the table has none."""
    key = table.handle_key
    return _record_schema(table, key, key=True) if key else None


def table_from_avro(schema: dict | str) -> TableSchema:
    """Rebuild the column model from a schema made by ``table_schema_avro``."""
    if isinstance(schema, str):
        schema = json.loads(schema)
    props = schema.get(TABLE_PROP)
    if not isinstance(props, dict):
        raise SchemaError(f"schema {schema.get('name')!r} carries no {TABLE_PROP} property: not a TiDB table")
    cols = []
    for f in schema["fields"]:
        facts = f.get(COLUMN_PROP)
        if not isinstance(facts, dict):
            raise SchemaError(f"field {f.get('name')!r} of {props} has no {COLUMN_PROP} property")
        cols.append(column_from_facts(f.get(NAME_PROP, f["name"]), facts))
    return TableSchema(props["schema"], props["table"], tuple(cols), int(props.get("version", 0)))


# --------------------------------------------------------------------------- attach / look up


@dataclasses.dataclass(frozen=True, slots=True)
class _Refs:
    payload_subject: str
    payload_version: str
    key_subject: str | None
    key_version: str | None


_lock = threading.Lock()
# store -> {id(table): (table, refs)} and store -> {table: refs} (equal tables built anew)
_by_identity: "weakref.WeakKeyDictionary[Any, dict[int, tuple[TableSchema, _Refs]]]" = weakref.WeakKeyDictionary()
_by_value: "weakref.WeakKeyDictionary[Any, dict[TableSchema, _Refs]]" = weakref.WeakKeyDictionary()
_tables: "weakref.WeakKeyDictionary[Any, dict[tuple, TableSchema | None]]" = weakref.WeakKeyDictionary()


def _refs(table: TableSchema, store) -> _Refs:
    ident = _by_identity.get(store)
    if ident is not None:
        hit = ident.get(id(table))
        if hit is not None and hit[0] is table:
            return hit[1]
    with _lock:
        ident = _by_identity.setdefault(store, {})
        by_value = _by_value.setdefault(store, {})
    refs = by_value.get(table)
    if refs is None:
        if table.partition is not None:  # the partition travels in metadata, not in the schema
            table = dataclasses.replace(table, partition=None)
        payload = store.register(payload_subject(table), json.dumps(table_schema_avro(table)))
        kschema = key_schema_avro(table)
        if kschema is not None:
            k = store.register(key_subject(table), json.dumps(kschema))
            refs = _Refs(payload.subject, str(payload.version), k.subject, str(k.version))
        else:
            refs = _Refs(payload.subject, str(payload.version), None, None)
        if len(by_value) > 10_000:
            by_value.clear()
        by_value[table] = refs
    if len(ident) > 10_000:
        ident.clear()
    ident[id(table)] = (table, refs)
    return refs


def attach_table(record: Record, table: TableSchema, store) -> None:
    """Register the table's schemas (once) and reference them from the record's
    ``opencdc.payload.schema.*`` / ``opencdc.key.schema.*`` metadata."""
    refs = _refs(table, store)
    md = record.metadata
    md[META_PAYLOAD_SCHEMA_SUBJECT] = refs.payload_subject
    md[META_PAYLOAD_SCHEMA_VERSION] = refs.payload_version
    if refs.key_subject is not None:
        md[META_KEY_SCHEMA_SUBJECT] = refs.key_subject
        md[META_KEY_SCHEMA_VERSION] = refs.key_version


def attach_table_schema(record: Record, table: TableSchema, store) -> None:
    """Reference the table from a DDL control record (``ticdc.table.schema.*``)."""
    refs = _refs(table, store)
    record.metadata[META_TABLE_SCHEMA_SUBJECT] = refs.payload_subject
    record.metadata[META_TABLE_SCHEMA_VERSION] = refs.payload_version


def table_of(record: Record, store) -> TableSchema | None:
    """The column model the record references; None when it references none or a
    schema that is not a TiDB table (e.g. one derived from a record's values)."""
    md = record.metadata
    if md.get(META_CONTROL) == CONTROL_DDL:
        subject = md.get(META_TABLE_SCHEMA_SUBJECT)
        version = md.get(META_TABLE_SCHEMA_VERSION)
    else:
        subject = md.get(META_PAYLOAD_SCHEMA_SUBJECT)
        version = md.get(META_PAYLOAD_SCHEMA_VERSION)
    if subject is None or version is None:
        return None
    partition = md.get(META_PARTITION)
    cache_key = (subject, version, partition)
    cache = _tables.get(store)
    if cache is None:
        with _lock:
            cache = _tables.setdefault(store, {})
    try:
        return cache[cache_key]
    except KeyError:
        pass
    try:
        text = store.get(subject, int(version)).text
    except (SchemaError, ValueError) as e:
        raise RecordError(f"record references schema {subject!r} version {version!r}: {e}",
                          position=record.position) from None
    schema = json.loads(text)
    if not isinstance(schema, dict) or TABLE_PROP not in schema:
        table = None
    else:
        table = table_from_avro(schema)
        if partition is not None:
            table = dataclasses.replace(table, partition=int(partition))
    if len(cache) > 10_000:
        cache.clear()
    cache[cache_key] = table
    return table


# --------------------------------------------------------------------------- fallback: infer


def infer_table(record: Record, row: dict | None, old: dict | None = None) -> TableSchema:
    """Column model for a record that references none (it came from another source).

    Documented fallback (docs/ticdc-records.md): int -> BIGINT (BIGINT UNSIGNED at
    2^63 and above, DECIMAL(65,0) beyond 64 bits), bool -> TINYINT(1) (comes back as
    0/1), float -> DOUBLE, Decimal -> DECIMAL(digits, its scale), str -> LONGTEXT,
    bytes -> LONGBLOB, date -> DATE, datetime -> DATETIME(6), timedelta -> TIME(6),
    None-only -> LONGTEXT. Key columns (names in ``record.key``) are the handle
    key, NOT NULL; all others nullable. Nested values raise ``RecordError``.
    """
    md = record.metadata
    schema, table = md.get(META_SCHEMA), md.get(META_TABLE)
    if schema is None or table is None:
        coll = md.get(META_COLLECTION) or ""
        schema, _, table = coll.partition(".")
        if not table:
            schema, table = "cdcflow", coll or "unknown"
    key_names = set(record.key) if isinstance(record.key, dict) else set()
    names: list[str] = []
    sample: dict[str, Any] = {}
    for image in (row, old, record.key if isinstance(record.key, dict) else None):
        if not image:
            continue
        for n, v in image.items():
            if n not in sample:
                names.append(n)
                sample[n] = v
            elif sample[n] is None:
                sample[n] = v
    cols = []
    for n in names:
        col = _infer_column(n, sample[n], record)
        if n in key_names:
            col = dataclasses.replace(col, nullable=False, primary_key=True, handle_key=True)
        cols.append(col)
    partition = md.get(META_PARTITION)
    return TableSchema(schema, table, tuple(cols), 0, int(partition) if partition is not None else None)


def _infer_column(name: str, v: Any, record: Record) -> Column:
    if v is None or isinstance(v, str):
        return Column(name, "LONGTEXT")
    if isinstance(v, bool):
        return Column(name, "TINYINT", length=1)
    if isinstance(v, int):
        if -(2**63) <= v < 2**63:
            return Column(name, "BIGINT")
        if 0 <= v < 2**64:
            return Column(name, "BIGINT", unsigned=True)
        return Column(name, "DECIMAL", precision=65, scale=0)
    if isinstance(v, float):
        return Column(name, "DOUBLE")
    if isinstance(v, decimal.Decimal):
        _, digits, exp = v.as_tuple()
        scale = max(0, -exp) if isinstance(exp, int) else 0
        return Column(name, "DECIMAL", precision=min(65, max(len(digits), scale, 1)), scale=min(scale, 30))
    if isinstance(v, bytes):
        return Column(name, "LONGBLOB", binary=True)
    if isinstance(v, datetime.datetime):
        return Column(name, "DATETIME", fsp=6)
    if isinstance(v, datetime.date):
        return Column(name, "DATE")
    if isinstance(v, datetime.timedelta):
        return Column(name, "TIME", fsp=6)
    raise RecordError(f"column {name!r}: a {type(v).__name__} value has no TiDB column type",
                      position=record.position)


__all__ = [
    "attach_table", "attach_table_schema", "column_facts", "column_from_facts", "infer_table",
    "key_schema_avro", "key_subject", "payload_subject", "sanitize_name", "table_from_avro",
    "table_of", "table_schema_avro", "value_kind",
]

