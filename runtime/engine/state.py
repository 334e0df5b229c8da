"""The state directory: per-partition positions and nack windows, saved atomically.

A partition's state is one small JSON file written by the Spark task that owns
the partition, *after* every destination (and the DLQ) wrote the batch durably
and *before* the source is acknowledged. Writes go to a temporary file that is
fsync'ed and renamed over the old one (then the directory is fsync'ed), so a
``kill -9`` at any moment leaves either the old or the new state, never a torn
one. Position bytes are opaque to the engine (base64 in the file).

Layout (``<state>/`` is ``.cdcflow/`` beside the first pipeline file by default)::

    <state>/schemas.sqlite                       shared schema store (CDCFLOW_SCHEMA_STORE)
    <state>/run.lock                             held by the running driver
    <state>/stop-requested                       asks running tasks to finish early
    <state>/positions/<pipeline>/<source>/<partition>.json

The state directory may instead be an object-store prefix (``s3://bucket/prefix``, ``gs://``,
``azure://``; ``cdcflow.objectstore``), which every executor of a cluster reaches without a
shared filesystem. The layout is the same objects, except that the schema store is objects
under ``schemas/`` (``cdcflow.schemas.ObjectSchemaStore``) and ``run.lock`` is a lease the driver
renews (``LeaseLock``): an object store has no lock that dies with its holder. A position
object is written with one whole-object PUT, which the store makes visible atomically.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import logging
import os
import socket
import tempfile
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from ..durable import replace_file
from ..errors import CdcflowError, InfrastructureError
from ..objectstore import is_object_uri, normal_uri, open_prefix, secret_values
from ..params import REDACTOR
from .faults import state_fault

log = logging.getLogger("cdcflow.engine.state")

STOP_FILE = "stop-requested"
LOCK_FILE = "run.lock"
SCHEMA_FILE = "schemas.sqlite"
SCHEMA_PREFIX = "schemas"  # the schema store's objects on an object store


class StateError(CdcflowError):
    """The state directory is unusable (locked by another run, unreadable file)."""


@dataclass
class PartitionState:
    """What survives a crash for one source partition.

    ``position`` is the last position every destination wrote durably (None: never
    acknowledged anything, start from the beginning). ``window`` holds the last
    DLQ-window outcomes (1 = nack, 0 = ack), oldest first, so a pipeline stops on
    the same count of nacks whichever Spark task or process carries on. ``ended``
    marks a bounded partition whose source reported its end.
    """

    position: bytes | None = None
    window: list[int] = field(default_factory=list)
    ended: bool = False

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "position": None if self.position is None else base64.b64encode(self.position).decode(),
                "window": self.window,
                "ended": self.ended,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> "PartitionState":
        try:
            doc = json.loads(data)
            pos = doc.get("position")
            return cls(
                position=None if pos is None else base64.b64decode(pos, validate=True),
                window=[int(x) for x in doc.get("window", [])],
                ended=bool(doc.get("ended", False)),
            )
        except (ValueError, TypeError, AttributeError) as e:
            raise StateError(f"{where}: unreadable partition state: {e}") from None


#: state files are replaced atomically and durably (old or new content after a crash)
atomic_write = replace_file


def _component(text: str) -> str:
    """A file-name-safe, reversible spelling of an id or partition name."""
    return urllib.parse.quote(text, safe="") or "%00default"


class StateDir:
    """Paths and reads/writes under one state directory (picklable: its location and options).

    ``root`` is a resolved ``Path`` for a local directory, the normalised URI (a ``str``) for an
    object-store prefix (``remote``). ``options`` configure the object store (``engine.state-options``);
    ``run_id`` is the lease token of the run that owns the prefix (set by ``LeaseLock``): a stop
    request names it, so a run that lost its lease cannot stop the run that took it over.
    """

    def __init__(self, root: str | Path, options: Mapping[str, str] | None = None, run_id: str = ""):
        self.options = dict(options or {})
        self.run_id = run_id
        self.remote = is_object_uri(str(root))
        self._store = None
        if self.remote:
            self.root: Path | str = normal_uri(str(root))
            from ..schemas import register_object_store

            register_object_store(str(self.schema_store_path), self.options)
            if self.options:  # every process holding the state (driver, executors) masks its secrets
                REDACTOR.add(*secret_values(self.options))
        else:
            self.root = Path(root).resolve()

    def __reduce__(self):
        return (StateDir, (str(self.root), self.options, self.run_id))

    def __repr__(self) -> str:  # options may hold secrets: never shown
        return f"StateDir({str(self.root)!r})"

    @property
    def store(self):
        """The object store's ``FileStore`` (remote state only), opened on first use in each process."""
        if self._store is None:
            self._store = open_prefix(str(self.root), self.options)
        return self._store

    @property
    def local_dir(self) -> Path:
        """A local directory for what only the driver needs (Spark's log configuration, shipped
        plugin archives): the state directory itself, or a per-prefix temporary directory."""
        if not self.remote:
            return self.root  # type: ignore[return-value]
        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:16]
        path = Path(tempfile.gettempdir()) / f"cdcflow-state-{digest}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def create(self) -> "StateDir":
        if self.remote:
            return self  # prefixes exist as soon as an object is written under them
        try:
            (self.root / "positions").mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise state_fault(self.root / "positions", e) from e
        return self

    @property
    def schema_store_path(self) -> Path | str:
        """The schema store's location: the SQLite file, or the prefix of its objects."""
        if self.remote:
            return f"{self.root}/{SCHEMA_PREFIX}"
        return self.root / SCHEMA_FILE

    @property
    def stop_file(self) -> Path | str:
        return f"{self.root}/{STOP_FILE}" if self.remote else self.root / STOP_FILE  # type: ignore[operator]

    def _relative(self, pipeline: str, source: str, partition: str) -> str:
        return f"positions/{_component(pipeline)}/{_component(source)}/{_component(partition)}.json"

    def partition_file(self, pipeline: str, source: str, partition: str) -> Path | str:
        if self.remote:
            return f"{self.root}/{self._relative(pipeline, source, partition)}"
        return self.root / self._relative(pipeline, source, partition)  # type: ignore[operator]

    def load(self, pipeline: str, source: str, partition: str) -> PartitionState:
        path = self.partition_file(pipeline, source, partition)
        if self.remote:  # an outage is the store's StorageUnavailableError (an InfrastructureError)
            data = self.store.read(self._relative(pipeline, source, partition))
            return PartitionState() if data is None else PartitionState.from_json(data, str(path))
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return PartitionState()
        except OSError as e:
            raise state_fault(path, e) from e
        return PartitionState.from_json(data, str(path))

    def save(self, pipeline: str, source: str, partition: str, state: PartitionState) -> None:
        if self.remote:  # one whole-object PUT: the old or the new object, never a torn one
            self.store.put_replace(self._relative(pipeline, source, partition), state.to_json())
            return
        path = self.partition_file(pipeline, source, partition)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, state.to_json())
        except OSError as e:  # a full or read-only disk is an outage of the state store, named by path
            raise state_fault(path, e) from e

    # -- early stop: the driver asks running tasks to finish their current batch
    def request_stop(self) -> None:
        if not self.remote:
            self.stop_file.touch()
            return
        _stop_seen.pop(str(self.root), None)
        try:
            self.store.put_replace(STOP_FILE, (self.run_id or "stop").encode())
        except InfrastructureError as e:  # tasks stop at their budget anyway
            log.warning("could not ask the tasks to stop early: %s", e)

    def clear_stop(self) -> None:
        if not self.remote:
            self.stop_file.unlink(missing_ok=True)
            return
        _stop_seen.pop(str(self.root), None)
        try:
            self.store.put_replace(STOP_FILE, b"")
        except InfrastructureError as e:  # an outage shows in the tasks' own reads and writes
            log.warning("could not clear the stop request: %s", e)

    def stop_requested(self) -> bool:
        if not self.remote:
            return self.stop_file.exists()
        # tasks ask every cycle: an object store is asked at most every STOP_CHECK_SECONDS per process
        key, now = str(self.root), time.monotonic()
        seen = _stop_seen.get(key)
        if seen is None or now - seen[0] >= STOP_CHECK_SECONDS:
            try:
                seen = _stop_seen[key] = (now, self.store.read(STOP_FILE) or b"")
            except InfrastructureError as e:
                log.debug("stop request unreadable: %s", e)
                if seen is None:
                    return False
        return bool(seen[1]) and (not self.run_id or seen[1] == self.run_id.encode())


