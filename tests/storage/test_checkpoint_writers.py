"""Two writers advancing one layout's ``metadata`` checkpoint at once (found by the journey matrix).

Spark runs one task per table of a storage source, so two tasks of one storage destination write
``metadata`` concurrently. ``write_checkpoint`` read, compared and replaced without a lock, and
the lower value could land last (22 of 60 rounds on this machine before the fix). Real processes,
released together by a barrier.
"""

from __future__ import annotations

import multiprocessing as mp

import fsspec

from cdcflow.connectors.storage.writer import FileStore, read_checkpoint, write_checkpoint


def _advance(root: str, ts: int, barrier) -> None:
    store = FileStore(fsspec.filesystem("file"), root, True)
    barrier.wait()
    write_checkpoint(store, ts)


def test_the_checkpoint_never_moves_backwards_between_two_local_writers(tmp_path):
    ctx = mp.get_context("fork")
    backwards = []
    for i in range(40):
        root = tmp_path / str(i)
        barrier = ctx.Barrier(2)
        procs = [ctx.Process(target=_advance, args=(str(root), ts, barrier)) for ts in (18, 19)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
        got = read_checkpoint(FileStore(fsspec.filesystem("file"), str(root), True))
        if got != 19:
            backwards.append((i, got))
    assert backwards == []
