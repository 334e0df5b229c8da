"""Fixtures: a real moto S3 server (subprocess) and helpers that drive the storage connectors in-process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid

import pytest



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def moto_server():
    """``python -m moto.server`` on 127.0.0.1, stopped after the session."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("moto server did not start")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


@pytest.fixture(params=["local", "s3"])
def storage_uri(request, tmp_path):
    """(uri, extra settings) for local disk and for a fresh bucket on the moto server."""
    if request.param == "local":
        return str(tmp_path / "lake"), {}
    endpoint = request.getfixturevalue("moto_server")
    import s3fs

    bucket = "b" + uuid.uuid4().hex[:12]
    fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint},
                           skip_instance_cache=True)
    fs.mkdir(bucket)
    return f"s3://{bucket}/prefix", {"s3.endpoint": endpoint, "s3.access-key": "testing",
                                     "s3.secret-access-key": "testing", "s3.region": "us-east-1"}


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local[2] Spark session for the in-process engine tests (``run_files`` joins it)."""
    from cdcflow.engine.spark.session import start_session
    from cdcflow.engine.state import StateDir

    state = StateDir(tmp_path_factory.mktemp("spark-session")).create()
    info = start_session("local[2]", {}, state)
    yield info.context
    info.stop()
