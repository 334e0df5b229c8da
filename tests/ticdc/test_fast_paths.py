"""The generated per-table fast paths give exactly what the general (per-column) paths give.

Each codec keeps its general path for partial rows, extras and errors; these tests switch
the fast path off with ``monkeypatch`` (not a mock of a fault: the same code minus the
shortcut) and compare bytes / records over hypothesis tables with every TiDB type.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.connectors.ticdc import canal_json as cj
from cdcflow.connectors.ticdc import events as ev_mod
from cdcflow.connectors.ticdc import open_protocol as op
from cdcflow.connectors.ticdc.events import RowChange, from_record, from_records, to_record, to_records
from cdcflow.schemas import SchemaStore

from strategies import tables_and_rows

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])
KINDS = st.sampled_from(["insert", "update", "delete"])


def _events(table, rows, kinds):
    out = []
    for i, (row, kind) in enumerate(zip(rows, kinds)):
        old = rows[i - 1] if kind == "update" else None
        out.append(RowChange(table, kind, (1_700_000_000_000 + i) << 18, row, old))
    return out


def _encode_both(monkeypatch, encode, owner, name, fast_off):
    """(fast result or error type, general result or error type)."""
    def run():
        try:
            return encode()
        except Exception as e:  # the typed error must be the same on both paths
            return type(e)
    fast = run()
    with monkeypatch.context() as m:
        m.setattr(owner, name, fast_off)
        general = run()
    return fast, general


@SETTINGS
@given(data=tables_and_rows(min_rows=1, max_rows=4), kinds=st.lists(KINDS, min_size=4, max_size=4),
       ext=st.booleans(), changed_only=st.booleans())
def test_canal_json_fast_encode_equals_general(monkeypatch, data, kinds, ext, changed_only):
    table, rows = data
    events = _events(table, rows, kinds)
    opts = cj.CanalJsonOptions(enable_tidb_extension=ext, only_output_updated_columns=changed_only)
    enc = cj.CanalJsonEncoder(opts, now_ms=lambda: 1_700_000_000_123)
    fast, general = _encode_both(monkeypatch, lambda: enc.encode_many(events), cj.CanalJsonEncoder,
                                 "_encode_row_fast", lambda *a: None)
    assert fast == general


@SETTINGS
@given(data=tables_and_rows(min_rows=1, max_rows=4), kinds=st.lists(KINDS, min_size=4, max_size=4))
def test_open_protocol_fast_encode_equals_general(monkeypatch, data, kinds):
    table, rows = data
    events = _events(table, rows, kinds)
    def no_fast(row):
        raise op._NotFast
    def encode():
        enc = op.OpenProtocolEncoder()
        return enc.encode(events)
    fast = encode()
    with monkeypatch.context() as m:
        m.setattr(op, "_compile_image", lambda table, columns: no_fast)
        general = encode()
    assert fast == general


@SETTINGS
@given(data=tables_and_rows(min_rows=1, max_rows=4), kinds=st.lists(KINDS, min_size=4, max_size=4))
def test_open_protocol_fast_decode_equals_general(monkeypatch, data, kinds):
    table, rows = data
    messages = op.OpenProtocolEncoder().encode(_events(table, rows, kinds))
    fast = op.OpenProtocolDecoder({table.collection: table}).decode_many(messages)
    with monkeypatch.context() as m:
        m.setattr(op, "_convert_fast", lambda dec, image: None)
        general = op.OpenProtocolDecoder({table.collection: table}).decode_many(messages)
    assert [(e.kind, e.commit_ts, e.row, e.old) for e in fast] == [(e.kind, e.commit_ts, e.row, e.old)
                                                                   for e in general]


@SETTINGS
@given(data=tables_and_rows(min_rows=1, max_rows=4), kinds=st.lists(KINDS, min_size=4, max_size=4),
       extra=st.booleans())
def test_batch_record_mapping_equals_per_record(data, kinds, extra):
    table, rows = data
    events = _events(table, rows, kinds)
    if extra:
        events[0].extra[ev_mod.META_ONLY_HANDLE_KEY] = "true"
    positions = [b"%d" % i for i in range(len(events))]
    store = SchemaStore()
    try:
        batch = to_records(events, positions, store)
        single = [to_record(e, p, store) for e, p in zip(events, positions)]
        assert [(r.position, r.operation, r.metadata, list(r.metadata), r.key, r.before, r.after) for r in batch] \
            == [(r.position, r.operation, r.metadata, list(r.metadata), r.key, r.before, r.after) for r in single]
        back_batch = from_records(batch, store)
        back_single = [from_record(r, store) for r in batch]
        assert [(e.table, e.kind, e.commit_ts, e.row, e.old, e.extra) for e in back_batch] \
            == [(e.table, e.kind, e.commit_ts, e.row, e.old, e.extra) for e in back_single]
    finally:
        store.close()


def test_canal_json_fast_path_falls_back_for_bad_value():
    """A value that does not fit its column still raises the error naming the column."""
    from cdcflow.connectors.ticdc.errors import UnrepresentableValue
    from cdcflow.tidb import Column, TableSchema

    table = TableSchema("s", "t", (Column("id", "BIGINT", handle_key=True, primary_key=True, nullable=False),
                                   Column("n", "INT")))
    enc = cj.CanalJsonEncoder(now_ms=lambda: 1)
    assert enc.encode(RowChange(table, "insert", 1 << 18, {"id": 1, "n": 2})).count(b'"n":"2"') == 1
    with pytest.raises(UnrepresentableValue, match="s.t.*n"):
        enc.encode(RowChange(table, "insert", 1 << 18, {"id": 1, "n": "2"}))
