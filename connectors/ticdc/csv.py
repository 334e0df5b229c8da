"""TiCDC's CSV protocol (storage sink), both directions, as pure functions over bytes.

A CSV row carries no types: the reader is given the table's columns (from the
storage schema file of that table version). Layout, quoting and escaping follow
TiCDC (see ``docs/codec-csv.md``): string-typed values are quoted, numbers,
booleans and NULL never; with an empty ``quote`` backslash escaping is used.

Decoding takes a fast path through the C ``csv`` module for the usual options
(one-character delimiter, a quote character, ``\\r\\n``/``\\n`` terminator) and
an exact tokenizer otherwise; the exact one also settles the one thing the C
reader cannot see, whether a field equal to the NULL text was quoted.
"""

from __future__ import annotations

import base64
import binascii
import csv as _stdcsv
import datetime as _dt
import decimal as _decimal
import io
import operator
import re
import struct as _struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice as _islice
from itertools import repeat as _repeat
from dataclasses import dataclass
from typing import Any

import orjson

from cdcflow import accel
from cdcflow.params import option_bool as _bool
from cdcflow.connectors.ticdc.canal_json import _int_text, _str_text, value_formatter, value_parser
from cdcflow.connectors.ticdc.canal_json import parse_time as _parse_time_in_range
from cdcflow.connectors.ticdc.schema import value_kind as _value_kind
from cdcflow.connectors.ticdc.errors import MalformedMessage, UnrepresentableValue, UnsupportedEvent
from cdcflow.connectors.ticdc.events import (DELETE, INSERT, UPDATE, RowChange, records_plan, rows_to_dicts,
                                             rows_to_records)
from cdcflow.errors import ConfigError
from cdcflow.record import Operation, Record
from cdcflow.tidb import (
    BINARY_TYPES,
    FLOAT_TYPES,
    INLINE_NAMES,
    INTEGER_TYPES,
    Column,
    TableSchema,
    inline_go_float_expr,
    inline_parse_expr,
    inline_text_expr,
    TIME_MAX_US,
    parse_date,
    b64decode_strict,
    datetime_from_text,
    parse_datetime,
)
from cdcflow.tidb import ValueMismatch as _ValueProblem
from cdcflow.tidb import format_go_float as go_float_text

CODEC = "csv"
HEADER_META = ("ticdc-meta$operation", "ticdc-meta$table", "ticdc-meta$schema")
HEADER_COMMIT_TS = "ticdc-meta$commit-ts"
HEADER_IS_UPDATE = "ticdc-meta$is-update"
HEADER_HANDLE_KEY = "ticdc-meta$handle-key"
_OPS = {INSERT: "I", UPDATE: "U", DELETE: "D"}
_kernel = accel.load("cdcflow.connectors.ticdc._csv")
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


_from_base64 = b64decode_strict


def _from_hex(text: str) -> bytes:
    if len(text) % 2 or not all(c in "0123456789abcdefABCDEF" for c in text):
        raise ValueError("not hex: expected pairs of hex digits")
    return bytes.fromhex(text)


# --------------------------------------------------------------------------- encoder

# Characters each inline TiDB text form can write. Where the quote character (or, with backslash
# escaping, the delimiter or the NULL text) could occur in one, the careful writer takes the column.
_DIGITS = "0123456789"
# Column kinds of the compiled writer's plan (the EK_* numbers in _csv.c).
_EK_CALL, _EK_INT, _EK_GO_FLOAT, _EK_STR, _EK_DECIMAL, _EK_DATE, _EK_DATETIME, _EK_BASE64, _EK_HEX = range(9)
_FORM_CHARS = {"DECIMAL": frozenset(_DIGITS + "-."), "DATE": frozenset(_DIGITS + "-"),
               "DATETIME": frozenset(_DIGITS + "-: ."), "TIMESTAMP": frozenset(_DIGITS + "-: .")}


