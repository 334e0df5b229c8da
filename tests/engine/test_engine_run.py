"""The engine end to end on a shared local[2] session: order, DLQ windows, stop, metrics."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections import defaultdict

import pytest

from cdcflow.engine.plan import Limits
from cdcflow.engine.runner import run_files
from cdcflow.engine.state import StateDir
from cdcflow.record import (
    META_DLQ_NACK_ERROR,
    META_DLQ_NACK_NODE_ID,
    META_SOURCE_CONNECTOR_ID,
    META_SOURCE_PLUGIN_NAME,
    META_SOURCE_PLUGIN_VERSION,
    Operation,
)

from helpers.engine import write_pipeline

pytestmark = pytest.mark.spark

GEN_SETTINGS = {
    "format.type": "structured",
    "format.options.id": "int",
    "format.options.name": "string",
    "operations": "create,update,delete",
    "seed": "7",
}


def generator_yaml(count: int, partitions: int, **extra: str) -> str:
    settings = {**GEN_SETTINGS, "recordCount": str(count), "partitions": str(partitions), **extra}
    return "\n".join(f"          {k}: \"{v}\"" for k, v in settings.items())


def expected_output(count: int, partitions: int) -> dict[str, list]:
    """What the pipeline must write, computed without the engine: the generator read
    directly, then field.set + filter applied by hand."""
    from cdcflow.registry import load_registry

    info = load_registry().connector("builtin:generator")
    settings = info.validate("source", {**GEN_SETTINGS, "recordCount": str(count), "partitions": str(partitions)})
    out: dict[str, list] = {}
    for p in range(partitions):
        src = info.new_source()
        src.configure(settings)
        src.open(None, str(p))
        recs = []
        while (batch := src.read(1000)) is not None:
            recs.extend(batch)
        src.teardown()
        kept = []
        for r in recs:
            r.metadata[META_SOURCE_CONNECTOR_ID] = "gen"
            r.metadata[META_SOURCE_PLUGIN_NAME] = info.name
            r.metadata[META_SOURCE_PLUGIN_VERSION] = info.version
            r.metadata["x"] = f"seen {r.operation.text}"
            if r.operation != Operation.DELETE:
                kept.append(r)
        out[str(p)] = kept
    return out


def by_partition(records) -> dict[str, list]:
    out: dict[str, list] = defaultdict(list)
    for r in records:
        out[r.position.decode().split("/")[0]].append(r)
    return dict(out)


PIPELINE = """\
version: "2.2"
engine:
  batch-size: {batch}
pipelines:
  - id: p1
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
{gen}
      - id: rec
        type: destination
        plugin: test-recorder
        settings:
          path: ${{CDCFLOW_FILE_DIR}}/out.bin
          reject: "{reject}"
    processors:
      - id: tag
        plugin: field.set
        settings:
          field: .Metadata["x"]
          value: "seen {{{{ Operation }}}}"
      - id: drop-deletes
        plugin: filter
        condition: Operation == "delete"
    dead-letter-queue:
      plugin: {dlq_plugin}
      settings:
{dlq_settings}
      window-size: {window}
      window-nack-threshold: {threshold}
