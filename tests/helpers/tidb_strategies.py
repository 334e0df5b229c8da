"""Hypothesis strategies for TiDB tables and rows, shared by every codec's tests.

Values are valid TiDB values for their column (ranges, lengths, fsp, elements)
and native per ``cdcflow.connectors.ticdc.tidb``'s docstring; extremes are drawn often.
"""

from __future__ import annotations

import datetime
import decimal
import json

from hypothesis import strategies as st

from cdcflow.connectors.ticdc.tidb import Column, TableSchema

INT_RANGES = {  # type -> (signed min, signed max, unsigned max)
    "TINYINT": (-(2**7), 2**7 - 1, 2**8 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1, 2**16 - 1),
    "MEDIUMINT": (-(2**23), 2**23 - 1, 2**24 - 1),
    "INT": (-(2**31), 2**31 - 1, 2**32 - 1),
    "BIGINT": (-(2**63), 2**63 - 1, 2**64 - 1),
}
TEXT_MAX = {"TINYTEXT": 255, "TEXT": 65535, "MEDIUMTEXT": 2**24 - 1, "LONGTEXT": 2**32 - 1}
BLOB_MAX = {"TINYBLOB": 255, "BLOB": 65535, "MEDIUMBLOB": 2**24 - 1, "LONGBLOB": 2**32 - 1}
TIME_MAX_US = ((838 * 60 + 59) * 60 + 59) * 1_000_000  # TIME is -838:59:59 .. 838:59:59
TIMESTAMP_MIN = datetime.datetime(1970, 1, 1, 0, 0, 1)
TIMESTAMP_MAX = datetime.datetime(2038, 1, 19, 3, 14, 7)

# Column names: plain, and ones TiCDC's Avro sanitizing changes (leading digit, '-', non-ASCII).
_NAME_PREFIXES = ["c", "col_", "C", "1a", "a-b", "ü", "x y"]

_text_chars = st.characters(blacklist_categories=("Cs",))
_element_chars = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="'\\")


# --------------------------------------------------------------------------- columns

def _elements(allow_comma: bool):
    text = st.text(_element_chars, min_size=0, max_size=6).map(lambda s: s.rstrip(" "))
    if not allow_comma:  # SET members cannot contain commas; '' would equal the empty set
        text = text.map(lambda s: s.replace(",", "")).filter(bool)
    return st.lists(text, min_size=1, max_size=8, unique_by=lambda s: s.lower()).map(tuple)


@st.composite
def columns(draw, name: str | None = None, key_capable: bool = False) -> Column:
    """One column of any TiDB type. ``key_capable`` limits to types a handle key can use."""
    if name is None:
        name = draw(st.sampled_from(_NAME_PREFIXES)) + str(draw(st.integers(0, 99)))
    if key_capable:
        kind = draw(st.sampled_from(["int", "decimal", "char", "binary", "date", "datetime"]))
    else:
        kind = draw(st.sampled_from([
            "int", "int", "float", "decimal", "decimal", "char", "text", "binary", "blob", "date",
            "datetime", "timestamp", "time", "year", "bit", "enum", "set", "json"]))
    nullable = draw(st.booleans())
    if kind == "int":
        t = draw(st.sampled_from(sorted(INT_RANGES)))
        return Column(name, t, unsigned=draw(st.booleans()), nullable=nullable)
    if kind == "float":
        return Column(name, draw(st.sampled_from(["FLOAT", "DOUBLE"])), nullable=nullable)
    if kind == "decimal":
        p = draw(st.one_of(st.just(65), st.integers(1, 65)))
        s = draw(st.one_of(st.just(min(p, 30)), st.integers(0, min(p, 30))))
        return Column(name, "DECIMAL", unsigned=draw(st.booleans()), precision=p, scale=s, nullable=nullable)
    if kind == "char":
        t = draw(st.sampled_from(["CHAR", "VARCHAR"]))
        n = draw(st.integers(1, 255 if t == "CHAR" else 16383))
        return Column(name, t, length=n, nullable=nullable)
    if kind == "text":
        return Column(name, draw(st.sampled_from(sorted(TEXT_MAX))), nullable=nullable)
    if kind == "binary":  # includes text columns with the binary charset (stored as binary twins)
        t = draw(st.sampled_from(["BINARY", "VARBINARY"]))
        n = draw(st.integers(1, 255 if t == "BINARY" else 65535))
        return Column(name, t, length=n, binary=True, nullable=nullable)
    if kind == "blob":
        return Column(name, draw(st.sampled_from(sorted(BLOB_MAX))), binary=True, nullable=nullable)
    if kind == "date":
        return Column(name, "DATE", nullable=nullable)
    if kind in ("datetime", "timestamp", "time"):
        return Column(name, kind.upper(), fsp=draw(st.integers(0, 6)), nullable=nullable)
    if kind == "year":
        return Column(name, "YEAR", nullable=nullable)
    if kind == "bit":
        return Column(name, "BIT", length=draw(st.one_of(st.just(64), st.just(1), st.integers(1, 64))),
                      unsigned=True, nullable=nullable)
    if kind == "enum":
        return Column(name, "ENUM", elements=draw(_elements(True)), nullable=nullable)
    if kind == "set":
        return Column(name, "SET", elements=draw(_elements(False)), nullable=nullable)
    return Column(name, "JSON", nullable=nullable)


