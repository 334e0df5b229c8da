"""File-level writing on any fsspec file system: index reservation, no overwrite, no partial files.

A data file or schema file is created only if its name is free, atomically, on every backend,
so two writers (Spark tasks, or two runs) can never replace each other's file:

- local disk: written under a hidden temporary name, fsynced, hard-linked to its final name
  (``link`` fails if the name exists), directory fsynced (``cdcflow.durable``); temporary
  files left by a killed writer are removed by the next writer into that directory;
- S3: ``PutObject`` with ``If-None-Match: *`` (answered 412 when the key exists);
  GCS: upload with ``ifGenerationMatch=0``; Azure: ``upload_blob(overwrite=False)``
  (``If-None-Match: *``); memory: exclusive create. An object appears only once its upload
  completes.

The root ``metadata`` checkpoint is advanced by a compare-and-swap with the same conditional
writes: read with its version (S3 and Azure: ETag; GCS: generation), written only if the store
still holds that version (``If-Match``; ``ifGenerationMatch``; ``If-None-Match: *`` while absent),
read again when refused; locally the read-compare-replace holds an ``flock`` on the root.

A writer that finds its number taken lists the directory and continues past the highest file
present. ``meta/CDC.index`` names the file before the file exists, as TiCDC does, so a writer
that restarts skips past it; numbering never relies on it alone (the directory is listed too).

Failures are sorted by cause: a path the store cannot hold (a name too long) is the record's
(``UnsafeNameError``, a ``RecordError``); any other failure of the disk or the object store is
``StorageUnavailableError`` (an ``InfrastructureError``): never a record's fault. Every object
store call has a deadline (``request-timeout``), and one that waits longer than a few seconds
logs what it waits for.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import random
import re
import threading
import time
import urllib.parse

import orjson

from cdcflow.durable import create_file, remove_stale_temps, replace_file
from cdcflow.errors import CdcflowError, InfrastructureError
from cdcflow.params import REDACTOR

from .layout import INDEX_DIR, INDEX_FILE, METADATA_FILE, UnsafeNameError, data_file_name, index_path, \
    parse_data_file

log = logging.getLogger("cdcflow.connectors.storage")

#: longest object key S3, GCS and Azure Blob take (UTF-8 bytes, bucket or container excluded)
MAX_KEY_BYTES = 1024
#: a call waiting this long is logged (then again every as long), naming what it waits for
WAIT_LOG_AFTER = 5.0
# errors of the caller's own code: never turned into a service failure
_PROGRAM_ERRORS = (TypeError, AttributeError, NameError, AssertionError, NotImplementedError, KeyError)
# what a read of an absent path raises (the caller answers "nothing there")
_MISSING = (FileNotFoundError, NotADirectoryError)
# object-store answers that mean "that name is taken" to a create-only write
_CONFLICT_CODES = ("PreconditionFailed", "ConditionalRequestConflict", "BlobAlreadyExists", "412", "409")


class StorageWriteError(CdcflowError):
    """A file of the layout holds what cdcflow cannot use (names the path)."""


class StorageUnavailableError(InfrastructureError):
    """The disk or the object store failed (full, read-only, unreachable, timed out): never a record's fault."""


