"""Cross-format conversion: any decoded TiCDC format encoded as any other.

Each format carries a different part of the column model (see
``docs/codec-cross-format.md``). ``adapt_events`` applies the documented
fallbacks where the target needs a fact the source did not carry, and raises
``UnrepresentableValue`` (naming table, column and value) where no fallback
keeps the value: values never change silently.

``codec_for`` gives every format the same two-method shape —
``encode(events) -> messages`` and ``decode(messages) -> events`` — so a
transcoder (or a test) can run any pair without knowing the codecs' own APIs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping

from cdcflow.connectors.ticdc.tidb import Column, TableSchema

from .errors import UnrepresentableValue, UnsupportedEvent
from .events import Event, RowChange
from .open_protocol.schema import float32_short, to_float32

AVRO, CANAL_JSON, CSV, OPEN_PROTOCOL = "avro", "canal-json", "csv", "open-protocol"
FORMATS = (AVRO, CANAL_JSON, CSV, OPEN_PROTOCOL)

NAME_FORMATS = frozenset({AVRO, CSV})
"""Formats that write ENUM/SET as element names (canal-json and open protocol write index/bitmask)."""
FLOAT32_FORMATS = frozenset({AVRO, OPEN_PROTOCOL})
"""Formats that store FLOAT as a 32-bit float (canal-json and CSV write its decimal digits)."""

BIT_WIDTH_FALLBACK = 64
DECIMAL_PRECISION_FALLBACK = 65


# --------------------------------------------------------------------------- fallbacks

def adapt_table(table: TableSchema, target: str, rows: Iterable[dict | None] = ()) -> TableSchema:
    """The table with the facts ``target`` needs filled in by the documented fallbacks:

    - BIT width unknown -> 64 (the only width that holds every value);
    - DECIMAL scale unknown -> the scale of the values in ``rows`` when they all
      share one (TiCDC writes every value with the column's scale), precision
      unknown -> 65 (TiDB's maximum);
    - fsp unknown stays unknown: every encoder then writes the value's own
      microseconds (6 digits when non-zero, none otherwise).

    ENUM/SET elements cannot be invented; see ``adapt_events``.
    """
    if target not in FORMATS:
        raise ValueError(f"unknown format {target!r}; expected one of {FORMATS}")
    todo = [i for i, c in enumerate(table.columns)
            if (c.type == "BIT" and c.length is None) or (c.type == "DECIMAL" and (c.scale is None or c.precision is None))]
    if not todo:
        return table
    rows = [r for r in rows if r]
    cols = list(table.columns)
    for i in todo:
        c = cols[i]
        if c.type == "BIT":
            cols[i] = dataclasses.replace(c, length=BIT_WIDTH_FALLBACK)
            continue
        scale = c.scale
        if scale is None:
            scales = {-v.as_tuple().exponent for r in rows if (v := r.get(c.name)) is not None}
            if len(scales) == 1:
                scale = max(scales.pop(), 0)
        precision = c.precision
        if precision is None and scale is not None:
            precision = DECIMAL_PRECISION_FALLBACK
        cols[i] = dataclasses.replace(c, precision=precision, scale=scale)
    return dataclasses.replace(table, columns=tuple(cols), index={})


def _fixers(table: TableSchema, target: str) -> list[tuple[str, Column, str]]:
    """Columns whose values need a look before ``target`` writes them."""
    out = []
    for c in table.columns:
        if c.type in ("ENUM", "SET") and not c.elements and target in NAME_FORMATS:
            out.append((c.name, c, "index-text"))
        elif c.type == "FLOAT" and target in FLOAT32_FORMATS:
            out.append((c.name, c, "float32"))
    return out


def _fix_value(table: TableSchema, col: Column, how: str, value: Any, target: str) -> Any:
    if value is None:
        return None
    if how == "float32":
        if type(value) is float:
            f32 = to_float32(value) if abs(value) <= 3.4028234663852886e38 else value
            # A FLOAT read as decimal digits (canal-json, CSV) is the float32 those digits name
            # when they are that float32's shortest form, e.g. "0.1" -> 0.10000000149011612.
            if f32 != value and float32_short(f32) == value:
                return f32
        return value  # exact already, or the encoder refuses it with UnrepresentableValue
    # ENUM/SET whose elements the source did not carry: the value is its index/bitmask text
    if type(value) is str and value.isdigit() and value.isascii():
        if int(value) == 0:
            return ""  # index 0 is '' and bitmask 0 the empty set, with or without elements
        raise UnrepresentableValue(
            target, table.collection, col.name, value,
            f"{col.type} elements are unknown (the source format carries only the "
            f"{'index' if col.type == 'ENUM' else 'bitmask'}) and {target} writes element names")
    return value


def adapt_events(events: Iterable[Event], target: str) -> list[Event]:
    """Events ready for ``target``'s encoder: tables completed by ``adapt_table``,
    FLOAT digits mapped to their float32 for 32-bit targets, ENUM/SET index text
    refused for name-writing targets (index 0 / bitmask 0 become ``''``).
    Input events are not modified."""
    events = list(events)
    by_table: dict[int, list[RowChange]] = {}
    for ev in events:
        if type(ev) is RowChange:
            by_table.setdefault(id(ev.table), []).append(ev)
    plans: dict[int, tuple[TableSchema, list]] = {}
    for tid, evs in by_table.items():
        table = evs[0].table
        rows = [r for ev in evs for r in (ev.row, ev.old)]
        adapted = adapt_table(table, target, rows)
        plans[tid] = (adapted, _fixers(adapted, target))
    out: list[Event] = []
    for ev in events:
        if type(ev) is not RowChange:
            out.append(ev)
            continue
        table, fixers = plans[id(ev.table)]
        if table is ev.table and not fixers:
            out.append(ev)
            continue
        row, old = ev.row, ev.old
        if fixers:
            row = _fix_row(table, row, fixers, target)
            old = _fix_row(table, old, fixers, target)
        out.append(RowChange(table, ev.kind, ev.commit_ts, row, old, dict(ev.extra)))
    return out


_NAME_CHECKS: dict[tuple[int, str], tuple[TableSchema, tuple]] = {}


def names_row(table: TableSchema, row: dict | None, target: str) -> dict | None:
    """``row`` as a name-writing ``target`` (Avro, CSV) may write it: the ENUM/SET index text of a
    column whose members the source did not carry is refused with ``UnrepresentableValue``, index 0 /
    bitmask 0 become ``''`` — the rule ``adapt_events`` applies. Destinations write decoded records
    rather than transcode, so they call this per row; the check is cached per table object and costs
    a dict lookup for tables without such columns."""
    fixers = _name_fixers(table, target)
    return _fix_row(table, row, fixers, target) if fixers else row


def names_rows(table: TableSchema, tables: list[TableSchema] | None, rows: list, target: str) -> list:
    """``names_row`` over a batch of ``table``'s rows (or of ``tables``, one per row): the list itself
    when the table has no column to check, so the common batch costs one lookup, not one per row."""
    if tables is None:
        fixers = _name_fixers(table, target)
        return [_fix_row(table, r, fixers, target) for r in rows] if fixers else rows
    return [names_row(t, r, target) for t, r in zip(tables, rows)]


def _name_fixers(table: TableSchema, target: str) -> tuple:
    key = (id(table), target)
    hit = _NAME_CHECKS.get(key)
    if hit is None or hit[0] is not table:
        if len(_NAME_CHECKS) > 4096:
            _NAME_CHECKS.clear()
        fixers = tuple(f for f in _fixers(table, target) if f[2] == "index-text") if target in NAME_FORMATS else ()
        hit = _NAME_CHECKS[key] = (table, fixers)
    return hit[1]


def names_event(ev: RowChange, target: str) -> RowChange:
    """``names_row`` for both images of one event (the event itself when nothing changes)."""
    row, old = names_row(ev.table, ev.row, target), names_row(ev.table, ev.old, target)
    if row is ev.row and old is ev.old:
        return ev
    return RowChange(ev.table, ev.kind, ev.commit_ts, row, old, dict(ev.extra))


def _fix_row(table: TableSchema, row: dict | None, fixers, target: str) -> dict | None:
    if row is None:
        return None
    new = None
    for name, col, how in fixers:
        if name in row:
            v = row[name]
            w = _fix_value(table, col, how, v, target)
            if w is not v:
                if new is None:
                    new = dict(row)
                new[name] = w
    return row if new is None else new


# --------------------------------------------------------------------------- one shape for every codec

class FormatCodec:
    """``encode(events) -> list[message]``, ``decode(messages) -> list[Event]``.

    Messages: ``(key, value)`` for Avro and open protocol, ``bytes`` for
    canal-json, ``(TableSchema, bytes)`` for CSV (a CSV file has no types: the
    table travels beside it, as TiCDC's schema file does).
    """

    name: str

    def encode(self, events: Iterable[Event]) -> list:
        raise NotImplementedError

    def decode(self, messages: Iterable) -> list[Event]:
        raise NotImplementedError


class OpenProtocolCodec(FormatCodec):
    name = OPEN_PROTOCOL

    def __init__(self, options: Mapping[str, Any] | None = None, tables=None):
        from .open_protocol import OpenProtocolDecoder, OpenProtocolEncoder

        self._encoder = OpenProtocolEncoder(options)
        self._decoder = OpenProtocolDecoder(tables)

    def encode(self, events):
        return self._encoder.encode(adapt_events(events, OPEN_PROTOCOL))

    def decode(self, messages):
        return self._decoder.decode_many(messages)


class CanalJsonCodec(FormatCodec):
    name = CANAL_JSON

    def __init__(self, options: Mapping[str, Any] | None = None, tables=None, now_ms=None):
        from .canal_json import CanalJsonDecoder, CanalJsonEncoder, CanalJsonOptions

        self._encoder = CanalJsonEncoder(CanalJsonOptions.from_config(options or {}), now_ms)
        self._decoder = CanalJsonDecoder(tables)

    def encode(self, events):
        return self._encoder.encode_many(adapt_events(events, CANAL_JSON))

    def decode(self, messages):
        return self._decoder.decode_many(messages)


class AvroCodec(FormatCodec):
    """Avro needs one topic per table (TiCDC's rule); the topic is the table's
    ``schema.table`` unless ``topic`` is given. Without ``avro-enable-watermark``
    DDL and resolved events produce no message, as in TiCDC."""

    name = AVRO

    def __init__(self, options: Mapping[str, Any] | None, registry, topic: str | None = None):
        from .avro import AvroDecoder, AvroEncoder, AvroOptions

        opts = AvroOptions.from_config(dict(options or {}))
        self._encoder = AvroEncoder(opts, registry)
        self._decoder = AvroDecoder(opts, registry)
        self._topic = topic

    def encode(self, events):
        out = []
        for ev in adapt_events(events, AVRO):
            topic = self._topic or (ev.table.collection if type(ev) is RowChange else "cdcflow")
            msg = self._encoder.encode_one(ev, topic)
            if msg is not None:
                out.append(msg)
        return out

    def decode(self, messages):
        return self._decoder.decode_many(messages)


class CsvCodec(FormatCodec):
    """Consecutive rows of one table become one CSV chunk ``(table, bytes)``.
    CSV carries rows only: a DDL or resolved event raises ``UnsupportedEvent``
    (the storage sink writes schema files and the checkpoint file instead)."""

    name = CSV

    def __init__(self, options: Mapping[str, Any] | None = None):
        from .csv import CsvOptions

        self._options = CsvOptions.from_config(options or {})

    def encode(self, events):
        from .csv import encode_rows

        out = []
        run: list[RowChange] = []
        for ev in adapt_events(events, CSV):
            if type(ev) is not RowChange:
                raise UnsupportedEvent(CSV, None, f"CSV data files hold rows only, not {type(ev).__name__}")
            if run and ev.table is not run[0].table:
                out.append((run[0].table, encode_rows(run, run[0].table, self._options)))
                run = []
            run.append(ev)
        if run:
            out.append((run[0].table, encode_rows(run, run[0].table, self._options)))
        return out

    def decode(self, messages):
        from .csv import CsvDecoder

        out: list[Event] = []
        for table, data in messages:
            out.extend(CsvDecoder(table, self._options).decode(data))
        return out


def codec_for(fmt: str, options: Mapping[str, Any] | None = None, *, registry=None, tables=None,
              topic: str | None = None, now_ms=None) -> FormatCodec:
    """The ``FormatCodec`` of ``fmt`` (one of ``FORMATS``). ``registry`` is required for
    Avro; ``tables`` (``schema.table`` -> TableSchema) enriches canal-json and open
    protocol decoding."""
    if fmt == OPEN_PROTOCOL:
        return OpenProtocolCodec(options, tables)
    if fmt == CANAL_JSON:
        return CanalJsonCodec(options, tables, now_ms)
    if fmt == AVRO:
        if registry is None:
            raise ValueError("the avro format needs a schema registry")
        return AvroCodec(options, registry, topic)
    if fmt == CSV:
        return CsvCodec(options)
    raise ValueError(f"unknown format {fmt!r}; expected one of {FORMATS}")


def transcode(messages: Iterable, source: FormatCodec, target: FormatCodec) -> list:
    """Decode with ``source``, encode with ``target`` (fallbacks applied by the target)."""
    return target.encode(source.decode(messages))


__all__ = [
    "AVRO", "CANAL_JSON", "CSV", "OPEN_PROTOCOL", "FORMATS", "NAME_FORMATS", "FLOAT32_FORMATS",
    "adapt_table", "adapt_events", "FormatCodec", "AvroCodec", "CanalJsonCodec", "CsvCodec",
    "OpenProtocolCodec", "codec_for", "transcode",
]
