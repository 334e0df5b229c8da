"""Expression limits in a ``cdcflow run``: records whose content asks for unbounded work are
nacked to the DLQ with the limit named, quickly, and the other records flow on.

Three records trip the limits of issue 16 item 8 (a huge power in a ``filter`` condition, a
huge decimal made an integer in ``field.set``, chained ``replace`` growing a text); a fourth
carries the backtracking regex input, which RE2 answers in linear time (no error: it simply
does not match). Before the limits the run spent over 80 s on these four records, and records 1
and 2 were delivered (or the run hung) instead of reaching the DLQ. Speed per record is asserted
in tests/pipeline/test_expr_limits.py; a whole run's wall time is dominated by Spark here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcflow.convert.jsonform import dumps_lines, loads_lines
from cdcflow.record import META_DLQ_NACK_ERROR, META_DLQ_NACK_NODE_ID, Record

from helpers.engine import cli, write_pipeline

pytestmark = [pytest.mark.spark, pytest.mark.slow]

GROW = "Payload.After.s"
for _ in range(5):
    GROW = f"replace({GROW}, 'a', 'aaaaaaaaaa')"

PIPELINE = f"""\
version: "2.2"
pipelines:
  - id: limits
    connectors:
      - id: in
        type: source
        plugin: builtin:file
        settings:
          path: ${{CDCFLOW_FILE_DIR}}/in.jsonl
          format: opencdc/json
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: ${{CDCFLOW_FILE_DIR}}/out.jsonl
    processors:
      - id: power
        plugin: filter
        condition: "Payload.After.n ** Payload.After.n < 0"
      - id: whole
        plugin: field.set
        settings:
          field: .Payload.After.i
          value: "{{{{ int(decimal(Payload.After.d)) }}}}"
      - id: grow
        plugin: field.set
        settings:
          field: .Payload.After.size
          value: "{{{{ len({GROW}) }}}}"
      - id: regex
        plugin: filter
        condition: "matches(Payload.After.t, '(a+)+$')"
    dead-letter-queue:
      plugin: builtin:file
      settings:
        path: ${{CDCFLOW_FILE_DIR}}/dlq.jsonl
      window-size: 0
"""


def _row(i: int, **change) -> Record:
    after = {"id": i, "n": 2, "d": "1.5", "s": "b", "t": "x", **change}
    return Record(str(i).encode(), after=after)


@pytest.mark.timeout(600)
def test_run_sends_costly_records_to_the_dlq_fast(tmp_path: Path):
    rows = [_row(0), _row(1, n=4000000), _row(2, d="1e1000000"), _row(3, t="a" * 30 + "!"),
            _row(4, s="aaaaaaaaaa"), _row(5)]
    (tmp_path / "in.jsonl").write_bytes(dumps_lines(rows))
    path = write_pipeline(tmp_path / "p.yaml", PIPELINE)
    r = cli(["run", str(path), "--until-idle", "--state-dir", str(tmp_path / "state")], timeout=540)
    assert r.returncode == 0, r.stdout + r.stderr
    out = {rec.after["id"]: rec.after for rec in loads_lines((tmp_path / "out.jsonl").read_bytes())}
    assert sorted(out) == [0, 3, 5] and out[0]["i"] == "1" and out[3]["size"] == "1"
    dlq = {rec.after["id"]: rec.metadata for rec in loads_lines((tmp_path / "dlq.jsonl").read_bytes())}
    assert sorted(dlq) == [1, 2, 4]
    assert dlq[1][META_DLQ_NACK_NODE_ID] == "power" and "limit exceeded" in dlq[1][META_DLQ_NACK_ERROR]
    assert "Payload.After.n ** Payload.After.n" in dlq[1][META_DLQ_NACK_ERROR]
    assert dlq[2][META_DLQ_NACK_NODE_ID] == "whole" and "MAX_DECIMAL_EXPONENT" in dlq[2][META_DLQ_NACK_ERROR]
    assert dlq[4][META_DLQ_NACK_NODE_ID] == "grow" and "MAX_TEXT" in dlq[4][META_DLQ_NACK_ERROR]
