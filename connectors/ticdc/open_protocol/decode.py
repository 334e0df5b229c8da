"""Open protocol reader: batch-framed Kafka key/value pairs -> TiCDC events.

One ``TableSchema`` per distinct column signature, with its per-column converters, so a batch
of rows of one table costs one dict lookup per row plus one converter call per non-NULL value.
"""

from __future__ import annotations

import binascii
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Iterable, Mapping, NamedTuple

import orjson
from cdcflow import accel
from cdcflow.connectors.ticdc.tidb import (
    b64decode_strict,
    Column,
    TableSchema,
    parse_date,
    parse_datetime,
)

from ..canal_json.schema import parse_time
from ..errors import CodecError, MalformedMessage
from ..events import (
    DELETE,
    INSERT,
    UPDATE,
    DDLEvent,
    Event,
    ResolvedEvent,
    RowChange,
)
from .schema import (
    _BLOB_CODES,
    _INT_CODES,
    _INT_RANGE,
    _LEN,
    _STRING_CODES,
    BATCH_VERSION,
    CODEC,
    EXTRA_CLAIM_CHECK,
    EXTRA_ONLY_HANDLE_KEY,
    EXTRA_ROW_ID,
    FLAG_BINARY,
    FLAG_UNSIGNED,
    TYPE_CODES,
    TYPE_DDL,
    TYPE_RESOLVED,
    TYPE_ROW,
    UnknownTypeCode,
    VersionMismatch,
    column_from_wire,
    go_unquote,
    to_float32,
)

# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------

# The compiled decoder (None: pure Python). It reads messages of table signatures this module
# has seen (a ``RowPlan`` per ``_TableDecoding``) and returns None for anything else, which the
# Python path below then decodes or rejects with the typed error.
_decode_kernel = accel.load("cdcflow.connectors.ticdc.open_protocol._open_protocol_decode")

def _wire_to_native(code: int, flags: int, hint: Column | None) -> Callable[[Any], Any]:
    """Converter for one column's JSON value (never called with None).
    Raises TypeError/ValueError; the caller wraps them with context."""
    if code in _INT_CODES:
        lo, hi = _INT_RANGE[code][1 if flags & FLAG_UNSIGNED else 0]

        def conv_int(v):
            if type(v) is not int or not lo <= v <= hi:
                raise ValueError("not an integer in the column's range")
            return v
        return conv_int
    if code == 13 or code == 16:
        hi = 2155 if code == 13 else (1 << 64) - 1

        def conv_uint(v):
            if type(v) is not int or not 0 <= v <= hi:
                raise ValueError("not a non-negative integer in range")
            return v
        return conv_uint
    if code == 5:
        def conv_double(v):
            t = type(v)
            if t is float:
                return v
            if t is int:
                return float(v)
            raise ValueError("not a number")
        return conv_double
    if code == 4:
        def conv_float(v):
            t = type(v)
            if t is not float and t is not int:
                raise ValueError("not a number")
            return to_float32(v)
        return conv_float
    if code == 246:
        def conv_decimal(v):
            d = Decimal(v)
            if not d.is_finite():
                raise ValueError("not a finite decimal")
            return d
        return conv_decimal
    if code == 10 or code == 14:
        return _text_then(parse_date)
    if code == 7 or code == 12:
        return _text_then(parse_datetime)
    if code == 11:
        return _text_then(parse_time)
    if code == 245:
        return _expect_str
    if code == 247:
        elements = hint.elements if hint is not None and hint.type == "ENUM" else ()
        if not elements:
            return _uint_text
        names = ("",) + tuple(elements)

        def conv_enum(v):
            if type(v) is not int or not 0 <= v < len(names):
                raise ValueError(f"ENUM index is not an integer in 0..{len(names) - 1}")
            return names[v]
        conv_enum.names = names
        return conv_enum
    if code == 248:
        elements = hint.elements if hint is not None and hint.type == "SET" else ()
        if not elements:
            return _uint_text
        members = tuple(elements)
        limit = 1 << len(members)

        def conv_set(v):
            if type(v) is not int or not 0 <= v < limit:
                raise ValueError("SET bitmask is not an integer within the elements")
            return ",".join(e for i, e in enumerate(members) if v >> i & 1)
        return conv_set
    if code in _BLOB_CODES:
        if flags & FLAG_BINARY:
            return _b64_bytes
        return _b64_text
    if code in _STRING_CODES:
        if flags & FLAG_BINARY:
            return _go_bytes
        return _expect_str
    return _json_text


