"""Conduit field references compiled into get/set/delete."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcflow.record import Operation, Record
from cdcflow.transforms.paths import FieldRef, FieldRefError


def rec() -> Record:
    return Record(
        b"pos", Operation.CREATE, {"opencdc.collection": "db.t", "k": "v"}, {"id": 1},
        {"name": "old"}, {"name": "new", "a": {"b": {"c": 3}}, "first name": "Ann"},
    )


@pytest.mark.parametrize(
    "reference, value",
    [
        (".Position", b"pos"),
        (".Operation", "create"),
        (".Metadata", {"opencdc.collection": "db.t", "k": "v"}),
        (".Metadata.k", "v"),
        ('.Metadata["opencdc.collection"]', "db.t"),
        (".Metadata['opencdc.collection']", "db.t"),
        (".Metadata.missing", None),
        (".Key", {"id": 1}),
        (".Key.id", 1),
        (".Payload.Before.name", "old"),
        (".Payload.After.name", "new"),
        (".Payload.After.a.b.c", 3),
        ('.Payload.After["a"]["b"].c', 3),
        ('.Payload.After["first name"]', "Ann"),
        (".Payload.After.a.x.y", None),
        (".Payload", {"before": {"name": "old"}, "after": rec().after}),
    ],
)
def test_get(reference, value):
    assert FieldRef.compile(reference).get(rec()) == value


@pytest.mark.parametrize(
    "reference, fragment",
    [
        ("Payload.After", "starts with '.'"),
        (".Payload.Middle", "unknown payload field 'Middle'"),
        (".Body", "unknown record field 'Body'"),
        (".Position.x", ".Position has no fields"),
        (".Metadata.a.b", "metadata is flat"),
        (".Payload.After.a b", "unexpected text"),
        ('.Payload.After["unterminated]', "unexpected text"),
        (".Payload.After.", "unexpected text"),
    ],
)
def test_invalid_references(reference, fragment):
    with pytest.raises(FieldRefError, match=fragment):
        FieldRef.compile(reference)


def test_set_creates_missing_maps():
    r = Record(after=None)
    FieldRef.compile(".Payload.After.a.b").set(r, 1)
    assert r.after == {"a": {"b": 1}}
    FieldRef.compile('.Payload.After["x y"]').set(r, "z")
    assert r.after == {"a": {"b": 1}, "x y": "z"}


def test_set_operation_metadata_and_whole_data():
    r = rec()
    FieldRef.compile(".Operation").set(r, "delete")
    assert r.operation is Operation.DELETE
    with pytest.raises(FieldRefError, match="unknown operation"):
        FieldRef.compile(".Operation").set(r, "destroy")
    FieldRef.compile(".Metadata.n").set(r, 5)
    assert r.metadata["n"] == "5"  # metadata values are strings
    FieldRef.compile(".Key").set(r, "raw-key")
    assert r.key == b"raw-key"  # a string set on a whole data field becomes raw data
    FieldRef.compile(".Payload.After").set(r, {"x": 1})
    assert r.after == {"x": 1}


def test_set_inside_raw_data_or_a_scalar_is_an_error():
    r = Record(after=b"raw")
    with pytest.raises(FieldRefError, match="raw data"):
        FieldRef.compile(".Payload.After.a").set(r, 1)
    r = Record(after={"a": 5})
    with pytest.raises(FieldRefError, match="holds a int"):
        FieldRef.compile(".Payload.After.a.b").set(r, 1)


def test_delete():
    r = rec()
    FieldRef.compile(".Payload.After.a.b").delete(r)
    assert r.after["a"] == {}
    FieldRef.compile(".Payload.After.not.there").delete(r)  # missing: nothing happens
    FieldRef.compile(".Metadata").delete(r)
    assert r.metadata == {}
    FieldRef.compile(".Payload").delete(r)
    assert r.before is None and r.after is None
    for ref in (".Position", ".Operation"):
        with pytest.raises(FieldRefError, match="cannot be deleted"):
            FieldRef.compile(ref).delete(r)


keys = st.text(min_size=1, max_size=12).filter(lambda s: '"' not in s and "\\" not in s)


@settings(max_examples=200, deadline=None)
@given(st.lists(keys, min_size=1, max_size=4), st.integers())
def test_bracket_paths_round_trip(path, value):
    reference = ".Payload.After" + "".join(f'["{k}"]' for k in path)
    ref = FieldRef.compile(reference)
    r = Record(after={})
    ref.set(r, value)
    assert ref.get(r) == value
    node = r.after
    for k in path[:-1]:
        node = node[k]
    assert node[path[-1]] == value
    ref.delete(r)
    assert ref.get(r) is None
