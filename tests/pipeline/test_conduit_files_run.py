"""Conduit pipeline files as Conduit's parser reads them, through ``cdcflow run``.

A version 1.x file (mappings keyed by id, processors naming their plugin with ``type``), an
unknown key and an unset variable are warnings in Conduit (github.com/ConduitIO/conduit,
pkg/provisioning/config/yaml/parser.go and hooks.go): the run goes on and says so.
"""

from __future__ import annotations

import logging
import textwrap

import orjson
import pytest

V1_FILE = """\
version: 1.1
pipelines:
  v1-pipe:
    status: running
    description: a Conduit 1.x file
    flavour: vanilla
    connectors:
      gen:
        type: source
        plugin: builtin:generator
        settings:
          recordCount: "30"
          format.type: structured
          format.options.id: int${CDCFLOW_TEST_SURELY_UNSET}
      out:
        type: destination
        plugin: builtin:file
        settings:
          path: {out}
        processors:
          tag:
            type: field.set
            settings:
              field: .Metadata.tag
              value: v1
  parked:
    status: stopped
"""


@pytest.mark.slow
@pytest.mark.spark
def test_a_conduit_v1_file_with_warnings_runs(tmp_path, caplog, monkeypatch):
    from cdcflow.engine.runner import run_files

    monkeypatch.delenv("CDCFLOW_TEST_SURELY_UNSET", raising=False)
    out = tmp_path / "out.jsonl"
    path = tmp_path / "v1.yaml"
    path.write_text(textwrap.dedent(V1_FILE).replace("{out}", str(out)))
    with caplog.at_level(logging.WARNING, logger="cdcflow.engine"):
        outcome = run_files([str(path)], master="local[2]", until_idle=True, progress=False,
                            state_dir=str(tmp_path / "state"))
    assert outcome.exit_code == 0, outcome
    records = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert len(records) == 30 and {r["metadata"]["tag"] for r in records} == {"v1"}
    warned = "\n".join(r.getMessage() for r in caplog.records)
    assert f"{path}:6: pipeline: unknown key 'flavour' ignored" in warned
    assert "environment variable 'CDCFLOW_TEST_SURELY_UNSET' is not set" in warned