def _text_then(parse: Callable[[str], Any]) -> Callable[[Any], Any]:
    def conv(v):
        if type(v) is not str:
            raise ValueError("not a string")
        return parse(v)
    return conv


def _expect_str(v):
    if type(v) is not str:
        raise ValueError("not a string")
    return v


def _json_text(v):
    """A value of a type code TiCDC passes through: a string as it is, anything else its JSON text."""
    return v if type(v) is str else orjson.dumps(v).decode()


def _uint_text(v):
    """ENUM index / SET bitmask whose elements are unknown: kept as its decimal
    text, the same fallback the canal-json decoder uses."""
    if type(v) is not int or v < 0:
        raise ValueError("not a non-negative integer")
    return str(v)


def _b64_bytes(v):
    if type(v) is not str:
        raise ValueError("not a base64 string")
    return b64decode_strict(v)


def _b64_text(v):
    return _b64_bytes(v).decode("utf-8")


def _go_bytes(v):
    if type(v) is not str:
        raise ValueError("not a string")
    return go_unquote(v)


class _TableDecoding:
    """A table as one column signature shows it, with a converter per column."""

    __slots__ = ("table", "columns", "specs", "kernel_plan", "key_suffix")

    def __init__(self, table: TableSchema, columns: dict[str, tuple[int, int, Callable]]):
        self.table = table
        self.columns = columns  # name -> (type code, flags, converter)
        # the same in the message's column order, for the compiled decoder's plan
        self.specs = tuple((name, t, f, conv) for name, (t, f, conv) in columns.items())
        self.kernel_plan = None  # the compiled decoder's RowPlan, once registered (_register_plan)
        self.key_suffix = b""  # the key JSON after '{"ts":N' that names this table