class FileStore:
    """The root of a layout on one file system; paths passed in are relative to the root.

    ``deadline``: longest one object-store call may take (seconds, retries included), None
    for none; ``where``: how errors and logs name the store (no credentials).
    """

    def __init__(self, fs, root: str, local: bool, *, protocol: str = "", deadline: float | None = None,
                 endpoint: str | None = None, writer: bool = False):
        self.fs = fs
        self.root = root
        self.local = local
        self.protocol = protocol or ("file" if local else _protocol_of(fs))
        self.deadline = deadline if not local and _is_async(fs) else None
        self.endpoint = endpoint
        self.writer = writer  # a writer also sweeps the directories it lists (see ``_sweep``)
        self._swept: set[str] = set()

    @classmethod
    def of(cls, settings, writer: bool = False) -> "FileStore":
        """The store of resolved ``StorageSettings`` (file system opened, timeouts applied)."""
        return cls(settings.open_filesystem(), settings.root, settings.protocol == "file",
                   protocol=settings.protocol, deadline=settings.request_timeout,
                   endpoint=_public_endpoint(settings.storage_options.get("endpoint_url")), writer=writer)

    def full(self, rel: str) -> str:
        return f"{self.root}/{rel}" if self.root else rel

    def where(self, rel: str) -> str:
        """``rel`` as a URI for messages: scheme, bucket and key, plus the endpoint host; no secrets."""
        if self.local:
            return self.full(rel)
        uri = f"{_SCHEME.get(self.protocol, self.protocol)}://{self.full(rel)}"
        return f"{uri} at {self.endpoint}" if self.endpoint else uri

    def _check_key(self, rel: str) -> None:
        """Object stores refuse keys over 1024 bytes (not every S3-compatible server says so: checked here)."""
        key = self.full(rel).split("/", 1)[-1]
        if len(key) * 4 > MAX_KEY_BYTES and len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
            raise self._failure("PUT", rel, OSError(errno.ENAMETOOLONG, f"object key longer than {MAX_KEY_BYTES} bytes"))

    # -- calls, with their failures sorted by cause
    def _call(self, op: str, rel: str, fn, *args, expected: tuple = (), **kwargs):
        """``fn(full path, *args, **kwargs)`` with the deadline, the wait log and the error mapping;
        ``expected`` exceptions pass through (the caller handles them)."""
        if self.deadline is not None:
            kwargs["timeout"] = self.deadline
        watch = _Watch(op, self, rel)
        try:
            return fn(self.full(rel), *args, **kwargs)
        except expected:
            raise
        except _PROGRAM_ERRORS:
            raise
        except Exception as e:  # noqa: BLE001 - sorted into record vs service failures here
            raise self._failure(op, rel, e) from e
        finally:
            watch.done()

    def _failure(self, op: str, rel: str, e: Exception) -> CdcflowError:
        where = self.where(rel)
        if isinstance(e, OSError) and e.errno in (errno.ENAMETOOLONG, errno.EILSEQ):
            return UnsafeNameError(f"storage: the path {where!r} cannot be stored ({_reason(e)}); "
                                   "a schema or table name is too long or not valid for the store")
        service = "disk" if self.local else "object-store"
        what = "timed out" if _is_timeout(e) else "failed"
        return StorageUnavailableError(f"storage: {op} {where} {what}: {_reason(e)}", service=service,
                                       endpoint=where)

    # -- reading helpers (also used by the source)
    def read(self, rel: str) -> bytes | None:
        try:
            if self.local:
                return self._call("read", rel, _read_local, expected=_MISSING)
            return self._call("GET", rel, self.fs.cat_file, expected=_MISSING)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def listdir(self, rel: str) -> list[tuple[str, bool]]:
        """(name, is_directory) of the entries of ``rel``; [] when it does not exist."""
        path = self.full(rel)
        if self.local:
            if self.writer:
                self._sweep(rel)
            try:
                return self._call("list", rel, _list_local, expected=_MISSING)
            except (FileNotFoundError, NotADirectoryError):
                return []
        try:
            if _takes_refresh(self.fs):
                entries = self._call("LIST", rel, self.fs.ls, detail=True, refresh=True, expected=_MISSING)
            else:
                entries = self._call("LIST", rel, self.fs.ls, detail=True, expected=_MISSING)
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
        if self.local:
            return self._call("stat", rel, os.path.exists)
        return self._call("HEAD", rel, self.fs.exists)

    # -- writing
    def put_replace(self, rel: str, data: bytes) -> None:
        """Write a small file that is replaced as a whole (CDC.index, metadata)."""
        if self.local:
            self._sweep(os.path.dirname(rel))
            self._call("write", rel, replace_file, data)
        else:
            self._check_key(rel)
            self._call("PUT", rel, self.fs.pipe_file, data)

    def put_new(self, rel: str, data: bytes) -> bool:
        """Create ``rel`` with ``data`` unless it exists; False when it exists (nothing written).

        Atomic on every backend: the store itself refuses an existing name (see the module doc).
        """
        if self.local:
            self._sweep(os.path.dirname(rel))
            return self._call("write", rel, create_file, data)
        if self.protocol == "abfs":
            return self._put_if(rel, data, overwrite=False)
        return self._put_if(rel, data, mode="create")

    def read_versioned(self, rel: str) -> tuple[bytes | None, str | None]:
        """The content of object ``rel`` and the store's version of it (S3 and Azure: ETag; GCS:
        generation); (None, None) when it does not exist.

        The version is read first, then the content: the content is that version or a newer one,
        and a write conditioned on the version (``put_version``) is refused if a newer one exists.
        """
        self.fs.invalidate_cache(self.full(rel))
        try:
            info = self._call("HEAD", rel, self.fs.info, expected=_MISSING)
        except _MISSING:
            return None, None
        version = info.get(_VERSION_FIELD.get(self.protocol, ""))
        if version is None:
            raise self._failure("HEAD", rel, OSError(f"the store gave no {_VERSION_FIELD.get(self.protocol, 'version')} "
                                                     "for a conditional write"))
        data = self.read(rel)
        return (data, str(version)) if data is not None else (None, None)

    def put_version(self, rel: str, data: bytes, version: str | None) -> bool:
        """Replace object ``rel`` only if the store still holds ``version`` of it (None: only if it
        does not exist); False when it does not (nothing written). The store decides, atomically:
        S3 ``If-Match: <etag>``, GCS ``ifGenerationMatch=<generation>``, Azure ``If-Match: <etag>``;
        without a version, the create-only write of ``put_new``."""
        if version is None:
            return self.put_new(rel, data)
        if self.protocol == "s3":
            return self._put_if(rel, data, IfMatch=version, gone=_MISSING)
        if self.protocol == "gcs":
            return self._put_if(rel, data, generation=version, write=functools.partial(_gcs_put_generation, self.fs))
        if self.protocol == "abfs":
            from azure.core import MatchConditions

            return self._put_if(rel, data, etag=version, match_condition=MatchConditions.IfNotModified,
                                gone=_MISSING)
        raise self._failure("PUT", rel, OSError(f"no conditional write on {self.protocol!r}"))

    def _put_if(self, rel: str, data: bytes, write=None, gone: tuple = (), **condition) -> bool:
        """A conditional PUT (``condition``: the library's keywords); False when the store refuses
        it on its condition (412/409; ``gone``: the errors of an object that no longer exists,
        when its version was required)."""
        self._check_key(rel)
        try:
            self._call("PUT", rel, write or self.fs.pipe_file, data, **condition,
                       expected=(FileExistsError,) + gone)
            return True
        except (FileExistsError,) + gone:
            return False
        except StorageUnavailableError as e:
            if _is_conflict(e.__cause__):
                return False
            raise

    def _sweep(self, rel_dir: str) -> None:
        """The first time a writer writes into (or lists) directory ``rel_dir``, remove the temporary
        files killed writers left there."""
        directory = self.full(rel_dir) if rel_dir else self.root
        if directory in self._swept:
            return
        self._swept.add(directory)
        for name in self._call("sweep", rel_dir, lambda _: remove_stale_temps(directory)):
            log.info("storage: removed %s, left by a writer that was stopped", os.path.join(directory, name))


