"""Writers advancing one layout's ``metadata`` checkpoint at once (found by the journey matrix).

Spark runs one task per table of a storage source, so two tasks of one storage destination write
``metadata`` concurrently. ``write_checkpoint`` read, compared and replaced without a lock, and
the lower value could land last (22 of 60 rounds on this machine before the fix). Real processes,
released together by a barrier.
"""

from __future__ import annotations

import multiprocessing as mp
import random

import fsspec
import pytest
from cdcflow.connectors.storage.writer import (
    FileStore,
    read_checkpoint,
    write_checkpoint,
)


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


# ---------------------------------------------------------------- on an object store (moto's S3 server)
# S3 has no lock: ``write_checkpoint`` there is a compare-and-swap done by the store (read
# ``metadata`` with its ETag, PUT with ``If-Match``, or ``If-None-Match: *`` while it does not
# exist; re-read when refused). Bucket versioning keeps every value ever written, in order.

def _s3_store(uri: str, creds: dict) -> FileStore:
    from cdcflow.connectors.storage.settings import DESTINATION_PARAMS, resolve
    from cdcflow.params import validate

    return FileStore.of(resolve(validate("storage", DESTINATION_PARAMS, {"uri": uri, **creds})), writer=True)


def _advance_s3(uri: str, creds: dict, values: list, barrier, kept) -> None:
    store = _s3_store(uri, creds)
    barrier.wait()
    for ts in values:
        kept.put((ts, write_checkpoint(store, ts)))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_parallel_writer_processes_on_s3_never_move_the_checkpoint_backwards(moto_server):
    """Eight processes, 16 random rising values each, all starting on an absent ``metadata`` at once: every
    version written is higher than the one before and the last is the highest value offered
    (old code: read, compare, unconditional PUT: versions went down and a lower value could end)."""
    from helpers.storage_lake import checkpoint_history, versioned_lake

    ctx = mp.get_context("fork")
    rng = random.Random(16)
    writers, per_writer = 8, 16
    uri, creds, client = versioned_lake(moto_server)
    # each writer's progress grows, as a task's does; the writers' values interleave
    offered = [sorted(rng.sample(range(1, 100_000), per_writer)) for _ in range(writers)]
    barrier, kept = ctx.Barrier(writers), ctx.Queue()
    procs = [ctx.Process(target=_advance_s3, args=(uri, creds, values, barrier, kept)) for values in offered]
    for p in procs:
        p.start()
    returned = [kept.get(timeout=300) for _ in range(writers * per_writer)]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    history = checkpoint_history(client, uri)
    downs = [(a, b) for a, b in zip(history, history[1:]) if b <= a]
    assert downs == [], f"metadata moved backwards (or was rewritten with the same value): {downs[:5]} in {history}"
    top = max(v for values in offered for v in values)
    assert history[-1] == top and read_checkpoint(_s3_store(uri, creds)) == top
    # what each call returned is what metadata held at least: never below the value offered
    assert all(got >= ts for ts, got in returned)
    assert len(history) >= 2  # the writers really contended for it


def test_conditional_write_of_metadata_on_s3(moto_server):
    """The store's own answers the compare-and-swap relies on (moto 5.2.5 honours both headers):
    a stale ETag and a create over an existing object are refused, nothing written."""
    from helpers.storage_lake import versioned_lake

    uri, creds, _ = versioned_lake(moto_server)
    store = _s3_store(uri, creds)
    assert store.read_versioned("metadata") == (None, None)
    assert store.put_version("metadata", b'{"checkpoint-ts":5}', None)
    assert not store.put_version("metadata", b'{"checkpoint-ts":1}', None)
    raw, etag = store.read_versioned("metadata")
    assert raw == b'{"checkpoint-ts":5}' and etag
    assert store.put_version("metadata", b'{"checkpoint-ts":7}', etag)
    assert not store.put_version("metadata", b'{"checkpoint-ts":6}', etag)  # etag of 5: stale now
    assert read_checkpoint(store) == 7


def test_a_checkpoint_that_cannot_settle_is_an_infrastructure_error(moto_server, monkeypatch):
    """Every conditional write refused (by the real store) ends in a clear ``InfrastructureError``
    after a bounded number of tries, not a loop and not a silent skip. The contention is faked:
    the store's reads are made to return a version that is no longer current (no real writer can
    be made to win every race); the 412s are moto's."""
    from cdcflow.connectors.storage import writer
    from cdcflow.errors import InfrastructureError
    from helpers.storage_lake import versioned_lake

    uri, creds, _ = versioned_lake(moto_server)
    store = _s3_store(uri, creds)
    write_checkpoint(store, 5)
    stale = store.read_versioned("metadata")
    write_checkpoint(store, 6)
    monkeypatch.setattr(writer, "CHECKPOINT_ATTEMPTS", 4)
    monkeypatch.setattr(store, "read_versioned", lambda rel: stale)
    with pytest.raises(InfrastructureError) as e:
        write_checkpoint(store, 9)
    assert "4 conditional writes" in str(e.value) and "metadata" in str(e.value)
    assert e.value.service == "object-store"
    assert read_checkpoint(_s3_store(uri, creds)) == 6


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(900)
def test_cdcflow_run_with_six_writers_on_s3_only_raises_the_checkpoint(moto_server, tmp_path):
    """``cdcflow run``: generator of 6 partitions (6 Spark tasks, each a storage writer advancing
    ``metadata`` after every small batch) → CSV on moto S3 with bucket versioning. Every value
    ``metadata`` held rose; the last is the highest commit ts written; every row is there."""
    from collections import Counter

    from helpers.storage import FORMATS, pipeline_file, read_all
    from helpers.storage_lake import (
        assert_no_overwrite,
        cdcflow_run,
        checkpoint_history,
        finish,
        versioned_lake,
    )

    uri, creds, client = versioned_lake(moto_server)
    lake = {"uri": uri, **FORMATS["csv"], "include-commit-ts": "true", **creds}
    gen = {"format.type": "tidb", "operations": "create", "seed": "16", "recordCount": "1800", "partitions": "6"}
    path = pipeline_file(tmp_path / "g.yaml", "gen-4", ("builtin:generator", gen), ("builtin:storage", lake), batch=4)
    finish(cdcflow_run(path, tmp_path / "state", master="local[6]"))
    rows = read_all(lake)
    assert len(rows) == 1800 and len(Counter(repr(r.key) for _, r in rows)) == 1800
    history = checkpoint_history(client, uri)
    assert len(history) > 4, history  # the writers really advanced it, each several times
    assert_no_overwrite(client, uri)  # includes: every version of metadata above the one before
    top = max(int(r.metadata["ticdc.commit-ts"]) for _, r in rows)
    assert history[-1] == top