class _Writer:
    """Per (table, options): the careful per-column field writers, and two functions generated
    from one field expression per column (``_field_expr``): ``lines`` (whole lines of plain rows)
    and ``column_texts`` (one row's field texts, for the careful ``line``)."""

    __slots__ = ("table", "options", "columns", "quote_field", "prefix", "handle_names", "column_texts", "lines",
                 "plan")

    def __init__(self, table: TableSchema, options: CsvOptions):
        self.table = table
        self.options = options
        q = options.quote
        if q:
            qq = q + q

            def quote_field(s: str) -> str:
                return q + s.replace(q, qq) + q if q in s else q + s + q
        else:
            d, null = options.delimiter, options.null
            d_escaped = "".join("\\" + c for c in d)

            def quote_field(s: str) -> str:
                if "\\" in s:
                    s = s.replace("\\", "\\\\")
                if "\n" in s:
                    s = s.replace("\n", "\\n")
                if "\r" in s:
                    s = s.replace("\r", "\\r")
                if d in s:
                    s = s.replace(d, d_escaped)
                if s == null:
                    raise _ValueProblem(f"equals the NULL text {null!r}; with an empty quote the two cannot "
                                        "be told apart")
                return s
        self.quote_field = quote_field
        self.columns = tuple((c.name, self._field_text(c, options, quote_field)) for c in table.columns)
        self.prefix = {op: quote_field(op) + options.delimiter + quote_field(table.table) + options.delimiter
                       + quote_field(table.schema) for op in ("I", "U", "D")}
        self.handle_names = tuple(c.name for c in table.columns if c.handle_key)
        ns: dict[str, Any] = {**INLINE_NAMES, "D": options.delimiter, "END": options.terminator,
                              "NULL": options.null, "Q": q, "QQ": q + q, "b2a_base64": binascii.b2a_base64,
                              "PREFIX": {kind: self.prefix[op] for kind, op in _OPS.items()}}
        fields = []
        for i, col in enumerate(table.columns):
            ns[f"K{i}"] = col.name  # names go in as constants: any text is safe in generated code
            fields.append(f"NULL if (v{i} := row[K{i}]) is None else {self._field_expr(i, col, ns)}")
        self.column_texts = self._compile_column_texts(fields, ns)
        self.lines = self._compile_lines(fields, ns)
        self.plan = self._encode_plan()

    def _encode_plan(self) -> tuple | None:
        """The compiled writer's plan (``_csv.c`` ``encode``) for what ``lines`` writes, or None
        where ``lines`` does not apply or the dialect is not one byte per character. Per column:
        (name, kind, scale/fsp, careful field writer); the kinds mirror ``_field_expr``."""
        o = self.options
        if self.lines is None or len(o.quote) != 1 or not (o.quote + o.delimiter).isascii():
            return None
        try:
            prefixes = {kind: (self.prefix[op] + o.delimiter).encode() for kind, op in _OPS.items()}
            texts = (o.delimiter.encode(), o.terminator.encode(), o.null.encode(), o.quote.encode())
        except UnicodeEncodeError:
            return None
        columns = tuple((col.name, *self._encode_kind(col), writer)
                        for col, (_, writer) in zip(self.table.columns, self.columns))
        return (prefixes, *texts, o.include_commit_ts, columns)

    def _encode_kind(self, col: Column) -> tuple[int, int]:
        """(kind, param) of ``col`` for the compiled writer: the text form ``_field_expr`` writes
        inline, or _EK_CALL (the careful writer, as ``_field_expr``'s ``slow``)."""
        o = self.options
        conv = _formatter(col, o)
        t = col.type
        if conv is _int_text:
            return _EK_INT, 0
        if conv is go_float_text:
            return _EK_GO_FLOAT, 0
        if conv is _str_text:
            return _EK_STR, 0
        if t in BINARY_TYPES:
            return (_EK_HEX if o.binary_encoding_method == "hex" else _EK_BASE64), 0
        chars = _FORM_CHARS.get(t)
        if chars is None or not self._plain(chars):
            return _EK_CALL, 0
        if t == "DECIMAL":
            return (_EK_DECIMAL, col.scale) if col.scale is not None else (_EK_CALL, 0)
        if t == "DATE":
            return _EK_DATE, 0
        fsp = col.fsp  # DATETIME / TIMESTAMP
        if fsp is None:
            return _EK_DATETIME, -1
        return (_EK_DATETIME, fsp) if 0 <= fsp <= 6 else (_EK_CALL, 0)

    def _plain(self, chars: frozenset) -> bool:
        """Whether any text made of ``chars`` is written as it is (between quotes, or unescaped)."""
        o = self.options
        if o.quote:
            return o.quote not in chars
        return bool(set(o.delimiter) - chars) and (not o.null or bool(set(o.null) - chars))

    def _field_expr(self, i: int, col: Column, ns: dict[str, Any]) -> str:
        """Expression for the final field text of column ``i``'s non-NULL value in ``v{i}``: TiDB's
        text forms inline (``tidb.inline_text_expr`` / ``inline_go_float_expr``), quoting inline;
        every value a guard refuses goes to the careful field writer ``F{i}``, which writes it or
        raises ``ValueMismatch``."""
        o = self.options
        q = o.quote
        v = f"v{i}"
        ns[f"F{i}"] = self.columns[i][1]
        slow = f"F{i}({v})"
        conv = _formatter(col, o)
        t = col.type
        if conv is _int_text:
            return f"(str({v}) if type({v}) is int else {slow})"
        if conv is go_float_text:  # numbers are never quoted
            return inline_go_float_expr(v, slow)
        if not q:  # backslash escaping: the careful writer, except for forms that need none
            if t not in _FORM_CHARS:
                return slow
        elif conv is _str_text:
            return f"(Q + ({v} if Q not in {v} else {v}.replace(Q, QQ)) + Q if type({v}) is str else {slow})"
        elif t in BINARY_TYPES:
            text = f"{v}.hex()" if o.binary_encoding_method == "hex" else f"b2a_base64({v}, newline=False).decode()"
            return f"(Q + t + Q if type({v}) is bytes and Q not in (t := {text}) else {slow})"
        chars = _FORM_CHARS.get(t)
        if chars is None or not self._plain(chars):
            return slow
        ns[f"c{i}"] = conv  # the formatter alone (no quoting): its text also has only ``chars``
        form = inline_text_expr(col, v, f"c{i}({v})")
        if form is None:
            return slow
        return f"(Q + {form} + Q)" if q else form

    def _compile_lines(self, fields: list[str], ns: dict[str, Any]):
        """``(kinds, commit_ts, rows) -> [line]`` for plain rows (no is-update or handle-key
        column): one f-string per row. None for the batch when any row or value needs the careful
        path (``line``), which then writes it or names the offending column."""
        o = self.options
        if o.output_old_value or o.output_handle_key:
            return None
        ts = "{ts}{D}" if o.include_commit_ts else ""
        source = (
            "def lines(kinds, commit_ts, rows):\n"
            "    out = []\n"
            "    append = out.append\n"
            "    for kind, ts, row in zip(kinds, commit_ts, rows):\n"
            "        append(f\"{PREFIX[kind]}{D}" + ts + "{D}".join("{" + f + "}" for f in fields) + "{END}\")\n"
            "    return out\n"
        )
        exec(compile(source, f"<cdcflow.csv line writer {self.table.collection}>", "exec"), ns)
        lines = ns["lines"]

        def checked(kinds, commit_ts, rows):
            try:
                return lines(kinds, commit_ts, rows)
            except (_ValueProblem, KeyError, TypeError):  # odd value, missing column, row not a dict
                return None
        return checked

    def _compile_column_texts(self, fields: list[str], ns: dict[str, Any]) -> Callable[[dict], list]:
        source = "def column_texts(row):\n    return [" + ", ".join(fields) + "]\n"
        exec(compile(source, f"<cdcflow.csv column writer {self.table.collection}>", "exec"), ns)
        return ns["column_texts"]

    @staticmethod
    def _field_text(col: Column, options: CsvOptions, quote_field: Callable[[str], str]) -> Callable[[Any], str]:
        """Value -> final field text (quoted or escaped when TiCDC writes it as a string)."""
        conv = _formatter(col, options)
        if col.type in _UNQUOTED_TYPES:
            return conv
        q = options.quote
        if conv is _str_text and q:
            qq = q + q

            def quoted_str(v: Any) -> str:
                if type(v) is not str:
                    raise _ValueProblem("needs a str")
                return q + (v.replace(q, qq) if q in v else v) + q
            return quoted_str
        return lambda v: quote_field(conv(v))

    def line(self, op: str, commit_ts: int, row: dict, is_update: bool) -> str:
        o = self.options
        d = o.delimiter
        parts = [self.prefix[op]]
        if o.include_commit_ts:
            parts.append(str(commit_ts))
        if o.output_old_value:
            parts.append("true" if is_update else "false")
        if o.output_handle_key:
            parts.append(self.quote_field(self._handle_key_text(row)))
        try:
            parts += self.column_texts(row)
        except (_ValueProblem, KeyError):
            self._raise_for(row)
        return d.join(parts) + o.terminator

    def _raise_for(self, row: dict) -> None:
        """Slow path: name the column whose value cannot be written."""
        for name, fn in self.columns:
            if name not in row:
                raise UnrepresentableValue(CODEC, self.table.collection, name, None,
                                           "CSV rows need every column; the row has no value for it")
            v = row[name]
            try:
                if v is not None:
                    fn(v)
            except _ValueProblem as e:
                raise UnrepresentableValue(CODEC, self.table.collection, name, v, str(e)) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _handle_key_text(self, row: dict) -> str:
        """TiDB's handle text: the value of a one-column key, ``{v1, v2}`` for a composite one."""
        texts = []
        for n in self.handle_names:
            v = row.get(n)
            texts.append(v.hex() if isinstance(v, bytes) else str(v))
        if len(texts) == 1:
            return texts[0]
        return "{" + ", ".join(texts) + "}"


