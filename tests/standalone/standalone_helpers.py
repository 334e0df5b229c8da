"""Helpers for the standalone tests: executable plugin scripts in a plugins directory."""

from __future__ import annotations

import stat
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent


def write_plugin(directory: Path, name: str, body: str) -> Path:
    """An executable Python script run by this venv's interpreter."""
    path = directory / name
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body).lstrip())
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def served(directory: Path, name: str, target: str, extra: str = "") -> Path:
    """A script serving ``plugins_for_tests.<target>`` with cdcflow's server."""
    return write_plugin(directory, name, f"""
        import sys
        sys.path.insert(0, {str(HERE)!r})
        {extra}
        from plugins_for_tests import {target}
        from cdcflow.standalone.server import serve
        sys.exit(serve({target}))
    """)
