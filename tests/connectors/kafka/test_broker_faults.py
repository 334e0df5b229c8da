"""Kafka broker faults: records are never lost and never acknowledged without being delivered.

Real faults on a real Tansu broker, one broker per test (never the session one):

- *frozen*: SIGSTOP of the broker process, SIGCONT later. Its memory survives, connections stay
  open and simply stop answering: what a network partition or a stalled broker looks like to a
  client.
- *replaced*: SIGKILL, then a fresh broker (memory storage: no topics, no producer ids, no group
  offsets) on the same port: "the broker was lost" as a client still connected to that address
  sees it.

Each test states the right behaviour; five of them found bugs (a broker outage turned into DLQ
entries, a synchronous offset commit blocking on a stalled broker, a vanished or recreated topic
read silently) and pass since those were fixed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from cdcflow.connectors.kafka.destination import KafkaDestinationError
from cdcflow.connectors.kafka.source import KafkaSourceError
from cdcflow.dev.broker import Broker
from cdcflow.errors import CdcflowError
from helpers.kafka import (
    ORDERS, ResolvedEvent, create_topic, make_destination, make_source, raw_messages, read_all, record, row, tso,
)
from helpers.kafka_pipeline import saved_offsets

REPO = Path(__file__).resolve().parents[3]


# -- broker faults -----------------------------------------------------------------------
class FaultyBroker:
    """A broker of this test only, with the two faults; ``close`` always leaves nothing running."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.generation = 0
        self.broker = self._start(None)
        self.servers = self.broker.bootstrap_servers
        self.port = int(self.servers.rsplit(":", 1)[1])

    def _start(self, port: int | None) -> Broker:
        self.generation += 1
        return Broker(port=port, log_path=self.log_dir / f"broker-{self.generation}.log").start()

    def freeze(self) -> None:
        os.kill(self.broker.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self.broker.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.broker.pid, signal.SIGCONT)

    @contextlib.contextmanager
    def frozen(self):
        self.freeze()
        try:
            yield
        finally:
            self.thaw()

    def thaw_after(self, seconds: float) -> threading.Timer:
        """SIGCONT from another thread: the test's own thread may be blocked in a client call."""
        timer = threading.Timer(seconds, self.thaw)
        timer.start()
        return timer

    def replace(self) -> None:
        """SIGKILL the broker and start an empty one on the same port."""
        os.kill(self.broker.pid, signal.SIGKILL)
        self.broker._proc.wait(10)
        self.broker.info, self.broker._proc = None, None
        self.broker = self._start(self.port)

    def close(self) -> None:
        self.thaw()
        self.broker.stop()


@pytest.fixture
def broker(tmp_path):
    b = FaultyBroker(tmp_path)
    try:
        yield b
    finally:
        b.close()


# -- helpers -------------------------------------------------------------------------------
def canal_uri(servers: str, topic: str) -> str:
    return f"kafka://{servers}/{topic}?protocol=canal-json&enable-tidb-extension=true"


def orders(ids) -> list:
    return [record(row(ORDERS, i, tso(1000 + i)), b"p%d" % i) for i in ids]


def canal_ids(servers: str, topic: str) -> Counter:
    """How often each row id is in ``topic`` (canal-json, one row per message)."""
    return Counter(int(json.loads(m.value())["data"][0]["id"]) for m in raw_messages(servers, topic, idle=0.7))


def fill(servers: str, topic: str, ids, resolved: bool = False) -> None:
    """Write rows ``ids`` to ``topic`` with the destination (which must succeed); ``resolved``: each
    chunk of 500 is followed by a watermark at its last commit ts (for consistency=transaction)."""
    d = make_destination({"uri": canal_uri(servers, topic), "partition-num": "1"}, id="fill")
    ids = list(ids)
    try:
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            recs = orders(chunk)
            if resolved:
                recs.append(record(ResolvedEvent(tso(1000 + chunk[-1]))))
            assert d.write(recs) is None
    finally:
        d.teardown()


