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


def test_unset_variable_becomes_empty_with_a_warning_at_its_line(tmp_path):
    """Conduit expands variables with Go's os.ExpandEnv, which makes an unset one "" (its
    pkg/provisioning/config/yaml/hooks.go); cdcflow does the same and says so."""
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
    assert result.problems == []
    assert [str(p) for p in result.warnings] == [
        f"{path}:9: environment variable 'NOT_SET_ANYWHERE' is not set: replaced by \"\" "
        "(use ${NOT_SET_ANYWHERE:-default} for a default)"
    ]
    assert result.pipelines[0].connectors[0].settings == {"secret": ""}


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


def test_unknown_keys_are_warnings_except_in_the_engine_section(tmp_path):
    """Conduit's parser logs an unknown field and goes on (pkg/provisioning/config/yaml/parser.go turns
    yaml's UnknownFieldError into warnings); cdcflow's own ``engine:`` section stays strict."""
    text = """
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
    """
    assert problems_of(tmp_path, text) == [
        "F:18: pipeline 'p'.engine: unknown key 'trigger_interval' (known: master, conf, trigger-interval, "
        "micro-batch-duration, batch-size, state-dir, state-options, state-lease, error-recovery.max-retries, "
        "error-recovery.min-delay, error-recovery.max-delay, error-recovery.backoff-factor, error-recovery.max-elapsed)",
    ]
    path = write(tmp_path, "w.yaml", text)
    result = load_files([path], env={})
    assert [(w.line, w.message) for w in result.warnings] == [
        (2, "configuration: unknown key 'extra' ignored (known: version, pipelines, engine)"),
        (5, "pipeline: unknown key 'colour' ignored (known: id, status, name, description, connectors, processors, "
            "dead-letter-queue, engine)"),
        (10, "pipeline 'p': connector: unknown key 'setting' ignored (known: id, type, plugin, name, settings, "
             "processors)"),
        (14, "pipeline 'p': processor: unknown key 'condtion' ignored (known: id, plugin, type, condition, settings, "
             "workers)"),
        (16, "pipeline 'p': dead-letter-queue: unknown key 'window' ignored (known: plugin, settings, window-size, "
             "window-nack-threshold)"),
    ]
    assert result.pipelines[0].processors[0].condition is None  # the misspelt key was not read


def test_duplicate_ids_are_problems_processor_ids_scoped_by_parent(tmp_path):
    """Processor ids are unique per parent, as Conduit scopes them (``<parent>:<id>``,
    pkg/provisioning/config/enrich.go): ``x`` on connector ``c`` and ``x`` on the pipeline are two."""
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
        f"{a}:10: pipeline 'p': duplicate processor id 'y' (first defined at {a}:9)",
        f"{b}:3: duplicate pipeline id 'p' (first defined at {a}:3)",
    ]
    assert [p.origin.file for p in result.pipelines] == [a]
    pipe = result.pipelines[0]
    assert [p.node_id for p in pipe.all_processors] == ["x", "y", "c:x"]


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


def test_unsupported_major_version(tmp_path):
    assert problems_of(tmp_path, "version: 3.0\npipelines: []\n") == [
        "F:1: unsupported version '3.0'; this cdcflow reads 2, 2.0, 2.1, 2.2, 1.0, 1.1 (and any 1.x or 2.x)"]


@pytest.mark.parametrize("version, warning", [
    ("2.5", "unknown version '2.5': read as version 2.2"),
    ("2.12", "unknown version '2.12': read as version 2.2"),
    ("1.12", "unknown version '1.12': read as version 1.1"),
])
def test_unknown_minor_versions_are_read_as_the_latest_of_their_major(tmp_path, version, warning):
    """Conduit's parser falls back to the newest version of the same major with a warning
    (pkg/provisioning/config/yaml/parser.go, parseVersion)."""
    path = write(tmp_path, "v.yaml", f"version: {version}\npipelines: []\n")
    result = load_files([path], env={})
    assert result.problems == [] and [(w.line, w.message) for w in result.warnings] == [(1, warning)]


def test_missing_version_is_read_as_2_2_and_empty_file(tmp_path):
    path = write(tmp_path, "nov.yaml", "pipelines:\n  - id: p\n")
    result = load_files([path], env={})
    assert result.problems == [] and [p.id for p in result.pipelines] == ["p"]
    assert [(w.line, w.message) for w in result.warnings] == [(1, "no 'version' given: read as version 2.2")]
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
    result = load_files([b, a], env={})
    assert [(Path(p.file).name, p.line) for p in result.problems] == [("b.yaml", 3), ("a.yaml", 5)]
    assert [(Path(p.file).name, p.line) for p in result.warnings] == [("a.yaml", 4)]


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


# -- Conduit's own parser test data (github.com/ConduitIO/conduit, commit bb6ce44,
# pkg/provisioning/config/yaml/v1/testdata/pipelines1-success.yml, copied as a fixture)
CONDUIT_V1 = Path(__file__).parent / "conduit" / "v1-pipelines1-success.yml"


