"""Helpers for the standalone tests: executable plugin scripts in a plugins directory."""

from __future__ import annotations

import stat
import sys
import textwrap
from pathlib import Path

#: the standalone tests' folder: the plugins they serve and the peer SDK's client script
HERE = Path(__file__).resolve().parents[1] / "standalone"
PLUGINS = HERE / "plugins_for_tests.py"


def write_plugin(directory: Path, name: str, body: str) -> Path:
    """An executable Python script run by this venv's interpreter."""
    path = directory / name
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body).lstrip())
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def served(directory: Path, name: str, target: str, extra: str = "") -> Path:
    """A script serving ``plugins_for_tests.<target>`` with cdcflow's server (the module is
    loaded from its file, as a plugin program ships its own code)."""
    return write_plugin(directory, name, f"""
        import importlib.util
        import sys
        {extra}
        spec = importlib.util.spec_from_file_location("plugins_for_tests", {str(PLUGINS)!r})
        plugins = sys.modules["plugins_for_tests"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(plugins)
        from cdcflow.standalone.server import serve
        sys.exit(serve(plugins.{target}))
    """)
