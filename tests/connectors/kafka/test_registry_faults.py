"""A schema registry outage through `cdcflow run`: never a record's fault.

Real faults on a registry process of the test's own (the built-in one, `cdcflow.dev.registry`):
SIGKILL (connection refused), then a restart on the same port over the same data directory;
SIGSTOP (connections accepted, nothing answers: a timeout), then SIGCONT. Before the fix the
destination turned "cannot reach the schema registry" into each record's codec error: with
`window-size: 0` every row of the outage went to the DLQ, was acknowledged, and a re-run did not
deliver it. Now the batch fails (nothing acknowledged, nothing dead-lettered), the run stops
naming the registry, and a re-run after the registry is back delivers every row.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.kafka_pipeline import saved_offsets
from helpers.kafka_pipeline import OPTIONS, REPO, lines, orders, pipeline_file, produce, start_run

from cdcflow.connectors.ticdc.avro import AvroDecoder
from cdcflow.connectors.ticdc.events import RowChange
from cdcflow.dev.registry import RegistryService
from cdcflow.schemaregistry.client import RegistryClient
from cdcflow.connectors.ticdc.tidb import Column, TableSchema
from helpers.kafka import create_topic, raw_messages, tso

ITEMS = TableSchema("shop", "items", (
    Column("sku", "BIGINT", nullable=False, primary_key=True, handle_key=True),
    Column("label", "VARCHAR", length=32),
))


def items(ids) -> list[RowChange]:
    return [RowChange(ITEMS, "insert", tso(50_000 + i), {"sku": i, "label": f"l{i}"}) for i in ids]


class Registry:
    """The built-in registry in its own process, killable and restartable on the same port and data."""

    def __init__(self, tmp: Path):
        self.data, self.tmp, self.starts = tmp / "registry-data", tmp, 0
        self.service = self._start(None)
        self.url = self.service.url
        self.port = int(self.url.rsplit(":", 1)[1])

    def _start(self, port: int | None) -> RegistryService:
        self.starts += 1
        return RegistryService(self.data, port=port, log_path=self.tmp / f"registry-{self.starts}.log").start()

    def kill(self) -> None:
        os.kill(self.service.pid, signal.SIGKILL)
        self.service._proc.wait(10)
        self.service.info, self.service._proc = None, None

    def restart(self) -> None:
        self.service = self._start(self.port)

    def pause(self) -> None:
        os.kill(self.service.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.service.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.service.pid, signal.SIGCONT)

    def close(self) -> None:
        self.resume()
        self.service.stop()


@pytest.fixture
def registry(tmp_path):
    r = Registry(tmp_path)
    try:
        yield r
    finally:
        r.close()


def saved_offset(state: Path, pipeline: str) -> int:
    """Next offset of the single source partition's saved position (-1 when none)."""
    return saved_offsets(state, pipeline).get(0, -1)


#: a short outage budget: these runs must give up (the default budget waits up to 5 minutes)
SHORT_BUDGET = """  error-recovery.max-retries: "1"
  error-recovery.min-delay: 100ms
"""


def kafka_to_kafka(servers: str, upstream: str, downstream: str, src: str, out_rule: str, dlq: Path,
                   budget: str = SHORT_BUDGET) -> str:
    return f"""version: "2.2"
engine:
  batch-size: 100
{budget}pipelines:
  - id: reg
    status: running
    connectors:
      - id: in
        type: source
        plugin: builtin:kafka
        settings:
          uri: kafka://{servers}/{src}?protocol=avro&enable-tidb-extension=true
          schema-registry: {upstream}
          group.id: {src}
      - id: out
        type: destination
        plugin: builtin:kafka
        settings:
          uri: kafka://{servers}/{out_rule}?protocol=avro&enable-tidb-extension=true&partition-num=1
          schema-registry: {downstream}
          schema-registry-timeout: 2s
    dead-letter-queue:
      plugin: builtin:file
      settings:
        path: {dlq}
      window-size: 0
"""