def test_conduit_v1_file_reads_as_conduit_reads_it():
    """Version 1.x: pipelines, connectors and processors are mappings keyed by id; processors name
    their plugin with ``type``; a 1.12 document is read as 1.1; stopped pipelines may lack connectors."""
    result = load_files([str(CONDUIT_V1)], env={})
    assert result.problems == []
    by_id = {p.id: p for p in result.pipelines}
    assert list(by_id) == ["pipeline1", "pipeline2", "pipeline3"]
    p1 = by_id["pipeline1"]
    assert (p1.status, p1.name, p1.description) == ("running", "pipeline1", "desc1")
    (con1,) = p1.connectors
    assert (con1.id, con1.type, con1.plugin, con1.name) == ("con1", "source", "builtin:s3", "s3-source")
    assert con1.settings == {"aws.region": "us-east-1", "aws.bucket": "my-bucket"}
    assert [(p.node_id, p.plugin, p.settings) for p in p1.all_processors] == [
        ("pipeline1proc1", "js", {"additionalProp1": "string", "additionalProp2": "string"}),
        ("con1:proc1", "js", {"additionalProp1": "string", "additionalProp2": "string"}),
    ]
    dlq = p1.dead_letter_queue
    assert (dlq.plugin, dlq.settings, dlq.window_size, dlq.window_nack_threshold) == ("my-plugin", {"foo": "bar"}, 4, 2)
    p2 = by_id["pipeline2"]
    assert p2.status == "stopped" and [(c.id, c.type, c.settings) for c in p2.connectors] == [
        ("con2", "destination", {"path": "my/path"})]
    assert [p.node_id for p in p2.all_processors] == ["con2:con2proc1"]
    assert by_id["pipeline3"].connectors == [] and by_id["pipeline3"].status == "stopped"
    # lines 5 and 38 are where Conduit's own test (parse_warnings_test.go) expects its warnings
    assert [(w.line, w.message.split(":")[0]) for w in result.warnings] == [
        (2, "version 1.x is deprecated"),
        (5, "pipeline"),  # unknownField
        (38, "unknown version '1.12'"),
    ]


def test_conduit_env_vars_file(tmp_path):
    """Conduit's v2 testdata pipelines5-env-vars.yml (same commit): variables inside a value, and
    unset ones replaced by "" with a warning."""
    path = write(tmp_path, "env.yaml", """
        version: 2.0
        pipelines:
          - id: pipeline1
            status: running
            name: pipeline1
            description: desc1
            connectors:
              - id: con1
                type: source
                plugin: builtin:s3
                name: s3-source
                settings:
                  aws.secret: ${TEST_PARSER_AWS_SECRET}
                  aws.key: ${TEST_PARSER_AWS_KEY}
                  aws.url: my/${TEST_PARSER_AWS_URL}/url
    """)
    result = load_files([path], env={"TEST_PARSER_AWS_SECRET": "my-aws-secret", "TEST_PARSER_AWS_URL": "aws-url"})
    assert result.problems == []
    assert result.pipelines[0].connectors[0].settings == {
        "aws.secret": "my-aws-secret", "aws.key": "", "aws.url": "my/aws-url/url"}
    assert [w.line for w in result.warnings] == [14]


def test_object_store_state_settings(tmp_path):
    """engine.state-dir may be an object-store URI (kept as written, not joined to the file's
    directory); its options are the storage connector's object-store settings; the lease has a floor."""
    good = """
    version: 2.2
    engine:
      state-dir: s3://bucket/prefix/
      state-options:
        s3.endpoint: http://127.0.0.1:9000
        s3.secret-access-key: ${SECRET}
      state-lease: 10s
    pipelines:
      - id: p
        connectors:
          - {id: a, type: source, plugin: generator}
          - {id: b, type: destination, plugin: log}
    """
    result = load_files([write(tmp_path, "g.yaml", good)], env={"SECRET": "s"})
    assert result.problems == []
    engine = result.pipelines[0].engine
    assert engine.state_dir == "s3://bucket/prefix"
    assert engine.state_options == {"s3.endpoint": "http://127.0.0.1:9000", "s3.secret-access-key": "s"}
    assert engine.state_lease == 10.0
    bad = """
    version: 2.2
    engine:
      state-dir: s3://key:secret@bucket/prefix?endpoint=x
      state-options:
        s3.endpiont: http://127.0.0.1:9000
      state-lease: 1s
    pipelines:
      - id: p
        connectors:
          - {id: a, type: source, plugin: generator}
          - {id: b, type: destination, plugin: log}
    """
    problems = [str(p) for p in load_files([write(tmp_path, "b.yaml", bad)], env={}).problems]
    assert len(problems) == 3, problems
    assert "takes no user, password, query" in problems[0] and "secret" not in problems[0]
    assert "s3.endpiont" in problems[1] and "s3.endpoint" in problems[1]
    assert "state-lease must be at least 3s" in problems[2]
