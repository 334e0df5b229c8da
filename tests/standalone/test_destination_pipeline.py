"""The destination Run stream: the plugin decodes ahead, writes what arrived in one write,
acknowledges per message in order, and never before the write that holds a record returned."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from cdcflow.record import Record
from cdcflow.standalone import host as host_module
from cdcflow.standalone.host import StandaloneDestination

from helpers.standalone import served


def _writes(path: Path) -> list[list[str]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _open(plugins_dir: Path, tmp_path: Path) -> tuple[StandaloneDestination, Path, Path]:
    out, gate = tmp_path / "writes", tmp_path / "gate"
    dst = StandaloneDestination(served(plugins_dir, "gated", "GATED_CONNECTOR"))
    dst.configure({"path": str(out), "gate": str(gate)})
    dst.open()
    return dst, out, gate


def test_no_ack_before_the_write_returned_and_waiting_messages_merge(plugins_dir: Path, tmp_path: Path) -> None:
    dst, out, gate = _open(plugins_dir, tmp_path)
    n = host_module.FIRST_MESSAGE_RECORDS + 3 * host_module.PIPELINE_RECORDS  # four messages
    batch = [Record(position=str(i).encode(), key=b"k", after=b"x" * 100) for i in range(n)]
    result: list = []
    writer = threading.Thread(target=lambda: result.append(dst.write(batch)))
    writer.start()
    writer.join(timeout=1.5)
    assert writer.is_alive() and not result  # the destination has not written: nothing is acknowledged
    gate.touch()
    writer.join(timeout=30)
    assert result == [None]
    writes = _writes(out)
    assert [p for w in writes for p in w] == [str(i) for i in range(n)]  # every record once, in order
    # the first write waited for the gate while the other messages arrived: they were written
    # together (with the first one too if they were decoded before the first write began)
    assert len(writes) <= 2
    dst.teardown()


def test_results_of_a_merged_write_reach_their_records(plugins_dir: Path, tmp_path: Path) -> None:
    dst, out, gate = _open(plugins_dir, tmp_path)
    gate.touch()
    n = host_module.FIRST_MESSAGE_RECORDS + 2 * host_module.PIPELINE_RECORDS + 7
    rejected = {0, 1, host_module.FIRST_MESSAGE_RECORDS - 1, host_module.FIRST_MESSAGE_RECORDS, n - 1}
    batch = [Record(position=str(i).encode(), key=b"reject" if i in rejected else b"k", after=b"x")
             for i in range(n)]
    # a record that names an unknown schema cannot be decoded by the plugin: it alone fails
    undecodable = 1234
    batch[undecodable] = Record(position=b"bad", key=b"k", after=b"\x00", metadata={
        "opencdc.payload.schema.subject": "no-such-subject", "opencdc.payload.schema.version": "1"})
    results = dst.write(batch)
    assert results is not None and len(results) == n
    assert {i for i, r in enumerate(results) if r} == rejected | {undecodable}
    assert all(results[i] == "rejected by test destination" for i in rejected)
    assert "cannot decode record" in results[undecodable] and "no-such-subject" in results[undecodable]
    written = [p for w in _writes(out) for p in w]
    assert "bad" not in written and len(written) == n - 1
    assert dst.write(batch[:3]) == ["rejected by test destination", "rejected by test destination", None]
    dst.teardown()


def test_a_malformed_request_fails_the_stream_with_the_reason(plugins_dir: Path, tmp_path: Path) -> None:
    import grpc
    import pytest

    dst, out, gate = _open(plugins_dir, tmp_path)
    gate.touch()
    run = dst.proc.channel.stream_stream("/connector.v2.DestinationPlugin/Run", request_serializer=None,
                                         response_deserializer=None)
    good = Record(position=b"1", after=b"x")
    from cdcflow.convert.protobuf import to_batch
    from cdcflow.standalone.framing import encode_acks

    message = to_batch([good]).SerializeToString()
    responses = run(iter([message, b"\x0a\x05ab"]))  # the second: a record cut short
    assert next(responses) == encode_acks([b"1"])
    with pytest.raises(grpc.RpcError) as info:
        next(responses)
    assert info.value.code() is grpc.StatusCode.INTERNAL and "malformed batch message" in info.value.details()
    assert _writes(out) == [["1"]]
    dst.teardown()
