"""The storage source's lazy batches (``lazy_batches``, set by the engine when a pipeline has no
processors) against the list it returns otherwise.

Real lakes written by the storage destination. Read with and without lazy batches in the same
slices: the lazy batch's JSON-form lines (``jsonform_lines``, written from the CSV text by the
transcoder) must be byte for byte the lines of the eager records with the engine's stamp, its
positions the records' positions, and the Records it makes on demand the eager records
(type-strict). Files the transcoder refuses (types it does not write, a DDL) still read right.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os

import pytest
from cdcflow.connectors.storage.source import StorageBatch
from cdcflow.connectors.ticdc.csv import decode as tcsv_decode
from cdcflow.connectors.ticdc.events import DELETE, INSERT, UPDATE, RowChange, to_record
from cdcflow.connectors.ticdc.tidb import Column, TableSchema
from cdcflow.convert.jsonform import dumps_lines
from cdcflow.engine.fastpath import RecordBatch
from cdcflow.schemas import default_store
from helpers.storage import input_records, make_destination, make_source, strict

pytestmark = pytest.mark.skipif(tcsv_decode._kernel is None, reason="kernels are off (CDCFLOW_PURE_PYTHON=1)")

STAMP = {"conduit.source.connector.id": "p:src", "conduit.source.plugin.name": "builtin:storage",
         "conduit.source.plugin.version": "v0.1.0"}


def _table(version: int, extra: bool = False) -> TableSchema:
    cols = [Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True), Column("a", "INT"),
            Column("c", "DOUBLE"), Column("d", "DECIMAL", precision=12, scale=2), Column("e", "VARCHAR", length=64),
            Column("g", "DATE"), Column("h", "DATETIME", fsp=3)]
    if extra:
        cols.append(Column("x", "VARCHAR", length=8))
    return TableSchema("db", "t", tuple(cols), version=version)


def _row(k: int, extra: bool = False) -> dict:
    row = {"id": k, "a": None if k % 7 == 0 else k - 50, "c": k / 3, "d": decimal.Decimal(k * 37 - 900).scaleb(-2),
           "e": f"name {k} \"q\",\u2028é", "g": dt.date(2024, 1, 1 + k % 28),
           "h": dt.datetime(2024, 1, 1, 0, 0, k % 60, (k % 4) * 250_000)}
    if extra:
        row["x"] = None if k % 2 else f"x{k}"
    return row


def _lake(tmp_path, options: dict) -> dict:
    """Table db.t: 3 files of version 1 (inserts, updates, deletes), then 2 files of version 2 with one more column."""
    settings = {"uri": str(tmp_path / "lake"), "protocol": "csv", "date-separator": "none", **options}
    store = default_store()
    d = make_destination(settings)
    v1, v2 = _table(1 << 18), _table(9 << 18, extra=True)
    kinds = (INSERT, INSERT, UPDATE, INSERT, DELETE)
    for f in range(3):
        d.write([to_record(RowChange(v1, kinds[k % 5], (2 << 18) + 10 * f + k, _row(10 * f + k)), b"", store)
                 for k in range(10)])
    for f in range(2):
        d.write([to_record(RowChange(v2, INSERT, (10 << 18) + 10 * f + k, _row(100 + 10 * f + k, extra=True)), b"",
                           store) for k in range(10)])
    d.teardown()
    return settings


def _read(settings: dict, lazy: bool, limit: int, position: bytes | None = None) -> list:
    src = make_source(settings)
    (part,) = src.partitions()
    s = make_source(settings)
    s.lazy_batches = lazy
    s.open(position, part)
    batches = []
    while batch := s.read(limit):
        batches.append(batch)
    s.teardown()
    return batches


@pytest.mark.parametrize("options", [{"include-commit-ts": "true"}, {}, {"include-commit-ts": "true", "delimiter": ";"}])
@pytest.mark.parametrize("limit", [7, 1000])
def test_lazy_batches_write_and_make_what_the_eager_source_reads(tmp_path, options, limit):
    settings = _lake(tmp_path, options)
    store = default_store()
    eager, lazy = _read(settings, False, limit), _read(settings, True, limit)
    assert [len(b) for b in lazy] == [len(b) for b in eager]
    rendered = 0
    for e, z in zip(eager, lazy):
        assert type(e) is list and isinstance(z, StorageBatch)
        assert z.positions() == [r.position for r in e]
        for r in e:
            r.metadata.update(STAMP)
        z.add_metadata(STAMP)
        lines = z.jsonform_lines(store)
        if lines is not None:
            rendered += 1
            assert lines == dumps_lines(e, store)
        assert strict([("", r) for r in z]) == strict([("", r) for r in e])
        assert z.jsonform_lines(store) is None  # made now: the caller writes the Records
    assert rendered == len(lazy)  # every file of this lake is one the transcoder takes


def test_a_lazy_batch_restarts_where_the_last_acknowledged_position_says(tmp_path):
    settings = _lake(tmp_path, {"include-commit-ts": "true"})
    store = default_store()
    whole = [r for b in _read(settings, False, 1000) for r in b]
    for k in (0, 9, 10, 23, 30, len(whole) - 2):
        rest = [r for b in _read(settings, True, 6, whole[k].position) for r in b.records()]
        assert strict([("", r) for r in rest]) == strict([("", r) for r in whole[k + 1:]])
        lines = b"".join(b.jsonform_lines(store) or dumps_lines(b, store) for b in _read(settings, True, 6, whole[k].position))
        assert lines == dumps_lines(whole[k + 1:], store)


def test_files_the_transcoder_refuses_are_read_as_records(tmp_path):
    """Every TiDB type (TIME, binary, ... which the transcoder hands back) and a DDL midway."""
    settings = {"uri": str(tmp_path / "lake"), "protocol": "csv", "date-separator": "none", "include-commit-ts": "true"}
    _, records = input_records(30, 15)
    d = make_destination(settings)
    d.write(records)
    d.teardown()
    src = make_source(settings)
    for part in src.partitions():
        got = {}
        for lazy in (False, True):
            s = make_source(settings)
            s.lazy_batches = lazy
            s.open(None, part)
            got[lazy] = []
            while batch := s.read(8):
                assert type(batch) is list or isinstance(batch, RecordBatch)
                got[lazy] += [("", r) for r in batch]
            s.teardown()
        assert got[True] and strict(got[True]) == strict(got[False])


def test_the_checkpoint_cut_is_the_same_with_lazy_batches(tmp_path):
    settings = _lake(tmp_path, {"include-commit-ts": "true"})
    whole = [r for b in _read(settings, False, 1000) for r in b]
    mid = int(whole[len(whole) // 3].metadata["ticdc.commit-ts"])
    with open(os.path.join(settings["uri"], "metadata"), "w") as f:
        f.write('{"checkpoint-ts": %d}' % mid)
    cut = {**settings, "stop-at-checkpoint": "true"}
    eager = [r for b in _read(cut, False, 4) for r in b]
    lazy = [r for b in _read(cut, True, 4) for r in b]
    assert 0 < len(lazy) < len(whole)
    assert strict([("", r) for r in lazy]) == strict([("", r) for r in eager])


PIPELINE = """\
version: "2.2"
engine:
  batch-size: 7
