"""State files and the nack window: no Spark needed."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest
from hypothesis import given, settings, strategies as st

from cdcflow.engine.dlq import NackWindow, dlq_record
from cdcflow.engine.state import PartitionState, RunLock, StateDir, StateError, atomic_write
from cdcflow.record import META_DLQ_NACK_ERROR, META_DLQ_NACK_NODE_ID, Record


def test_partition_state_round_trips_binary_positions(tmp_path):
    state = StateDir(tmp_path / "st").create()
    assert state.load("p", "src", "0") == PartitionState()
    saved = PartitionState(position=b"\x00\xffpos/1", window=[0, 1, 0], ended=True)
    state.save("p", "src", "0", saved)
    assert state.load("p", "src", "0") == saved
    # ids with path separators cannot escape the state directory
    state.save("../evil", "a/b", "x/../y", saved)
    f = state.partition_file("../evil", "a/b", "x/../y")
    assert f.is_file() and state.root in f.resolve().parents


def test_unreadable_state_names_the_file(tmp_path):
    state = StateDir(tmp_path).create()
    f = state.partition_file("p", "s", "")
    f.parent.mkdir(parents=True)
    f.write_text("{not json")
    with pytest.raises(StateError, match=str(f.name)):
        state.load("p", "s", "")


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    target = tmp_path / "f.json"
    for i in range(5):
        atomic_write(target, json.dumps({"i": i}).encode())
    assert json.loads(target.read_bytes()) == {"i": 4}
    assert os.listdir(tmp_path) == ["f.json"]


def _try_lock(root: str, q) -> None:
    try:
        with RunLock(StateDir(root)):
            q.put("locked")
    except StateError as e:
        q.put(f"error: {e}")


def test_run_lock_excludes_a_second_process(tmp_path):
    state = StateDir(tmp_path).create()
    q = multiprocessing.get_context("spawn").Queue()
    with RunLock(state):
        p = multiprocessing.get_context("spawn").Process(target=_try_lock, args=(str(tmp_path), q))
        p.start()
        p.join(30)
        assert q.get(timeout=5).startswith("error: state directory")
    p = multiprocessing.get_context("spawn").Process(target=_try_lock, args=(str(tmp_path), q))
    p.start()
    p.join(30)
    assert q.get(timeout=5) == "locked"


def test_default_window_stops_on_first_nack():
    w = NackWindow(1, 0)
    w.ack(100)
    assert w.nack() is False


def test_window_size_zero_never_stops():
    w = NackWindow(0, 0)
    assert all(w.nack() for _ in range(1000))


def test_window_counts_only_the_last_n_outcomes():
    w = NackWindow(3, 1)
    assert w.nack() is True  # [1]
    w.ack(2)  # [1,0,0]
    w.ack(1)  # [0,0,0]: the first nack slid out
    assert w.nack() is True  # [0,0,1]
    assert w.nack() is False  # [0,1,1] → 2 > 1
    assert w.snapshot() == [0, 1, 1]


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(0, 8),
    threshold=st.integers(0, 5),
    outcomes=st.lists(st.booleans(), max_size=60),
    initial=st.lists(st.integers(0, 1), max_size=10),
)
def test_window_matches_a_naive_model(size, threshold, outcomes, initial):
    """Property: nack() is False exactly when the last `size` outcomes hold more than `threshold` nacks."""
    w = NackWindow(size, threshold, initial)
    history = list(initial)[-size:] if size else []
    for is_nack in outcomes:
        history.append(1 if is_nack else 0)
        if is_nack:
            allowed = w.nack()
            expected = True if size == 0 else sum(history[-size:]) <= threshold
            assert allowed == expected
        else:
            w.ack()
    if size:
        assert w.snapshot() == history[-size:]
        # a restored window behaves identically
        assert NackWindow(size, threshold, w.snapshot()).snapshot() == w.snapshot()


def test_dlq_record_is_a_copy_with_conduit_metadata():
    r = Record(b"p1", metadata={"a": "1"}, after={"x": 1})
    d = dlq_record(r, "proc1", "boom")
    assert d.metadata == {"a": "1", META_DLQ_NACK_ERROR: "boom", META_DLQ_NACK_NODE_ID: "proc1"}
    assert r.metadata == {"a": "1"}