_WRITERS: dict[tuple[int, CsvOptions], _Writer] = {}


def _writer(table: TableSchema, options: CsvOptions) -> _Writer:
    key = (id(table), options)
    w = _WRITERS.get(key)
    if w is None or w.table is not table:
        if len(_WRITERS) > 1024:
            _WRITERS.clear()
        w = _WRITERS[key] = _Writer(table, options)
    return w


_EV_TABLE = operator.attrgetter("table")
_EV_KIND = operator.attrgetter("kind")
_EV_COMMIT_TS = operator.attrgetter("commit_ts")
_EV_ROW = operator.attrgetter("row")
_EV_OLD = operator.attrgetter("old")


def encode_rows(events: Iterable[RowChange], table: TableSchema, options: CsvOptions | None = None,
                header: bool | None = None) -> bytes:
    """Rows of one table -> CSV bytes as TiCDC's storage sink writes them (``encode_table_rows``
    over the events' fields).

    ``header`` (default: ``options.output_field_header``) puts the header line first;
    a writer appending to an existing file passes False.
    """
    events = events if type(events) is list else list(events)
    if set(map(type, events)) - {RowChange}:
        odd = next(ev for ev in events if type(ev) is not RowChange)
        raise UnsupportedEvent(CODEC, None, f"CSV data files hold rows only, not {type(odd).__name__}")
    tables = list(map(_EV_TABLE, events))
    for t in dict(zip(map(id, tables), tables)).values():  # each distinct table object once
        if t is not table and t.collection != table.collection:
            raise UnsupportedEvent(CODEC, None, f"row of {t.collection} in a CSV file of {table.collection}")
    return encode_table_rows(table, list(map(_EV_KIND, events)), list(map(_EV_COMMIT_TS, events)),
                             list(map(_EV_ROW, events)), list(map(_EV_OLD, events)), options, header)


def encode_table_rows(table: TableSchema, kinds: Sequence[str], commit_ts: Sequence[int], rows: Sequence[dict],
                      olds: Sequence[dict | None] | None = None, options: CsvOptions | None = None,
                      header: bool | None = None) -> bytes:
    """Rows of one table as parallel sequences (kind, commit ts, row, old image per row: what
    ``events.TableRows`` holds) -> CSV bytes; the one CSV writer (``encode_rows`` feeds it too).

    ``header`` (default: ``options.output_field_header``) puts the header line first;
    a writer appending to an existing file passes False.
    """
    options = options or CsvOptions()
    w = _writer(table, options)
    with_header = options.output_field_header if header is None else header
    kernel = _kernel
    if kernel is not None and w.plan is not None:
        body = kernel.encode(w.plan, _as_list(kinds), _as_list(commit_ts), _as_list(rows))
        if body is not None:
            try:
                return header_line(table, options).encode() + body if with_header else body
            except UnicodeEncodeError:
                pass  # the Python path names the problem
    lines = []
    if with_header:
        lines.append(header_line(table, options))
    fast = w.lines(kinds, commit_ts, rows) if w.lines is not None else None
    if fast is not None:
        lines += fast
    else:
        split_updates = options.output_old_value
        for kind, ts, row, old in zip(kinds, commit_ts, rows, _repeat(None) if olds is None else olds):
            if type(row) is not dict:
                raise UnsupportedEvent(CODEC, None, f"{table.collection}: a {kind} row without values" if row is None
                                       else f"{table.collection}: a {kind} row is not a column -> value dict")
            if kind == UPDATE and split_updates and old is not None:
                if type(old) is not dict:
                    raise UnsupportedEvent(CODEC, None, f"{table.collection}: an old image is not a dict")
                lines.append(w.line("D", ts, old, True))
                lines.append(w.line("I", ts, row, True))
            elif kind in _OPS:
                lines.append(w.line(_OPS[kind], ts, row, kind == UPDATE))
            else:
                raise UnsupportedEvent(CODEC, None, f"RowChange.kind must be insert/update/delete, not {kind!r}")
    try:
        return "".join(lines).encode("utf-8")
    except UnicodeEncodeError as e:
        raise UnrepresentableValue(CODEC, table.collection, "?", e.object[e.start:e.end],
                                   "text is not encodable as UTF-8 (lone surrogate)") from None


def _as_list(seq: Sequence) -> list:
    return seq if type(seq) is list else list(seq)


# --------------------------------------------------------------------------- decoder

