"""The fault model's parts without Spark: processor outages, the retry budget, its settings,
and state-directory errors that name their path. The journeys are in test_faults.py."""

from __future__ import annotations

import pytest

from cdcflow.engine.faults import DESTINATION, NodeError, RetryPolicy, describe, node_error
from cdcflow.engine.state import PartitionState, StateDir
from cdcflow.errors import InfrastructureError
from cdcflow.pipeline.chain import Chain, _Node
from cdcflow.pipeline.config import load_files
from cdcflow.record import Record
from cdcflow.sdk import Failed, Transform


class _Lookup(Transform):
    """Looks each record up in a service: record 2 is malformed, record 3 finds the service down."""

    def process_record(self, record):
        if record.key["id"] == 2:
            raise ValueError("malformed")
        if record.key["id"] == 3:
            raise InfrastructureError("connection refused", service="lookup", endpoint="http://lookup:80")
        return record


def _records(n):
    return [Record(f"0/{i}".encode(), key={"id": i}) for i in range(n)]


def test_a_processor_outage_fails_the_batch_instead_of_nacking():
    chain = Chain([_Node("lookup-1", _Lookup(), None)])
    result = chain.process(_records(3))  # ids 0..2: the malformed record is the record's fault
    assert [n.error for n in result.nacks] == ["malformed"] and len(result.records) == 2
    with pytest.raises(InfrastructureError) as info:  # id 3: the service's fault, not a nack
        chain.process(_records(5))
    assert info.value.processor_id == "lookup-1"
    err = node_error("p1", "processor", "chain", info.value)
    assert err.retryable and str(err) == (
        "processor lookup-1: lookup unavailable at http://lookup:80: connection refused")


def test_a_per_record_transform_lets_an_outage_through():
    out = _Lookup().process(_records(3))
    assert out[2] == Failed("malformed")
    with pytest.raises(InfrastructureError):
        _Lookup().process(_records(4))


def test_other_failures_are_named_but_not_retried():
    err = node_error("p1", DESTINATION, "out", ValueError("bad"))
    assert not err.retryable and str(err) == "destination out: ValueError: bad"
    assert node_error("p1", "source", "gen", err) is err  # the innermost node is kept
    assert isinstance(err, NodeError)


def test_retry_policy_backs_off_within_its_budget():
    p = RetryPolicy(max_retries=4, min_delay=1, max_delay=5, backoff_factor=2, max_elapsed=100)
    assert [p.next_delay(r, 0) for r in range(1, 6)] == [1, 2, 4, 5, None]
    assert RetryPolicy(max_retries=-1, min_delay=1, max_delay=60, max_elapsed=10).next_delay(3, 7) is None
    assert RetryPolicy(max_retries=-1, max_elapsed=0).next_delay(1000, 1e9) == 30.0  # no limit at all
    assert RetryPolicy(max_retries=0).next_delay(1, 0) is None


def test_error_recovery_settings_are_parsed_and_checked(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("""\
version: "2.2"
engine:
  error-recovery.max-retries: 3
  error-recovery.min-delay: 250ms
pipelines:
  - id: p
    engine:
      error-recovery.backoff-factor: "1.5"
      error-recovery.max-elapsed: 1m
""")
    result = load_files([str(good)])
    assert not result.problems
    policy = RetryPolicy.of(result.pipelines[0].engine)
    assert policy == RetryPolicy(max_retries=3, min_delay=0.25, max_delay=30.0, backoff_factor=1.5, max_elapsed=60)
    bad = tmp_path / "bad.yaml"
    bad.write_text("""\
version: "2.2"
engine:
  error-recovery.max-retries: -2
  error-recovery.backoff-factor: "0.5"
  error-recovery.min-delay: soon
pipelines:
  - id: p
""")
    problems = [str(p) for p in load_files([str(bad)]).problems]
    assert len(problems) == 3, problems
    assert any("max-retries must be >= -1" in p for p in problems)
    assert any("backoff-factor must be >= 1" in p for p in problems)


def test_a_state_directory_error_names_the_path(tmp_path):
    blocker = tmp_path / "st" / "positions" / "p"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where a directory should be")
    state = StateDir(tmp_path / "st")
    with pytest.raises(InfrastructureError) as info:
        state.save("p", "src", "0", PartitionState(b"x"))
    path = str(state.partition_file("p", "src", "0"))
    assert info.value.endpoint == path and info.value.service == "state"
    assert path in describe(info.value)


def test_an_outage_while_planning_names_the_source():
    """The driver asks each source for its partitions before the run: a broker that is down
    then is named like a task's failure (pipeline, role, id, service, endpoint)."""
    from cdcflow.engine.plan import RunContext, plan_partitions
    from cdcflow.pipeline.model import ConnectorConfig, PipelineConfig
    from cdcflow.sdk import Source

    class DownSource(Source):
        def partitions(self):
            raise InfrastructureError("metadata request timed out", service="kafka", endpoint="broker:9092")

    class Info:
        def validate(self, side, settings, plugin_id=None):
            return settings

        def new_source(self):
            return DownSource()

    class Registry:
        def connector(self, ref):
            return Info()

    pipe = PipelineConfig(id="p9", connectors=[ConnectorConfig(id="orders", type="source", plugin="x")])
    with pytest.raises(NodeError) as info:
        plan_partitions(RunContext({"p9": pipe}, None, settings={("p9", "source", "orders"): {}}), Registry())
    assert info.value.pipeline == "p9" and info.value.retryable
    assert str(info.value) == "source orders: kafka unavailable at broker:9092: metadata request timed out"