class OpenProtocolDecoder:
    """Decode one Kafka message (key, value) into its events.

    ``tables`` optionally gives the full column model per ``schema.table`` (a
    mapping or a callable returning a ``TableSchema`` or None), e.g. from a
    schema registry or the travelling schema. With it, ENUM indexes and SET
    bitmasks decode to element names and the event carries that richer table;
    without it they decode to their decimal text (``"2"``, the format has no
    elements; canal-json's decoder does the same) and the table is built from
    type codes and flags alone.
    """

    def __init__(self, tables: Mapping[str, TableSchema] | Callable[[str], TableSchema | None] | None = None):
        if tables is None:
            self._lookup = None
        elif callable(tables):
            self._lookup = tables
        else:
            self._lookup = tables.get
        self._cache: dict[tuple, _TableDecoding] = {}
        # for the compiled decoder: key suffix -> RowPlans of the cached tables it names
        self._plans: dict[bytes, list] = {}
        self._kernel = None  # the compiled decoder (_open_protocol_decode.Decoder), made on first use

    # -- framing -----------------------------------------------------------

    def decode(self, key: bytes, value: bytes | None) -> list[Event]:
        """All events of one message, in order."""
        if _decode_kernel is not None:
            kernel = self._kernel
            if kernel is None or type(kernel) is not _decode_kernel.Decoder:
                kernel = self._kernel = _decode_kernel.Decoder(self._plans, RowChange, ResolvedEvent,
                                                               INSERT, UPDATE, DELETE)
            events = kernel.decode(key, value)
            if events is not None:
                return events
        return self._decode(key, value)

    def _decode(self, key: bytes, value: bytes | None) -> list[Event]:
        """``decode`` on the Python path: every message, and the errors with their position."""
        if key is None:
            raise MalformedMessage(CODEC, None, "open-protocol messages always have a key")
        key = bytes(key) if not isinstance(key, bytes) else key
        value = b"" if value is None else bytes(value) if not isinstance(value, bytes) else value
        if len(key) < 8:
            raise MalformedMessage(CODEC, 0, f"key of {len(key)} bytes is shorter than the 8-byte batch version")
        version = _LEN.unpack_from(key, 0)[0]
        if version != BATCH_VERSION:
            raise VersionMismatch(CODEC, 0, f"key batch version is {version}, expected {BATCH_VERSION}")
        events: list[Event] = []
        kpos, vpos = 8, 0
        klen, vlen = len(key), len(value)
        while kpos < klen:
            kstart, k, kpos = _object_entry(key, kpos, klen, "key")
            mtype = k.get("t")
            ts = k.get("ts")
            if type(ts) is not int or ts < 0:
                raise MalformedMessage(CODEC, f"key byte {kstart}", f"key 'ts' must be an unsigned integer, got {ts!r}")
            if mtype == TYPE_RESOLVED:
                if vpos < vlen:
                    vstart, vdoc, vpos = _frame(value, vpos, vlen, "value")
                    if vdoc:
                        raise MalformedMessage(CODEC, f"value byte {vstart}",
                                               "resolved event value must be empty")
                events.append(ResolvedEvent(ts))
                continue
            if vpos >= vlen:
                raise MalformedMessage(CODEC, f"value byte {vpos}",
                                       f"value has fewer entries than the key (key entry at byte {kstart})")
            vstart, v, vpos = _object_entry(value, vpos, vlen, "value")
            if mtype == TYPE_ROW:
                events.append(self._row(k, v, ts, vstart))
            elif mtype == TYPE_DDL:
                events.append(_ddl(k, v, ts, vstart))
            else:
                raise MalformedMessage(CODEC, f"key byte {kstart}", f"unknown message type t={mtype!r}")
        if vpos < vlen:
            raise MalformedMessage(CODEC, f"value byte {vpos}", "value has more entries than the key")
        return events

    def decode_many(self, messages: Iterable[tuple[bytes, bytes | None]]) -> list[Event]:
        out: list[Event] = []
        for key, value in messages:
            out.extend(self.decode(key, value))
        return out

    # -- rows --------------------------------------------------------------

    def _row(self, k: dict, v: dict, ts: int, vstart: int) -> RowChange:
        scm = k.get("scm", "")
        tbl = k.get("tbl", "")
        if type(scm) is not str or type(tbl) is not str:
            raise MalformedMessage(CODEC, f"value byte {vstart}", "key 'scm'/'tbl' must be strings")
        ptn = k.get("ptn")
        new = v.get("u")
        if new is not None:
            old = v.get("p")
            kind = UPDATE if old is not None else INSERT
            image = new
        else:
            image = v.get("d")
            if image is None:
                raise MalformedMessage(CODEC, f"value byte {vstart}", "row value has none of 'u', 'd'")
            old = None
            kind = DELETE
        if type(image) is not dict or (old is not None and type(old) is not dict):
            raise MalformedMessage(CODEC, f"value byte {vstart}", "row image is not an object")
        part = "u" if kind != DELETE else "d"
        dec = self._cache.get((scm, tbl, ptn, tuple(image)))
        if dec is None:
            dec = self._table_for(scm, tbl, ptn, image, vstart)
        try:
            row = _convert(dec, image, vstart, part)
        except _SignatureChanged:  # same column names, other types/flags
            self._forget(self._cache.pop((scm, tbl, ptn, tuple(image)), None))
            dec = self._table_for(scm, tbl, ptn, image, vstart)
            row = _convert(dec, image, vstart, part, strict=True)
        if dec.kernel_plan is None and _decode_kernel is not None:
            self._register_plan(dec, scm, tbl, ptn)
        old_row = None if old is None else _convert(dec, old, vstart, "p", strict=True)
        extra = None
        if len(k) > 4:  # only rid/ohk/ccl make a key longer than ts, scm, tbl, t (+ptn)
            extra = {}
            rid = k.get("rid")
            if rid:
                extra[EXTRA_ROW_ID] = str(rid)
            if k.get("ohk"):
                extra[EXTRA_ONLY_HANDLE_KEY] = "true"
            ccl = k.get("ccl")
            if ccl:
                extra[EXTRA_CLAIM_CHECK] = str(ccl)
        return RowChange(dec.table, kind, ts, row, old_row, extra if extra else {})

    def _table_for(self, scm: str, tbl: str, ptn, image: dict, vstart: int) -> _TableDecoding:
        sig = (scm, tbl, ptn, tuple(image))
        dec = self._cache.get(sig)
        if dec is not None:
            return dec
        if ptn is not None and type(ptn) is not int:
            raise MalformedMessage(CODEC, f"value byte {vstart}", f"key 'ptn' must be an integer, got {ptn!r}")
        hint = self._lookup(f"{scm}.{tbl}") if self._lookup is not None else None
        columns: list[Column] = []
        convs: dict[str, tuple[int, int, Callable]] = {}
        for name, c in image.items():
            if type(c) is not dict:
                raise MalformedMessage(CODEC, f"value byte {vstart}", f"column {name!r} is not an object")
            code, flags = c.get("t"), c.get("f", 0)
            if type(code) is not int or type(flags) is not int:
                raise MalformedMessage(CODEC, f"value byte {vstart}",
                                       f"column {name!r}: 't' and 'f' must be integers")
            if not 0 <= code <= 255:  # TiCDC's column type is one byte
                raise UnknownTypeCode(CODEC, f"value byte {vstart}, column {name}",
                                      f"MySQL type code {code} is not a byte ({scm}.{tbl})")
            hint_col = None
            if hint is not None and name in hint.index:
                hint_col = hint.column(name)
            columns.append(column_from_wire(name, code, flags, c.get("h") is True))
            convs[name] = (code, flags, _wire_to_native(code, flags, hint_col))
        table = TableSchema(scm, tbl, tuple(columns), partition=ptn)
        if hint is not None and _hint_fits(hint, table, ptn):
            table = hint
        dec = _TableDecoding(table, convs)
        if len(self._cache) > 4096:
            self._cache.clear()
            self._plans.clear()
        self._cache[sig] = dec
        return dec

    # -- the compiled decoder's plans mirror the cache ----------------------

    def _register_plan(self, dec: _TableDecoding, scm: str, tbl: str, ptn) -> None:
        """Let the compiled decoder read rows of ``dec``'s signature: keyed by the key JSON after
        the ts as TiCDC writes it for this table (Go's field order, empty names omitted)."""
        head: dict[str, Any] = {}
        if scm:
            head["scm"] = scm
        if tbl:
            head["tbl"] = tbl
        if ptn is not None:
            head["ptn"] = ptn
        head["t"] = TYPE_ROW
        dec.key_suffix = b"," + orjson.dumps(head)[1:]
        dec.kernel_plan = _decode_plan(dec)
        self._plans.setdefault(dec.key_suffix, []).append(dec.kernel_plan)

    def _forget(self, dec: _TableDecoding | None) -> None:
        """Drop a table signature the cache dropped (its columns changed type or flags)."""
        if dec is not None and dec.kernel_plan is not None:
            plans = self._plans.get(dec.key_suffix, [])
            if dec.kernel_plan in plans:
                plans.remove(dec.kernel_plan)


