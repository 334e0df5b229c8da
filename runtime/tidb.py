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
