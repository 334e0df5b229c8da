"""Conduit's own pipeline files through ``cdcflow validate`` and ``cdcflow run``.

The files under ``conduit/examples`` are copies of Conduit's example pipelines, provisioning test
data and the pipeline examples of its documentation (each file's source: ``SOURCES.md`` there).
Each is validated and the outcome compared with the measurement below: valid, or refused for the
reasons listed. Most refusals are of files Conduit cannot run either:

- ``incomplete``: a documentation fragment showing one connector (a running pipeline without a
  source or a destination; Conduit provisions it and fails it when it starts);
- ``placeholder``: a reference configuration whose required settings are empty strings;
- ``not-built-in``: a connector or processor cdcflow does not build in (Conduit's `postgres`,
  `s3`, or a standalone plugin the page builds): installed as a standalone plugin, it runs;
- ``yaml``: not valid YAML (broken documentation blocks); ``empty``: an empty file;
- ``duplicate-id``: Conduit's own parser test of a duplicate pipeline id;
- ``not-a-pipeline-file``: a block of Conduit's service configuration (``pipelines.exit-on-degraded``);
- ``outdated``: settings Conduit's current connectors refuse too (the generator's old
  ``format.options: "id:int,..."`` and ``rate: 2s``, a ``json.decode`` field without ``.Payload``);

Every file that validates uses only ``generator``, ``file`` and ``log``: each runs through
``cdcflow run --until-idle`` (``test_conduit_example_runs``), Conduit's ``file-to-file.yaml``
with Conduit's result (``test_conduits_file_to_file_example_runs_with_conduits_result``).
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import yaml

EXAMPLES = Path(__file__).parent / "conduit" / "examples"
FILES = sorted(p.name for p in EXAMPLES.glob("*.yaml"))

#: a refusal's category, by the first rule its message matches
RULES = [
    ("yaml", r"YAML syntax error"),
    ("not-built-in", r"plugin '[^']+' not found"),
    ("incomplete", r"has no (source|destination) connector|'(type|plugin)' is required"),
    ("placeholder", r"value is required \(rule: required\)|format '' must be one of|set servers or uri"
                    r"|needs to be provided"),
    ("duplicate-id", r"duplicate pipeline id"),
    ("empty", r"file holds no configuration"),
    ("not-a-pipeline-file", r"pipelines must be a list, got a mapping"),
    ("outdated", r"'format\.options': unrecognized|'rate': value '2s'|must match '\^"),
]

#: measured on these files: the categories of each refused one (a file not listed validates)
REFUSED = {
    "changelog-2024-10-15-pipelines-exit-on-degraded-1.yaml": {'not-a-pipeline-file'},
    "changelog-2025-02-04-pipelines-exit-on-error-1.yaml": {'not-a-pipeline-file'},
    "changelog-2025-05-06-rabbitmq-connector-0-3-0-1.yaml": {'yaml'},
    "changelog-2025-05-07-dynamodb-connector-0-3-0-1.yaml": {'incomplete'},
    "changelog-2025-05-07-dynamodb-connector-0-3-0-2.yaml": {'incomplete'},
    "conduit-config-yaml-v1-pipelines1-success.yaml": {'incomplete', 'not-built-in'},
    "conduit-config-yaml-v1-pipelines2-duplicate-pipeline-id.yaml": {'duplicate-id', 'incomplete', 'not-built-in'},
    "conduit-config-yaml-v1-pipelines3-empty.yaml": {'empty'},
    "conduit-config-yaml-v1-pipelines4-invalid-yaml.yaml": {'yaml'},
    "conduit-config-yaml-v1-pipelines5-env-vars.yaml": {'incomplete', 'not-built-in'},
    "conduit-config-yaml-v2-pipelines1-success.yaml": {'incomplete', 'not-built-in'},
    "conduit-config-yaml-v2-pipelines2-duplicate-pipeline-id.yaml": {'duplicate-id', 'incomplete', 'not-built-in'},
    "conduit-config-yaml-v2-pipelines3-empty.yaml": {'empty'},
    "conduit-config-yaml-v2-pipelines4-invalid-yaml.yaml": {'yaml'},
    "conduit-config-yaml-v2-pipelines5-env-vars.yaml": {'incomplete', 'not-built-in'},
    "conduit-config-yaml-v2-pipelines6-bwc.yaml": {'incomplete', 'not-built-in'},
    "conduit-pipelines-pipeline-with-standalone-connector.yaml": {'not-built-in'},
    "conduit-processors-pipeline-extract-field-transform.yaml": {'not-built-in', 'outdated'},
    "conduit-test-different-pipeline-file-types-another-pipeline.yaml": {'empty'},
    "conduit-test-different-pipeline-file-types-pipelines-conduit-rocks.yaml": {'empty'},
    "conduit-test-different-pipeline-file-types-pipelines-nested-p.yaml": {'empty'},
    "conduit-test-pipelines1-pipelines.yaml": {'not-built-in'},
    "developing-1-processors-1-building-1.yaml": {'not-built-in'},
    "developing-1-processors-index-1.yaml": {'incomplete', 'not-built-in'},
    "using-4-pipelines-0-configuration-file-1.yaml": {'placeholder'},
    "using-5-connectors-10-list-1-file-1.yaml": {'incomplete', 'placeholder'},
    "using-5-connectors-10-list-1-file-2.yaml": {'incomplete', 'placeholder'},
    "using-5-connectors-10-list-15-box-1.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-17-chaos-1.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-17-chaos-2.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-2-generator-1.yaml": {'incomplete'},
    "using-5-connectors-10-list-2-generator-2.yaml": {'incomplete'},
    "using-5-connectors-10-list-2-generator-3.yaml": {'incomplete', 'placeholder'},
    "using-5-connectors-10-list-22-dropbox-1.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-22-dropbox-2.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-23-dynamodb-1.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-23-dynamodb-2.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-29-google-drive-1.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-3-kafka-1.yaml": {'incomplete', 'placeholder'},
    "using-5-connectors-10-list-3-kafka-2.yaml": {'yaml'},
    "using-5-connectors-10-list-33-http-1.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-33-http-2.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-35-influxdb-1.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-35-influxdb-2.yaml": {'yaml'},
    "using-5-connectors-10-list-38-mongo-1.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-38-mongo-2.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-39-mysql-1.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-39-mysql-2.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-4-log-1.yaml": {'incomplete'},
    "using-5-connectors-10-list-48-rabbitmq-1.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-48-rabbitmq-2.yaml": {'yaml'},
    "using-5-connectors-10-list-5-postgres-1.yaml": {'not-built-in'},
    "using-5-connectors-10-list-5-postgres-2.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-5-postgres-3.yaml": {'yaml'},
    "using-5-connectors-10-list-55-snowflake-1.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-55-snowflake-2.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-6-s3-1.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-6-s3-2.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-7-activemq-1.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-10-list-7-activemq-2.yaml": {'incomplete', 'not-built-in'},
    "using-5-connectors-9-configuration-parameters-0-output-format-1.yaml": {'outdated'},
    "using-5-connectors-9-configuration-parameters-0-output-format-2.yaml": {'outdated'},
    "using-6-processors-0-getting-started-1.yaml": {'incomplete', 'outdated'},
    "using-6-processors-0-getting-started-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-avro-decode-1.yaml": {'incomplete'},
    "using-6-processors-1-builtin-avro-decode-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-avro-encode-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-avro-encode-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-avro-encode-3.yaml": {'incomplete'},
    "using-6-processors-1-builtin-base64-decode-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-base64-decode-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-base64-encode-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-base64-encode-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-base64-encode-3.yaml": {'incomplete'},
    "using-6-processors-1-builtin-clone-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-clone-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-cohere-command-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-cohere-command-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-cohere-embed-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-cohere-embed-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-cohere-rerank-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-cohere-rerank-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-custom-javascript-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-custom-javascript-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-error-1.yaml": {'incomplete'},
    "using-6-processors-1-builtin-error-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-field-convert-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-field-convert-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-field-convert-3.yaml": {'incomplete'},
    "using-6-processors-1-builtin-field-convert-4.yaml": {'incomplete'},
    "using-6-processors-1-builtin-field-convert-5.yaml": {'incomplete'},
    "using-6-processors-1-builtin-field-exclude-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-field-exclude-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-field-exclude-3.yaml": {'incomplete'},
    "using-6-processors-1-builtin-field-rename-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-field-rename-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-field-set-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-field-set-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-field-set-3.yaml": {'incomplete'},
    "using-6-processors-1-builtin-field-set-4.yaml": {'yaml'},
    "using-6-processors-1-builtin-filter-1.yaml": {'incomplete'},
    "using-6-processors-1-builtin-filter-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-json-decode-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-json-decode-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-json-decode-3.yaml": {'incomplete'},
    "using-6-processors-1-builtin-json-encode-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-json-encode-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-json-encode-3.yaml": {'incomplete'},
    "using-6-processors-1-builtin-ollama-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-ollama-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-openai-embeddings-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-openai-embeddings-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-openai-textgen-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-openai-textgen-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-split-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-split-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-unwrap-debezium-1.yaml": {'incomplete'},
    "using-6-processors-1-builtin-unwrap-debezium-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-unwrap-kafkaconnect-1.yaml": {'incomplete'},
    "using-6-processors-1-builtin-unwrap-kafkaconnect-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-unwrap-opencdc-1.yaml": {'incomplete'},
    "using-6-processors-1-builtin-unwrap-opencdc-2.yaml": {'incomplete'},
    "using-6-processors-1-builtin-webhook-http-1.yaml": {'incomplete', 'placeholder'},
    "using-6-processors-1-builtin-webhook-http-2.yaml": {'yaml'},
    "using-6-processors-2-conditions-1.yaml": {'incomplete'},
    "using-6-processors-4-processor-concurrency-1.yaml": {'incomplete', 'not-built-in'},
    "using-7-other-features-0-pipeline-recovery-1.yaml": {'not-a-pipeline-file'},
    "using-7-other-features-0-pipeline-recovery-2.yaml": {'not-a-pipeline-file'},
    "using-7-other-features-2-dead-letter-queue-1.yaml": {'incomplete'},
    "using-7-other-features-4-record-routing-1.yaml": {'not-built-in'},
    "using-7-other-features-4-record-routing-2.yaml": {'yaml'},
    "using-8-guides-build-ai-summarize-pipeline-1.yaml": {'incomplete'},
    "using-8-guides-build-ai-summarize-pipeline-2.yaml": {'not-built-in', 'placeholder'},
    "using-8-guides-build-generator-to-log-pipeline-1.yaml": {'incomplete'},
    "using-8-guides-build-generator-to-log-pipeline-2.yaml": {'outdated'},}


def categories(problems: list[str]) -> set[str]:
    out = set()
    for message in problems:
        for name, rule in RULES:
            if re.search(rule, message):
                out.add(name)
                break
        else:
            out.add(f"unexpected: {message}")
    return out


def _validate(name: str, monkeypatch):
    from cdcflow.pipeline.validate import validate_files

    monkeypatch.chdir(EXAMPLES)
    return validate_files([name])


@pytest.mark.parametrize("name", FILES)
def test_conduit_pipeline_file_validates_or_is_refused_as_measured(name, monkeypatch):
    """Go templates in five of the files are read (runtime/gotemplate.py): what refuses those is
    their other reasons only."""
    result = _validate(name, monkeypatch)
    expected = set(REFUSED.get(name, ()))
    assert categories([p.message for p in result.problems]) == expected, [p.message for p in result.problems]


def test_the_measurement():
    """151 of Conduit's files: 16 validate; of the 135 refused, 5 need only connectors cdcflow does
    not build in, the rest Conduit cannot run either."""
    assert len(FILES) == 151 and set(REFUSED) <= set(FILES)
    assert len(FILES) - len(REFUSED) == 16
    only_plugins = [n for n, c in REFUSED.items() if c == {"not-built-in"}]
    assert len(only_plugins) == 5


def test_conduits_warnings_are_warned(monkeypatch):
    """Where Conduit's parser warns (github.com/ConduitIO/conduit, pkg/provisioning/config/yaml:
    unknown keys, unknown versions, unset variables), validate warns and goes on."""
    names = ("conduit-config-yaml-v2-pipelines1-success.yaml", "conduit-config-yaml-v2-pipelines5-env-vars.yaml")
    warned = {n: [w.message for w in _validate(n, monkeypatch).warnings] for n in names}
    assert any("unknown key 'unknownField'" in w for w in warned["conduit-config-yaml-v2-pipelines1-success.yaml"])
    assert any("unknown version '2.12'" in w for w in warned["conduit-config-yaml-v2-pipelines1-success.yaml"])
    assert any("TEST_PARSER_AWS_URL" in w for w in warned["conduit-config-yaml-v2-pipelines5-env-vars.yaml"])


RUNNABLE = [n for n in FILES if n not in REFUSED]
INPUT = b"first line\nsecond line\nthird line\n"


def _bounded(text: str, tmp: Path) -> str:
    """The file as written, except what a bounded test run needs: a ``recordCount`` for a
    generator without one (Conduit's generators run forever) and paths moved under ``tmp``."""
    docs = list(yaml.safe_load_all(text))
    changed = False
    for doc in docs:
        for pipe in (doc or {}).get("pipelines") or []:
            dlq_settings = (pipe.get("dead-letter-queue") or {}).get("settings") or {}
            if dlq_settings.get("path"):
                dlq_settings["path"] = str(tmp / Path(dlq_settings["path"]).name)
                changed = True
            for conn in pipe.get("connectors") or []:
                settings = conn.setdefault("settings", {}) or {}
                conn["settings"] = settings
                if conn.get("plugin", "").endswith("generator") and "recordCount" not in settings:
                    settings["recordCount"] = "3"
                    changed = True
                if settings.get("path"):  # absolute under ``tmp``: the runs share a Spark context, whose
                    settings["path"] = str(tmp / Path(settings["path"]).name)  # workers have their own cwd
                    changed = True
    return yaml.safe_dump_all(docs, sort_keys=False) if changed else text


def _cdcflow_run(tmp: Path, pipeline: Path) -> subprocess.CompletedProcess:
    cli = Path(sys.executable).with_name("cdcflow")
    return subprocess.run([str(cli), "run", "--until-idle", "--master", "local[1]", "--state-dir",
                           str(tmp / "state"), str(pipeline)], cwd=tmp, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYSPARK_PYTHON": sys.executable})


@pytest.fixture(scope="module")
def shared_spark(tmp_path_factory):
    """One local[1] Spark context for the example runs (each ``run_files`` joins it): a JVM start
    per file would double the time. The file-to-file journey below goes through the CLI."""
    from cdcflow.engine.spark.session import start_session
    from cdcflow.engine.state import StateDir

    info = start_session("local[1]", {}, StateDir(tmp_path_factory.mktemp("examples-spark")).create())
    yield info.context
    if info.owned:
        info.stop()


def _run_in_process(tmp: Path, pipeline: Path, monkeypatch) -> None:
    from cdcflow.engine.runner import run_files

    monkeypatch.chdir(tmp)  # the files' relative paths are the process's, as in Conduit
    outcome = run_files([str(pipeline)], until_idle=True, progress=False, state_dir=str(tmp / "state"))
    assert outcome.exit_code == 0, outcome


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("name", RUNNABLE)
def test_conduit_example_runs(name, tmp_path, shared_spark, monkeypatch):
    """Each file that validates runs (bounded); its file destinations get records in the JSON form
    (Conduit's DLQ example: every record fails its processor and lands in the DLQ file)."""
    if name == "conduit-pipelines-javascript-processor.yaml":
        pytest.importorskip("py_mini_racer")
    text = _bounded((EXAMPLES / name).read_text(), tmp_path)
    sources, destinations = [], []
    for doc in yaml.safe_load_all(text):
        for pipe in (doc or {}).get("pipelines") or []:
            if pipe.get("status", "running") != "running":
                continue
            for conn in pipe.get("connectors") or []:
                path = (conn.get("settings") or {}).get("path")
                if path and conn["plugin"].endswith("file"):
                    (sources if conn["type"] == "source" else destinations).append(tmp_path / path)
            dlq = pipe.get("dead-letter-queue") or {}
            if dlq.get("plugin", "").endswith("file"):
                destinations.append(tmp_path / dlq["settings"]["path"])
    for path in sources:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(INPUT)
    pipeline = tmp_path / name
    pipeline.write_text(text)
    _run_in_process(tmp_path, pipeline, monkeypatch)
    written = {}
    for path in destinations:
        written[path.name] = [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []
        assert all(set(r) == {"position", "operation", "metadata", "key", "payload"} for r in written[path.name])
    if name == "conduit-pipelines-javascript-processor.yaml":  # its description: each line prefixed
        assert [base64.b64decode(r["payload"]["after"]) for r in written["example.out"]] == [
            b"hi there " + line for line in INPUT.splitlines()]
    if name == "conduit-pipelines-pipeline-with-dlq.yaml":
        assert written["example.out"] == [] and len(written["dlq.out"]) == 1
        assert "float" in written["dlq.out"][0]["metadata"]["conduit.dlq.nack.error"]
    else:
        assert all(written.values()), {k: len(v) for k, v in written.items()}


@pytest.mark.slow
@pytest.mark.spark
def test_conduits_file_to_file_example_runs_with_conduits_result(tmp_path):
    """Conduit's examples/pipelines/file-to-file.yaml as written: each line of example.in becomes a
    record in example.out holding the line base64-encoded in payload.after, as its description
    says; key the line number, position the byte offset after the line, metadata file.path (and
    the source connector's Conduit metadata). Old code: the source refused the first line."""
    name = "conduit-pipelines-file-to-file.yaml"
    pipeline = tmp_path / name
    pipeline.write_bytes((EXAMPLES / name).read_bytes())
    (tmp_path / "example.in").write_bytes(INPUT + b"no newline at the end")
    done = _cdcflow_run(tmp_path, pipeline)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [orjson.loads(line) for line in (tmp_path / "example.out").read_bytes().splitlines()]
    lines = [b"first line", b"second line", b"third line", b"no newline at the end"]
    assert [base64.b64decode(r["payload"]["after"]) for r in records] == lines
    assert [base64.b64decode(r["key"]) for r in records] == [b"1", b"2", b"3", b"4"]
    assert [base64.b64decode(r["position"]) for r in records] == [b"11", b"23", b"34", b"55"]
    assert {r["operation"] for r in records} == {"create"} and {r["payload"]["before"] for r in records} == {None}
    assert all(r["metadata"]["file.path"] == "./example.in" for r in records)
    # Conduit's provisioning names it "file-to-file:example.in" (pipeline id, ":", connector id)
    assert {r["metadata"]["conduit.source.connector.id"] for r in records} == {"example.in"}


@pytest.mark.slow
@pytest.mark.spark
def test_conduits_debezium_output_format_example_runs(tmp_path, shared_spark, monkeypatch):
    """conduit-site's output-format page, first example (sdk.record.format: debezium/json with
    debezium.schema.name=employee), with the generator's current field settings for its outdated
    ``format.options: "name:string,company:string"``: each line is a Kafka Connect envelope named
    "employee" whose payload is the created record. Old code: debezium/json was refused."""
    name = "using-5-connectors-9-configuration-parameters-0-output-format-1.yaml"
    text = (EXAMPLES / name).read_text()
    text = text.replace('format.options: "name:string,company:string"',
                        'format.options.name: string\n          format.options.company: string')
    text = text.replace('recordCount: "10"', 'recordCount: "3"').replace('readTime: "1s"', 'readTime: "10ms"')
    pipeline = tmp_path / name
    pipeline.write_text(text.replace("/tmp/file-destination.txt", str(tmp_path / "out.txt")))
    _run_in_process(tmp_path, pipeline, monkeypatch)
    lines = (tmp_path / "out.txt").read_bytes().splitlines()
    envelopes = [orjson.loads(line) for line in lines]
    assert len(envelopes) == 3 and all(line.startswith(b'{"schema":{"type":"struct","name":"employee","fields":[')
                                       for line in lines)
    for e in envelopes:
        assert [f["field"] for f in e["schema"]["fields"]] == ["before", "after", "source", "op", "ts_ms",
                                                                "transaction"]
        after = e["payload"]["after"]
        assert set(after) == {"name", "company"} and e["payload"]["before"] is None
        assert e["payload"]["op"] in {"c", "u", "d", "r"}
        assert e["payload"]["source"]["conduit.source.connector.id"] == "source1"
