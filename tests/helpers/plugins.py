"""Helpers for the registry tests. Real third-party plugins: modules plus a ``.dist-info``
with ``entry_points.txt`` in a temporary directory put on ``sys.path``, which
is exactly how an installed distribution is found."""

from __future__ import annotations

import os
import stat
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def install_fake_dist(root: Path, dist: str, modules: dict[str, str], entry_points: dict[str, str]) -> Path:
    """Write modules and a minimal installed distribution declaring ``entry_points``."""
    root.mkdir(parents=True, exist_ok=True)
    for name, source in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-0.1.0.dist-info"  # the stem must be the normalized name
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    eps = "[cdcflow]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(eps)
    return root


def write_executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CDCFLOW_PLUGINS_DIR", "PYTHONPATH")}
    env.update(extra)
    return env
