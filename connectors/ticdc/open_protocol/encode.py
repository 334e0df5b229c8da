"""Open protocol writer: TiCDC events or OpenCDC records -> batch-framed Kafka key/value pairs."""

from __future__ import annotations

import binascii
import datetime as _dt
import threading
from sys import intern as _intern
from typing import Any, Callable, Iterable, Mapping, NamedTuple

import orjson
from cdcflow import accel
from cdcflow.connectors.ticdc.tidb import (
    Column,
    TableSchema,
)
from cdcflow.connectors.ticdc.tidb import format_date as date_text
from cdcflow.connectors.ticdc.tidb import format_datetime as datetime_text
from cdcflow.connectors.ticdc.tidb import format_decimal as decimal_text
from cdcflow.connectors.ticdc.tidb import format_time as time_text
from cdcflow.errors import ConfigError
from cdcflow.record import META_PAYLOAD_SCHEMA_SUBJECT, META_PAYLOAD_SCHEMA_VERSION, Operation, Record

from ..errors import UnrepresentableValue, UnsupportedEvent
from ..events import (
    DELETE,
    INSERT,
    META_COMMIT_TS,
    META_CONTROL,
    META_PARTITION,
    UPDATE,
    DDLEvent,
    Event,
    ResolvedEvent,
    RowChange,
    from_record,
    from_records,
    referenced_table,
)
from .schema import (
    _BLOB_CODES,
    _INF,
    _INT_CODES,
    _INT_RANGE,
    _LEN,
    _MAX_TIME,
    _RECORD_OVERHEAD,
    _ROW_SLACK,
    _VERSION_BYTES,
    _ZERO_LEN,
    CODEC,
    EXTRA_CLAIM_CHECK,
    EXTRA_ONLY_HANDLE_KEY,
    EXTRA_ROW_ID,
    TYPE_DDL,
    TYPE_RESOLVED,
    TYPE_ROW,
    MessageTooLarge,
    column_flags,
    float32_short,
    go_quote,
    is_binary,
    type_code,
)

# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------

DEFAULT_OPTIONS = {
    "max-batch-size": 16,
    "max-message-bytes": 10 * 1024 * 1024,
    "output-old-value": True,
    "only-output-updated-columns": False,
    "delete-only-output-handle-key-columns": False,
}


def _options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(DEFAULT_OPTIONS)
    for name, value in (options or {}).items():
        if name not in DEFAULT_OPTIONS:
            raise ConfigError(CODEC, name, "known-option", f"unknown option; known: {sorted(DEFAULT_OPTIONS)}")
        default = DEFAULT_OPTIONS[name]
        if isinstance(default, bool):
            if isinstance(value, str) and value.lower() in ("true", "false"):
                value = value.lower() == "true"
            if not isinstance(value, bool):
                raise ConfigError(CODEC, name, "bool", f"expected true or false, got {value!r}")
        else:
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise ConfigError(CODEC, name, "int", f"expected an integer, got {value!r}") from None
            if value < 1:
                raise ConfigError(CODEC, name, "positive", f"must be at least 1, got {value}")
        out[name] = value
    return out


def _int_bounds(code: int, col) -> tuple[int, int]:
    """Inclusive range of an integer-coded column: its TiDB int type, YEAR (13) or BIT(n) (16)."""
    if code in _INT_CODES:
        return _INT_RANGE[code][1 if col.unsigned else 0]
    if code == 13:
        return 0, 2155
    return 0, (1 << (col.length or 64)) - 1


