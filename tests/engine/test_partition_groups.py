"""Many source partitions per Spark task (issue 18): the driver groups the live partitions into as
many tasks as the executors have slots, and a task serves its partitions in turn. Each partition
keeps its order and positions; one that ends drops out while the others go on; a pipeline that
fails in a task does not stop another pipeline's partitions in it; latency does not grow with the
partition count; a lake of 1,000 tables reads through."""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from helpers.engine import GENERATOR, PLUGIN_PKG, PYTHON, REPO, write_pipeline

pytestmark = pytest.mark.spark


TWO_PIPELINES = """\
version: "2.2"
engine:
  micro-batch-duration: 500ms
  batch-size: 20
pipelines:
  - id: short
    connectors:
{short}      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: "{out}/short.jsonl"
  - id: long
    connectors:
{long}      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: "{out}/long.jsonl"
"""


def _keys(path: Path) -> list[int]:
    return [json.loads(line)["key"]["id"] for line in path.read_bytes().splitlines()]


def _per_partition_in_order(keys: list[int], partitions: int, count: int) -> None:
    """The generator gives partition p the keys p, p + partitions, ...: each must come in that order."""
    assert sorted(keys) == list(range(count))
    by_part: dict[int, list[int]] = defaultdict(list)
    for k in keys:
        by_part[k % partitions].append(k)
    for p, ks in by_part.items():
        assert ks == sorted(ks), f"partition {p} out of order"


def test_partitions_outnumbering_the_slots_share_tasks_and_keep_their_order(spark, tmp_path, monkeypatch):
    """4 partitions on local[2]: 2 tasks a micro-batch, each serving two partitions in turn, each
    group in the same Python worker every micro-batch (its sources stay open). The bounded
    one-partition pipeline ends in the first micro-batches and drops out; the other pipeline's
    partitions (rate-limited over several micro-batches) go on, every record in per-partition order."""
    from cdcflow.engine import driver as driver_module
    from cdcflow.engine.runner import run_files

    jobs: list[tuple[list[list], list]] = []
    inner = driver_module._spark_job

    def recording(sc, ctx, groups, *rest):
        stats = inner(sc, ctx, groups, *rest)
        jobs.append(([list(g) for g in groups], stats))
        return stats

    monkeypatch.setattr(driver_module, "_spark_job", recording)
    path = write_pipeline(tmp_path / "p.yaml", TWO_PIPELINES.format(
        out=tmp_path, short=GENERATOR.format(count=20, partitions=1, rate=0),
        long=GENERATOR.format(count=600, partitions=3, rate=200)))
    outcome = run_files([str(path)], until_idle=True, progress=False, state_dir=str(tmp_path / "state"),
                        out=open(os.devnull, "w"))
    assert outcome.exit_code == 0, outcome.failures

    assert _keys(tmp_path / "short.jsonl") == list(range(20))
    _per_partition_in_order(_keys(tmp_path / "long.jsonl"), 3, 600)

    assert len(jobs) >= 3
    for groups, stats in jobs:
        live = [g for g in groups if g]
        assert len(live) <= 2  # as many tasks as local[2] has slots
        assert len(stats) == sum(len(g) for g in live)  # one TaskStats per partition
    first_groups = [g for g in jobs[0][0] if g]
    assert max(len(g) for g in first_groups) == 2  # a task served two partitions
    # the short pipeline's partition ended and dropped out; the long one's went on after it
    ended_at = next(i for i, (_, stats) in enumerate(jobs) if any(s.ended and s.task.pipeline == "short"
                                                                   for s in stats))
    later = jobs[ended_at + 1:]
    assert later and all(t.pipeline == "long" for groups, _ in later for g in groups for t in g)
    assert sum(s.read for _, stats in later for s in stats) > 0
    # sticky: a partition is served by the same Python worker every micro-batch, its source reused
    workers: dict[object, set[int]] = defaultdict(set)
    for _, stats in jobs:
        for s in stats:
            workers[s.task].add(s.pid)
    assert all(len(pids) == 1 for pids in workers.values()), workers
    assert not any(s.opened for _, stats in jobs[1:] for s in stats)