class ColumnSpec(NamedTuple):
    """One column of the compiled decoder's ``RowPlan`` (``_open_protocol_decode.c``
    ``column_plan_init``, C struct ``ColumnPlan``), read by position."""

    lead: bytes  #: ``"name":{"t":CODE,`` as TiCDC writes it
    tail: bytes  #: ``"f":FLAGS,"v":`` (an optional ``"h":true,`` may come between the two)
    name: str
    kind: int  #: a ``K_*`` value kind the kernel reads itself, or ``K_CONV``
    lo: int  #: ``K_INT``: the smallest value allowed, else 0
    hi: int  #: ``K_INT``: the largest value allowed, else 0
    conv: Callable  #: the column's Python converter, for values off the kind's fast path
    aux: tuple | None  #: ``K_ENUM_NAME``: the element names (``""`` at 0), else None


def _decode_plan(dec: _TableDecoding):
    """The compiled decoder's RowPlan for one table signature: per column the exact bytes
    around its value (``"name":{"t":CODE,`` and ``"f":FLAGS,"v":``), the value kind with its
    bounds, and the Python converter the kernel calls for values off the kind's fast path."""
    k = _decode_kernel
    specs = []
    for name, t, f, conv in dec.specs:
        lo = hi = 0
        aux = None
        if t in _INT_CODES or t == 13 or t == 16:
            kind = k.K_INT
            lo, hi = (_INT_RANGE[t][1 if f & FLAG_UNSIGNED else 0] if t in _INT_CODES
                      else (0, 2155) if t == 13 else (0, (1 << 64) - 1))
        elif t == 5 or t == 4:
            kind = k.K_DOUBLE if t == 5 else k.K_FLOAT
        elif t == 246:
            kind = k.K_DECIMAL
        elif t == 10:
            kind = k.K_DATE
        elif t == 7 or t == 12:
            kind = k.K_DATETIME
        elif t == 11:
            kind = k.K_TIME
        elif conv is _expect_str:
            kind = k.K_STR
        elif conv is _go_bytes:
            kind = k.K_GO_BYTES
        elif conv is _b64_bytes:
            kind = k.K_B64_BYTES
        elif conv is _b64_text:
            kind = k.K_B64_TEXT
        elif conv is _uint_text:
            kind = k.K_UINT_TEXT
        elif getattr(conv, "names", None) is not None:  # conv_enum with the hint's elements
            kind, aux = k.K_ENUM_NAME, conv.names
        else:  # SET with elements: the converter does it
            kind = k.K_CONV
        specs.append(ColumnSpec(lead=orjson.dumps(name) + b':{"t":%d,' % t, tail=b'"f":%d,"v":' % f, name=name,
                                kind=kind, lo=lo, hi=hi, conv=conv, aux=aux))
    return k.RowPlan(dec.table, tuple(specs))


