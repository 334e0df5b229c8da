import json
import multiprocessing
import os

import pytest

from cdcflow.connectors.file import FileTruncatedError, MalformedLineError
from cdcflow.errors import ConfigError
from cdcflow.registry import load_registry


@pytest.fixture(scope="module")
def reg():
    return load_registry(None)


def generated(reg, n=25, **extra):
    info = reg.connector("builtin:generator")
    source = info.new_source()
    source.configure(info.validate("source", {"format.type": "tidb", "recordCount": str(n),
                                              "operations": "create,update,delete", **extra}))
    source.open(None)
    out = []
    while (batch := source.read(10)) is not None:
        out += batch
    return out


def destination(reg, path):
    info = reg.connector("builtin:file")
    dest = info.new_destination()
    dest.configure(info.validate("destination", {"path": str(path)}))
    dest.open()
    return dest


def source(reg, path, position=None):
    info = reg.connector("builtin:file")
    src = info.new_source()
    src.configure(info.validate("source", {"path": str(path), "format": "opencdc/json"}))
    src.open(position)
    return src


def without_position(records):
    out = []
    for r in records:
        c = r.copy()
        c.position = b""
        out.append(c)
    return out


def test_every_tidb_value_round_trips_through_the_file(reg, tmp_path):
    path = tmp_path / "records.jsonl"
    records = generated(reg)
    dest = destination(reg, path)
    dest.write(records[:10])
    dest.write(records[10:])
    dest.teardown()
    assert path.read_bytes().count(b"\n") == len(records)

    got = source(reg, path).read(1000)
    assert without_position(got) == without_position(records)
    # positions are byte offsets just after each line
    ends = [i + 1 for i, b in enumerate(path.read_bytes()) if b == ord("\n")]
    assert [int(r.position) for r in got] == ends


def test_source_follows_a_growing_file_and_waits_for_complete_lines(reg, tmp_path):
    path = tmp_path / "growing.jsonl"
    src = source(reg, path)
    assert src.read(10) == []  # the file does not exist yet
    records = generated(reg, 6)
    dest = destination(reg, path)
    dest.write(records[:2])
    assert len(src.read(10)) == 2
    assert src.read(10) == []  # at the end: nothing, not None

    extra = tmp_path / "one.jsonl"
    d2 = destination(reg, extra)
    d2.write(records[2:3])
    d2.teardown()
    whole = extra.read_bytes()
    with open(path, "ab") as f:  # half a line: not consumed
        f.write(whole[:40])
    assert src.read(10) == []
    with open(path, "ab") as f:
        f.write(whole[40:])
    got = src.read(10)
    assert without_position(got) == without_position(records[2:3])
    assert got[0].position == str(path.stat().st_size).encode()
    dest.write(records[3:])
    assert len(src.read(2)) == 2 and len(src.read(10)) == 1
    dest.teardown()
    src.teardown()


def test_source_resumes_after_a_position(reg, tmp_path):
    path = tmp_path / "r.jsonl"
    records = generated(reg, 12)
    dest = destination(reg, path)
    dest.write(records)
    first = source(reg, path).read(5)
    rest = source(reg, path, position=first[-1].position).read(100)
    assert without_position(rest) == without_position(records[5:])


def _file_with_a_bad_line(reg, path, before: int, bad: bytes) -> None:
    """``before`` good records, the ``bad`` bytes, one good record."""
    dest = destination(reg, path)
    dest.write(generated(reg, before))
    with open(path, "ab") as f:
        f.write(bad)
    dest.write(generated(reg, 1))


def test_malformed_line_names_file_and_line(reg, tmp_path):
    path = tmp_path / "bad.jsonl"
    _file_with_a_bad_line(reg, path, 2, b"\n{\"position\": \"AA==\", \"operation\": \"create\", \"payload\": \n")
    with pytest.raises(MalformedLineError) as e:
        source(reg, path).read(100)
    assert e.value.line == 4 and e.value.path == str(path)
    assert f"{path}:4:" in str(e.value)


def test_truncated_file_is_an_error(reg, tmp_path):
    path = tmp_path / "t.jsonl"
    dest = destination(reg, path)
    dest.write(generated(reg, 3))
    src = source(reg, path)
    assert len(src.read(10)) == 3
    os.truncate(path, 10)
    with pytest.raises(FileTruncatedError):
        src.read(10)


