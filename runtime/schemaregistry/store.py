"""The registry's view of ``cdcflow.schemas.SchemaStore``: what only the REST API needs.

The engine's store knows live versions; a Confluent registry also lists and reads
soft-deleted versions (``?deleted=true``), deletes single versions, hard-deletes,
forgets subject configs and keeps per-subject modes. Those live here, over the same
SQLite tables (``schemas``, ``versions``, ``config``) plus one ``registry_modes``
table, so the engine keeps one store implementation and the same file serves both.
"""

from __future__ import annotations

import hashlib

from ..schemas import AVRO, SchemaStore, StoredSchema, canonical

_SELECT = ("SELECT v.subject, v.version, s.id, s.type, s.text, v.deleted FROM versions v "
           "JOIN schemas s ON s.id=v.schema_id ")


class RegistryStore(SchemaStore):
    """``SchemaStore`` plus soft-deleted reads, per-version and permanent deletes, modes."""

    _DDL = SchemaStore._DDL + """
            CREATE TABLE IF NOT EXISTS registry_modes (
                subject TEXT PRIMARY KEY,
                mode TEXT NOT NULL
            );
            """

    # -- reads that may include soft-deleted versions --------------------------------------
    def version_states(self, subject: str) -> list[tuple[int, bool]]:
        """Every stored version of ``subject`` (oldest first) with its soft-deleted flag."""
        with self._lock:
            return [(v, bool(d)) for v, d in self._db.execute(
                "SELECT version, deleted FROM versions WHERE subject=? ORDER BY version", (subject,))]

    def get_any(self, subject: str, version: int) -> StoredSchema | None:
        """The version, soft-deleted or not; None when it does not exist (or was hard-deleted)."""
        with self._lock:
            row = self._db.execute(_SELECT + "WHERE v.subject=? AND v.version=?", (subject, version)).fetchone()
        return StoredSchema(*row[:5]) if row else None

    def subject_states(self) -> list[tuple[str, bool]]:
        """Every subject with a stored version, and whether it still has a live one."""
        with self._lock:
            return [(s, bool(live)) for s, live in self._db.execute(
                "SELECT subject, MIN(deleted)=0 FROM versions GROUP BY subject ORDER BY subject")]

    def lookup_any(self, subject: str, text: str, *, deleted: bool) -> StoredSchema | None:
        """The newest version of ``subject`` holding this schema; soft-deleted ones only if asked."""
        found = self.lookup(subject, text)
        if found is not None or not deleted:
            return found
        schema_id = self.id_of(text)
        if schema_id is None:
            return None
        with self._lock:
            row = self._db.execute(_SELECT + "WHERE v.subject=? AND v.schema_id=? ORDER BY v.version DESC LIMIT 1",
                                   (subject, schema_id)).fetchone()
        return StoredSchema(*row[:5]) if row else None

    def id_of(self, text: str) -> int | None:
        """The id this exact schema text got, if it was ever registered."""
        fp = hashlib.sha256(f"{AVRO}\0{canonical(text)}".encode()).hexdigest()
        with self._lock:
            row = self._db.execute("SELECT id FROM schemas WHERE fingerprint=?", (fp,)).fetchone()
        return row[0] if row else None

    def usages(self, schema_id: int, *, deleted: bool) -> list[tuple[str, int]]:
        """(subject, version) pairs that use this id; soft-deleted ones too when ``deleted``."""
        where = "" if deleted else " AND deleted=0"
        with self._lock:
            return [(s, v) for s, v in self._db.execute(
                "SELECT subject, version FROM versions WHERE schema_id=?" + where + " ORDER BY subject, version",
                (schema_id,))]

    def id_in_use(self, schema_id: int) -> bool:
        """An id stays resolvable while any version, soft-deleted or not, refers to it."""
        with self._lock:
            return self._db.execute("SELECT 1 FROM versions WHERE schema_id=? LIMIT 1", (schema_id,)).fetchone() \
                is not None

    # -- deletes -------------------------------------------------------------------------------
    def soft_delete_version(self, subject: str, version: int) -> None:
        with self._lock:
            self._db.execute("UPDATE versions SET deleted=1 WHERE subject=? AND version=?", (subject, version))
            self._by_sv.pop((subject, version), None)

    def hard_delete_versions(self, subject: str, versions: list[int]) -> None:
        """Remove versions for good. The schema row stays: its id is reused if the text comes back."""
        with self._lock:
            self._db.executemany("DELETE FROM versions WHERE subject=? AND version=?",
                                 [(subject, v) for v in versions])
            for v in versions:
                self._by_sv.pop((subject, v), None)

    def delete_compatibility(self, subject: str | None) -> str | None:
        """Forget a subject's (or the global) level; return the level it had."""
        old = self.compatibility(subject)
        with self._lock:
            self._db.execute("DELETE FROM config WHERE subject=?", (subject or "",))
        return old

    # -- modes -----------------------------------------------------------------------------------
    def mode(self, subject: str | None) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT mode FROM registry_modes WHERE subject=?", (subject or "",)).fetchone()
        return row[0] if row else None

    def set_mode(self, subject: str | None, mode: str) -> None:
        with self._lock:
            self._db.execute("INSERT INTO registry_modes(subject, mode) VALUES (?,?) "
                             "ON CONFLICT(subject) DO UPDATE SET mode=excluded.mode", (subject or "", mode))

    def delete_mode(self, subject: str | None) -> str | None:
        old = self.mode(subject)
        with self._lock:
            self._db.execute("DELETE FROM registry_modes WHERE subject=?", (subject or "",))
        return old
