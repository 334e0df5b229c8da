"""A Conduit pipeline file whose conditions and templated settings are Go templates runs through
`cdcflow run`: generator → processors → file, with a dead-letter queue.

The templates are written as Conduit's documentation writes them (conduit-site
docs/1-using/6-processors/2-conditions.mdx, docs/1-using/6-processors/1-builtin/field.set.mdx and
error.mdx, docs/1-using/7-other-features/4-record-routing.mdx: ``eq ... | not``); before Go
template support cdcflow refused this file ("syntax error").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.engine import cli, write_pipeline

PIPELINE = """\
version: "2.2"
pipelines:
  - id: go-templates
    status: running
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          recordCount: "30"
          operations: create
          format.type: structured
          format.options.id: int
          format.options.name: string
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {out}
    processors:
      - id: greet
        plugin: field.set
        settings:
          field: .Payload.After.greeting
          value: 'hello {{{{ .Payload.After.name | upper }}}} ({{{{ printf "%d" .Payload.After.id }}}})'
      - id: mark-even
        plugin: field.set
        condition: '{{{{ eq (mod .Payload.After.id 2) 0 }}}}'
        settings:
          field: .Metadata.parity
          value: even
      - id: mark-odd
        plugin: field.set
        condition: '{{{{ eq (mod .Payload.After.id 2) 0 | not }}}}'
        settings:
          field: .Metadata["parity"]
          value: '{{{{- if eq .Operation.String "create" -}}}} odd {{{{- end }}}}'
      - id: reject
        plugin: error
        condition: '{{{{ eq (mod .Payload.After.id 5) 0 }}}}'
        settings:
          message: 'id {{{{ .Payload.After.id }}}} is a multiple of five ({{{{ .Metadata.parity }}}})'
    dead-letter-queue:
      plugin: builtin:file
      settings:
        path: {dlq}
      window-size: 0
"""


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_go_template_conditions_and_settings_through_cdcflow_run(tmp_path: Path):
    out, dlq = tmp_path / "out.jsonl", tmp_path / "dlq.jsonl"
    path = write_pipeline(tmp_path / "pipeline.yaml", PIPELINE.format(out=out, dlq=dlq))
    assert cli(["validate", str(path)]).returncode == 0
    r = cli(["run", str(path), "--until-idle", "--state-dir", str(tmp_path / "state")], timeout=540)
    assert r.returncode == 0, r.stdout + r.stderr
    written, rejected = _lines(out), _lines(dlq)
    assert len(written) + len(rejected) == 30  # nothing lost, nothing twice
    for rec in written + rejected:
        after, meta = rec["payload"]["after"], rec["metadata"]
        assert after["greeting"] == f"hello {after['name'].upper()} ({after['id']})"
        assert meta["parity"] == ("even" if after["id"] % 2 == 0 else "odd")
    assert all(rec["payload"]["after"]["id"] % 5 for rec in written)
    for rec in rejected:
        after = rec["payload"]["after"]
        assert after["id"] % 5 == 0
        assert rec["metadata"]["conduit.dlq.nack.node.id"] == "reject"
        assert rec["metadata"]["conduit.dlq.nack.error"] == (
            f"id {after['id']} is a multiple of five ({rec['metadata']['parity']})")