pipelines:
  - id: lake-to-file
    connectors:
      - id: lake
        type: source
        plugin: builtin:storage
        settings:
          uri: "{uri}"
          include-commit-ts: "true"
          date-separator: none
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: "{out}"
"""


def test_the_engine_writes_the_lines_of_the_records_without_making_them(tmp_path, monkeypatch):
    """The real task function in-process: storage source -> file destination, no processors. The
    file holds exactly the eager records' lines with the engine's stamp, and the file destination
    got lazy batches it did not have to materialise, across both table versions."""
    from cdcflow.connectors.file import FileDestination
    from cdcflow.engine.plan import Limits, PartitionTask, RunContext
    from cdcflow.engine.state import StateDir
    from cdcflow.engine.task import run_partition, teardown_all
    from cdcflow.pipeline.validate import validate_files
    from cdcflow.registry import load_registry

    settings = _lake(tmp_path, {"include-commit-ts": "true"})
    written: list[bool] = []  # per write: the batch had not made its Records
    batches: list = []
    real = FileDestination.write

    def write(self, records):
        got = real(self, records)
        written.append(isinstance(records, StorageBatch) and records._records is None)
        batches.append(records)
        return got

    monkeypatch.setattr(FileDestination, "write", write)
    out = tmp_path / "out.jsonl"
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(uri=settings["uri"], out=out))
    pipe = validate_files([str(path)]).pipelines[0]
    ctx = RunContext.prepare({pipe.id: pipe}, StateDir(tmp_path / "state").create(), load_registry(),
                             limits=Limits(task_seconds=60))
    try:
        stats = run_partition(ctx, PartitionTask("lake-to-file", "lake", "db/t"))
    finally:
        teardown_all()
    assert stats.error is None and stats.idle, stats
    eager = [r for b in _read(settings, False, 1000) for r in b]
    assert stats.read == len(eager) == 50
    info = {"conduit.source.connector.id": "lake", "conduit.source.plugin.name": "storage",
            "conduit.source.plugin.version": "v0.1.0"}
    for r in eager:
        r.metadata.update(info)
    assert out.read_bytes() == dumps_lines(eager, default_store())
    assert len(written) == 10 and all(written)  # a read stops at the end of a file: 2 writes per file
    assert all(b._records is None for b in batches)  # nor did the engine make them after the write
