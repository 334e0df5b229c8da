"""Shared by the engine tests: the repository, the interpreter, the test plugin package, pipeline
files and ``cdcflow`` subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
#: a directory holding an installed-looking distribution (``.dist-info`` with a ``cdcflow`` entry
#: point): on the driver's path only, so the engine must ship it to the workers itself
PLUGIN_PKG = REPO / "tests" / "engine" / "plugin_pkg"

#: a bounded generator source of sequential keys (partition p gets p, p + partitions, ...)
GENERATOR = """\
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          format.type: structured
          format.options.id: int
          operations: create
          recordCount: "{count}"
          partitions: "{partitions}"
          rate: "{rate}"
"""


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
