"""Conduit pipeline files as Conduit's parser reads them, through ``cdcflow run``.

A version 1.x file (mappings keyed by id, processors naming their plugin with ``type``), an
unknown key and an unset variable are warnings in Conduit (github.com/ConduitIO/conduit,
pkg/provisioning/config/yaml/parser.go and hooks.go): the run goes on and says so.
"""

from __future__ import annotations

import logging
from pathlib import Path
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


# Conduit's own benchmark pipeline (github.com/ConduitIO/conduit, commit bb6ce44,
# benchi/archv2-nxm-batched/pipeline.yml, copied as a fixture): connector-SDK middleware settings
# (sdk.batch.size / sdk.batch.delay) on two generators, connector ids with ':' in them.
BENCHI = Path(__file__).parent / "conduit" / "benchi-archv2-nxm-batched.yml"


def test_conduits_batched_benchmark_pipeline_validates_as_written():
    from cdcflow.pipeline.validate import validate_files

    result = validate_files([str(BENCHI)])
    assert result.problems == [] and [p.id for p in result.pipelines] == ["archv2-nxm-batched"]


@pytest.mark.slow
@pytest.mark.spark
def test_conduits_batched_benchmark_pipeline_runs_bounded(tmp_path):
    """The same file with a record count (Conduit's generators run forever) and files for /dev/null:
    two sources fan in, two destinations each get every record."""
    from cdcflow.engine.runner import run_files

    text = BENCHI.read_text().replace("          operations: create\n",
                                      "          operations: create\n          recordCount: \"250\"\n")
    text = text.replace("path: /dev/null", "path: {out}", 1).replace("path: /dev/null", "path: {out2}", 1)
    path = tmp_path / "benchi.yaml"
    path.write_text(text.replace("{out}", str(tmp_path / "a.jsonl")).replace("{out2}", str(tmp_path / "b.jsonl")))
    outcome = run_files([str(path)], master="local[2]", until_idle=True, progress=False,
                        state_dir=str(tmp_path / "state"))
    assert outcome.exit_code == 0, outcome
    for name in ("a.jsonl", "b.jsonl"):
        records = [orjson.loads(x) for x in (tmp_path / name).read_bytes().splitlines()]
        by_source = {}
        for r in records:
            by_source.setdefault(r["metadata"]["conduit.source.connector.id"], []).append(r["position"])
        assert sorted(by_source) == ["archv2-nxm-batched:generator-src-a", "archv2-nxm-batched:generator-src-b"]
        assert all(len(v) == len(set(v)) == 250 for v in by_source.values())
