"""A Conduit pipeline file with several of Conduit's processors, its conditions and templates in
Conduit's Go template syntax, validates and runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.transforms import registry

from cdcflow.pipeline.chain import build_chain
from cdcflow.pipeline.validate import validate_files
from cdcflow.record import Operation, Record

# Conduit pipeline (version 2.2), Conduit's syntax throughout.
PIPELINE = """\
version: 2.2
pipelines:
  - id: users
    status: running
    description: Conduit processors with Go-template conditions and settings
    connectors:
      - id: src
        type: source
        plugin: builtin:generator
        settings:
          recordCount: "40"
          format.type: structured
          format.options.id: int
          format.options.name: string
          format.options.meta: string
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {out}
    processors:
      - id: make-meta
        plugin: field.set
        settings:
          field: .Payload.After.meta
          value: '{{{{ toJson (dict "n" .Payload.After.id) }}}}'
      - id: decode-meta
        plugin: json.decode
        settings:
          field: .Payload.After.meta
      - id: rename
        plugin: field.rename
        settings:
          mapping: .Payload.After.name:full_name,.Metadata["opencdc.readAt"]:read_at
      - id: id-as-text
        plugin: field.convert
        settings:
          field: .Payload.After.id
          type: string
      - id: mark
        plugin: field.set
        condition: '{{{{ eq .Operation.String "create" }}}}'  # .Operation is a number to Go's eq
        settings:
          field: .Metadata.note
          value: 'new {{{{ .Payload.After.id }}}}'
      - id: drop-odd
        plugin: filter
        condition: '{{{{ ne (mod (atoi .Payload.After.id) 2) 0 }}}}'  # Go's mod keeps the sign: -3 mod 2 is -1
      - id: encode-name
        plugin: base64.encode
        settings:
          field: .Payload.After.full_name
      - id: reject
        plugin: error
        condition: '{{{{ eq .Payload.After.id "4" }}}}'
        settings:
          message: 'rejected {{{{ .Payload.After.id }}}}'
      - id: twice
        plugin: clone
        settings:
          count: "1"
      - id: no-meta
        plugin: field.exclude
        settings:
          fields: .Payload.After.meta
"""


@pytest.fixture
def pipeline_file(tmp_path: Path) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE.format(out=tmp_path / "out.jsonl"))
    return path


def test_pipeline_validates(pipeline_file):
    result = validate_files([str(pipeline_file)], registry=registry())
    assert result.valid, [str(p) for p in result.problems]


def test_pipeline_processors_run(pipeline_file):
    result = validate_files([str(pipeline_file)], registry=registry())
    chain = build_chain(result.pipelines[0].processors, registry())
    records = [
        Record(b"p%d" % i, Operation.CREATE if i % 3 else Operation.UPDATE, {"opencdc.readAt": "1"}, None, None,
               {"id": i, "name": f"user{i}"})
        for i in range(8)
    ]
    out = chain.process(records)
    assert [(n.node_id, n.error) for n in out.nacks] == [("reject", "rejected 4")]
    ids = [r.after["id"] for r in out.records]
    assert ids == ["0", "0", "2", "2", "6", "6"]
    first = out.records[0]
    assert first.after == {"id": "0", "full_name": "dXNlcjA="}
    assert first.metadata == {"read_at": "1", "clone.index": "0"}  # id 0 is an update: no note
    assert out.records[2].metadata == {"read_at": "1", "note": "new 2", "clone.index": "0"}
    chain.teardown()


@pytest.mark.slow
@pytest.mark.spark
def test_pipeline_runs_on_spark(pipeline_file, tmp_path):
    from cdcflow.engine.runner import run_files

    outcome = run_files([str(pipeline_file)], master="local[2]", until_idle=True, progress=False,
                        state_dir=str(tmp_path / "state"))
    assert outcome.exit_code == 0, outcome
    lines = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    ids = {rec["payload"]["after"]["id"] for rec in lines}
    assert ids and all(int(i) % 2 == 0 for i in ids) and "4" not in ids
    assert all("meta" not in rec["payload"]["after"] for rec in lines)
