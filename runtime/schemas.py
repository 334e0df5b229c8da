"""Schema store with Confluent semantics.

Subjects hold numbered versions; ids come from one global sequence; the same
schema text registered again under a subject returns the existing version, and
the same schema under another subject reuses its id (Confluent does both). The
store is a SQLite file in the state directory, so several processes of one
pipeline (driver, executors, standalone plugins via the host) share it.

When the state directory is an object-store prefix (a cluster without a shared
filesystem, where SQLite must not go), the same store keeps its rows as objects
under ``<state>/schemas/`` instead (``ObjectSchemaStore``, the backend
``open_store`` picks for a URI): one object per schema id, per fingerprint and per
subject version, each created with a create-only write, so two writers cannot both
get a version or an id.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import random
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

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
        fp = fingerprint(text, type)
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
        fp = fingerprint(text, type)
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
    same SQLite file (or object-store prefix) through ``CDCFLOW_SCHEMA_STORE``; a standalone plugin gets a
    client of the host's store instead (``set_default_store``). Without either,
    an in-memory store.
    """
    global _default
    with _default_lock:
        if _default is None:
            import os

            _default = open_store(os.environ.get(STORE_ENV))
        return _default


def set_default_store(store: SchemaStore | None) -> None:
    global _default
    with _default_lock:
        _default = store


# -- the object-store backend ------------------------------------------------------
#: options (``engine.state-options``) of the object-store locations this process knows, by location
_object_options: dict[str, dict[str, Any]] = {}


def register_object_store(location: str, options: Mapping[str, Any]) -> None:
    """Remember the options of an object-store schema location (the state directory does, in every
    process it reaches), so ``open_store`` can open it by its URI alone."""
    _object_options[location] = dict(options)


def open_store(location: str | None) -> SchemaStore:
    """The store at ``location``: a SQLite file, an object-store prefix (a URI), or memory (None)."""
    from .objectstore import is_object_uri

    if location and is_object_uri(location):
        return ObjectSchemaStore(location, _object_options.get(location))
    return SchemaStore(location or None)


def fingerprint(text: str, type: str = AVRO) -> str:
    """What recognises the same schema (canonical for Avro, the text otherwise)."""
    canon = canonical(text) if type == AVRO else text
    return hashlib.sha256(f"{type}\0{canon}".encode()).hexdigest()


def _json(data: bytes | None, where: str) -> dict:
    try:
        doc = json.loads(data) if data is not None else None
    except ValueError as e:
        raise SchemaError(f"schema store object {where} is unreadable: {e}") from None
    if not isinstance(doc, dict):
        raise SchemaError(f"schema store object {where} is unreadable: not a JSON object")
    return doc


