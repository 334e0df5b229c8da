"""The ``storage`` source: reads the TiCDC storage sink layout like TiCDC's storage consumer.

One partition per (schema, table[, partition id]): its versions are read in
order, each with its own schema file (checksum verified), a DDL control record
before the rows of a version whose schema file carries a statement, data files
in index order; the database's DDLs (its own schema files) where TiCDC's consumer
runs them. Positions are ``version|date|index|row`` (``row`` = 1-based row ordinal
in the file; for canal-json that is the line) or ``version|ddl``, the version as
``version~db`` once a database DDL newer than it was returned, so a restart
continues exactly after the last acknowledged record.

A bad line (wrong column count, undecodable value) or a missing / mismatching
schema file raises ``StorageReadError`` naming file and line: a source cannot
nack, and skipping would lose rows silently. See docs/connector-storage.md.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import stat
import time
from typing import Any, Mapping, Sequence

from cdcflow.connectors.ticdc.canal_json import CanalJsonDecoder
from cdcflow.connectors.ticdc.csv import CsvColumns, CsvDecoder
from cdcflow.connectors.ticdc.errors import CodecError
from cdcflow.connectors.ticdc.events import DDLEvent, RowChange, to_records
from cdcflow.errors import CdcflowError, InfrastructureError, RecordError
from cdcflow.record import Record
from cdcflow.sdk import Source
from cdcflow.connectors.ticdc.tidb import TableSchema

from . import layout, schemafile
from .settings import StorageSettings, resolve
from .writer import FileStore, read_checkpoint


class StorageReadError(RecordError):
    """A data or schema file cannot be read; names the file and line."""


class StorageRootError(CdcflowError):
    """The ``uri`` names a directory (bucket, prefix) that does not exist."""


#: seconds between the warnings that the root does not exist (while streaming)
ROOT_WARNING_INTERVAL = 60.0
log = logging.getLogger("cdcflow.connectors.storage.source")


class _Chunk:
    """The decoded rows of one data file (or one DDL) not yet returned.

    ``rows`` is either a list of events (DDL, canal-json, CSV rows read row-wise) or a
    ``CsvColumns`` (a CSV file read column-wise); records are made per ``read`` batch."""

    __slots__ = ("at", "rows", "next", "ddl", "_position")

    def __init__(self, at: "_Cursor", rows, first: int, ddl: bool = False):
        self.at = at
        self.rows = rows
        self.next = first  # index of the next row to return (= rows already read)
        self.ddl = ddl  # one DDL (table or database), positioned at ``at``
        self._position = at.prefix()  # + the row number

    def __len__(self) -> int:
        return len(self.rows)

    def records(self, start: int, end: int, store) -> list[Record]:
        if self.ddl:
            return to_records(self.rows[start:end], [self.at.encode()], store)
        if type(self.rows) is CsvColumns:
            return self.rows.numbered_records(self._position, store, start, end)
        positions = map((self._position.replace(b"%", b"%%") + b"%d").__mod__, range(start + 1, end + 1))
        return to_records(self.rows[start:end], positions, store)

    def commit_ts_at(self, k: int) -> int:
        rows = self.rows
        if type(rows) is CsvColumns:
            return rows.commit_ts_at(k)
        ev = rows[k]
        return ev.commit_ts if type(ev) is RowChange else 0

    def truncate(self, end: int) -> None:
        if type(self.rows) is CsvColumns:
            self.rows.truncate(end)
        else:
            del self.rows[end:]

    def cursor_at(self, end: int) -> "_Cursor":
        return self.at if self.ddl else dataclasses.replace(self.at, row=end)

    def positions(self, start: int, end: int) -> list[bytes]:
        """The positions of data rows ``[start, end)`` (what ``records`` puts in them)."""
        return list(map((self._position.replace(b"%", b"%%") + b"%d").__mod__, range(start + 1, end + 1)))


@dataclasses.dataclass(frozen=True, order=True)
class _Cursor:
    version: int
    kind: int  # 0 = the version's DDL, 1 = data
    date: str = ""
    index: int = 0
    row: int = 0
    #: newest database DDL (database schema file version) returned; below ``version`` it is
    #: ``version``: every database DDL up to a table version comes before that version
    db: int = dataclasses.field(default=-1, compare=False)

    @property
    def db_done(self) -> int:
        return max(self.db, self.version)

    def _version_field(self) -> str:
        return f"{self.version}~{self.db}" if self.db > self.version else str(self.version)

    def prefix(self) -> bytes:
        """The position of a data row without its row number."""
        return f"{self._version_field()}|{self.date}|{self.index}|".encode()

    def encode(self) -> bytes:
        if self.kind == 0:
            return f"{self._version_field()}|ddl".encode()
        return self.prefix() + str(self.row).encode()

    @classmethod
    def decode(cls, position: bytes) -> "_Cursor":
        try:
            parts = position.decode("ascii").split("|")
            version, _, db = parts[0].partition("~")
            v, d = int(version), int(db) if db else -1
            if len(parts) == 2 and parts[1] == "ddl":
                return cls(v, 0, db=d)
            _, date, index, row = parts
            return cls(v, 1, date, int(index), int(row), db=d)
        except (UnicodeDecodeError, ValueError):
            raise CdcflowError(f"storage source: position {position!r} is not version[~db]|date|index|row") \
                from None


def discover_streams(files: FileStore, settings: StorageSettings, tables: set[str] | None = None) -> list[str]:
    """Partition ids ``schema/table`` or ``schema/table/partition`` of everything under the root,
    and ``schema`` for a database with schema files but no table yet (its DDLs)."""
    out = []
    for schema, is_dir in sorted(files.listdir("")):
        if not is_dir or schema == layout.INDEX_DIR:
            continue
        first = len(out)
        for table, tdir in sorted(files.listdir(schema)):
            if not tdir or table == layout.INDEX_DIR or (tables and f"{schema}.{table}" not in tables):
                continue
            pids: set[str] = set()
            for version, vdir in files.listdir(f"{schema}/{table}"):
                if vdir and version.isdigit():
                    pids.update(_partition_dirs(files, settings, f"{schema}/{table}/{version}"))
            if pids:
                out += [f"{schema}/{table}/{p}" for p in sorted(pids, key=int)]
            else:
                out.append(f"{schema}/{table}")
        if len(out) == first and not tables and database_versions(files, schema):
            out.append(schema)
    return out


def database_versions(files: FileStore, schema: str) -> dict[int, str]:
    """Version -> file name of the database schema files of ``schema``."""
    out: dict[int, str] = {}
    for name, is_dir in files.listdir(layout.database_schema_dir(schema)):
        parsed = schemafile.parse_name(name)
        if parsed is not None and not is_dir:
            out[parsed[0]] = max(name, out.get(parsed[0], ""))
    return out


def _partition_dirs(files: FileStore, settings: StorageSettings, version_dir: str) -> list[str]:
    """The partition directories present (whatever ``enable-partition-separator`` says: a writer
    without it makes none); ``date-separator`` tells a four-digit partition id from a year."""
    out = []
    for name, is_dir in files.listdir(version_dir):
        if not is_dir or not name.isdigit() or name == layout.INDEX_DIR:
            continue
        if settings.date_separator == "none":
            out.append(name)
        elif not layout.is_date_dir(name, settings.date_separator) or any(
                d and layout.is_date_dir(n, settings.date_separator)
                for n, d in files.listdir(f"{version_dir}/{name}")):
            out.append(name)  # a partition directory holds date directories
    return out


class StorageSource(Source):
    #: the engine's ``IdleAwareSource`` capability: set before ``partitions`` under
    #: ``--until-idle``, when a missing root is an error rather than something to wait for
    until_idle: bool = False

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.settings: StorageSettings = resolve(config)
        self.stop_at_checkpoint = bool(config.get("stop-at-checkpoint") or False)
        poll = config.get("poll-interval")
        self.poll_interval = 1.0 if poll is None else float(poll)
        names = str(config.get("tables") or "")
        self.tables = {t.strip() for t in names.split(",") if t.strip()} or None
        self._files: FileStore | None = None

    def _store_files(self) -> FileStore:
        if self._files is None:
            s = self.settings
            self._files = FileStore.of(s)
        return self._files

    def _root_missing(self, files: FileStore) -> bool:
        if self.settings.protocol == "memory" and not files.root:
            return False
        try:
            return not (stat.S_ISDIR(os.stat(files.root).st_mode) if files.local else files.fs.isdir(files.root))
        except (FileNotFoundError, NotADirectoryError):
            return True
        except OSError as e:  # the store, not a record: the engine retries, then stops naming it
            raise InfrastructureError(f"storage: cannot look at {files.root}: {e}", service="object-store"
                                      if not files.local else "disk", endpoint=files.root) from None

    def partitions(self) -> Sequence[str]:
        files = self._store_files()
        if self._root_missing(files):
            where = files.root
            if self.until_idle:
                raise StorageRootError(f"storage source {self.id or 'storage'}: {where} does not exist or is not a "
                                       "directory (check the uri; nothing to read)")
            log.warning("storage source %s: %s does not exist; waiting for it (tables that appear there are "
                        "read after a restart)", self.id or "storage", where)
        return discover_streams(files, self.settings, self.tables) or [""]

    def open(self, position: bytes | None, partition: str = "") -> None:
        from cdcflow.schemas import default_store

        self._schema_store = default_store()
        self.files = self._store_files()
        parts = partition.split("/") if partition else []
        self.schema, self.table = (parts[0], parts[1]) if len(parts) >= 2 else (parts[0] if parts else "", "")
        self.partition_id = parts[2] if len(parts) == 3 else None
        self.cursor = _Cursor.decode(position) if position else _Cursor(-1, 1)
        self._last = position or None
        self._chunk: _Chunk | None = None  # decoded, not yet returned
        self._schema_files: dict[int, schemafile.SchemaFile] = {}
        self._next_scan = 0.0
        self._next_warning = 0.0  # when to say again that the root does not exist
        self._caught_up = False  # the last scan found nothing after the cursor
        self._done = False
        self._read_rows: dict[tuple, int] = {}  # rows of the file being read
        self.checkpoint = read_checkpoint(self.files) if self.stop_at_checkpoint else None
        if self.stop_at_checkpoint and self.checkpoint is None:
            raise CdcflowError(f"storage source: stop-at-checkpoint is set but {self.files.full('metadata')} "
                               "does not exist")

    # ------------------------------------------------------------------ discovery
    def _versions(self) -> list[int]:
        versions = {int(n) for n, d in self.files.listdir(f"{self.schema}/{self.table}") if d and n.isdigit()}
        for name, _ in self.files.listdir(layout.table_schema_dir(self.schema, self.table)):
            parsed = schemafile.parse_name(name)
            if parsed is not None:
                versions.add(parsed[0])
        return sorted(versions)

    def _read_schema_file(self, path: str) -> schemafile.SchemaFile:
        try:
            return schemafile.parse(self.files.full(path), self.files.read(path) or b"")
        except schemafile.SchemaFileError as e:
            raise StorageReadError(str(e)) from None

    def _schema_file(self, version: int) -> schemafile.SchemaFile:
        hit = self._schema_files.get(version)
        if hit is not None:
            return hit
        sdir = layout.table_schema_dir(self.schema, self.table)
        names = [n for n, _ in self.files.listdir(sdir) if (p := schemafile.parse_name(n)) and p[0] == version]
        # the layout of TiCDC v6.5.0-7.0: the version directory holds schema.json
        legacy = f"{self.schema}/{self.table}/{version}/{schemafile.LEGACY_SCHEMA_FILE}"
        if names:
            path = f"{sdir}/{sorted(names)[-1]}"
        elif self.files.exists(legacy):
            path = legacy
        else:
            raise StorageReadError(f"storage: no schema file schema_{version}_*.json in {self.files.full(sdir)} "
                                   f"(nor {self.files.full(legacy)}) for table version {version}")
        sf = self._read_schema_file(path)
        if sf.table is None or sf.schema != self.schema or sf.table_name != self.table:
            raise StorageReadError(f"storage: {self.files.full(path)} describes {sf.schema}.{sf.table_name}, "
                                   f"not {self.schema}.{self.table}")
        table = self._elements_carried(
            schemafile.with_ddl_elements(dataclasses.replace(sf.table, version=version), sf.query), version)
        if self.partition_id is not None:
            table = dataclasses.replace(table, partition=int(self.partition_id))
        sf = dataclasses.replace(sf, table_version=version, table=table)
        self._schema_files[version] = sf
        return sf

    def _database_ddl(self, version: int, name: str) -> DDLEvent:
        """The DDL of a database schema file (``{schema}/meta/schema_{version}_{crc}.json``)."""
        sf = self._read_schema_file(f"{layout.database_schema_dir(self.schema)}/{name}")
        if sf.table is not None or sf.schema != self.schema:
            raise StorageReadError(f"storage: {self.files.full(layout.database_schema_dir(self.schema))}/{name} "
                                   f"describes {sf.schema}.{sf.table_name}, not the database {self.schema}")
        return DDLEvent(self.schema, "", sf.query, version, sf.ddl_type or None)

    def _elements_carried(self, table: TableSchema, version: int) -> TableSchema:
        """ENUM/SET members for columns this version's DDL does not define: a column a DDL leaves
        alone keeps its definition, so the previous version's members (from its DDL, or carried
        further) still hold while the column keeps its name and type."""
        missing = [c for c in table.columns if c.type in ("ENUM", "SET") and not c.elements]
        earlier = [v for v in self._versions() if v < version] if missing else []
        if not earlier:
            return table
        try:
            for v in earlier:  # oldest first: each finds its predecessor done (no deep recursion)
                if v not in self._schema_files:
                    self._schema_file(v)
        except StorageReadError:
            return table  # an unreadable older version is reported when it is read
        prev = self._schema_files[earlier[-1]].table
        found = {c.name: prev.columns[prev.index[c.name]].elements for c in missing if c.name in prev.index
                 and prev.columns[prev.index[c.name]].type == c.type}
        if not any(found.values()):
            return table
        return dataclasses.replace(table, index={}, columns=tuple(
            dataclasses.replace(c, elements=found[c.name]) if found.get(c.name) else c for c in table.columns))

    def _data_files(self, version: int) -> list[tuple[str, int, str]]:
        """(date, index, relative path) of a version's data files, in reading order. The date
        directories present are read whatever ``date-separator`` says (none: files in the
        version or partition directory; year, month or day directories)."""
        base = f"{self.schema}/{self.table}/{version}"
        if self.partition_id is not None:
            base += f"/{self.partition_id}"
        ext = self.settings.extension
        entries = self.files.listdir(base)
        dirs, others = [("", base, entries)], set()
        for n, d in entries:
            if d and any(layout.is_date_dir(n, sep) for sep in layout.DATE_SEPARATORS):
                dirs.append((n, f"{base}/{n}", None))
        out = []
        for date, rel, listing in sorted(dirs, key=lambda d: d[0]):
            for name, is_dir in self.files.listdir(rel) if listing is None else listing:
                parsed = layout.parse_data_file(name)
                if parsed is None or is_dir:
                    continue
                if parsed[1] == ext:
                    out.append((date, parsed[0], f"{rel}/{name}"))
                else:
                    others.add(self.files.full(f"{rel}/{name}"))
        if others and not out:
            theirs = next(f for f, e in layout.EXTENSIONS.items() if e != ext)
            raise StorageReadError(f"storage: {sorted(others)[0]} is a {theirs} data file but the source reads "
                                   f"protocol {self.settings.format} (set protocol: {theirs})")
        out.sort()
        return out

    def _scan(self) -> bool:
        """Queue the next file's (or DDL's) records after the cursor; False when nothing new exists.

        A database DDL comes before the first table version at or after its version (as TiCDC's
        consumer orders them); one newer than every table version comes after the files read."""
        c = self.cursor
        dbs = database_versions(self.files, self.schema)
        pending = sorted(v for v in dbs if v > c.db_done
                         and (self.checkpoint is None or v < self.checkpoint))

        def database_ddl() -> bool:
            v = pending[0]
            at = dataclasses.replace(c, db=v)
            self._chunk = _Chunk(at, [self._database_ddl(v, dbs[v])], 0, ddl=True)
            return True

        if not self.table:
            return database_ddl() if pending else False
        for version in self._versions():
            if version < c.version:
                continue
            if self.checkpoint is not None and version >= self.checkpoint:
                break
            if version > c.version and pending and pending[0] <= version:
                return database_ddl()
            sf = self._schema_file(version)
            if version > c.version and sf.query:
                ev = DDLEvent(self.schema, self.table, sf.query, version, sf.ddl_type or None, sf.table)
                self._chunk = _Chunk(_Cursor(version, 0, db=c.db), [ev], 0, ddl=True)
                return True
            for date, index, rel in self._data_files(version):
                at = _Cursor(version, 1, date, index, 0, db=c.db)
                if (version, 1, date, index) < (c.version, c.kind, c.date, c.index):
                    continue
                key = (version, date, index)
                skip = c.row if (version, 1, date, index) == (c.version, c.kind, c.date, c.index) else 0
                if skip and key in self._read_rows and self._read_rows[key] <= skip:
                    continue  # files never change: this one is fully read
                rows = self._decode(rel, sf.table)
                self._read_rows = {key: len(rows)}
                if len(rows) <= skip:
                    continue
                self._chunk = _Chunk(at, rows, skip)
                return True
        return database_ddl() if pending else False

    def _decode(self, rel: str, table: TableSchema) -> "list | CsvColumns":
        data = self.files.read(rel) or b""
        full = self.files.full(rel)
        s = self.settings
        try:
            if s.format == "csv":
                return CsvDecoder(table, s.csv, source=full).decode_columns(data)
            # Schema files carry no ENUM/SET members: for those columns the message's mysqlType knows more.
            hint = dataclasses.replace(table, columns=tuple(
                c for c in table.columns if c.type not in ("ENUM", "SET") or c.elements), index={})
            decoder = CanalJsonDecoder({table.collection: hint})
            term = s.csv.terminator.encode()
            lines = data.split(term)
            if lines and not lines[-1]:
                lines.pop()
            out = []
            for n, line in enumerate(lines, 1):
                try:
                    ev = decoder.decode(line)
                except CodecError as e:
                    raise StorageReadError(f"storage: {full} line {n}: {e}") from None
                if type(ev) is RowChange and self.partition_id is not None:
                    ev.table = dataclasses.replace(ev.table, partition=int(self.partition_id))
                out.append(ev)
            return out
        except CodecError as e:
            raise StorageReadError(f"storage: {e}") from None

    # ------------------------------------------------------------------ read
    def read(self, max_records: int) -> list[Record] | None:
        if not self.schema:
            now = time.monotonic()
            if now >= self._next_warning:  # looked at (and said) once per interval
                self._next_warning = now + ROOT_WARNING_INTERVAL
                if self._root_missing(self.files):
                    log.warning("storage source %s: %s does not exist; nothing to read", self.id or "storage",
                                self.files.root)
            return None if self.stop_at_checkpoint else []
        out: list[Record] = []
        count = 0
        while count < max_records:
            chunk = self._chunk
            if chunk is None or chunk.next >= len(chunk):
                self._chunk = None
                if count:
                    break
                if self._done:
                    return None
                now = time.monotonic()
                if now < self._next_scan:
                    return []
                if not self._scan():
                    if self.stop_at_checkpoint:
                        self._done = True
                        return None
                    self._next_scan = now + self.poll_interval
                    self._caught_up = True
                    return []
                if self.stop_at_checkpoint:
                    self._cut_at_checkpoint(self._chunk)
                continue
            self._caught_up = False
            start = chunk.next
            end = min(len(chunk), start + max_records - count)
            chunk.next = end
            count += end - start
            self.cursor = chunk.cursor_at(end)
            records = chunk.records(start, end, self._schema_store)
            out += records
            if records:
                self._last = records[-1].position
        return out

    def _cut_at_checkpoint(self, chunk: "_Chunk") -> None:
        """Drop rows at or past the checkpoint; a table's commit ts only grow, so the rest is later still."""
        cp = self.checkpoint
        for k in range(chunk.next, len(chunk)):
            ts = chunk.commit_ts_at(k)
            if ts and ts >= cp:
                chunk.truncate(k)
                self._done = True
                return

    def lag(self) -> int | None:
        """0 right after a scan found no file (or DDL) after the cursor; otherwise unknown."""
        return 0 if self._caught_up and self._chunk is None else None

    def stop(self) -> bytes | None:
        return self._last


__all__ = ["StorageSource", "StorageReadError", "StorageRootError", "discover_streams"]