"""


def pipeline(tmp_path, *, count=3000, partitions=2, batch=250, reject="", dlq_plugin="test-recorder",
             dlq_settings=None, window=1, threshold=0, gen_extra=None):
    dlq_settings = dlq_settings if dlq_settings is not None else {"path": "${CDCFLOW_FILE_DIR}/dlq.bin"}
    text = PIPELINE.format(
        batch=batch, gen=generator_yaml(count, partitions, **(gen_extra or {})), reject=reject,
        dlq_plugin=dlq_plugin, window=window, threshold=threshold,
        dlq_settings="\n".join(f"        {k}: \"{v}\"" for k, v in dlq_settings.items()) or "        {}",
    )
    return write_pipeline(tmp_path / "pipeline.yaml", text)


SMALL = Limits(task_seconds=0.3)  # several micro-batches even for small inputs


def test_output_equals_expected_records_in_order_per_partition(spark, test_plugins, tmp_path, capsys):
    path = pipeline(tmp_path, count=3000, partitions=2, batch=100)
    outcome = run_files([str(path)], until_idle=True, limits=SMALL, progress=False)
    assert outcome.exit_code == 0, outcome.problems or outcome.failures
    got = by_partition(test_plugins.read_records(tmp_path / "out.bin"))
    want = expected_output(3000, 2)
    assert set(got) == {"0", "1"}
    for p in want:
        assert got[p] == want[p], f"partition {p} differs"
    assert outcome.totals.total_read() == 3000
    assert outcome.totals.total_written() == sum(len(v) for v in want.values())
    assert sum(outcome.totals.filtered.values()) == 3000 - outcome.totals.total_written()
    state = StateDir(tmp_path / ".cdcflow")
    assert state.load("p1", "gen", "0").position == b"0/1499"
    assert state.load("p1", "gen", "1").ended
    text = capsys.readouterr().out
    assert "records read" in text and str(tmp_path / "out.bin") in text

    # running again resumes at the end: nothing new is written
    again = run_files([str(path)], until_idle=True, limits=SMALL, progress=False)
    assert again.exit_code == 0 and again.totals.total_read() == 0
    assert len(test_plugins.read_records(tmp_path / "out.bin")) == outcome.totals.total_written()
    assert "nothing new to read" in capsys.readouterr().out


def test_destinations_are_stopped_with_their_last_position_before_teardown(spark, test_plugins, tmp_path):
    """Conduit calls a destination's Stop with the last position it got, then Teardown: at the
    end of a run each open destination gets ``stop(last_position)`` before ``teardown`` (the
    DLQ, which wrote nothing, ``stop(None)``)."""
    path = pipeline(tmp_path, count=600, partitions=1, batch=100)
    outcome = run_files([str(path)], until_idle=True, limits=SMALL, progress=False)
    assert outcome.exit_code == 0, outcome.problems or outcome.failures
    last = expected_output(600, 1)["0"][-1].position
    out = (tmp_path / "out.bin.lifecycle").read_bytes().splitlines()
    dlq = (tmp_path / "dlq.bin.lifecycle").read_bytes().splitlines()
    # one stop and one teardown per Python worker that opened the destination
    assert out and out[0::2] and all(line == b"teardown" for line in out[1::2]) and len(out) % 2 == 0
    stops = [line.split(b" ", 1)[1] for line in out[0::2]]
    assert all(line.startswith(b"stop ") for line in out[0::2]) and last in stops
    assert set(dlq[0::2]) == {b"stop -"} and set(dlq[1::2]) == {b"teardown"} and len(dlq) == len(out)


def test_rejected_records_go_to_dlq_until_the_window_threshold_stops(spark, test_plugins, tmp_path):
    # one partition, batches of 10: ids 5, 17, 40, 41 fit the window (10 records, at most 2 nacks);
    # 42 is the third nack within 10 records → stop; nothing from 42 on is acknowledged
    path = pipeline(tmp_path, count=200, partitions=1, batch=10, reject="5,17,40,41,42,43",
                    window=10, threshold=2, gen_extra={"operations": "create"})
    outcome = run_files([str(path)], until_idle=True, limits=SMALL, progress=False)
    assert outcome.exit_code == 1
    assert "window-nack-threshold 2" in outcome.failures[0] and "rejected id 42" in outcome.failures[0]
    dlq = test_plugins.read_records(tmp_path / "dlq.bin")
    assert [r.key["id"] for r in dlq] == [5, 17, 40, 41]
    assert all(r.metadata[META_DLQ_NACK_NODE_ID] == "rec" for r in dlq)
    assert [r.metadata[META_DLQ_NACK_ERROR] for r in dlq] == [f"rejected id {i}" for i in (5, 17, 40, 41)]
    state = StateDir(tmp_path / ".cdcflow").load("p1", "gen", "0")
    assert state.position == b"0/41"  # the last record before the stop
    assert state.window == [0, 0, 0, 0, 0, 0, 0, 0, 1, 1]
    assert sum(outcome.totals.nacked.values()) >= 3

    # a restart resumes at 42 with the saved window and stops again on the same record
    again = run_files([str(path)], until_idle=True, limits=SMALL, progress=False)
    assert again.exit_code == 1 and "rejected id 42" in again.failures[0]
    assert [r.key["id"] for r in test_plugins.read_records(tmp_path / "dlq.bin")] == [5, 17, 40, 41]
    assert StateDir(tmp_path / ".cdcflow").load("p1", "gen", "0").position == b"0/41"


def test_default_window_stops_on_first_nack_without_dlq_write(spark, test_plugins, tmp_path):
    path = pipeline(tmp_path, count=100, partitions=1, batch=10, reject="23", gen_extra={"operations": "create"})
    outcome = run_files([str(path)], until_idle=True, limits=SMALL, progress=False)
    assert outcome.exit_code == 1 and "rejected id 23" in outcome.failures[0]
    assert test_plugins.read_records(tmp_path / "dlq.bin") == []
    assert StateDir(tmp_path / ".cdcflow").load("p1", "gen", "0").position == b"0/22"


def test_failed_dlq_write_stops_without_acknowledging(spark, test_plugins, tmp_path):
    path = pipeline(tmp_path, count=100, partitions=1, batch=10, reject="13", dlq_plugin="test-broken",
                    dlq_settings={}, window=0, threshold=0, gen_extra={"operations": "create"})
    outcome = run_files([str(path)], until_idle=True, limits=SMALL, progress=False)
    assert outcome.exit_code == 1
    assert "dead-letter queue failed" in outcome.failures[0] and "disk on fire" in outcome.failures[0]
    assert StateDir(tmp_path / ".cdcflow").load("p1", "gen", "0").position == b"0/12"


def test_window_size_zero_sends_every_nack_to_the_dlq(spark, test_plugins, tmp_path):
    rejected = list(range(0, 300, 7))
    path = pipeline(tmp_path, count=300, partitions=1, batch=50, reject=",".join(map(str, rejected)),
                    window=0, threshold=0, gen_extra={"operations": "create"})
    outcome = run_files([str(path)], until_idle=True, limits=SMALL, progress=False)
    assert outcome.exit_code == 0, outcome.failures
    assert [r.key["id"] for r in test_plugins.read_records(tmp_path / "dlq.bin")] == rejected
    written = [r.key["id"] for r in test_plugins.read_records(tmp_path / "out.bin")]
    assert written == [i for i in range(300) if i not in set(rejected)]


def test_unbounded_run_serves_metrics_and_stops_cleanly_on_request(spark, test_plugins, tmp_path):
    path = pipeline(tmp_path, count=-1, partitions=2, batch=50, gen_extra={"rate": "2000"})
    scraped: dict[str, str] = {}

    def on_driver(driver):
        def stop_later():
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and driver.metrics._server is None:
                time.sleep(0.05)
            port = driver.metrics._server.server_address[1]
            while time.monotonic() < deadline:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
                if 'cdcflow_source_records_read_total{connector="gen",pipeline="p1"}' in body:
                    scraped["body"] = body
                    break
                time.sleep(0.2)
            driver.request_stop()

        threading.Thread(target=stop_later, daemon=True).start()

    outcome = run_files([str(path)], metrics_port=0, limits=Limits(task_seconds=0.5), progress=False,
                        on_driver=on_driver)
    assert outcome.exit_code == 0 and outcome.interrupted
    assert "cdcflow_destination_records_written_total" in scraped["body"]
    # everything written was acknowledged: the saved positions are the last records of the output
    got = by_partition(test_plugins.read_records(tmp_path / "out.bin"))
    state = StateDir(tmp_path / ".cdcflow")
    for p, recs in got.items():
        saved = state.load("p1", "gen", p).position
        assert saved is not None and int(saved.split(b"/")[1]) >= int(recs[-1].position.split(b"/")[1])


TWO_DESTINATIONS = """\
version: "2.2"
pipelines:
  - id: p2
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
{gen}
{destinations}
"""


def test_a_destination_nack_stop_limits_what_the_later_destinations_write(spark, test_plugins, tmp_path):
    """Default window: destination `first` rejects id 50. Its write already took the batch's
    records after 50 (a destination's nack is known only after its write); `second`, written
    after it, gets only the records before 50, and a processor nack would have stopped both
    before writing (see test_faults.py). The position saved is the one before 50."""
    dests = []
    for name, reject in (("first", "50"), ("second", "")):
        dests.append(f"""\
      - id: {name}
        type: destination
        plugin: test-recorder
        settings:
          path: ${{CDCFLOW_FILE_DIR}}/{name}.bin
          reject: "{reject}"
""")
    text = TWO_DESTINATIONS.format(gen=generator_yaml(100, 1, operations="create"), destinations="".join(dests))
    path = write_pipeline(tmp_path / "two.yaml", text)
    outcome = run_files([str(path)], until_idle=True, limits=SMALL, progress=False)
    assert outcome.exit_code == 1 and "rejected id 50" in outcome.failures[0]
    first = [r.key["id"] for r in test_plugins.read_records(tmp_path / "first.bin")]
    second = [r.key["id"] for r in test_plugins.read_records(tmp_path / "second.bin")]
    assert second == list(range(50))
    assert first == [i for i in range(100) if i != 50]  # one batch of 100: written before the nack was known
    assert StateDir(tmp_path / ".cdcflow").load("p2", "gen", "0").position == b"0/49"
