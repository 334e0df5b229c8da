"""The replay filter's cached JSON state is exactly its state, through any sequence of events.

``Dedup.admit_row_json`` / ``state_json`` rebuild the position text incrementally (per
table fragment, DDL part apart); a slip would save a wrong replay filter in every
position. Compared here with the plain ``orjson.dumps(state())`` and with a model
of the rule (drop below the table's mark, or at it with a handle already applied).
"""

from __future__ import annotations

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cdcflow.connectors.kafka import consistency
from cdcflow.connectors.kafka.consistency import Dedup
from cdcflow.connectors.ticdc.events import DDLEvent, RowChange
from cdcflow.connectors.ticdc.tidb import Column, TableSchema


def _table(name: str, keyed: bool) -> TableSchema:
    cols = (Column("id", "INT", nullable=False, primary_key=keyed, handle_key=keyed), Column("v", "VARCHAR"))
    return TableSchema("shop", name, cols)


TABLES = [_table("orders", True), _table("items", True), _table('odd "name"\\', False)]

ROWS = st.tuples(st.just("row"), st.integers(0, 2), st.integers(0, 4), st.integers(0, 4), st.sampled_from(["a", 'q"']),
                 st.sampled_from(["insert", "insert", "delete"]))
EVENTS = st.lists(st.one_of(
    ROWS, ROWS, ROWS,  # mostly rows, so that transactions of several rows at one ts come up
    st.tuples(st.just("ddl"), st.integers(1, 4), st.sampled_from(["ALTER A", "ALTER B"])),
    st.tuples(st.just("resolved"), st.integers(0, 4)),
    st.tuples(st.just("restart"),),
), max_size=60)


def _expected_json(model: dict, ddl_ts: int, ddl_queries: set, complete: int) -> list:
    if sum(len(m[1]) for m in model.values()) > consistency.INLINE_HANDLES or len(model) > consistency.INLINE_TABLES:
        return [["at", min(at for _, _, at in model.values())], ddl_ts, sorted(ddl_queries), complete]
    marks = {c: [ts, sorted(handles), at] for c, (ts, handles, at) in model.items()}
    return [marks, ddl_ts, sorted(ddl_queries), complete]


@settings(max_examples=500, deadline=None)
@given(EVENTS)
@example([("row", 0, 3, k, "a", "insert") for k in range(4)] + [("restart",), ("row", 0, 3, 1, "a", "insert"),
                                                                 ("row", 0, 3, 4, "a", "insert")])
@example([("row", 0, 3, k, "a", "insert") for k in range(4)] + [("resolved", 3), ("restart",),
                                                                 ("row", 0, 3, 4, "a", "insert")])
@example([("row", 0, 3, 1, "a", "delete"), ("row", 0, 3, 1, "a", "insert"), ("restart",),
          ("row", 0, 3, 1, "a", "insert"), ("row", 0, 3, 1, "a", "delete")])
@example([("row", ti, 3, k, "a", "insert") for ti in range(3) for k in range(2)] + [("restart",)])
def test_cached_state_is_the_state_and_follows_the_rule(events):
    """Against a model of the rule: at or below the last resolved ts everything is a replay;
    above it, a row below its table's mark, or at it with the same operation and handle already
    applied, is one. ``INLINE_HANDLES`` is lowered so that positions naming offsets instead of
    the rows come up; a restart then reads the rows from there again, as the source does, and
    must end with the same filter."""
    inline = consistency.INLINE_HANDLES, consistency.INLINE_TABLES
    consistency.INLINE_HANDLES, consistency.INLINE_TABLES = 3, 2
    try:
        _run(events)
    finally:
        consistency.INLINE_HANDLES, consistency.INLINE_TABLES = inline