# Column kinds of the compiled reader's plan (the DK_* numbers in _csv.c), by careful parser.
_DK_TEXT, _DK_CALL = 0, 9
_DECODE_KINDS = ((int, 1), (float, 2), (_decimal.Decimal, 3), (parse_date, 4), (parse_datetime, 5),
                 (_parse_time_in_range, 6), (_from_base64, 7), (_from_hex, 8))


def _decode_plan(table: TableSchema, options: CsvOptions) -> tuple | None:
    """The compiled reader's plan (``_csv.c`` ``decode``) for what ``_column_wise`` reads, or
    None where it does not apply (is-update pairs, a dialect ``csv.reader`` is not used for or
    that is not one byte per character)."""
    o = options
    if (o.output_old_value or len(o.delimiter) != 1 or len(o.quote) != 1 or o.terminator not in ("\r\n", "\n")
            or not (o.delimiter + o.quote).isascii()):
        return None
    kinds, carefuls = [], []
    for col in table.columns:
        careful = _parser(col, o)
        kinds.append(_DK_TEXT if careful is None else next((k for f, k in _DECODE_KINDS if careful is f), _DK_CALL))
        carefuls.append(careful)
    want = header_line(table, o)[: -len(o.terminator)].split(o.delimiter)
    try:
        header = tuple(w.encode() for w in want)
        alt = tuple(w.encode() for w in want if w != HEADER_HANDLE_KEY) if o.output_handle_key else None
        names = (o.delimiter.encode(), o.quote.encode(), o.null.encode())
        table_names = (table.table.encode(), table.schema.encode())
    except UnicodeEncodeError:
        return None
    return (*names, o.meta_count, o.include_commit_ts, o.output_handle_key, *table_names, header, alt,
            tuple(kinds), tuple(carefuls), Operation.CREATE, Operation.UPDATE, Operation.DELETE,
            _stdcsv.field_size_limit())


#: where ``_decode_plan`` puts the column kinds (the transcoder's plan is built from them)
_PLAN_KINDS = -6