def row_ids(records) -> list[int]:
    """Row ids of the row records (watermark records, which have no key, left out)."""
    return [r.key["id"] for r in records if isinstance(r.key, dict)]


# -- 1. destination, broker frozen during write --------------------------------------------
@pytest.mark.timeout(120)
def test_write_to_frozen_broker_raises_typed_error_then_rewrite_delivers(broker, unique_name):
    topic = unique_name
    create_topic(broker.servers, topic, 1)
    d = make_destination({"uri": canal_uri(broker.servers, topic), "partition-num": "1",
                          "delivery-timeout": "2s"})
    try:
        assert d.write(orders(range(10))) is None  # topic metadata cached, producer connected
        batch = orders(range(10, 50))
        with broker.frozen():
            started = time.monotonic()
            with pytest.raises(KafkaDestinationError) as err:
                d.write(batch)
            took = time.monotonic() - started
        message = str(err.value)
        assert broker.servers in message and "40 messages undelivered" in message, message
        assert 2 <= took < 10, took  # bounded by delivery-timeout, not by librdkafka's 5-minute default
        # the engine retries the batch (a new run from the saved position): the same records again
        assert d.write(batch) is None
    finally:
        d.teardown()
    got = canal_ids(broker.servers, topic)
    assert set(got) == set(range(50))
    # the frozen batch sat in the broker's socket buffer and usually lands after SIGCONT too: at least once
    assert all(got[i] == 1 for i in range(10)) and all(got[i] in (1, 2) for i in range(10, 50)), got


@pytest.mark.timeout(120)
def test_topic_lookup_on_frozen_broker_is_a_batch_error_not_a_record_error(broker, unique_name):
    """A broker outage is nobody's record's fault: it must fail the batch (the engine then does not
    save the position), not send the records to the DLQ, where the engine acknowledges them."""
    create_topic(broker.servers, unique_name, 1)
    d = make_destination({"uri": canal_uri(broker.servers, unique_name), "partition-num": "1",
                          "delivery-timeout": "2s"})
    try:
        with broker.frozen():  # nothing about the topic is cached yet
            started = time.monotonic()
            try:
                result = d.write(orders(range(1)))
            except KafkaDestinationError as e:
                result = e
            took = time.monotonic() - started
        assert isinstance(result, KafkaDestinationError), f"write returned per-record errors {result!r}"
        assert unique_name in str(result) and broker.servers in str(result), str(result)
        assert took < 8, took
    finally:
        d.teardown()


# -- 2. through the engine -------------------------------------------------------------------
def start_run(cfg: Path, state: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cdcflow.cli", "run", str(cfg), "--until-idle",
                             "--master", "local[1]", "--state-dir", str(state)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            start_new_session=True)


def saved_seq(path: Path) -> int:
    """Generator sequence number of the saved position (records 0..seq acknowledged); -1 if none."""
    pos = json.loads(path.read_text())["position"]
    return -1 if pos is None else int(base64.b64decode(pos).decode().split("/")[1])


def opencdc_ids(servers: str, topic: str) -> Counter:
    return Counter(json.loads(m.key())["id"] for m in raw_messages(servers, topic, idle=0.7))


#: a short outage budget: these runs must give up (the default budget waits up to 5 minutes)
SHORT_BUDGET = """  error-recovery.max-retries: "1"
  error-recovery.min-delay: 100ms
"""


def generator_to_kafka(servers: str, topic: str, n: int, engine: str = "", generator: str = "",
                       pipeline: str = "") -> str:
    """A pipeline file: ``n`` generated records → kafka (opencdc-json, delivery-timeout 2s)."""
    return f"""version: "2.2"
{engine}pipelines:
  - id: gen
    status: running
    connectors:
      - id: in
        type: source
        plugin: builtin:generator
        settings:
          recordCount: "{n}"
{generator}          format.type: structured
          format.options.n: int
      - id: out
        type: destination
        plugin: builtin:kafka
        settings:
          uri: kafka://{servers}/{topic}?protocol=opencdc-json
          delivery-timeout: 2s
{pipeline}"""


