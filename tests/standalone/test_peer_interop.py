"""Plugins written with Conduit's Python SDK (the peer) under the cdcflow host.

The peer package registers the same proto file names as cdcflow, so it only
ever runs in the plugin subprocesses.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cdcflow.errors import ConfigError
from cdcflow.params import ParamType
from cdcflow.record import Operation, Record
from cdcflow.standalone.host import StandaloneDestination, StandaloneSource, specify

from helpers.standalone import write_plugin

PEER_SOURCE = """
    from typing import Literal
    from conduit import BaseConfig, Change, Field, Operation, Record, Source, Specification, serve
    from conduit.errors import BackoffRetry

    class Config(BaseConfig):
        count: int = Field(default=5, gt=0, description="records to produce")
        acks: str = Field(description="file acks are logged to")
        shape: Literal["raw", "structured"] = Field(default="structured", description="payload kind")

    class PeerSource(Source[Config]):
        async def open(self, position):
            self.n = int(position) if position else 0

        async def read(self):
            if self.n >= self.config.count:
                raise BackoffRetry()
            self.n += 1
            after = {"n": self.n, "name": f"row {self.n}"} if self.config.shape == "structured" else f"raw {self.n}".encode()
            return Record(position=str(self.n).encode(), operation=Operation.CREATE,
                          metadata={"opencdc.collection": "peer.t"}, key=f"k{self.n}".encode(),
                          payload=Change(after=after))

        async def ack(self, position):
            with open(self.config.acks, "a") as f:
                f.write(position.decode() + "\\n")

    serve(Specification(name="peer-source", version="v0.3.0", author="peer", summary="peer source"), source=PeerSource)
"""

PEER_DESTINATION = """
    import json
    from conduit import BaseConfig, Destination, Field, Specification, serve

    class Config(BaseConfig):
        path: str = Field(description="file records are appended to")

    class PeerDestination(Destination[Config]):
        async def write(self, records):
            with open(self.config.path, "a") as f:
                for r in records:
                    after = r.payload.after
                    f.write(json.dumps({"position": r.position.decode(), "op": r.operation.name,
                                        "key": r.key.decode() if isinstance(r.key, bytes) else r.key,
                                        "after": after.decode() if isinstance(after, bytes) else after}) + "\\n")

    serve(Specification(name="peer-destination", version="v0.3.0", author="peer"), destination=PeerDestination)
"""


@pytest.fixture
def peers(plugins_dir: Path) -> Path:
    write_plugin(plugins_dir, "peer-source", PEER_SOURCE)
    write_plugin(plugins_dir, "peer-destination", PEER_DESTINATION)
    return plugins_dir


def test_peer_specs_visible(peers: Path) -> None:
    src = specify(peers / "peer-source")
    assert (src.name, src.version, src.summary, src.kind) == ("peer-source", "v0.3.0", "peer source", "connector")
    assert src.has_source and not src.has_destination
    count = src.source_params["count"]
    assert count.type is ParamType.INT and count.default == "5" and count.greater_than == 0
    assert src.source_params["acks"].required
    assert src.source_params["shape"].inclusion == ("raw", "structured")
    dst = specify(peers / "peer-destination")
    assert dst.has_destination and not dst.has_source
    assert dst.destination_params["path"].required


def test_peer_plugins_listed_by_registry(peers: Path) -> None:
    from cdcflow.registry import load_registry

    reg = load_registry(peers)
    found = {p.name: p for p in reg.connectors() if p.type == "standalone"}
    assert set(found) >= {"peer-source", "peer-destination"}, reg.errors
    assert found["peer-source"].sides == ("source",)
    assert "count" in found["peer-source"].source_params
    assert found["peer-destination"].sides == ("destination",)


@pytest.mark.parametrize("shape", ["structured", "raw"])
def test_records_flow_from_peer_source_with_acks(peers: Path, tmp_path: Path, shape: str) -> None:
    acks = tmp_path / "acks"
    src = StandaloneSource(peers / "peer-source")
    src.configure({"count": 7, "acks": str(acks), "shape": shape})
    src.open(b"2")
    got: list[Record] = []
    deadline = time.monotonic() + 20
    while len(got) < 5 and time.monotonic() < deadline:
        got.extend(src.read(100) or [])
        time.sleep(0.01)
    assert [r.position for r in got] == [b"3", b"4", b"5", b"6", b"7"]
    assert got[0].operation is Operation.CREATE
    assert got[0].key == b"k3" and got[0].collection == "peer.t"
    if shape == "structured":
        assert got[0].after == {"n": 3, "name": "row 3"}
    else:
        assert got[0].after == b"raw 3"
    src.ack([r.position for r in got])
    # The peer SDK cancels its ack consumer as soon as Stop ends its read loop,
    # so acks still in flight then are dropped on its side: let them land first.
    deadline = time.monotonic() + 10
    while (not acks.exists() or len(acks.read_text().split()) < 5) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert src.stop() == b"7"
    src.teardown()
    assert acks.read_text().split() == ["3", "4", "5", "6", "7"]
    assert src.proc.exit_code() == 0


def test_records_flow_to_peer_destination_with_acks(peers: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    dst = StandaloneDestination(peers / "peer-destination")
    dst.configure({"path": str(out)})
    dst.open()
    batch = [Record(position=f"p{i}".encode(), operation=Operation.UPDATE, key=f"k{i}".encode(),
                    before={"n": i - 1}, after={"n": i, "s": "x" * i}) for i in range(50)]
    assert dst.write(batch) is None
    assert dst.write([Record(position=b"raw", key=b"r", after=b"\x00\x01")]) is None
    dst.stop(b"raw")
    dst.teardown()
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["position"] for x in lines] == [f"p{i}" for i in range(50)] + ["raw"]
    assert lines[7] == {"position": "p7", "op": "UPDATE", "key": "k7", "after": {"n": 7, "s": "xxxxxxx"}}
    assert lines[-1]["after"] == "\x00\x01"


def test_peer_rejects_bad_settings(peers: Path, tmp_path: Path) -> None:
    src = StandaloneSource(peers / "peer-source")
    try:
        with pytest.raises(ConfigError, match="peer-source"):
            src.configure({"count": "0", "acks": str(tmp_path / "a")})
    finally:
        src.teardown()
