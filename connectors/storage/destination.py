"""The ``storage`` destination: records -> TiCDC storage sink layout (CSV or canal-json).

Every ``write`` batch ends with its files complete and durable (one data file
per data directory touched, more when ``file-size`` is exceeded), so a record is
acknowledged only once the file holding it is in storage; ``flush-interval`` is
therefore always met. Table versions: a DDL control record starts a new version
(its commit ts); a row whose table columns differ from the current version's
also starts one (TiCDC would have seen the DDL), except a delete that carries
only the handle key (Avro), which is written into the current version with its
other columns NULL. See docs/connector-storage.md.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

from cdcflow.connectors.ticdc.canal_json import CanalJsonEncoder
from cdcflow.connectors.ticdc.convert import names_rows
from cdcflow.connectors.ticdc.csv import encode_table_rows
from cdcflow.connectors.ticdc.errors import CodecError
from cdcflow.connectors.ticdc.events import DELETE, DDLEvent, ResolvedEvent, RowChange, TableRows, from_record, records_to_rows
from cdcflow.errors import CdcflowError, InfrastructureError, RecordError
from cdcflow.record import Record
from cdcflow.sdk import Destination
from cdcflow.connectors.ticdc.tidb import TableSchema

from . import layout, schemafile
from .settings import PLUGIN, StorageSettings, resolve
from .writer import DataDirectory, FileStore, write_checkpoint



@dataclasses.dataclass
class _Version:
    version: int
    checksum: int
    table: TableSchema | None = None  # the version's columns, once known (key-only deletes go into it)


class StorageDestination(Destination):
    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.settings: StorageSettings = resolve(config)

    def open(self) -> None:
        from cdcflow.schemas import default_store

        s = self.settings
        self._store = default_store()
        self.files = FileStore.of(s, writer=True)
        self._dirs: dict[str, DataDirectory] = {}
        self._versions: dict[tuple[str, str], _Version] = {}
        self._pending_ddl: dict[tuple[str, str], DDLEvent] = {}
        self._checksums: dict[int, tuple[TableSchema, int]] = {}
        self._encoder = CanalJsonEncoder(s.canal) if s.format == "canal-json" else None
        self._resolved: int | None = None
        self._max_commit_ts: int | None = None
        self._last_dir: tuple | None = None  # (table object, date, data directory) of the previous run
        self._dates: dict[int, str] = {}  # day number -> date directory
        self._batch: tuple = ((), {})  # the batch being written and facts found in it

    # ------------------------------------------------------------------ write
    def write(self, records: Sequence[Record]) -> list[str | None] | None:
        errors: list[str | None] = [None] * len(records)
        groups: dict[str, TableRows] = {}  # data directory -> its rows, in arrival order
        try:
            items = records_to_rows(records, self._store)
        except (CdcflowError, ValueError):  # find the bad records one by one
            items = range(len(records))
        self._batch = (items, {})  # what this batch holds later on (see ``_ahead``)
        for item in items:
            if type(item) is TableRows:
                self._route(item, records, groups, errors)
                continue
            rec = records[item]
            try:
                ev = from_record(rec, self._store)
                if type(ev) is RowChange:
                    self._route(TableRows.of_event(ev, item), records, groups, errors)
                elif type(ev) is DDLEvent:
                    self._on_ddl(ev, rec.position)
                elif type(ev) is ResolvedEvent:
                    if self._resolved is None or ev.ts > self._resolved:
                        self._resolved = ev.ts
            except InfrastructureError:
                raise  # the store failed, not the record: the batch fails
            except (CdcflowError, ValueError) as e:
                errors[item] = f"{type(e).__name__}: {e}"
        for rel, rows in groups.items():
            self._write_group(rel, rows, records, errors)
        ts = self._resolved if self._resolved is not None else self._max_commit_ts
        if ts is not None:
            write_checkpoint(self.files, ts)
        return errors if any(e is not None for e in errors) else None

    def _route(self, rows: TableRows, records: Sequence[Record], groups: dict[str, TableRows],
               errors: list[str | None]) -> None:
        """Add a run of one table's rows to the groups of their data directories (one per date
        when the layout has dates); a run whose directory cannot be made gets the error."""
        if not min(rows.commit_ts):
            rows.commit_ts = self._known_commit_ts(rows.commit_ts)
        top = max(rows.commit_ts)
        if self._max_commit_ts is None or top > self._max_commit_ts:
            self._max_commit_ts = top
        sep = self.settings.date_separator
        if sep == "none":
            parts = [(None, rows)]
        else:
            dates = list(map(self._date_of, rows.commit_ts))
            if dates.count(dates[0]) == len(dates):
                parts = [(dates[0], rows)]
            else:
                positions: dict[str, list[int]] = {}
                for k, date in enumerate(dates):
                    positions.setdefault(date, []).append(k)
                parts = [(date, rows.take(ks)) for date, ks in positions.items()]
        for date, part in parts:
            try:  # both may list or create the table's directories: its path must be storable
                part = self._key_only_widened(part)
                rel = self._data_dir_of(part.table, part.commit_ts[0], date, records[part.indexes[0]].position)
            except InfrastructureError:
                raise
            except (CdcflowError, ValueError) as e:
                for i in part.indexes:
                    errors[i] = f"{type(e).__name__}: {e}"
                continue
            group = groups.get(rel)
            if group is None:
                groups[rel] = part  # fresh lists from records_to_rows / take: ours to extend
            else:
                group.extend(part)

    def _ahead(self, what: str, key: tuple[str, str] | None = None):
        """From the rest of this batch: ``"ts"`` the lowest known commit ts of its rows; ``"table"``
        the widest columns of table ``key`` (computed once per batch)."""
        items, memo = self._batch
        if (what, key) not in memo:
            runs = [it for it in items if type(it) is TableRows]
            if what == "ts":
                memo[what, key] = min((t for r in runs for t in r.commit_ts if t), default=0)
            else:
                tables = [r.table for r in runs if (r.table.schema, r.table.table) == key]
                memo[what, key] = max(tables, key=lambda t: len(t.columns), default=None)
        return memo[what, key]

    def _known_commit_ts(self, commit_ts: list[int]) -> list[int]:
        """Commit ts 0 means unknown (an Avro delete read before any commit ts of its partition):
        such a row is dated by the newest commit ts written, else the lowest of the rows later in
        this batch, so it never lands in ``1970-01-01`` nor starts a table version of its own."""
        known = self._max_commit_ts or self._ahead("ts")
        return [t or known for t in commit_ts] if known else commit_ts

    def _date_of(self, commit_ts: int) -> str:
        """The date directory of a commit ts, computed once per day seen."""
        day = (commit_ts >> 18) // 86_400_000
        date = self._dates.get(day)
        if date is None:
            if len(self._dates) > 4096:
                self._dates.clear()
            date = self._dates[day] = layout.date_dir(commit_ts, self.settings.date_separator)
        return date

    # ------------------------------------------------------------------ versions and schema files
    def _checksum(self, table: TableSchema) -> int:
        hit = self._checksums.get(id(table))
        if hit is not None and hit[0] is table:
            return hit[1]
        crc = schemafile.checksum(table.schema, table)
        if len(self._checksums) > 4096:
            self._checksums.clear()
        self._checksums[id(table)] = (table, crc)
        return crc

    def _newest_schema_file(self, schema: str, table: str) -> tuple[int, int] | None:
        best = None
        for name, _ in self.files.listdir(layout.table_schema_dir(schema, table)):
            parsed = schemafile.parse_name(name)
            if parsed is not None and (best is None or parsed[0] > best[0]):
                best = parsed
        return best

    def _write_schema_file(self, schema: str, table: TableSchema | None, version: int, query: str,
                           ddl_type: int) -> int:
        name, content = schemafile.render(schema, table, version, query, ddl_type)
        where = layout.table_schema_dir(schema, table.table) if table is not None else \
            layout.database_schema_dir(schema)
        self.files.put_new(f"{where}/{name}", content)  # an existing file of that name has this content
        return schemafile.parse_name(name)[1]

    def _current_table(self, key: tuple[str, str]) -> TableSchema | None:
        """The columns of the table's current version: remembered, else its newest schema file's."""
        current = self._versions.get(key)
        if current is not None and current.table is not None:
            return current.table
        if current is not None or key in self._pending_ddl:
            return None
        newest = self._newest_schema_file(*key)
        if newest is None:  # a new table: the rows after it in this batch tell its columns
            return self._ahead("table", key)
        rel = f"{layout.table_schema_dir(*key)}/{schemafile.file_name(*newest)}"
        data = self.files.read(rel)
        if data is None:
            return None
        table = schemafile.parse(rel, data).table
        self._versions[key] = _Version(newest[0], newest[1], table)
        return table

    def _key_only_widened(self, rows: TableRows) -> TableRows:
        """Deletes that carry only the handle key (TiCDC Avro sends a tombstone with the key) are
        rows of the current table version, not a schema change: they get that version's columns,
        the ones the source did not carry NULL. Anything else is returned as it is."""
        table = rows.table
        if rows.tables is not None or any(k != DELETE for k in rows.kinds):
            return rows
        key = (table.schema, table.table)
        if key in self._pending_ddl:
            return rows
        current = self._current_table(key)
        if current is None or current is table or len(table.columns) >= len(current.columns):
            return rows
        index = current.index
        if not all(c.name in index and current.columns[index[c.name]].handle_key for c in table.columns):
            return rows
        names = [c.name for c in current.columns]
        widened = [None if r is None else {n: r.get(n) for n in names} for r in rows.rows]
        return TableRows(current, rows.indexes, rows.kinds, rows.commit_ts, widened, rows.olds)

    def _version_of(self, table: TableSchema, commit_ts: int) -> int:
        key = (table.schema, table.table)
        crc = self._checksum(table)
        pending = self._pending_ddl.pop(key, None)
        if pending is not None:
            plain = dataclasses.replace(table, partition=None, version=pending.commit_ts)
            self._write_schema_file(table.schema, plain, pending.commit_ts, pending.query, pending.ddl_type or 0)
            self._versions[key] = _Version(pending.commit_ts, crc, table)
            return pending.commit_ts
        current = self._versions.get(key)
        if current is not None and current.checksum == crc:
            if current.table is None:
                current.table = table
            return current.version
        newest = self._newest_schema_file(*key) if current is None else (current.version, current.checksum)
        if newest is not None and newest[1] == crc:
            self._versions[key] = _Version(newest[0], crc, table)
            return newest[0]
        version = table.version or commit_ts
        if newest is not None and version <= newest[0]:
            version = newest[0] + 1
        plain = dataclasses.replace(table, partition=None, version=version)
        self._write_schema_file(table.schema, plain, version, "", 0)
        self._versions[key] = _Version(version, crc, table)
        return version

    def _on_ddl(self, ev: DDLEvent, position: bytes) -> None:
        self._last_dir = None
        layout.check_name("schema", ev.schema, position)
        if not ev.table_name:
            self._write_schema_file(ev.schema, None, ev.commit_ts, ev.query, ev.ddl_type or 0)
            return
        layout.check_name("table", ev.table_name, position)
        key = (ev.schema, ev.table_name)
        if ev.table is None:  # columns arrive with the next row of the table
            self._pending_ddl[key] = ev
            return
        plain = dataclasses.replace(ev.table, partition=None, version=ev.commit_ts)
        crc = self._write_schema_file(ev.schema, plain, ev.commit_ts, ev.query, ev.ddl_type or 0)
        self._pending_ddl.pop(key, None)
        self._versions[key] = _Version(ev.commit_ts, crc, ev.table)

    def _data_dir_of(self, table: TableSchema, commit_ts: int, date: str | None, position: bytes) -> str:
        """The data directory of rows of ``table`` (first row's commit ts ``commit_ts``) on ``date``."""
        hit = self._last_dir
        if hit is not None and hit[0] is table and hit[1] == date and (table.schema, table.table) not in \
                self._pending_ddl:
            return hit[2]  # same table object, same date: same directory (names checked, version current)
        layout.check_name("schema", table.schema, position)
        layout.check_name("table", table.table, position)
        version = self._version_of(table, commit_ts)
        partition = table.partition if self.settings.partition_separator else None
        rel = layout.data_dir(table.schema, table.table, version, partition, date)
        self._last_dir = (table, date, rel)
        return rel

    # ------------------------------------------------------------------ encoding and files
    def _encode(self, rows: TableRows, records: Sequence[Record]) -> bytes:
        s = self.settings
        if self._encoder is None:
            # CSV writes ENUM/SET names: refuse index text
            images = (names_rows(rows.table, rows.tables, rows.rows, "csv"),
                      names_rows(rows.table, rows.tables, rows.olds, "csv"))
            return encode_table_rows(rows.table, rows.kinds, rows.commit_ts, *images, s.csv)
        term = s.csv.terminator.encode()
        return term.join(self._encoder.encode_many(rows.events(records))) + term

    def _encode_checked(self, rows: TableRows, records: Sequence[Record], errors: list[str | None]) -> TableRows:
        """The rows that encode; the others get their error (one bad value never fails the batch)."""
        ok = []
        for k in range(len(rows)):
            try:
                self._encode(rows.select(k, k + 1), records)
                ok.append(k)
            except CodecError as e:
                errors[rows.indexes[k]] = f"{type(e).__name__}: {e}"
        return rows.take(ok)

    def _write_group(self, rel: str, rows: TableRows, records: Sequence[Record], errors: list[str | None]) -> None:
        # one encode call per data directory (its rows share columns: same table version)
        try:
            data = self._encode(rows, records)
        except CodecError:
            rows = self._encode_checked(rows, records, errors)
            if not len(rows):
                return
            data = self._encode(rows, records)
        pieces = max(1, math.ceil(len(data) / self.settings.file_size))
        try:
            d = self._dirs.get(rel)
            if d is None:
                d = self._dirs[rel] = DataDirectory(self.files, rel, self.settings.index_width, self.settings.extension)
            if pieces == 1:
                d.write(data)
                return
            step = math.ceil(len(rows) / pieces)
            for k in range(0, len(rows), step):
                d.write(self._encode(rows.select(k, k + step), records))
        except RecordError as e:  # the path of these rows cannot be stored (a name too long): theirs alone
            for i in rows.indexes:
                errors[i] = f"{type(e).__name__}: {e}"

    def stop(self, last_position: bytes | None) -> None:
        """Nothing is buffered between writes: every batch ended with its files written."""


__all__ = ["StorageDestination", "PLUGIN"]
