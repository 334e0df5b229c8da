"""CSV writer: rows of one table -> the bytes of a TiCDC CSV data file."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat as _repeat
from typing import Any, NamedTuple

from cdcflow.connectors.ticdc.canal_json.schema import _int_text, _str_text
from cdcflow.connectors.ticdc.errors import UnrepresentableValue, UnsupportedEvent
from cdcflow.connectors.ticdc.events import (
    UPDATE,
    RowChange,
)
from cdcflow.connectors.ticdc.tidb import (
    BINARY_TYPES,
    Column,
    TableSchema,
)
from cdcflow.connectors.ticdc.tidb import ValueMismatch as _ValueProblem
from cdcflow.connectors.ticdc.tidb import format_go_float as go_float_text

from .options import _OPS, _UNQUOTED_TYPES, CODEC, CsvOptions, _formatter, _kernel, header_line

# --------------------------------------------------------------------------- encoder

# Characters each TiDB text form the compiled writer writes itself can hold. Where the quote
# character (or, with backslash escaping, the delimiter or the NULL text) could occur in one, the
# kernel calls the column's field writer instead.
_DIGITS = "0123456789"
# Column kinds of the compiled writer's plan (the EK_* numbers in _csv.c).
_EK_CALL, _EK_INT, _EK_GO_FLOAT, _EK_STR, _EK_DECIMAL, _EK_DATE, _EK_DATETIME, _EK_BASE64, _EK_HEX = range(9)
_FORM_CHARS = {"DECIMAL": frozenset(_DIGITS + "-."), "DATE": frozenset(_DIGITS + "-"),
               "DATETIME": frozenset(_DIGITS + "-: ."), "TIMESTAMP": frozenset(_DIGITS + "-: .")}


class EncodeColumn(NamedTuple):
    """One column of the compiled writer's plan (``_csv.c`` C struct ``out_column``)."""

    name: str  #: the row dict's key
    kind: int  #: its EK_* kind: a text form the kernel writes itself, or ``_EK_CALL``
    param: int  #: DECIMAL scale, DATETIME fsp (-1: none), else 0
    writer: Callable  #: the column's field writer (value -> final field text), called for the rest


class EncodePlan(NamedTuple):
    """What the compiled writer (``_csv.c`` ``encode``, C struct ``encode_plan``) reads of one
    table and its options, by position; built by ``_Writer._encode_plan``."""

    prefixes: dict  #: row kind -> bytes of its operation, table and schema fields and a delimiter
    delimiter: bytes
    terminator: bytes
    null: bytes  #: the NULL text
    quote: bytes  #: one byte
    include_commit_ts: bool
    columns: tuple  #: an ``EncodeColumn`` per table column


class _Writer:
    """Per (table, options): the per-column field writers, the line prefixes and the compiled
    writer's plan (``_csv.c`` ``encode``)."""

    __slots__ = ("table", "options", "columns", "quote_field", "prefix", "handle_names", "plan")

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
        self.plan = self._encode_plan()

    def _encode_plan(self) -> EncodePlan | None:
        """The compiled writer's plan for rows without is-update or handle-key columns, or None
        where those are on or the dialect is not one byte per character."""
        o = self.options
        if (o.output_old_value or o.output_handle_key or len(o.quote) != 1
                or not (o.quote + o.delimiter).isascii()):
            return None
        try:
            prefixes = {kind: (self.prefix[op] + o.delimiter).encode() for kind, op in _OPS.items()}
            texts = dict(delimiter=o.delimiter.encode(), terminator=o.terminator.encode(), null=o.null.encode(),
                         quote=o.quote.encode())
        except UnicodeEncodeError:
            return None
        columns = []
        for col, (_, writer) in zip(self.table.columns, self.columns):
            kind, param = self._encode_kind(col)
            columns.append(EncodeColumn(name=col.name, kind=kind, param=param, writer=writer))
        return EncodePlan(prefixes=prefixes, **texts, include_commit_ts=o.include_commit_ts,
                          columns=tuple(columns))

    def _encode_kind(self, col: Column) -> tuple[int, int]:
        """(kind, param) of ``col`` for the compiled writer: a text form it writes itself (the
        same text as the field writer), or _EK_CALL (it calls the field writer)."""
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
        d, null = o.delimiter, o.null
        parts = [self.prefix[op]]
        if o.include_commit_ts:
            parts.append(str(commit_ts))
        if o.output_old_value:
            parts.append("true" if is_update else "false")
        if o.output_handle_key:
            parts.append(self.quote_field(self._handle_key_text(row)))
        try:
            parts += [null if (v := row[name]) is None else text(v) for name, text in self.columns]
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


