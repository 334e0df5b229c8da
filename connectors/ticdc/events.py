"""What every TiCDC codec decodes to and encodes from.

Codecs turn bytes into ``RowChange`` / ``DDLEvent`` / ``ResolvedEvent`` and back;
``to_record`` / ``from_record`` map those to and from OpenCDC records, so the
mapping to OpenCDC exists once for all formats. (Contract fixed here; the
mapping functions are implemented in this module.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import compress as _compress
from itertools import count as _count
from itertools import islice as _islice
from itertools import repeat as _repeat
from operator import attrgetter
from operator import ne as _ne
from typing import NamedTuple

from cdcflow.connectors.ticdc.tidb import TableSchema

INSERT, UPDATE, DELETE = "insert", "update", "delete"


@dataclass(slots=True)
class RowChange:
    """One DML row. ``row`` is the new image (insert/update) or the deleted row
    (delete; may hold only the handle key when the format carries only that);
    ``old`` is the pre-image of an update when the format has one.
    ``ts_estimated``: ``commit_ts`` is a guess that may lie above the row's real one (an Avro
    DELETE read before anything of its table, see codec-avro.md): usable as a date, never as a
    replay mark."""

    table: TableSchema
    kind: str
    commit_ts: int
    row: dict | None
    old: dict | None = None
    extra: dict[str, str] = field(default_factory=dict)
    ts_estimated: bool = False


@dataclass(slots=True)
class DDLEvent:
    """A schema change. ``ddl_type`` is TiDB's DDL action code when known.
    ``table`` is the table's schema after the DDL when the format carries it."""

    schema: str
    table_name: str
    query: str
    commit_ts: int
    ddl_type: int | None = None
    table: TableSchema | None = None
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class ResolvedEvent:
    """Resolved ts (open protocol) or watermark (canal-json): no later row on this
    partition has a smaller commit ts."""

    ts: int
    extra: dict[str, str] = field(default_factory=dict)


Event = RowChange | DDLEvent | ResolvedEvent


# ---------------------------------------------------------------------------
# Mapping to and from OpenCDC records (the one place for every TiCDC format).
# Shape of the records is documented in docs/ticdc-records.md.
# ---------------------------------------------------------------------------
from cdcflow.errors import CdcflowError, RecordError  # noqa: E402
from cdcflow.record import (  # noqa: E402
    META_COLLECTION,
    META_CONTROL,
    META_CREATED_AT,
    META_PAYLOAD_SCHEMA_SUBJECT,
    META_PAYLOAD_SCHEMA_VERSION,
    Operation,
    Record,
)

META_COMMIT_TS = "ticdc.commit-ts"
META_SCHEMA = "ticdc.schema"
META_TABLE = "ticdc.table"
META_PARTITION = "ticdc.partition"
META_DDL_TYPE = "ticdc.ddl-type"
META_RESOLVED_TS = "ticdc.resolved-ts"
# A DDL record's payload is the statement, not a row, so the table schema after
# the DDL is referenced by its own keys (the opencdc.payload.schema.* keys would
# be replaced by whoever serialises the payload).
META_TABLE_SCHEMA_SUBJECT = "ticdc.table.schema.subject"
META_TABLE_SCHEMA_VERSION = "ticdc.table.schema.version"
# ``extra`` keys of rows a message carries only partly (canal-json, open protocol): a
# connector fetches the full row by handle key or from the claim-check storage.
META_ONLY_HANDLE_KEY = "ticdc.only-handle-key"
META_CLAIM_CHECK_LOCATION = "ticdc.claim-check-location"
CONTROL_DDL = "ddl"
CONTROL_RESOLVED = "resolved"
RESERVED_METADATA = frozenset({
    META_COMMIT_TS, META_SCHEMA, META_TABLE, META_PARTITION, META_DDL_TYPE, META_RESOLVED_TS,
    META_TABLE_SCHEMA_SUBJECT, META_TABLE_SCHEMA_VERSION,
})
"""``ticdc.*`` keys the mapping owns; every other ``ticdc.*`` key is an event's ``extra``."""

_KIND_OP = {INSERT: Operation.CREATE, UPDATE: Operation.UPDATE, DELETE: Operation.DELETE}
_CREATE, _UPDATE, _DELETE = Operation.CREATE, Operation.UPDATE, Operation.DELETE
_OP_KIND = {Operation.CREATE: INSERT, Operation.SNAPSHOT: INSERT, Operation.UPDATE: UPDATE,
            Operation.DELETE: DELETE}


