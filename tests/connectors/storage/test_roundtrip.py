"""Round trip: generator (every TiDB type, I/U/D, a DDL adding a column midway) -> storage -> storage source."""

from __future__ import annotations

import pytest
from cdcflow.connectors.ticdc.events import DDLEvent, from_record
from cdcflow.schemas import default_store
from helpers.storage import (
    FORMATS,
    comparable,
    input_records,
    make_destination,
    read_all,
)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_round_trip_every_type_with_ddl(storage_uri, fmt):
    uri, extra = storage_uri
    settings = {"uri": uri, **FORMATS[fmt], **extra}
    events, records = input_records(60, 40)
    d = make_destination(settings)
    for k in range(0, len(records), 25):  # several write batches -> several files
        assert d.write(records[k:k + 25]) is None
    got = read_all(settings)
    assert {p for p, _ in got} == {"cdcflow_gen/all_types"}
    store = default_store()
    back = [from_record(r, store) for _, r in got]
    assert len(back) == len(events)
    for want, have in zip(events, back):
        assert repr(comparable(have)) == repr(comparable(want))
    assert isinstance(back[60], DDLEvent)
    assert [c.name for c in back[61].table.columns][-1] == "c_added"


def test_restart_at_every_position_continues_exactly(tmp_path):
    settings = {"uri": str(tmp_path), **FORMATS["csv"]}
    events, records = input_records(20, 10)
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
    events, records = input_records(10, 0)
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
