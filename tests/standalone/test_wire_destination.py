"""The builtin ``file`` destination as a standalone plugin takes request bytes (``write_wire``).

End to end through real plugin processes: the file the plugin writes equals the file the
in-process destination writes for the same records (raw, structured and mixed batches), acks
are as before, and undecodable records, malformed requests and failed writes behave as on
the record path.
"""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from cdcflow.connectors.file import FileDestination
from cdcflow.convert import jsonform
from cdcflow.convert.protobuf import to_batch
from cdcflow.engine.fastpath import WireDestination
from cdcflow.record import META_PAYLOAD_SCHEMA_SUBJECT, META_PAYLOAD_SCHEMA_VERSION, Operation, Record
from cdcflow.registry import load_registry
from cdcflow.sdk import Destination
from cdcflow.standalone import host as host_module
from cdcflow.standalone.export import export_launcher
from cdcflow.standalone.framing import encode_acks
from cdcflow.standalone.host import StandaloneDestination

from helpers.standalone import write_plugin

N = host_module.FIRST_MESSAGE_RECORDS + 2 * host_module.PIPELINE_RECORDS + 11  # four request messages


def raw(i: int, collection: str = "db.raw") -> Record:
    return Record(i.to_bytes(4, "big") if i % 50 else b"", list(Operation)[i % 5],
                  {"opencdc.collection": collection, "note": "\u2028\x01\U0001F600" * (i % 3)},
                  str(i).encode() if i % 7 else None, b"" if i % 11 == 0 else None, bytes(range(i % 256)) * 3)


def structured(i: int) -> Record:
    row = {"id": i, "name": f"n{i}", "score": i * 0.5, "blob": b"\x00\xff", "flag": bool(i & 1)}
    return Record(b"s%d" % i, Operation.UPDATE if i % 2 else Operation.CREATE,
                  {"opencdc.collection": "db.rows"}, {"id": i}, row if i % 2 else None, row)


def same_lines(got: bytes, expected: bytes) -> bool:
    """The same records line by line. Metadata key order aside: the plugin gets its metadata maps
    through protobuf, whose reader does not keep the sender's order (bytes compared where a
    record's metadata has one key, and in tests/convert/test_jsonform_wire.py)."""
    a, b = got.splitlines(), expected.splitlines()
    return len(a) == len(b) and all(x == y or json.loads(x) == json.loads(y) for x, y in zip(a, b))


def in_process_file(tmp_path: Path, batches: list[list[Record]]) -> bytes:
    dst = load_registry().connector("builtin:file").new_destination()
    path = tmp_path / "in-process.jsonl"
    dst.configure({"path": str(path)})
    dst.open()
    for batch in batches:
        assert dst.write(batch) is None
    dst.teardown()
    return path.read_bytes()


@pytest.fixture
def plugin(tmp_path: Path):
    """Open a standalone ``builtin:file`` destination writing to a path; teardown at the end."""
    opened: list[StandaloneDestination] = []

    def open_one(path: Path, launcher: Path | None = None) -> StandaloneDestination:
        dst = StandaloneDestination(launcher or export_launcher("builtin:file", tmp_path / "plugins"))
        dst.configure({"path": str(path)})
        dst.open()
        opened.append(dst)
        return dst

    yield open_one
    for dst in opened:
        dst.teardown()


@pytest.mark.parametrize("kind", ["raw", "structured", "mixed"])
def test_the_plugin_writes_the_file_the_in_process_destination_writes(tmp_path, plugin, kind):
    make = {"raw": lambda i: raw(i), "structured": structured,
            "mixed": lambda i: structured(i) if i % 3 == 0 else raw(i, f"db.t{i % 2}")}[kind]
    batches = [[make(i) for i in range(N)], [make(i) for i in range(N, N + 40)]]
    expected = in_process_file(tmp_path, batches)
    out = tmp_path / "plugin.jsonl"
    dst = plugin(out)
    for batch in batches:
        assert dst.write(batch) is None  # every record acknowledged
    assert same_lines(out.read_bytes(), expected)