@pytest.mark.slow  # ~28 s: two pipeline runs and a freeze that outlasts delivery-timeout
@pytest.mark.timeout(300)
def test_engine_run_fails_on_frozen_broker_and_rerun_delivers_everything(broker, unique_name, tmp_path):
    topic, n = unique_name, 3000
    create_topic(broker.servers, topic, 1)
    cfg, state = tmp_path / "pipeline.yaml", tmp_path / "state"
    cfg.write_text(generator_to_kafka(broker.servers, topic, n, engine="engine:\n  batch-size: 100\n" + SHORT_BUDGET,
                                      generator='          rate: "1000"\n'))
    saved = state / "positions" / "gen" / "in" / "0.json"
    proc = start_run(cfg, state)
    try:
        deadline = time.monotonic() + 120
        while not saved.exists() or saved_seq(saved) < 200:  # mid-run: some batches written
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "no position saved"
            time.sleep(0.05)
        with broker.frozen():
            out, _ = proc.communicate(timeout=120)
            acknowledged = saved_seq(saved)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    assert proc.returncode == 1, out[-3000:]
    assert "destination out: kafka unavailable" in out and "undelivered" in out and broker.servers in out, out[-3000:]
    assert acknowledged < n - 1, "the run finished before the freeze: nothing was tested"

    # the saved position is not past any record missing from the topic
    got = opencdc_ids(broker.servers, topic)
    missing = sorted(set(range(acknowledged + 1)) - set(got))
    assert not missing, f"acknowledged through {acknowledged} but missing {missing[:10]}"

    rerun = start_run(cfg, state)
    out, _ = rerun.communicate(timeout=180)
    assert rerun.returncode == 0, out[-3000:]
    got = opencdc_ids(broker.servers, topic)
    assert set(got) == set(range(n)), f"lost {sorted(set(range(n)) - set(got))[:10]}"
    duplicates = sum(c - 1 for c in got.values())
    print(f"acknowledged through {acknowledged}; {duplicates} duplicates after the re-run")
    assert duplicates <= 2 * 100, duplicates  # the batch in flight (and the one in the socket buffer)


# -- 3. source, broker frozen while reading ------------------------------------------------------
@pytest.mark.parametrize("consistency", ["row", "transaction"])
@pytest.mark.timeout(120)
def test_source_survives_frozen_broker_without_loss_or_duplicates(broker, unique_name, consistency):
    topic = unique_name
    txn = consistency == "transaction"
    create_topic(broker.servers, topic, 1)
    fill(broker.servers, topic, range(1000), resolved=txn)
    src = make_source({"uri": canal_uri(broker.servers, topic), "read-from": "earliest", "group.id": topic,
                       "consistency": consistency})
    src.open(None, "*" if txn else f"{topic}:0")
    got: list = []
    try:
        def drain(until: int, within: float) -> None:
            deadline = time.monotonic() + within
            while len(row_ids(got)) < until and time.monotonic() < deadline:
                batch = src.read(200)
                if batch:
                    got.extend(batch)
                    src.ack([r.position for r in batch])

        drain(1000, 30)
        assert len(row_ids(got)) == 1000
        broker.freeze()
        timer = broker.thaw_after(4.0)
        frozen_until = time.monotonic() + 4.0
        while time.monotonic() < frozen_until:  # reading goes on against the frozen broker
            assert src.read(200) == []
        timer.join()
        fill(broker.servers, topic, range(1000, 2000), resolved=txn)  # new rows after the broker is back
        drain(2000, 30)
    finally:
        broker.thaw()
        src.teardown()
    assert row_ids(got) == list(range(2000))
    if not txn:
        offsets = [json.loads(r.position)[1] for r in got]
        assert offsets == sorted(offsets)


