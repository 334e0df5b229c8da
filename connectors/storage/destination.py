"""The ``storage`` destination: records -> TiCDC storage sink layout (CSV or canal-json).

Every ``write`` batch ends with its files complete and durable (one data file
per data directory touched, more when ``file-size`` is exceeded), so a record is
acknowledged only once the file holding it is in storage; ``flush-interval`` is
therefore always met. Table versions: a DDL control record starts a new version
(its commit ts); a row whose table columns differ from the current version's
also starts one (TiCDC would have seen the DDL). See docs/connector-storage.md.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any, Mapping, Sequence

from cdcflow.connectors.ticdc.canal_json import CanalJsonEncoder
from cdcflow.connectors.ticdc.csv import encode_rows
from cdcflow.connectors.ticdc.errors import CodecError
from cdcflow.connectors.ticdc.events import DDLEvent, ResolvedEvent, RowChange, from_record, from_records
from cdcflow.errors import CdcflowError
from cdcflow.record import Record
from cdcflow.sdk import Destination
from cdcflow.tidb import TableSchema

from . import layout, schemafile
from .settings import PLUGIN, StorageSettings, resolve
from .writer import DataDirectory, FileStore, write_checkpoint


_TABLE_OF = operator.attrgetter("table")


@dataclasses.dataclass
class _Version:
    version: int
    checksum: int


class StorageDestination(Destination):
    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.settings: StorageSettings = resolve(config)

    def open(self) -> None:
        from cdcflow.schemas import default_store

        s = self.settings
        self._store = default_store()
        self.files = FileStore(s.open_filesystem(), s.root, s.protocol == "file")
        self._dirs: dict[str, DataDirectory] = {}
        self._versions: dict[tuple[str, str], _Version] = {}
        self._pending_ddl: dict[tuple[str, str], DDLEvent] = {}
        self._checksums: dict[int, tuple[TableSchema, int]] = {}
        self._encoder = CanalJsonEncoder(s.canal) if s.format == "canal-json" else None
        self._resolved: int | None = None
        self._max_commit_ts: int | None = None
        self._last_dir: tuple | None = None  # (table object, date, data directory) of the previous row

    # ------------------------------------------------------------------ write
    def write(self, records: Sequence[Record]) -> list[str | None] | None:
        errors: list[str | None] = [None] * len(records)
        # data directory -> ([record index], [RowChange]) in arrival order
        groups: dict[str, tuple[list[int], list[RowChange]]] = {}
        try:
            events = from_records(records, self._store)
        except (CdcflowError, ValueError):  # find the bad records one by one
            events = None
        dated = self.settings.date_separator != "none"
        last_table = None  # rows of the table object just seen (undated) go to the same group
        group: tuple[list[int], list[RowChange]] = ([], [])
        max_ts = self._max_commit_ts
        for i, rec in enumerate(records):
            try:
                ev = from_record(rec, self._store) if events is None else events[i]
                if type(ev) is RowChange:
                    if ev.table is not last_table:
                        last_table = None
                        rel = self._data_dir_of(ev, rec.position)
                        group = groups.get(rel) or groups.setdefault(rel, ([], []))
                        last_table = None if dated else ev.table
                    group[0].append(i)
                    group[1].append(ev)
                    if max_ts is None or ev.commit_ts > max_ts:
                        max_ts = ev.commit_ts
                elif type(ev) is DDLEvent:
                    last_table = None
                    self._on_ddl(ev, rec.position)
                elif type(ev) is ResolvedEvent:
                    if self._resolved is None or ev.ts > self._resolved:
                        self._resolved = ev.ts
            except (CdcflowError, ValueError) as e:
                errors[i] = f"{type(e).__name__}: {e}"
        self._max_commit_ts = max_ts
        for rel, (indexes, evs) in groups.items():
            self._write_group(rel, indexes, evs, errors)
        ts = self._resolved if self._resolved is not None else self._max_commit_ts
        if ts is not None:
            write_checkpoint(self.files, ts)
        return errors if any(e is not None for e in errors) else None

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

    def _version_of(self, ev: RowChange, position: bytes) -> int:
        table = ev.table
        key = (table.schema, table.table)
        crc = self._checksum(table)
        pending = self._pending_ddl.pop(key, None)
        if pending is not None:
            plain = dataclasses.replace(table, partition=None, version=pending.commit_ts)
            self._write_schema_file(table.schema, plain, pending.commit_ts, pending.query, pending.ddl_type or 0)
            self._versions[key] = _Version(pending.commit_ts, crc)
            return pending.commit_ts
        current = self._versions.get(key)
        if current is not None and current.checksum == crc:
            return current.version
        newest = self._newest_schema_file(*key) if current is None else (current.version, current.checksum)
        if newest is not None and newest[1] == crc:
            self._versions[key] = _Version(newest[0], crc)
            return newest[0]
        version = table.version or ev.commit_ts
        if newest is not None and version <= newest[0]:
            version = newest[0] + 1
        plain = dataclasses.replace(table, partition=None, version=version)
        self._write_schema_file(table.schema, plain, version, "", 0)
        self._versions[key] = _Version(version, crc)
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
        self._versions[key] = _Version(ev.commit_ts, crc)

    def _data_dir_of(self, ev: RowChange, position: bytes) -> str:
        table = ev.table
        s = self.settings
        date = layout.date_dir(ev.commit_ts, s.date_separator) if s.date_separator != "none" else None
        hit = self._last_dir
        if hit is not None and hit[0] is table and hit[1] == date and (table.schema, table.table) not in \
                self._pending_ddl:
            return hit[2]  # same table object, same date: same directory (names checked, version current)
        rel = self._data_dir_uncached(ev, position, date)
        self._last_dir = (table, date, rel)
        return rel

    def _data_dir_uncached(self, ev: RowChange, position: bytes, date: str | None) -> str:
        table = ev.table
        layout.check_name("schema", table.schema, position)
        layout.check_name("table", table.table, position)
        version = self._version_of(ev, position)
        s = self.settings
        partition = table.partition if s.partition_separator else None
        return layout.data_dir(table.schema, table.table, version, partition, date)

    # ------------------------------------------------------------------ encoding and files
    def _encode(self, events: list[RowChange]) -> bytes:
        s = self.settings
        if self._encoder is None:
            return encode_rows(events, events[0].table, s.csv)
        term = s.csv.terminator.encode()
        return term.join(self._encoder.encode_many(events)) + term

    def _encode_checked(self, indexes: list[int], events: list[RowChange], errors: list[str | None]) -> list[RowChange]:
        """The events that encode; the others get their error (one bad value never fails the batch)."""
        ok = []
        for i, ev in zip(indexes, events):
            try:
                self._encode([ev])
                ok.append(ev)
            except CodecError as e:
                errors[i] = f"{type(e).__name__}: {e}"
        return ok

    def _write_group(self, rel: str, indexes: list[int], events: list[RowChange], errors: list[str | None]) -> None:
        # CSV: one encode call per table object (rows of a data directory share columns)
        if self._encoder is None:
            first = events[0].table
            if list(map(_TABLE_OF, events)).count(first) != len(events):  # identity first: C speed
                events = [ev if ev.table is first else dataclasses.replace(ev, table=first) for ev in events]
        try:
            data = self._encode(events)
        except CodecError:
            events = self._encode_checked(indexes, events, errors)
            if not events:
                return
            data = self._encode(events)
        pieces = max(1, math.ceil(len(data) / self.settings.file_size))
        d = self._dirs.get(rel)
        if d is None:
            d = self._dirs[rel] = DataDirectory(self.files, rel, self.settings.index_width, self.settings.extension)
        if pieces == 1:
            d.write(data)
            return
        step = math.ceil(len(events) / pieces)
        for k in range(0, len(events), step):
            d.write(self._encode(events[k:k + step]))

    def stop(self, last_position: bytes | None) -> None:
        """Nothing is buffered between writes: every batch ended with its files written."""


__all__ = ["StorageDestination", "PLUGIN"]
