"""Faults through `cdcflow run` (subprocesses with their own Spark): outages are retried then
stop the pipeline naming the node (issue 16), a nack stop writes nothing after the stopping
record (issue 14), and the end-of-run message says why nothing was read (issue 14)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from helpers.engine import GENERATOR, PLUGIN_PKG, PYTHON, REPO, write_pipeline

pytestmark = [pytest.mark.spark, pytest.mark.slow]


OUTAGE_PIPELINE = """\
version: "2.2"
engine:
  batch-size: {batch}
  error-recovery.min-delay: 100ms
  error-recovery.max-delay: 200ms
  error-recovery.max-retries: "{retries}"
pipelines:
  - id: p1
    connectors:
{generator}      - id: rec
        type: destination
        plugin: test-outage
        settings:
          path: ${{CDCFLOW_FILE_DIR}}/out.bin
          fail-writes: "{fail}"
    dead-letter-queue:
      plugin: test-recorder
      settings:
        path: ${{CDCFLOW_FILE_DIR}}/dlq.bin
      window-size: 0
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLUGIN_PKG), os.environ.get("PYTHONPATH", "")])}


def _run(path: Path, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "cdcflow.cli", "run", str(path), "--until-idle", *extra], cwd=REPO,
                          env=_env(), capture_output=True, text=True, timeout=timeout)


def _recorded(path: Path) -> list[int]:
    from cdcflow_engine_testplugins import read_records

    return [r.key["id"] for r in read_records(path)]


def _outage(tmp_path: Path, *, fail: int, retries: int = 5, count: int = 300, batch: int = 50, rate: int = 0):
    return write_pipeline(tmp_path / "outage.yaml", OUTAGE_PIPELINE.format(
        batch=batch, retries=retries, fail=fail, generator=GENERATOR.format(count=count, partitions=1, rate=rate)))


