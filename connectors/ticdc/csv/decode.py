"""CSV reader: the bytes of a TiCDC CSV data file -> rows, column-wise values, records or
JSON-form lines.

The usual options (one-character delimiter, a quote character, ``\\r\\n``/``\\n`` terminator) go
through the C ``csv`` module (or the ``_csv`` kernel); an exact tokenizer reads the rest and also
settles what the C reader cannot see, whether a field equal to the NULL text was quoted.
"""

from __future__ import annotations

import binascii
import csv as _stdcsv
import datetime as _dt
import decimal as _decimal
import io
import re
import sys
from collections.abc import Callable, Iterable
from itertools import islice as _islice
from typing import Any, NamedTuple

from cdcflow.connectors.ticdc.canal_json.schema import parse_time as _parse_time_in_range
from cdcflow.connectors.ticdc.errors import MalformedMessage
from cdcflow.connectors.ticdc.events import (
    DELETE,
    INSERT,
    UPDATE,
    RowChange,
    records_plan,
    rows_to_dicts,
    rows_to_records,
)
from cdcflow.connectors.ticdc.tidb import (
    INLINE_NAMES,
    Column,
    TableSchema,
    datetime_from_text,
    inline_parse_expr,
    parse_date,
    parse_datetime,
)
from cdcflow.record import Operation, Record

from .options import (
    _KINDS,
    _UNQUOTED_TYPES,
    CODEC,
    HEADER_HANDLE_KEY,
    CsvOptions,
    _bad,
    _from_base64,
    _from_hex,
    _kernel,
    _parser,
    header_line,
)

# --------------------------------------------------------------------------- decoder

#: Python 3.10's csv module refuses a NUL character in the data ("line contains NUL"); 3.11 reads it
_CSV_READS_NUL = sys.version_info >= (3, 11)


def _nul_stand_in(text: str) -> str:
    """A private-use character that does not occur in ``text``, to carry its NULs past 3.10's csv reader."""
    return next(c for c in map(chr, range(0xE000, 0xF900)) if c not in text)


# Column kinds of the compiled reader's plan (the DK_* numbers in _csv.c), by careful parser.
_DK_TEXT, _DK_CALL = 0, 9
_DECODE_KINDS = ((int, 1), (float, 2), (_decimal.Decimal, 3), (parse_date, 4), (parse_datetime, 5),
                 (_parse_time_in_range, 6), (_from_base64, 7), (_from_hex, 8))


class DecodePlan(NamedTuple):
    """What the compiled reader (``_csv.c`` ``decode`` and ``transcode``, C struct ``decode_plan``)
    reads of one table and its options. The C side unpacks it by position, so the field order is
    the one ``unpack_decode_plan`` parses; built by ``_decode_plan``."""

    delimiter: bytes  #: one byte
    quote: bytes  #: one byte
    null: bytes  #: the NULL text
    meta_count: int  #: fields before the columns (operation, table, schema, commit ts, handle key)
    include_commit_ts: bool
    output_handle_key: bool  #: a row may lack the handle-key field (TiCDC v8 writes none)
    table: bytes  #: the table name every row's second field must equal
    schema: bytes  #: the schema name every row's third field must equal
    header: tuple  #: the header line's fields (bytes), checked when the file has one
    header_alt: tuple | None  #: the same without the handle-key field, or None
    kinds: tuple  #: per column its DK_* kind (``_DK_TEXT`` .. ``_DK_CALL``)
    carefuls: tuple  #: per column its Python parser (None for text), called for ``_DK_CALL``
    op_create: Operation
    op_update: Operation
    op_delete: Operation
    field_limit: int  #: ``csv.field_size_limit()`` when the plan was made: longer fields go back


def _decode_plan(table: TableSchema, options: CsvOptions) -> DecodePlan | None:
    """The compiled reader's plan for what ``_column_wise`` reads, or None where it does not
    apply (is-update pairs, a dialect ``csv.reader`` is not used for or that is not one byte per
    character)."""
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
        return DecodePlan(
            delimiter=o.delimiter.encode(), quote=o.quote.encode(), null=o.null.encode(), meta_count=o.meta_count,
            include_commit_ts=o.include_commit_ts, output_handle_key=o.output_handle_key,
            table=table.table.encode(), schema=table.schema.encode(), header=tuple(w.encode() for w in want),
            header_alt=(tuple(w.encode() for w in want if w != HEADER_HANDLE_KEY) if o.output_handle_key
                        else None),
            kinds=tuple(kinds), carefuls=tuple(carefuls), op_create=Operation.CREATE, op_update=Operation.UPDATE,
            op_delete=Operation.DELETE, field_limit=_stdcsv.field_size_limit())
    except UnicodeEncodeError:
        return None


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
        nul = None
        if not _CSV_READS_NUL and "\0" in text:
            nul = _nul_stand_in(text)
            text = text.replace("\0", nul)
        reader = _stdcsv.reader(io.StringIO(text, newline=""), delimiter=o.delimiter, quotechar=q,
                                doublequote=True, strict=True, skipinitialspace=False,
                                quoting=_stdcsv.QUOTE_MINIMAL)
        values: list[list] = [[] for _ in plan]
        ops: list[str] = []
        commit_ts: list[int] | None = [] if o.include_commit_ts else None
        header = o.output_field_header and start_line == 1
        try:
            while rows := list(_islice(reader, _COLUMN_CHUNK)):
                if nul is not None:
                    rows = [[f.replace(nul, "\0") for f in row] for row in rows]
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