#: how often a process reads an object-store stop request (seconds), and what it last read
STOP_CHECK_SECONDS = 0.5
_stop_seen: dict[str, tuple[float, bytes]] = {}  # root -> (when read, the request)


class RunLock:
    """An exclusive ``flock`` on ``run.lock``: two runs must not share positions.

    The kernel drops the lock when the process dies, so ``kill -9`` never leaves
    a stale lock behind.
    """

    lost: str | None = None  # a lock the kernel holds cannot be taken over (see ``LeaseLock``)
    on_lost: Callable[[str], None] | None = None

    def __init__(self, state: StateDir):
        self.path = state.root / LOCK_FILE
        self._fd: int | None = None

    def __enter__(self) -> "RunLock":
        if self._fd is not None:  # already taken (``run_files`` takes it first to report a bad directory)
            return self
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise state_fault(self.path, e) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StateError(
                f"state directory {self.path.parent} is in use by another `cdcflow run` "
                "(stop it, or give this run its own --state-dir)"
            ) from None
        self._fd = fd
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as e:
            self.__exit__()
            raise state_fault(self.path, e) from e
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


#: seconds a run's lease on an object-store state prefix lasts unless renewed (``engine.state-lease``)
DEFAULT_LEASE = 30.0


class LeaseLock:
    """``run.lock`` on an object store: a lease object the driver renews, so two runs cannot both
    own a state prefix and a killed driver does not lock it for ever.

    Taking, renewing, taking over and releasing are conditional writes the store decides
    atomically (``FileStore.put_version``: S3 ``If-None-Match: *`` / ``If-Match: <etag>``, GCS
    generations, Azure ETags), so of two runs starting at once exactly one wins. The lease names its
    holder (run token, host, pid) and when it expires (the holder's wall clock: hosts must keep
    their clocks in step, as NTP does). A later run takes it over once it has expired, at once if it
    was released or its holder ran on this host and is gone. A run whose renewal is refused (taken
    over while it was stalled) or fails for a whole lease calls ``on_lost`` and records why
    (``lost``), and the runner stops it naming that.
    """

    def __init__(self, state: StateDir, lease: float = DEFAULT_LEASE,
                 on_lost: Callable[[str], None] | None = None):
        if not state.remote:
            raise ValueError("LeaseLock is for object-store state; a local directory takes RunLock")
        self.state = state
        self.lease = lease
        self.on_lost = on_lost
        self.token = uuid.uuid4().hex
        self.lost: str | None = None
        self.took_over: str | None = None  # the expired holder this run replaced, if any
        self._version: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _doc(self, released: bool = False) -> bytes:
        return json.dumps({"run": self.token, "host": socket.gethostname(), "pid": os.getpid(),
                           "lease": self.lease, "expires": 0 if released else time.time() + self.lease,
                           "released": released}).encode()

    def _where(self) -> str:
        return self.state.store.where(LOCK_FILE)

    def __enter__(self) -> "LeaseLock":
        if self._version is not None:
            return self
        store = self.state.store
        data, version = store.read_versioned(LOCK_FILE)
        holder = _holder(data)
        if data is not None:
            busy = _live(holder)
            if busy:
                raise StateError(f"state {self.state.root} is in use by another `cdcflow run` ({busy}; "
                                 f"lease {self._where()}): stop it, wait until its lease expires, or give "
                                 "this run its own --state-dir")
        if not store.put_version(LOCK_FILE, self._doc(), version):
            raise StateError(f"state {self.state.root} was taken by another `cdcflow run` starting at the "
                             f"same moment (lease {self._where()}): stop it, or give this run its own --state-dir")
        if data is not None and not holder.get("released"):
            self.took_over = _describe_holder(holder)
            log.warning("state %s: took over the expired lease of %s", self.state.root, self.took_over)
        try:
            self._confirm()
        except _LeaseLost as e:
            raise StateError(f"state {self.state.root}: the lease just taken was {e}") from None
        self.state.run_id = self.token
        self._thread = threading.Thread(target=self._renew_loop, name="cdcflow-state-lease", daemon=True)
        self._thread.start()
        return self

    def _confirm(self) -> None:
        """Read back the lease just written, for its new version; another holder there means lost."""
        data, version = self.state.store.read_versioned(LOCK_FILE)
        holder = _holder(data)
        if holder.get("run") != self.token:
            raise _LeaseLost(f"taken over by {_describe_holder(holder)}" if data else "lease object deleted")
        self._version = version

    def _renew_loop(self) -> None:
        renewed = time.time()
        while not self._stop.wait(self.lease / 3):
            try:
                if self.state.store.put_version(LOCK_FILE, self._doc(), self._version):
                    self._confirm()
                else:
                    data, version = self.state.store.read_versioned(LOCK_FILE)
                    if _holder(data).get("run") != self.token:
                        raise _LeaseLost(f"taken over by {_describe_holder(_holder(data))}" if data
                                         else "lease object deleted")
                    self._version = version  # an earlier renewal landed but its answer was lost
                renewed = time.time()
            except _LeaseLost as e:
                return self._lose(f"its lease {self._where()} was {e}")
            except Exception as e:  # noqa: BLE001 - an outage (or any surprise) must not end the renewals:
                # retried at the next beat, lost once the lease ran out
                if time.time() - renewed >= self.lease:
                    return self._lose(f"its lease {self._where()} could not be renewed for {self.lease:g}s: {e}")
                log.warning("state %s: lease renewal failed (retrying): %s", self.state.root, e)

    def _lose(self, why: str) -> None:
        self.lost = f"state {self.state.root}: this run no longer owns the state: {why}; it stopped"
        log.error("%s", self.lost)
        if self.on_lost is not None:
            self.on_lost(self.lost)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._version is not None and self.lost is None:
            try:  # released: the next run need not wait for the lease to expire
                self.state.store.put_version(LOCK_FILE, self._doc(released=True), self._version)
            except CdcflowError as e:
                log.warning("state %s: could not release the lease (it expires in %gs): %s",
                            self.state.root, self.lease, e)
        self._version = None


class _LeaseLost(Exception):
    pass


def _holder(data: bytes | None) -> dict:
    try:
        doc = json.loads(data) if data else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _describe_holder(holder: dict) -> str:
    return f"run {holder.get('run', '?')} on host {holder.get('host', '?')}, pid {holder.get('pid', '?')}"


def _live(holder: dict) -> str | None:
    """Why the lease ``holder`` still holds (a description of it), or None when it may be taken."""
    if not holder or holder.get("released"):
        return None
    try:
        left = float(holder.get("expires", 0)) - time.time()
    except (TypeError, ValueError):
        return None
    if left <= 0:
        return None
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int) \
            and holder["pid"] != os.getpid() and not _pid_alive(holder["pid"]):
        return None  # its driver ran here and is gone: no need to wait for the lease to expire
    return f"{_describe_holder(holder)}, lease valid for {left:.0f}s more"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_lock(state: StateDir, lease: float = DEFAULT_LEASE) -> RunLock | LeaseLock:
    """The lock that makes a run the only owner of ``state``: an flock locally, a lease on an object store."""
    return LeaseLock(state, lease) if state.remote else RunLock(state)
