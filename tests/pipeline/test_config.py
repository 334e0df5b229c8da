"""Pipeline file parsing: structure, interpolation, engine key, and every problem with file:line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cdcflow.pipeline.config import FILE_DIR_VARIABLE, Problem, load_files


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return str(path)


FULL = """
version: 2.2
engine:
  master: local[2]
  conf:
    spark.sql.shuffle.partitions: 4
  batch-size: 500
pipelines:
  - id: first
    status: stopped
    name: First pipeline
    description: generator to file
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        name: my-gen
        settings:
          recordCount: 10
          format.type: structured
          flag: true
          nothing:
        processors:
          - id: tag
            plugin: field.set
            settings:
              field: .Metadata.tag
              value: "x"
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: ./out.jsonl
    processors:
      - id: drop-deletes
        plugin: filter
        condition: 'Operation == "delete"'
        workers: 2
    dead-letter-queue:
      plugin: builtin:file
      settings:
        path: ./dlq.jsonl
      window-size: 5
      window-nack-threshold: 2
    engine:
      trigger-interval: 250ms
      state-dir: state
      conf:
        spark.ui.enabled: false
  - id: second
    connectors:
      - {id: a, type: source, plugin: generator}
      - {id: b, type: destination, plugin: log}
"""


def test_full_file_parses_every_field(tmp_path):
    path = write(tmp_path, "p.yaml", FULL)
    result = load_files([path], env={})
    assert result.problems == []
    first, second = result.pipelines
    assert (first.id, first.status, first.name, first.description) == ("first", "stopped", "First pipeline", "generator to file")
    assert first.origin.file == path and first.origin.line == 8
    gen, out = first.connectors
    assert (gen.id, gen.type, gen.plugin, gen.name) == ("gen", "source", "builtin:generator", "my-gen")
    # Conduit passes settings as strings: scalars keep their text, null becomes ""
    assert gen.settings == {"recordCount": "10", "format.type": "structured", "flag": "true", "nothing": ""}
    assert gen.origin.line == 13
    assert [p.id for p in gen.processors] == ["tag"]
    assert gen.processors[0].settings == {"field": ".Metadata.tag", "value": "x"}
    assert out.type == "destination" and out.settings == {"path": "./out.jsonl"}
    proc = first.processors[0]
    assert (proc.id, proc.plugin, proc.condition, proc.workers) == ("drop-deletes", "filter", 'Operation == "delete"', 2)
    dlq = first.dead_letter_queue
    assert (dlq.plugin, dlq.settings, dlq.window_size, dlq.window_nack_threshold) == (
        "builtin:file", {"path": "./dlq.jsonl"}, 5, 2,
    )
    # pipeline engine overrides the file engine key by key, conf dicts merge
    assert first.engine.master == "local[2]"
    assert first.engine.batch_size == 500
    assert first.engine.trigger_interval == pytest.approx(0.25)
    assert first.engine.conf == {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"}
    assert first.engine.state_dir == str(tmp_path / "state")
    # defaults
    assert second.status == "running"
    assert second.dead_letter_queue.plugin == "builtin:log"
    assert (second.dead_letter_queue.window_size, second.dead_letter_queue.window_nack_threshold) == (1, 0)
    assert second.engine.master == "local[2]" and second.engine.state_dir is None
    assert second.engine.conf == {"spark.sql.shuffle.partitions": "4"}
    assert [c.id for c in second.sources] == ["a"] and [c.id for c in second.destinations] == ["b"]


def test_several_files_and_several_documents(tmp_path):
    a = write(tmp_path, "a.yaml", """
        version: 2.2
        pipelines:
          - id: one
          - id: two
        ---
        version: "2.0"
        pipelines:
          - id: three
    """)
    b = write(tmp_path, "b.yaml", """
        version: 2.1
        pipelines:
          - id: four
    """)
    result = load_files([a, b], env={})
    assert result.problems == []
    assert [p.id for p in result.pipelines] == ["one", "two", "three", "four"]
    assert result.pipelines[3].origin.file == b


def test_interpolation(tmp_path):
    path = write(tmp_path, "p.yaml", """
        version: 2.2
        pipelines:
          - id: ${PID}
            connectors:
              - id: src
                type: source
                plugin: generator
                settings:
                  a: ${A}
                  b: pre-${A}-${MISSING:-fallback}-post
                  c: ${EMPTY:-used-when-empty}
                  d: cost $$5
                  e: ${CDCFLOW_FILE_DIR}/out
            dead-letter-queue:
              window-size: ${WS:-3}
    """)
    result = load_files([path], env={"PID": "from-env", "A": "alpha", "EMPTY": ""})
    assert result.problems == []
    p = result.pipelines[0]
    assert p.id == "from-env"
    assert p.connectors[0].settings == {
        "a": "alpha",
        "b": "pre-alpha-fallback-post",
        "c": "used-when-empty",
        "d": "cost $5",
        "e": f"{tmp_path.resolve()}/out",
    }
    assert p.dead_letter_queue.window_size == 3
    assert FILE_DIR_VARIABLE == "CDCFLOW_FILE_DIR"


def test_unset_variable_is_a_problem_with_its_line(tmp_path):
    path = write(tmp_path, "p.yaml", """
        version: 2.2
        pipelines:
          - id: p
            connectors:
              - id: src
                type: source
                plugin: generator
                settings:
                  secret: ${NOT_SET_ANYWHERE}
    """)
    result = load_files([path], env={})
    assert [str(p) for p in result.problems] == [
        f"{path}:9: environment variable 'NOT_SET_ANYWHERE' is not set (use ${{NOT_SET_ANYWHERE:-default}} for a default)"
    ]


def test_env_defaults_to_process_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CDCFLOW_TEST_PIPELINE_ID", "env-id")
    path = write(tmp_path, "p.yaml", "version: 2.2\npipelines:\n  - id: ${CDCFLOW_TEST_PIPELINE_ID}\n")
    assert [p.id for p in load_files([path]).pipelines] == ["env-id"]


def test_yaml_syntax_error_has_file_and_line(tmp_path):
    path = write(tmp_path, "broken.yaml", """
        version: 2.2
        pipelines:
          - id: p
            connectors: [
          - id: q
    """)
    result = load_files([path], env={})
    assert result.pipelines == []
    assert len(result.problems) == 1
    problem = result.problems[0]
    assert problem.file == path and problem.line == 5
    assert str(problem).startswith(f"{path}:5: YAML syntax error")


def test_bad_indentation_is_a_syntax_error(tmp_path):
    path = write(tmp_path, "broken.yaml", "version: 2.2\npipelines:\n  - id: p\n   status: running\n")
    problems = load_files([path], env={}).problems
    assert len(problems) == 1 and problems[0].line == 4 and "YAML syntax error" in problems[0].message


def problems_of(tmp_path: Path, text: str) -> list[str]:
    path = write(tmp_path, "p.yaml", text)
    return [str(p).replace(path, "F") for p in load_files([path], env={}).problems]


def test_unknown_keys_are_problems(tmp_path):
    assert problems_of(tmp_path, """
        version: 2.2
        extra: 1
        pipelines:
          - id: p
            colour: red
            connectors:
              - id: c
                type: source
                plugin: generator
                setting: {}
            processors:
              - id: x
                plugin: filter
                condtion: "true"
            dead-letter-queue:
              window: 3
            engine:
              trigger_interval: 1s
    """) == [
        "F:2: configuration: unknown key 'extra' (known: version, pipelines, engine)",
        "F:5: pipeline: unknown key 'colour' (known: id, status, name, description, connectors, processors, "
        "dead-letter-queue, engine)",
        "F:10: pipeline 'p': connector: unknown key 'setting' (known: id, type, plugin, name, settings, processors)",
        "F:14: pipeline 'p': processor: unknown key 'condtion' (known: id, plugin, type, condition, settings, workers)",
        "F:16: pipeline 'p': dead-letter-queue: unknown key 'window' (known: plugin, settings, window-size, "
        "window-nack-threshold)",
        "F:18: pipeline 'p'.engine: unknown key 'trigger_interval' (known: master, conf, trigger-interval, "
        "micro-batch-duration, batch-size, state-dir, error-recovery.max-retries, error-recovery.min-delay, "
        "error-recovery.max-delay, error-recovery.backoff-factor, error-recovery.max-elapsed)",
    ]


def test_duplicate_ids_are_problems(tmp_path):
    a = write(tmp_path, "a.yaml", """
        version: 2.2
        pipelines:
          - id: p
            connectors:
              - {id: c, type: source, plugin: generator, processors: [{id: x, plugin: filter}]}
              - {id: c, type: destination, plugin: log}
            processors:
              - {id: x, plugin: filter}
              - {id: y, plugin: filter}
              - {id: y, plugin: filter}
    """)
    b = write(tmp_path, "b.yaml", "version: 2.2\npipelines:\n  - id: p\n")
    result = load_files([a, b], env={})
    assert [str(p) for p in result.problems] == [
        f"{a}:6: pipeline 'p': duplicate connector id 'c' (first defined at {a}:5)",
        f"{a}:8: pipeline 'p': duplicate processor id 'x' (first defined at {a}:5)",
        f"{a}:10: pipeline 'p': duplicate processor id 'y' (first defined at {a}:9)",
        f"{b}:3: duplicate pipeline id 'p' (first defined at {a}:3)",
    ]
    assert [p.origin.file for p in result.pipelines] == [a]


def test_duplicate_yaml_key_is_a_problem(tmp_path):
    assert problems_of(tmp_path, """
        version: 2.2
        pipelines:
          - id: p
            id: q
    """) == ["F:4: pipeline: duplicate key 'id' (first at line 3)"]


def test_value_errors(tmp_path):
    assert problems_of(tmp_path, """
        version: 2.2
        pipelines:
          - status: running
          - id: p
            status: paused
            connectors:
              - {id: c, type: sink, plugin: x}
              - {id: d, plugin: x}
              - {id: e, type: source, plugin: x, settings: {nested: {a: 1}}}
              - {id: f, type: source}
            processors:
              - {id: w, plugin: filter, workers: -1}
              - {id: v, plugin: filter, workers: many}
              - {id: t, type: filter, plugin: filter}
              - {id: u}
            dead-letter-queue: {window-size: -2}
            engine: {batch-size: 0, trigger-interval: soon}
          - just-a-string
    """) == [
        "F:3: pipeline: 'id' is required",
        "F:5: pipeline 'p': status must be 'running' or 'stopped', got 'paused'",
        "F:7: pipeline 'p': connector 'c': type must be 'source' or 'destination', got 'sink'",
        "F:8: pipeline 'p': connector 'd': 'type' is required",
        "F:9: pipeline 'p': connector 'e': settings.nested must be a single value, got a mapping",
        "F:10: pipeline 'p': connector 'f': 'plugin' is required",
        "F:12: pipeline 'p': processor 'w': workers must be >= 0, got -1",
        "F:13: pipeline 'p': processor 'v': workers must be an integer, got 'many'",
        "F:14: pipeline 'p': processor 't': 'type' is the pre-2.2 name of 'plugin'; give only 'plugin'",
        "F:15: pipeline 'p': processor 'u': 'plugin' is required",
        "F:16: pipeline 'p': dead-letter-queue: window-size must be >= 0, got -2",
        "F:17: pipeline 'p'.engine.batch-size must be >= 1, got 0",
        "F:17: pipeline 'p'.engine.trigger-interval: invalid duration 'soon' (expected e.g. 500ms, 5s, 1m30s)",
        "F:18: pipeline must be a mapping, got the value 'just-a-string'",
    ]


def test_processor_type_is_accepted_as_old_name_of_plugin(tmp_path):
    path = write(tmp_path, "p.yaml", "version: 2.0\npipelines:\n  - id: p\n    processors:\n      - {id: x, type: filter}\n")
    result = load_files([path], env={})
    assert result.problems == []
    assert result.pipelines[0].processors[0].plugin == "filter"


@pytest.mark.parametrize(
    "version, message",
    [
        ("1.1", "unsupported version '1.1'; supported: 2, 2.0, 2.1, 2.2 (version 1.x is deprecated in Conduit; "
                "convert the file to 2.2)"),
        ("3.0", "unsupported version '3.0'; supported: 2, 2.0, 2.1, 2.2"),
    ],
)
def test_unsupported_versions(tmp_path, version, message):
    assert problems_of(tmp_path, f"version: {version}\npipelines: []\n") == [f"F:1: {message}"]


def test_missing_version_and_empty_file(tmp_path):
    assert problems_of(tmp_path, "pipelines: []\n") == [
        "F:1: 'version' is required (this cdcflow reads 2, 2.0, 2.1, 2.2)"
    ]
    empty = write(tmp_path, "empty.yaml", "# nothing\n")
    assert [str(p) for p in load_files([empty]).problems] == [
        f"{empty}: file holds no configuration (expected 'version' and 'pipelines')"
    ]


def test_missing_file(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    problems = load_files([missing]).problems
    assert problems == [Problem(missing, 0, "cannot read file: No such file or directory")]
    assert str(problems[0]) == f"{missing}: cannot read file: No such file or directory"


def test_problems_are_sorted_by_file_then_line(tmp_path):
    a = write(tmp_path, "a.yaml", "version: 2.2\npipelines:\n  - id: x\n    bad: 1\n  - id: x\n")
    b = write(tmp_path, "b.yaml", "version: 2.2\npipelines:\n  - {id: y, status: wrong}\n")
    problems = load_files([b, a], env={}).problems
    assert [(Path(p.file).name, p.line) for p in problems] == [("b.yaml", 3), ("a.yaml", 4), ("a.yaml", 5)]


def test_nested_default_is_a_problem_not_a_wrong_value(tmp_path):
    path = write(tmp_path, "nested.yaml", """
        version: 2.2
        pipelines:
          - id: p
            connectors:
              - id: src
                type: source
                plugin: generator
                settings:
                  path: ${OUT:-${HOME}/x}
    """)
    result = load_files([path], env={"HOME": "/home/u"})
    assert [(p.line, "nested variable reference" in p.message) for p in result.problems] == [(9, True)]


def test_micro_batch_duration(tmp_path):
    path = write(tmp_path, "mbd.yaml", """
        version: 2.2
        engine:
          micro-batch-duration: 250ms
        pipelines:
          - id: p
            engine:
              trigger-interval: "2"
          - id: q
            engine:
              micro-batch-duration: -1s
    """)
    result = load_files([path], env={})
    by_id = {p.id: p for p in result.pipelines}
    assert by_id["p"].engine.micro_batch_duration == 0.25 and by_id["p"].engine.trigger_interval == 2.0
    assert [p.line for p in result.problems] == [10]
    assert "must not be negative" in result.problems[0].message
