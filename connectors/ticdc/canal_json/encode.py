"""canal-json writer: TiCDC events -> canal-json messages, as TiCDC writes them."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from typing import Any

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
    INLINE_NAMES,
    INTEGER_TYPES,
    Column,
    TableSchema,
    inline_text_expr,
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