def test_single_key_metadata_gives_the_same_bytes(tmp_path, plugin):
    """The benchmark's shape: the file is byte-identical to the in-process one."""
    batch = [Record(i.to_bytes(8, "big"), Operation.CREATE, {"opencdc.collection": "bench.raw"},
                    str(i).encode(), None, bytes(range(256)) * 4) for i in range(N)]
    out = tmp_path / "plugin.jsonl"
    assert plugin(out).write(batch) is None
    assert out.read_bytes() == in_process_file(tmp_path, [batch])
    # (and the kernel takes such a message when it is built)
    message = to_batch(batch[:10]).SerializeToString()
    assert jsonform._kernel is None or jsonform.dumps_wire(message) is not None


def test_undecodable_records_are_nacked_and_the_rest_written(tmp_path, plugin):
    batch = [raw(i) for i in range(30)]
    batch[7] = Record(b"bad", Operation.CREATE, {META_PAYLOAD_SCHEMA_SUBJECT: "no-such-subject",
                                                 META_PAYLOAD_SCHEMA_VERSION: "1"}, b"k", None, b"\x00")
    out = tmp_path / "plugin.jsonl"
    results = plugin(out).write(batch)
    assert results is not None and [i for i, r in enumerate(results) if r] == [7]
    assert "cannot decode record" in results[7] and "no-such-subject" in results[7]
    assert same_lines(out.read_bytes(), in_process_file(tmp_path, [batch[:7] + batch[8:]]))


def test_a_malformed_request_fails_the_stream_after_the_good_ones(tmp_path, plugin):
    out = tmp_path / "plugin.jsonl"
    dst = plugin(out)
    run = dst.proc.channel.stream_stream("/connector.v2.DestinationPlugin/Run", request_serializer=None,
                                         response_deserializer=None)
    good = [raw(i) for i in range(1, 4)]
    message = to_batch(good).SerializeToString()
    responses = run(iter([message, b"\x0a\x05ab"]))  # the second: a record cut short
    assert next(responses) == encode_acks([r.position for r in good])
    with pytest.raises(grpc.RpcError) as info:
        next(responses)
    assert info.value.code() is grpc.StatusCode.INTERNAL and "malformed batch message" in info.value.details()
    assert same_lines(out.read_bytes(), in_process_file(tmp_path, [good]))


# Destinations built on FileDestination to produce what the builtin cannot: a failing write
# (a fault injected in its append), and a write_wire that declines.
_TEST_DESTINATIONS = """
    import sys
    from cdcflow.connectors.file import DESTINATION_PARAMS, FileDestination
    from cdcflow.sdk import ConnectorPlugin
    from cdcflow.standalone.server import serve

    class FailingFile(FileDestination):
        def _append(self, chunks):
            if any(b"RkFJTA==" in c for c in chunks):  # a payload of b"FAIL" in base64
                raise OSError(28, "No space left on device (injected)")
            super()._append(chunks)

    class DecliningFile(FileDestination):
        calls = 0

        def write_wire(self, messages):
            DecliningFile.calls += 1
            assert DecliningFile.calls == 1, "asked again after declining"
            return NotImplemented

    class RecordingFile(FileDestination):  # notes which method each write came through
        def _note(self, what):
            with open(self.path + ".calls", "a") as f:
                f.write(what + "\\n")

        def write(self, records):
            self._note("write")
            return super().write(records)

        def write_wire(self, messages):
            self._note("write_wire")
            return super().write_wire(messages)

    KIND = sys.argv[1] if len(sys.argv) > 1 else "failing"
    CLASSES = {"failing": FailingFile, "declining": DecliningFile, "recording": RecordingFile}
    sys.exit(serve(ConnectorPlugin(name="file-" + KIND, version="v0.0.1", destination_params=DESTINATION_PARAMS,
                                   destination=CLASSES[KIND])))
"""


def _launcher(tmp_path: Path, kind: str) -> Path:
    script = write_plugin(tmp_path, f"file_{kind}.py", _TEST_DESTINATIONS)
    return write_plugin(tmp_path, f"file_{kind}", f"""
        import os, sys
        os.execv(sys.executable, [sys.executable, {str(script)!r}, {kind!r}])
    """)


