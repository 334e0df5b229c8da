"""Schema store with Confluent semantics.

Subjects hold numbered versions; ids come from one global sequence; the same
schema text registered again under a subject returns the existing version, and
the same schema under another subject reuses its id (Confluent does both). The
store is a SQLite file in the state directory, so several processes of one
pipeline (driver, executors, standalone plugins via the host) share it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import SchemaError

AVRO = "AVRO"


@dataclass(frozen=True)
class StoredSchema:
    subject: str
    version: int
    id: int
    type: str
    text: str

    @property
    def bytes(self) -> bytes:
        return self.text.encode()


def canonical(text: str) -> str:
    """Whitespace-insensitive form used to recognise the same schema."""
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except ValueError as e:
        raise SchemaError(f"schema is not valid JSON: {e}") from None


class SchemaStore:
    """Thread-safe; ``path=None`` keeps everything in memory (tests, one-shot runs)."""

    def __init__(self, path: str | Path | None = None):
        self.path = str(path) if path is not None else ":memory:"
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._init_schema(persistent=path is not None)
        self._by_id: dict[int, tuple[str, str]] = {}
        self._by_sv: dict[tuple[str, int], StoredSchema] = {}

    _DDL = """
            CREATE TABLE IF NOT EXISTS schemas (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                fingerprint TEXT NOT NULL UNIQUE,
                type TEXT NOT NULL,
                text TEXT NOT NULL
            );
            CREATE TABLE IF NOT EXISTS versions (
                subject TEXT NOT NULL,
                version INTEGER NOT NULL,
                schema_id INTEGER NOT NULL REFERENCES schemas(id),
                deleted INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY (subject, version)
            );
            CREATE TABLE IF NOT EXISTS config (
                subject TEXT PRIMARY KEY,
                compatibility TEXT NOT NULL
            );
            """

    def _init_schema(self, persistent: bool) -> None:
        """WAL mode and tables. Executors open the same file at the same moment: switching
        the journal mode can answer SQLITE_BUSY without waiting for the busy timeout, so
        retry for as long as the timeout would have waited."""
        deadline = time.monotonic() + 30
        while True:
            try:
                if not persistent:
                    self._db.execute("PRAGMA journal_mode=MEMORY")
                elif self._db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    self._db.execute("PRAGMA journal_mode=WAL")
                self._db.executescript(self._DDL)
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02 + random.random() * 0.05)

    def close(self) -> None:
        self._db.close()

    # -- writes ---------------------------------------------------------------
    def register(self, subject: str, text: str, type: str = AVRO) -> StoredSchema:
        """Register ``text`` under ``subject``; return the (possibly existing) version."""
        if not subject:
            raise SchemaError("subject must not be empty")
        canon = canonical(text) if type == AVRO else text
        fp = hashlib.sha256(f"{type}\0{canon}".encode()).hexdigest()
        version: int | None = None
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT id FROM schemas WHERE fingerprint=?", (fp,)).fetchone()
                if row is None:
                    sid = db.execute(
                        "INSERT INTO schemas(fingerprint, type, text) VALUES (?,?,?)", (fp, type, text)
                    ).lastrowid
                else:
                    sid = row[0]
                    hit = db.execute(
                        "SELECT version FROM versions WHERE subject=? AND schema_id=? AND deleted=0",
                        (subject, sid),
                    ).fetchone()
                    if hit is not None:
                        db.execute("COMMIT")
                        version = hit[0]
                if version is None:
                    (last,) = db.execute(
                        "SELECT COALESCE(MAX(version), 0) FROM versions WHERE subject=?", (subject,)
                    ).fetchone()
                    version = last + 1
                    db.execute(
                        "INSERT INTO versions(subject, version, schema_id) VALUES (?,?,?)", (subject, version, sid)
                    )
                    db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return self.get(subject, version)  # outside the lock: get() takes it too

    def set_compatibility(self, subject: str | None, level: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO config(subject, compatibility) VALUES (?,?) "
                "ON CONFLICT(subject) DO UPDATE SET compatibility=excluded.compatibility",
                (subject or "", level),
            )

    def compatibility(self, subject: str | None) -> str | None:
        row = self._db.execute("SELECT compatibility FROM config WHERE subject=?", (subject or "",)).fetchone()
        return row[0] if row else None

    def delete_subject(self, subject: str) -> list[int]:
        with self._lock:
            vs = [v for (v,) in self._db.execute(
                "SELECT version FROM versions WHERE subject=? AND deleted=0 ORDER BY version", (subject,))]
            self._db.execute("UPDATE versions SET deleted=1 WHERE subject=?", (subject,))
            for v in vs:
                self._by_sv.pop((subject, v), None)
        return vs

    # -- reads ----------------------------------------------------------------
    def get(self, subject: str, version: int) -> StoredSchema:
        """Version ``-1`` (or 0) means the latest."""
        if version > 0:
            hit = self._by_sv.get((subject, version))
            if hit is not None:
                return hit
        with self._lock:
            if version > 0:
                row = self._db.execute(
                    "SELECT v.version, s.id, s.type, s.text FROM versions v JOIN schemas s ON s.id=v.schema_id "
                    "WHERE v.subject=? AND v.version=? AND v.deleted=0",
                    (subject, version),
                ).fetchone()
            else:
                row = self._db.execute(
                    "SELECT v.version, s.id, s.type, s.text FROM versions v JOIN schemas s ON s.id=v.schema_id "
                    "WHERE v.subject=? AND v.deleted=0 ORDER BY v.version DESC LIMIT 1",
                    (subject,),
                ).fetchone()
        if row is None:
            raise SchemaError(f"schema subject {subject!r} version {version} not found")
        out = StoredSchema(subject, row[0], row[1], row[2], row[3])
        self._by_sv[(subject, out.version)] = out
        return out

    def latest(self, subject: str) -> StoredSchema:
        return self.get(subject, -1)

    def by_id(self, schema_id: int) -> tuple[str, str]:
        """(type, text) of the schema with this id."""
        hit = self._by_id.get(schema_id)
        if hit is not None:
            return hit
        with self._lock:
            row = self._db.execute("SELECT type, text FROM schemas WHERE id=?", (schema_id,)).fetchone()
        if row is None:
            raise SchemaError(f"schema id {schema_id} not found")
        self._by_id[schema_id] = (row[0], row[1])
        return self._by_id[schema_id]

    def subjects(self) -> list[str]:
        with self._lock:
            return [s for (s,) in self._db.execute(
                "SELECT DISTINCT subject FROM versions WHERE deleted=0 ORDER BY subject")]

    def versions(self, subject: str) -> list[int]:
        with self._lock:
            return [v for (v,) in self._db.execute(
                "SELECT version FROM versions WHERE subject=? AND deleted=0 ORDER BY version", (subject,))]

    def lookup(self, subject: str, text: str, type: str = AVRO) -> StoredSchema | None:
        """The version of ``subject`` holding this schema, if any."""
        canon = canonical(text) if type == AVRO else text
        fp = hashlib.sha256(f"{type}\0{canon}".encode()).hexdigest()
        with self._lock:
            row = self._db.execute(
                "SELECT v.version FROM versions v JOIN schemas s ON s.id=v.schema_id "
                "WHERE v.subject=? AND s.fingerprint=? AND v.deleted=0",
                (subject, fp),
            ).fetchone()
        return self.get(subject, row[0]) if row else None


# -- the store this process uses ---------------------------------------------------
_default: SchemaStore | None = None
_default_lock = threading.Lock()
STORE_ENV = "CDCFLOW_SCHEMA_STORE"


def default_store() -> SchemaStore:
    """The store plugins in this process register and look up schemas in.

    The engine points every process of a pipeline (driver and executors) at the
    same SQLite file through ``CDCFLOW_SCHEMA_STORE``; a standalone plugin gets a
    client of the host's store instead (``set_default_store``). Without either,
    an in-memory store.
    """
    global _default
    with _default_lock:
        if _default is None:
            import os

            path = os.environ.get(STORE_ENV)
            _default = SchemaStore(path or None)
        return _default


def set_default_store(store: SchemaStore | None) -> None:
    global _default
    with _default_lock:
        _default = store
