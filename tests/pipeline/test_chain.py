"""Transform chain semantics, with the real registry and real built-in transforms.

Test-only transforms (one that fails on some records, one that splits, one that
raises for a whole batch, one that counts its lifecycle) are registered through the
registry's ``extra_plugins`` hook, exactly as a pluggy plugin would be.
"""

from __future__ import annotations

from typing import Sequence

import pytest

from cdcflow.hookspecs import hookimpl
from cdcflow.params import Parameter, ParamType
from cdcflow.pipeline.chain import Chain, ProcessorSetupError, build_chain
from cdcflow.pipeline.model import Origin, ProcessorConfig
from cdcflow.record import Operation, Record
from cdcflow.registry import load_registry
from cdcflow.sdk import Failed, Result, Transform

LIFECYCLE: list[str] = []


class RejectOdd(Transform):
    """Fails records whose ``n`` is odd; raises (instead of returning Failed) when n == 5."""

    name = "test.reject-odd"

    def process_record(self, record: Record) -> Result:
        n = record.after["n"]
        if n == 5:
            raise ValueError("five is right out")
        if n % 2:
            return Failed(f"odd n={n}")
        return record


class Split(Transform):
    """Turns each record into ``copies`` records (0 drops it)."""

    name = "test.split"
    parameters = {"copies": Parameter(ParamType.INT, default="2")}

    def process_record(self, record: Record) -> Result:
        out = []
        for i in range(self.config["copies"]):
            c = record.copy()
            c.after["copy"] = i
            out.append(c)
        return out


class BatchRaiser(Transform):
    """Raises for the whole batch when it holds n == 3 (a batch transform with a bug)."""

    name = "test.batch-raiser"

    def process(self, records: Sequence[Record]) -> list[Result]:
        if any(r.after["n"] == 3 for r in records):
            raise RuntimeError("cannot handle n=3")
        for r in records:
            r.after["seen"] = True
        return list(records)


class Lifecycle(Transform):
    name = "test.lifecycle"
    parameters = {"fail": Parameter(ParamType.STRING, default="")}

    def configure(self, config):
        super().configure(config)
        LIFECYCLE.append(f"configure {self.id}")
        if config["fail"] == "configure":
            raise RuntimeError("configure failed")

    def open(self):
        LIFECYCLE.append(f"open {self.id}")
        if self.config["fail"] == "open":
            raise RuntimeError("open failed")

    def process_record(self, record):
        return record

    def teardown(self):
        LIFECYCLE.append(f"teardown {self.id}")


class WrongCount(Transform):
    name = "test.wrong-count"

    def process(self, records):
        return list(records)[:-1]


class _TestPlugins:
    @hookimpl
    def cdcflow_transforms(self):
        return [RejectOdd, Split, BatchRaiser, Lifecycle, WrongCount]


@pytest.fixture(scope="module")
def registry():
    return load_registry(extra_plugins=[("tests.pipeline.test_chain", _TestPlugins())])


def records(n: int) -> list[Record]:
    return [Record(f"p{i}".encode(), Operation.CREATE, {"i": str(i)}, {"id": i}, None, {"n": i}) for i in range(n)]


def proc(pid: str, plugin: str, condition: str | None = None, **settings: str) -> ProcessorConfig:
    return ProcessorConfig(pid, plugin, dict(settings), condition, origin=Origin("pipe.yaml", 7))


def test_empty_chain_is_a_no_op(registry):
    chain = build_chain([], registry)
    batch = records(3)
    result = chain.process(batch)
    assert result.records == batch and result.nacks == [] and result.filtered == 0


def test_builtin_transforms_in_order(registry):
    chain = build_chain(
        [
            proc("upper", "field.set", field=".Payload.After.label", value="n{{ Payload.After.n }}"),
            proc("collection", "builtin:field.set", field='.Metadata["opencdc.collection"]', value="db.t"),
            proc("strip", "field.exclude", fields=".Metadata.i,.Key"),
        ],
        registry,
    )
    out = chain.process(records(3)).records
    assert [r.after for r in out] == [{"n": 0, "label": "n0"}, {"n": 1, "label": "n1"}, {"n": 2, "label": "n2"}]
    assert all(r.metadata == {"opencdc.collection": "db.t"} and r.key is None for r in out)


