"""``cdcflow validate``: offline checks against the real registry, in-process and as a command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cdcflow.cli import main
from cdcflow.pipeline.validate import validate_files

VALID = """
version: 2.2
pipelines:
  - id: quick
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          recordCount: "10"
          format.type: structured
          format.options.id: int
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: ${CDCFLOW_FILE_DIR}/out.jsonl
    processors:
      - id: tag
        plugin: field.set
        condition: 'Operation == "create"'
        settings:
          field: .Metadata.tag
          value: "id-{{ Payload.After.id }}"
      - id: drop
        plugin: filter
        condition: "Payload.After.id % 2 == 0"
    dead-letter-queue:
      plugin: builtin:log
      window-size: 3
      window-nack-threshold: 1
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return str(path)


def messages(result, path: str) -> list[str]:
    return [str(p).replace(path, "F") for p in result.problems]


def test_valid_file(tmp_path):
    path = write(tmp_path, "ok.yaml", VALID)
    result = validate_files([path], env={})
    assert result.problems == []
    assert result.valid and [p.id for p in result.pipelines] == ["quick"]


def test_unknown_plugins(tmp_path):
    path = write(tmp_path, "p.yaml", """
        version: 2.2
        pipelines:
          - id: p
            connectors:
              - {id: src, type: source, plugin: builtin:generatr}
              - {id: dst, type: destination, plugin: standalone:nothing}
            processors:
              - {id: x, plugin: field.sett}
            dead-letter-queue: {plugin: builtin:nowhere}
    """)
    got = messages(validate_files([path], env={}), path)
    assert len(got) == 4
    assert got[0].startswith("F:5: pipeline 'p': connector 'src': connector plugin 'builtin:generatr' not found")
    assert "did you mean generator" in got[0]
    assert got[1].startswith("F:6: pipeline 'p': connector 'dst': connector plugin 'standalone:nothing' not found")
    assert got[2].startswith("F:8: pipeline 'p': processor 'x': transform plugin 'field.sett' not found")
    assert got[3].startswith("F:9: pipeline 'p': dead-letter-queue: connector plugin 'builtin:nowhere' not found")


def test_bad_settings_every_rule_listed(tmp_path):
    path = write(tmp_path, "p.yaml", """
        version: 2.2
        pipelines:
          - id: p
            connectors:
              - id: src
                type: source
                plugin: generator
                settings: {recordCount: lots, colour: red}
              - {id: dst, type: destination, plugin: file}
              - {id: src2, type: destination, plugin: generator, settings: {recordCount: "1"}}
            processors:
              - {id: s, plugin: field.set, settings: {field: .Payload.After.x}}
              - {id: e, plugin: field.exclude, settings: {fields: .Operation}}
    """)
    got = messages(validate_files([path], env={}), path)
    assert got == [
        # a setting's problem is reported at the setting's own line (flow-style settings: line 8)
        "F:8: pipeline 'p': connector 'src': builtin:generator@v0.1.0: parameter 'colour': unrecognized parameter "
        "(known: burst.generateTime, burst.sleepTime, collections.*, format.options.*, format.type, operations, partitions, rate, readTime, "
        "recordCount, seed and Conduit's sdk.*) (rule: unknown)",
        "F:8: pipeline 'p': connector 'src': builtin:generator@v0.1.0: parameter 'recordCount': value 'lots' is "
        "not a valid int: invalid literal for int() with base 10: 'lots' (rule: type)",
        "F:9: pipeline 'p': connector 'dst': builtin:file@v0.1.0: parameter 'path': value is required (rule: required)",
        "F:10: pipeline 'p': connector 'src2': plugin builtin:generator@v0.1.0 cannot be used as a destination "
        "(it has: source)",
        "F:12: pipeline 'p': processor 's': builtin:field.set@v0.1.0: parameter 'value': value is required "
        "(rule: required)",
        "F:13: pipeline 'p': processor 'e': parameter 'fields': it is not allowed to exclude .Position or "
        ".Operation (rule: exclusion)",
    ]


def test_bad_condition_and_template(tmp_path):
    path = write(tmp_path, "p.yaml", """
        version: 2.2
        pipelines:
          - id: p
            connectors:
              - {id: src, type: source, plugin: generator, settings: {format.options.id: int}}
              - {id: dst, type: destination, plugin: log}
            processors:
              - id: c
                plugin: filter
                condition: 'Operation = "create"'
              - id: t
                plugin: field.set
                condition: 'unknownThing == 1'
                settings: {field: .Payload.After.x, value: "{{ Payload.After.y + }}"}
    """)
    got = messages(validate_files([path], env={}), path)
    assert got == [
        "F:8: pipeline 'p': processor 'c': condition: expression 'Operation = \"create\"' at column 11: "
        "syntax error: invalid syntax",
        "F:11: pipeline 'p': processor 't': condition: expression 'unknownThing == 1' at column 1: unknown name "
        "'unknownThing'; the record is Position, Operation, Metadata, Key, Payload",
        "F:14: pipeline 'p': processor 't': parameter 'value': expression '{{ Payload.After.y + }}' at column 21: "
        "in '{{ Payload.After.y + }}': syntax error: invalid syntax (rule: template)",
    ]


