"""Exporting a cdcflow plugin as an executable Conduit (or cdcflow) can launch."""

from __future__ import annotations

import os
import shlex
import stat
import sys
from pathlib import Path

from ..errors import CdcflowError
from .serve import resolve


def launcher_text(ref: str, kind: str, python: str | None = None, pythonpath: str | None = None) -> str:
    """The launcher script: the absolute interpreter path, and the PYTHONPATH of the
    exporting process when it had one (plugins installed with ``pip --target``)."""
    python = python or sys.executable
    lines = [
        "#!/bin/sh",
        f"# cdcflow standalone plugin launcher for {ref} (written by `cdcflow plugins export`).",
        "# Conduit or cdcflow runs this file; started by hand it exits: the magic cookie is missing.",
    ]
    if pythonpath:
        lines.append(f"PYTHONPATH={shlex.quote(pythonpath)}${{PYTHONPATH:+:$PYTHONPATH}}")
        lines.append("export PYTHONPATH")
    lines.append(f"exec {shlex.quote(python)} -m cdcflow.standalone.serve "
                 f"--plugin {shlex.quote(ref)} --kind {shlex.quote(kind)} \"$@\"")
    return "\n".join(lines) + "\n"


def export_launcher(ref: str, out_dir: Path) -> Path:
    """Write an executable launcher for the builtin plugin ``ref`` into ``out_dir``.

    The file is named after the plugin; the launcher pins the exact version
    (``builtin:NAME@VERSION``) so a later upgrade does not change what an
    exported plugin serves silently. Returns the launcher's path.
    """
    info = resolve(ref)
    if info.type != "builtin":
        raise CdcflowError(f"{info.ref} is already a standalone plugin; only builtin plugins are exported")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / info.name
    text = launcher_text(info.ref, info.kind, pythonpath=os.environ.get("PYTHONPATH") or None)
    tmp = path.with_name(f".{info.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.replace(tmp, path)
    return path
