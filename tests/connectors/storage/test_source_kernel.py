"""The storage source with the compiled CSV kernels (decode + record builder) against its pure-Python path.

Real lakes written by the storage destination (generator rows of every TiDB type, I/U/D, a DDL
midway, several files and options), read whole and from restart positions: the records (position,
operation, metadata, key, before, after, type-strict) must be the same both ways, and a malformed
line must raise the same ``StorageReadError`` naming file and line.
"""

from __future__ import annotations

import datetime
import os

import pytest

from cdcflow.connectors.storage.source import StorageReadError
from cdcflow.connectors.ticdc import csv as tcsv
from cdcflow.connectors.ticdc.events import INSERT, RowChange, to_record
from cdcflow.schemas import default_store
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

from helpers.kernels import CSV
from helpers.storage import input_records, make_destination, make_source, read_all, strict

pytestmark = CSV.required()

OPTIONS = [
    {"include-commit-ts": "true"},
    {"include-commit-ts": "true", "output-field-header": "true", "output-handle-key": "true"},
    {},  # no commit ts: every row's metadata says 0
    {"include-commit-ts": "true", "delimiter": ";", "quote": "'", "null": "NULL"},
]


def _lake(tmp_path, options: dict, files: int = 3) -> dict:
    settings = {"uri": str(tmp_path / "lake"), "protocol": "csv", "date-separator": "none", **options}
    _, records = input_records(40, 20)
    d = make_destination(settings)
    step = len(records) // files + 1
    for s in range(0, len(records), step):
        d.write(records[s:s + step])
    d.teardown()
    return settings


@pytest.mark.parametrize("which", range(len(OPTIONS)))
def test_whole_lake_reads_the_same_with_and_without_kernels(tmp_path, which):
    settings = _lake(tmp_path, OPTIONS[which])
    for limit in (None, 7):
        kernel = read_all(settings, limit=limit)
        with CSV.off():
            pure = read_all(settings, limit=limit)
        assert kernel and strict(kernel) == strict(pure)


def test_the_kernel_builds_the_records(tmp_path, monkeypatch):
    """Else the test above compared Python with itself."""
    settings = _lake(tmp_path, OPTIONS[0])
    calls = []
    real = tcsv.CsvColumns._kernel_records

    def counting(self, *args):
        got = real(self, *args)
        calls.append(got is not None)
        return got
    monkeypatch.setattr(tcsv.CsvColumns, "_kernel_records", counting)
    read_all(settings)
    assert calls and all(calls)


def test_restart_at_every_position_reads_the_same_rest(tmp_path):
    settings = _lake(tmp_path, OPTIONS[0], files=2)
    whole = read_all(settings)
    for k in range(0, len(whole), 5):
        part, record = whole[k]
        positions = {part: record.position}
        kernel = [r for r in read_all(settings, positions) if r[0] == part]
        with CSV.off():
            pure = [r for r in read_all(settings, positions) if r[0] == part]
        assert strict(kernel) == strict(pure)
        assert strict(kernel) == strict([r for r in whole[k + 1:] if r[0] == part])


def _data_files(root: str) -> list[str]:
    return sorted(os.path.join(d, n) for d, _, names in os.walk(root) for n in names if n.endswith(".csv"))


@pytest.mark.parametrize("damage, message", [
    (lambda line: line.rsplit(b",", 1)[0], r"line 3: .*expected \d+ fields"),
    (lambda line: b'"X"' + line[3:], r"line 3, column 1: .*operation must be I, U or D"),
])
def test_a_malformed_line_names_file_and_line_on_both_paths(tmp_path, damage, message):
    settings = {"uri": str(tmp_path / "lake"), "protocol": "csv", "date-separator": "none", **OPTIONS[0]}
    table = TableSchema("db", "t", (Column("id", "BIGINT", primary_key=True, handle_key=True, nullable=False),
                                    Column("name", "VARCHAR"), Column("at", "DATETIME", fsp=0)), version=1 << 18)
    store = default_store()
    d = make_destination(settings)
    d.write([to_record(RowChange(table, INSERT, (5 << 18) + k, {"id": k, "name": f"n {k}",
                                                              "at": datetime.datetime(2024, 1, 1, 0, 0, k)}),
                       b"", store) for k in range(6)])
    d.teardown()
    path = _data_files(settings["uri"])[0]
    with open(path, "rb") as f:
        lines = f.read().split(b"\r\n")
    lines[2] = damage(lines[2])
    with open(path, "wb") as f:
        f.write(b"\r\n".join(lines))
    name = os.path.basename(path).replace(".", r"\.")
    with pytest.raises(StorageReadError, match=name + " " + message) as kernel:
        read_all(settings)
    with CSV.off(), pytest.raises(StorageReadError) as pure:
        read_all(settings)
    assert str(kernel.value) == str(pure.value)


def test_checkpoint_stop_cuts_the_same_rows(tmp_path):
    settings = _lake(tmp_path, OPTIONS[0], files=2)
    whole = read_all(settings)
    mid = int(whole[len(whole) // 2][1].metadata["ticdc.commit-ts"])
    with open(os.path.join(settings["uri"], "metadata"), "w") as f:
        f.write('{"checkpoint-ts": %d}' % mid)

    def read_to_checkpoint():
        src = make_source({**settings, "stop-at-checkpoint": "true"})
        out = []
        for part in src.partitions():
            s = make_source({**settings, "stop-at-checkpoint": "true"})
            s.open(None, part)
            while (batch := s.read(6)) is not None:
                out += [(part, r) for r in batch]
            s.teardown()
        return out
    kernel = read_to_checkpoint()
    assert 0 < len(kernel) < len(whole)
    with CSV.off():
        pure = read_to_checkpoint()
    assert strict(kernel) == strict(pure)
