import pytest


@pytest.fixture
def clean_env(monkeypatch):
    """No plugins directory from the developer's environment."""
    monkeypatch.delenv("CDCFLOW_PLUGINS_DIR", raising=False)
    return monkeypatch
