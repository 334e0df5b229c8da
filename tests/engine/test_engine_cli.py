"""`cdcflow run` as a user runs it: subprocesses with their own Spark, SIGKILL, SIGTERM, exit codes."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from helpers.engine import PLUGIN_PKG, PYTHON, REPO, cli, write_pipeline

pytestmark = pytest.mark.spark

KILL_PIPELINE = """\
version: "2.2"
engine:
  batch-size: {batch}
pipelines:
  - id: k
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          format.type: structured
          format.options.id: int
          format.options.name: string
          recordCount: "{count}"
          partitions: "2"
          rate: "{rate}"
      - id: rec
        type: destination
        plugin: test-recorder
        settings:
          path: ${{CDCFLOW_FILE_DIR}}/out.bin
    processors:
      - id: tag
        plugin: field.set
        settings:
          field: .Metadata["x"]
          value: "{{{{ Operation }}}}"
"""


def _driver_env() -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(PLUGIN_PKG), os.environ.get("PYTHONPATH", "")])}


def _start_run(path: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, **_driver_env()}
    return subprocess.Popen([PYTHON, "-m", "cdcflow.cli", "run", str(path), *extra], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _positions(tmp_path: Path) -> list[bytes]:
    from cdcflow_engine_testplugins import read_records

    return [r.position for r in read_records(tmp_path / "out.bin")]


def test_invalid_files_exit_2_with_every_problem(tmp_path):
    bad = write_pipeline(tmp_path / "bad.yaml", """\
version: "2.2"
pipelines:
  - id: a
    connectors:
      - id: s
        type: source
        plugin: builtin:no-such-plugin
      - id: d
        type: destination
        plugin: builtin:file
    processors:
      - id: f
        plugin: filter
        condition: "Operation =="
""")
    res = cli(["run", str(bad), "--until-idle"], timeout=60)
    assert res.returncode == 2, res.stderr
    lines = [l for l in res.stderr.splitlines() if l.startswith(str(bad))]
    assert any("no-such-plugin" in l for l in lines)
    assert any("path" in l for l in lines)  # file destination without its required path
    assert any("Operation ==" in l for l in lines)
    assert len(lines) >= 3


def test_sigkill_at_several_points_then_resume_loses_nothing(tmp_path):
    """kill -9 (the whole process group: driver, JVM, Python workers) at fixed and random
    moments; the union of outputs holds every record, duplicates only from unacked batches."""
    count, batch, partitions = 6000, 100, 2
    # 300 records/s: the 6000 take 20 s, so both killed runs stop short of the end and the last run
    # has work left (at 800/s a fast start-up let the second run finish before its kill)
    path = write_pipeline(tmp_path / "kill.yaml", KILL_PIPELINE.format(batch=batch, count=count, rate=300))
    rng = random.Random(int(os.environ.get("CDCFLOW_KILL_SEED", "0")) or None)
    delays = [7.0, 8.0 + rng.random() * 2.0]
    kills = 0
    for delay in delays:
        proc = _start_run(path, "--until-idle")
        time.sleep(delay)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait(30)
    assert kills >= 1, "the run finished before any kill: slow the source down"
    before_final = len(_positions(tmp_path))
    assert before_final < count
    final = _start_run(path, "--until-idle")
    out, err = final.communicate(timeout=240)
    assert final.returncode == 0, err
    positions = _positions(tmp_path)
    counts = Counter(positions)
    want = {f"{p}/{s}".encode() for p in range(partitions) for s in range(count // partitions)}
    assert set(counts) == want, "records lost or invented"
    duplicates = sum(n - 1 for n in counts.values())
    assert duplicates <= kills * partitions * batch, f"{duplicates} duplicates from {kills} kills"
    # order per partition: sequence numbers only go back at a restart, by at most one batch
    last: dict[str, int] = {}
    for pos in positions:
        part, seq = pos.decode().split("/")
        seq = int(seq)
        if part in last and seq <= last[part]:
            assert last[part] - seq < batch, f"partition {part} went back from {last[part]} to {seq}"
        last[part] = seq


def test_sigterm_drains_checkpoints_and_exits_0(tmp_path):
    path = write_pipeline(tmp_path / "term.yaml", KILL_PIPELINE.format(batch=50, count=-1, rate=1000))
    proc = _start_run(path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (tmp_path / "out.bin").exists():
        time.sleep(0.2)
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGTERM)  # the driver only, like a service manager would
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "finished" in out and "records read" in out
    # everything written was acknowledged: positions saved == last record per partition
    from cdcflow.engine.state import StateDir

    state = StateDir(tmp_path / ".cdcflow")
    last: dict[str, bytes] = {}
    for pos in _positions(tmp_path):
        last[pos.decode().split("/")[0]] = pos
    for part, pos in last.items():
        assert state.load("k", "gen", part).position == pos


def test_quickstart_runs_and_reruns(tmp_path):
    """README's quickstart: generator of TiDB rows → field.set + filter → file."""
    example = tmp_path / "examples"
    shutil.copytree(REPO / "examples", example, ignore=shutil.ignore_patterns(".cdcflow", "out"))
    res = cli(["run", str(example / "quickstart.yaml"), "--until-idle"], timeout=150)
    assert res.returncode == 0, res.stderr
    output = example / "out" / "quickstart.jsonl"
    assert str(output) in res.stdout and "records read" in res.stdout
    from cdcflow.convert.jsonform import loads_lines
    from cdcflow.schemas import SchemaStore

    store = SchemaStore(example / ".cdcflow" / "schemas.sqlite")
    records = loads_lines(output.read_bytes(), store)
    assert 0 < len(records) < 10_000
    assert all(r.operation.text != "delete" for r in records)
    assert all(r.metadata["cdcflow.example"].startswith("quickstart ") for r in records)
    again = cli(["run", str(example / "quickstart.yaml"), "--until-idle"], timeout=150)
    assert again.returncode == 0, again.stderr
    assert "nothing new to read" in again.stdout
    assert len(loads_lines(output.read_bytes(), store)) == len(records)