def created_at_ns(commit_ts: int) -> str:
    """``opencdc.createdAt``: the TSO's physical milliseconds in nanoseconds, as text."""
    return str((commit_ts >> 18) * 1_000_000)


def to_record(event: Event, position: bytes, store=None) -> Record:
    """Map one decoded event to an OpenCDC record.

    ``store`` (a ``cdcflow.schemas.SchemaStore``) receives the table's column
    model so it travels with the record; None leaves the record without it.
    """
    if type(event) is RowChange:
        return to_records((event,), (position,), store)[0]
    if type(event) is DDLEvent:
        return _ddl_record(event, position, store)
    if type(event) is ResolvedEvent:
        return _resolved_record(event, position)
    raise TypeError(f"not a TiCDC event: {type(event).__name__}")


def to_records(events, positions, store=None) -> list[Record]:
    """Batch form of ``to_record``; ``positions`` pairs with ``events``. Rows look their
    table's template up once per run of rows of the same table, and share the commit ts texts
    with the row before when it has the same commit ts (rows of one transaction)."""
    out: list[Record] = []
    append = out.append
    last_table = template = names = last_ts = None
    created = ts_text = ""
    ops = _KIND_OP
    for ev, position in zip(events, positions):
        if type(ev) is not RowChange:
            append(to_record(ev, position, store))
            continue
        if ev.table is not last_table:
            last_table = ev.table
            template, names = _row_template(last_table, store)
        md = template.copy()
        commit_ts = ev.commit_ts
        if commit_ts != last_ts:
            last_ts = commit_ts
            created, ts_text = str((commit_ts >> 18) * 1_000_000), str(commit_ts)
        md[META_CREATED_AT] = created
        md[META_COMMIT_TS] = ts_text
        if ev.extra:
            md.update(ev.extra)
        row = ev.row
        key = None
        if names and row is not None:
            try:
                key = {names[0]: row[names[0]]} if len(names) == 1 else {n: row[n] for n in names}
            except KeyError:  # row lacks a key column (should not happen); key is then partial
                key = {n: row[n] for n in names if n in row} or None
        op = ops.get(ev.kind)
        if op is _CREATE:
            append(Record(position, op, md, key, None, row))
        elif op is _UPDATE:
            append(Record(position, op, md, key, ev.old, row))
        elif op is _DELETE:
            append(Record(position, op, md, key, row, None))
        else:
            raise ValueError(f"RowChange.kind must be insert/update/delete, not {ev.kind!r}")
    return out


def rows_to_records(table: TableSchema, store, positions: Iterable[bytes], operations: Iterable[Operation] | None,
                    commit_ts: Iterable[int] | None, columns: Sequence[Sequence]) -> list[Record]:
    """Column-wise rows of one table -> records, mapped exactly as ``to_records`` maps their
    ``RowChange`` (same metadata, key and before/after), without making the RowChanges.

    ``columns`` holds one value sequence per table column (table order, equal lengths);
    ``operations`` is None when every row is an insert (CREATE), else CREATE/UPDATE/DELETE per
    row (an UPDATE has no old image here); ``commit_ts`` None means 0 for every row. For
    decoders that read a whole table's rows at once (CSV files): no event object per row. This is
    the reference of the compiled builder (``_csv.c`` ``records``, plan: ``records_plan``)."""
    template, key_names = _row_template(table, store)
    names = tuple(c.name for c in table.columns)
    index = {n: i for i, n in enumerate(names)}  # a repeated name: the last column, as in the row dict
    key_at = tuple((n, index[n]) for n in key_names)
    ops = _repeat(Operation.CREATE) if operations is None else operations
    ts_of = _repeat(0) if commit_ts is None else commit_ts
    rows = zip(*columns) if columns else _repeat(())
    copy, delete = template.copy, Operation.DELETE
    out: list[Record] = []
    append = out.append
    last = None
    for position, op, ts, values in zip(positions, ops, ts_of, rows):
        if ts != last:  # rows of one transaction (or a file without commit ts) share the texts
            last = ts
            created, ts_text = str((ts >> 18) * 1_000_000), str(ts)
        md = copy()
        md[META_CREATED_AT] = created
        md[META_COMMIT_TS] = ts_text
        row = dict(zip(names, values))
        key = {n: values[i] for n, i in key_at} if key_at else None
        append(Record(position, op, md, key, row if op is delete else None, None if op is delete else row))
    return out


