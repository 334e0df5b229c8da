"""``cdcflow run`` (a subprocess, its own Spark) writing the storage layout, killed with SIGKILL mid-write.

After every kill: files that existed are never overwritten (same inode, same bytes), no row is
lost, and duplicates come only from batches that were written but not yet acknowledged.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from cdcflow.connectors.generator import SOURCE_PARAMS as GEN_PARAMS
from cdcflow.connectors.generator import GeneratorSource
from cdcflow.connectors.ticdc.events import from_record
from cdcflow.params import validate
from cdcflow.schemas import default_store
from helpers.storage import FORMATS, comparable, read_all

REPO = Path(__file__).resolve().parents[3]
GEN = {"format.type": "tidb", "operations": "create,update,delete", "seed": "11", "partitions": "1"}

PIPELINE = """\
version: "2.2"
engine:
  batch-size: {batch}
  master: local[2]
pipelines:
  - id: lake
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
{gen}
      - id: out
        type: destination
        plugin: builtin:storage
        settings:
{lake}
"""


def _indent(settings: dict) -> str:
    return "\n".join(f'          {k}: "{v}"' for k, v in settings.items())


def _snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """(inode, sha256) of every visible file of the layout (hidden temporaries excluded)."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            if name.startswith("."):
                continue
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = (p.stat().st_ino, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _data_files(root: Path) -> int:
    return sum(1 for _, _, names in os.walk(root) for n in names if n.startswith("CDC") and n.endswith(".csv"))


def _expected(count: int) -> list[str]:
    g = GeneratorSource()
    g.configure(validate("generator", GEN_PARAMS, {**GEN, "recordCount": str(count)}))
    g.open(None, "0")
    store = default_store()
    return [repr(comparable(from_record(r, store))) for r in g.read(count)]


@pytest.mark.slow
def test_sigkill_of_cdcflow_run_mid_write_resumes_without_loss_or_overwrite(tmp_path):
    count, batch = 3000, 100
    lake = tmp_path / "lake"
    lake_settings = {"uri": str(lake), **FORMATS["csv"]}
    path = tmp_path / "kill.yaml"
    path.write_text(PIPELINE.format(batch=batch, gen=_indent({**GEN, "recordCount": count, "rate": 700}),
                                    lake=_indent(lake_settings)))
    kills = 0
    for _ in range(3):  # kill each run once it has written a few more files
        before = _snapshot(lake) if lake.exists() else {}
        start_files = _data_files(lake) if lake.exists() else 0
        proc = subprocess.Popen([sys.executable, "-m", "cdcflow.cli", "run", str(path), "--until-idle"], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if lake.exists() and _data_files(lake) >= start_files + 3:
                os.killpg(proc.pid, signal.SIGKILL)  # driver, JVM and Python workers
                kills += 1
                break
            time.sleep(0.05)
        proc.wait(30)
        after = _snapshot(lake)
        for rel, ident in before.items():
            if rel.endswith(("CDC.index", "metadata")):
                continue  # replaced as a whole by design; data and schema files never
            assert after.get(rel) == ident, f"{rel} was overwritten or removed by the restart"
    assert kills >= 2, "the runs finished before they could be killed: slow the generator down"

    final_before = _snapshot(lake)
    final = subprocess.run([sys.executable, "-m", "cdcflow.cli", "run", str(path), "--until-idle"], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr[-3000:]
    after = _snapshot(lake)
    for rel, ident in final_before.items():
        if not rel.endswith(("CDC.index", "metadata")):
            assert after.get(rel) == ident, f"{rel} was overwritten"
    # what a killed writer left in a directory is removed by the next writer into it
    assert not list(lake.rglob(".*.tmp"))

    store = default_store()
    got = [repr(comparable(from_record(r, store))) for _, r in read_all(lake_settings)]
    want = _expected(count)
    assert len(set(want)) == len(want)  # rows are distinguishable, so duplicates are countable
    counts = Counter(got)
    assert set(counts) == set(want), "rows lost or invented"
    duplicates = sum(n - 1 for n in counts.values())
    assert duplicates <= kills * batch, f"{duplicates} duplicates from {kills} kills (batch {batch})"
    seen, order = set(), []
    for key in got:  # first occurrences keep the generator's order
        if key not in seen:
            seen.add(key)
            order.append(key)
    assert order == want
