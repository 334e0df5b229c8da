"""field.set, field.exclude and filter, with the examples from Conduit's processor docs."""

from __future__ import annotations

import pytest

from cdcflow.errors import ConfigError
from cdcflow.record import Operation, Record
from cdcflow.registry import load_registry
from cdcflow.sdk import FILTERED, Failed
from cdcflow.transforms.builtin import cdcflow_transforms
from cdcflow.transforms.field_exclude import split_references


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def make(registry, name: str, **settings: str):
    info = registry.transform(name)
    t = info.new_transform()
    t.id = f"test-{name}"
    t.configure(info.validate("transform", settings))
    t.open()
    return t


def test_registered_through_the_entry_point(registry):
    names = {info.name: info for info in registry.transforms() if info.type == "builtin"}
    assert {"field.set", "field.exclude", "filter"} <= set(names)
    # every transform the hook returns is listed, and none twice
    hooked = [cls.name for cls in cdcflow_transforms()]
    assert len(hooked) == len(set(hooked)) and set(hooked) <= set(names)
    assert names["field.set"].params["field"].required


# -- field.set (Conduit's documented examples) --------------------------------------


def test_field_set_operation_to_update(registry):
    t = make(registry, "field.set", field=".Operation", value="update")
    r = Record(operation=Operation.CREATE)
    assert t.process([r]) == [r]
    assert r.operation is Operation.UPDATE


def test_field_set_adds_a_field(registry):
    t = make(registry, "field.set", field=".Payload.After.foo", value="bar")
    r = Record(operation=Operation.SNAPSHOT, key={"my-key": "id"})
    t.process([r])
    assert r == Record(operation=Operation.SNAPSHOT, key={"my-key": "id"}, after={"foo": "bar"})


def test_field_set_with_a_template(registry):
    # Conduit: value "{{ eq .Metadata.table \"postgres\" }}"
    t = make(registry, "field.set", field=".Payload.After.postgres", value='{{ Metadata.table == "postgres" }}')
    r = Record(operation=Operation.SNAPSHOT, metadata={"table": "postgres"}, after={"postgres": "false"})
    t.process([r])
    assert r.after == {"postgres": "true"}


def test_field_set_metadata_from_payload(registry):
    t = make(registry, "field.set", field='.Metadata["opencdc.collection"]', value="{{ Payload.After.table }}")
    r = Record(after={"table": "orders"})
    t.process([r])
    assert r.metadata == {"opencdc.collection": "orders"}


def test_field_set_failure_is_per_record(registry):
    t = make(registry, "field.set", field=".Payload.After.x", value="{{ Payload.After.n + 1 }}")
    good, bad = Record(after={"n": 1}), Record(after={"n": "text"})
    out = t.process([good, bad, Record(after=b"raw")])
    assert out[0] is good and good.after["x"] == "2"
    assert isinstance(out[1], Failed) and "TypeError" in out[1].message
    assert isinstance(out[2], Failed) and "raw data" in out[2].message


@pytest.mark.parametrize(
    "settings, fragment",
    [
        ({"field": ".Position", "value": "x"}, "must not be one of .Position"),
        ({"field": "Payload", "value": "x"}, "starts with '.'"),
        ({"field": ".Payload.After.a", "value": "{{ Payload.After. }}"}, "syntax error"),
        ({"value": "x"}, "value is required"),
    ],
)
def test_field_set_invalid_settings(registry, settings, fragment):
    info = registry.transform("field.set")
    with pytest.raises(ConfigError, match=fragment):
        info.new_transform().configure(info.validate("transform", settings))


def test_field_set_accepts_conduit_schema_settings(registry):
    make(registry, "field.set", field=".Key.a", value="b", **{"sdk.schema.decode.key.enabled": "false"})


# -- field.exclude (Conduit's documented examples) ----------------------------------


def test_field_exclude_payload(registry):
    t = make(registry, "field.exclude", fields=".Payload")
    r = Record(operation=Operation.CREATE, metadata={"key1": "val1"}, before={"bar": "baz"}, after={"foo": "bar"})
    t.process([r])
    assert r == Record(operation=Operation.CREATE, metadata={"key1": "val1"})


def test_field_exclude_multiple_fields(registry):
    t = make(registry, "field.exclude", fields=".Metadata,.Payload.After.foo,.Key.key1")
    r = Record(
        operation=Operation.CREATE, metadata={"source": "s3"}, key={"key1": "val1", "key2": "val2"},
        before={"bar": "baz"}, after={"foo": "bar", "foobar": "baz"},
    )
    t.process([r])
    assert r == Record(
        operation=Operation.CREATE, metadata={}, key={"key2": "val2"}, before={"bar": "baz"}, after={"foobar": "baz"}
    )


def test_field_exclude_nested_tree_and_bracket_names(registry):
    t = make(registry, "field.exclude", fields='.Payload.After.a, .Metadata["opencdc.collection"]')
    r = Record(metadata={"opencdc.collection": "x", "y": "z"}, after={"a": {"deep": {"tree": 1}}, "b": 2})
    t.process([r])
    assert r.after == {"b": 2} and r.metadata == {"y": "z"}


@pytest.mark.parametrize("fields", [".Position", ".Operation", ".Payload.After.a,.Operation", " , "])
def test_field_exclude_refuses_position_operation_and_empty(registry, fields):
    info = registry.transform("field.exclude")
    with pytest.raises(ConfigError):
        info.new_transform().configure(info.validate("transform", {"fields": fields}))


def test_split_references_keeps_commas_in_brackets():
    assert split_references('.Metadata["a,b"], .Key.x,,.Payload.After[\'c,d\']') == [
        '.Metadata["a,b"]', ".Key.x", ".Payload.After['c,d']",
    ]


# -- filter --------------------------------------------------------------------------


def test_filter_drops_every_record_it_receives(registry):
    t = make(registry, "filter")
    r = Record(operation=Operation.CREATE, metadata={"key1": "val1"}, before={"bar": "baz"}, after={"foo": "bar"})
    assert t.process([r, r.copy()]) == [FILTERED, FILTERED]
    assert t.process([]) == []