def rows_to_dicts(table: TableSchema, columns: Sequence[Sequence]) -> list[dict]:
    """Column-wise rows of one table -> one row dict per row (the ``RowChange.row`` form)."""
    names = tuple(c.name for c in table.columns)
    return [dict(zip(names, values)) for values in zip(*columns)]


_RECORDS_PLANS: dict[tuple[int, int], tuple] = {}


class RecordsPlan(NamedTuple):
    """The compiled record builder's plan (``_csv.c`` ``records``, C struct ``records_plan``), by position."""

    record: type  #: the Record class the builder makes
    template: dict  #: the metadata every row record of the table carries (commit-ts slots empty)
    names: tuple  #: the table's column names, in order
    key_indexes: tuple  #: the handle-key columns' indexes among ``names`` (empty: no key)
    created_key: str  #: the metadata key of the row's createdAt (set per commit ts)
    ts_key: str  #: the metadata key of the row's commit ts
    create: Operation  #: the operation of an insert
    delete: Operation  #: the operation of a delete


def records_plan(table: TableSchema, store) -> RecordsPlan:
    """The compiled record builder's plan (``_csv.c`` ``records``) for ``rows_to_records`` of
    ``table``: what ``rows_to_records`` puts in each record
    (Record type, metadata template, column names, the key's column indexes, the two metadata
    keys it sets per commit ts, the CREATE and DELETE operations), built once per (table, store)."""
    cache_key = (id(table), id(store))
    hit = _RECORDS_PLANS.get(cache_key)
    if hit is not None and hit[0] is table and hit[1] is store:
        return hit[2]
    template, key_names = _row_template(table, store)
    names = tuple(c.name for c in table.columns)
    index = {n: i for i, n in enumerate(names)}  # a repeated name: the last column, as in the dict display
    plan = RecordsPlan(record=Record, template=template, names=names,
                       key_indexes=tuple(index[n] for n in key_names), created_key=META_CREATED_AT,
                       ts_key=META_COMMIT_TS, create=Operation.CREATE, delete=Operation.DELETE)
    if len(_RECORDS_PLANS) > 1024:
        _RECORDS_PLANS.clear()
    _RECORDS_PLANS[cache_key] = (table, store, plan)
    return plan


_ROW_TEMPLATES: dict[tuple[int, int], tuple[TableSchema, object, dict, tuple[str, ...]]] = {}


def _row_template(table: TableSchema, store) -> tuple[dict, tuple[str, ...]]:
    """Per (table object, store): the metadata every row record of the table carries (commit
    ts slots in place, schema references attached) and the handle-key names, built once."""
    cache_key = (id(table), id(store))
    hit = _ROW_TEMPLATES.get(cache_key)
    if hit is not None and hit[0] is table and hit[1] is store:
        return hit[2], hit[3]
    md = {META_COLLECTION: table.collection, META_CREATED_AT: "", META_COMMIT_TS: "",
          META_SCHEMA: table.schema, META_TABLE: table.table}
    if table.partition is not None:
        md[META_PARTITION] = str(table.partition)
    if store is not None:
        scratch = Record(b"", Operation.CREATE, md, None, None, None)
        _schema.attach_table(scratch, table, store)
        md = scratch.metadata
    names = _handle_names(table)
    if len(_ROW_TEMPLATES) > 1024:
        _ROW_TEMPLATES.clear()
    _ROW_TEMPLATES[cache_key] = (table, store, md, names)
    return md, names


_HANDLE_NAMES: dict[int, tuple[TableSchema, tuple[str, ...]]] = {}


def _handle_names(table: TableSchema) -> tuple[str, ...]:
    """Handle-key column names, cached per table object (one dict lookup per row)."""
    hit = _HANDLE_NAMES.get(id(table))
    if hit is not None and hit[0] is table:
        return hit[1]
    names = tuple(c.name for c in table.columns if c.handle_key)
    if len(_HANDLE_NAMES) > 4096:
        _HANDLE_NAMES.clear()
    _HANDLE_NAMES[id(table)] = (table, names)
    return names


