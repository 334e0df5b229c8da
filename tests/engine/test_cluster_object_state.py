"""Issue 18's cluster acceptance: a standalone master + 2 workers started here, each worker with its
own private temporary, local and working directories, so no executor sees the driver's files; the
state (positions, run lease, schemas) lives on moto's S3 server. A kafka (Tansu, canal-json) →
storage (on S3) pipeline completes; the driver is killed (SIGKILL) and a new run resumes with
nothing lost; a worker is killed mid-run (worker JVM, executor JVM and its Python workers, SIGKILL)
and the run still completes with nothing lost: every produced row in the output at least once, and
each Kafka partition's rows first appear in the order they were produced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict

import pytest

from cdcflow.engine.state import StateDir
from cdcflow.schemas import ObjectSchemaStore
from helpers.engine import REPO
from helpers.kafka import ORDERS, create_topic, make_destination, raw_messages, record, row, tso
from helpers.spark_cluster import StandaloneCluster
from helpers.storage import read_all, s3_lake

pytestmark = [pytest.mark.slow, pytest.mark.spark]

PARTITIONS = 2


def produce(servers: str, topic: str, ids) -> None:
    """Rows of ``ORDERS`` as canal-json messages, spread over the partitions by primary key."""
    d = make_destination({"uri": f"kafka://{servers}/{topic}?protocol=canal-json&enable-tidb-extension=true",
                          "partition": "index-value", "partition-num": str(PARTITIONS)}, id="fill")
    ids = list(ids)
    try:
        for start in range(0, len(ids), 1000):
            assert d.write([record(row(ORDERS, i, tso(1000 + i)), b"p%d" % i)
                            for i in ids[start:start + 1000]]) is None
    finally:
        d.teardown()


PIPELINE = """\
version: "2.2"
engine:
  batch-size: 500
  micro-batch-duration: 2s
  state-dir: {state}
  state-options:
{options}
pipelines:
  - id: cluster
    connectors:
      - id: in
        type: source
        plugin: builtin:kafka
        settings:
          uri: kafka://{servers}/{topic}?protocol=canal-json&enable-tidb-extension=true
          group.id: {topic}
          read-from: earliest
      - id: lake
        type: destination
        plugin: storage
        settings:
          uri: {lake}
          protocol: canal-json
          enable-tidb-extension: "true"
          date-separator: none
          flush-interval: 2s
{lake_settings}
"""


def start_run(path, url: str, log) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cdcflow.cli", "run", str(path), "--until-idle", "--master", url,
         "--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1",
         "--conf", "spark.cores.max=2"],
        stdout=log, stderr=subprocess.STDOUT, text=True, cwd=REPO, start_new_session=True)


def saved_offsets(state: StateDir) -> list[int]:
    """The next offset each partition's saved position continues at (-1: none saved)."""
    import base64
    import urllib.parse

    out = [-1] * PARTITIONS
    for name, _ in state.store.listdir("positions/cluster/in"):
        doc = json.loads(state.store.read(f"positions/cluster/in/{name}"))
        if doc["position"] is not None:
            part = int(urllib.parse.unquote(name[:-5]).rsplit(":", 1)[1])
            out[part] = json.loads(base64.b64decode(doc["position"]))[1]
    return out