def _run(events):
    d = Dedup()
    model: dict[str, tuple[int, set, int]] = {}
    ddl_ts, ddl_queries, complete = 0, set(), 0
    history: list[tuple[int, RowChange]] = []  # every row read so far, at its offset
    for offset, e in enumerate(events):
        if e[0] == "restart":  # what a restart does: a new filter from the last position's state
            d = Dedup.from_state(orjson.loads(d.state_json()))
            start = d.rebuild_start()
            if start is not None:
                for at, ev in history:
                    if at >= start:
                        d.rebuild_row(ev, at)
                d.end_rebuild()
            assert d.rebuild_start() is None
        elif e[0] == "resolved":
            _, ts = e
            d.complete_through(ts)
            if ts > complete:
                complete = ts
                model = {c: m for c, m in model.items() if m[0] > ts}
                if ddl_ts <= ts:
                    ddl_queries = set()
        elif e[0] == "ddl":
            _, ts, q = e
            expect = not (ts <= complete or ts < ddl_ts or ts == ddl_ts and q in ddl_queries)
            if expect:
                if ts > ddl_ts:
                    ddl_ts, ddl_queries = ts, set()
                ddl_queries.add(q)
            assert d.admit_ddl(DDLEvent("shop", "orders", q, ts)) is expect
        else:
            _, ti, ts, key, v, kind = e
            t = TABLES[ti]
            ev = RowChange(t, kind, ts, {"id": key, "v": v})
            history.append((offset, ev))
            identity = kind[0] + (repr((key,)) if ti < 2 else repr(tuple(sorted(ev.row.items()))))
            mark = model.get(t.collection)
            if not ts:
                expect = True
            elif ts <= complete:
                expect = False
            elif mark is None or ts > mark[0]:
                expect, model[t.collection] = True, (ts, {identity}, offset)
            elif ts < mark[0] or identity in mark[1]:
                expect = False
            else:
                expect = True
                mark[1].add(identity)
            text = d.admit_row_json(ev, offset)
            assert (text is not None) is expect
            if text is not None:
                assert orjson.loads(text) == d.state()
        assert d.state_json() == orjson.dumps(d.state())
        assert d.state() == _expected_json(model, ddl_ts, ddl_queries, complete)


def test_admit_row_keeps_its_meaning():
    d = Dedup()
    t = TABLES[0]
    assert d.admit_row(RowChange(t, "insert", 0, {"id": 1}))  # no commit ts: always applied
    assert d.admit_row(RowChange(t, "insert", 0, {"id": 1}))
    assert d.admit_row(RowChange(t, "insert", 5, {"id": 1}))
    assert not d.admit_row(RowChange(t, "insert", 5, {"id": 1}))
    assert d.admit_row(RowChange(t, "delete", 5, None))  # no row: identified by the empty row
    assert not d.admit_row(RowChange(t, "insert", 4, {"id": 2}))
    assert orjson.loads(d.state_json()) == [{"shop.orders": [5, sorted(["i(1,)", "d(None,)"]), -1]}, 0, [], 0]


def test_a_large_transaction_keeps_positions_small_and_restarts_exactly():
    """10 000 rows at one commit ts: every position stays the same small size (it names the
    offset of the first row instead of 10 000 handles), and a filter restored from any of them,
    after reading the rows from that offset again, drops exactly the rows applied before it."""
    t = TABLES[0]
    rows = [RowChange(t, "insert", 7, {"id": k, "v": "a"}) for k in range(10_000)]
    d = Dedup()
    d.admit_row_json(RowChange(t, "insert", 6, {"id": -1, "v": "a"}), 0)  # an earlier transaction
    sizes = set()
    positions = {}
    for at, ev in enumerate(rows, start=100):
        text = d.admit_row_json(ev, at)
        sizes.add(len(text))
        positions[at] = text
    assert max(sizes) < 400  # at most INLINE_HANDLES handles written out
    for cut in (100 + 5, 100 + 32, 100 + 33, 100 + 5_000, 100 + 9_999):
        restored = Dedup.from_state(orjson.loads(positions[cut]))
        assert restored.rebuild_start() == (100 if cut - 100 + 1 > consistency.INLINE_HANDLES else None)
        if restored.rebuild_start() is not None:
            for at, ev in enumerate(rows[:cut - 100 + 1], start=100):
                restored.rebuild_row(ev, at)
            restored.end_rebuild()
        # TiCDC restarted: the whole transaction again; only what followed the cut gets through
        admitted = [ev.row["id"] for ev in rows if restored.admit_row(ev, 20_000)]
        assert admitted == list(range(cut - 100 + 1, 10_000))
    d.complete_through(7)  # a resolved ts covers the transaction: one number stands for it
    assert orjson.loads(d.state_json()) == [{}, 0, [], 7]
    assert not d.admit_row(rows[0], 30_000)
