"""The ``file`` source and destination, as Conduit's: one record per line.

Source (Conduit's, ``format: raw``, the default): any text file, one raw record per line, as
Conduit's file connector makes them (github.com/ConduitIO/conduit-connector-file, source.go):
operation ``create``, key the line's number (ASCII decimal, counted from 1 where the reader
started: Conduit's restarts at 1 after a restart too), ``payload.after`` the line's bytes without
its ``\n``, metadata ``file.path`` (the configured path), position the byte offset after the line.
Text after the last newline is a line too, as soon as it is read (Conduit's tail sends it at the
end of the file): what is appended to it later comes as the next line.
``format: opencdc/json`` reads the records of a file in Conduit's JSON form instead (what the
destination writes with the default ``sdk.record.format``: a ``file`` → ``file`` copy).

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
the JSON-form kernel writes their lines without building records.
A line holds plain JSON values only (``cdcflow.convert.jsonform``): a file written by one run
reads in any other run, on any machine, or in Conduit, with no shared state.

Both source formats follow the file as it grows. In the JSON form, a last line without its
newline is not consumed until the newline arrives. A position is the byte offset just after
a record's line (ASCII decimal), so a restart resumes at the next line.
Several readers (``partitions``, each a Spark task) share one file, so a large file
uses every core: the file is cut into ``split-size`` blocks dealt to the readers in
turn (block k to reader k mod n, also the blocks the file grows into). A line belongs
to the block holding its first byte: a reader finishes the line crossing its block's
end, the next block's reader starts after the first newline at or after the byte
before its block, as Hadoop's line reader does. Each reader keeps its lines in file
order; the readers' batches reach the destination in the order they are written.

Destination: several writers (one per source partition) append to one file; each
batch stays whole and in its reader's order, the batches of different readers are
interleaved in arrival order (Conduit's file destination writes in arrival order too).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from cdcflow.errors import CdcflowError, RecordError
from cdcflow.params import Parameter, ParamType
from cdcflow.record import Operation, Record
from cdcflow.sdk import Destination, Source

PLUGIN = "file"
READ_CHUNK = 1 << 20
RAW, OPENCDC_JSON = "raw", "opencdc/json"
META_FILE_PATH = "file.path"  # Conduit's file source: the path a record's line was read from

log = logging.getLogger("cdcflow.connectors.file")

SOURCE_PARAMS: dict[str, Parameter] = {
    "path": Parameter(ParamType.STRING, None, "Path of the file to read (followed while it grows).", required=True),
    "format": Parameter(ParamType.STRING, RAW, "What a line is: raw (Conduit's: any text, one raw record per "
                        "line) or opencdc/json (a record in Conduit's JSON form, as the file destination "
                        "writes them).", inclusion=(RAW, OPENCDC_JSON)),
    "partitions": Parameter(ParamType.INT, "1", "Readers of the file, each a partition (a Spark task): the file is cut "
                            "in split-size blocks dealt to them in turn. Part of the positions: change it only "
                            "with a new state directory.", greater_than=0),
    "split-size": Parameter(ParamType.INT, str(16 << 20), "Bytes per block dealt to the readers (a line belongs to "
                            "the block its first byte is in). Part of the positions, as partitions.",
                            greater_than=0),
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
    #: ``sdk.record.format`` when it is not the JSON form (set by the engine's middleware)
    record_format: Any = None

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
        if self.record_format is not None:
            data, errors = self.record_format.lines(records)
            if data:
                self._append([data])
            return errors
        self._append([self._dumps(records)])
        return None

    def write_wire(self, messages: Sequence[bytes]) -> list[Any]:
        """The messages' lines (the kernel's, or ``from_wire`` + ``dumps_lines`` for a message it
        hands back), appended with one write and one fsync for the lot."""
        self._check_open()
        dumps_wire = _jsonform().dumps_wire if self.record_format is None else _through_records
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
        if self.record_format is None:
            return (self._dumps(good) if good else b""), (positions, failed)
        data, errors = self.record_format.lines(good)
        if errors:
            index = [i for i, r in enumerate(records) if r is not None]
            for i, err in zip(index, errors):
                if err is not None:
                    failed[i] = (positions[i], RecordError(err, position=positions[i]))
        return data, (positions, failed)

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


def _through_records(message: bytes) -> None:
    """``write_wire`` with a record format: no line is written from the wire bytes directly."""
    return None


_PAGE = os.sysconf("SC_PAGE_SIZE")


def _drop_written(fd: int, start: int, end: int) -> None:
    """Tell the kernel the synced pages of ``[start, end)`` will not be read again soon.

    A destination streams gigabytes it never reads back: kept in the page cache, each batch
    claims fresh memory (copying into never-used pages costs several times the copy into
    recycled ones) and pushes out what other processes cache.
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
        self.readers = int(config["partitions"])
        self.split_size = int(config["split-size"])
        self.raw = (config.get("format") or RAW) == RAW
        self._fd: int | None = None

    def partitions(self) -> Sequence[str]:
        """``"<i>/<n>/<split size>"`` per reader (``""``, the whole file, for one): the ids say what
        each reads, so a restart with other settings finds no position of the old ones."""
        if self.readers == 1:
            return [""]
        return [f"{i}/{self.readers}/{self.split_size}" for i in range(self.readers)]

    def open(self, position: bytes | None, partition: str = "") -> None:
        from cdcflow.schemas import default_store

        self._store = default_store()  # a schema a line's metadata names restores its types, if held here
        self._loads = _jsonform().loads_lines
        try:
            reader, readers, split = (int(x) for x in partition.split("/")) if partition else (0, 1, 0)
        except ValueError:
            raise CdcflowError(f"file source {self.path}: partition {partition!r} is not <i>/<n>/<split size>") from None
        self._reader, self._readers, self._split = reader, readers, split
        try:
            offset = int(position.decode("ascii")) if position else 0
        except (UnicodeDecodeError, ValueError):
            raise CdcflowError(f"file source {self.path}: position {position!r} is not a byte offset") from None
        # _buf holds the file's bytes from _base on that are read but not consumed; while not
        # _synced, _base is just before the current block and the first line start is not found yet
        self._buf = b""
        self._block = offset // split if readers > 1 else 0
        if readers > 1 and self._block % readers != reader:  # the next line is another reader's
            self._block += (reader - self._block) % readers
            self._base, self._synced = self._block * split - 1, False
        else:
            self._base, self._synced = offset, True  # a position is always a line start
        self._seen = offset  # the file was at least this long
        self._last: bytes | None = position or None
        self._lines_read = 0  # raw lines: a record's key is its number among the lines read since open
        self._open_file()

    def _open_file(self) -> bool:
        if self._fd is not None:
            return True
        try:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return False  # not created yet: wait for it
        return True

    def _fill(self) -> bool:
        """Read the next chunk after the buffer; False at the end of the file (for now)."""
        chunk = os.pread(self._fd, READ_CHUNK, self._base + len(self._buf))
        if not chunk:
            return False
        self._buf += chunk
        self._seen = max(self._seen, self._base + len(self._buf))
        return True

    def read(self, max_records: int) -> list[Record]:
        if not self._open_file():
            return []
        size = os.fstat(self._fd).st_size
        if size < self._seen:
            raise FileTruncatedError(
                f"file source {self.path}: file shrank to {size} bytes below the read offset "
                f"{self._seen}; it was truncated or replaced")
        lines: list[bytes] = []
        ends: list[int] = []  # file offset just after each line
        while len(lines) < max_records and self._take_lines(lines, ends, max_records):
            pass
        records = self._parse(lines, ends) if lines else []
        if records:
            self._last = records[-1].position
        return records

    def _take_lines(self, lines: list[bytes], ends: list[int], limit: int) -> bool:
        """Append whole lines that start in this reader's blocks (and the file offset just after each)
        until ``limit``; False when the file has no more for now. In the JSON form, blank lines are
        consumed without a record (raw lines are records, blank ones too, as Conduit's).
        A line belongs to the block its first byte is in, so a reader finishes the
        line that crosses its block's end, and the next block's reader starts after it, as Hadoop's
        line reader does."""
        if not self._synced and not self._sync():
            return False
        buf, base, pos, raw = self._buf, self._base, 0, self.raw
        block_end = (self._block + 1) * self._split if self._readers > 1 else -1
        while len(lines) < limit:
            if base + pos >= block_end >= 0:  # this block is done: on to this reader's next one
                self._block += self._readers
                self._buf, self._base, self._synced = b"", self._block * self._split - 1, False
                return True
            nl = buf.find(b"\n", pos)
            if nl < 0:
                self._buf, self._base = buf[pos:], base + pos
                if self._fill():
                    return True
                if raw and self._buf:  # Conduit's tail sends the text after the last newline as a line
                    self._base += len(self._buf)
                    lines.append(self._buf)
                    ends.append(self._base)
                    self._buf = b""
                return False
            line = buf[pos:nl]
            if raw or (line and not line.isspace()):
                lines.append(line)
                ends.append(base + nl + 1)
            pos = nl + 1
        self._buf, self._base = buf[pos:], base + pos
        return True

    def _sync(self) -> bool:
        """Find the first line start at or after the current block's start (the byte after the first
        newline from the byte before it); False while the file does not hold it yet."""
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                break
            self._base, self._buf = self._base + len(self._buf), b""
            if not self._fill():
                return False
        self._base, self._buf = self._base + nl + 1, self._buf[nl + 1:]
        self._synced = True
        return True

    def _parse(self, lines: list[bytes], ends: list[int]) -> list[Record]:
        if self.raw:
            return self._raw_records(lines, ends)
        try:
            records = self._loads(b"\n".join(lines) + b"\n", self._store)
        except Exception:  # noqa: BLE001 - find the bad line and name it
            self._raise_for_bad_line(lines, ends)
            raise
        if len(records) != len(lines):
            raise CdcflowError(f"file source {self.path}: {len(lines)} lines gave {len(records)} records")
        for rec, end in zip(records, ends):
            rec.position = str(end).encode()
        return records

    def _raw_records(self, lines: list[bytes], ends: list[int]) -> list[Record]:
        """Conduit's records of raw lines (a ``\r`` before the ``\n`` stays in the line, as Conduit's)."""
        first = self._lines_read + 1
        self._lines_read += len(lines)
        path = self.path
        return [Record(str(end).encode(), Operation.CREATE, {META_FILE_PATH: path}, str(n).encode(), None, line)
                for n, line, end in zip(range(first, first + len(lines)), lines, ends)]

    def _raise_for_bad_line(self, lines: list[bytes], ends: list[int]) -> None:
        loads_record = _jsonform().loads_record
        for line, end in zip(lines, ends):
            try:
                loads_record(line, self._store)
            except Exception:  # noqa: BLE001 - this is the bad line; parse again to name its number
                start = end - len(line) - 1
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
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

