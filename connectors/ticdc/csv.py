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
import re
from itertools import islice as _islice
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cdcflow.params import option_bool as _bool
from cdcflow.connectors.ticdc.canal_json import _int_text, _str_text, parse_time
from cdcflow.connectors.ticdc.errors import MalformedMessage, UnrepresentableValue, UnsupportedEvent
from cdcflow.connectors.ticdc.events import DELETE, INSERT, UPDATE, RowChange, rows_to_records, rows_to_dicts
from cdcflow.errors import ConfigError
from cdcflow.record import Operation, Record
from cdcflow.tidb import BINARY_TYPES, INTEGER_TYPES, Column, TableSchema, parse_date, parse_datetime
from cdcflow.tidb import ValueMismatch as _ValueProblem
from cdcflow.tidb import format_date as date_text
from cdcflow.tidb import format_datetime as datetime_text
from cdcflow.tidb import format_decimal as decimal_text
from cdcflow.tidb import format_go_float as go_float_text
from cdcflow.tidb import format_time as time_text

CODEC = "csv"
HEADER_META = ("ticdc-meta$operation", "ticdc-meta$table", "ticdc-meta$schema")
HEADER_COMMIT_TS = "ticdc-meta$commit-ts"
HEADER_IS_UPDATE = "ticdc-meta$is-update"
HEADER_HANDLE_KEY = "ticdc-meta$handle-key"
_OPS = {INSERT: "I", UPDATE: "U", DELETE: "D"}
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
    t = col.type
    if t in INTEGER_TYPES or t in ("BIT", "YEAR"):
        return _int_text
    if t in ("FLOAT", "DOUBLE"):
        return go_float_text
    if t == "DECIMAL":
        scale = col.scale
        return lambda v: decimal_text(v, scale)
    if t in BINARY_TYPES:
        if options.binary_encoding_method == "hex":
            def conv(v: Any) -> str:
                if type(v) is not bytes:
                    raise _ValueProblem("binary column needs bytes")
                return v.hex()
        else:
            def conv(v: Any) -> str:
                if type(v) is not bytes:
                    raise _ValueProblem("binary column needs bytes")
                return base64.b64encode(v).decode("ascii")
        return conv
    if t == "DATE":
        return date_text
    if t in ("DATETIME", "TIMESTAMP"):
        fsp = col.fsp
        return lambda v: datetime_text(v, fsp)
    if t == "TIME":
        fsp = col.fsp
        return lambda v: time_text(v, fsp)
    return _str_text  # CHAR/VARCHAR/TEXT family, ENUM name, SET names, JSON


def _fail(why: str):
    """Raise from inside a generated expression."""
    raise _ValueProblem(why)


def _parser(col: Column, options: CsvOptions) -> Callable[[str], Any] | None:
    t = col.type
    if t in INTEGER_TYPES or t in ("BIT", "YEAR"):
        return int
    if t in ("FLOAT", "DOUBLE"):
        return float
    if t == "DECIMAL":
        import decimal

        return decimal.Decimal
    if t in BINARY_TYPES:
        if options.binary_encoding_method == "hex":
            return _from_hex
        return _from_base64
    if t == "DATE":
        return parse_date
    if t in ("DATETIME", "TIMESTAMP"):
        return parse_datetime
    if t == "TIME":
        return parse_time
    return None


def _from_base64(text: str) -> bytes:
    return binascii.a2b_base64(text, strict_mode=True)  # binascii.Error is a ValueError


def _from_hex(text: str) -> bytes:
    if len(text) % 2 or not all(c in "0123456789abcdefABCDEF" for c in text):
        raise ValueError("not hex: expected pairs of hex digits")
    return bytes.fromhex(text)


# --------------------------------------------------------------------------- encoder