class CsvDecoder:
    """CSV bytes of one table -> ``RowChange`` list; errors name source, line and column.

    ``source`` (e.g. the data file's path) is put in error positions. Commit ts is
    0 when the file has no commit-ts column. With ``output-old-value`` a ``D``+``I``
    pair marked is-update becomes one UPDATE with ``old``.
    """

    def __init__(self, table: TableSchema, options: CsvOptions | None = None, source: str | None = None):
        self.table = table
        self.options = o = options or CsvOptions()
        self.source = source
        self._columns = tuple((c.name, _parser(c, o) or str) for c in table.columns)
        self._convert_row = _row_converter(table, self._columns)
        # Columns whose text could equal the NULL text: only there quoting decides NULL vs value.
        self._null_ambiguous = tuple(i for i, c in enumerate(table.columns) if c.type not in _UNQUOTED_TYPES)
        self._fast = (len(o.delimiter) == 1 and len(o.quote) == 1 and o.terminator in ("\r\n", "\n"))
        self._column_plan = tuple(_column_converter(c, o) for c in table.columns)
        self._kernel_plan = _decode_plan(table, o)
        self._json_plans: dict[int, tuple[object, _TranscodePlan | None]] = {}  # id(store) -> (store, plan)

    # -- positions
    def _where(self, line: int, column: int | None = None, name: str | None = None) -> str:
        src = f"{self.source} " if self.source else ""
        if column is None:
            return f"{src}line {line}"
        return f"{src}line {line}, column {column}" + (f" ({name})" if name else "")

    def _kernel_columns(self, data: bytes, start_line: int) -> "CsvColumns | None":
        """The compiled reader's columns (what ``_column_wise`` gives), or None: it handed the
        data back (or is off), and the Python path reads it or names the error."""
        kernel = _kernel
        if kernel is None or self._kernel_plan is None:
            return None
        got = kernel.decode(self._kernel_plan, data, self.options.output_field_header and start_line == 1)
        if got is None:
            return None
        operations, commit_ts, columns = got
        return CsvColumns(self.table, operations, commit_ts, columns)

    def decode(self, data: bytes, start_line: int = 1) -> list[RowChange]:
        columns = self._kernel_columns(data, start_line)
        if columns is not None:
            return columns.events()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            line = start_line + data.count(b"\n", 0, e.start)
            raise MalformedMessage(CODEC, self._where(line), f"not UTF-8 at byte {e.start}") from None
        columns = self._column_wise(text, start_line) if self._fast else None
        if columns is not None:
            return columns.events()
        return self._events(self._records(text, start_line), start_line)

    def transcode(self, data: bytes, store=None, start_line: int = 1) -> "CsvJsonRows | None":
        """The file's rows as Conduit JSON-form texts (``CsvJsonRows``), read and written in C
        without making Python values, records or metadata dicts: what ``decode_columns`` +
        ``CsvColumns.numbered_records`` + ``jsonform.dumps_lines`` write for them.

        None when the compiled kernel is off, the table or options are outside what it writes
        (a column type it does not render, is-update pairs, an unusual dialect), or the file has
        anything it does not render exactly (a non-canonical number, a NULL in a NOT NULL column,
        a quoted NULL text, malformed data, ...): the caller then takes ``decode_columns``, which
        returns the data or raises the typed error with file and line."""
        kernel = _kernel
        if kernel is None or self._kernel_plan is None:
            return None
        hit = self._json_plans.get(id(store))
        if hit is None or hit[0] is not store:
            if len(self._json_plans) > 64:
                self._json_plans.clear()
            hit = self._json_plans[id(store)] = (store, _transcode_plan(self.table, store, self._kernel_plan[_PLAN_KINDS]))
        plan = hit[1]
        if plan is None:
            return None
        got = kernel.transcode(self._kernel_plan, plan.columns, data, self.options.output_field_header and start_line == 1)
        if got is None:
            return None
        return CsvJsonRows(plan, *got)

    def decode_columns(self, data: bytes, start_line: int = 1) -> "CsvColumns | list[RowChange]":
        """Like ``decode``, but a file's plain rows come back column-wise (``CsvColumns``), from
        which ``records`` makes OpenCDC records without per-row event objects. Rows the
        column-wise reader does not take (is-update pairs, a quoted NULL text) come back as the
        ``RowChange`` list ``decode`` returns; malformed data raises as there."""
        columns = self._kernel_columns(data, start_line)
        if columns is not None:
            return columns
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return self.decode(data, start_line)
        columns = self._column_wise(text, start_line) if self._fast else None
        if columns is not None:
            return columns
        return self._events(self._records(text, start_line), start_line)

    def _records(self, text: str, start_line: int):
        return self._records_fast(text, start_line) if self._fast else self._records_exact(text, start_line)

    # -- the column-wise path: the C reader over the whole text, then one C-level pass per column
    def _column_wise(self, text: str, start_line: int) -> "CsvColumns | None":
        """The rows column-wise, or None when this path does not apply or the data is not
        well-formed (the row-wise path then reads it, or reports the line and column).

        Rows are taken ``_COLUMN_CHUNK`` at a time: a chunk's field strings stay in the CPU
        cache while each column of it is converted (a whole file column by column strides
        through memory and runs at half the speed)."""
        o = self.options
        if o.output_old_value:
            return None  # is-update D+I pairs fold into one UPDATE: row-wise
        q, null = o.quote, o.null
        if (q + null.replace(q, q + q) + q) in text:
            return None  # a quoted field equal to the NULL text is a value: only the raw text tells
        table = self.table
        plan = self._column_plan
        meta = o.meta_count
        width = meta + len(plan)
        reader = _stdcsv.reader(io.StringIO(text, newline=""), delimiter=o.delimiter, quotechar=q,
                                doublequote=True, strict=True, skipinitialspace=False,
                                quoting=_stdcsv.QUOTE_MINIMAL)
        values: list[list] = [[] for _ in plan]
        ops: list[str] = []
        commit_ts: list[int] | None = [] if o.include_commit_ts else None
        header = o.output_field_header and start_line == 1
        try:
            while rows := list(_islice(reader, _COLUMN_CHUNK)):
                if header:
                    header = False
                    want = header_line(table, o)[: -len(o.terminator)].split(o.delimiter)
                    if rows[0] != want and not (o.output_handle_key
                                                and rows[0] == [w for w in want if w != HEADER_HANDLE_KEY]):
                        return None
                    del rows[0]
                    if not rows:
                        continue
                n = len(rows)
                widths = set(map(len, rows))
                if widths != {width}:
                    if not (o.output_handle_key and widths == {meta + len(plan) - 1} and not ops):
                        return None
                    meta -= 1  # TiCDC v8 writes no handle-key column
                    width -= 1
                cols = list(zip(*rows))
                if cols[1].count(table.table) != n or cols[2].count(table.schema) != n:
                    return None
                ops += cols[0]
                if commit_ts is not None:
                    commit_ts += map(int, cols[3])
                for out, convert, col in zip(values, plan, cols[meta:]):
                    out += convert(col, null)
        except (_stdcsv.Error, ValueError, ArithmeticError, TypeError):
            return None
        n = len(ops)
        if ops.count("I") == n:
            operations = None
        elif set(ops) <= _OP_LETTERS.keys():
            operations = list(map(_OP_LETTERS.__getitem__, ops))
        else:
            return None
        if commit_ts and min(commit_ts) < 0:
            return None
        return CsvColumns(table, operations, commit_ts, values)

    # -- tokenizing: yields (line, fields) with None for NULL
    def _records_fast(self, text: str, start_line: int):
        o = self.options
        lines = list(io.StringIO(text, newline=""))
        reader = _stdcsv.reader(lines, delimiter=o.delimiter, quotechar=o.quote, doublequote=True,
                                strict=True, skipinitialspace=False, quoting=_stdcsv.QUOTE_MINIMAL)
        null = o.null
        # Only a quoted field can hold a value equal to the NULL text; if the quoted form never
        # occurs in the data, every field equal to it is NULL.
        q = o.quote
        ambiguous = self._null_ambiguous if (q + null.replace(q, q + q) + q) in text else ()
        meta = o.meta_count
        prev = 0
        out = []
        try:
            for fields in reader:
                line = start_line + prev
                end = reader.line_num
                if null in fields:
                    if ambiguous and any(fields[meta + i] == null for i in ambiguous if meta + i < len(fields)):
                        # was it "\N" (a value) or \N (NULL)? Only the raw text can tell.
                        for rec_line, rec in self._records_exact("".join(lines[prev:end]), line):
                            out.append((rec_line, rec))
                        prev = end
                        continue
                    fields = [None if f == null else f for f in fields]
                out.append((line, fields))
                prev = end
        except _stdcsv.Error:
            # the exact tokenizer reports the precise line and column (or reads what csv refused)
            return self._records_exact(text, start_line)
        return out

    def _records_exact(self, text: str, start_line: int):
        o = self.options
        d, q, term, null = o.delimiter, o.quote, o.terminator, o.null
        i, n, line = 0, len(text), start_line
        out = []
        while i < n:
            rec_line = line
            fields: list[str | None] = []
            while True:
                col = len(fields) + 1
                if q and text.startswith(q, i):
                    j, parts = i + 1, []
                    while True:
                        k = text.find(q, j)
                        if k < 0:
                            raise MalformedMessage(CODEC, self._where(line, col), "quoted field is not closed")
                        if text.startswith(q, k + 1):
                            parts.append(text[j:k + 1])
                            j = k + 2
                            continue
                        parts.append(text[j:k])
                        i = k + 1
                        break
                    value = "".join(parts)
                    line += value.count("\n")
                    fields.append(value)
                else:
                    # unquoted: up to the delimiter or terminator; backslash escapes when quote is empty
                    field_start = start = i
                    buf = None
                    while i < n:
                        c = text[i]
                        if not q and c == "\\" and i + 1 < n:
                            if buf is None:
                                buf = []
                            buf.append(text[start:i])
                            nxt = text[i + 1]
                            buf.append("\n" if nxt == "n" else "\r" if nxt == "r" else nxt)
                            i += 2
                            start = i
                            continue
                        if text.startswith(d, i) or text.startswith(term, i):
                            break
                        if q and c == q:
                            raise MalformedMessage(CODEC, self._where(line, col), "quote inside an unquoted field")
                        if c == "\n" or c == "\r":
                            raise MalformedMessage(CODEC, self._where(line, col),
                                                   "line break inside an unquoted field")
                        i += 1
                    raw = text[field_start:i]
                    if raw == null:  # compared before unescaping: \\N is a value, \N is NULL
                        fields.append(None)
                    elif buf is None:
                        fields.append(raw)
                    else:
                        buf.append(text[start:i])
                        fields.append("".join(buf))
                if text.startswith(d, i):
                    i += len(d)
                    continue
                if text.startswith(term, i):
                    i += len(term)
                    line += term.count("\n") or 1
                    break
                if i >= n:
                    break
                raise MalformedMessage(CODEC, self._where(line, col), "unexpected text after a quoted field")
            out.append((rec_line, fields))
        return out

    # -- records -> events
    def _events(self, records, start_line: int) -> list[RowChange]:
        o = self.options
        table = self.table
        ncols = len(self._columns)
        meta = o.meta_count
        expected = meta + ncols
        # TiCDC v8 logs "not support output handle key" and writes no such column: accept both.
        alt = expected - 1 if o.output_handle_key else None
        if o.output_field_header and start_line == 1 and records:
            line, fields = records[0]
            want = header_line(table, o)[: -len(o.terminator)].split(o.delimiter)
            if fields != want and not (alt is not None and fields == [w for w in want if w != HEADER_HANDLE_KEY]):
                raise MalformedMessage(CODEC, self._where(line), f"header does not match the table: {fields!r}")
            records = records[1:]
        out: list[RowChange] = []
        pending_delete: tuple[int, RowChange] | None = None
        for line, fields in records:
            nf = len(fields)
            if nf == expected:
                skip_key = False
            elif alt is not None and nf == alt:
                skip_key = True
            else:
                raise MalformedMessage(CODEC, self._where(line),
                                       f"expected {expected} fields ({meta} meta + {ncols} columns of "
                                       f"{table.collection}), got {nf}")
            op = fields[0]
            kind = _KINDS.get(op)
            if kind is None:
                raise MalformedMessage(CODEC, self._where(line, 1), f"operation must be I, U or D, got {op!r}")
            if fields[1] != table.table or fields[2] != table.schema:
                raise MalformedMessage(CODEC, self._where(line, 2),
                                       f"row of {fields[2]}.{fields[1]} in a reader for {table.collection}")
            k = 3
            commit_ts = 0
            if o.include_commit_ts:
                try:
                    commit_ts = int(fields[3])
                    if commit_ts < 0:
                        raise ValueError
                except (TypeError, ValueError):
                    raise MalformedMessage(CODEC, self._where(line, 4),
                                           f"commit-ts must be an unsigned integer, got {fields[3]!r}") from None
                k = 4
            is_update = False
            if o.output_old_value:
                flag = fields[k]
                if flag not in ("true", "false"):
                    raise MalformedMessage(CODEC, self._where(line, k + 1),
                                           f"is-update must be true or false, got {flag!r}")
                is_update = flag == "true"
                k += 1
            if o.output_handle_key and not skip_key:
                k += 1
            row = self._row(fields, k, line)
            if pending_delete is not None:
                d_line, d_ev = pending_delete
                pending_delete = None
                if is_update and kind == INSERT:
                    out.append(RowChange(table, UPDATE, commit_ts, row, d_ev.row))
                    continue
                raise MalformedMessage(CODEC, self._where(d_line),
                                       "an is-update D row must be followed by its is-update I row")
            ev = RowChange(table, kind, commit_ts, row)
            if is_update and kind == DELETE:
                pending_delete = (line, ev)
                continue
            out.append(ev)
        if pending_delete is not None:
            raise MalformedMessage(CODEC, self._where(pending_delete[0]),
                                   "an is-update D row must be followed by its is-update I row")
        return out

    def _row(self, fields: list, k0: int, line: int) -> dict:
        try:
            return self._convert_row(fields, k0)
        except (ValueError, ArithmeticError, TypeError):
            pass
        for i, ((name, conv), v) in enumerate(zip(self._columns, fields[k0:])):  # find the culprit
            try:
                if v is not None:
                    conv(v)
            except (ValueError, ArithmeticError, TypeError) as e:
                col = self.table.columns[i]
                raise MalformedMessage(CODEC, self._where(line, k0 + i + 1, name),
                                       f"{self.table.collection}.{name}: cannot read {str(v)[:80]!r} "
                                       f"as {col.type}: {e}") from None
        raise AssertionError("unreachable")  # pragma: no cover