def _hint_fits(hint: TableSchema, wire: TableSchema, ptn) -> bool:
    """The hinted table replaces the wire one only when it describes the same
    columns with the same type codes (otherwise the schema moved on)."""
    if len(hint.columns) != len(wire.columns) or hint.partition != ptn:
        return False
    for col in wire.columns:
        if col.name not in hint.index:
            return False
        h = hint.column(col.name)
        if TYPE_CODES.get(h.type) != TYPE_CODES.get(col.type, -1) and not (
                col.type == "VARCHAR" and h.type in ("VARCHAR", "VARBINARY")):
            return False
    return True


class _SignatureChanged(Exception):
    """A column's type code or flags differ from the cached table's."""


def _convert(dec: _TableDecoding, image: dict, vstart: int, part: str, strict: bool = False) -> dict:
    convs = dec.columns
    out = {}
    for name, c in image.items():
        spec = convs.get(name)
        try:
            v = c["v"]
            if spec is None or c["t"] != spec[0] or c.get("f", 0) != spec[1]:
                if not strict and spec is not None:
                    raise _SignatureChanged
                raise MalformedMessage(
                    CODEC, f"value byte {vstart}, {part}.{name}",
                    f"column {name!r} does not match the row's columns ({dec.table.collection})")
            out[name] = None if v is None else spec[2](v)
        except (CodecError, _SignatureChanged):
            raise
        except (KeyError, TypeError) as e:
            raise MalformedMessage(CODEC, f"value byte {vstart}, {part}.{name}",
                                   f"column {name!r} is not {{t, f, v}} ({dec.table.collection}): {e!r}") from None
        except (ValueError, InvalidOperation, binascii.Error, UnicodeDecodeError, IndexError, OverflowError) as e:
            raise MalformedMessage(CODEC, f"value byte {vstart}, {part}.{name}",
                                   f"bad value {c.get('v')!r} for type code {c.get('t')} "
                                   f"({dec.table.collection}): {e}") from None
    return out


def _ddl(k: dict, v: dict, ts: int, vstart: int) -> DDLEvent:
    query = v.get("q")
    ddl_type = v.get("t", 0)
    if type(query) is not str or type(ddl_type) is not int:
        raise MalformedMessage(CODEC, f"value byte {vstart}", "DDL value must be {\"q\": string, \"t\": integer}")
    scm, tbl = k.get("scm", ""), k.get("tbl", "")
    if type(scm) is not str or type(tbl) is not str:
        raise MalformedMessage(CODEC, f"value byte {vstart}", "key 'scm'/'tbl' must be strings")
    return DDLEvent(scm, tbl, query, ts, ddl_type or None)


def _frame(buf: bytes, pos: int, end: int, what: str) -> tuple[int, bytes, int]:
    """One ``[length][payload]`` entry at ``pos`` -> (payload start, payload, next pos)."""
    if pos + 8 > end:
        raise MalformedMessage(CODEC, f"{what} byte {pos}",
                               f"truncated {what}: {end - pos} bytes left where an 8-byte length belongs")
    n = _LEN.unpack_from(buf, pos)[0]
    start = pos + 8
    if n > end - start:
        raise MalformedMessage(CODEC, f"{what} byte {pos}",
                               f"{what} entry length {n} exceeds the {end - start} bytes left")
    return start, buf[start:start + n], start + n


def _object_entry(buf: bytes, pos: int, end: int, what: str) -> tuple[int, dict, int]:
    """The JSON object of the ``[length][payload]`` entry at ``pos`` -> (payload start, object, next pos).

    The in-bounds case is checked inline; ``_frame`` words the error otherwise."""
    start = pos + 8
    if start > end or (stop := start + _LEN.unpack_from(buf, pos)[0]) > end:
        _frame(buf, pos, end, what)  # raises the error naming the byte
    try:
        obj = orjson.loads(buf[start:stop])
    except orjson.JSONDecodeError as e:
        raise MalformedMessage(CODEC, f"{what} byte {start}", f"{what} JSON is invalid: {e}") from None
    if type(obj) is not dict:
        raise MalformedMessage(CODEC, f"{what} byte {start}", f"{what} JSON is not an object")
    return start, obj, stop