def _ddl_record(ev: DDLEvent, position: bytes, store) -> Record:
    md = {
        META_CONTROL: CONTROL_DDL,
        META_COLLECTION: f"{ev.schema}.{ev.table_name}" if ev.table_name else ev.schema,
        META_CREATED_AT: created_at_ns(ev.commit_ts),
        META_COMMIT_TS: str(ev.commit_ts),
        META_SCHEMA: ev.schema,
        META_TABLE: ev.table_name,
    }
    if ev.ddl_type is not None:
        md[META_DDL_TYPE] = str(ev.ddl_type)
    if ev.table is not None and ev.table.partition is not None:
        md[META_PARTITION] = str(ev.table.partition)
    if ev.extra:
        md.update(ev.extra)
    after = {"query": ev.query, "type": ev.ddl_type, "schema": ev.schema, "table": ev.table_name,
             "commitTs": ev.commit_ts}
    rec = Record(position, Operation.CREATE, md, None, None, after)
    if store is not None and ev.table is not None:
        from .schema import attach_table_schema

        attach_table_schema(rec, ev.table, store)
    return rec


def _resolved_record(ev: ResolvedEvent, position: bytes) -> Record:
    md = {
        META_CONTROL: CONTROL_RESOLVED,
        META_CREATED_AT: created_at_ns(ev.ts),
        META_RESOLVED_TS: str(ev.ts),
    }
    if ev.extra:
        md.update(ev.extra)
    return Record(position, Operation.CREATE, md, None, None, {"ts": ev.ts})


_NOT_EXTRA = RESERVED_METADATA | {
    "opencdc.collection", "opencdc.createdAt", "opencdc.readAt", "opencdc.version",
    "opencdc.key.schema.subject", "opencdc.key.schema.version",
    "opencdc.payload.schema.subject", "opencdc.payload.schema.version", META_CONTROL,
}


def _extra_of(md: dict[str, str]) -> dict[str, str]:
    if md.keys() <= _NOT_EXTRA:  # the common case, checked in C
        return {}
    return {k: v for k, v in md.items() if k.startswith("ticdc.") and k not in RESERVED_METADATA}


def from_record(record: Record, store=None) -> Event:
    """Map an OpenCDC record back to the event a codec encodes.

    The table's column model comes from the schema the record references (see
    ``cdcflow.connectors.ticdc.schema.table_of``); without one it is inferred
    from the values (``schema.infer_table``, documented fallback).
    """
    md = record.metadata
    control = md.get(META_CONTROL)
    if control is None:
        return _row_event(record, store)
    if control == CONTROL_DDL:
        return _ddl_event(record, store)
    if control == CONTROL_RESOLVED:
        return _resolved_event(record)
    raise RecordError(f"unknown control record kind {control!r} (metadata {META_CONTROL})",
                      position=record.position)


def from_records(records, store=None) -> list[Event]:
    """Batch form of ``from_record``: data records whose schema reference repeats the previous
    one's reuse its table and skip the per-record dispatch; the rest go through ``from_record``."""
    out: list[Event] = []
    append = out.append
    last_ref = None
    table = None
    op_kind = _OP_KIND
    for record in records:
        md = record.metadata
        if store is None or META_CONTROL in md:
            append(from_record(record, store))
            continue
        ref = (md.get(META_PAYLOAD_SCHEMA_SUBJECT), md.get(META_PAYLOAD_SCHEMA_VERSION), md.get(META_PARTITION))
        if ref != last_ref or ref[0] is None or ref[1] is None:
            table = referenced_table(record, store)
            last_ref = ref if table is not None else None
        kind = op_kind.get(record.operation)
        ts_text = md.get(META_COMMIT_TS)
        if table is None or ts_text is None or kind is None or kind == DELETE:
            append(from_record(record, store))
            continue
        row = record.after
        old = record.before if kind == UPDATE else None
        if type(row) is not dict or (old is not None and type(old) is not dict):
            append(from_record(record, store))
            continue
        try:
            ts = int(ts_text)
        except ValueError:
            append(from_record(record, store))  # raises the typed error
            continue
        append(RowChange(table, kind, ts, row, old, {} if md.keys() <= _NOT_EXTRA else _extra_of(md)))
    return out