_COLUMN_CHUNK = 256
_OP_LETTERS = {"I": Operation.CREATE, "U": Operation.UPDATE, "D": Operation.DELETE}
_OPERATION_KIND = {Operation.CREATE: INSERT, Operation.UPDATE: UPDATE, Operation.DELETE: DELETE}
# Whole-column shape checks (ASCII digits only); the C ``fromisoformat`` then does the rest. A
# field with a line break inside passes the check but not ``fromisoformat``.
_DATE_COLUMN = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:\n[0-9]{4}-[0-9]{2}-[0-9]{2})*")
_DATETIME_ONE = r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?"
_DATETIME_COLUMN = re.compile(f"{_DATETIME_ONE}(?:\n{_DATETIME_ONE})*")


def _column_converter(col: Column, options: CsvOptions) -> Callable[[tuple, str], Any]:
    """``(field texts of one column, NULL text) -> values`` for the column-wise decoder: a C
    ``map`` over the column (after a whole-column shape check where the C parser is laxer than
    TiCDC's form), else the careful per-value parser. Raises ValueError (or ArithmeticError)
    on a bad value; which row and column is left to the row-wise path."""
    careful = _parser(col, options)
    if careful is None:  # text columns: the field is the value
        def texts(col: tuple, null: str):
            return col if null not in col else [None if v == null else v for v in col]
        return texts
    shape = None
    if careful is parse_date:
        shape, fast = _DATE_COLUMN.fullmatch, _dt.date.fromisoformat
    elif careful is parse_datetime:
        shape, fast = _DATETIME_COLUMN.fullmatch, datetime_from_text
    elif careful is _from_base64:
        shape, fast = None, _canonical_base64
    else:
        fast = careful  # int, float, Decimal: C already

    def convert(col: tuple, null: str):
        if null in col:
            return [None if v == null else careful(v) for v in col]
        if shape is not None and shape("\n".join(col)) is None:
            return list(map(careful, col))
        return fast(col) if fast is _canonical_base64 else list(map(fast, col))
    return convert


