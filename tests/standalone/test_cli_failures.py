"""End to end through `cdcflow run`: bad settings, a missing plugin, and standalone plugins
that crash at start or mid-stream each give a clear error and a non-zero exit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.standalone import HERE, served, write_plugin

CDCFLOW = str(Path(sys.executable).parent / "cdcflow")


def pipeline(tmp_path: Path, destination: str, settings: dict[str, str]) -> Path:
    lines = "\n".join(f"          {k}: {v!r}" for k, v in settings.items())
    path = tmp_path / "p.yaml"
    path.write_text(textwrap.dedent("""
        version: 2.2
        engine:
          master: local[1]
        pipelines:
          - id: p
            connectors:
              - id: gen
                type: source
                plugin: builtin:generator
                settings:
                  recordCount: "40"
                  format.type: raw
                  format.options.id: int
              - id: dst
                type: destination
                plugin: {destination}
                settings:
        """).format(destination=destination) + lines + "\n")
    return path


def run(tmp_path: Path, path: Path, plugins_dir: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(HERE))
    return subprocess.run(
        [CDCFLOW, "--plugins-dir", str(plugins_dir), "run", str(path), "--until-idle", "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL,
    )


def test_bad_setting_exits_2_naming_plugin_parameter_and_rule(tmp_path: Path, plugins_dir: Path) -> None:
    served(plugins_dir, "testconn", "TEST_CONNECTOR")
    path = pipeline(tmp_path, "standalone:testconn", {"path": str(tmp_path / "out"), "mode": "z"})
    res = run(tmp_path, path, plugins_dir)
    assert res.returncode == 2, res.stderr
    err = res.stdout + res.stderr
    assert "testconn" in err and "'mode'" in err and "inclusion" in err


def test_missing_plugin_exits_2(tmp_path: Path, plugins_dir: Path) -> None:
    path = pipeline(tmp_path, "standalone:nosuchplugin", {"path": "x"})
    res = run(tmp_path, path, plugins_dir)
    assert res.returncode == 2, res.stderr
    assert "nosuchplugin" in res.stdout + res.stderr


@pytest.mark.slow
def test_destination_crashing_mid_stream_fails_the_run(tmp_path: Path, plugins_dir: Path) -> None:
    served(plugins_dir, "testconn", "TEST_CONNECTOR")
    out = tmp_path / "out"
    path = pipeline(tmp_path, "standalone:testconn", {"path": str(out), "die_after": "5"})
    res = run(tmp_path, path, plugins_dir)
    assert res.returncode == 1, res.stdout + res.stderr
    err = res.stdout + res.stderr
    assert "testconn" in err and "unacknowledged" in err
    # nothing the plugin did not acknowledge was recorded as delivered: no saved position
    # lies past what the destination wrote
    written = out.read_text().split() if out.exists() else []
    assert len(written) <= 5


@pytest.mark.slow
def test_destination_crashing_at_start_fails_the_run(tmp_path: Path, plugins_dir: Path) -> None:
    write_plugin(plugins_dir, "crashy", """
        import os, sys
        from cdcflow.sdk import ConnectorPlugin, Destination
        from cdcflow.standalone.server import serve

        class Crashes(Destination):
            def open(self):
                sys.stderr.write("crashy: cannot open the target\\n")
                sys.stderr.flush()
                os._exit(4)

        sys.exit(serve(ConnectorPlugin(name="crashy", version="v0.0.1", destination=Crashes)))
    """)
    path = pipeline(tmp_path, "standalone:crashy", {})
    res = run(tmp_path, path, plugins_dir)
    assert res.returncode == 1, res.stdout + res.stderr
    err = res.stdout + res.stderr
    assert "crashy" in err
