"""cdcflow connectors exported with ``export_launcher`` under a client built from the peer SDK's stubs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdcflow.standalone.export import export_launcher

from helpers.standalone import HERE


def _peer_client(launcher: Path, side: str, config: dict, count: int, env: dict | None = None) -> dict:
    proc = subprocess.run([sys.executable, str(HERE / "peer_client.py"), str(launcher), side, json.dumps(config),
                           str(count)], capture_output=True, text=True, timeout=120, env=dict(os.environ, **(env or {})))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_exported_launcher_refuses_without_cookie(tmp_path: Path) -> None:
    launcher = export_launcher("generator", tmp_path / "out")
    assert launcher.name == "generator" and os.access(launcher, os.X_OK)
    text = launcher.read_text()
    assert text.startswith("#!/bin/sh") and sys.executable in text and "builtin:generator@" in text
    env = {k: v for k, v in os.environ.items() if k != "CONDUIT_PLUGIN_MAGIC_COOKIE"}
    proc = subprocess.run([str(launcher)], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "CONDUIT_PLUGIN_MAGIC_COOKIE" in proc.stderr


@pytest.mark.parametrize("network", ["default", "tcp"])
def test_generator_source_under_peer_client(tmp_path: Path, network: str) -> None:
    """By default a served plugin listens on a unix socket, as go-plugin servers do; with
    CDCFLOW_PLUGIN_NETWORK=tcp on loopback within the host's PLUGIN_MIN_PORT..PLUGIN_MAX_PORT."""
    launcher = export_launcher("builtin:generator", tmp_path / "out")
    env = {"CDCFLOW_PLUGIN_NETWORK": "tcp"} if network == "tcp" else {}
    out = _peer_client(launcher, "source", {"recordCount": "30", "format.type": "structured",
                                                     "format.options.id": "int", "format.options.name": "string"}, 12,
                       env=env)
    assert out["spec"]["name"] == "generator" and "recordCount" in out["spec"]["source_params"]
    if network == "tcp":
        assert out["handshake"].startswith("1|2|tcp|127.0.0.1:")
        port = int(out["handshake"].split("|")[3].rsplit(":", 1)[1])
        assert 20000 <= port <= 20500
    else:
        sock = out["handshake"].split("|")[3]
        assert out["handshake"].startswith("1|2|unix|/") and sock.endswith("/plugin.sock")
        assert not os.path.exists(os.path.dirname(sock))  # the plugin removed its socket directory
    assert out["steps"] == ["Specify", "Configure", "LifecycleOnCreated", "Open", "Run", "Stop", "RunEnded",
                            "Teardown", "Shutdown"]
    assert len(out["positions"]) >= 12 and len(set(out["positions"])) == len(out["positions"])
    assert out["positions"][-1] == out["last_position"]
    assert out["metadata"]["opencdc.payload.schema.subject"]  # structured data travels as Avro + schema ref
    assert out["exit_code"] == 0


def test_file_destination_under_peer_client(tmp_path: Path) -> None:
    launcher = export_launcher("file", tmp_path / "out")
    target = tmp_path / "records.jsonl"
    out = _peer_client(launcher, "destination", {"path": str(target)}, 20)
    params = out["spec"]["destination_params"]
    assert out["spec"]["name"] == "file" and [p for p in params if not p.startswith("sdk.")] == ["path"]
    # Conduit's SDK middleware settings, listed as an SDK connector lists them
    assert {"sdk.batch.size", "sdk.rate.perSecond", "sdk.record.format", "sdk.record.format.options"} <= set(params)
    assert out["steps"] == ["Specify", "Configure", "Open", "Run", "Stop", "Teardown", "Shutdown"]
    assert out["acks"] == [{"position": f"pos-{i}", "error": ""} for i in range(20)]
    lines = [json.loads(x) for x in target.read_text().splitlines()]
    assert len(lines) == 20
    assert lines[1]["payload"]["after"] == {"id": 1, "name": "row 1"}
    assert out["exit_code"] == 0


def test_served_file_destination_applies_conduits_sdk_settings(tmp_path: Path) -> None:
    """Conduit configures a served cdcflow connector with sdk.* settings as any SDK connector: the
    server applies them (record format, batch size). Old code: refused as unknown parameters."""
    launcher = export_launcher("file", tmp_path / "out")
    target = tmp_path / "names.txt"
    out = _peer_client(launcher, "destination", {"path": str(target), "sdk.record.format": "template",
                                                  "sdk.record.format.options": "{{ Payload.After }}",
                                                  "sdk.batch.size": "3"}, 7)
    assert out["acks"] == [{"position": f"pos-{i}", "error": ""} for i in range(7)]
    # the peer client sends raw payloads ("raw 0") and structured ones ({"id": 1, "name": "row 1"})
    assert [json.loads(x) if x.startswith("{") else x for x in target.read_text().splitlines()] == [
        {"id": i, "name": f"row {i}"} if i % 2 else f"raw {i}" for i in range(7)]
    assert out["exit_code"] == 0


def test_served_source_extracts_schemas_under_conduits_subject(tmp_path: Path) -> None:
    """sdk.schema.extract.* / sdk.schema.context.name on a served source: the subject Conduit's SDK
    gives (<context>:<subject>). Old code: refused as unknown parameters."""
    launcher = export_launcher("builtin:generator", tmp_path / "out")
    out = _peer_client(launcher, "source", {"recordCount": "5", "format.type": "structured",
                                            "format.options.id": "int", "sdk.schema.extract.payload.enabled": "true",
                                            "sdk.schema.context.name": "ctx", "sdk.schema.extract.payload.subject": "p",
                                            "sdk.batch.size": "2"}, 5)
    assert out["metadata"]["opencdc.payload.schema.subject"] == "ctx:p"
    assert out["exit_code"] == 0


def test_bad_settings_rejected_with_invalid_argument(tmp_path: Path) -> None:
    launcher = export_launcher("generator", tmp_path / "out")
    proc = subprocess.run([sys.executable, str(HERE / "peer_client.py"), str(launcher), "source",
                           json.dumps({"recordCount": "-5"}), "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "INVALID_ARGUMENT" in proc.stderr and "recordCount" in proc.stderr and "greater-than" in proc.stderr