def _native_to_wire(table: TableSchema, col: Column) -> Callable[[Any], Any]:
    """Converter for one column's native value (never None) to its JSON value.
    Raises UnrepresentableValue naming table, column and value."""
    code = type_code(col)
    where = table.collection

    def bad(v, why):
        return UnrepresentableValue(CODEC, where, col.name, v, why)

    if code in _INT_CODES or code == 13 or code == 16:
        lo, hi = _int_bounds(code, col)

        def enc_int(v):
            if type(v) is not int or not lo <= v <= hi:
                raise bad(v, f"{col.type} needs an int in [{lo}, {hi}]")
            return v
        return enc_int
    if code == 5:
        def enc_double(v):
            if type(v) is not float or v != v or v in (_INF, -_INF):
                raise bad(v, "DOUBLE needs a finite float")
            return v
        return enc_double
    if code == 4:
        def enc_float(v):
            if type(v) is not float or v != v or v in (_INF, -_INF):
                raise bad(v, "FLOAT needs a finite float")
            short = float32_short(v)
            if short is None:
                raise bad(v, "FLOAT holds 32-bit floats; this value has no exact float32 form")
            return short
        return enc_float
    if code == 246:
        scale = col.scale

        def enc_decimal(v):
            try:
                return decimal_text(v, scale)
            except ValueError as e:
                raise bad(v, f"DECIMAL: {e}") from None
        return enc_decimal
    if code == 10:
        def enc_date(v):
            try:
                return date_text(v)
            except ValueError as e:
                raise bad(v, str(e)) from None
        return enc_date
    if code == 7 or code == 12:
        fsp = col.fsp

        def enc_datetime(v):
            try:
                return datetime_text(v, fsp)
            except ValueError as e:
                raise bad(v, f"{col.type}: {e}") from None
        return enc_datetime
    if code == 11:
        fsp = col.fsp

        def enc_time(v):
            if type(v) is _dt.timedelta and abs(v) > _MAX_TIME:
                raise bad(v, "TIME is limited to -838:59:59..838:59:59")
            try:
                return time_text(v, fsp)
            except ValueError as e:
                raise bad(v, f"TIME: {e}") from None
        return enc_time
    if code == 245:
        def enc_json(v):
            if type(v) is not str:
                raise bad(v, "JSON needs its text as str")
            return v
        return enc_json
    if code == 247:
        index = {name: i + 1 for i, name in enumerate(col.elements)}

        def enc_enum(v):
            if type(v) is str:
                i = index.get(v)
                if i is not None:
                    return i
                if v == "":
                    return 0  # MySQL's error value '' has index 0
                if not index and v.isdigit() and v.isascii():
                    return int(v)  # index text decoded from a format without elements
                raise bad(v, "ENUM name is not one of the column's elements" if index
                          else "ENUM elements unknown: only an index text can be written")
            raise bad(v, "ENUM needs an element name (str)")
        return enc_enum
    if code == 248:
        bits = {name: 1 << i for i, name in enumerate(col.elements)}

        def enc_set(v):
            if type(v) is str:
                if v == "":
                    return 0
                if not bits and v.isdigit() and v.isascii():
                    return int(v)  # bitmask text decoded from a format without elements
                mask = 0
                for name in v.split(","):
                    b = bits.get(name)
                    if b is None:
                        raise bad(v, f"SET member {name!r} is not one of the column's elements" if bits
                                  else "SET elements unknown: only a bitmask text can be written")
                    mask |= b
                return mask
            raise bad(v, "SET needs comma-joined names (str)")
        return enc_set
    binary = is_binary(col)
    if code in _BLOB_CODES:
        def enc_blob(v):
            t = type(v)
            if t is bytes:
                return binascii.b2a_base64(v, newline=False).decode("ascii")
            if t is str and not binary:
                return binascii.b2a_base64(v.encode("utf-8"), newline=False).decode("ascii")
            raise bad(v, f"{col.type} needs {'bytes' if binary else 'str'}")
        return enc_blob
    if binary:  # VARBINARY / BINARY
        def enc_binstr(v):
            if type(v) is not bytes:
                raise bad(v, f"{col.type} needs bytes")
            return go_quote(v)
        return enc_binstr

    def enc_text(v):
        if type(v) is not str:
            raise bad(v, f"{col.type} needs a str")
        return v
    return enc_text


