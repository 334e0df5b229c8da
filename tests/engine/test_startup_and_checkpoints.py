"""Start-up pieces (the class-data-sharing archive plan) and the overlapped checkpoint order.

The checkpoint test runs the real task function in-process on a real generator → file
pipeline and a real state directory; the state save, the destination write and the
source ack are only wrapped to log the order they happen in (and the save is slowed
down, so an overlap would show).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from cdcflow.engine.spark import cds
from cdcflow.engine.plan import Limits, PartitionTask, RunContext
from cdcflow.engine.state import StateDir
from cdcflow.engine.task import run_partition, teardown_all
from cdcflow.pipeline.validate import validate_files
from cdcflow.registry import load_registry


# -- class-data-sharing archive plan ----------------------------------------------
def test_archive_plan_writes_first_then_uses(tmp_path, monkeypatch):
    monkeypatch.setenv(cds.CACHE_ENV, str(tmp_path))
    monkeypatch.delenv(cds.CDS_ENV, raising=False)
    first = cds.plan({})
    assert first is not None and first.pending is not None
    assert f"-XX:ArchiveClassesAtExit={first.pending}" in first.java_options
    assert first.pending.parent == first.path.parent and not first.path.exists()
    first.path.write_bytes(b"archive")  # what finish() publishes after a clean JVM exit
    second = cds.plan({})
    assert second is not None and second.pending is None and second.path == first.path
    assert f"-XX:SharedArchiveFile={first.path}" in second.java_options
    # another class path is another archive
    other = cds.plan({"spark.jars": "/x/extra.jar"})
    assert other is not None and other.path != first.path and other.pending is not None
    cds.discard(second)
    assert not first.path.exists()


def test_archive_plan_off_and_stale_files_removed(tmp_path, monkeypatch):
    monkeypatch.setenv(cds.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(cds.CDS_ENV, "0")
    assert cds.plan({}) is None
    monkeypatch.setenv(cds.CDS_ENV, "1")
    directory = tmp_path / "spark-cds"
    directory.mkdir()
    stale, fresh = directory / "driver-x.jsa.1.a.tmp", directory / "driver-x.jsa.2.b.tmp"
    stale.write_bytes(b"torn")
    fresh.write_bytes(b"being written")
    old = time.time() - cds.STALE_SECONDS - 5
    os.utime(stale, (old, old))
    assert cds.plan({}) is not None
    assert not stale.exists() and fresh.exists()


# -- overlapped checkpoints keep the contract -----------------------------------------
PIPELINE = """\
version: "2.2"
engine:
  batch-size: 100
pipelines:
  - id: order
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          format.type: raw
          format.options.id: int
          recordCount: "500"
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {out}
"""


def test_previous_batch_is_saved_and_acked_before_the_next_is_written(tmp_path, monkeypatch):
    from cdcflow.connectors.file import FileDestination
    from cdcflow.connectors.generator import GeneratorSource

    events: list[tuple[str, object]] = []
    lock = threading.Lock()

    def log(kind: str, what: object) -> None:
        with lock:
            events.append((kind, what))

    real_save, real_write, real_ack = StateDir.save, FileDestination.write, GeneratorSource.ack

    def save(self, pipeline, source, partition, state):
        log("save-start", state.position)
        time.sleep(0.05)  # a slow disk: an overlap with the next write would show in the order
        real_save(self, pipeline, source, partition, state)
        log("save-end", state.position)

    def write(self, records):
        log("write", records[-1].position)
        return real_write(self, records)

    def ack(self, positions):
        log("ack", positions[-1])
        return real_ack(self, positions)

    monkeypatch.setattr(StateDir, "save", save)
    monkeypatch.setattr(FileDestination, "write", write)
    monkeypatch.setattr(GeneratorSource, "ack", ack)

    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(out=tmp_path / "out.jsonl"))
    result = validate_files([str(path)])
    assert not result.problems
    pipe = result.pipelines[0]
    state = StateDir(tmp_path / "state").create()
    ctx = RunContext.prepare({pipe.id: pipe}, state, load_registry(), limits=Limits(task_seconds=60))
    try:
        stats = run_partition(ctx, PartitionTask("order", "gen", "0"))
    finally:
        teardown_all()
    assert stats.error is None and stats.read == 500 and stats.ended

    writes = [p for k, p in events if k == "write"]
    assert writes == [f"0/{i}".encode() for i in (99, 199, 299, 399, 499)]
    for i, pos in enumerate(writes):
        at_write = events.index(("write", pos))
        if i:  # the batch before is saved and acknowledged before this one is written
            before = writes[i - 1]
            assert events.index(("save-end", before)) < at_write
            assert events.index(("save-end", before)) < events.index(("ack", before)) < at_write
        # a batch is saved only after it was written, and acknowledged only after it was saved
        assert at_write < events.index(("save-start", pos)) < events.index(("save-end", pos)) < events.index(("ack", pos))
    assert state.load("order", "gen", "0").position == b"0/499"
    assert len((tmp_path / "out.jsonl").read_bytes().splitlines()) == 500


@pytest.mark.parametrize("failing", ["write"])
def test_a_failure_still_acknowledges_the_saved_batch(tmp_path, monkeypatch, failing):
    """Batch 2's write fails: batch 1 (written and saved) is acknowledged; batch 2 is not saved."""
    from cdcflow.connectors.file import FileDestination
    from cdcflow.connectors.generator import GeneratorSource

    acks: list[bytes] = []
    real_write, real_ack = FileDestination.write, GeneratorSource.ack
    calls = {"n": 0}

    def write(self, records):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk gone")
        return real_write(self, records)

    def ack(self, positions):
        acks.append(positions[-1])
        return real_ack(self, positions)

    monkeypatch.setattr(FileDestination, "write", write)
    monkeypatch.setattr(GeneratorSource, "ack", ack)
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(out=tmp_path / "out.jsonl"))
    pipe = validate_files([str(path)]).pipelines[0]
    state = StateDir(tmp_path / "state").create()
    ctx = RunContext.prepare({pipe.id: pipe}, state, load_registry(), limits=Limits(task_seconds=60))
    try:
        stats = run_partition(ctx, PartitionTask("order", "gen", "0"))
    finally:
        teardown_all()
    assert stats.error is not None and "disk gone" in stats.error
    assert acks == [b"0/99"]
    assert state.load("order", "gen", "0").position == b"0/99"
    assert Path(tmp_path / "out.jsonl").read_bytes().count(b"\n") == 100