OUTAGE_AND_HEALTHY = """\
version: "2.2"
engine:
  batch-size: 50
  micro-batch-duration: 200ms
  error-recovery.min-delay: 200ms
  error-recovery.max-delay: 200ms
  error-recovery.max-retries: "4"
  conf:
    spark.default.parallelism: "1"
pipelines:
  - id: down
    connectors:
{down}      - id: rec
        type: destination
        plugin: test-outage
        settings:
          path: ${{CDCFLOW_FILE_DIR}}/down.bin
          fail-writes: "-1"
  - id: up
    connectors:
{up}      - id: rec
        type: destination
        plugin: test-recorder
        settings:
          path: ${{CDCFLOW_FILE_DIR}}/up.bin
"""


@pytest.mark.slow
def test_a_pipeline_failing_in_a_task_does_not_stop_another_pipelines_partitions_in_it(tmp_path):
    """One slot (``spark.default.parallelism: 1``): every partition of both pipelines is in one task.
    The ``down`` pipeline's destination is unreachable: its batch is retried, then the pipeline
    fails naming the node, exactly as when it ran alone (the retries outlast the task's 200 ms
    budget: the task stays until the pipeline's retry went through or gave up, so its backoff is
    not started afresh each micro-batch); meanwhile, and after, the ``up`` pipeline's three
    partitions deliver every record in per-partition order."""
    from cdcflow_engine_testplugins import read_records

    path = write_pipeline(tmp_path / "p.yaml", OUTAGE_AND_HEALTHY.format(
        down=GENERATOR.format(count=100, partitions=1, rate=0), up=GENERATOR.format(count=900, partitions=3, rate=300)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLUGIN_PKG), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([PYTHON, "-m", "cdcflow.cli", "run", str(path), "--until-idle", "--master", "local[2]"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    for part in ("pipeline down", "destination rec", "test-service unavailable at test://outage:9",
                 "gave up after 4 retries", "(source partition down/gen[0])"):
        assert part in res.stderr, res.stderr
    assert "pipeline up" not in res.stderr, res.stderr
    assert (tmp_path / "down.bin.attempts").read_text() == "....."  # the first try and four retries
    _per_partition_in_order([r.key["id"] for r in read_records(tmp_path / "up.bin")], 3, 900)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_latency_at_16_partitions_on_two_cores_stays_under_a_second_or_so(kafka_broker, tmp_path):
    """16 topic partitions on local[2], canal-json → file, at 100 and 5,000 msg/s: each row's time
    from its send to its line in the output. Before (one task per partition per micro-batch, each
    working its 5 s budget) the p99 was 21 s at 100 msg/s and 12 s at 5,000 msg/s (35 s when
    issue 18 was filed; docs/benchmarks.md): this test fails there. The bound here is generous
    for a loaded machine; the target (1 s) is in the benchmark."""
    from helpers.latency import Phase, measure

    results = measure(kafka_broker, tmp_path, 16, [Phase(100, 5), Phase(5000, 4)])
    for r in results:
        print(r.row(16))
        assert r.seen == r.sent, r  # every row arrived
        assert r.p99 < 5.0, r


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_lake_of_a_thousand_tables_reads_through(tmp_path):
    """1,000 tables (CSV, no date directories), 3 rows each, through `cdcflow run --until-idle`:
    every row, each table's rows in their order."""
    from helpers.breadth import PIPELINE, rows_by_table, write_lake

    write_lake(tmp_path / "lake", 1000, 3000)
    path = write_pipeline(tmp_path / "p.yaml", PIPELINE.format(engine="", root=tmp_path / "lake",
                                                               out=tmp_path / "out.jsonl"))
    res = subprocess.run([PYTHON, "-m", "cdcflow.cli", "run", str(path), "--until-idle", "--master", "local[2]"],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    got = rows_by_table(tmp_path / "out.jsonl")
    assert len(got) == 1000
    assert all(seqs == [0, 1, 2] for seqs in got.values()), [t for t, s in got.items() if s != [0, 1, 2]][:5]