class _TableEncoding:
    """Per-table precomputation: key JSON prefix, and per column its name, the
    constant part of its column object and its value converter."""

    __slots__ = ("table", "key_suffix", "columns", "by_name", "handle", "kernel_plan")

    def __init__(self, table: TableSchema):
        self.table = table
        head = {"scm": table.schema} if table.schema else {}
        if table.table:
            head["tbl"] = table.table
        if table.partition is not None:
            head["ptn"] = table.partition
        head["t"] = TYPE_ROW
        # the key JSON after '{"ts":N': ',"scm":..,"tbl":..,"ptn":..,"t":1}'
        self.key_suffix = b"," + orjson.dumps(head)[1:]
        self.columns = tuple((col.name, type_code(col), col.handle_key, column_flags(col),
                              _native_to_wire(table, col)) for col in table.columns)
        self.by_name = {c[0] for c in self.columns}
        self.handle = frozenset(c.name for c in table.columns if c.handle_key)
        self.kernel_plan = None  # the compiled encoder's TablePlan, built on first use (_kernel_plan)


# -- the compiled encoder (_open_protocol_encode.c), for OpenProtocolEncoder.encode_records --------
_encode_kernel = accel.load("cdcflow.connectors.ticdc.open_protocol._open_protocol_encode")
"""The compiled encoder, or None: the Python path is the reference and the fallback (tests switch
the kernel off by setting this to None)."""


class PlanColumn(NamedTuple):
    """One column of the kernel's ``TablePlan`` (``_open_protocol_encode.c`` ``plan_column``, C
    struct ``Column``), read by position."""

    name: str  #: the row dict's key (interned)
    prefix: bytes  #: the column object's JSON up to its value: ``"name":{"t":8,"h":true,"f":11,"v":``
    kind: int  #: a ``K_*`` kind the kernel writes itself, or ``K_CONV``
    param: int  #: DECIMAL scale, DATETIME/TIME fsp, BLOB: 1 binary / 0 text; else -1
    lo: int  #: ``K_INT``: the smallest value allowed, else 0
    hi: int  #: ``K_INT``: the largest value allowed, else 0
    map: dict | None  #: ``K_ENUM``: element -> index, else None
    conv: Callable  #: the column's Python converter, for values off the fast path


class EncoderLimits(NamedTuple):
    """The encoder options the kernel's ``Encoder`` reads (its first argument, by position)."""

    max_batch: int  #: max-batch-size
    max_bytes: int  #: max-message-bytes
    old_value: bool  #: output-old-value
    only_updated: bool  #: only-output-updated-columns
    delete_handle_only: bool  #: delete-only-output-handle-key-columns


class EncoderOperations(NamedTuple):
    """The operations the kernel's ``Encoder`` tells apart (its third argument, by position)."""

    create: Operation
    snapshot: Operation
    update: Operation
    delete: Operation


class EncoderMetadataKeys(NamedTuple):
    """The metadata keys the kernel's ``Encoder`` reads (its fourth argument; the MK_* order)."""

    control: str
    payload_subject: str
    payload_version: str
    partition: str
    commit_ts: str
    row_id: str
    only_handle_key: str
    claim_check: str


def _kernel_kind(col: Column, code: int, conv: Callable[[Any], Any]) -> tuple[int, int, int, int, dict | None]:
    """(kind, scale or fsp or binary flag, lo, hi, ENUM index) of a column for the kernel: the same
    split as ``_wire_expr`` (the common types in C, ``conv`` for the rest and for every value the
    fast path does not take)."""
    k = _encode_kernel
    kind = conv.__name__
    if kind == "enc_int":
        lo, hi = _int_bounds(code, col)
        if -(1 << 63) <= lo and hi < (1 << 64):
            return k.K_INT, -1, lo, hi, None
    elif kind == "enc_double":
        return k.K_DOUBLE, -1, 0, 0, None
    elif kind == "enc_float":
        return k.K_FLOAT32, -1, 0, 0, None
    elif kind == "enc_decimal" and col.scale is not None and col.scale >= 0:
        return k.K_DECIMAL, col.scale, 0, 0, None
    elif kind == "enc_date":
        return k.K_DATE, -1, 0, 0, None
    elif kind in ("enc_datetime", "enc_time") and (col.fsp is None or 0 <= col.fsp <= 6):
        return k.K_DATETIME if kind == "enc_datetime" else k.K_TIME, -1 if col.fsp is None else col.fsp, 0, 0, None
    elif kind in ("enc_text", "enc_json"):
        return k.K_STR, -1, 0, 0, None
    elif kind == "enc_enum" and col.elements:
        return k.K_ENUM, -1, 0, 0, {name: i + 1 for i, name in enumerate(col.elements)}
    elif kind == "enc_blob":
        return k.K_BLOB, int(is_binary(col)), 0, 0, None
    elif kind == "enc_binstr":
        return k.K_BINSTR, -1, 0, 0, None
    return k.K_CONV, -1, 0, 0, None


