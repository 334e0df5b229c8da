"""File-level writing on any fsspec file system: index reservation, no overwrite, no partial files.

A data file becomes visible complete or not at all: on local disk it is written
under a hidden temporary name, fsynced, then hard-linked to its final name
(``link`` fails if the name exists, so two writers can never overwrite each
other) and the directory fsynced; on object stores an object appears only when
its upload completes. ``meta/CDC.index`` names the file before the file exists,
as TiCDC does, so a writer that restarts skips past it.
"""

from __future__ import annotations

import os

import orjson

from cdcflow.durable import create_file, replace_file
from cdcflow.errors import CdcflowError

from .layout import INDEX_DIR, INDEX_FILE, METADATA_FILE, data_file_name, index_path, parse_data_file


class StorageWriteError(CdcflowError):
    """Writing a file of the layout failed (names the path)."""


class FileStore:
    """The root of a layout on one file system; paths passed in are relative to the root."""

    def __init__(self, fs, root: str, local: bool):
        self.fs = fs
        self.root = root
        self.local = local

    def full(self, rel: str) -> str:
        return f"{self.root}/{rel}" if self.root else rel

    # -- reading helpers (also used by the source)
    def read(self, rel: str) -> bytes | None:
        path = self.full(rel)
        try:
            if self.local:
                with open(path, "rb") as f:
                    return f.read()
            return self.fs.cat_file(path)
        except FileNotFoundError:
            return None

    def listdir(self, rel: str) -> list[tuple[str, bool]]:
        """(name, is_directory) of the entries of ``rel``; [] when it does not exist."""
        path = self.full(rel)
        if self.local:
            try:
                with os.scandir(path) as it:
                    return [(e.name, e.is_dir()) for e in it]
            except (FileNotFoundError, NotADirectoryError):
                return []
        try:
            entries = self.fs.ls(path, detail=True, refresh=True) if _takes_refresh(self.fs) \
                else self.fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        prefix = path.rstrip("/") + "/"
        for e in entries:
            name = e["name"].rstrip("/")
            if name.startswith(prefix):
                name = name[len(prefix):]
            else:
                name = name.rsplit("/", 1)[-1]
            if name and "/" not in name:
                out.append((name, e.get("type") == "directory"))
        return out

    def exists(self, rel: str) -> bool:
        path = self.full(rel)
        return os.path.exists(path) if self.local else self.fs.exists(path)

    # -- writing
    def put_replace(self, rel: str, data: bytes) -> None:
        """Write a small file that is replaced as a whole (CDC.index, metadata, schema files)."""
        path = self.full(rel)
        try:
            if self.local:
                replace_file(path, data)
            else:
                self.fs.pipe_file(path, data)
        except OSError as e:
            raise StorageWriteError(f"storage: cannot write {path}: {e}") from e

    def put_new(self, rel: str, data: bytes) -> bool:
        """Create ``rel`` with ``data`` unless it exists; False when it exists (nothing written)."""
        path = self.full(rel)
        try:
            if self.local:
                return create_file(path, data)
            if self.fs.exists(path):
                return False
            self.fs.pipe_file(path, data)
            return True
        except OSError as e:
            raise StorageWriteError(f"storage: cannot write {path}: {e}") from e


def _takes_refresh(fs) -> bool:
    return getattr(fs, "protocol", None) in ("s3", "s3a", ("s3", "s3a"), "gcs", ("gcs", "gs"), "abfs", "az")


class DataDirectory:
    """Numbering of the data files of one data directory."""

    def __init__(self, store: FileStore, rel: str, width: int, extension: str):
        self.store = store
        self.rel = rel
        self.width = width
        self.extension = extension
        self.next_index = self._first_free()

    def _first_free(self) -> int:
        """TiCDC's rule: the index file's number if that file is free, else the one after;
        also past every data file present (a second writer's files)."""
        n = 1
        raw = self.store.read(index_path(self.rel))
        if raw:
            parsed = parse_data_file(raw.decode("utf-8", "replace").strip())
            if parsed is not None:
                n = parsed[0] + 1 if self.store.exists(f"{self.rel}/{raw.decode().strip()}") else parsed[0]
        for name, is_dir in self.store.listdir(self.rel):
            parsed = parse_data_file(name)
            if parsed is not None and not is_dir:
                n = max(n, parsed[0] + 1)
        return n

    def write(self, data: bytes) -> str:
        """Write one complete data file under the next free index; returns its relative path."""
        while True:
            name = data_file_name(self.next_index, self.width, self.extension)
            self.next_index += 1
            self.store.put_replace(f"{self.rel}/{INDEX_DIR}/{INDEX_FILE}", (name + "\n").encode())
            if self.store.put_new(f"{self.rel}/{name}", data):
                return f"{self.rel}/{name}"


def read_checkpoint(store: FileStore) -> int | None:
    raw = store.read(METADATA_FILE)
    if not raw:
        return None
    try:
        return int(orjson.loads(raw)["checkpoint-ts"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise StorageWriteError(f"storage: {store.full(METADATA_FILE)} is not {{\"checkpoint-ts\": N}}: {raw[:100]!r}")


def write_checkpoint(store: FileStore, ts: int) -> int:
    """Advance ``metadata`` to ``ts`` (never backwards); returns the value kept.

    Locally the read-compare-replace holds an ``flock`` on the layout's root directory, so two
    writers (Spark tasks of one destination) cannot interleave and land the lower value last; an
    object store has no lock, there the last writer wins (docs/connector-storage.md)."""
    if not store.local:
        return _advance_checkpoint(store, ts)
    import fcntl

    root = store.root or "."
    os.makedirs(root, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return _advance_checkpoint(store, ts)
    finally:
        os.close(fd)  # releases the lock


def _advance_checkpoint(store: FileStore, ts: int) -> int:
    current = read_checkpoint(store)
    if current is not None and current >= ts:
        return current
    store.put_replace(METADATA_FILE, orjson.dumps({"checkpoint-ts": ts}))
    return ts
