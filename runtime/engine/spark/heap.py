"""Keep freed memory in long-running worker processes (glibc ``mallopt``).

Why: a worker handles batch after batch of records of about the same size. With
glibc's defaults, freeing a batch returns the top of the heap to the system
(trimming) and large buffers come and go as their own mappings, so the next
batch faults the same pages back in, kernel time that can match the record work
itself. Keeping freed memory
for reuse bounds a worker's footprint by its largest batch, which it needs anyway.

Called once per process by the Spark task runner and the standalone plugin server.
A no-op off glibc; ``CDCFLOW_KEEP_FREED_MEMORY=0`` turns it off.
"""

from __future__ import annotations

import ctypes
import os

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: freed memory kept before the heap top is given back to the system
TRIM_THRESHOLD = 1 << 30
#: allocations at least this big get their own mapping (glibc's ceiling for the setting)
MMAP_THRESHOLD = 32 << 20

_applied = False


def keep_freed_memory() -> bool:
    """Apply the policy to this process (once); False when it could not be applied."""
    global _applied
    if _applied:
        return True
    if os.environ.get("CDCFLOW_KEEP_FREED_MEMORY", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
        ok = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and ok
    except (OSError, AttributeError):
        return False
    _applied = ok
    return ok