@dataclass(slots=True)
class TableRows:
    """Row records of one table as encoders read them: parallel lists instead of a RowChange
    per row. ``indexes`` are the records' places in the batch they came from; ``kinds`` are
    INSERT/UPDATE/DELETE; ``olds`` holds the pre-image of an UPDATE (None elsewhere). Each
    field is what ``from_records`` puts in the row's ``RowChange`` (``extra`` aside: see
    ``events``). ``tables`` is None while every row is of ``table`` (the same object); rows of
    another object appended by ``extend`` make it the table per row."""

    table: TableSchema
    indexes: list[int]
    kinds: list[str]
    commit_ts: list[int]
    rows: list[dict | None]
    olds: list[dict | None]
    tables: list[TableSchema] | None = None

    def __len__(self) -> int:
        return len(self.indexes)

    @classmethod
    def of_event(cls, ev: RowChange, index: int) -> "TableRows":
        return cls(ev.table, [index], [ev.kind], [ev.commit_ts], [ev.row], [ev.old])

    def extend(self, other: "TableRows") -> None:
        """Append ``other``'s rows; ``table`` stays this object's."""
        if self.tables is not None or other.tables is not None or other.table is not self.table:
            self.tables = (self.tables or [self.table] * len(self)) + (other.tables or [other.table] * len(other))
        self.indexes += other.indexes
        self.kinds += other.kinds
        self.commit_ts += other.commit_ts
        self.rows += other.rows
        self.olds += other.olds

    def select(self, start: int, end: int) -> "TableRows":
        """Rows ``[start, end)`` (positions in this object, not batch indexes), in new lists."""
        return TableRows(self.table, self.indexes[start:end], self.kinds[start:end], self.commit_ts[start:end],
                         self.rows[start:end], self.olds[start:end],
                         None if self.tables is None else self.tables[start:end])

    def take(self, positions: Iterable[int]) -> "TableRows":
        """The rows at ``positions`` (in order), in new lists."""
        picked = list(positions)
        return TableRows(self.table, *([seq[k] for k in picked] for seq in (
            self.indexes, self.kinds, self.commit_ts, self.rows, self.olds)),
            None if self.tables is None else [self.tables[k] for k in picked])

    def events(self, records: Sequence[Record]) -> list[RowChange]:
        """The rows as ``RowChange`` with ``extra`` from ``records`` (the batch ``indexes`` refer
        to): exactly what ``from_records`` returns for them."""
        tables = _repeat(self.table) if self.tables is None else self.tables
        return [RowChange(t, k, ts, row, old, _extra_of(records[i].metadata))
                for t, i, k, ts, row, old in zip(tables, self.indexes, self.kinds, self.commit_ts, self.rows,
                                                 self.olds)]


_METADATA = attrgetter("metadata")
_OPERATION = attrgetter("operation")
_AFTER = attrgetter("after")
_DICT_GET = dict.get


def records_to_rows(records: Sequence[Record], store) -> list["TableRows | int"]:
    """A batch of records mapped as ``from_records`` maps it, without a ``RowChange`` per row:
    each run of consecutive row records referencing the same table (same schema subject, version
    and partition) comes back as one ``TableRows``; every other record (control records, records
    referencing no schema, and any run with a surprise in it: an unknown operation, a payload
    that is not a dict, a missing or bad commit ts) comes back as its index, for the caller to
    map with ``from_record`` (which also raises the typed error). Order is kept.

    For encoders that take a table's rows at once (CSV): the work per record is a few C-level
    passes over the batch (metadata lookups, operations, payloads, ``int`` of the commit ts)."""
    n = len(records)
    if store is None or not n:
        return list(range(n))
    mds = list(map(_METADATA, records))
    refs = list(zip(map(_DICT_GET, mds, _repeat(META_PAYLOAD_SCHEMA_SUBJECT)),
                    map(_DICT_GET, mds, _repeat(META_PAYLOAD_SCHEMA_VERSION)),
                    map(_DICT_GET, mds, _repeat(META_PARTITION)),
                    map(_DICT_GET, mds, _repeat(META_CONTROL))))
    starts = [0, *_compress(_count(1), map(_ne, _islice(refs, 1, None), refs)), n]
    out: list[TableRows | int] = []
    for a, b in zip(starts, starts[1:]):
        subject, version, _, control = refs[a]
        run = _run_rows(records, mds, a, b, store) if control is None and subject is not None \
            and version is not None else None
        if run is None:
            out += range(a, b)
        else:
            out.append(run)
    return out


