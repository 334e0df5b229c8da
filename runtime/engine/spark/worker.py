"""When a Spark Python worker and the daemon that forked it started (a task's timeline).

A task's wall time starts before its first step: PySpark's daemon (the worker's parent)
started, then forked the worker, which imported PySpark's worker module, unpickled the
task and imported the engine. ``start_marks`` gives those two instants so ``TaskStats``
can tell start-up from work.
"""

from __future__ import annotations

import os
import time


def process_started_at(pid: int | str = "self") -> float | None:
    """When a process was started (wall clock), from ``/proc``; None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # the command name may hold spaces
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
        ticks_since_boot = int(fields[19])  # field 22, "starttime"; fields[0] is field 3
        return time.time() - (uptime - ticks_since_boot / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


_marks: tuple[int, list[tuple[str, float]]] = (0, [])


def start_marks() -> list[tuple[str, float]]:
    """This process's "daemon" and "worker" start marks, read once per process (the engine may
    have been imported before a fork: PySpark's daemon preloads it, ``daemon.py``)."""
    global _marks
    pid = os.getpid()
    if _marks[0] != pid:
        found = [(step, at) for step, at in (("daemon", process_started_at(os.getppid())),
                                             ("worker", process_started_at())) if at is not None]
        _marks = (pid, found)
    return _marks[1]
