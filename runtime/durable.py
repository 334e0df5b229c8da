"""Durable local file writes: a reader (or a crash) sees the old file or the whole new one.

One implementation for the engine's state files and the storage destination's files:
data goes to a hidden temporary file beside the target, is fsynced, then renamed over
the target (replace) or hard-linked to it (create, which refuses an existing file); the
directory is fsynced so the new name survives a crash.

A process killed between creating the temporary file and removing it leaves it behind.
The writer holds an exclusive ``flock`` on its temporary file for as long as the file has
its name, and the kernel drops that lock when the process dies (also on SIGKILL), so
``remove_stale_temps`` can tell a dead writer's leftover (lock free) from a live writer's
file (locked) without guessing from ages.
"""

from __future__ import annotations

import fcntl
import os
import re
import uuid

_TEMP_RE = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp$")


def _write_temp(path: str, data: bytes) -> tuple[str, int]:
    """(temporary path, its open fd holding the lock); the caller closes the fd once the name is gone."""
    directory, name = os.path.split(path)
    os.makedirs(directory or ".", exist_ok=True)
    while True:
        tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # a file system without locks: nothing is swept there (see remove_stale_temps)
            break
        if os.fstat(fd).st_nlink:
            break
        os.close(fd)  # a sweeper took the name between create and lock: take another one
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        _discard(tmp, fd)
        raise
    return tmp, fd


def _discard(tmp: str, fd: int) -> None:
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def fsync_dir(directory: str) -> None:
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path``, replacing any existing file atomically and durably."""
    path = os.fspath(path)
    tmp, fd = _write_temp(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        _discard(tmp, fd)
        raise
    os.close(fd)
    fsync_dir(os.path.dirname(path))


def create_file(path: str | os.PathLike[str], data: bytes) -> bool:
    """Create ``path`` with ``data`` durably unless it exists (then nothing is written: False)."""
    path = os.fspath(path)
    tmp, fd = _write_temp(path, data)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        _discard(tmp, fd)
    fsync_dir(os.path.dirname(path))
    return True


def remove_stale_temps(directory: str | os.PathLike[str]) -> list[str]:
    """Remove the temporary files of writers that died in ``directory``; returns their names.

    A temporary file whose lock can be taken has no live writer (see the module doc); one
    that is locked is left alone, and so is every one on a file system without locks. A
    missing directory has none.
    """
    directory = os.fspath(directory)
    try:
        names = [n for n in os.listdir(directory) if _TEMP_RE.match(n)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    for name in names:
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue  # its writer finished meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live writer holds it (or the file system has no locks: cannot tell, keep it)
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.unlink(path)
                removed.append(name)
        finally:
            os.close(fd)
    return removed