def _run_rows(records: Sequence[Record], mds: list, a: int, b: int, store) -> TableRows | None:
    """Records ``[a, b)`` (one schema reference, no control record) as ``TableRows``; None when
    ``from_records`` would send any of them to ``from_record``."""
    try:
        table = referenced_table(records[a], store)
        commit_ts = list(map(int, map(_DICT_GET, mds[a:b], _repeat(META_COMMIT_TS))))
    except (CdcflowError, ValueError, TypeError):  # a bad reference or commit ts: from_record names it
        return None
    if table is None:
        return None
    run = records[a:b]
    m = b - a
    ops = list(map(_OPERATION, run))
    if ops.count(Operation.CREATE) == m:
        rows = list(map(_AFTER, run))
        if set(map(type, rows)) != {dict}:
            return None
        return TableRows(table, list(range(a, b)), [INSERT] * m, commit_ts, rows, [None] * m)
    kinds: list[str] = []
    rows = []
    olds: list[dict | None] = []
    op_kind = _OP_KIND
    for record, op in zip(run, ops):
        kind = op_kind.get(op)
        if kind is None:
            return None
        old = None
        if kind == DELETE:
            row = record.before
            if row is None:
                row = record.key
        else:
            row = record.after
            if kind == UPDATE:
                old = record.before
        if (row is not None and type(row) is not dict) or (old is not None and type(old) is not dict):
            return None
        kinds.append(kind)
        rows.append(row)
        olds.append(old)
    return TableRows(table, list(range(a, b)), kinds, commit_ts, rows, olds)


def _commit_ts(record: Record, key: str = META_COMMIT_TS) -> int:
    md = record.metadata
    text = md.get(key)
    if text is not None:
        try:
            return int(text)
        except ValueError:
            raise RecordError(f"metadata {key}={text!r} is not an integer", position=record.position) from None
    created = md.get(META_CREATED_AT)
    if created is not None:  # a record from another source: build a TSO from its time
        try:
            return (int(created) // 1_000_000) << 18
        except ValueError:
            pass
    raise RecordError(f"record has neither {key} nor {META_CREATED_AT} metadata", position=record.position)


def _row_event(record: Record, store) -> RowChange:
    op = record.operation
    kind = _OP_KIND.get(op)
    if kind is None:
        raise RecordError(f"record operation {op.text} has no TiCDC row kind", position=record.position)
    if kind == DELETE:
        row, old = record.before, None
        if row is None:
            row = record.key
    else:
        row = record.after
        old = record.before if kind == UPDATE else None
    if row is not None and not isinstance(row, dict):
        raise RecordError("TiCDC rows need structured data, got raw bytes", position=record.position)
    if old is not None and not isinstance(old, dict):
        raise RecordError("TiCDC old image needs structured data, got raw bytes", position=record.position)
    table = referenced_table(record, store) if store is not None else None
    if table is None:
        table = _schema.infer_table(record, row, old)
    return RowChange(table, kind, _commit_ts(record), row, old, _extra_of(record.metadata))


_REFERENCED: dict[tuple, tuple[object, TableSchema | None]] = {}


def referenced_table(record: Record, store) -> TableSchema | None:
    """``schema.table_of`` for row records, memoised per (store, subject, version, partition)."""
    md = record.metadata
    cache_key = (id(store), md.get(META_PAYLOAD_SCHEMA_SUBJECT), md.get(META_PAYLOAD_SCHEMA_VERSION),
                 md.get(META_PARTITION))
    hit = _REFERENCED.get(cache_key)
    if hit is not None and hit[0] is store:
        return hit[1]
    table = _schema.table_of(record, store)
    if cache_key[1] is not None and cache_key[2] is not None:
        if len(_REFERENCED) > 4096:
            _REFERENCED.clear()
        _REFERENCED[cache_key] = (store, table)
    return table


def _ddl_event(record: Record, store) -> DDLEvent:
    from .schema import table_of

    after = record.after
    if not isinstance(after, dict) or "query" not in after:
        raise RecordError("DDL control record needs after = {query, type, schema, table, commitTs}",
                          position=record.position)
    md = record.metadata
    schema = after.get("schema", md.get(META_SCHEMA, ""))
    table_name = after.get("table", md.get(META_TABLE, ""))
    commit_ts = after.get("commitTs")
    if commit_ts is None:
        commit_ts = _commit_ts(record)
    table = table_of(record, store) if store is not None else None
    return DDLEvent(schema, table_name, after["query"], int(commit_ts), after.get("type"), table,
                    _extra_of(md))


def _resolved_event(record: Record) -> ResolvedEvent:
    after = record.after
    if isinstance(after, dict) and "ts" in after:
        ts = int(after["ts"])
    else:
        ts = _commit_ts(record, META_RESOLVED_TS)
    return ResolvedEvent(ts, _extra_of(record.metadata))


from . import schema as _schema  # noqa: E402  (schema imports this module's names)
