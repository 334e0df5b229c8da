"""Durable local file writes: a reader (or a crash) sees the old file or the whole new one.

One implementation for the engine's state files and the storage destination's files:
data goes to a hidden temporary file beside the target, is fsynced, then renamed over
the target (replace) or hard-linked to it (create, which refuses an existing file); the
directory is fsynced so the new name survives a crash.
"""

from __future__ import annotations

import os
import uuid


def _write_temp(path: str, data: bytes) -> str:
    directory, name = os.path.split(path)
    os.makedirs(directory or ".", exist_ok=True)
    tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    return tmp


def fsync_dir(directory: str) -> None:
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path``, replacing any existing file atomically and durably."""
    path = os.fspath(path)
    tmp = _write_temp(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    fsync_dir(os.path.dirname(path))


def create_file(path: str | os.PathLike[str], data: bytes) -> bool:
    """Create ``path`` with ``data`` durably unless it exists (then nothing is written: False)."""
    path = os.fspath(path)
    tmp = _write_temp(path, data)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    fsync_dir(os.path.dirname(path))
    return True