def test_destination_fsyncs_each_batch_before_returning(reg, tmp_path, monkeypatch):
    # A spy, not a mock: the real os.fsync still runs. A lost page cache cannot be
    # produced in a test, so we check the call order the durability rests on.
    events = []
    real_write, real_fsync = os.write, os.fsync
    monkeypatch.setattr(os, "write", lambda fd, data: events.append(("write", fd)) or real_write(fd, data))
    monkeypatch.setattr(os, "fsync", lambda fd: events.append(("fsync", fd)) or real_fsync(fd))
    dest = destination(reg, tmp_path / "d.jsonl")
    records = generated(reg, 20)
    dest.write(records)
    fd = dest._fd
    assert events == [("write", fd), ("fsync", fd)]  # one write per batch, then fsync
    dest.teardown()


def _append(path, worker, batches):
    from cdcflow.record import Operation, Record

    reg = load_registry(None)
    dest = destination(reg, path)
    for b in range(batches):
        dest.write([Record(f"{worker}/{b}/{i}".encode(), Operation.CREATE, {}, {"w": worker},
                           None, {"w": worker, "b": b, "i": i, "pad": "x" * 3000}) for i in range(20)])
    dest.teardown()


def test_concurrent_appenders_never_interleave_lines(reg, tmp_path):
    path = tmp_path / "shared.jsonl"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append, args=(str(path), w, 10)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = path.read_bytes().splitlines()
    assert len(lines) == 3 * 10 * 20
    seen = {(d["payload"]["after"]["w"], d["payload"]["after"]["b"], d["payload"]["after"]["i"])
            for d in map(json.loads, lines)}
    assert len(seen) == 600


def test_path_is_required(reg):
    with pytest.raises(ConfigError) as e:
        reg.connector("file").validate("destination", {})
    assert (e.value.parameter, e.value.rule) == ("path", "required")


