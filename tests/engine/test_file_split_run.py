"""``cdcflow run`` file -> file with the file source split into several partitions (issue 17):
every line is copied exactly once, each reader's lines keep their order, and a second run
resumes each reader at its own position (only the lines appended since are copied)."""

from __future__ import annotations

import base64
import json

import pytest

from helpers.engine import cli, write_pipeline
from cdcflow.convert.jsonform import dumps_lines
from cdcflow.record import Operation, Record

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPLIT = 20_000

PIPELINE = f"""\
version: "2.2"
engine:
  batch-size: 150
pipelines:
  - id: split
    connectors:
      - id: in
        type: source
        plugin: builtin:file
        settings:
          path: {{src}}
          format: opencdc/json
          partitions: "3"
          split-size: "{SPLIT}"
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {{dst}}
    processors:
      - id: mark
        plugin: field.set
        settings:
          field: .Metadata["copied"]
          value: "yes"
"""


def _records(start: int, n: int) -> bytes:
    return dumps_lines([Record(str(k).encode(), Operation.CREATE, {"opencdc.collection": "t"}, {"id": k}, None,
                               {"id": k, "text": "x" * (k % 700)}) for k in range(start, start + n)])


def _line_ends(data: bytes) -> list[int]:
    return [i + 1 for i, b in enumerate(data) if b == ord("\n")]


def _copied(path) -> list[int]:
    """The source positions (byte offsets after each input line) of the output lines, in output order."""
    out = []
    for line in path.read_bytes().splitlines():
        obj = json.loads(line)
        assert obj["metadata"]["copied"] == "yes"
        out.append(int(base64.b64decode(obj["position"])))
    return out


def test_a_split_file_is_copied_once_in_reader_order_and_resumed(tmp_path):
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(_records(0, 1500))
    pipeline = write_pipeline(tmp_path / "p.yaml", PIPELINE.format(src=src, dst=dst))
    first = cli(["run", str(pipeline), "--until-idle", "--master", "local[2]"], timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    ends = _line_ends(src.read_bytes())
    assert len(src.read_bytes()) > 10 * SPLIT  # many blocks, lines crossing block ends
    got = _copied(dst)
    assert sorted(got) == ends  # every line once

    def reader(end: int) -> int:  # the reader of the block holding the line's first byte
        start = max(e for e in [0] + ends if e < end)
        return (start // SPLIT) % 3

    for r in range(3):
        mine = [e for e in got if reader(e) == r]
        assert mine == sorted(mine), f"reader {r} out of order"
    assert len({reader(e) for e in got}) == 3

    with open(src, "ab") as f:  # the file grows; the next run copies only the new lines
        f.write(_records(1500, 400))
    second = cli(["run", str(pipeline), "--until-idle", "--master", "local[2]"], timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert sorted(_copied(dst)) == _line_ends(src.read_bytes())
