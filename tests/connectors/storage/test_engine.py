"""The storage connectors through the Spark engine (``run_files`` on the shared local[2] session).

Round trip: records (generator rows of every TiDB type, I/U/D, a DDL adding a column midway)
-> file source -> ``storage`` destination, then a second pipeline ``storage`` source -> ``file``
destination; what comes out must be the same events, values intact, DDL in place.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdcflow.connectors.ticdc.events import DDLEvent, from_record, to_record
from cdcflow.convert.jsonform import dumps_lines, loads_lines
from cdcflow.connectors.storage.writer import read_checkpoint
from cdcflow.schemas import SchemaStore

from helpers.storage import make_destination, make_source

from test_roundtrip import FORMATS, _comparable, _input_records

PIPELINE = """\
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


def _indent(settings: dict) -> str:
    return "\n".join(f'          {k}: "{v}"' for k, v in settings.items())


def _s3_lake(request) -> tuple[str, dict]:
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
    path.write_text(PIPELINE.format(pid=pid, batch=batch, src_plugin=src[0], src_settings=_indent(src[1]),
                                    dst_plugin=dst[0], dst_settings=_indent(dst[1])))
    return str(path)


def run(path: str, state: Path):
    from cdcflow.engine.runner import run_files

    outcome = run_files([path], until_idle=True, state_dir=str(state), progress=False, out=open(os.devnull, "w"))
    assert outcome.exit_code == 0, outcome.problems or outcome.failures
    return outcome


@pytest.mark.parametrize("fmt,where", [("csv", "local"), ("csv", "s3"), ("canal-json", "local")])
def test_engine_round_trip_generator_storage_storage_file(spark, tmp_path, request, fmt, where):
    state = tmp_path / "state"
    state.mkdir()
    store = SchemaStore(str(state / "schemas.sqlite"))  # the store the engine's executors use
    events, records = _input_records(300, 200)
    records = [to_record(e, str(i).encode(), store) for i, e in enumerate(events)]
    (tmp_path / "in.jsonl").write_bytes(dumps_lines(records))
    if where == "s3":
        uri, extra = _s3_lake(request)
    else:
        uri, extra = str(tmp_path / "lake"), {}
    lake = {"uri": uri, **FORMATS[fmt], **extra}

    one = pipeline_file(tmp_path / "one.yaml", "to-lake", ("builtin:file", {"path": tmp_path / "in.jsonl"}),
                        ("builtin:storage", lake), batch=120)
    written = run(one, state)
    assert written.totals.total_written() == len(events)
    files = make_source(lake)._store_files()
    schema_files = [n for n, _ in files.listdir("cdcflow_gen/all_types/meta") if n.startswith("schema_")]
    assert len(schema_files) == 2  # the first version and the one the DDL started
    assert read_checkpoint(files) == max(e.commit_ts for e in events)  # no resolved events: max commit ts

    two = pipeline_file(tmp_path / "two.yaml", "from-lake", ("builtin:storage", lake),
                        ("builtin:file", {"path": tmp_path / "out.jsonl"}), batch=77)
    read = run(two, state)
    assert read.totals.total_read() == len(events)

    back = [from_record(r, store) for r in loads_lines((tmp_path / "out.jsonl").read_bytes(), store)]
    assert len(back) == len(events)
    for want, have in zip(events, back):
        assert repr(_comparable(have)) == repr(_comparable(want))
    assert isinstance(back[300], DDLEvent)
    assert [c.name for c in back[301].table.columns][-1] == "c_added"

    # a second run of the reading pipeline resumes from its saved positions: nothing new
    again = run(two, state)
    assert again.totals.total_read() == 0


@pytest.mark.timeout(300)
def test_caught_up_source_ends_its_slice_without_waiting_the_idle_timeout(spark, tmp_path):
    """``--until-idle`` over a lake that holds nothing new ends at once, not after the idle timeout.

    The storage source says ``lag() == 0`` right after a scan finds nothing after its
    position, and the engine takes that as idle. With a 600 s idle timeout, a task that
    waited it out would run into this test's timeout.
    """
    from cdcflow.engine.plan import Limits
    from cdcflow.engine.runner import run_files

    state = tmp_path / "state"
    state.mkdir()
    store = SchemaStore(str(state / "schemas.sqlite"))
    events, _ = _input_records(40, 0)
    lake = {"uri": str(tmp_path / "lake"), **FORMATS["csv"]}
    dst = make_destination(lake)
    dst.write([to_record(e, str(i).encode(), store) for i, e in enumerate(events)])
    dst.teardown()

    src = make_source(lake)
    part = src.partitions()[0]
    src.open(None, part)
    assert src.lag() is None  # nothing scanned yet: unknown
    got = 0
    while batch := src.read(1000):
        got += len(batch)
        assert src.lag() is None  # a scan found something: not caught up
    assert got == len(events) and src.lag() == 0
    src.teardown()

    path = pipeline_file(tmp_path / "p.yaml", "caught-up", ("builtin:storage", lake),
                         ("builtin:file", {"path": tmp_path / "out.jsonl"}))
    outcome = run_files([path], until_idle=True, state_dir=str(state), progress=False, out=open(os.devnull, "w"),
                        limits=Limits(idle_timeout=600.0))
    assert outcome.exit_code == 0, outcome.problems or outcome.failures
    assert outcome.totals.total_written() == len(events)