def test_a_failed_write_nacks_every_record_of_it(tmp_path, plugin):
    out = tmp_path / "plugin.jsonl"
    dst = plugin(out, _launcher(tmp_path, "failing"))
    good = [raw(i) for i in range(20)]
    assert dst.write(good) is None
    bad = [raw(i) for i in range(20, 40)]
    bad[3] = Record(b"x", Operation.CREATE, {}, None, None, b"FAIL")
    bad[5] = Record(b"bad", Operation.CREATE, {META_PAYLOAD_SCHEMA_SUBJECT: "no-such-subject"}, None, None, b"\x00")
    results = dst.write(bad)
    assert results is not None and all(results)
    assert "cannot decode record" in results[5]
    assert all("No space left on device (injected)" in r for i, r in enumerate(results) if i != 5)
    assert dst.write(good[:2]) is None  # the stream goes on
    assert same_lines(out.read_bytes(), in_process_file(tmp_path, [good, good[:2]]))


def test_a_destination_that_declines_gets_records(tmp_path, plugin):
    out = tmp_path / "plugin.jsonl"
    dst = plugin(out, _launcher(tmp_path, "declining"))
    batches = [[raw(i) for i in range(N)], [structured(i) for i in range(30)], [raw(i) for i in range(5)]]
    for batch in batches:
        assert dst.write(batch) is None
    assert same_lines(out.read_bytes(), in_process_file(tmp_path, batches))


def test_write_wire_is_an_engine_fast_path_not_the_sdk():
    """Plugin authors see Conduit's lifecycle only: ``write_wire`` is the engine-internal
    ``WireDestination`` capability, which the ``file`` destination implements."""
    assert not hasattr(Destination, "write_wire")
    assert not isinstance(Destination(), WireDestination)
    assert isinstance(FileDestination(), WireDestination)


def test_several_chunks_go_in_one_writev_and_a_partial_one_is_finished(tmp_path, monkeypatch):
    """``write_wire``'s chunks: one ``writev``; a short write (a fault a regular file does not
    produce, so injected: at most 5 bytes per call) is continued where it stopped."""
    import os

    from cdcflow.connectors import file as file_module

    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
    calls = []
    real = os.writev
    monkeypatch.setattr(os, "writev", lambda f, bufs: calls.append(len(bufs)) or real(f, [bytes(b)[:5] for b in bufs][:1]))
    try:
        file_module._write_all(fd, [b"0123456789", b"", b"abc", b"defghij\n"])
    finally:
        os.close(fd)
    assert path.read_bytes() == b"0123456789abcdefghij\n"
    assert calls[0] == 3 and len(calls) > 1


def test_structured_messages_are_decoded_ahead_then_offered_again(tmp_path, plugin):
    """write_wire converted them through records: the server decodes the next messages itself
    (in its reader thread, while the destination writes) and offers bytes again later."""
    from cdcflow.standalone import server

    out = tmp_path / "plugin.jsonl"
    dst = plugin(out, _launcher(tmp_path, "recording"))
    plain = [[raw(i) for i in range(b * 10, b * 10 + 10)] for b in range(3)]
    batches = [[structured(i) for i in range(b * 10, b * 10 + 10)] for b in range(server._WIRE_PAUSE_MESSAGES + 3)]
    batches.append([raw(i) for i in range(10)])
    for batch in plain + batches:
        assert dst.write(batch) is None
    calls = (tmp_path / "plugin.jsonl.calls").read_text().split()
    if jsonform._kernel is not None:  # the kernel takes raw messages: no pause
        assert calls[:3] == ["write_wire"] * 3
    else:  # every message goes through records: the server decodes ahead after the first
        assert calls[:2] == ["write_wire", "write"]
    calls = calls[3:] if calls[:3] == ["write_wire"] * 3 else calls
    assert calls[0] == "write_wire" and calls[1] == "write"  # paused after the first structured message
    assert calls.count("write_wire") >= 2  # and offered again after the pause
    assert same_lines(out.read_bytes(), in_process_file(tmp_path, plain + batches))