@st.composite
def tables(draw, min_columns: int = 1, max_columns: int = 12, handle_key: bool | None = None) -> TableSchema:
    """A table: unique column names, 0-2 handle-key columns (NOT NULL primary key).

    ``handle_key=True`` forces at least one key column, False forbids it.
    """
    n = draw(st.integers(min_columns, max_columns))
    prefixes = draw(st.lists(st.sampled_from(_NAME_PREFIXES), min_size=n, max_size=n))
    names = [f"{p}{i}" for i, p in enumerate(prefixes)]
    if handle_key is None:
        nkey = draw(st.integers(0, min(2, n)))
    elif handle_key:
        nkey = draw(st.integers(1, min(2, n)))
    else:
        nkey = 0
    cols = []
    for i, name in enumerate(names):
        if i < nkey:
            c = draw(columns(name, key_capable=True))
            import dataclasses

            c = dataclasses.replace(c, nullable=False, primary_key=True, handle_key=True)
        else:
            c = draw(columns(name))
        cols.append(c)
    order = draw(st.permutations(range(n)))  # key columns need not come first
    cols = [cols[i] for i in order]
    schema = draw(st.sampled_from(["test", "db-1", "shop", "9db", "数据"]))
    table = draw(st.sampled_from(["t", "orders", "t-2", "表", "3x"]))
    return TableSchema(schema, table, tuple(cols), version=draw(st.integers(0, 2**62)))


# --------------------------------------------------------------------------- values

def _decimal(col: Column):
    p, s = col.precision or 10, col.scale or 0
    bound = 10**p - 1
    lo = 0 if col.unsigned else -bound
    unscaled = st.one_of(st.sampled_from([0, bound, lo, 1, -1 if lo < 0 else 1]), st.integers(lo, bound))
    return unscaled.map(lambda u: decimal.Decimal(f"{u}E-{s}") if s else decimal.Decimal(u))


def _datetime(fsp: int, lo: datetime.datetime, hi: datetime.datetime):
    step = 10 ** (6 - fsp)
    return st.one_of(st.sampled_from([lo, hi]), st.datetimes(lo, hi)).map(
        lambda d: d.replace(microsecond=d.microsecond // step * step))


def _time(fsp: int):
    step = 10 ** (6 - fsp)
    us = st.one_of(st.sampled_from([-TIME_MAX_US, TIME_MAX_US, 0]), st.integers(-TIME_MAX_US, TIME_MAX_US))
    return us.map(lambda u: datetime.timedelta(microseconds=int(u / step) * step))


def _json_text():
    leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(_text_chars, max_size=8))
    value = st.recursive(leaf, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(_text_chars, max_size=5), inner, max_size=3)),
        max_leaves=6)
    return value.map(lambda v: json.dumps(v, ensure_ascii=False, separators=(", ", ": ")))


