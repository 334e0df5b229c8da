"""Issue 15: a JSON-lines file written by one `cdcflow run` reads in any other run, with no shared state.

Pipeline A (generator, every TiDB type -> file) runs with state directory S1; pipeline B (that
file -> another file) runs with a different state directory S2, whose schema store holds none of
A's schemas. B reads every line and writes it again as Conduit would: the same key, payload and
operation bytes, the same metadata apart from the keys B's own source sets. On the old form, B
stopped at the first line (``schema subject ... version 1 not found``).
"""

from __future__ import annotations

import json

import pytest

from helpers.engine import cli, write_pipeline

pytestmark = [pytest.mark.spark, pytest.mark.slow]

GENERATE = """\
version: "2.2"
pipelines:
  - id: a
    connectors:
      - id: rows
        type: source
        plugin: builtin:generator
        settings:
          format.type: tidb
          recordCount: "120"
          operations: create,update,delete
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {out}
"""

COPY = """\
version: "2.2"
pipelines:
  - id: b
    connectors:
      - id: in
        type: source
        plugin: builtin:file
        settings:
          path: {src}
          format: opencdc/json
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {out}
"""

#: metadata a run's source sets on every record (Conduit's source keys, the read time)
_SET_BY_THE_SOURCE = ("conduit.source.", "opencdc.readAt")


def _run(pipeline, state) -> None:
    done = cli(["run", str(pipeline), "--until-idle", "--master", "local[2]", "--state-dir", str(state)], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def _without_source_keys(metadata: dict) -> dict:
    return {k: v for k, v in metadata.items() if not k.startswith(_SET_BY_THE_SOURCE)}


def test_a_file_written_by_one_run_is_copied_by_a_run_with_another_state_directory(tmp_path):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _run(write_pipeline(tmp_path / "a.yaml", GENERATE.format(out=first)), tmp_path / "s1")
    _run(write_pipeline(tmp_path / "b.yaml", COPY.format(src=first, out=second)), tmp_path / "s2")

    written, copied = _lines(first), _lines(second)
    assert len(written) == 120 and len(copied) == len(written)
    for a, b in zip(written, copied):  # one reader: the copy keeps the file's order
        assert (b["operation"], b["key"], b["payload"]) == (a["operation"], a["key"], a["payload"])
        assert _without_source_keys(b["metadata"]) == _without_source_keys(a["metadata"])
        assert b["metadata"]["conduit.source.connector.id"] == "in"  # B's source; A's was "rows"
    # the lines carry no reference into A's schema store
    assert not any(k.startswith("cdcflow.schema") for line in written for k in line["metadata"])
    # the writer's bytes: what B wrote for a line is what the line says (key/payload as Conduit writes them)
    raw_a, raw_b = first.read_bytes().splitlines(), second.read_bytes().splitlines()
    for la, lb in zip(raw_a, raw_b):
        assert la[la.index(b',"key":'):] == lb[lb.index(b',"key":'):]