def test_missing_source_and_destination(tmp_path):
    path = write(tmp_path, "p.yaml", "version: 2.2\npipelines:\n  - id: lonely\n")
    assert messages(validate_files([path], env={}), path) == [
        "F:3: pipeline 'lonely' has no source connector (at least one is required)",
        "F:3: pipeline 'lonely' has no destination connector (at least one is required)",
    ]


def test_duplicate_ids_and_syntax_error_across_files(tmp_path):
    a = write(tmp_path, "a.yaml", VALID)
    b = write(tmp_path, "b.yaml", VALID.replace("id: drop", "id: tag"))
    c = write(tmp_path, "c.yaml", "version: 2.2\npipelines:\n  - id: x\n    connectors: [\n")
    got = [str(p) for p in validate_files([a, b, c], env={}).problems]
    assert got[0] == f"{b}:3: duplicate pipeline id 'quick' (first defined at {a}:3)"
    assert got[1] == f"{b}:24: pipeline 'quick': duplicate processor id 'tag' (first defined at {b}:18)"
    assert got[2].startswith(f"{c}:5: YAML syntax error")
    assert len(got) == 3


# -- the command -----------------------------------------------------------------------


def test_cli_valid_exit_0(tmp_path, capsys):
    path = write(tmp_path, "ok.yaml", VALID)
    assert main(["validate", path]) == 0
    out = capsys.readouterr()
    assert "valid: 1 pipeline in 1 file" in out.out


def test_cli_invalid_exit_2_lists_every_problem(tmp_path, capsys):
    path = write(tmp_path, "bad.yaml", VALID.replace("builtin:file", "builtin:nofile").replace("== 0", "=== 0"))
    assert main(["validate", path]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"{path}:12: pipeline 'quick': connector 'out': connector plugin 'builtin:nofile'")
    assert err[1].startswith(f"{path}:24: pipeline 'quick': processor 'drop': condition:")
    assert err[2] == "invalid: 2 problems"


def test_cli_json(tmp_path, capsys):
    good = write(tmp_path, "ok.yaml", VALID)
    assert main(["validate", "--json", good]) == 0
    assert json.loads(capsys.readouterr().out) == {"valid": True, "problems": [], "warnings": []}
    bad = write(tmp_path, "bad.yaml", "version: 2.2\npipelines:\n  - id: p\n    what: 1\n")
    assert main(["validate", "--json", good, bad]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is False
    assert doc["warnings"] == [{
        "file": bad, "line": 4,
        "message": "pipeline: unknown key 'what' ignored (known: id, status, name, description, connectors, "
                   "processors, dead-letter-queue, engine)",
    }]
    assert [p["line"] for p in doc["problems"]] == [3, 3]  # no source, no destination
    assert {tuple(sorted(p)) for p in doc["problems"]} == {("file", "line", "message")}


def test_console_script_subprocess(tmp_path):
    """The installed ``cdcflow`` entry point, as a user runs it."""
    path = write(tmp_path, "bad.yaml", "version: 2.2\npipelines:\n  - id: p\n    connectors: [\n")
    exe = Path(sys.executable).with_name("cdcflow")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "cdcflow.cli"]
    proc = subprocess.run(cmd + ["validate", path], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "CDCFLOW_PLUGINS_DIR": ""})
    assert proc.returncode == 2, proc.stderr
    assert f"{path}:5: YAML syntax error" in proc.stderr


def test_a_stopped_pipeline_needs_no_connectors_a_running_one_does(tmp_path):
    """Conduit accepts a stopped pipeline without connectors (its v1 testdata pipeline3); cdcflow
    neither refuses nor runs it."""
    path = write(tmp_path, "stopped.yaml", VALID + "  - id: parked\n    status: stopped\n  - id: empty\n")
    result = validate_files([path])
    assert [p.message for p in result.problems] == [
        "pipeline 'empty' has no source connector (at least one is required)",
        "pipeline 'empty' has no destination connector (at least one is required)",
    ]
    assert [p.id for p in result.pipelines] == ["quick", "parked", "empty"]