def start_live(cfg: Path, state: Path) -> subprocess.Popen:
    """`cdcflow run` without --until-idle: it keeps reading until it fails (or is killed)."""
    return subprocess.Popen([sys.executable, "-m", "cdcflow.cli", "run", str(cfg), "--master", "local[1]",
                             "--state-dir", str(state)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=REPO, start_new_session=True)


def keys(servers: str, registry: str, topic: str) -> list:
    dec = AvroDecoder(OPTIONS, RegistryClient(registry))
    return [next(iter(dec.decode(m.key(), m.value()).row.values())) for m in raw_messages(servers, topic, idle=0.5)]


@pytest.mark.slow  # ~60 s: a live run, the outage, a re-run
@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault", ["killed", "paused"])
def test_registry_outage_under_the_destination_fails_the_run_and_a_rerun_delivers_all(
        kafka_broker, schema_registry, registry, unique_name, tmp_path, fault):
    src, rule = f"{unique_name}-in", f"{unique_name}-out-{{schema}}-{{table}}"
    upstream = RegistryClient(schema_registry)
    for part in ("key", "value"):  # the input topic carries two tables (downstream they get a topic each)
        upstream.set_compatibility("NONE", f"{src}-{part}")
    create_topic(kafka_broker, src, 1)
    produce(kafka_broker, schema_registry, src, [(0, ev) for ev in orders(range(200))])
    dlq, state = tmp_path / "dlq.jsonl", tmp_path / "state"
    cfg = pipeline_file(tmp_path, kafka_to_kafka(kafka_broker, schema_registry, registry.url, src, rule, dlq))
    proc = start_live(cfg, state)
    try:
        deadline = time.monotonic() + 150
        while saved_offset(state, "reg") < 200:  # the orders are written and acknowledged
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "orders not written"
            time.sleep(0.05)
        if fault == "killed":
            registry.kill()
        else:
            registry.pause()
        # a new table: the destination must register its schema now, with the registry gone
        produce(kafka_broker, schema_registry, src, [(0, ev) for ev in items(range(300))])
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    dead = lines(dlq)
    assert not dead, f"{len(dead)} records dead-lettered for a registry outage: {dead[0]}"
    assert proc.returncode != 0, output[-3000:]
    assert "destination out: schema-registry unavailable" in output and registry.url in output, output[-3000:]
    assert "reg" in output and "out" in output, output[-3000:]
    assert saved_offset(state, "reg") <= 200, "items acknowledged although none was written"

    if fault == "killed":
        registry.restart()  # same port, same data directory: ids survive
    else:
        registry.resume()
    rerun = start_run(cfg, state)
    output, _ = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, output[-3000:]
    assert not lines(dlq)
    assert sorted(set(keys(kafka_broker, registry.url, f"{unique_name}-out-shop-orders"))) == list(range(200))
    assert sorted(set(keys(kafka_broker, registry.url, f"{unique_name}-out-shop-items"))) == list(range(300))


@pytest.mark.slow  # ~40 s: two runs
@pytest.mark.timeout(600)
def test_registry_killed_under_the_source_fails_the_run_and_a_rerun_reads_all(
        kafka_broker, registry, unique_name, tmp_path):
    """The source's decode needs the registry for every schema id it has not seen: unreachable,
    it is an outage of the source (before: the message's 'unknown schema' error)."""
    src = f"{unique_name}-in"
    create_topic(kafka_broker, src, 1)
    produce(kafka_broker, registry.url, src, [(0, ev) for ev in orders(range(300))])
    registry.kill()
    out, state = tmp_path / "out.jsonl", tmp_path / "state"
    cfg = pipeline_file(tmp_path, f"""version: "2.2"
engine:
{SHORT_BUDGET}pipelines:
  - id: regsrc
    status: running
    connectors:
      - id: in
        type: source
        plugin: builtin:kafka
        settings:
          uri: kafka://{kafka_broker}/{src}?protocol=avro&enable-tidb-extension=true
          schema-registry: {registry.url}
          schema-registry-timeout: 2s
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {out}
""")
    run = start_run(cfg, state)
    output, _ = run.communicate(timeout=300)
    assert run.returncode != 0, output[-3000:]
    assert "source in: schema-registry unavailable" in output and registry.url in output and "regsrc" in output, output[-3000:]
    assert "cannot decode" not in output, output[-3000:]  # not the message's fault
    assert not lines(out) and saved_offset(state, "regsrc") <= 0
    registry.restart()
    rerun = start_run(cfg, state)
    output, _ = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, output[-3000:]
    assert sorted(r["key"]["id"] for r in lines(out)) == list(range(300))


@pytest.mark.slow  # ~40 s: a live run through an outage shorter than its budget
@pytest.mark.timeout(600)
def test_registry_down_for_a_while_is_ridden_out_without_loss_or_dlq(
        kafka_broker, schema_registry, registry, unique_name, tmp_path):
    """The outage operators actually have: the registry stops answering for a few seconds (SIGSTOP)
    and comes back. The batch that needs it fails and is retried with backoff inside the
    ``error-recovery`` budget; the run goes on, nothing goes to the DLQ and every row arrives."""
    src, rule = f"{unique_name}-in", f"{unique_name}-out-{{schema}}-{{table}}"
    upstream = RegistryClient(schema_registry)
    for part in ("key", "value"):
        upstream.set_compatibility("NONE", f"{src}-{part}")
    create_topic(kafka_broker, src, 1)
    produce(kafka_broker, schema_registry, src, [(0, ev) for ev in orders(range(200))])
    dlq, state = tmp_path / "dlq.jsonl", tmp_path / "state"
    budget = """  error-recovery.min-delay: 500ms
  error-recovery.max-delay: 2s
  error-recovery.max-elapsed: 2m
"""
    cfg = pipeline_file(tmp_path, kafka_to_kafka(kafka_broker, schema_registry, registry.url, src, rule, dlq,
                                                 budget=budget))
    proc = start_live(cfg, state)
    try:
        deadline = time.monotonic() + 150
        while saved_offset(state, "reg") < 200:
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "orders not written"
            time.sleep(0.05)
        registry.pause()
        produce(kafka_broker, schema_registry, src, [(0, ev) for ev in items(range(300))])
        time.sleep(8)  # several failed attempts (schema-registry-timeout 2s each), then the registry is back
        assert proc.poll() is None, "the run gave up inside its budget: " + proc.stdout.read()[-3000:]
        registry.resume()
        deadline = time.monotonic() + 150
        while saved_offset(state, "reg") < 500:
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "items not written after the registry came back"
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(60)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    output = proc.stdout.read()
    assert not lines(dlq), "records dead-lettered for a registry outage"
    assert "schema-registry unavailable" in output and "retry 1 in" in output, output[-3000:]  # the wait was said
    assert sorted(set(keys(kafka_broker, registry.url, f"{unique_name}-out-shop-orders"))) == list(range(200))
    assert sorted(set(keys(kafka_broker, registry.url, f"{unique_name}-out-shop-items"))) == list(range(300))