def test_a_torn_last_line_is_cut_before_the_next_batch(reg, tmp_path, caplog):
    """A writer killed inside ``os.write`` leaves part of a line; those records were never
    acknowledged, so the next writer drops the fragment and every line stays a record."""
    path = tmp_path / "d.jsonl"
    first, second = generated(reg, 10), generated(reg, 6, seed="7")
    dest = destination(reg, path)
    dest.write(first)
    dest.teardown()
    whole = path.read_bytes()
    torn = whole.splitlines(keepends=True)[3]
    with open(path, "ab") as f:  # what a SIGKILL inside the write leaves
        f.write(torn[: len(torn) // 2])
    dest = destination(reg, path)
    with caplog.at_level("WARNING", logger="cdcflow.connectors.file"):
        dest.write(second)
    dest.teardown()
    assert path.read_bytes().startswith(whole)
    lines = path.read_bytes().splitlines()
    assert len(lines) == len(first) + len(second)
    assert [json.loads(x)["position"] for x in lines[len(first):]] == [
        json.loads(x)["position"] for x in _lines_of(reg, tmp_path, second)]
    assert "torn last line" in caplog.text and f"offset {len(whole)}" in caplog.text


def test_a_whole_last_line_without_its_newline_is_kept(reg, tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"hand": "written", "big": 123456789012345678901234567890}')
    dest = destination(reg, path)
    dest.write(generated(reg, 3))
    dest.teardown()
    lines = path.read_bytes().splitlines()
    assert json.loads(lines[0]) == {"hand": "written", "big": 123456789012345678901234567890}
    assert len(lines) == 4 and all(json.loads(x) for x in lines)


def _lines_of(reg, tmp_path, records):
    other = tmp_path / "reference.jsonl"
    dest = destination(reg, other)
    dest.write(records)
    dest.teardown()
    return other.read_bytes().splitlines()


def _resident_pages(path) -> list[bool]:
    """Which pages of the file are in the page cache (mincore(2) on a shared read-only mapping)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = os.path.getsize(path)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    with open(path, "rb") as f:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            vec = ctypes.create_string_buffer(pages)
            assert libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
            return [b & 1 == 1 for b in vec.raw]
        finally:
            libc.munmap(addr, size)


def test_written_pages_leave_the_page_cache_but_the_tail_page(reg, tmp_path):
    """A destination streams data it does not read back: once synced, its pages are dropped (the
    allocator reuses them for the next batch); the last page stays for the next torn-tail check."""
    path = tmp_path / "out.jsonl"
    with open(path, "wb") as f:  # does this file system drop clean pages on advice at all?
        f.write(b"x" * (1 << 20))
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 1 << 20, os.POSIX_FADV_DONTNEED)
    if any(_resident_pages(path)):
        pytest.skip("this file system keeps clean pages on POSIX_FADV_DONTNEED (tmpfs)")
    path.unlink()
    dest = destination(reg, path)
    records = generated(reg, 300)
    for i in range(0, 300, 100):
        assert dest.write(records[i:i + 100]) is None
    dest.teardown()
    resident = _resident_pages(path)
    assert len(resident) > 8 and sum(resident) <= 2 and resident[-1]
    lines = path.read_bytes().splitlines()  # and everything is there
    assert len(lines) == 300 and [json.loads(x)["position"] for x in lines[:2]]


def split_readers(reg, path, readers, split, positions=None):
    """One opened source per partition the settings give (``positions``: partition -> position)."""
    info = reg.connector("builtin:file")
    settings = info.validate("source", {"path": str(path), "format": "opencdc/json", "partitions": str(readers),
                                        "split-size": str(split)})
    planner = info.new_source()
    planner.configure(settings)
    out = {}
    for part in planner.partitions():
        src = info.new_source()
        src.configure(settings)
        src.open((positions or {}).get(part), part)
        out[part] = src
    return out


def drain(src, size=7):
    out = []
    while batch := src.read(size):
        out += batch
    return out


def _uneven_file(reg, path):
    """Records of very different line lengths, and blank lines between some of them."""
    records = generated(reg, 40)
    dest = destination(reg, path)
    for i in range(0, 40, 3):
        dest.write(records[i:i + 3])
        dest.teardown()
        with open(path, "ab") as f:
            f.write(b"\n" if i % 2 else b"  \n")
        dest = destination(reg, path)
    dest.teardown()
    return records


def test_one_partition_is_the_whole_file_by_default(reg, tmp_path):
    """The default keeps the file's line order and the partition id state saved before splitting existed."""
    info = reg.connector("builtin:file")
    src = info.new_source()
    src.configure(info.validate("source", {"path": str(tmp_path / "x")}))
    assert list(src.partitions()) == [""]
    src.configure(info.validate("source", {"path": str(tmp_path / "x"), "partitions": "2"}))
    assert list(src.partitions()) == ["0/2/16777216", "1/2/16777216"]


@pytest.mark.parametrize("readers", [2, 3])
def test_readers_of_a_split_file_get_every_line_once_in_order(reg, tmp_path, readers):
    """Every split size from a third of a line to the whole file: each line
    is read exactly once, by the reader of the block its first byte is in, with its exact position."""
    path = tmp_path / "split.jsonl"
    records = _uneven_file(reg, path)
    data = path.read_bytes()
    starts, ends = [], []
    pos = 0
    for line in data.split(b"\n")[:-1]:
        if line.strip():
            starts.append(pos)
            ends.append(pos + len(line) + 1)
        pos += len(line) + 1
    lengths = sorted(e - s for s, e in zip(starts, ends))
    for split in sorted({lengths[0] // 3, lengths[0] - 1, lengths[0], lengths[0] + 1, lengths[-1], 2 * lengths[-1] + 7,
                         len(data) // readers, len(data)}):
        got = {part: drain(src) for part, src in split_readers(reg, path, readers, split).items()}
        for i, part in enumerate(got):
            mine = [e for s, e in zip(starts, ends) if (s // split) % readers == i]
            assert [int(r.position) for r in got[part]] == mine, (split, part)
        every = sorted((r for rs in got.values() for r in rs), key=lambda r: int(r.position))
        assert without_position(every) == without_position(records), split


def test_split_readers_resume_at_their_positions(reg, tmp_path):
    path = tmp_path / "resume.jsonl"
    records = _uneven_file(reg, path)
    split = len(path.read_bytes()) // 9
    first = {part: src.read(4) for part, src in split_readers(reg, path, 2, split).items()}
    positions = {part: rs[-1].position for part, rs in first.items()}
    rest = {part: drain(src, 3) for part, src in split_readers(reg, path, 2, split, positions).items()}
    whole = {part: drain(src, 100) for part, src in split_readers(reg, path, 2, split).items()}
    for part in whole:
        assert [r.position for r in first[part] + rest[part]] == [r.position for r in whole[part]]
    assert sum(len(rs) for rs in whole.values()) == len(records)


def test_split_readers_follow_a_growing_file(reg, tmp_path):
    """Blocks the file grows into are dealt to the readers too; a reader whose block is not written
    yet waits (``[]``), a line is not taken before its newline, and no line is read twice."""
    path = tmp_path / "grow.jsonl"
    records = generated(reg, 30)
    readers = split_readers(reg, path, 2, 300)
    assert all(src.read(10) == [] for src in readers.values())  # no file yet
    got = []
    whole = b"\n".join(_lines_of(reg, tmp_path, records)) + b"\n"
    for cut in range(0, len(whole), 97):  # appended in pieces that end mid-line
        with open(path, "ab") as f:
            f.write(whole[cut:cut + 97])
        for src in readers.values():
            got += src.read(100)
    size = path.stat().st_size
    assert sorted(int(r.position) for r in got) == [i + 1 for i in range(size) if whole[i] == ord("\n")]
    assert without_position(sorted(got, key=lambda r: int(r.position))) == without_position(records)


def test_a_malformed_line_in_a_later_block_names_its_line(reg, tmp_path):
    path = tmp_path / "bad.jsonl"
    _file_with_a_bad_line(reg, path, 5, b'{"position": "AA==", "operation": \n')
    bad_start = path.read_bytes().splitlines(keepends=True)
    offset = sum(map(len, bad_start[:5]))
    split = offset - 3  # the bad line starts in block 1: the second reader's
    srcs = split_readers(reg, path, 2, split)
    assert len(drain(srcs["0/2/%d" % split])) == 5
    with pytest.raises(MalformedLineError) as e:
        drain(srcs["1/2/%d" % split])
    assert (e.value.line, e.value.offset) == (6, offset)


# -- Conduit's source: raw lines (format: raw, the default) --------------------------------------
# Facts from github.com/ConduitIO/conduit-connector-file (source.go, v0.10.8): a record per line
# of any text file, operation create, key = the line number (from 1, counted where the tail
# started), payload.after = the line without its "\n", metadata file.path = the configured
# path, position = the byte offset after the line (nxadm/tail's SeekInfo), resumed from there.
def raw_source(reg, path, position=None, **settings):
    info = reg.connector("builtin:file")
    src = info.new_source()
    src.configure(info.validate("source", {"path": str(path), **settings}))
    src.open(position)
    return src


def test_raw_lines_are_conduits_records(reg, tmp_path):
    path = tmp_path / "any.txt"
    text = b'hello world\n\n{"not": "a record"}\r\nlatin-1 \xe9\nhalf'
    path.write_bytes(text)
    got = raw_source(reg, path).read(100)
    assert [(r.key, r.after, r.before, r.operation.text) for r in got] == [
        (b"1", b"hello world", None, "create"), (b"2", b"", None, "create"),
        (b"3", b'{"not": "a record"}\r', None, "create"), (b"4", b"latin-1 \xe9", None, "create"),
        (b"5", b"half", None, "create")]  # nxadm/tail (Follow, v1.4.11) sends the text after the last newline
    assert [r.metadata for r in got] == [{"file.path": str(path)}] * 5
    ends = [i + 1 for i, b in enumerate(text) if b == ord("\n")] + [len(text)]
    assert [int(r.position) for r in got] == ends


def test_raw_lines_resume_after_a_position_and_follow_the_file(reg, tmp_path):
    path = tmp_path / "grow.txt"
    path.write_bytes(b"a\nb\nc\n")
    first = raw_source(reg, path).read(2)
    src = raw_source(reg, path, position=first[-1].position)
    got = src.read(10)
    # Conduit's tail numbers lines from where it resumed: the key starts at 1 again
    assert [(r.key, r.after, r.position) for r in got] == [(b"1", b"c", b"6")]
    assert src.read(10) == []
    with open(path, "ab") as f:
        f.write(b"d")
    assert [(r.key, r.after, r.position) for r in src.read(10)] == [(b"2", b"d", b"7")]  # as Conduit's tail
    with open(path, "ab") as f:
        f.write(b"\ne\n")
    assert [(r.key, r.after) for r in src.read(10)] == [(b"3", b""), (b"4", b"e")]
    src.teardown()


def test_raw_lines_split_among_readers_cover_the_file_once(reg, tmp_path):
    path = tmp_path / "big.txt"
    lines = [f"line {i} " + "x" * (i % 37) for i in range(400)]
    path.write_text("".join(line + "\n" for line in lines))
    info = reg.connector("builtin:file")
    planner = info.new_source()
    planner.configure(info.validate("source", {"path": str(path), "partitions": "3", "split-size": "1000"}))
    seen = []
    for part in planner.partitions():
        src = info.new_source()
        src.configure(info.validate("source", {"path": str(path), "partitions": "3", "split-size": "1000"}))
        src.open(None, part)
        seen += [r.after.decode() for r in src.read(10_000)]
    assert sorted(seen) == sorted(lines)


def test_the_json_form_reader_is_selected_by_format(reg, tmp_path):
    path = tmp_path / "records.jsonl"
    records = generated(reg, 3)
    destination(reg, path).write(records)
    raw = raw_source(reg, path).read(10)
    assert [r.after for r in raw] == path.read_bytes().splitlines()
    typed = raw_source(reg, path, format="opencdc/json").read(10)
    assert without_position(typed) == without_position(records)
    with pytest.raises(ConfigError, match="format"):
        reg.connector("builtin:file").validate("source", {"path": str(path), "format": "csv"})