def wait_until(check, proc: subprocess.Popen, log_path, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before {what}: {log_path.read_text()[-3000:]}")
        time.sleep(0.1)
    pytest.fail(f"no {what} within {timeout}s: {log_path.read_text()[-3000:]}")


def finish(proc: subprocess.Popen, log_path, timeout: float = 240) -> str:
    proc.wait(timeout)
    text = log_path.read_text()
    assert proc.returncode == 0, text[-4000:]
    return text


def test_cluster_without_shared_filesystem_survives_driver_and_worker_kills(
        tmp_path, request, kafka_broker, unique_name):
    started = time.monotonic()
    lake_uri, s3 = s3_lake(request)
    state_uri = lake_uri.replace("/lake", "/state")
    topic = unique_name
    create_topic(kafka_broker, topic, PARTITIONS)
    path = tmp_path / "cluster.yaml"
    path.write_text(PIPELINE.format(
        state=state_uri, servers=kafka_broker, topic=topic, lake=lake_uri,
        options="\n".join(f'    {k}: "{v}"' for k, v in s3.items()),
        lake_settings="\n".join(f'          {k}: "{v}"' for k, v in s3.items())))
    state = StateDir(state_uri, s3)
    cluster = StandaloneCluster(tmp_path / "cluster")
    (tmp_path / "cluster").mkdir()
    procs: list[subprocess.Popen] = []
    try:
        url = cluster.start_master()
        cluster.add_worker(cores=1, memory="1g")
        cluster.add_worker(cores=1, memory="1g")

        # 1. a run killed mid-way (SIGKILL the driver), then resumed by a new run
        first_ids = range(1, 10_001)
        produce(kafka_broker, topic, first_ids)
        log1 = tmp_path / "run1.log"
        with open(log1, "w") as f:
            procs.append(run1 := start_run(path, url, f))
        wait_until(lambda: max(saved_offsets(state)) > 0, run1, log1, 120, "a saved position")
        os.killpg(run1.pid, signal.SIGKILL)
        run1.wait(30)
        killed_at = saved_offsets(state)
        assert sum(max(o, 0) for o in killed_at) < len(first_ids), "killed too late: nothing left to resume"
        cluster.wait_no_executors()
        log2 = tmp_path / "run2.log"
        with open(log2, "w") as f:
            procs.append(run2 := start_run(path, url, f))
        out2 = finish(run2, log2)
        assert "took over the expired lease" in out2  # the killed driver's lease, its pid gone

        # 2. a worker killed mid-run: its partitions go on elsewhere from their saved positions
        second_ids = range(10_001, 40_001)
        produce(kafka_broker, topic, second_ids)
        before = saved_offsets(state)
        log3 = tmp_path / "run3.log"
        with open(log3, "w") as f:
            procs.append(run3 := start_run(path, url, f))
        wait_until(lambda: all(cluster.executors(i) for i in (0, 1)) and saved_offsets(state) != before,
                   run3, log3, 120, "progress on both executors")
        victims = cluster.kill_worker(0)
        assert len(victims) >= 3  # worker JVM, executor JVM, Python daemon and workers (gone by themselves)
        out3 = finish(run3, log3)
        assert "Lost executor" in out3 or "ExecutorLost" in out3, out3[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(30)
        cluster.stop()

    # the executors kept state and schemas on the object store only: nothing of it on local disks
    assert not [p for p in tmp_path.rglob("*") if p.name in ("positions", "schemas.sqlite", "run.lock", ".cdcflow")]
    assert ObjectSchemaStore(state_uri + "/schemas", s3).subjects()  # registered by the executors' tasks

    # every produced row at least once; per Kafka partition, rows first appear in produced order
    partition_of = {}
    for m in raw_messages(kafka_broker, topic, idle=0.7):
        partition_of[int(json.loads(m.value())["data"][0]["id"])] = m.partition()
    produced = list(first_ids) + list(second_ids)
    assert sorted(partition_of) == produced
    rows = read_all({"uri": lake_uri, "protocol": "canal-json", "enable-tidb-extension": "true",
                     "date-separator": "none", **s3})
    got = [int(r.key["id"]) for _, r in rows]
    assert set(got) == set(produced), f"lost: {sorted(set(produced) - set(got))[:20]}"
    first_seen: dict[int, list[int]] = defaultdict(list)
    seen: set[int] = set()
    for i in got:
        if i not in seen:
            seen.add(i)
            first_seen[partition_of[i]].append(i)
    for part, order in first_seen.items():
        assert order == sorted(order), f"partition {part} out of order"
    print(f"cluster test: {time.monotonic() - started:.0f}s, {len(got)} rows read for {len(produced)} produced")