class _Watch:
    """Registers a call with the process's watchdog, which logs it once it has waited
    ``WAIT_LOG_AFTER`` seconds, then every as long, naming what it waits for.

    One daemon thread for every call (started with the first): registering costs a dict
    insert, not a thread per call.
    """

    __slots__ = ("_key",)
    _calls: dict[int, list] = {}  # key -> [op, store, rel, start, next log time]
    _lock = threading.Lock()
    _thread: threading.Thread | None = None
    _next = 0

    def __init__(self, op: str, store: FileStore, rel: str):
        now = time.monotonic()
        with _Watch._lock:
            _Watch._next += 1
            self._key = _Watch._next
            _Watch._calls[self._key] = [op, store, rel, now, now + WAIT_LOG_AFTER]
            if _Watch._thread is None:
                _Watch._thread = threading.Thread(target=_Watch._run, name="storage-watchdog", daemon=True)
                _Watch._thread.start()

    def done(self) -> None:
        _Watch._calls.pop(self._key, None)

    @staticmethod
    def _run() -> None:
        while True:
            time.sleep(min(1.0, WAIT_LOG_AFTER))
            now = time.monotonic()
            for call in list(_Watch._calls.values()):
                op, store, rel, start, due = call
                if now >= due:
                    call[4] = now + WAIT_LOG_AFTER
                    deadline = store.deadline
                    log.warning("storage: waiting %.0fs for %s %s%s", now - start, op, store.where(rel),
                                f" (gives up after {deadline:g}s)" if deadline else "")

    @staticmethod
    def _after_fork() -> None:
        """A forked child (Spark's Python workers) has no watchdog thread: the next call starts one."""
        _Watch._thread = None
        _Watch._calls = {}
        _Watch._lock = threading.Lock()