def test_an_outage_is_retried_and_every_record_delivered_once(tmp_path):
    """The destination's first three writes fail with InfrastructureError (test-outage stands in
    for a service that is down for a while): the batch is retried with backoff, nothing goes to
    the DLQ, and every record arrives exactly once."""
    path = _outage(tmp_path, fail=3)
    res = _run(path)
    assert res.returncode == 0, res.stderr
    assert sorted(_recorded(tmp_path / "out.bin")) == list(range(300))  # once each, none lost
    assert _recorded(tmp_path / "out.bin") == list(range(300))  # in order
    assert _recorded(tmp_path / "dlq.bin") == []
    assert (tmp_path / "out.bin.attempts").read_text() == "." * (3 + 300 // 50)
    assert "batches retried" in res.stdout and "3" in res.stdout.split("batches retried")[1].split("\n")[0]


def test_an_outage_beyond_the_budget_stops_naming_the_node_and_saves_nothing(tmp_path):
    path = _outage(tmp_path, fail=-1, retries=2)
    started = time.monotonic()
    res = _run(path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert time.monotonic() - started < 200
    error = res.stderr
    for part in ("pipeline p1", "destination rec", "test-service unavailable at test://outage:9",
                 "gave up after 2 retries"):
        assert part in error, error
    assert "source p1/gen" not in error.split("(source partition")[0]  # the node, not the source, is named first
    assert (tmp_path / "out.bin.attempts").read_text() == "..."  # the first try and two retries
    assert _recorded(tmp_path / "dlq.bin") == []  # an outage is not a record's fault
    assert not (tmp_path / ".cdcflow" / "positions" / "p1" / "gen").exists()  # no position saved
    # the service is back: the re-run starts from the beginning and delivers everything once
    path = _outage(tmp_path, fail=0)
    again = _run(path)
    assert again.returncode == 0, again.stderr
    assert _recorded(tmp_path / "out.bin") == list(range(300))


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs (root is not stopped by file modes, so a full or read-only file system is
    the way to make the state directory fail)."""
    mnt = tmp_path / "state"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root/CAP_SYS_ADMIN): {res.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(directory: Path) -> None:
    """Take every free block of the file system holding ``directory``."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def test_a_full_state_directory_stops_the_run_naming_the_path(tmp_path, small_tmpfs):
    path = _outage(tmp_path, fail=0, retries=2, count=3000, batch=20, rate=300)
    proc = subprocess.Popen([PYTHON, "-m", "cdcflow.cli", "run", str(path), "--until-idle",
                             "--state-dir", str(small_tmpfs)], cwd=REPO, env=_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        saved = small_tmpfs / "positions" / "p1" / "gen" / "0.json"
        deadline = time.monotonic() + 180
        while not saved.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert saved.exists(), "the run saved no position"
        _fill(small_tmpfs)  # the disk is full from now on: the next checkpoint fails
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 1, out + err
    assert f"state unavailable at {saved}" in err or str(saved) in err, err
    assert "No space left on device" in err and "pipeline p1" in err and "state store" in err
    written = _recorded(tmp_path / "out.bin")
    assert 0 < len(written) < 3000
    # space again: the re-run continues from the last saved position and loses nothing
    (small_tmpfs / "filler").unlink()
    again = _run(path, "--state-dir", str(small_tmpfs))
    assert again.returncode == 0, again.stderr
    ids = _recorded(tmp_path / "out.bin")
    assert set(ids) == set(range(3000))
    # duplicates: only the batch whose position could not be saved, written by the first try, each of
    # the two retries and the re-run
    assert sum(n - 1 for n in Counter(ids).values()) <= 3 * 20


def test_a_read_only_state_directory_is_named_before_anything_starts(tmp_path, small_tmpfs):
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    path = _outage(tmp_path, fail=0)
    res = _run(path, "--state-dir", str(small_tmpfs / "st"), timeout=120)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "state store" in res.stderr and str(small_tmpfs / "st") in res.stderr
    assert "Read-only file system" in res.stderr
    assert "Traceback" not in res.stderr


NACK_PIPELINE = """\
version: "2.2"
pipelines:
  - id: p1
    connectors:
{generator}      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: ${CDCFLOW_FILE_DIR}/out.jsonl
    processors:
{processors}
"""

ERROR_ON_500 = """\
      - id: fail-500
        plugin: error
        condition: Key.id == 500
        settings:
          message: "bad record {{ Key.id }}"
"""

PASS_THROUGH = """\
      - id: tag
        plugin: field.set
        settings:
          field: .Metadata["x"]
          value: "y"
"""


def _nack_pipeline(processors: str, count: int = 1000) -> str:
    return NACK_PIPELINE.replace("{generator}", GENERATOR.format(count=count, partitions=1, rate=0)).replace(
        "{processors}", processors)


def _lines(path: Path) -> list[int]:
    return [json.loads(line)["key"]["id"] for line in path.read_text().splitlines()]


def test_a_nack_stop_writes_nothing_after_the_stopping_record_and_the_rerun_starts_at_it(tmp_path):
    """Default DLQ window (size 1, threshold 0): the nack of record 500 stops the pipeline.
    Records 0..499 are written and acknowledged, nothing after; a re-run starts at 500."""
    path = write_pipeline(tmp_path / "nack.yaml", _nack_pipeline(ERROR_ON_500))
    out = tmp_path / "out.jsonl"
    res = _run(path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "bad record 500" in res.stderr and "window-nack-threshold 0" in res.stderr
    assert _lines(out) == list(range(500))
    from cdcflow.engine.state import StateDir

    assert StateDir(tmp_path / ".cdcflow").load("p1", "gen", "0").position == b"0/499"
    again = _run(path)  # the same record stops it again: nothing more is written
    assert again.returncode == 1 and "bad record 500" in again.stderr
    assert _lines(out) == list(range(500))
    # the record is let through: the re-run starts at it and writes the rest once
    write_pipeline(path, _nack_pipeline(PASS_THROUGH))
    fixed = _run(path)
    assert fixed.returncode == 0, fixed.stderr
    assert _lines(out) == list(range(1000))


STORAGE_PIPELINE = """\
version: "2.2"
pipelines:
  - id: p1
    connectors:
      - id: lake
        type: source
        plugin: builtin:storage
        settings:
          uri: "file://{lake}"
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: ${{CDCFLOW_FILE_DIR}}/out.jsonl
"""


def test_nothing_new_to_read_is_said_only_when_a_saved_position_is_the_reason(tmp_path):
    lake = tmp_path / "lake"
    lake.mkdir()
    path = write_pipeline(tmp_path / "empty.yaml", STORAGE_PIPELINE.format(lake=lake))
    res = _run(path)
    assert res.returncode == 0, res.stderr
    assert "nothing new to read" not in res.stdout and "saved positions" not in res.stdout
    assert "nothing was read: the sources returned no records" in res.stdout
    gen = write_pipeline(tmp_path / "gen.yaml", _nack_pipeline(PASS_THROUGH, count=10))
    first = _run(gen)
    assert first.returncode == 0, first.stderr
    assert "nothing new to read" not in first.stdout and "nothing was read" not in first.stdout
    second = _run(gen)
    assert second.returncode == 0, second.stderr
    assert "nothing new to read: sources continue from their saved positions" in second.stdout
    assert _lines(tmp_path / "out.jsonl") == list(range(10))


LOOKUP_PIPELINE = """\
version: "2.2"
engine:
  batch-size: 50
  error-recovery.min-delay: 100ms
pipelines:
  - id: p1
    connectors:
{generator}      - id: rec
        type: destination
        plugin: test-recorder
        settings:
          path: ${{CDCFLOW_FILE_DIR}}/out.bin
    processors:
      - id: lookup
        plugin: test.lookup
        settings:
          counter: ${{CDCFLOW_FILE_DIR}}/calls
          fail-batches: "2"
    dead-letter-queue:
      plugin: test-recorder
      settings:
        path: ${{CDCFLOW_FILE_DIR}}/dlq.bin
      window-size: 0
"""


def test_a_processor_outage_is_retried_not_nacked(tmp_path):
    """A processor whose backend is down (test.lookup's first two calls raise InfrastructureError)
    fails the batch; with `window-size: 0` a nack would have gone to the DLQ, an outage does not."""
    path = write_pipeline(tmp_path / "lookup.yaml", LOOKUP_PIPELINE.format(
        generator=GENERATOR.format(count=200, partitions=1, rate=0)))
    res = _run(path)
    assert res.returncode == 0, res.stderr
    assert _recorded(tmp_path / "dlq.bin") == []
    from cdcflow_engine_testplugins import read_records

    out = read_records(tmp_path / "out.bin")
    assert [r.key["id"] for r in out] == list(range(200))
    assert all(r.metadata["looked-up"] == "yes" for r in out)
    assert "processor lookup: lookup unavailable at http://lookup.test:8080" in res.stderr