def open_and_read(broker, topic: str, n: int):
    """A row-mode source on ``topic`` after ``n`` canal-json rows were produced, and those rows read."""
    fill(broker.servers, topic, range(n))
    src = make_source({"uri": canal_uri(broker.servers, topic), "read-from": "earliest", "group.id": topic})
    src.open(None, f"{topic}:0")
    got: list = []
    deadline = time.monotonic() + 20
    while len(got) < n and time.monotonic() < deadline:
        got.extend(src.read(n))
    assert row_ids(got) == list(range(n))
    return src, got


@pytest.mark.slow  # ~15 s: the freeze has to outlast the bound
@pytest.mark.timeout(120)
def test_source_ack_on_frozen_broker_returns_in_bounded_time(broker, unique_name):
    topic = unique_name
    create_topic(broker.servers, topic, 1)
    src, got = open_and_read(broker, topic, 50)
    try:
        broker.freeze()
        timer = broker.thaw_after(15.0)
        started = time.monotonic()
        src.ack([got[-1].position])  # the group offset is a courtesy (the engine's state decides)
        took = time.monotonic() - started
        timer.join()
    finally:
        broker.thaw()
        src.teardown()
    assert took < 10, f"ack blocked {took:.1f}s on a frozen broker"


# -- 4. the broker is lost and replaced by an empty one ------------------------------------------
@pytest.mark.parametrize("after", ["topic-gone", pytest.param("topic-recreated", marks=pytest.mark.slow)])
@pytest.mark.timeout(120)
def test_source_on_replaced_broker_reports_the_lost_topic(broker, unique_name, after):
    topic = unique_name
    create_topic(broker.servers, topic, 1)
    src, got = open_and_read(broker, topic, 300)
    try:
        src.ack([got[-1].position])
        broker.replace()
        if after == "topic-recreated":  # what a TiCDC changefeed does on the new cluster: offsets restart at 0
            create_topic(broker.servers, topic, 1)
            fill(broker.servers, topic, range(300, 320))
        error = None
        late: list = []
        deadline = time.monotonic() + 10
        while error is None and time.monotonic() < deadline:
            try:
                late.extend(src.read(100))
            except KafkaSourceError as e:
                error = e
    finally:
        src.teardown()
    # silently reading nothing is the bug; reading the recreated topic's rows 300..319 from its offset 0
    # would be a silent jump back, also wrong: the saved position (offset 300) no longer exists
    assert not late, row_ids(late)
    assert error is not None, "no error within 10 s: the source looks idle forever"
    assert error.topic == topic and error.partition == 0, str(error)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_destination_on_replaced_broker_fails_typed_and_a_new_one_delivers(broker, unique_name):
    """The idempotent producer cannot continue on a broker that never saw its producer id: its
    batches stay undelivered. That must be the typed error (so nothing is acknowledged); a fresh
    destination (what the next run opens) delivers them. Slow: the stuck producer's teardown
    waits its 10 s flush."""
    topic = unique_name
    uri = canal_uri(broker.servers, topic)
    d = make_destination({"uri": uri, "partition-num": "1", "delivery-timeout": "3s"})
    try:
        assert d.write(orders(range(10))) is None  # topic created by the destination
        broker.replace()
        create_topic(broker.servers, topic, 1)
        with pytest.raises(KafkaDestinationError, match="undelivered"):
            d.write(orders(range(10, 20)))
    finally:
        d.teardown()
    fresh = make_destination({"uri": uri, "partition-num": "1", "delivery-timeout": "3s"})
    try:
        assert fresh.write(orders(range(10, 20))) is None
    finally:
        fresh.teardown()
    got = canal_ids(broker.servers, topic)
    assert set(got) == set(range(10, 20)), got  # rows 0..9 died with the old broker's memory