def _canonical_base64(col: tuple) -> list[bytes]:
    """Decode a column of base64 texts at C speed; a text that is not the canonical encoding of
    what it decodes to (so maybe not strict base64) is decoded by the strict parser instead."""
    values = list(map(binascii.a2b_base64, col))
    if b"".join(map(binascii.b2a_base64, values)) == ("\n".join(col) + "\n").encode():
        return values
    return list(map(_from_base64, col))


class CsvColumns:
    """One CSV file's rows of one table, column-wise: converted values per table column, the
    operation per row (None: all inserts) and commit ts per row (None: the file has none).
    The storage source slices it into record batches (``numbered_records``)."""

    __slots__ = ("table", "operations", "commit_ts", "columns", "count")

    def __init__(self, table: TableSchema, operations: list | None, commit_ts: list[int] | None,
                 columns: list):
        self.table = table
        self.operations = operations
        self.commit_ts = commit_ts
        self.columns = columns
        self.count = len(columns[0]) if columns else 0

    def __len__(self) -> int:
        return self.count

    def truncate(self, end: int) -> None:
        """Keep rows ``[0, end)`` only."""
        self.count = min(self.count, end)

    def commit_ts_at(self, k: int) -> int:
        return 0 if self.commit_ts is None else self.commit_ts[k]

    def records(self, positions: Iterable[bytes], store=None, start: int = 0, end: int | None = None) -> list[Record]:
        """Rows ``[start, end)`` as OpenCDC records (``events.rows_to_records``): what
        ``to_records(self.events()[start:end], positions, store)`` returns, without the events."""
        end = self.count if end is None else min(end, self.count)
        if _kernel is not None:
            positions = list(_islice(positions, max(end - start, 0)))
            got = self._kernel_records(positions, store, start, end)
            if got is not None:
                return got
        return self._python_records(positions, store, start, end)

    def numbered_records(self, prefix: bytes, store=None, start: int = 0, end: int | None = None) -> list[Record]:
        """``records`` with row ``k`` (0-based) at position ``prefix`` + the decimal digits of
        ``k + 1``: the storage source's positions, built in C with the records."""
        end = self.count if end is None else min(end, self.count)
        if _kernel is not None:
            got = self._kernel_records(prefix, store, start, end)
            if got is not None:
                return got
        positions = map((prefix.replace(b"%", b"%%") + b"%d").__mod__, range(start + 1, end + 1))
        return self._python_records(positions, store, start, end)

    def _kernel_records(self, positions: "bytes | list[bytes]", store, start: int, end: int) -> list[Record] | None:
        """The compiled builder's records (``_csv.c`` ``records``), or None: it handed them back."""
        if start >= end:
            return None
        return _kernel.records(records_plan(self.table, store), positions, self.operations, self.commit_ts,
                               self.columns, start, end)

    def _python_records(self, positions: Iterable[bytes], store, start: int, end: int) -> list[Record]:
        whole = start == 0 and end == len(self.columns[0]) if self.columns else True
        cols = self.columns if whole else [c[start:end] for c in self.columns]
        ops = self.operations if self.operations is None or whole else self.operations[start:end]
        ts = self.commit_ts if self.commit_ts is None or whole else self.commit_ts[start:end]
        return rows_to_records(self.table, store, positions, ops, ts, cols)

    def events(self) -> list[RowChange]:
        """The rows as ``RowChange`` (what ``CsvDecoder.decode`` returns)."""
        n = self.count
        cols = self.columns if not self.columns or n == len(self.columns[0]) else [c[:n] for c in self.columns]
        rows = rows_to_dicts(self.table, cols)
        table = self.table
        ts = self.commit_ts or [0] * n
        if self.operations is None:
            return [RowChange(table, INSERT, t, r) for t, r in zip(ts, rows)]
        kinds = map(_OPERATION_KIND.__getitem__, self.operations)
        return [RowChange(table, k, t, r) for k, t, r in zip(kinds, ts, rows)]


# --------------------------------------------------------------------------- transcoding to JSON-form lines

# JSON kinds of the transcoder's plan (the JK_* numbers in _csv.c), by (Avro value kind, decode kind).
_JK_INT, _JK_FLOAT, _JK_DECIMAL, _JK_DATE, _JK_DATETIME, _JK_TEXT = range(1, 7)
_JSON_KINDS = {("long", 1): _JK_INT, ("bigint", 1): _JK_INT, ("double", 2): _JK_FLOAT, ("decimal", 3): _JK_DECIMAL,
               ("date", 4): _JK_DATE, ("datetime", 5): _JK_DATETIME, ("string", _DK_TEXT): _JK_TEXT}
_NONFINITE_JSON = {"nan": b'"NaN"', "inf": b'"Infinity"', "-inf": b'"-Infinity"'}


def _float_json(value: float) -> bytes:
    """A float's text in Conduit's JSON form (``jsonform``): orjson's number, NaN and the
    infinities as strings. The transcoder calls orjson itself for finite values."""
    if value - value == 0.0:
        return orjson.dumps(value)
    return _NONFINITE_JSON[repr(value)]


@dataclass(frozen=True, slots=True)
class _TranscodePlan:
    """Per (table, options, store): the transcoder's column plan (``columns``: per column its
    JSON kind, nullability, precision/scale and pre-rendered JSON name; the key's column
    indexes and names; the float fallback) and the line assembler's (``lines``: the metadata
    JSON around the createdAt / commit-ts values, the operations' JSON texts), plus the
    metadata keys every row already has (an ``extra`` key among them is left to Python)."""

    columns: tuple
    lines: tuple
    metadata_keys: frozenset


