"""Fused runs give exactly what the processors give one by one (batch path).

The reference is the same chain with fusion switched off (``step_of`` answering
None), so every processor runs through its own batch ``process``.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cdcflow.pipeline.chain as chain_module
from cdcflow.pipeline.chain import FusedRun, build_chain
from cdcflow.pipeline.model import ProcessorConfig
from cdcflow.record import META_CONTROL, Operation, Record
from cdcflow.registry import load_registry
from cdcflow.transforms.field_set import FieldSet

PROCESSORS = [
    ProcessorConfig("set", "field.set", {"field": ".Metadata.pipeline", "value": "p-{{ Key.id }}"}),
    ProcessorConfig("set-lit", "field.set", {"field": ".Payload.After.tag", "value": "x"}, "Operation != 'delete'"),
    ProcessorConfig("rename", "field.rename", {"mapping": ".Payload.After.name:full_name,.Metadata.m:mm,.Key.a.b:c"}),
    ProcessorConfig("exclude", "field.exclude", {"fields": ".Payload.After.internal,.Metadata.x,.Payload.Before.a.b"}),
    ProcessorConfig("drop", "filter", condition='Payload.After.status == "deleted"'),
    ProcessorConfig("odd", "field.set", {"field": ".Operation", "value": "{{ Payload.After.op }}"}, "Payload.After.flag"),
    ProcessorConfig("mask", "cdc.mask", {"columns": "email,shop.users.phone", "mask.keepLast": "2"}),
    ProcessorConfig("hash", "cdc.mask", {"columns": "card*", "method": "hash"}),
]

_scalar = st.one_of(st.none(), st.integers(-3, 3), st.sampled_from(["ok", "deleted", "a@b.c", "12345"]))
_row = st.one_of(
    st.none(),
    st.binary(max_size=3),
    st.dictionaries(
        st.sampled_from(["name", "internal", "status", "email", "phone", "card1", "flag", "op", "a"]),
        st.one_of(_scalar, st.booleans(), st.sampled_from(["update", "bogus"]), st.just({"b": 1})),
        max_size=6,
    ),
)
_record = st.builds(
    lambda op, md, key, before, after: Record(b"p", op, md, key, before, after),
    st.sampled_from(list(Operation)),
    st.dictionaries(st.sampled_from(["m", "x", "opencdc.collection", META_CONTROL]),
                    st.sampled_from(["shop.users", "shop.orders", "v"]), max_size=3),
    st.one_of(st.none(), st.fixed_dictionaries({"id": st.integers(0, 9)}), st.just({"a": {"b": 1}}), st.just(b"k")),
    _row,
    _row,
)


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def copy(records):
    return [Record(r.position, r.operation, dict(r.metadata), _deep(r.key), _deep(r.before), _deep(r.after))
            for r in records]


def _deep(v):
    return {k: _deep(x) for k, x in v.items()} if isinstance(v, dict) else v


def summary(result):
    return result.records, [(n.record, n.node_id, n.error) for n in result.nacks], result.filtered


@pytest.fixture(scope="module")
def chains(registry):
    fused = build_chain(PROCESSORS, registry)
    assert all(type(u) is FusedRun for u in fused._units)
    original = chain_module.step_of
    chain_module.step_of = lambda transform: None
    try:
        unfused = build_chain(PROCESSORS, registry)
    finally:
        chain_module.step_of = original
    assert not any(type(u) is FusedRun for u in unfused._units)
    return fused, unfused


@settings(max_examples=100, deadline=None)
@given(batch=st.lists(_record, max_size=12))
def test_fused_chain_equals_processor_by_processor(chains, batch):
    fused, unfused = chains
    assert summary(fused.process(copy(batch))) == summary(unfused.process(copy(batch)))


def test_fused_failures_name_the_processor_and_stage(registry):
    chain = build_chain(PROCESSORS[2:], registry)
    batch = [
        Record(b"0", after={"name": "a", "flag": True, "op": "update"}),
        Record(b"1", after=b"raw"),  # rename inside raw data: the renamer's error
        Record(b"2", after={"flag": "yes"}),  # condition gives a str
        Record(b"3", after={"flag": True, "op": "bogus"}),  # field.set .Operation fails
        Record(b"4", after={"status": "deleted"}),
    ]
    result = chain.process(batch)
    assert [r.position for r in result.records] == [b"0"] and result.filtered == 1
    assert [(n.record.position, n.node_id) for n in result.nacks] == [(b"1", "rename"), (b"2", "odd"), (b"3", "odd")]
    assert "raw data" in result.nacks[0].error
    assert result.nacks[1].error.startswith("condition: expression") and "true or false" in result.nacks[1].error
    assert "unknown operation 'bogus'" in result.nacks[2].error


def test_subclass_overriding_process_is_not_fused(registry):
    class Shouting(FieldSet):
        def process(self, records):
            return [r for r in super().process(records)]

    t = Shouting()
    t.configure({"field": ".Metadata.a", "value": "b"})
    assert chain_module.step_of(t) is None
    plain = FieldSet()
    plain.configure({"field": ".Metadata.a", "value": "b"})
    assert chain_module.step_of(plain) is not None


def test_mask_plain_and_qualified_columns(registry):
    chain = build_chain([ProcessorConfig("m", "cdc.mask", {"columns": "email,shop.users.phone"})], registry)
    users = Record(b"u", metadata={"opencdc.collection": "shop.users"}, after={"email": "ab", "phone": "123", "x": 1})
    orders = Record(b"o", metadata={"opencdc.collection": "shop.orders"}, after={"email": 12, "phone": "123"})
    out = chain.process([users, orders]).records
    assert out[0].after == {"email": "**", "phone": "***", "x": 1}
    assert out[1].after == {"email": "**", "phone": "123"}