@pytest.mark.slow  # ~11 s: a pipeline run against a frozen broker
@pytest.mark.timeout(300)
def test_engine_does_not_dead_letter_records_because_the_broker_is_frozen(broker, unique_name, tmp_path):
    topic, n = unique_name, 3
    create_topic(broker.servers, topic, 1)
    cfg, state, dlq = tmp_path / "pipeline.yaml", tmp_path / "state", tmp_path / "dlq.jsonl"
    cfg.write_text(generator_to_kafka(broker.servers, topic, n, engine="engine:\n" + SHORT_BUDGET, pipeline=(
        f"    dead-letter-queue:\n      plugin: builtin:file\n      settings:\n        path: {dlq}\n"
        "      window-size: 0\n")))
    with broker.frozen():  # the broker stalls before the first write: nothing is cached
        run = start_run(cfg, state)
        try:
            out, _ = run.communicate(timeout=200)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait(30)
    dead = dlq.read_bytes().splitlines() if dlq.exists() else []
    assert not dead, f"{len(dead)} records dead-lettered for a broker outage: {dead[0][:300]!r}"
    assert run.returncode == 1 and "destination out: kafka unavailable" in out, out[-3000:]
    rerun = start_run(cfg, state)
    out, _ = rerun.communicate(timeout=180)
    assert rerun.returncode == 0, out[-3000:]
    assert set(opencdc_ids(broker.servers, topic)) == set(range(n))


@pytest.mark.timeout(120)
def test_source_restarted_on_recreated_topic_does_not_skip_its_first_rows(broker, unique_name):
    topic = unique_name
    create_topic(broker.servers, topic, 1)
    fill(broker.servers, topic, range(300))
    uri = canal_uri(broker.servers, topic)
    src = make_source({"uri": uri, "read-from": "earliest", "group.id": topic})
    try:
        saved = read_all(src, f"{topic}:0", idle=0.7)[-1].position  # what the engine saved
    finally:
        src.teardown()
    broker.replace()  # the cluster is lost; the changefeed is recreated on the new one
    create_topic(broker.servers, topic, 1)
    fill(broker.servers, topic, range(1000, 1320))
    src = make_source({"uri": uri, "read-from": "earliest", "group.id": topic})
    try:
        got = read_all(src, f"{topic}:0", position=saved, idle=1.0)
    except CdcflowError as e:  # refusing to guess is right too, if it says what and where
        assert topic in str(e), str(e)
        return
    finally:
        src.teardown()
    assert row_ids(got) == list(range(1000, 1320)), f"read only {row_ids(got)[:3]}..: rows 1000..1299 skipped"


# -- 5. through the engine: a source whose broker dies, or is not there ---------------------------
def kafka_to_file(servers: str, topic: str, out: Path, *, pipeline_id: str = "k2f", extra: str = "") -> str:
    """A pipeline file: ``topic`` (canal-json) → file, broker-timeout 3s, batches of 100."""
    return f"""version: "2.2"
engine:
  batch-size: 100
{SHORT_BUDGET}pipelines:
  - id: {pipeline_id}
    status: running
    connectors:
      - id: in
        type: source
        plugin: builtin:kafka
        settings:
          uri: {canal_uri(servers, topic)}
          group.id: {topic}
          broker-timeout: 3s
{extra}      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {out}
"""


