"""Helpers that drive the storage connectors in-process (real files, real S3 server)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from cdcflow.connectors.generator import SOURCE_PARAMS as GEN_PARAMS
from cdcflow.connectors.generator import GeneratorSource
from cdcflow.connectors.storage.destination import StorageDestination
from cdcflow.connectors.storage.settings import DESTINATION_PARAMS, SOURCE_PARAMS
from cdcflow.connectors.storage.source import StorageSource
from cdcflow.connectors.ticdc.events import (
    DDLEvent,
    RowChange,
    from_record,
    to_record,
)
from cdcflow.connectors.ticdc.tidb import Column
from cdcflow.params import validate
from cdcflow.schemas import default_store


def make_destination(settings: dict) -> StorageDestination:
    d = StorageDestination()
    d.configure(validate("storage", DESTINATION_PARAMS, {k: str(v) for k, v in settings.items()}))
    d.open()
    return d


def make_source(settings: dict) -> StorageSource:
    s = StorageSource()
    s.configure(validate("storage", SOURCE_PARAMS, {k: str(v) for k, v in settings.items()}))
    return s


def read_all(settings: dict, positions: dict | None = None, limit: int | None = None) -> list:
    """Every record of every partition (order kept per partition); stops each partition when idle."""
    src = make_source(settings)
    out = []
    for part in src.partitions():
        s = make_source(settings)
        s.open((positions or {}).get(part), part)
        while True:
            batch = s.read(1000 if limit is None else limit)
            if not batch:
                break
            out.extend((part, r) for r in batch)
            if limit is not None:
                break
        s.teardown()
    return out


FORMATS = {
    "csv": {"protocol": "csv", "include-commit-ts": "true", "output-old-value": "true"},
    "canal-json": {"protocol": "canal-json", "enable-tidb-extension": "true", "content-compatible": "true"},
}


def generator_rows(n: int):
    g = GeneratorSource()
    g.configure(validate("generator", GEN_PARAMS, {"format.type": "tidb", "operations": "create,update,delete",
                                                   "recordCount": str(n), "seed": "7"}))
    g.open(None, "0")
    return g.read(n)


def input_records(n_before: int, n_after: int):
    """Generator rows, then a DDL adding a column, then rows of the new table version."""
    store = default_store()
    first = generator_rows(n_before + n_after)
    events = [from_record(r, store) for r in first]
    old_table = events[0].table
    new_table = dataclasses.replace(old_table, columns=old_table.columns + (Column("c_added", "INT"),),
                                    index={})
    ddl_ts = events[n_before - 1].commit_ts + 1
    ddl = DDLEvent(old_table.schema, old_table.table,
                   f"ALTER TABLE `{old_table.schema}`.`{old_table.table}` ADD COLUMN `c_added` INT", ddl_ts, 5,
                   new_table)
    out = events[:n_before] + [ddl]
    for k, ev in enumerate(events[n_before:]):
        row = dict(ev.row, c_added=k if k % 3 else None)
        old = dict(ev.old, c_added=k - 1) if ev.old is not None else None
        out.append(RowChange(new_table, ev.kind, ev.commit_ts + 1, row, old))
    return out, [to_record(e, str(i).encode(), store) for i, e in enumerate(out)]


def comparable(ev):
    if isinstance(ev, DDLEvent):
        return ("ddl", ev.schema, ev.table_name, ev.query, ev.commit_ts, ev.ddl_type)
    return (ev.kind, ev.commit_ts, ev.row, ev.old)


STORAGE_PIPELINE = """\
version: "2.2"
engine:
  batch-size: {batch}
pipelines:
  - id: {pid}
    connectors:
      - id: src
        type: source
        plugin: {src_plugin}
        settings:
{src_settings}
      - id: dst
        type: destination
        plugin: {dst_plugin}
        settings:
{dst_settings}
    dead-letter-queue:
      plugin: builtin:log
      window-size: 1
      window-nack-threshold: 0
"""


def indent_settings(settings: dict) -> str:
    return "\n".join(f'          {k}: "{v}"' for k, v in settings.items())


def s3_lake(request) -> tuple[str, dict]:
    """A fresh bucket on the moto server (the ``storage_uri`` fixture's s3 branch)."""
    import uuid

    import s3fs

    endpoint = request.getfixturevalue("moto_server")
    bucket = "b" + uuid.uuid4().hex[:12]
    s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint},
                      skip_instance_cache=True).mkdir(bucket)
    return f"s3://{bucket}/lake", {"s3.endpoint": endpoint, "s3.access-key": "testing",
                                   "s3.secret-access-key": "testing", "s3.region": "us-east-1"}


def pipeline_file(path: Path, pid: str, src: tuple[str, dict], dst: tuple[str, dict], batch: int = 1000) -> str:
    path.write_text(STORAGE_PIPELINE.format(pid=pid, batch=batch, src_plugin=src[0], src_settings=indent_settings(src[1]),
                                    dst_plugin=dst[0], dst_settings=indent_settings(dst[1])))
    return str(path)


def run_until_idle(path: str, state: Path):
    from cdcflow.engine.runner import run_files

    outcome = run_files([path], until_idle=True, state_dir=str(state), progress=False, out=open(os.devnull, "w"))
    assert outcome.exit_code == 0, outcome.problems or outcome.failures
    return outcome


def strict(batch) -> list:
    return [(part, type(r.position), r.position, type(r.operation), r.operation, repr(r.metadata), repr(r.key),
             repr(r.before), repr(r.after)) for part, r in batch]