def _kernel_plan(enc: _TableEncoding):
    """The kernel's ``TablePlan`` for ``enc``'s table: per column its name, the constant JSON before
    its value (the bytes orjson writes for the column object up to ``"v":``), its kind and its
    converter."""
    columns = []
    tail = b"null}}"
    for name, code, handle, flags, conv in enc.columns:
        obj = {"t": code, "h": True, "f": flags, "v": None} if handle else {"t": code, "f": flags, "v": None}
        prefix = orjson.dumps({name: obj})[1:-len(tail)]
        kind, param, lo, hi, index = _kernel_kind(enc.table.column(name), code, conv)
        # interned: row dicts whose keys are interned (code constants) then match by identity
        columns.append(PlanColumn(name=_intern(name), prefix=prefix, kind=kind, param=param, lo=lo, hi=hi, map=index,
                                  conv=conv))
    return _encode_kernel.TablePlan(enc.key_suffix, bool(enc.handle), tuple(columns))


_METADATA_KEYS = EncoderMetadataKeys(
    control=META_CONTROL, payload_subject=META_PAYLOAD_SCHEMA_SUBJECT, payload_version=META_PAYLOAD_SCHEMA_VERSION,
    partition=META_PARTITION, commit_ts=META_COMMIT_TS, row_id=EXTRA_ROW_ID, only_handle_key=EXTRA_ONLY_HANDLE_KEY,
    claim_check=EXTRA_CLAIM_CHECK)


