"""``cdcflow registry serve --auth``: credentials come from the environment or a file, never argv."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from cdcflow.dev.process import free_port


def _serve(tmp_path, *args, env_extra=None):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "cdcflow.cli", "registry", "serve", "--port", str(port),
                             "--data", str(tmp_path / "data"), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env_extra or {})})
    return proc, f"http://127.0.0.1:{port}"


def _wait_up(proc, url):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            httpx.get(url + "/", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    pytest.fail("registry did not start")


def _stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("how", ["env", "file"])
def test_serve_auth_from_env_or_file(tmp_path, how):
    password = "pw-" + os.urandom(6).hex()
    if how == "env":
        proc, url = _serve(tmp_path, "--auth", env_extra={"CDCFLOW_REGISTRY_AUTH": f"u:{password}"})
    else:
        secret = tmp_path / "auth"
        secret.write_text(f"u:{password}\n")
        secret.chmod(0o600)
        proc, url = _serve(tmp_path, "--auth-file", str(secret))
    try:
        _wait_up(proc, url)
        assert password.encode() not in open(f"/proc/{proc.pid}/cmdline", "rb").read()
        assert httpx.get(url + "/subjects").status_code == 401
        assert httpx.get(url + "/subjects", auth=("u", "wrong")).status_code == 401
        assert httpx.get(url + "/subjects", auth=("u", password)).status_code == 200
    finally:
        _stop(proc)
    out, err = proc.communicate()
    assert password not in out + err


def test_serve_refuses_credentials_on_the_command_line(tmp_path):
    proc, _ = _serve(tmp_path, "--auth", "u:pw-on-argv")
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        _stop(proc)
    assert proc.returncode == 2 and "CDCFLOW_REGISTRY_AUTH" in err and "pw-on-argv" not in err


def test_serve_auth_without_credentials_is_a_config_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CDCFLOW_REGISTRY_AUTH"}
    r = subprocess.run([sys.executable, "-m", "cdcflow.cli", "registry", "serve", "--port", str(free_port()),
                        "--data", str(tmp_path / "d"), "--auth"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and "CDCFLOW_REGISTRY_AUTH" in r.stderr
