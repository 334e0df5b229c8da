"""canal-json reader: canal-json messages (and claim-check files) -> TiCDC events."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from cdcflow.connectors.ticdc.errors import (
    CodecError,
    MalformedMessage,
)
from cdcflow.connectors.ticdc.events import (
    META_CLAIM_CHECK_LOCATION,
    META_ONLY_HANDLE_KEY,
    UPDATE,
    DDLEvent,
    Event,
    ResolvedEvent,
    RowChange,
)
from cdcflow.connectors.ticdc.tidb import (
    Column,
    TableSchema,
)

from .schema import (
    _CANAL_ACTION,
    _SQL_CODE_TYPE,
    CODEC,
    DDL_TYPES,
    DML_TYPES,
    META_CANAL_TYPE,
    WATERMARK,
    parse_mysql_type,
    value_parser,
)

# --------------------------------------------------------------------------- decoder

class _DecodePlan:
    """Per (table, mysqlType, pkNames): the column model and a parser per column."""

    __slots__ = ("table", "mysql", "pk", "columns")

    def __init__(self, table: TableSchema, mysql: dict, pk: list | None):
        self.table = table
        self.mysql = mysql
        self.pk = pk
        self.columns = tuple((c.name, value_parser(c)) for c in table.columns)


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