def _set_value(elements: tuple[str, ...]):
    return st.lists(st.booleans(), min_size=len(elements), max_size=len(elements)).map(
        lambda picks: ",".join(e for e, p in zip(elements, picks) if p))


def _text(max_chars: int, char: bool = False):
    size = min(max_chars, 24)
    text = st.one_of(st.just(""), st.text(_text_chars, max_size=size))
    if char:  # CHAR drops trailing spaces
        text = text.map(lambda s: s.rstrip(" "))
    return text


def values(col: Column):
    """Non-NULL values valid for ``col``."""
    t = col.type
    if t in INT_RANGES:
        lo, hi, uhi = INT_RANGES[t]
        if col.unsigned:
            lo, hi = 0, uhi
        return st.one_of(st.sampled_from([lo, hi, 0]), st.integers(lo, hi))
    if t == "FLOAT":
        return st.floats(width=32, allow_nan=False, allow_infinity=False).filter(lambda f: f != 0 or str(f) == "0.0")
    if t == "DOUBLE":
        extremes = st.sampled_from([1.7976931348623157e308, -2.2250738585072014e-308, 5e-324, 0.1, 1e16])
        return st.one_of(extremes, st.floats(allow_nan=False, allow_infinity=False)).filter(
            lambda f: f != 0 or str(f) == "0.0")
    if t == "DECIMAL":
        return _decimal(col)
    if t == "CHAR":
        return _text(col.length or 1, char=True)
    if t == "VARCHAR":
        return _text(col.length or 1)
    if t in TEXT_MAX:
        return _text(TEXT_MAX[t])
    if t == "BINARY":  # fixed length: TiDB pads with zero bytes
        n = col.length or 1
        return st.one_of(st.just(b"\x00" * n), st.binary(min_size=n, max_size=n))
    if t == "VARBINARY":
        return st.one_of(st.just(b""), st.binary(max_size=min(col.length or 1, 24)))
    if t in BLOB_MAX:
        return st.one_of(st.just(b""), st.binary(max_size=24))
    if t == "DATE":
        return st.one_of(st.sampled_from([datetime.date(1000, 1, 1), datetime.date(9999, 12, 31)]),
                         st.dates(datetime.date(1000, 1, 1), datetime.date(9999, 12, 31)))
    if t == "DATETIME":
        return _datetime(col.fsp or 0, datetime.datetime(1000, 1, 1),
                         datetime.datetime(9999, 12, 31, 23, 59, 59, 999999))
    if t == "TIMESTAMP":
        return _datetime(col.fsp or 0, TIMESTAMP_MIN, TIMESTAMP_MAX)
    if t == "TIME":
        return _time(col.fsp or 0)
    if t == "YEAR":
        return st.integers(1901, 2155)
    if t == "BIT":
        hi = 2 ** (col.length or 1) - 1
        return st.one_of(st.sampled_from([0, hi]), st.integers(0, hi))
    if t == "ENUM":
        return st.sampled_from(col.elements)
    if t == "SET":
        return st.one_of(st.just(""), _set_value(col.elements))
    if t == "JSON":
        return _json_text()
    raise ValueError(f"no value strategy for {t}")


def rows(table: TableSchema):
    """A full row of ``table``: every column, NULL drawn for nullable ones."""
    fields = {}
    for col in table.columns:
        v = values(col)
        fields[col.name] = st.one_of(st.none(), v) if col.nullable else v
    return st.fixed_dictionaries(fields)


@st.composite
def tables_and_rows(draw, min_rows: int = 1, max_rows: int = 3, **table_kw):
    """(table, [row, ...]) — a convenience for round-trip tests."""
    table = draw(tables(**table_kw))
    return table, draw(st.lists(rows(table), min_size=min_rows, max_size=max_rows))
