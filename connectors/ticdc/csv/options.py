"""What the CSV writer and reader share: ``CsvOptions`` (TiCDC's ``[sink.csv]``), the header line
and each column's text form in both directions.

A CSV row carries no types: the reader is given the table's columns (from the storage schema
file of that table version). Layout, quoting and escaping follow TiCDC (see
``docs/codec-csv.md``): string-typed values are quoted, numbers, booleans and NULL never; with
an empty ``quote`` backslash escaping is used.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cdcflow import accel
from cdcflow.connectors.ticdc.canal_json.schema import _str_text, value_formatter, value_parser
from cdcflow.connectors.ticdc.events import (
    DELETE,
    INSERT,
    UPDATE,
)
from cdcflow.connectors.ticdc.tidb import (
    b64decode_strict,
    BINARY_TYPES,
    FLOAT_TYPES,
    INTEGER_TYPES,
    Column,
    TableSchema,
)
from cdcflow.connectors.ticdc.tidb import ValueMismatch as _ValueProblem
from cdcflow.connectors.ticdc.tidb import format_go_float as go_float_text
from cdcflow.errors import ConfigError
from cdcflow.params import option_bool as _bool

CODEC = "csv"
HEADER_META = ("ticdc-meta$operation", "ticdc-meta$table", "ticdc-meta$schema")
HEADER_COMMIT_TS = "ticdc-meta$commit-ts"
HEADER_IS_UPDATE = "ticdc-meta$is-update"
HEADER_HANDLE_KEY = "ticdc-meta$handle-key"
_OPS = {INSERT: "I", UPDATE: "U", DELETE: "D"}
_kernel = accel.load("cdcflow.connectors.ticdc.csv._csv")
"""The compiled reader/writer (``_csv.c``), or None: the Python path below is the reference."""
_KINDS = {"I": INSERT, "U": UPDATE, "D": DELETE}
# Types TiCDC writes unquoted (Go numbers); everything else is a string and gets quoted.
_UNQUOTED_TYPES = INTEGER_TYPES | {"FLOAT", "DOUBLE", "BIT", "YEAR"}


@dataclass(frozen=True, slots=True)
class CsvOptions:
    """``[sink.csv]`` options (TiCDC names in ``from_config``) plus the sink's line terminator."""

    delimiter: str = ","
    quote: str = '"'
    null: str = "\\N"
    include_commit_ts: bool = False
    binary_encoding_method: str = "base64"
    output_old_value: bool = False
    output_handle_key: bool = False
    output_field_header: bool = False
    terminator: str = "\r\n"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, plugin: str = CODEC) -> None:
        d, q = self.delimiter, self.quote
        if not 1 <= len(d) <= 3:
            raise ConfigError(plugin, "delimiter", "length", f"delimiter must be 1-3 characters, got {d!r}")
        if len(q) > 1:
            raise ConfigError(plugin, "quote", "length", f"quote must be empty or one character, got {q!r}")
        if any(c in d for c in "\r\n") or (q and (q in d or q in "\r\n")):
            raise ConfigError(plugin, "delimiter", "distinct",
                              "delimiter and quote must differ and contain no CR/LF")
        if self.binary_encoding_method not in ("base64", "hex"):
            raise ConfigError(plugin, "binary-encoding-method", "enum",
                              f"must be base64 or hex, got {self.binary_encoding_method!r}")
        if not self.terminator:
            raise ConfigError(plugin, "terminator", "required", "terminator must not be empty")

    @classmethod
    def from_config(cls, config: Mapping[str, Any], plugin: str = CODEC) -> "CsvOptions":
        """From TiCDC names: ``delimiter``, ``quote``, ``null``, ``include-commit-ts``,
        ``binary-encoding-method``, ``output-old-value``, ``output-handle-key``,
        ``output-field-header``, ``terminator``."""
        g = config.get
        return cls(
            delimiter=str(g("delimiter", ",")), quote=str(g("quote", '"')), null=str(g("null", "\\N")),
            include_commit_ts=_bool(plugin, "include-commit-ts", g("include-commit-ts", False)),
            binary_encoding_method=str(g("binary-encoding-method", "base64")),
            output_old_value=_bool(plugin, "output-old-value", g("output-old-value", False)),
            output_handle_key=_bool(plugin, "output-handle-key", g("output-handle-key", False)),
            output_field_header=_bool(plugin, "output-field-header", g("output-field-header", False)),
            terminator=str(g("terminator", "\r\n")),
        )

    @property
    def meta_count(self) -> int:
        return 3 + self.include_commit_ts + self.output_old_value + self.output_handle_key


def header_line(table: TableSchema, options: CsvOptions) -> str:
    """The ``output-field-header`` line (names unquoted, joined by the delimiter, with terminator)."""
    names = list(HEADER_META)
    if options.include_commit_ts:
        names.append(HEADER_COMMIT_TS)
    if options.output_old_value:
        names.append(HEADER_IS_UPDATE)
    if options.output_handle_key:
        names.append(HEADER_HANDLE_KEY)
    names += [c.name for c in table.columns]
    return options.delimiter.join(names) + options.terminator


# --------------------------------------------------------------------------- value text

def _formatter(col: Column, options: CsvOptions) -> Callable[[Any], str]:
    """Native value -> CSV text (unquoted) for ``col``: TiDB's text forms as canal-json writes
    them (``canal_json.value_formatter``), except what CSV writes its own way: floats as Go's
    ``%v``, binary as base64/hex, ENUM/SET as their names."""
    t = col.type
    if t in FLOAT_TYPES:
        return go_float_text
    if t in BINARY_TYPES:
        return _to_hex if options.binary_encoding_method == "hex" else _to_base64
    if t in ("ENUM", "SET"):
        return _str_text
    return value_formatter(col)


def _to_hex(v: Any) -> str:
    if type(v) is not bytes:
        raise _ValueProblem("binary column needs bytes")
    return v.hex()


def _to_base64(v: Any) -> str:
    if type(v) is not bytes:
        raise _ValueProblem("binary column needs bytes")
    return base64.b64encode(v).decode("ascii")


def _bad():
    """Raise from inside a generated parse expression (the caller then finds the column)."""
    raise ValueError("value does not fit its column")


def _parser(col: Column, options: CsvOptions) -> Callable[[str], Any] | None:
    """CSV text -> native value for ``col`` (None: the text is the value): canal-json's parsers
    (``canal_json.value_parser``) but for binary (base64/hex) and ENUM/SET (names)."""
    t = col.type
    if t in BINARY_TYPES:
        return _from_hex if options.binary_encoding_method == "hex" else _from_base64
    if t in ("ENUM", "SET"):
        return None
    return value_parser(col)


_from_base64 = b64decode_strict  # binascii.Error is a ValueError


def _from_hex(text: str) -> bytes:
    if len(text) % 2 or not all(c in "0123456789abcdefABCDEF" for c in text):
        raise ValueError("not hex: expected pairs of hex digits")
    return bytes.fromhex(text)


