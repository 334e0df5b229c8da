"""Pytest plugin: a real S3 endpoint (moto's server, a subprocess) for the whole session.

Loaded for every test directory by ``tests/conftest.py``; lazy, so sessions that do not use it
start nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from cdcflow.dev.process import free_port


@pytest.fixture(scope="session")
def moto_server():
    """``python -m moto.server`` on 127.0.0.1, stopped after the session."""
    port = free_port()
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
