"""Round trip: generator (every TiDB type, I/U/D, a DDL adding a column midway) -> storage -> storage source."""

from __future__ import annotations

import dataclasses

import pytest

from cdcflow.connectors.generator import SOURCE_PARAMS as GEN_PARAMS, GeneratorSource
from cdcflow.connectors.ticdc.events import DDLEvent, RowChange, from_record, to_record
from cdcflow.params import validate
from cdcflow.schemas import default_store
from cdcflow.connectors.ticdc.tidb import Column

from helpers.storage import make_destination, read_all

FORMATS = {
    "csv": {"protocol": "csv", "include-commit-ts": "true", "output-old-value": "true"},
    "canal-json": {"protocol": "canal-json", "enable-tidb-extension": "true", "content-compatible": "true"},
}


def _generated(n: int):
    g = GeneratorSource()
    g.configure(validate("generator", GEN_PARAMS, {"format.type": "tidb", "operations": "create,update,delete",
                                                   "recordCount": str(n), "seed": "7"}))
    g.open(None, "0")
    return g.read(n)


def _input_records(n_before: int, n_after: int):
    """Generator rows, then a DDL adding a column, then rows of the new table version."""
    store = default_store()
    first = _generated(n_before + n_after)
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


def _comparable(ev):
    if isinstance(ev, DDLEvent):
        return ("ddl", ev.schema, ev.table_name, ev.query, ev.commit_ts, ev.ddl_type)
    return (ev.kind, ev.commit_ts, ev.row, ev.old)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_round_trip_every_type_with_ddl(storage_uri, fmt):
    uri, extra = storage_uri
    settings = {"uri": uri, **FORMATS[fmt], **extra}
    events, records = _input_records(60, 40)
    d = make_destination(settings)
    for k in range(0, len(records), 25):  # several write batches -> several files
        assert d.write(records[k:k + 25]) is None
    got = read_all(settings)
    assert {p for p, _ in got} == {"cdcflow_gen/all_types"}
    store = default_store()
    back = [from_record(r, store) for _, r in got]
    assert len(back) == len(events)
    for want, have in zip(events, back):
        assert repr(_comparable(have)) == repr(_comparable(want))
    assert isinstance(back[60], DDLEvent)
    assert [c.name for c in back[61].table.columns][-1] == "c_added"


def test_restart_at_every_position_continues_exactly(tmp_path):
    settings = {"uri": str(tmp_path), **FORMATS["csv"]}
    events, records = _input_records(20, 10)
    d = make_destination(settings)
    for k in range(0, len(records), 7):
        d.write(records[k:k + 7])
    full = [r for _, r in read_all(settings)]
    for cut in (1, 6, 7, 20, 21, 25):
        part = "cdcflow_gen/all_types"
        rest = [r for _, r in read_all(settings, {part: full[cut - 1].position})]
        assert [r.position for r in rest] == [r.position for r in full[cut:]]


def test_watching_source_sees_new_files_and_checkpoint_stop(tmp_path):
    from helpers.storage import make_source

    settings = {"uri": str(tmp_path), **FORMATS["csv"]}
    events, records = _input_records(10, 0)
    d = make_destination(settings)
    d.write(records[:5])
    s = make_source({**settings, "poll-interval": "0s"})
    (part,) = s.partitions()
    s.open(None, part)
    assert len(s.read(100)) == 5
    assert s.read(100) == []  # idle, not ended
    d.write(records[5:])
    assert len(s.read(100)) == 5
    # stop-at-checkpoint: only rows below metadata's checkpoint-ts, then the end
    (tmp_path / "metadata").write_text('{"checkpoint-ts": %d}' % events[3].commit_ts)
    c = make_source({**settings, "stop-at-checkpoint": "true"})
    c.open(None, part)
    got = []
    while (batch := c.read(100)) is not None:
        got += batch
    assert len(got) == 3
