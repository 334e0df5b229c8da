"""The storage connectors through the Spark engine (``run_files`` on the shared local[2] session).

Round trip: records (generator rows of every TiDB type, I/U/D, a DDL adding a column midway)
-> file source -> ``storage`` destination, then a second pipeline ``storage`` source -> ``file``
destination; what comes out must be the same events, values intact, DDL in place.
"""

from __future__ import annotations

import os

import pytest
from cdcflow.connectors.storage.writer import read_checkpoint
from cdcflow.connectors.ticdc.events import DDLEvent, from_record, to_record
from cdcflow.convert.jsonform import dumps_lines, loads_lines
from cdcflow.schemas import SchemaStore
from helpers.storage import (
    FORMATS,
    comparable,
    input_records,
    make_destination,
    make_source,
    pipeline_file,
    run_until_idle,
    s3_lake,
)


@pytest.mark.parametrize("fmt,where", [("csv", "local"), ("csv", "s3"), ("canal-json", "local")])
def test_engine_round_trip_generator_storage_storage_file(spark, tmp_path, request, fmt, where):
    state = tmp_path / "state"
    state.mkdir()
    store = SchemaStore(str(state / "schemas.sqlite"))  # the store the engine's executors use
    events, records = input_records(300, 200)
    records = [to_record(e, str(i).encode(), store) for i, e in enumerate(events)]
    (tmp_path / "in.jsonl").write_bytes(dumps_lines(records))
    if where == "s3":
        uri, extra = s3_lake(request)
    else:
        uri, extra = str(tmp_path / "lake"), {}
    lake = {"uri": uri, **FORMATS[fmt], **extra}

    one = pipeline_file(tmp_path / "one.yaml", "to-lake", ("builtin:file", {"path": tmp_path / "in.jsonl",
                                                                             "format": "opencdc/json"}),
                        ("builtin:storage", lake), batch=120)
    written = run_until_idle(one, state)
    assert written.totals.total_written() == len(events)
    files = make_source(lake)._store_files()
    schema_files = [n for n, _ in files.listdir("cdcflow_gen/all_types/meta") if n.startswith("schema_")]
    assert len(schema_files) == 2  # the first version and the one the DDL started
    assert read_checkpoint(files) == max(e.commit_ts for e in events)  # no resolved events: max commit ts

    two = pipeline_file(tmp_path / "two.yaml", "from-lake", ("builtin:storage", lake),
                        ("builtin:file", {"path": tmp_path / "out.jsonl"}), batch=77)
    read = run_until_idle(two, state)
    assert read.totals.total_read() == len(events)

    back = [from_record(r, store) for r in loads_lines((tmp_path / "out.jsonl").read_bytes(), store)]
    assert len(back) == len(events)
    for want, have in zip(events, back):
        assert repr(comparable(have)) == repr(comparable(want))
    assert isinstance(back[300], DDLEvent)
    assert [c.name for c in back[301].table.columns][-1] == "c_added"

    # a second run of the reading pipeline resumes from its saved positions: nothing new
    again = run_until_idle(two, state)
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
    events, _ = input_records(40, 0)
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


def test_until_idle_run_of_a_missing_lake_stops_before_starting_naming_it(tmp_path):
    """The engine hands ``--until-idle`` to the storage source (its ``IdleAwareSource`` capability),
    so a wrong uri stops the run instead of idling and finishing with nothing read."""
    from cdcflow.engine.runner import run_files

    missing = tmp_path / "no-such-lake"
    path = pipeline_file(tmp_path / "p.yaml", "missing", ("storage", {"uri": str(missing), "protocol": "csv"}),
                         ("file", {"path": str(tmp_path / "out.jsonl")}))
    outcome = run_files([path], until_idle=True, state_dir=str(tmp_path / "state"), progress=False,
                        out=open(os.devnull, "w"))
    assert outcome.exit_code == 1
    assert str(missing) in "\n".join(map(str, [*outcome.problems, *outcome.failures]))
    assert not (tmp_path / "out.jsonl").exists() or (tmp_path / "out.jsonl").read_bytes() == b""
