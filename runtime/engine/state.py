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
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from ..durable import replace_file
from ..errors import CdcflowError
from .faults import state_fault

STOP_FILE = "stop-requested"
LOCK_FILE = "run.lock"
SCHEMA_FILE = "schemas.sqlite"


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
    """Paths and reads/writes under one state directory (picklable: just a path)."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()

    def __reduce__(self):
        return (StateDir, (str(self.root),))

    def create(self) -> "StateDir":
        try:
            (self.root / "positions").mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise state_fault(self.root / "positions", e) from e
        return self

    @property
    def schema_store_path(self) -> Path:
        return self.root / SCHEMA_FILE

    @property
    def stop_file(self) -> Path:
        return self.root / STOP_FILE

    def partition_file(self, pipeline: str, source: str, partition: str) -> Path:
        return self.root / "positions" / _component(pipeline) / _component(source) / f"{_component(partition)}.json"

    def load(self, pipeline: str, source: str, partition: str) -> PartitionState:
        path = self.partition_file(pipeline, source, partition)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return PartitionState()
        except OSError as e:
            raise state_fault(path, e) from e
        return PartitionState.from_json(data, str(path))

    def save(self, pipeline: str, source: str, partition: str, state: PartitionState) -> None:
        path = self.partition_file(pipeline, source, partition)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, state.to_json())
        except OSError as e:  # a full or read-only disk is an outage of the state store, named by path
            raise state_fault(path, e) from e

    # -- early stop: the driver asks running tasks to finish their current batch
    def request_stop(self) -> None:
        self.stop_file.touch()

    def clear_stop(self) -> None:
        self.stop_file.unlink(missing_ok=True)

    def stop_requested(self) -> bool:
        return self.stop_file.exists()


class RunLock:
    """An exclusive ``flock`` on ``run.lock``: two runs must not share positions.

    The kernel drops the lock when the process dies, so ``kill -9`` never leaves
    a stale lock behind.
    """

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