def _transcode_plan(table: TableSchema, store, decode_kinds: tuple) -> _TranscodePlan | None:
    """The transcoder's plan (``decode_kinds``: the decode plan's column kinds), or None where
    it does not write the table's rows: a column whose value or schema it does not render,
    repeated column names, metadata that is not str."""
    _, template, names, key_indexes, created_key, ts_key, _, _ = records_plan(table, store)
    if len(set(names)) != len(names):
        return None
    columns = []
    for i, (col, decode_kind) in enumerate(zip(table.columns, decode_kinds)):
        kind, params = _value_kind(col)
        jk = _JSON_KINDS.get((kind, decode_kind))
        if jk is None:
            return None
        precision, scale = params.get("precision", 0), params.get("scale", 0)
        if kind == "bigint":
            precision = 1  # any integer of up to 20 digits (the schema's decimal(20, 0))
        if jk == _JK_DECIMAL and not (0 <= scale <= precision):
            return None
        columns.append((jk, col.nullable, precision, scale, (b"," if i else b"{") + orjson.dumps(col.name) + b":"))
    key = tuple((k, (b"," if j else b"{") + orjson.dumps(names[k]) + b":") for j, k in enumerate(key_indexes))
    # the metadata: constant texts around the two values each row sets (in the template's order)
    if not all(type(k) is str and type(v) is str for k, v in template.items()):
        return None
    slots = [k for k in template if k in (created_key, ts_key)]
    if slots != [created_key, ts_key]:
        return None
    pieces, current = [], []
    for j, (k, v) in enumerate(template.items()):
        sep = b"," if j else b""
        if k in (created_key, ts_key):
            current.append(sep + orjson.dumps(k) + b':"')
            pieces.append(b"".join(current))
            current = [b'"']
        else:
            current.append(sep + orjson.dumps(k) + b":" + orjson.dumps(v))
    pieces.append(b"".join(current))
    ops = tuple(orjson.dumps(op.text) for op in (Operation.CREATE, Operation.UPDATE, Operation.DELETE))
    return _TranscodePlan((tuple(columns), key, orjson.dumps, _float_json), (*pieces, *ops), frozenset(template))


class CsvJsonRows:
    """One CSV file's rows as JSON-form texts (``CsvDecoder.transcode``): per row its row and
    key objects, operation and commit ts, in four bytes objects. The storage source slices it
    into batches of lines (``lines``), as it slices ``CsvColumns`` into records."""

    __slots__ = ("_plan", "_text", "_offsets", "_ops", "_ts", "count")

    def __init__(self, plan: _TranscodePlan, text: bytes, offsets: bytes, ops: bytes, commit_ts: bytes | None):
        self._plan = plan
        self._text = text
        self._offsets = offsets
        self._ops = ops
        self._ts = commit_ts
        self.count = len(ops)

    def __len__(self) -> int:
        return self.count

    def truncate(self, end: int) -> None:
        """Keep rows ``[0, end)`` only."""
        self.count = max(0, min(self.count, end))

    def commit_ts_at(self, k: int) -> int:
        if not 0 <= k < self.count:
            raise IndexError(k)
        return 0 if self._ts is None else _U64.unpack_from(self._ts, 8 * k)[0]

    def lines(self, start: int, end: int, prefix: bytes, extra: Mapping[str, str] | None = None) -> bytes | None:
        """Rows ``[start, end)`` as JSON lines, each ending in a newline: exactly
        ``jsonform.dumps_lines`` of ``CsvColumns.numbered_records(prefix, store, start, end)``
        with ``extra`` added to each record's metadata (after its own keys). None (materialise
        the records instead) when ``extra`` has a key the rows' metadata already holds or a
        value that is not str."""
        end = min(end, self.count)
        start = max(start, 0)
        if start >= end:
            return b""
        extra_text = b""
        if extra:
            if not self._plan.metadata_keys.isdisjoint(extra):
                return None
            if not all(type(k) is str and type(v) is str for k, v in extra.items()):
                return None
            extra_text = b"".join([b"," + orjson.dumps(k) + b":" + orjson.dumps(v) for k, v in extra.items()])
        return _kernel.json_lines(self._plan.lines, self._text, self._offsets, self._ops, self._ts, start, end,
                                  bytes(prefix), extra_text)


_U64 = _struct.Struct("=Q")


def _row_converter(table: TableSchema, columns: tuple[tuple[str, Callable[[str], Any]], ...]
                   ) -> Callable[[list, int], dict]:
    """Compile ``fields[k:] -> {column: native value}`` for one table: one dict display with the
    converters inlined (text columns copied as they are; DATE/DATETIME by TiDB's inline parse
    forms, ``tidb.inline_parse_expr``), instead of a loop over columns per row."""
    namespace: dict[str, Any] = {**INLINE_NAMES, "_bad": _bad}
    items = []
    for i, (col, (name, conv)) in enumerate(zip(table.columns, columns)):
        at = f"f[k + {i}]" if i else "f[k]"
        v = f"v{i}"
        if conv is str:
            items.append(f"{name!r}: {at}")
            continue
        expr = None
        if conv is parse_date or conv is parse_datetime:
            memo = None
            if col.type == "DATE":  # dates repeat: parsed once per distinct text
                memo = f"m{i}"
                namespace[memo] = {}
            expr = inline_parse_expr(col.type, v, "_bad()", memo)
        if expr is None:
            namespace[f"c{i}"] = conv
            expr = f"c{i}({v})"
        items.append(f"{name!r}: None if ({v} := {at}) is None else {expr}")
    source = "def convert_row(f, k):\n    return {" + ", ".join(items) + "}\n"
    exec(compile(source, f"<cdcflow.csv row converter {table.collection}>", "exec"), namespace)
    return namespace["convert_row"]


def decode_rows(data: bytes, table: TableSchema, options: CsvOptions | None = None,
                start_line: int = 1, source: str | None = None) -> list[RowChange]:
    """One-off convenience for ``CsvDecoder(table, options, source).decode(data, start_line)``."""
    return CsvDecoder(table, options, source).decode(data, start_line)
