"""canal-json writer: TiCDC events -> canal-json messages, as TiCDC writes them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import orjson
from cdcflow import accel
from cdcflow.connectors.ticdc.errors import (
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
from cdcflow.connectors.ticdc.tidb import (
    INTEGER_TYPES,
    Column,
    TableSchema,
)

from .schema import (
    _ACTION_CANAL,
    _KIND_TYPE,
    _SQL_TYPE,
    _UNSIGNED_PROMOTION,
    CODEC,
    DDL_TYPES,
    META_CANAL_TYPE,
    WATERMARK,
    CanalJsonOptions,
    _binary_text,
    _dumps,
    _str_text,
    _ValueProblem,
    mysql_type,
    value_formatter,
)

_kernel = accel.load("cdcflow.connectors.ticdc.canal_json._canal_json")
"""The compiled row-message writer (``_canal_json.c``), or None: the Python path below is the
reference and the fallback (tests switch the kernel off by setting this to None)."""


# --------------------------------------------------------------------------- encoder

def _kernel_kind(col: Column, conv: Callable[[Any], str]) -> tuple[int, int]:
    """(kind, scale or fsp or -1) of ``col`` for the kernel: the types the C writer formats itself
    (with exact type checks, giving ``value_formatter(col)``'s text); the formatter for the rest."""
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


class KernelColumn(NamedTuple):
    """One column of the compiled writer's ``Plan`` (``_canal_json.c`` ``column_from_tuple``, C
    struct ``column_plan``), read by position."""

    name: str  #: the row dict's key
    key: bytes  #: ``"name":`` as JSON
    kind: int  #: a ``K_*`` kind the kernel formats itself, or ``K_CALL``
    param: int  #: DECIMAL scale, DATETIME/TIME fsp, else -1
    convert: Callable  #: the column's Python formatter (``value_formatter``), for values off the fast path
    enum_texts: dict | None  #: ENUM element -> its index text (``K_ENUM`` only)
    promote_limit: int | None  #: unsigned types: above this the sqlType is promoted (``_UNSIGNED_PROMOTION``)


def _kernel_plan(plan: "_EncodePlan", head: bytes, tidb_extension: bool, changed_only: bool):
    """The compiled writer for ``plan``'s table: the message's constant JSON pieces (the bytes
    ``_encode_row`` writes around the row images), and per column its key, kind and Python formatter."""
    table = plan.table
    limits = {name: limit for name, limit, _ in plan.promote}
    columns = []
    for col, (name, conv) in zip(table.columns, plan.columns):
        key = _dumps(name) + b":"
        kind, param = _kernel_kind(col, conv)
        enum_texts = {e: str(i + 1) for i, e in enumerate(col.elements)} if kind == _kernel.K_ENUM else None
        columns.append(KernelColumn(name=name, key=key, kind=kind, param=param, convert=conv, enum_texts=enum_texts,
                                    promote_limit=limits.get(name)))
    kinds = (INSERT, UPDATE, DELETE)
    return _kernel.Plan(
        table=table, row_change_type=RowChange, kinds=kinds,
        prefixes=tuple(head + b',"type":"' + _KIND_TYPE[k].encode() + b'","es":' for k in kinds),
        ts_part=b',"ts":',
        types_part=b',"sql":"","sqlType":' + _dumps(plan.sql) + b',"mysqlType":' + _dumps(plan.mysql) + b',"old":',
        data_part=b',"data":[', tail=b'],"_tidb":{"commitTs":' if tidb_extension else b"]}",
        tidb_extension=tidb_extension, changed_only=changed_only, columns=tuple(columns))


class _EncodePlan:
    """Per-table state for encoding: column formatters, mysqlType and sqlType objects, and the
    compiled writer's plan where the kernel is built."""

    __slots__ = ("table", "columns", "mysql", "sql", "promote", "pk_names", "kernel")

    def __init__(self, table: TableSchema, full_types: bool, tidb_extension: bool, changed_only: bool):
        self.table = table
        self.columns = tuple((c.name, value_formatter(c)) for c in table.columns)
        self.mysql = {c.name: mysql_type(c, full_types) for c in table.columns}
        self.sql = {c.name: _SQL_TYPE[c.type] for c in table.columns}
        self.promote = tuple((c.name, *_UNSIGNED_PROMOTION[c.type]) for c in table.columns
                             if c.unsigned and c.type in _UNSIGNED_PROMOTION)
        names = [c.name for c in table.columns if c.handle_key]
        self.pk_names = names or None
        self.kernel = None
        if _kernel is not None:
            try:
                # {"id":0,"database":..,"table":..,"pkNames":..,"isDdl":false   (no closing brace)
                head = _dumps({"id": 0, "database": table.schema, "table": table.table,
                               "pkNames": self.pk_names, "isDdl": False})[:-1]
                self.kernel = _kernel_plan(self, head, tidb_extension, changed_only)
            except orjson.JSONEncodeError:
                pass  # a name JSON cannot hold: the Python path raises the typed error per row


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
            table = ev.table
            while True:
                append(self._encode_row(ev, now))
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

    def _encode_row(self, ev: RowChange, now: int) -> bytes:
        plan = self._plan(ev.table)
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