class _Writer:
    """Per (table, options) column plan and field quoting."""

    __slots__ = ("table", "options", "columns", "quote_field", "prefix", "handle_names", "column_texts", "lines")

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
        self.column_texts = self._compile_column_texts()
        self.lines = self._compile_lines()

    def _compile_lines(self) -> Callable[[Iterable[RowChange]], list[str] | None] | None:
        """Compile ``events -> [line]`` once per (table, options) for plain rows (no is-update or
        handle-key column): one f-string per row with every column's formatting inlined. Returns
        None for the batch when any event or value needs the careful path (``line``), which then
        writes it or names the offending column."""
        o = self.options
        if o.output_old_value or o.output_handle_key:
            return None
        q = o.quote
        ns: dict[str, Any] = {"RowChange": RowChange, "TABLE": self.table, "D": o.delimiter, "END": o.terminator,
                              "NULL": o.null, "Q": q, "QQ": q + q, "DOT0": ".0", "SEP": " ",
                              "Decimal": _decimal.Decimal, "date": _dt.date, "datetime": _dt.datetime,
                              "PREFIX": {kind: self.prefix[op] for kind, op in _OPS.items()},
                              "b2a_base64": binascii.b2a_base64}
        fields = []
        for i, col in enumerate(self.table.columns):
            v = f"v{i}"
            ns[f"K{i}"] = col.name
            conv = _formatter(col, o)
            t = col.type
            if conv is _int_text:
                expr = f"str({v}) if type({v}) is int else F{i}({v})"
            elif conv is go_float_text:  # Go's %v: plain digits in [1e-4, 1e6), else the careful formatter
                expr = (f"(t if not (t := repr({v})).endswith(DOT0) else t[:-2]) if type({v}) is float and "
                        f"(1e-4 <= {v} < 1e6 or -1e6 < {v} <= -1e-4) else F{i}({v})")
            elif conv is _str_text and q:
                expr = f"Q + ({v} if Q not in {v} else {v}.replace(Q, QQ)) + Q if type({v}) is str else F{i}({v})"
            elif t == "DECIMAL" and q:
                # format 'f' has exactly ``scale`` fraction digits iff the value needs no rescaling
                if col.scale:
                    ok = f"(t := format({v}, 'f'))[-{col.scale + 1}:-{col.scale}] == '.'"
                else:
                    ok = f"(t := format({v}, 'f'))[-1:].isdigit() and '.' not in t"
                expr = f"Q + t + Q if type({v}) is Decimal and {ok} else F{i}({v})"
            elif t == "DATE" and q:
                expr = f"Q + {v}.isoformat() + Q if type({v}) is date else F{i}({v})"
            elif t in ("DATETIME", "TIMESTAMP") and q and not col.fsp:
                expr = (f"Q + {v}.isoformat(SEP) + Q if type({v}) is datetime and {v}.tzinfo is None "
                        f"and not {v}.microsecond else F{i}({v})")
            elif t in ("DATETIME", "TIMESTAMP") and q and col.fsp and 0 < col.fsp <= 6:
                # a fraction is written with fsp digits; one finer than fsp goes to F (which raises)
                ns[f"Z{i}"] = "." + "0" * col.fsp
                expr = (f"Q + ({v}.isoformat(SEP)[:{20 + col.fsp}] if (u := {v}.microsecond) and not u % "
                        f"{10 ** (6 - col.fsp)} else {v}.isoformat(SEP) + Z{i} if not u else F{i}({v})) + Q "
                        f"if type({v}) is datetime and {v}.tzinfo is None else F{i}({v})")
            elif t in BINARY_TYPES and q:
                text = ("{v}.hex()" if o.binary_encoding_method == "hex"
                        else "b2a_base64({v}, newline=False).decode()").format(v=v)
                expr = f"Q + t + Q if type({v}) is bytes and Q not in (t := {text}) else F{i}({v})"
            else:
                expr = f"F{i}({v})"
            ns[f"F{i}"] = self.columns[i][1]  # the careful field formatter (quotes, raises)
            fields.append(f"{{NULL if ({v} := row[K{i}]) is None else {expr}}}")
        ts = "{ev.commit_ts}{D}" if o.include_commit_ts else ""
        source = (
            "def lines(events):\n"
            "    out = []\n"
            "    append = out.append\n"
            "    for ev in events:\n"
            "        row = ev.row\n"
            "        if type(ev) is not RowChange or ev.table is not TABLE or row is None or ev.kind not in PREFIX:\n"
            "            return None\n"
            "        append(f\"{PREFIX[ev.kind]}{D}" + ts + "{D}".join(fields) + "{END}\")\n"
            "    return out\n"
        )
        exec(compile(source, "<cdcflow.csv line writer>", "exec"), ns)
        lines = ns["lines"]

        def checked(events):
            try:
                return lines(events)
            except (_ValueProblem, KeyError):
                return None
        return checked

    def _compile_column_texts(self) -> Callable[[dict], list]:
        """Compile ``row -> [field text per column]`` once per table: one list display with the
        formatters inlined instead of a loop over columns per row."""
        o = self.options
        q = o.quote
        namespace: dict[str, Any] = {"null": o.null, "q": q, "qq": q + q, "_fail": _fail}
        items = []
        for i, ((name, fn), col) in enumerate(zip(self.columns, self.table.columns)):
            v, t = f"v{i}", f"t{i}"
            conv = _formatter(col, o)
            if conv is _int_text:  # integers: inline, unquoted
                expr = f"(str({v}) if type({v}) is int else _fail('needs an int'))"
            elif q and conv is _str_text:  # strings: inline quoting
                expr = (f"(q + ({v} if q not in {v} else {v}.replace(q, qq)) + q if type({v}) is str "
                        f"else _fail('needs a str'))")
            elif q and col.type not in _UNQUOTED_TYPES:  # formatted, then quoted inline
                namespace[f"c{i}"] = conv
                expr = f"(q + ({t} if q not in ({t} := c{i}({v})) else {t}.replace(q, qq)) + q)"
            else:
                namespace[f"f{i}"] = fn
                expr = f"f{i}({v})"
            items.append(f"null if ({v} := row[{name!r}]) is None else {expr}")
        source = "def column_texts(row):\n    return [" + ", ".join(items) + "]\n"
        exec(compile(source, "<cdcflow.csv column writer>", "exec"), namespace)
        return namespace["column_texts"]

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

    def line(self, op: str, ev: RowChange, row: dict, is_update: bool) -> str:
        o = self.options
        d = o.delimiter
        parts = [self.prefix[op]]
        if o.include_commit_ts:
            parts.append(str(ev.commit_ts))
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