class ObjectSchemaStore(SchemaStore):
    """The schema store's backend for an object-store state directory.

    Objects under the location (all JSON)::

        ids/<id>.json                  {"type", "text", "fingerprint"}   the global id sequence
        fingerprints/<sha256>.json     {"id"}                            the id of a schema text
        subjects/<subject>/<n>.json    {"id"}                            version n of a subject
        subjects/<subject>/deleted.json {"through": n}                   versions <= n are deleted
        config/<subject>.json          {"compatibility"}                 ("%00global": the default)

    Ids, fingerprints and versions are created with a create-only write (``FileStore.put_new``):
    a writer that loses the race for number n lists again and takes the next one, or finds the
    winner registered the same schema. An id whose fingerprint another writer claimed first stays
    unused (ids may have gaps, as in Confluent's registry). Written objects never change (but
    ``deleted.json`` and ``config``), so this process caches what it read; a subject's latest
    version is listed each time. Store failures are the storage layer's ``InfrastructureError``.
    """

    def __init__(self, location: str, options: Mapping[str, Any] | None = None):  # noqa: D107 - no sqlite
        from .objectstore import open_prefix

        self.path = location
        self._files = open_prefix(location, options)
        self._lock = threading.Lock()
        self._by_id: dict[int, tuple[str, str]] = {}
        self._by_sv: dict[tuple[str, int], StoredSchema] = {}
        self._version_ids: dict[tuple[str, int], int] = {}
        self._fp_ids: dict[str, int] = {}
        self._registered: dict[tuple[str, str], StoredSchema] = {}

    def close(self) -> None:
        pass

    @staticmethod
    def _subject_dir(subject: str) -> str:
        return "subjects/" + (urllib.parse.quote(subject, safe="") or "%00")

    def _read(self, rel: str) -> dict | None:
        data = self._files.read(rel)
        return None if data is None else _json(data, self._files.where(rel))

    # -- the rows ---------------------------------------------------------------------
    def _listing(self, subject: str) -> tuple[list[int], int]:
        """(every version number of ``subject``, ascending; the highest deleted one, 0 if none)."""
        versions, deleted = [], False
        for name, is_dir in self._files.listdir(self._subject_dir(subject)):
            if is_dir or not name.endswith(".json"):
                continue
            if name == "deleted.json":
                deleted = True
            elif name[:-5].isdigit():
                versions.append(int(name[:-5]))
        through = 0
        if deleted:
            through = int((self._read(f"{self._subject_dir(subject)}/deleted.json") or {}).get("through", 0))
        return sorted(versions), through

    def _version_id(self, subject: str, version: int) -> int | None:
        key = (subject, version)
        sid = self._version_ids.get(key)
        if sid is None:
            doc = self._read(f"{self._subject_dir(subject)}/{version}.json")
            if doc is None:
                return None
            sid = self._version_ids[key] = int(doc["id"])
        return sid

    def _schema_id(self, fp: str, type: str, text: str) -> int:
        """The id of the schema with fingerprint ``fp``, allocated now if it has none."""
        sid = self._fp_ids.get(fp)
        if sid is not None:
            return sid
        doc = self._read(f"fingerprints/{fp}.json")
        if doc is None:
            body = json.dumps({"type": type, "text": text, "fingerprint": fp}).encode()
            while True:
                taken = [int(n[:-5]) for n, d in self._files.listdir("ids") if not d and n[:-5].isdigit()]
                candidate = max(taken, default=0) + 1
                if self._files.put_new(f"ids/{candidate}.json", body):
                    break
            if self._files.put_new(f"fingerprints/{fp}.json", json.dumps({"id": candidate}).encode()):
                doc = {"id": candidate}
            else:  # another writer registered the same schema first: its id wins
                doc = self._read(f"fingerprints/{fp}.json") or {"id": candidate}
        sid = self._fp_ids[fp] = int(doc["id"])
        return sid

    # -- writes -----------------------------------------------------------------------
    def register(self, subject: str, text: str, type: str = AVRO) -> StoredSchema:
        if not subject:
            raise SchemaError("subject must not be empty")
        fp = fingerprint(text, type)
        hit = self._registered.get((subject, fp))
        if hit is not None:
            return hit
        sid = self._schema_id(fp, type, text)
        while True:
            versions, through = self._listing(subject)
            found = next((v for v in versions if v > through and self._version_id(subject, v) == sid), None)
            if found is None:
                found = (versions[-1] if versions else 0) + 1
                if not self._files.put_new(f"{self._subject_dir(subject)}/{found}.json",
                                           json.dumps({"id": sid}).encode()):
                    continue  # another writer took that version: look again
                self._version_ids[(subject, found)] = sid
            stored = self._registered[(subject, fp)] = StoredSchema(subject, found, sid, type, text)
            self._by_sv[(subject, found)] = stored
            self._by_id[sid] = (type, text)
            return stored

    def set_compatibility(self, subject: str | None, level: str) -> None:
        name = urllib.parse.quote(subject or "", safe="") or "%00global"
        self._files.put_replace(f"config/{name}.json", json.dumps({"compatibility": level}).encode())

    def compatibility(self, subject: str | None) -> str | None:
        name = urllib.parse.quote(subject or "", safe="") or "%00global"
        doc = self._read(f"config/{name}.json")
        return None if doc is None else doc.get("compatibility")

    def delete_subject(self, subject: str) -> list[int]:
        versions, through = self._listing(subject)
        live = [v for v in versions if v > through]
        if live:
            self._files.put_replace(f"{self._subject_dir(subject)}/deleted.json",
                                    json.dumps({"through": live[-1]}).encode())
        with self._lock:
            for v in live:
                self._by_sv.pop((subject, v), None)
            for key in [k for k in self._registered if k[0] == subject]:
                del self._registered[key]
        return live

    # -- reads ------------------------------------------------------------------------
    def get(self, subject: str, version: int) -> StoredSchema:
        """Version ``-1`` (or 0) means the latest."""
        if version > 0:
            hit = self._by_sv.get((subject, version))
            if hit is not None:
                return hit
        versions, through = self._listing(subject)
        live = [v for v in versions if v > through]
        wanted = version if version > 0 else (live[-1] if live else None)
        if wanted not in live:
            raise SchemaError(f"schema subject {subject!r} version {version} not found")
        sid = self._version_id(subject, wanted)
        type_, text = self.by_id(sid)
        out = self._by_sv[(subject, wanted)] = StoredSchema(subject, wanted, sid, type_, text)
        return out

    def by_id(self, schema_id: int) -> tuple[str, str]:
        hit = self._by_id.get(schema_id)
        if hit is not None:
            return hit
        doc = self._read(f"ids/{schema_id}.json")
        if doc is None:
            raise SchemaError(f"schema id {schema_id} not found")
        self._by_id[schema_id] = (doc["type"], doc["text"])
        return self._by_id[schema_id]

    def subjects(self) -> list[str]:
        names = [urllib.parse.unquote(n) for n, is_dir in self._files.listdir("subjects") if is_dir]
        return sorted(s for s in names if self.versions(s))

    def versions(self, subject: str) -> list[int]:
        versions, through = self._listing(subject)
        return [v for v in versions if v > through]

    def lookup(self, subject: str, text: str, type: str = AVRO) -> StoredSchema | None:
        doc = self._read(f"fingerprints/{fingerprint(text, type)}.json")
        if doc is None:
            return None
        sid = int(doc["id"])
        for v in reversed(self.versions(subject)):
            if self._version_id(subject, v) == sid:
                return self.get(subject, v)
        return None