def test_condition_false_skips_the_processor_and_keeps_order(registry):
    chain = build_chain([proc("mark", "field.set", "Payload.After.n % 3 == 0", field=".Payload.After.m", value="x")],
                        registry)
    out = chain.process(records(7)).records
    assert [r.after["n"] for r in out] == list(range(7))
    assert [r.after.get("m") for r in out] == ["x", None, None, "x", None, None, "x"]


def test_filter_with_condition_drops_only_matching(registry):
    chain = build_chain([proc("drop-even", "filter", "Payload.After.n % 2 == 0")], registry)
    result = chain.process(records(6))
    assert [r.after["n"] for r in result.records] == [1, 3, 5]
    assert result.filtered == 3 and result.nacks == []


def test_filter_without_condition_drops_everything(registry):
    result = build_chain([proc("all", "filter")], registry).process(records(4))
    assert result.records == [] and result.filtered == 4


def test_failure_nacks_only_that_record(registry):
    chain = build_chain(
        [proc("reject", "test.reject-odd"), proc("after", "field.set", field=".Metadata.after", value="yes")], registry
    )
    result = chain.process(records(7))
    assert [r.after["n"] for r in result.records] == [0, 2, 4, 6]
    assert all(r.metadata["after"] == "yes" for r in result.records)
    assert [(n.record.after["n"], n.node_id, n.error) for n in result.nacks] == [
        (1, "reject", "odd n=1"),
        (3, "reject", "odd n=3"),
        (5, "reject", "five is right out"),
    ]


def test_failure_nacks_name_the_processor_and_keep_input_order(registry):
    chain = build_chain(
        [
            proc("first", "test.reject-odd", "Payload.After.n < 4"),
            proc("second", "field.set", "Payload.After.n == 6", field=".Operation", value="bogus"),
        ],
        registry,
    )
    result = chain.process(records(8))
    assert [r.after["n"] for r in result.records] == [0, 2, 4, 5, 7]
    assert [(n.record.after["n"], n.node_id) for n in result.nacks] == [(1, "first"), (3, "first"), (6, "second")]
    assert "unknown operation 'bogus'" in result.nacks[2].error


def test_condition_error_nacks_that_record(registry):
    chain = build_chain([proc("c", "filter", "Payload.After.n + Payload.After.s > 0")], registry)
    batch = records(3)
    batch[1].after["s"] = 1
    result = chain.process(batch)
    # records 0 and 2 have no "s": null + int raises for them only; record 1 is filtered
    assert result.records == []
    assert [(n.record.after["n"], n.node_id) for n in result.nacks] == [(0, "c"), (2, "c")]
    assert result.nacks[0].error.startswith("condition: expression")
    assert result.filtered == 1


def test_non_bool_condition_nacks(registry):
    result = build_chain([proc("c", "filter", "Payload.After.n")], registry).process(records(2))
    assert len(result.nacks) == 2 and "must be true or false" in result.nacks[0].error


def test_split_outputs_take_the_place_of_their_input(registry):
    chain = build_chain([proc("split", "test.split", "Payload.After.n == 1", copies="3")], registry)
    out = chain.process(records(3)).records
    assert [(r.after["n"], r.after.get("copy")) for r in out] == [(0, None), (1, 0), (1, 1), (1, 2), (2, None)]


def test_split_into_nothing_counts_as_filtered(registry):
    result = build_chain([proc("split", "test.split", copies="0")], registry).process(records(2))
    assert result.records == [] and result.filtered == 2 and result.nacks == []


def test_batch_raise_is_isolated_to_the_failing_record(registry):
    result = build_chain([proc("b", "test.batch-raiser")], registry).process(records(5))
    assert [r.after for r in result.records] == [{"n": i, "seen": True} for i in (0, 1, 2, 4)]
    assert [(n.record.after["n"], n.node_id, n.error) for n in result.nacks] == [(3, "b", "cannot handle n=3")]