def encode_rows(events: Iterable[RowChange], table: TableSchema, options: CsvOptions | None = None,
                header: bool | None = None) -> bytes:
    """Rows of one table -> CSV bytes as TiCDC's storage sink writes them.

    ``header`` (default: ``options.output_field_header``) puts the header line first;
    a writer appending to an existing file passes False.
    """
    options = options or CsvOptions()
    w = _writer(table, options)
    lines = []
    if options.output_field_header if header is None else header:
        lines.append(header_line(table, options))
    fast = w.lines(events) if w.lines is not None and isinstance(events, (list, tuple)) else None
    if fast is not None:
        lines += fast
        events = ()
    for ev in events:
        if type(ev) is not RowChange:
            raise UnsupportedEvent(CODEC, None, f"CSV data files hold rows only, not {type(ev).__name__}")
        if ev.table is not table and ev.table.collection != table.collection:
            raise UnsupportedEvent(CODEC, None,
                                   f"row of {ev.table.collection} in a CSV file of {table.collection}")
        kind = ev.kind
        if ev.row is None:
            raise UnsupportedEvent(CODEC, None, f"{table.collection}: a {kind} row without values")
        if kind == UPDATE and options.output_old_value and ev.old is not None:
            lines.append(w.line("D", ev, ev.old, True))
            lines.append(w.line("I", ev, ev.row, True))
        elif kind in _OPS:
            lines.append(w.line(_OPS[kind], ev, ev.row, kind == UPDATE))
        else:
            raise UnsupportedEvent(CODEC, None, f"RowChange.kind must be insert/update/delete, not {kind!r}")
    try:
        return "".join(lines).encode("utf-8")
    except UnicodeEncodeError as e:
        raise UnrepresentableValue(CODEC, table.collection, "?", e.object[e.start:e.end],
                                   "text is not encodable as UTF-8 (lone surrogate)") from None


# --------------------------------------------------------------------------- decoder

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
        self._convert_row = _row_converter(self._columns)
        # Columns whose text could equal the NULL text: only there quoting decides NULL vs value.
        self._null_ambiguous = tuple(i for i, c in enumerate(table.columns) if c.type not in _UNQUOTED_TYPES)
        self._fast = (len(o.delimiter) == 1 and len(o.quote) == 1 and o.terminator in ("\r\n", "\n"))
        self._column_plan = tuple(_column_converter(c, o) for c in table.columns)

    # -- positions
    def _where(self, line: int, column: int | None = None, name: str | None = None) -> str:
        src = f"{self.source} " if self.source else ""
        if column is None:
            return f"{src}line {line}"
        return f"{src}line {line}, column {column}" + (f" ({name})" if name else "")

    def decode(self, data: bytes, start_line: int = 1) -> list[RowChange]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            line = start_line + data.count(b"\n", 0, e.start)
            raise MalformedMessage(CODEC, self._where(line), f"not UTF-8 at byte {e.start}") from None
        columns = self._column_wise(text, start_line) if self._fast else None
        if columns is not None:
            return columns.events()
        return self._events(self._records(text, start_line), start_line)

    def decode_columns(self, data: bytes, start_line: int = 1) -> "CsvColumns | list[RowChange]":
        """Like ``decode``, but a file's plain rows come back column-wise (``CsvColumns``), from
        which ``records`` makes OpenCDC records without per-row event objects. Rows the
        column-wise reader does not take (is-update pairs, a quoted NULL text) come back as the
        ``RowChange`` list ``decode`` returns; malformed data raises as there."""
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
        shape, fast = _DATETIME_COLUMN.fullmatch, _dt.datetime.fromisoformat
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
    The storage source slices it into record batches (``records``)."""

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


def _row_converter(columns: tuple[tuple[str, Callable[[str], Any]], ...]) -> Callable[[list, int], dict]:
    """Compile ``fields[k:] -> {column: native value}`` for one table: one dict display with the
    converters inlined (text columns copied as they are), instead of a loop over columns per row."""
    namespace: dict[str, Any] = {}
    items = []
    for i, (name, conv) in enumerate(columns):
        at = f"f[k + {i}]" if i else "f[k]"
        if conv is str:
            items.append(f"{name!r}: {at}")
        else:
            namespace[f"c{i}"] = conv
            items.append(f"{name!r}: None if (v{i} := {at}) is None else c{i}(v{i})")
    source = "def convert_row(f, k):\n    return {" + ", ".join(items) + "}\n"
    exec(compile(source, "<cdcflow.csv row converter>", "exec"), namespace)
    return namespace["convert_row"]


def decode_rows(data: bytes, table: TableSchema, options: CsvOptions | None = None,
                start_line: int = 1, source: str | None = None) -> list[RowChange]:
    """One-off convenience for ``CsvDecoder(table, options, source).decode(data, start_line)``."""
    return CsvDecoder(table, options, source).decode(data, start_line)
