"""``cdcflow validate`` reports everything ``cdcflow run`` refuses before it starts, each problem at
the line of the setting itself (a URI query parameter at the URI's line), with "did you mean" for
a near-miss name; ``run`` refuses the same file with the same lines."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from cdcflow.pipeline.validate import validate_files

# line numbers below are those of this text (line 1 = "version")
BAD = """\
version: "2.2"
pipelines:
  - id: p
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          format.type: tidb
          recordCont: "10"
      - id: store
        type: destination
        plugin: builtin:storage
        settings:
          flush-interval: 2s
          uri: file:///tmp/nowhere?protocl=csv
      - id: bus
        type: destination
        plugin: builtin:kafka
        settings:
          servers: 127.0.0.1:1
          topic: t
          partition: columns
"""


def _write(tmp_path: Path) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent(BAD), encoding="utf-8")
    return str(path)


def _expected(path: str) -> list[tuple[str, str]]:
    """(file:line prefix, text the message must hold)."""
    return [
        (f"{path}:10: ", "parameter 'recordCont': unrecognized parameter (did you mean 'recordCount'?)"),
        (f"{path}:16: ", "unknown URI parameter 'protocl' (did you mean 'protocol'?)"),
        (f"{path}:17: ", "connector 'bus': parameter 'columns'"),
    ]


def test_validate_reports_configure_checks_at_the_setting_line(tmp_path):
    path = _write(tmp_path)
    got = [str(p) for p in validate_files([path], env={}).problems]
    assert len(got) == 3, got
    for line, (prefix, text) in zip(got, _expected(path)):
        assert line.startswith(prefix), (line, prefix)
        assert text in line, (line, text)


def test_run_refuses_with_the_same_file_line_errors(tmp_path):
    """The real command, as a user runs it: exit 2 before Spark starts, the same three lines."""
    path = _write(tmp_path)
    exe = Path(sys.executable).with_name("cdcflow")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "cdcflow.cli"]
    res = subprocess.run(cmd + ["run", path, "--until-idle"], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith(path)]
    assert len(lines) == 3, res.stderr
    for line, (prefix, text) in zip(lines, _expected(path)):
        assert line.startswith(prefix), (line, prefix)
        assert text in line, (line, text)
    val = subprocess.run(cmd + ["validate", path], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert val.returncode == 2
    assert [ln for ln in val.stderr.splitlines() if ln.startswith(path)] == lines


def test_kafka_uri_query_typo_at_the_uri_line(tmp_path):
    path = tmp_path / "k.yaml"
    path.write_text(textwrap.dedent("""\
        version: "2.2"
        pipelines:
          - id: p
            connectors:
              - id: gen
                type: source
                plugin: builtin:generator
                settings:
                  format.options.id: int
              - id: bus
                type: destination
                plugin: builtin:kafka
                settings:
                  partition: table
                  uri: kafka://127.0.0.1:1/t?protocol=canal-json&enable-tidb-extention=true
        """), encoding="utf-8")
    got = [str(p) for p in validate_files([str(path)], env={}).problems]
    assert len(got) == 1, got
    assert got[0].startswith(f"{path}:15: pipeline 'p': connector 'bus': parameter 'uri': unknown URI parameter "
                             "'enable-tidb-extention' (did you mean 'enable-tidb-extension'?)"), got
