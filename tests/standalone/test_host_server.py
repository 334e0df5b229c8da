"""cdcflow host <-> cdcflow-served plugin: full lifecycles over real subprocesses."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cdcflow.errors import ConfigError
from cdcflow.params import ParamType
from cdcflow.record import Record
from cdcflow.sdk import FILTERED, Failed
from cdcflow.standalone.host import (
    HostOptions, StandaloneDestination, StandaloneSource, StandaloneTransform, specify,
)

from helpers.standalone import served


def _read_all(src: StandaloneSource, want: int, timeout: float = 20.0) -> list[Record]:
    got: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        batch = src.read(1000)
        assert batch is not None
        got.extend(batch)
        if not batch:
            time.sleep(0.005)
    return got


def test_specify_connector_params_and_sides(plugins_dir: Path) -> None:
    path = served(plugins_dir, "testconn", "TEST_CONNECTOR")
    spec = specify(path)
    assert (spec.name, spec.version, spec.kind, spec.author) == ("testconn", "v1.2.3", "connector", "cdcflow tests")
    assert spec.has_source and spec.has_destination
    assert spec.source_params["count"].type is ParamType.INT
    assert spec.source_params["count"].greater_than == 0
    assert spec.source_params["acks"].required
    mode = spec.destination_params["mode"]
    assert mode.inclusion == ("a", "b") and mode.regex == "[ab]" and mode.default == "a"
    assert spec.destination_params["flush"].type is ParamType.DURATION
    assert spec.destination_params["flush"].less_than == 3600


def test_specify_transform(plugins_dir: Path) -> None:
    spec = specify(served(plugins_dir, "echo", "EchoTransform"))
    assert (spec.name, spec.kind, spec.version) == ("echo", "transform", "v0.0.1")
    assert set(spec.params) == {"suffix"}


@pytest.mark.parametrize("network", ["tcp", "unix"])
def test_source_reads_acks_stops(plugins_dir: Path, tmp_path: Path, network: str) -> None:
    acks = tmp_path / "acks"
    src = StandaloneSource(served(plugins_dir, "testconn", "TEST_CONNECTOR"),
                           options=HostOptions(extra_env={"CDCFLOW_PLUGIN_NETWORK": network}))
    src.configure({"count": 25, "acks": str(acks)})
    assert src.proc.handshake.network == network
    src.open(b"5")
    records = _read_all(src, 20)
    assert [r.position for r in records] == [str(i).encode() for i in range(6, 26)]
    assert records[0].key == b"k6"
    src.ack([r.position for r in records[:10]])
    last = src.stop()
    assert last == b"25"
    src.ack([r.position for r in records[10:]])
    src.teardown()
    assert not src.proc.alive() and src.proc.exit_code() == 0
    lines = [json.loads(x) for x in acks.read_text().split()]
    assert lines == [str(i) for i in range(6, 26)] + ["teardown"]


def test_destination_acks_in_order_with_errors(plugins_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    dst = StandaloneDestination(served(plugins_dir, "testconn", "TEST_CONNECTOR"))
    dst.configure({"path": str(out), "flush": 2.5})
    dst.open()
    batch = [Record(position=str(i).encode(), key=b"reject" if i == 3 else b"k", after=b"x") for i in range(10)]
    res = dst.write(batch)
    assert res is not None and res[3] == "rejected by test destination"
    assert [r for i, r in enumerate(res) if i != 3] == [None] * 9
    assert dst.write(batch[4:6]) is None
    dst.stop(b"5")
    dst.teardown()
    assert out.read_text().split() == ["0", "1", "2", "4", "5", "6", "7", "8", "9", "4", "5"]
    events = [json.loads(x) for x in Path(str(out) + ".events").read_text().splitlines()]
    assert events == [{"stop": "5"}, {"teardown": True}]


def test_bad_settings_are_config_errors(plugins_dir: Path, tmp_path: Path) -> None:
    dst = StandaloneDestination(served(plugins_dir, "testconn", "TEST_CONNECTOR"))
    try:
        with pytest.raises(ConfigError) as err:
            dst.configure({"path": str(tmp_path / "x"), "mode": "c"})
        assert "mode" in str(err.value) and "inclusion" in str(err.value)
    finally:
        dst.teardown()
    assert not dst.proc.alive()


def test_transform_results(plugins_dir: Path) -> None:
    t = StandaloneTransform(served(plugins_dir, "echo", "EchoTransform"))
    t.configure({})
    t.open()
    recs = [Record(position=b"1", key=b"a", after=b"A"), Record(position=b"2", key=b"drop"),
            Record(position=b"3", key=b"fail"), Record(position=b"4", key=b"twice", after=b"T")]
    res = t.process(recs)
    t.teardown()
    assert res[0] == recs[0]
    assert res[1] is FILTERED
    assert res[2] == Failed("asked to fail")
    assert res[3] == [recs[3], recs[3]]