os.register_at_fork(after_in_child=_Watch._after_fork)


_SCHEME = {"abfs": "azure", "gcs": "gcs", "s3": "s3", "memory": "memory"}
# the field of ``fs.info`` that names an object's version for a conditional write
_VERSION_FIELD = {"s3": "ETag", "gcs": "generation", "abfs": "etag"}


def _gcs_put_generation(fs, path: str, data: bytes, generation: str, timeout: float | None = None) -> None:
    """Upload ``data`` to ``path`` if its generation is still ``generation``: gcsfs's ``pipe_file``
    offers only ``ifGenerationMatch=0`` (create), so this is the JSON API's media upload with the
    precondition as a query parameter (objects.insert, ``ifGenerationMatch``); a mismatch is
    answered 412, which gcsfs raises as ``FileExistsError``. Not run here (no GCS emulator)."""
    bucket, key, _ = fs.split_path(path)
    fs.call("POST", f"{fs._location}/upload/storage/v1/b/{urllib.parse.quote(bucket)}/o", uploadType="media",
            name=key, ifGenerationMatch=str(generation), data=data,
            headers={"Content-Type": "application/octet-stream"}, json_out=True, timeout=timeout)
    fs.invalidate_cache(path)


def _protocol_of(fs) -> str:
    p = getattr(fs, "protocol", "")
    return p[0] if isinstance(p, tuple) else p


def _is_async(fs) -> bool:
    """fsspec's async file systems (s3fs, gcsfs, adlfs) take a ``timeout`` per call."""
    return bool(getattr(fs, "async_impl", False))


def _public_endpoint(url: str | None) -> str | None:
    """Scheme, host and port of an endpoint URL: what errors may show (no user, password or query)."""
    if not url:
        return None
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


_USERINFO = re.compile(r"(://)[^/@\s]+@")


def _reason(e: BaseException) -> str:
    """The library's message, short, with the settings' secrets and any URL's user:password masked."""
    text = REDACTOR.redact(_USERINFO.sub(r"\1***@", str(e) or type(e).__name__))
    return text if len(text) <= 300 else text[:300] + "..."


def _is_timeout(e: BaseException) -> bool:
    return isinstance(e, TimeoutError) or "timeout" in type(e).__name__.lower()


def _is_conflict(e: BaseException | None) -> bool:
    """Whether an object store refused a create-only write because the name is taken."""
    while e is not None:
        if isinstance(e, FileExistsError) or type(e).__name__ == "ResourceExistsError":
            return True
        code = getattr(e, "code", None) or getattr(e, "status_code", None) or getattr(e, "status", None)
        if str(code) in ("409", "412"):
            return True
        response = getattr(e, "response", None)
        if isinstance(response, dict) and response.get("Error", {}).get("Code") in _CONFLICT_CODES:
            return True
        e = e.__cause__ or e.__context__
    return False


