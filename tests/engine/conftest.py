"""Shared fixtures: one local[2] Spark session for the in-process engine tests, and the
test plugin package (put on the DRIVER's sys.path only: the engine ships it to workers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
PLUGIN_PKG = HERE / "plugin_pkg"
REPO = HERE.parent.parent
PYTHON = sys.executable


@pytest.fixture(scope="session")
def test_plugins():
    """Import path of the test connectors (test-recorder, test-broken)."""
    if str(PLUGIN_PKG) not in sys.path:
        sys.path.insert(0, str(PLUGIN_PKG))
    import cdcflow_engine_testplugins

    return cdcflow_engine_testplugins


@pytest.fixture(scope="session")
def spark(tmp_path_factory, test_plugins):
    from cdcflow.engine.spark.session import start_session
    from cdcflow.engine.state import StateDir

    state = StateDir(tmp_path_factory.mktemp("spark-session")).create()
    info = start_session("local[2]", {}, state)
    yield info.context
    info.stop()


def write_pipeline(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def cli(args: list[str], *, env_extra: dict[str, str] | None = None, timeout: float = 180, **kw):
    """Run ``cdcflow`` in a subprocess (its own session)."""
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run([PYTHON, "-m", "cdcflow.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=REPO, **kw)
