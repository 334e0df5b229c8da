"""The replay filter's cached JSON state is exactly its state, through any sequence of events.

``Dedup.admit_row_json`` / ``state_json`` rebuild the position text incrementally (per
table fragment, DDL part apart); a slip would save a wrong replay filter in every
position. Compared here with the plain ``orjson.dumps(state())`` and with a model
of the rule (drop below the table's mark, or at it with a handle already applied).
"""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcflow.connectors.kafka.consistency import Dedup
from cdcflow.connectors.ticdc.events import DDLEvent, RowChange
from cdcflow.tidb import Column, TableSchema


def _table(name: str, keyed: bool) -> TableSchema:
    cols = (Column("id", "INT", nullable=False, primary_key=keyed, handle_key=keyed), Column("v", "VARCHAR"))
    return TableSchema("shop", name, cols)


TABLES = [_table("orders", True), _table("items", True), _table('odd "name"\\', False)]

EVENTS = st.lists(st.one_of(
    st.tuples(st.just("row"), st.integers(0, 2), st.integers(0, 6), st.integers(0, 3), st.sampled_from(["a", 'q"'])),
    st.tuples(st.just("ddl"), st.integers(1, 6), st.sampled_from(["ALTER A", "ALTER B"])),
    st.tuples(st.just("restart"),),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(EVENTS)
def test_cached_state_is_the_state_and_follows_the_rule(events):
    d = Dedup()
    model: dict[str, tuple[int, set]] = {}
    ddl_ts, ddl_queries = 0, set()
    for e in events:
        if e[0] == "restart":  # what a restart does: a new filter from the last position's state
            d = Dedup.from_state(orjson.loads(d.state_json()))
        elif e[0] == "ddl":
            _, ts, q = e
            expect = not (ts < ddl_ts or ts == ddl_ts and q in ddl_queries)
            if expect:
                if ts > ddl_ts:
                    ddl_ts, ddl_queries = ts, set()
                ddl_queries.add(q)
            assert d.admit_ddl(DDLEvent("shop", "orders", q, ts)) is expect
        else:
            _, ti, ts, key, v = e
            t = TABLES[ti]
            ev = RowChange(t, "insert", ts, {"id": key, "v": v})
            handle = repr((key,)) if ti < 2 else repr(tuple(sorted(ev.row.items())))
            mark = model.get(t.collection)
            if not ts:
                expect = True
            elif mark is None or ts > mark[0]:
                expect, model[t.collection] = True, (ts, {handle})
            elif ts < mark[0] or handle in mark[1]:
                expect = False
            else:
                expect = True
                mark[1].add(handle)
            text = d.admit_row_json(ev)
            assert (text is not None) is expect
            if text is not None:
                assert text == orjson.dumps(d.state())
        assert d.state_json() == orjson.dumps(d.state())
        assert orjson.loads(d.state_json()) == [{c: [m[0], sorted(m[1])] for c, m in model.items()}, ddl_ts,
                                                sorted(ddl_queries)]


def test_admit_row_keeps_its_meaning():
    d = Dedup()
    t = TABLES[0]
    assert d.admit_row(RowChange(t, "insert", 0, {"id": 1}))  # no commit ts: always applied
    assert d.admit_row(RowChange(t, "insert", 0, {"id": 1}))
    assert d.admit_row(RowChange(t, "insert", 5, {"id": 1}))
    assert not d.admit_row(RowChange(t, "insert", 5, {"id": 1}))
    assert d.admit_row(RowChange(t, "delete", 5, None))  # no row: identified by the empty row
    assert not d.admit_row(RowChange(t, "insert", 4, {"id": 2}))
    assert orjson.loads(d.state_json()) == [{"shop.orders": [5, sorted(["(1,)", "(None,)"])]}, 0, []]
