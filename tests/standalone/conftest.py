"""Fixtures of the standalone tests (helpers live in tests/helpers/standalone.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def plugins_dir(tmp_path: Path) -> Path:
    d = tmp_path / "plugins"
    d.mkdir()
    return d
