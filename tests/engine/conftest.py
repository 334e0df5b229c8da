"""Shared fixtures: one local[2] Spark session for the in-process engine tests, and the
test plugin package (put on the DRIVER's path only: the engine ships it to workers)."""

from __future__ import annotations

import pytest

from helpers.engine import PLUGIN_PKG


@pytest.fixture(scope="session", autouse=True)
def test_plugins():
    """The test connectors (test-recorder, test-broken, ...), importable for the session: their
    ``.dist-info`` on the path is how the registry finds them, as for an installed plugin."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(PLUGIN_PKG))
        import cdcflow_engine_testplugins

        yield cdcflow_engine_testplugins


@pytest.fixture(scope="session")
def spark(tmp_path_factory, test_plugins):
    from cdcflow.engine.spark.session import start_session
    from cdcflow.engine.state import StateDir

    state = StateDir(tmp_path_factory.mktemp("spark-session")).create()
    info = start_session("local[2]", {}, state)
    yield info.context
    info.stop()
