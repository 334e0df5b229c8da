"""A storage lake of many tables (issue 18's breadth): written by the storage destination, read back
through `cdcflow run`. Shared by tests/engine/test_partition_groups.py and bench_breadth.py."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from cdcflow.connectors.storage.destination import StorageDestination
from cdcflow.connectors.storage.settings import DESTINATION_PARAMS
from cdcflow.connectors.ticdc.events import INSERT, RowChange, to_record
from cdcflow.connectors.ticdc.tidb import Column, TableSchema
from cdcflow.params import validate
from cdcflow.schemas import default_store

LAKE_SETTINGS = {"include-commit-ts": "true", "date-separator": "none"}


def table(i: int) -> TableSchema:
    return TableSchema("wide", f"t{i:05d}", (
        Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
        Column("seq", "BIGINT"), Column("name", "VARCHAR", length=32)), version=1 << 18)


def write_lake(root: Path, tables: int, rows: int, files: int = 1) -> None:
    """``rows`` rows spread evenly over ``tables`` tables of ``root`` (CSV, no date directories),
    each table's rows in ``files`` data files; a row's ``seq`` is its place in its table."""
    store = default_store()
    d = StorageDestination()
    d.configure(validate("storage", DESTINATION_PARAMS, {"uri": str(root), **LAKE_SETTINGS}))
    d.open()
    try:
        per_table = max(1, rows // tables)
        per_file = max(1, -(-per_table // files))
        for start in range(0, per_table, per_file):
            batch = []
            for t in range(tables):
                tab = table(t)
                for k in range(start, min(per_table, start + per_file)):
                    ev = RowChange(tab, INSERT, (10 + k) << 18, {"id": t * per_table + k, "seq": k, "name": f"r{k}"})
                    batch.append(to_record(ev, b"", store))
            d.write(batch)
    finally:
        d.teardown()


PIPELINE = """version: "2.2"
{engine}pipelines:
  - id: wide
    connectors:
      - id: lake
        type: source
        plugin: builtin:storage
        settings:
          uri: "{root}"
          include-commit-ts: "true"
          date-separator: none
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: "{out}"
"""


def rows_by_table(out: Path) -> dict[str, list[int]]:
    """The output's rows: table → its ``seq`` values in output order."""
    got: dict[str, list[int]] = defaultdict(list)
    for line in out.read_bytes().splitlines():
        rec = json.loads(line)
        got[rec["metadata"]["opencdc.collection"]].append(int(rec["payload"]["after"]["seq"]))
    return got