def test_wrong_result_count_nacks_the_batch(registry):
    result = build_chain([proc("w", "test.wrong-count")], registry).process(records(3))
    assert result.records == [] and len(result.nacks) == 3
    assert "returned 2 results for 3 records" in result.nacks[0].error


def test_lifecycle_and_teardown_once(registry):
    LIFECYCLE.clear()
    chain = build_chain([proc("a", "test.lifecycle"), proc("b", "test.lifecycle")], registry)
    assert LIFECYCLE == ["configure a", "open a", "configure b", "open b"]
    chain.teardown()
    chain.teardown()
    assert LIFECYCLE[4:] == ["teardown a", "teardown b"]


@pytest.mark.parametrize("stage", ["configure", "open"])
def test_setup_failure_tears_down_what_was_opened(registry, stage):
    LIFECYCLE.clear()
    with pytest.raises(ProcessorSetupError) as info:
        build_chain([proc("a", "test.lifecycle"), proc("b", "test.lifecycle", fail=stage)], registry)
    assert info.value.processor_id == "b"
    assert str(info.value).startswith("pipe.yaml:7: processor 'b' (test.lifecycle)")
    assert f"{stage} failed" in str(info.value)
    assert "teardown a" in LIFECYCLE and "teardown b" in LIFECYCLE


@pytest.mark.parametrize(
    "config, fragment",
    [
        (proc("x", "no.such.plugin"), "transform plugin 'no.such.plugin' not found"),
        (proc("x", "field.set", field=".Payload.After.a"), "parameter 'value': value is required"),
        (proc("x", "field.set", field=".Position", value="v"), "must not be one of .Position"),
        (proc("x", "field.set", field="Payload.After", value="v"), "a reference starts with '.'"),
        (proc("x", "field.set", field=".Payload.After.a", value="{{ nope }}"), "unknown name 'nope'"),
        (proc("x", "filter", "Operation = 1"), "syntax error"),
        (proc("x", "filter", extra="1"), "unrecognized parameter"),
    ],
)
def test_setup_errors_name_the_processor(registry, config, fragment):
    with pytest.raises(ProcessorSetupError) as info:
        build_chain([config], registry)
    assert fragment in str(info.value)
    assert "pipe.yaml:7: processor 'x'" in str(info.value)


def test_chain_is_reusable_across_batches(registry):
    chain = build_chain([proc("f", "filter", "Payload.After.n == 1")], registry)
    assert isinstance(chain, Chain) and chain.node_ids == ["f"] and len(chain) == 1
    for _ in range(3):
        assert [r.after["n"] for r in chain.process(records(3)).records] == [0, 2]


def test_builtin_failures_name_the_processor_and_the_stage(registry):
    chain = build_chain([
        proc("rename", "field.rename", mapping=".Payload.After.name:full_name,.Metadata.m:mm,.Key.a.b:c"),
        proc("exclude", "field.exclude", fields=".Payload.After.internal,.Metadata.x,.Payload.Before.a.b"),
        proc("drop", "filter", condition='Payload.After.status == "deleted"'),
        proc("odd", "field.set", "Payload.After.flag", field=".Operation", value="{{ Payload.After.op }}"),
    ], registry)
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


def test_mask_plain_and_qualified_columns(registry):
    chain = build_chain([proc("m", "cdc.mask", columns="email,shop.users.phone")], registry)
    users = Record(b"u", metadata={"opencdc.collection": "shop.users"}, after={"email": "ab", "phone": "123", "x": 1})
    orders = Record(b"o", metadata={"opencdc.collection": "shop.orders"}, after={"email": 12, "phone": "123"})
    out = chain.process([users, orders]).records
    assert out[0].after == {"email": "**", "phone": "***", "x": 1}
    assert out[1].after == {"email": "**", "phone": "123"}