@pytest.mark.slow  # ~25 s: a Spark run reading until the broker is killed under it
@pytest.mark.timeout(300)
def test_run_whose_broker_dies_fails_instead_of_finishing(broker, unique_name, tmp_path):
    """Before: exit 0 and "finished" with a partition never read (an unreachable broker looked
    idle). Now the source asks the broker before it calls silence idleness: the run fails naming
    the source and the servers, and no saved position is past a row missing from the output.
    The broker keeps its data in memory, so a killed one cannot be resumed from: the test stops
    at what the run must not have claimed. The consumers' prefetch is kept small so that rows are
    still on the broker when it dies (one task reads both partitions at once: with librdkafka's
    default queue they would have fetched the whole topic within a second)."""
    topic, n = unique_name, 40_000
    create_topic(broker.servers, topic, 2)
    d = make_destination({"uri": canal_uri(broker.servers, topic), "partition-num": "2",
                          "partition": "index-value"}, id="fill")
    try:
        for start in range(0, n, 500):
            assert d.write(orders(range(start, start + 500))) is None
    finally:
        d.teardown()
    where = {(m.partition(), m.offset()): int(json.loads(m.value())["data"][0]["id"])
             for m in raw_messages(broker.servers, topic, idle=0.7)}
    assert len(where) == n
    cfg, state, out = tmp_path / "pipeline.yaml", tmp_path / "state", tmp_path / "out.jsonl"
    cfg.write_text(kafka_to_file(broker.servers, topic, out, extra='          kafka.queued.max.messages.kbytes: "256"\n'
                                 '          kafka.fetch.message.max.bytes: "65536"\n'))
    proc = start_run(cfg, state)
    try:
        deadline = time.monotonic() + 120
        while not out.exists() or sum(1 for _ in open(out, "rb")) < 1000:
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "nothing read"
            time.sleep(0.02)
        os.kill(broker.broker.pid, signal.SIGKILL)  # no new broker: the data is gone with it
        output, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    written = [json.loads(x)["key"]["id"] for x in out.read_bytes().splitlines()]
    assert len(written) < n, "the run read everything before the broker died: nothing was tested"
    assert proc.returncode != 0, output[-3000:]
    assert "finished" not in output.splitlines()[-1:], output[-3000:]
    assert "source in: kafka unavailable" in output and broker.servers in output, output[-3000:]
    assert "k2f" in output and "in" in output, output[-3000:]
    written = set(written)
    for part, next_offset in saved_offsets(state, "k2f").items():
        missing = [where[(part, o)] for o in range(next_offset) if where[(part, o)] not in written]
        assert not missing, f"partition {part} saved at {next_offset} but rows {missing[:5]} are not in the output"


@pytest.mark.timeout(120)
def test_run_on_a_broker_that_is_down_is_one_error_naming_source_and_servers(tmp_path):
    """Before: ~190 librdkafka lines on stderr, then a raw ``cimpl.KafkaException`` traceback naming
    neither pipeline nor connector. Now: one error naming the connector and the servers within
    broker-timeout; librdkafka's lines go through cdcflow's logging, each distinct line once."""
    from cdcflow.dev.process import free_port

    servers = f"127.0.0.1:{free_port()}"  # nobody listens there
    cfg, state, out = tmp_path / "pipeline.yaml", tmp_path / "state", tmp_path / "out.jsonl"
    cfg.write_text(kafka_to_file(servers, "orders", out, pipeline_id="nobroker"))
    started = time.monotonic()
    run = start_run(cfg, state)
    output, _ = run.communicate(timeout=100)
    took = time.monotonic() - started
    assert run.returncode != 0, output[-3000:]
    assert "Traceback" not in output and "cimpl" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("cdcflow:")]
    assert len(errors) == 1, output[-3000:]
    assert "kafka source in" in errors[0] and servers in errors[0] and "broker-timeout 3s" in errors[0], errors
    librdkafka = [line for line in output.splitlines() if "librdkafka" in line or "rdkafka#" in line]
    assert len(librdkafka) <= 10, "\n".join(librdkafka[:20])  # distinct lines only (before: ~190)
    assert took < 90, took  # Spark start-up under load included; broker-timeout is 3s


@pytest.mark.timeout(120)
def test_run_on_a_broker_that_is_down_names_the_pipeline(tmp_path):
    """The connector does not know its pipeline: the engine adds it to an error raised while
    planning the partitions (the rest of this journey is the test above)."""
    from cdcflow.dev.process import free_port

    servers = f"127.0.0.1:{free_port()}"
    cfg, state, out = tmp_path / "pipeline.yaml", tmp_path / "state", tmp_path / "out.jsonl"
    cfg.write_text(kafka_to_file(servers, "orders", out, pipeline_id="nobroker"))
    run = start_run(cfg, state)
    output, _ = run.communicate(timeout=100)
    assert run.returncode != 0
    errors = [line for line in output.splitlines() if line.startswith("cdcflow:")]
    assert errors and "nobroker" in errors[-1] and servers in errors[-1], output[-3000:]
