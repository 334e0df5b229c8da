"""Plugins that fail: each failure is a typed error naming the plugin."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cdcflow.errors import InfrastructureError, PluginCrashedError
from cdcflow.record import Record
from cdcflow.standalone.handshake import HandshakeError
from cdcflow.standalone.host import HostOptions, StandaloneDestination, StandaloneSource, specify

from helpers.standalone import served, write_plugin


def test_exit_before_handshake(plugins_dir: Path) -> None:
    path = write_plugin(plugins_dir, "dies-early", """
        import sys
        sys.stderr.write("fatal: cannot reach the database\\n")
        sys.exit(7)
    """)
    with pytest.raises(PluginCrashedError) as err:
        specify(path)
    msg = str(err.value)
    assert err.value.plugin == "dies-early"
    assert "exit code 7" in msg and "cannot reach the database" in msg


def test_garbage_instead_of_handshake(plugins_dir: Path) -> None:
    path = write_plugin(plugins_dir, "chatty", """
        import time
        print("Hello! starting up...", flush=True)
        time.sleep(60)
    """)
    t0 = time.monotonic()
    with pytest.raises(HandshakeError) as err:
        specify(path)
    assert err.value.plugin == "chatty"
    assert "Hello! starting up..." in str(err.value)
    assert time.monotonic() - t0 < 10  # killed, not waited for


def test_silent_plugin_times_out(plugins_dir: Path) -> None:
    path = write_plugin(plugins_dir, "silent", "import time\ntime.sleep(60)\n")
    with pytest.raises(PluginCrashedError, match="silent.*no handshake line within 1s"):
        specify(path, timeout=1.0)


def test_destination_dies_mid_stream(plugins_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    dst = StandaloneDestination(served(plugins_dir, "dying-dest", "TEST_CONNECTOR"))
    dst.configure({"path": str(out), "die_after": 5})
    dst.open()
    batch = [Record(position=str(i).encode(), after=b"x") for i in range(10)]
    with pytest.raises(PluginCrashedError) as err:
        dst.write(batch)
    dst.teardown()
    msg = str(err.value)
    assert err.value.plugin == "dying-dest"
    assert "10 records of the batch unacknowledged" in msg and "exit code 3" in msg


def test_destination_outage_is_raised_as_an_outage_not_nacks(plugins_dir: Path, tmp_path: Path) -> None:
    """A standalone destination whose service is down fails the write with InfrastructureError
    (service and endpoint carried over gRPC), instead of nacking every record to the DLQ."""
    out = tmp_path / "out"
    dst = StandaloneDestination(served(plugins_dir, "outage-dest", "TEST_CONNECTOR"))
    dst.configure({"path": str(out)})
    dst.open()
    batch = [Record(position=str(i).encode(), key=b"outage" if i == 3 else b"k", after=b"x") for i in range(5)]
    try:
        with pytest.raises(InfrastructureError) as err:
            dst.write(batch)
    finally:
        dst.teardown()
    assert err.value.service == "test-db" and err.value.endpoint == "db.test:5432"
    assert "outage-dest" in str(err.value) and "connection refused" in str(err.value)


def test_source_killed_mid_stream(plugins_dir: Path, tmp_path: Path) -> None:
    src = StandaloneSource(served(plugins_dir, "killed-src", "TEST_CONNECTOR"))
    src.configure({"count": 10**9, "acks": str(tmp_path / "acks")})
    src.open(None)
    deadline = time.monotonic() + 10
    while not src.read(100) and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(src.proc.pid, signal.SIGKILL)
    with pytest.raises(PluginCrashedError) as err:
        while time.monotonic() < deadline + 10:
            src.read(10_000)
    src.teardown()
    assert err.value.plugin == "killed-src" and "exit code -9" in str(err.value)


def test_refuses_to_start_without_cookie(plugins_dir: Path) -> None:
    path = served(plugins_dir, "testconn", "TEST_CONNECTOR")
    env = {k: v for k, v in os.environ.items() if k != "CONDUIT_PLUGIN_MAGIC_COOKIE"}
    proc = subprocess.run([str(path)], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "CONDUIT_PLUGIN_MAGIC_COOKIE" in proc.stderr
    module = subprocess.run([sys.executable, "-m", "cdcflow.standalone.serve", "--plugin", "builtin:file"],
                            env=env, capture_output=True, text=True, timeout=30)
    assert module.returncode == 1 and module.stdout == "" and "launched by a plugin host" in module.stderr


def test_stop_kills_a_plugin_that_ignores_shutdown(plugins_dir: Path) -> None:
    """A plugin without GRPCController that ignores SIGTERM is killed."""
    path = write_plugin(plugins_dir, "stubborn", """
        import signal, sys, time
        from concurrent import futures
        import grpc
        from grpc_health.v1 import health, health_pb2, health_pb2_grpc
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        server = grpc.server(futures.ThreadPoolExecutor(2))
        h = health.HealthServicer()
        h.set("plugin", health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(h, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        print(f"1|2|tcp|127.0.0.1:{port}|grpc", flush=True)
        time.sleep(120)
    """)
    from cdcflow.standalone.host import start_plugin

    proc = start_plugin(path, options=HostOptions(stop_timeout=0.5))
    t0 = time.monotonic()
    code = proc.stop()
    assert code == -signal.SIGKILL
    assert time.monotonic() - t0 < 5
