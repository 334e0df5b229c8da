"""The one column-type model for TiDB tables.

Every TiCDC decoder fills it as far as its format carries the information, every
encoder reads it, and it travels with records as a schema referenced from
metadata (see ``cdcflow.connectors.ticdc.schema``), so a later hop can encode
another format.

Native value per type (what ``Record`` dicts hold):
  integer types, YEAR, BIT -> int (BIGINT UNSIGNED up to 2**64-1)
  FLOAT, DOUBLE -> float; DECIMAL -> decimal.Decimal (scale kept)
  CHAR/VARCHAR/TEXT family, ENUM (element name), SET (comma-joined names), JSON (TiDB text) -> str
  BINARY/VARBINARY/BLOB family (binary charset) -> bytes
  DATE -> datetime.date; DATETIME/TIMESTAMP -> datetime.datetime (naive)
  TIME -> datetime.timedelta (may be negative or over 24 h)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

INTEGER_TYPES = frozenset({"TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT"})
FLOAT_TYPES = frozenset({"FLOAT", "DOUBLE"})
TEXT_TYPES = frozenset({"CHAR", "VARCHAR", "TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT"})
BINARY_TYPES = frozenset({"BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB"})
TIME_TYPES = frozenset({"DATE", "DATETIME", "TIMESTAMP", "TIME"})
ALL_TYPES = INTEGER_TYPES | FLOAT_TYPES | TEXT_TYPES | BINARY_TYPES | TIME_TYPES | {
    "DECIMAL", "BIT", "YEAR", "ENUM", "SET", "JSON",
}


@dataclass(frozen=True)
class Column:
    """One column. ``type`` is the MySQL base type in upper case (``INT``, ``VARCHAR``).

    Text types with a binary charset are stored as their binary twins
    (``VARCHAR`` + binary -> ``VARBINARY``) with ``binary=True``.
    """

    name: str
    type: str
    unsigned: bool = False
    length: int | None = None  # CHAR/VARCHAR/BINARY length, BIT(M) width, display width
    precision: int | None = None  # DECIMAL(M, D): M
    scale: int | None = None  # DECIMAL(M, D): D
    fsp: int | None = None  # fractional seconds precision of TIME/DATETIME/TIMESTAMP
    nullable: bool = True
    default: Any = None
    has_default: bool = False
    primary_key: bool = False
    handle_key: bool = False  # primary key, else a NOT NULL unique key
    unique_key: bool = False
    multiple_key: bool = False
    elements: tuple[str, ...] = ()  # ENUM/SET members in definition order
    binary: bool = False
    generated: bool = False


@dataclass(frozen=True)
class TableSchema:
    """Columns of one table version. ``version`` is TiCDC's table version (a TSO)."""

    schema: str
    table: str
    columns: tuple[Column, ...]
    version: int = 0
    partition: int | None = None
    index: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.index.update({c.name: i for i, c in enumerate(self.columns)})

    @property
    def collection(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def handle_key(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.handle_key)

    def column(self, name: str) -> Column:
        return self.columns[self.index[name]]


# ---------------------------------------------------------------------------
# TiDB text forms, shared by every text-carrying codec (canal-json, CSV, Avro's
# DATE/DATETIME/TIME strings, open protocol): one implementation of each rule.
# ---------------------------------------------------------------------------
import datetime as _dt  # noqa: E402
import decimal as _decimal  # noqa: E402

_FRACTION_DIV = (1_000_000, 100_000, 10_000, 1_000, 100, 10, 1)


def _fraction(us: int, fsp: int | None) -> str:
    """``.ffffff`` cut to ``fsp`` digits; with fsp unknown, 6 digits when non-zero."""
    if fsp is None:
        return f".{us:06d}" if us else ""
    if fsp <= 0:
        return ""
    return "." + f"{us:06d}"[:fsp]


def format_date(v: _dt.date) -> str:
    return f"{v.year:04d}-{v.month:02d}-{v.day:02d}"


def format_datetime(v: _dt.datetime, fsp: int | None = None) -> str:
    """``2020-02-20 02:20:20[.ffffff]`` (fraction to the column's fsp)."""
    return (f"{v.year:04d}-{v.month:02d}-{v.day:02d} {v.hour:02d}:{v.minute:02d}:{v.second:02d}"
            + _fraction(v.microsecond, fsp))


def format_time(v: _dt.timedelta, fsp: int | None = None) -> str:
    """TiDB TIME text: ``[-]HH:MM:SS[.ffffff]``, hours may exceed 24 (up to 838)."""
    us = (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
    sign = "-" if us < 0 else ""
    us = -us if us < 0 else us
    secs, frac = divmod(us, 1_000_000)
    mins, s = divmod(secs, 60)
    h, m = divmod(mins, 60)
    return f"{sign}{h:02d}:{m:02d}:{s:02d}" + _fraction(frac, fsp)


def format_decimal(v: _decimal.Decimal) -> str:
    """Plain digits with the value's scale, never exponent notation (``0E-30`` -> ``0.000...``)."""
    return format(v, "f")


def _parse_fraction(text: str) -> int:
    if not text.isdigit() or len(text) > 6:
        raise ValueError(f"bad fractional seconds {text!r}")
    return int(text.ljust(6, "0"))


def parse_date(text: str) -> _dt.date:
    if len(text) != 10 or text[4] != "-" or text[7] != "-":
        raise ValueError(f"not a DATE: {text!r}")
    return _dt.date(int(text[0:4]), int(text[5:7]), int(text[8:10]))


def parse_datetime(text: str) -> _dt.datetime:
    """``YYYY-MM-DD HH:MM:SS[.f{1,6}]`` (a ``T`` separator is accepted too)."""
    n = len(text)
    if (n == 19 or 21 <= n <= 26) and text[10] == " " and text[4] == "-" and text[16] == ":":
        try:  # the exact TiDB shape: let the C parser do it
            return _dt.datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"not a DATETIME: {text!r}") from None
    if len(text) < 19 or text[10] not in " T" or text[13] != ":" or text[16] != ":":
        raise ValueError(f"not a DATETIME: {text!r}")
    d = parse_date(text[:10])
    us = 0
    if len(text) > 19:
        if text[19] != ".":
            raise ValueError(f"not a DATETIME: {text!r}")
        us = _parse_fraction(text[20:])
    return _dt.datetime(d.year, d.month, d.day, int(text[11:13]), int(text[14:16]), int(text[17:19]), us)


def parse_time(text: str) -> _dt.timedelta:
    """``[-]H+:MM:SS[.f{1,6}]`` to a timedelta (negative and > 24 h kept)."""
    neg = text.startswith("-")
    body = text[1:] if neg else text
    main, dot, frac = body.partition(".")
    parts = main.split(":")
    if len(parts) != 3 or not all(p.isdigit() for p in parts) or len(parts[1]) != 2 or len(parts[2]) != 2:
        raise ValueError(f"not a TIME: {text!r}")
    us = ((int(parts[0]) * 60 + int(parts[1])) * 60 + int(parts[2])) * 1_000_000
    if dot:
        us += _parse_fraction(frac)
    return _dt.timedelta(microseconds=-us if neg else us)


def set_to_bitmask(value: str, elements: tuple[str, ...]) -> int:
    """SET text (comma-joined names) -> bitmask; bit i = elements[i]."""
    if not value:
        return 0
    mask = 0
    for name in value.split(","):
        try:
            mask |= 1 << elements.index(name)
        except ValueError:
            raise ValueError(f"{name!r} is not a member of SET{elements!r}") from None
    return mask


def bitmask_to_set(mask: int, elements: tuple[str, ...]) -> str:
    if mask >> len(elements):
        raise ValueError(f"bitmask {mask} has bits beyond the {len(elements)} SET members")
    return ",".join(e for i, e in enumerate(elements) if mask >> i & 1)


def enum_index(value: str, elements: tuple[str, ...]) -> int:
    """1-based ENUM index of a name (0 is TiDB's invalid-value index for '')."""
    try:
        return elements.index(value) + 1
    except ValueError:
        if value == "":
            return 0
        raise ValueError(f"{value!r} is not a member of ENUM{elements!r}") from None


def enum_name(index: int, elements: tuple[str, ...]) -> str:
    if index == 0:
        return ""
    if not 0 < index <= len(elements):
        raise ValueError(f"ENUM index {index} out of range 1..{len(elements)}")
    return elements[index - 1]