def _read_local(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _list_local(path: str) -> list[tuple[str, bool]]:
    with os.scandir(path) as it:
        return [(e.name, e.is_dir()) for e in it]


def _takes_refresh(fs) -> bool:
    return getattr(fs, "protocol", None) in ("s3", "s3a", ("s3", "s3a"), "gcs", ("gcs", "gs"), ("gs", "gcs"),
                                             "abfs", "az", ("abfs", "az", "abfss"))


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
        return max(n, self._past_listed())

    def _past_listed(self) -> int:
        """The number after the highest data file in the directory (1 when there is none)."""
        n = 1
        for name, is_dir in self.store.listdir(self.rel):
            parsed = parse_data_file(name)
            if parsed is not None and not is_dir:
                n = max(n, parsed[0] + 1)
        return n

    def write(self, data: bytes) -> str:
        """Write one complete data file under the next free index; returns its relative path.

        A number found taken means another writer is in this directory: the next try starts
        past every file it has written (one listing), not one number further.
        """
        while True:
            name = data_file_name(self.next_index, self.width, self.extension)
            self.next_index += 1
            self.store.put_replace(f"{self.rel}/{INDEX_DIR}/{INDEX_FILE}", (name + "\n").encode())
            if self.store.put_new(f"{self.rel}/{name}", data):
                return f"{self.rel}/{name}"
            self.next_index = max(self.next_index, self._past_listed())
            log.debug("storage: %s was taken by another writer; trying number %d", self.store.where(
                f"{self.rel}/{name}"), self.next_index)


#: conditional writes of ``metadata`` tried before giving up (each refused one means another
#: writer moved it meanwhile; a few tries settle it unless dozens of writers contend)
CHECKPOINT_ATTEMPTS = 40
# the memory file system has no conditional write; its writers are threads of one process
_MEMORY_LOCK = threading.Lock()


def read_checkpoint(store: FileStore) -> int | None:
    return _parse_checkpoint(store, store.read(METADATA_FILE))


def _parse_checkpoint(store: FileStore, raw: bytes | None) -> int | None:
    if not raw:
        return None
    try:
        return int(orjson.loads(raw)["checkpoint-ts"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise StorageWriteError(f"storage: {store.where(METADATA_FILE)} is not {{\"checkpoint-ts\": N}}: {raw[:100]!r}")


def write_checkpoint(store: FileStore, ts: int) -> int:
    """Advance ``metadata`` to ``ts`` (never backwards); returns the value kept.

    Several writers (Spark tasks of one destination, or several runs) advance it at once, so the
    read-compare-write must not interleave, or the lower value can land last. Locally it holds an
    ``flock`` on the layout's root directory; on an object store it is a compare-and-swap done by
    the store (``FileStore.put_version``: written only if ``metadata`` is still the version read,
    else read again), the same conditional write that makes data files create-only."""
    if store.local:
        import fcntl

        root = store.root or "."
        os.makedirs(root, exist_ok=True)
        fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return _advance_checkpoint(store, ts)
        finally:
            os.close(fd)  # releases the lock
    if store.protocol == "memory":
        with _MEMORY_LOCK:
            return _advance_checkpoint(store, ts)
    return _swap_checkpoint(store, ts)


def _advance_checkpoint(store: FileStore, ts: int) -> int:
    current = read_checkpoint(store)
    if current is not None and current >= ts:
        return current
    store.put_replace(METADATA_FILE, orjson.dumps({"checkpoint-ts": ts}))
    return ts


def _swap_checkpoint(store: FileStore, ts: int) -> int:
    """Compare-and-swap on an object store; a refused write means another writer moved
    ``metadata`` since it was read: read it again (after a short random pause, so contending
    writers spread out) until it holds ``ts`` or more."""
    for attempt in range(CHECKPOINT_ATTEMPTS):
        raw, version = store.read_versioned(METADATA_FILE)
        current = _parse_checkpoint(store, raw)
        if current is not None and current >= ts:
            return current
        if store.put_version(METADATA_FILE, orjson.dumps({"checkpoint-ts": ts}), version):
            return ts
        log.debug("storage: %s changed while advancing it to %d; reading it again", store.where(METADATA_FILE), ts)
        time.sleep(random.uniform(0, min(0.5, 0.01 * 2 ** attempt)))
    raise StorageUnavailableError(
        f"storage: could not advance {store.where(METADATA_FILE)} to checkpoint-ts {ts}: another writer "
        f"changed it before each of {CHECKPOINT_ATTEMPTS} conditional writes", service="object-store",
        endpoint=store.where(METADATA_FILE))
