"""Topic and partition dispatch, as TiCDC's partition dispatchers do it.

Consumers written for TiCDC rely on where rows land (all changes of one table,
or of one key, in one partition, in order), so the rules are TiCDC's to the bit:
IEEE crc32 over schema and table, then over handle-key (or listed) column
names and value strings.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import zlib
from typing import Any, Callable

from cdcflow.connectors.ticdc.tidb import TableSchema, format_date, format_datetime, format_decimal, format_time

from ..ticdc.events import RowChange


def topic_for(rule: str, schema: str, table: str) -> str:
    """Apply a topic rule such as ``tidb_{schema}_{table}``."""
    if "{" not in rule:
        return rule
    return rule.replace("{schema}", schema).replace("{table}", table)


def value_string(v: Any) -> bytes:
    """The text TiCDC hashes for a column value: decimal integers, shortest floats, raw bytes otherwise."""
    if v is None:
        return b"null"
    t = type(v)
    if t is int or t is bool:
        return str(int(v)).encode()
    if t is str:
        return v.encode()
    if t is bytes:
        return v
    if t is float:
        return repr(v).encode()
    if isinstance(v, decimal.Decimal):
        return format_decimal(v).encode()
    if isinstance(v, _dt.datetime):
        return format_datetime(v).encode()
    if isinstance(v, _dt.date):
        return format_date(v).encode()
    if isinstance(v, _dt.timedelta):
        return format_time(v).encode()
    return str(v).encode()


def table_hash(schema: str, table: str) -> int:
    return zlib.crc32(table.encode(), zlib.crc32(schema.encode()))


Dispatch = Callable[[RowChange, int], int]


def _by_table(ev: RowChange, n: int) -> int:
    t = ev.table
    return table_hash(t.schema, t.table) % n


def _by_ts(ev: RowChange, n: int) -> int:
    return ev.commit_ts % n


def _columns_dispatch(names_of: Callable[[TableSchema], tuple[str, ...]]) -> Dispatch:
    cache: dict[int, tuple[TableSchema, tuple[str, ...]]] = {}

    def dispatch(ev: RowChange, n: int) -> int:
        t = ev.table
        hit = cache.get(id(t))
        if hit is None or hit[0] is not t:
            hit = cache[id(t)] = (t, names_of(t))
        h = table_hash(t.schema, t.table)
        row = ev.row or {}
        for name in hit[1]:
            h ^= zlib.crc32(value_string(row.get(name)), zlib.crc32(name.encode()))
        return h % n

    return dispatch


def dispatcher(kind: str, columns: list[str] | None = None) -> Dispatch:
    """The partition function for a ``partition`` setting: f(row change, partition count) → partition."""
    if kind in ("default", "table"):
        return _by_table
    if kind == "ts":
        return _by_ts
    if kind in ("index-value", "rowid"):
        return _columns_dispatch(lambda t: tuple(c.name for c in t.columns if c.handle_key))
    if kind == "columns":
        wanted = tuple(columns or ())
        return _columns_dispatch(lambda t: wanted)
    raise ValueError(f"unknown partition dispatcher {kind!r}")
