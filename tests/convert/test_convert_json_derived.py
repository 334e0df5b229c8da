"""The JSON writer's shortcut for records whose metadata names no schema (``_Writer._derived_fit``).

It must pick exactly the schema ``SchemaRefs.attach`` picks, so the lines are compared with the
lines written when the shortcut finds nothing to offer (``first_derived`` answering None makes
every record go through ``attach``, the behaviour before the shortcut existed).
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcflow.convert import jsonform
from cdcflow.convert.schemaref import SchemaRefs
from cdcflow.record import Operation, Record
from cdcflow.schemas import SchemaStore


def _lines(records: list[Record], shortcut: bool, monkeypatch: pytest.MonkeyPatch, store: SchemaStore | None = None):
    """The lines and every (subject, version, schema) the writer registered."""
    with monkeypatch.context() as m:
        if not shortcut:
            m.setattr(SchemaRefs, "first_derived", lambda self, metadata, part: None)
        store = store or SchemaStore()
        out = jsonform.dumps_lines(records, store)
        subjects = [(s, v, store.get(s, v).text) for s in sorted(store.subjects()) for v in store.versions(s)]
        return out, subjects


def _record(i: int, key, after, before=None, collection: str | None = "db.t") -> Record:
    metadata = {"opencdc.collection": collection} if collection else {}
    return Record(position=str(i).encode(), operation=Operation.UPDATE if before else Operation.CREATE,
                  metadata=metadata, key=key, before=before, after=after)


def test_shapes_changing_within_a_batch_pick_the_same_schemas(monkeypatch):
    rows = [
        ({"id": 1}, {"a": 1, "b": "x"}, None),
        ({"id": 2}, {"a": 2, "b": "y"}, {"a": 1, "b": "x"}),
        ({"id": "k3"}, {"a": "text", "b": "z"}, None),  # another shape: a new derived schema
        ({"id": 4}, {"a": 4, "b": "w"}, None),  # back to the first: attach moves it to the front
        ({"id": 5}, {"a": Decimal("1.50"), "b": None}, None),
        ({"id": 6}, {"a": 6, "b": "v"}, None),
        (b"raw-key", {"a": 7, "b": "u"}, None),
        ({"id": 8}, b"raw-payload", None),
    ]
    records = [_record(i, k, a, b) for i, (k, a, b) in enumerate(rows)]
    records.append(_record(99, {"id": 9}, {"a": 9, "b": "t"}, collection=None))  # default subject "cdcflow.*"
    store = SchemaStore()
    fast, fast_subjects = _lines(records, True, monkeypatch, store)
    slow, slow_subjects = _lines(records, False, monkeypatch)
    assert fast == slow
    assert fast_subjects == slow_subjects
    assert b"cdcflow.schema.derived" in fast
    back = jsonform.loads_lines(fast, store)
    assert [(r.key, r.before, r.after, r.metadata) for r in back] == [
        (r.key, r.before, r.after, r.metadata) for r in records]


_values = st.one_of(st.integers(-(2 ** 63), 2 ** 63 - 1), st.text(max_size=5), st.none(), st.booleans(),
                    st.floats(allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.dictionaries(st.sampled_from("ab"), _values, min_size=1),
                          st.sampled_from(["db.t", "db.u", None])), min_size=1, max_size=12))
def test_any_sequence_of_rows_gets_the_schemas_attach_picks(rows):
    mp = pytest.MonkeyPatch()
    try:
        records = [_record(i, {"id": i}, row, collection=c) for i, (row, c) in enumerate(rows)]
        assert _lines(records, True, mp) == _lines(records, False, mp)
    finally:
        mp.undo()