# -- what a batch cycle runs under ----------------------------------------------------
PROCESSOR = """\
    processors:
      - id: tag
        plugin: field.set
        settings:
          field: .Metadata["x"]
          value: "y"
"""


@pytest.mark.parametrize("processors", [False, True])
def test_batches_run_with_the_collector_paused(tmp_path, monkeypatch, processors):
    """Automatic GC is off from read to checkpoint submit and back on between batches."""
    import gc

    from cdcflow.connectors.file import FileDestination
    from cdcflow.connectors.generator import GeneratorSource

    seen: list[tuple[str, bool, bool]] = []
    real_read, real_write = GeneratorSource.read, FileDestination.write

    def read(self, n):
        seen.append(("read", gc.isenabled(), False))
        return real_read(self, n)

    def write(self, records):
        seen.append(("write", gc.isenabled(), False))
        return real_write(self, records)

    monkeypatch.setattr(GeneratorSource, "read", read)
    monkeypatch.setattr(FileDestination, "write", write)
    text = PIPELINE.format(out=tmp_path / "out.jsonl")
    if processors:
        text = text.replace("    connectors:\n", PROCESSOR + "    connectors:\n")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    result = validate_files([str(path)])
    assert not result.problems
    pipe = result.pipelines[0]
    ctx = RunContext.prepare({pipe.id: pipe}, StateDir(tmp_path / "state").create(), load_registry(),
                             limits=Limits(task_seconds=60))
    assert gc.isenabled()
    try:
        stats = run_partition(ctx, PartitionTask("order", "gen", "0"))
    finally:
        teardown_all()
    assert stats.error is None and stats.read == 500
    assert gc.isenabled()  # restored after the last batch
    assert [k for k, _, _ in seen].count("write") == 5
    assert all(not enabled for _, enabled, _ in seen)
    lines = (tmp_path / "out.jsonl").read_bytes().splitlines()
    assert len(lines) == 500 and (b'"x":"y"' in lines[0]) is processors


def test_processor_settings_are_validated_once_on_the_driver(tmp_path, monkeypatch):
    """``RunContext.prepare`` validates every processor's settings; a task builds its chain from
    them without validating again (issue 17: settings were validated on the driver and per task)."""
    from cdcflow.registry import PluginInfo

    text = PIPELINE.format(out=tmp_path / "out.jsonl").replace("    connectors:\n", PROCESSOR + "    connectors:\n")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    pipe = validate_files([str(path)]).pipelines[0]
    real_validate = PluginInfo.validate
    sides: list[str] = []

    def validate(self, side, *args, **kwargs):
        sides.append(side)
        return real_validate(self, side, *args, **kwargs)

    monkeypatch.setattr(PluginInfo, "validate", validate)
    ctx = RunContext.prepare({pipe.id: pipe}, StateDir(tmp_path / "state").create(), load_registry(),
                             limits=Limits(task_seconds=60))
    assert sides.count("transform") == 1
    assert ctx.processor_settings("order")["tag"]["field"] == '.Metadata["x"]'
    sides.clear()
    try:
        stats = run_partition(ctx, PartitionTask("order", "gen", "0"))
    finally:
        teardown_all()
    assert stats.error is None and stats.read == 500
    assert sides == []
    assert b'"x":"y"' in (tmp_path / "out.jsonl").read_bytes().splitlines()[0]


def test_a_bad_processor_setting_stops_the_run_before_it_starts(tmp_path):
    from cdcflow.pipeline.chain import ProcessorSetupError

    text = PIPELINE.format(out=tmp_path / "out.jsonl").replace(
        "    connectors:\n", PROCESSOR.replace('value: "y"', 'value: "y"\n          colour: red') + "    connectors:\n")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    from cdcflow.pipeline.config import load_files

    pipe = load_files([str(path)]).pipelines[0]
    with pytest.raises(ProcessorSetupError) as err:
        RunContext.prepare({pipe.id: pipe}, StateDir(tmp_path / "state").create(), load_registry())
    assert "processor 'tag' (field.set)" in str(err.value) and "colour" in str(err.value)
    assert f"{path}:" in str(err.value)
