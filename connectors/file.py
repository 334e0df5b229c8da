"""The ``file`` source and destination: Conduit's JSON form, one record per line.

Destination: each batch becomes one buffer written with one ``os.write`` on an
``O_APPEND`` descriptor, then ``fsync`` — durable before ``write`` returns, and
lines from several writers (Spark tasks appending to one file) never interleave
inside a batch on a local file system. A writer killed inside ``os.write`` leaves
a torn last line; its records were never acknowledged (the engine sends them
again), so the next batch written to the file first cuts that torn tail off,
under an exclusive ``flock`` shared by every writer of the file. Synced pages are
then dropped from the page cache (``_drop_written``).
As a standalone plugin it also takes the request messages' bytes (``write_wire``, the
engine-internal ``WireDestination`` fast path):
the JSON-form kernel writes their lines without building records. In the engine, a
source's lazy batch (``cdcflow.engine.fastpath.RecordBatch``) is asked for its lines first.

Source: follows the file as it grows. A position is the byte offset just after
a record's line (ASCII decimal), so a restart resumes at the next line. A last
line without its newline is not consumed until the newline arrives.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from cdcflow.engine.fastpath import RecordBatch
from cdcflow.errors import CdcflowError, RecordError
from cdcflow.params import Parameter, ParamType
from cdcflow.record import Record
from cdcflow.sdk import Destination, Source

PLUGIN = "file"
READ_CHUNK = 1 << 20

log = logging.getLogger("cdcflow.connectors.file")

SOURCE_PARAMS: dict[str, Parameter] = {
    "path": Parameter(ParamType.STRING, None, "Path of the file to read (followed while it grows).", required=True),
}
DESTINATION_PARAMS: dict[str, Parameter] = {
    "path": Parameter(ParamType.STRING, None, "Path of the file to append to (created if missing).", required=True),
}


class MalformedLineError(RecordError):
    """A line of the file is not a record in the JSON form."""

    def __init__(self, path: str, line: int, offset: int, reason: str):
        self.path = path
        self.line = line
        self.offset = offset
        super().__init__(f"{path}:{line}: malformed record (byte offset {offset}): {reason}",
                         position=str(offset).encode())


class FileTruncatedError(CdcflowError):
    """The followed file became shorter than what was already read."""


def _jsonform():
    from cdcflow.convert import jsonform

    return jsonform


class FileDestination(Destination):
    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.path = str(config["path"])
        self._fd: int | None = None

    def open(self) -> None:
        from cdcflow.schemas import default_store

        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # read access too: a torn tail is found by reading the file's end (``_cut_torn_tail``)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        self._store = default_store()
        self._dumps = _jsonform().dumps_lines

    def write(self, records: Sequence[Record]) -> None:
        if not records:
            return None
        self._check_open()
        # a source's lazy batch writes its lines without making its Records, if it can
        data = records.jsonform_lines(self._store) if isinstance(records, RecordBatch) else None
        self._append([data if data is not None else self._dumps(records, self._store)])
        return None

    def write_wire(self, messages: Sequence[bytes]) -> list[Any]:
        """The messages' lines (the kernel's, or ``from_wire`` + ``dumps_lines`` for a message it
        hands back), appended with one write and one fsync for the lot."""
        self._check_open()
        dumps_wire = _jsonform().dumps_wire
        chunks: list[bytes] = []
        results: list[Any] = []
        for message in messages:
            converted = dumps_wire(message)
            if converted is None:
                data, result = self._lines_of_message(message)
            else:
                data, result = converted
            if data:
                chunks.append(data)
            results.append(result)
        if chunks:
            self._append(chunks)
        return results

    def _lines_of_message(self, message: bytes) -> tuple[bytes, tuple[list[bytes], dict]]:
        """Lines and ``write_wire`` result of a message through records (raises for a malformed one)."""
        from cdcflow.convert.protobuf import from_wire

        failed: dict[int, tuple[bytes, Exception]] = {}
        records = from_wire(message, self._store, failed)
        good = [r for r in records if r is not None] if failed else records
        positions = [r.position if r is not None else failed[i][0] for i, r in enumerate(records)]
        return (self._dumps(good, self._store) if good else b""), (positions, failed)

    def _check_open(self) -> None:
        if self._fd is None:
            raise CdcflowError(f"file destination {self.path}: write before open")

    def _append(self, chunks: Sequence[bytes]) -> None:
        """Append the chunks with one write (atomic against other appenders), then fsync, then
        let the page cache drop what was written (``_drop_written``)."""
        fd = self._fd
        fcntl.flock(fd, fcntl.LOCK_EX)  # against other writers' appends while the tail is checked
        try:
            _cut_torn_tail(fd, self.path)
            _write_all(fd, chunks)
            end = os.lseek(fd, 0, os.SEEK_CUR)  # O_APPEND: just after this append
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.fsync(fd)
        _drop_written(fd, end - sum(map(len, chunks)), end)

    def stop(self, last_position: bytes | None) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def teardown(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


_PAGE = os.sysconf("SC_PAGE_SIZE")


def _drop_written(fd: int, start: int, end: int) -> None:
    """Tell the kernel the synced pages of ``[start, end)`` will not be read again soon.

    A destination streams gigabytes it never reads back: kept in the page cache, each batch
    claims fresh memory (measured here: copying into never-used pages cost 4-6x the copy
    into recycled ones, ≈ 1 µs per 660-byte line) and pushes out what other processes cache.
    Dropped once clean, the pages go back to the allocator and the next batch reuses them.
    The last page stays: the next append reads the file's tail (``_cut_torn_tail``).
    """
    first, last = start - start % _PAGE, end - end % _PAGE
    if last > first and hasattr(os, "posix_fadvise"):
        try:
            os.posix_fadvise(fd, first, last - first, os.POSIX_FADV_DONTNEED)
        except OSError:  # advice only: a file system that does not take it changes nothing
            pass


def _write_all(fd: int, chunks: Sequence[bytes]) -> None:
    """One ``write`` of one chunk, one ``writev`` of several (no joined copy); a regular file
    takes it in one call, the loops are for the exotic case of a partial write."""
    views = [memoryview(c) for c in chunks if c]
    if len(views) > _IOV_MAX:
        views = [memoryview(b"".join(views))]
    if len(views) == 1:
        view = views[0]
        while view:
            view = view[os.write(fd, view):]
        return
    while views:
        written = os.writev(fd, views)
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]


_IOV_MAX = os.sysconf("SC_IOV_MAX")  # buffers one writev takes


def _cut_torn_tail(fd: int, path: str) -> None:
    """End the file at a line boundary before appending to it.

    A tail without its newline is a write torn by a crash when it is not a whole JSON
    value (cut off: its records were not acknowledged); a whole one is a line someone
    wrote without the newline (kept, the newline added).
    """
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    start = size
    while start > 0:  # the last newline, read backwards in chunks
        lo = max(0, start - READ_CHUNK)
        k = os.pread(fd, start - lo, lo).rfind(b"\n")
        if k >= 0:
            start = lo + k + 1
            break
        start = lo
    tail = os.pread(fd, size - start, start)
    try:
        json.loads(tail)  # the json module: a whole line may hold integers past 64 bits
    except ValueError:
        log.warning("file destination %s: cutting off a torn last line (%d bytes at offset %d) left by an "
                    "interrupted write; its records were not acknowledged and are written again", path,
                    size - start, start)
        os.ftruncate(fd, start)
        return
    os.write(fd, b"\n")


class FileSource(Source):
    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.path = str(config["path"])
        self._file = None

    def open(self, position: bytes | None, partition: str = "") -> None:
        from cdcflow.schemas import default_store

        self._store = default_store()
        self._loads = _jsonform().loads_lines
        try:
            self._offset = int(position.decode("ascii")) if position else 0
        except (UnicodeDecodeError, ValueError):
            raise CdcflowError(f"file source {self.path}: position {position!r} is not a byte offset") from None
        self._buf = b""  # bytes after _offset that are read but not yet consumed
        self._last: bytes | None = position or None
        self._open_file()

    def _open_file(self) -> bool:
        if self._file is not None:
            return True
        try:
            self._file = open(self.path, "rb", buffering=0)
        except FileNotFoundError:
            return False  # not created yet: wait for it
        self._file.seek(self._offset)
        return True

    def read(self, max_records: int) -> list[Record]:
        if not self._open_file():
            return []
        size = os.fstat(self._file.fileno()).st_size
        if size < self._offset + len(self._buf):
            raise FileTruncatedError(
                f"file source {self.path}: file shrank to {size} bytes below the read offset "
                f"{self._offset + len(self._buf)}; it was truncated or replaced")
        lines: list[bytes] = []
        ends: list[int] = []
        scanned = self._take_lines(lines, ends, 0, max_records)
        while len(lines) < max_records:
            chunk = self._file.read(READ_CHUNK)
            if not chunk:
                break
            self._buf += chunk
            scanned = self._take_lines(lines, ends, scanned, max_records)
        if scanned == 0:
            return []
        records = self._parse(lines, ends) if lines else []
        self._buf = self._buf[scanned:]
        self._offset += scanned
        if records:
            self._last = records[-1].position
        return records

    def _take_lines(self, lines: list[bytes], ends: list[int], pos: int, limit: int) -> int:
        """Append complete non-blank lines of the buffer from ``pos`` (and the buffer
        offset just after each) until ``limit``; return the offset scanned up to.
        Blank lines are consumed without a record."""
        buf = self._buf
        while len(lines) < limit:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                break
            line = buf[pos:nl]
            if line and not line.isspace():
                lines.append(line)
                ends.append(nl + 1)
            pos = nl + 1
        return pos

    def _parse(self, lines: list[bytes], ends: list[int]) -> list[Record]:
        try:
            records = self._loads(b"\n".join(lines) + b"\n", self._store)
        except Exception:  # noqa: BLE001 - find the bad line and name it
            self._raise_for_bad_line(lines, ends)
            raise
        if len(records) != len(lines):
            raise CdcflowError(f"file source {self.path}: {len(lines)} lines gave {len(records)} records")
        base = self._offset
        for rec, end in zip(records, ends):
            rec.position = str(base + end).encode()
        return records

    def _raise_for_bad_line(self, lines: list[bytes], ends: list[int]) -> None:
        loads_record = _jsonform().loads_record
        for line, end in zip(lines, ends):
            try:
                loads_record(line, self._store)
            except Exception:  # noqa: BLE001 - this is the bad line; parse again to name its number
                start = self._offset + end - len(line) - 1
                line_no = self._line_number(start)
                try:
                    loads_record(line, self._store, line_no)
                except Exception as e:  # noqa: BLE001
                    raise MalformedLineError(self.path, line_no, start, str(e) or type(e).__name__) from e

    def _line_number(self, offset: int) -> int:
        """1-based line number of the line starting at ``offset`` (counted only on error)."""
        count = 1
        with open(self.path, "rb") as f:
            left = offset
            while left > 0:
                chunk = f.read(min(READ_CHUNK, left))
                if not chunk:
                    break
                count += chunk.count(b"\n")
                left -= len(chunk)
        return count

    def stop(self) -> bytes | None:
        return self._last

    def teardown(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

