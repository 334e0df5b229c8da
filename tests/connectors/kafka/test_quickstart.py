"""`cdcflow quickstart`: the README's Kafka path end to end, and its value check."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cdcflow.dev.quickstart import compare_records, generated_records
from cdcflow.record import Operation, Record

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "quickstart-kafka.yaml"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_compare_records_is_type_strict():
    """The check the quickstart prints 'values intact' from must see a changed type or value."""
    rows = generated_records(EXAMPLE)[:200]
    assert len(rows) == 200
    same = compare_records(rows, rows)
    assert same.intact and same.row_images + same.delete_keys == 200 and not same.differences

    victim = next(r for r in rows if r.after is not None)
    col = next(c for c, v in victim.after.items() if isinstance(v, decimal.Decimal))
    tampered = Record(victim.position, victim.operation, dict(victim.metadata), victim.key, victim.before,
                      {**victim.after, col: str(victim.after[col])})  # same text, wrong type
    cmp = compare_records(rows, [tampered if r is victim else r for r in rows])
    assert not cmp.intact and col in cmp.differences[0] and "str" in cmp.differences[0]

    cmp = compare_records(rows, rows[:-1])
    assert not cmp.intact and "did not arrive" in cmp.differences[-1]

    cmp = compare_records(rows, rows + [rows[0]])
    assert not cmp.intact and "twice" in cmp.differences[0]


def test_compare_records_bool_is_not_int():
    r = lambda v: Record(b"p", Operation.CREATE, {}, {"id": 1}, None, {"id": 1, "x": v})  # noqa: E731
    assert compare_records([r(1)], [r(1)]).intact
    assert not compare_records([r(1)], [r(True)]).intact
    assert not compare_records([r(dt.date(2024, 1, 1))], [r("2024-01-01")]).intact


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quickstart_command_runs_and_leaves_nothing_running(tmp_path):
    example = tmp_path / "quickstart-kafka.yaml"
    shutil.copy(EXAMPLE, example)
    cp = subprocess.run([sys.executable, "-m", "cdcflow.cli", "quickstart", str(example)], capture_output=True,
                        text=True, timeout=280, cwd=REPO)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    out = cp.stdout
    assert "values intact: yes" in out
    assert "generated          10,000" in out and "arrived            10,000" in out
    assert "quickstart_shop_orders-value" in out
    lines = (tmp_path / "out" / "quickstart-kafka.jsonl").read_bytes().splitlines()
    assert len(lines) == 10_000
    assert json.loads(lines[0])["metadata"]["cdcflow.example"].startswith("from kafka: ")
    # the services it started are gone: no state file left, the logged pids are dead
    dev = tmp_path / ".cdcflow" / "quickstart-kafka" / "dev"
    assert not (dev / "services.json").exists()
    started = [int(p) for p in __import__("re").findall(r"pid (\d+)", out)]
    assert len(started) == 2
    assert all(not _pid_alive(p) for p in started)