class OpenProtocolEncoder:
    """Encode events into open-protocol Kafka messages ``(key, value)``.

    Rows are batched up to ``max-batch-size`` per message within
    ``max-message-bytes``; a DDL or resolved event closes the current batch and
    travels in a message of its own, so the message order keeps the event order.
    """

    def __init__(self, options: Mapping[str, Any] | None = None):
        self.options = _options(options)
        self._max_batch = self.options["max-batch-size"]
        self._max_bytes = self.options["max-message-bytes"]
        self._old_value = self.options["output-old-value"]
        self._only_updated = self.options["only-output-updated-columns"]
        self._delete_handle_only = self.options["delete-only-output-handle-key-columns"]
        self._tables: dict[int, _TableEncoding] = {}
        self._busy = threading.Lock()
        self._kernel = None  # the compiled encoder (_open_protocol_encode.Encoder), made on first use
        self._kernel_store: tuple | None = None  # (store, plan_for, fallback) of the last store

    def encode_records(self, records: Iterable[Record], store=None) -> list[tuple[bytes, bytes]]:
        """OpenCDC records -> messages: exactly ``encode(events.from_records(records, store))``.

        With the compiled kernel, row records in the usual shape go from the record to the
        message bytes with no event per row; every other record is mapped and encoded here, in
        its place. Whatever the kernel leaves undecided (a bad value, a row over
        ``max-message-bytes``) is redone on the Python path, which raises the error it names."""
        records = records if type(records) is list else list(records)
        if _encode_kernel is None or store is None:
            return self.encode(from_records(records, store))
        if not self._busy.acquire(blocking=False):  # see encode
            return OpenProtocolEncoder(self.options).encode_records(records, store)
        try:
            try:
                return self._kernel_encoder().encode(records, *self._kernel_callables(store))
            except MemoryError:
                raise
            except Exception:  # noqa: BLE001 - the kernel does not word errors; the Python path does
                pass
            return self._encode(from_records(records, store))
        finally:
            self._busy.release()

    def _kernel_encoder(self):
        if self._kernel is None or type(self._kernel) is not _encode_kernel.Encoder:
            self._kernel = _encode_kernel.Encoder(
                EncoderLimits(max_batch=self._max_batch, max_bytes=self._max_bytes, old_value=self._old_value,
                              only_updated=self._only_updated, delete_handle_only=self._delete_handle_only),
                Record,
                EncoderOperations(create=Operation.CREATE, snapshot=Operation.SNAPSHOT, update=Operation.UPDATE,
                                  delete=Operation.DELETE),
                _METADATA_KEYS)
        return self._kernel

    def _kernel_callables(self, store) -> tuple[Callable, Callable]:
        """The kernel's two ways back into Python for ``store``: ``plan_for(record)`` (the table
        plan of a row record's schema reference, None without a TiDB table) and
        ``fallback(record)`` (the message parts of any record the kernel does not write)."""
        if self._kernel_store is not None and self._kernel_store[0] is store:
            return self._kernel_store[1:]

        def plan_for(record: Record):
            table = referenced_table(record, store)
            if table is None:
                return None
            enc = self._encoding(table)
            if enc.kernel_plan is None:
                enc.kernel_plan = _kernel_plan(enc)
            return enc.kernel_plan

        def fallback(record: Record) -> tuple[bytes, bytes, bool]:
            return self._parts(from_record(record, store))

        self._kernel_store = (store, plan_for, fallback)
        return plan_for, fallback

    def _parts(self, ev: Event) -> tuple[bytes, bytes, bool]:
        """(key JSON, value JSON, True) of a row, to be batched; (key, value, False) of the message
        a DDL or resolved event travels in alone."""
        t = type(ev)
        if t is RowChange:
            return (*self._row(ev, self._encoding(ev.table)), True)
        if t is DDLEvent:
            return (*self._ddl(ev), False)
        if t is ResolvedEvent:
            return (*self._resolved(ev), False)
        raise UnsupportedEvent(CODEC, None, f"not a TiCDC event: {t.__name__}")

    def encode(self, events: Iterable[Event]) -> list[tuple[bytes, bytes]]:
        # the generated image builders reuse their column objects, so one thread at a time
        # uses this encoder's tables; a concurrent caller gets a private encoder
        if not self._busy.acquire(blocking=False):
            return OpenProtocolEncoder(self.options).encode(events)
        try:
            return self._encode(events)
        finally:
            self._busy.release()

    def _encode(self, events: Iterable[Event]) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        keys: list[bytes] = []  # [length, key JSON, length, key JSON, ...] of the open batch
        values: list[bytes] = []
        rows = size = 0  # rows and framed bytes of the open batch
        max_bytes, max_batch = self._max_bytes, self._max_batch
        pack = _LEN.pack
        last_table = enc = None
        for ev in events:
            t = type(ev)
            if t is RowChange:
                if ev.table is not last_table:
                    last_table = ev.table
                    enc = self._encoding(last_table)
                k, v = self._row(ev, enc)
                klen, vlen = len(k), len(v)
                row_bytes = klen + vlen + _ROW_SLACK
                if row_bytes + 8 + _RECORD_OVERHEAD > max_bytes:
                    raise MessageTooLarge(
                        CODEC, ev.table.collection,
                        f"one row needs {row_bytes + 8 + _RECORD_OVERHEAD} bytes, max-message-bytes is {max_bytes}")
                if rows and (rows >= max_batch or size + _RECORD_OVERHEAD + row_bytes > max_bytes):
                    out.append(_join(keys, values))
                    keys, values, rows, size = [], [], 0, 0
                keys += (pack(klen), k)
                values += (pack(vlen), v)
                rows += 1
                size += row_bytes
                continue
            if keys:
                out.append(_join(keys, values))
                keys, values, rows, size = [], [], 0, 0
            if t is DDLEvent:
                out.append(self._ddl(ev))
            elif t is ResolvedEvent:
                out.append(self._resolved(ev))
            else:
                raise UnsupportedEvent(CODEC, None, f"not a TiCDC event: {t.__name__}")
        if keys:
            out.append(_join(keys, values))
        return out

    def _encoding(self, table: TableSchema) -> _TableEncoding:
        enc = self._tables.get(id(table))
        if enc is None or enc.table is not table:
            enc = _TableEncoding(table)
            if len(self._tables) > 4096:
                self._tables.clear()
            self._tables[id(table)] = enc
        return enc

    def _row(self, ev: RowChange, enc: _TableEncoding) -> tuple[bytes, bytes]:
        extra = ev.extra
        kind = ev.kind
        ts = ev.commit_ts
        if extra and (EXTRA_ROW_ID in extra or EXTRA_ONLY_HANDLE_KEY in extra or EXTRA_CLAIM_CHECK in extra):
            key = self._key_with_extra(ev, enc)
        elif type(ts) is int:
            key = b'{"ts":%d%b' % (ts, enc.key_suffix)
            if kind == INSERT:  # the common case, without the branches below
                return key, orjson.dumps({"u": _image(enc, ev.row, None)})
        else:
            key = b'{"ts":' + str(ts).encode() + enc.key_suffix
        if kind == DELETE:
            names = enc.handle if self._delete_handle_only and enc.handle else None
            value = {"d": _image(enc, ev.row, names)}
        elif kind == INSERT or kind == UPDATE:
            value = {"u": _image(enc, ev.row, None)}
            if kind == UPDATE and self._old_value and ev.old is not None:
                names = None
                if self._only_updated:
                    new = ev.row or {}
                    names = {n for n, v in ev.old.items() if n not in new or new[n] != v}
                value["p"] = _image(enc, ev.old, names)
        else:
            raise UnsupportedEvent(CODEC, ev.table.collection, f"row kind {kind!r} is not insert/update/delete")
        return key, orjson.dumps(value)

    def _key_with_extra(self, ev: RowChange, enc: _TableEncoding) -> bytes:
        table = ev.table
        key: dict[str, Any] = {"ts": ev.commit_ts}
        if table.schema:
            key["scm"] = table.schema
        if table.table:
            key["tbl"] = table.table
        rid = ev.extra.get(EXTRA_ROW_ID)
        if rid:
            try:
                key["rid"] = int(rid)
            except ValueError:
                raise UnrepresentableValue(CODEC, table.collection, EXTRA_ROW_ID, rid, "row id is not an integer") from None
        if table.partition is not None:
            key["ptn"] = table.partition
        key["t"] = TYPE_ROW
        if ev.extra.get(EXTRA_ONLY_HANDLE_KEY) == "true":
            key["ohk"] = True
        ccl = ev.extra.get(EXTRA_CLAIM_CHECK)
        if ccl:
            key["ccl"] = ccl
        return orjson.dumps(key)

    @staticmethod
    def _resolved(ev: ResolvedEvent) -> tuple[bytes, bytes]:
        k = orjson.dumps({"ts": ev.ts, "t": TYPE_RESOLVED})
        return _VERSION_BYTES + _LEN.pack(len(k)) + k, _ZERO_LEN

    def _ddl(self, ev: DDLEvent) -> tuple[bytes, bytes]:
        key: dict[str, Any] = {"ts": ev.commit_ts}
        if ev.schema:
            key["scm"] = ev.schema
        if ev.table_name:
            key["tbl"] = ev.table_name
        key["t"] = TYPE_DDL
        k = orjson.dumps(key)
        v = orjson.dumps({"q": ev.query, "t": ev.ddl_type or 0})
        return _VERSION_BYTES + _LEN.pack(len(k)) + k, _LEN.pack(len(v)) + v


def _image(enc: _TableEncoding, row: dict | None, names) -> dict:
    """One row image as ``{column: {"t", "h"?, "f", "v"}}`` in table order; ``names`` (or None
    for all) limits it to those columns."""
    if row is None:
        raise UnsupportedEvent(CODEC, enc.table.collection, "row image is missing")
    out = {}
    n = 0
    for name, t, h, f, conv in enc.columns:
        if name in row and (names is None or name in names):
            v = row[name]
            if v is not None:
                v = conv(v)
            out[name] = {"t": t, "h": True, "f": f, "v": v} if h else {"t": t, "f": f, "v": v}
            n += 1
    if n != len(row) and names is None:
        unknown = next(k for k in row if k not in enc.by_name)
        raise UnrepresentableValue(CODEC, enc.table.collection, unknown, row[unknown],
                                   "column is not in the table schema")
    return out


def _join(keys: list[bytes], values: list[bytes]) -> tuple[bytes, bytes]:
    """One message from the batch's framed entries (``[length, JSON, length, JSON, ...]``)."""
    return _VERSION_BYTES + b"".join(keys), b"".join(values)
