"""`cdcflow dev up/status/down` end to end in subprocesses, leaving nothing behind."""

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cdcflow.dev.process import ServiceProcess

pytestmark = pytest.mark.kafka


def cdcflow(*args, check_rc=None):
    r = subprocess.run([sys.executable, "-m", "cdcflow.cli", *args], capture_output=True, text=True, timeout=120)
    if check_rc is not None:
        assert r.returncode == check_rc, (r.stdout, r.stderr)
    return r


def _gone(pids):
    """No process with these pids is alive (a zombie waiting for init's reaping counts as gone)."""
    for pid in pids:
        try:
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            return False
    return True


def _wait_gone(pids, timeout=10):
    deadline = time.monotonic() + timeout
    while not _gone(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _gone(pids)


def _kill_leftovers(pids):
    for pid in pids:
        if not _gone([pid]):
            os.kill(pid, signal.SIGKILL)


def test_up_status_down(tmp_path):
    state = str(tmp_path / "dev")
    pids = []
    try:
        up = json.loads(cdcflow("dev", "up", "--state", state, "--json", check_rc=0).stdout)
        services = {name: ServiceProcess.from_json({k: v for k, v in s.items() if k != "running"})
                    for name, s in up["services"].items()}
        pids = [s.pid for s in services.values()]
        assert all(s["running"] for s in up["services"].values())

        # the broker carries messages, the registry answers as TiCDC checks it
        bootstrap, registry = up["bootstrap_servers"], up["registry_url"]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("dev-topic", num_partitions=1, replication_factor=1)])["dev-topic"].result(10)
        p = Producer({"bootstrap.servers": bootstrap})
        p.produce("dev-topic", b"hello")
        assert p.flush(10) == 0
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
        c.assign([TopicPartition("dev-topic", 0, 0)])
        msg = c.poll(10)
        c.close()
        assert msg is not None and msg.value() == b"hello"
        assert httpx.get(registry + "/").json() == {}

        # up again: the same services, nothing new started
        again = json.loads(cdcflow("dev", "up", "--state", state, "--json", check_rc=0).stdout)
        assert [s["pid"] for s in again["services"].values()] == pids
        text = cdcflow("dev", "status", "--state", state, check_rc=0).stdout
        assert bootstrap in text and registry in text and "running" in text

        out = cdcflow("dev", "down", "--state", state, check_rc=0).stdout
        assert "broker: stopped" in out and "registry: stopped" in out
        assert _wait_gone(pids)
        assert cdcflow("dev", "status", "--state", state).returncode == 1
        assert not os.path.exists(os.path.join(state, "services.json"))
    finally:
        _kill_leftovers(pids)


def test_up_replaces_a_crashed_service(tmp_path):
    state = str(tmp_path / "dev")
    pids = []
    try:
        first = json.loads(cdcflow("dev", "up", "--state", state, "--json", check_rc=0).stdout)
        pids = [s["pid"] for s in first["services"].values()]
        os.kill(first["services"]["broker"]["pid"], signal.SIGKILL)
        assert _wait_gone([first["services"]["broker"]["pid"]])
        status = json.loads(cdcflow("dev", "status", "--state", state, "--json", check_rc=1).stdout)
        assert status["services"]["broker"]["running"] is False
        assert status["services"]["registry"]["running"] is True

        second = json.loads(cdcflow("dev", "up", "--state", state, "--json", check_rc=0).stdout)
        new_pids = [s["pid"] for s in second["services"].values()]
        pids += new_pids
        assert _wait_gone([first["services"]["registry"]["pid"]])  # the survivor was replaced too
        assert all(s["running"] for s in second["services"].values())
        cdcflow("dev", "down", "--state", state, check_rc=0)
        assert _wait_gone(new_pids)
    finally:
        _kill_leftovers(pids)


def test_down_without_state_is_harmless(tmp_path):
    r = cdcflow("dev", "down", "--state", str(tmp_path / "none"), check_rc=0)
    assert "no dev services" in r.stdout


def test_registry_auth_password_stays_off_command_lines_and_state(tmp_path):
    """The password reaches the registry through its environment, never argv; services.json is 0600."""
    state = str(tmp_path / "dev")
    password = "pw-" + os.urandom(8).hex()
    pids = []
    try:
        r = subprocess.run([sys.executable, "-m", "cdcflow.cli", "dev", "up", "--state", state, "--json",
                            "--registry-auth"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "CDCFLOW_REGISTRY_AUTH": f"cdc:{password}"})
        assert r.returncode == 0, r.stderr
        up = json.loads(r.stdout)
        pids = [s["pid"] for s in up["services"].values()]
        registry_pid = up["services"]["registry"]["pid"]
        cmdline = open(f"/proc/{registry_pid}/cmdline", "rb").read()
        assert b"--auth" in cmdline and password.encode() not in cmdline
        url = up["registry_url"]
        assert httpx.get(url + "/subjects").status_code == 401
        assert httpx.get(url + "/subjects", auth=("cdc", password)).status_code == 200

        status = cdcflow("dev", "status", "--state", state, "--json", check_rc=0).stdout
        assert password not in status and password not in r.stdout + r.stderr
        services_json = os.path.join(state, "services.json")
        assert os.stat(services_json).st_mode & 0o777 == 0o600
        assert password not in open(services_json).read()
        for name in os.listdir(state):
            path = os.path.join(state, name)
            if os.path.isfile(path):
                assert password.encode() not in open(path, "rb").read(), name
        cdcflow("dev", "down", "--state", state, check_rc=0)
        assert _wait_gone(pids)
    finally:
        _kill_leftovers(pids)
