"""The journey matrix's machinery: formats, pipeline files and the `cdcflow run` stages (issue 14).

Everything a cell checks was produced by `cdcflow run` subprocesses on real services (the
session's Tansu broker and built-in registry from ``kafka_fixtures``, moto's S3 server from the
``helpers.s3_fixtures``, local files). The work is staged so the whole matrix costs five Spark starts:

1. ``generate``: the generator (every TiDB type, two tables, inserts/updates/deletes) → a file;
   the test then splices a DDL, a key-changing update and a closing resolved ts into it
   (``input.jsonl``, the expected stream: every cell is compared with it);
2. ``produce``: ``input.jsonl`` → each source format (one pipeline per format, one run);
3. ``pairs``: each selected (source, destination) pair, one pipeline each, one run;
4. ``readback``: each pair's destination → a ``file`` destination (OpenCDC JSON lines), one run.

Which pairs run is taken from the collected tests (``pytest_collection_modifyitems``), so the
default subset and the slow full matrix share the stages when both are selected.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from confluent_kafka import KafkaException

from helpers.journeys import DDL_TABLE, read_lines
from helpers.kafka import create_topic

TABLES = ("shop.orders", "shop.items")
RECORDS = 20  # generator records: every value variant (random, max, min, NULL) in both tables
SEED = 14
#: the DDL goes after this many generator records of the input (a table version starts there)
DDL_AFTER = 10
KEY_CHANGE_OFFSET = 1000  # the key-changing update's old key is its new key + this
RUN_TIMEOUT = 600
_PAIRS_KEY = pytest.StashKey[set]()


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: only the cells that will run
def pytest_collection_modifyitems(config, items):
    pairs = set()
    for item in items:
        spec = getattr(item, "callspec", None)
        if spec is not None and "pair" in spec.params and item.get_closest_marker("journey"):
            pairs.add(tuple(spec.params["pair"]))
    config.stash[_PAIRS_KEY] = pairs


def pytest_configure(config):
    config.addinivalue_line("markers", "journey: a cell of the journey matrix (tests/journeys)")


# -- the formats ------------------------------------------------------------------------------
@dataclass
class Services:
    kafka: str
    registry: str
    s3_endpoint: str
    bucket: str
    root: Path
    run_id: str


def topics(loc: str) -> list[str]:
    """The topics a kafka destination at ``loc`` writes (rule ``<loc>_{schema}_{table}``)."""
    return [f"{loc}_{t.replace('.', '_')}" for t in TABLES]


def _kafka(services: Services, loc: str, side: str, protocol: str, **options: str) -> dict:
    settings = {"servers": services.kafka, "protocol": protocol, **options}
    if side == "source":
        settings["topics"] = ",".join(topics(loc))
        settings["group.id"] = f"{loc}-{uuid.uuid4().hex[:8]}"  # one group per pipeline
    else:
        settings["topic"] = f"{loc}_{{schema}}_{{table}}"
        settings["partition-num"] = "1"
    return {"plugin": "builtin:kafka", "settings": settings}


def connector(fmt: str, services: Services, loc: str, side: str) -> dict:
    """Plugin and settings of ``fmt`` at location ``loc`` (a topic prefix, directory or file)."""
    if fmt == "kafka-avro":
        opts = {"enable-tidb-extension": "true", "avro-enable-watermark": "true",
                "schema-registry": services.registry}
        return _kafka(services, loc, side, "avro", **opts)
    if fmt == "kafka-canal-json":
        opts = {"enable-tidb-extension": "true"}
        if side == "destination":
            opts["content-compatible"] = "true"
        return _kafka(services, loc, side, "canal-json", **opts)
    if fmt == "kafka-open-protocol":
        return _kafka(services, loc, side, "open-protocol")
    if fmt == "storage-csv":  # the S3 leg
        return {"plugin": "builtin:storage", "settings": {
            "uri": f"s3://{services.bucket}/{loc}", "protocol": "csv", "include-commit-ts": "true",
            "s3.endpoint": services.s3_endpoint, "s3.access-key": "testing",
            "s3.secret-access-key": "testing", "s3.region": "us-east-1"}}
    if fmt == "storage-canal-json":
        return {"plugin": "builtin:storage", "settings": {
            "uri": str(services.root / "lake" / loc), "protocol": "canal-json",
            "enable-tidb-extension": "true", "content-compatible": "true"}}
    if fmt == "file":
        settings = {"path": str(services.root / "files" / f"{loc}.jsonl")}
        if side == "source":  # the JSON form's records, not raw lines
            settings["format"] = "opencdc/json"
        return {"plugin": "builtin:file", "settings": settings}
    raise AssertionError(fmt)


def slug(*parts: str) -> str:
    return "_".join(p.replace("-", "") for p in parts)


# -- pipelines and runs ------------------------------------------------------------------------
def pipeline(pid: str, source: dict, destination: dict, dlq_path: Path) -> dict:
    """One pipeline; every nack goes to its own DLQ file (window 0), so a cell sees its rejects."""
    return {
        "id": pid, "status": "running",
        "connectors": [{"id": "src", "type": "source", **source}, {"id": "dst", "type": "destination", **destination}],
        "dead-letter-queue": {"plugin": "builtin:file", "settings": {"path": str(dlq_path)},
                              "window-size": 0, "window-nack-threshold": 0},
    }


@dataclass
class RunResult:
    stage: str
    returncode: int
    stderr: str
    seconds: float

    def failures_of(self, pid: str) -> list[str]:
        """Lines of the run's log that name pipeline ``pid`` with an error."""
        return [ln for ln in self.stderr.splitlines() if f"'{pid}'" in ln or f"{pid}/" in ln or f"{pid}:" in ln
                if "error" in ln.lower() or "fail" in ln.lower() or "stopp" in ln.lower()]


def cdcflow_run(root: Path, stage: str, pipelines: list[dict]) -> RunResult:
    import time

    path = root / f"{stage}.yaml"
    path.write_text(yaml.safe_dump({"version": "2.2", "engine": {"state-dir": str(root / "state"),
                                                                 "batch-size": 1000},
                                    "pipelines": pipelines}, sort_keys=False))
    exe = Path(sys.executable).with_name("cdcflow")
    started = time.monotonic()
    proc = subprocess.run([str(exe), "run", str(path), "--until-idle", "--master", "local[2]"],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, env={**os.environ})
    result = RunResult(stage, proc.returncode, proc.stderr + proc.stdout, time.monotonic() - started)
    (root / f"{stage}.log").write_text(result.stderr)
    return result


# -- the input ---------------------------------------------------------------------------------
def _ts_of(record: dict) -> int:
    """TiCDC commit ts of a generator record: its createdAt milliseconds as the TSO's physical part."""
    return (int(record["metadata"]["opencdc.createdAt"]) // 1_000_000) << 18


def splice_input(generated: list[dict]) -> list[dict]:
    """The generator's records plus what it cannot make: a DDL in the middle, an update that changes
    its row's key, and a resolved ts after the last row."""
    records = [json.loads(json.dumps(r)) for r in generated]
    for r in records:
        for k in [k for k in r["metadata"] if k.startswith("conduit.")]:
            del r["metadata"][k]
    moved = next(r for r in records[DDL_AFTER:] if r["operation"] == "update")
    moved["payload"]["before"]["id"] = moved["key"]["id"] + KEY_CHANGE_OFFSET
    ddl_ts = _ts_of(records[DDL_AFTER - 1]) + 1
    schema, table = DDL_TABLE.split(".")
    ddl = {"position": "", "operation": "create", "key": None, "metadata": {
        "cdcflow.control": "ddl", "opencdc.collection": DDL_TABLE,
        "opencdc.createdAt": str((ddl_ts >> 18) * 1_000_000), "ticdc.commit-ts": str(ddl_ts),
        "ticdc.schema": schema, "ticdc.table": table, "ticdc.ddl-type": "7"},
        "payload": {"before": None, "after": {
            "query": f"ALTER TABLE `{schema}`.`{table}` ADD INDEX `idx_c_int`(`c_int`)", "type": 7,
            "schema": schema, "table": table, "commitTs": ddl_ts}}}
    resolved_ts = _ts_of(records[-1]) + (1 << 18)
    resolved = {"position": "", "operation": "create", "key": None, "metadata": {
        "cdcflow.control": "resolved", "opencdc.createdAt": str((resolved_ts >> 18) * 1_000_000),
        "ticdc.resolved-ts": str(resolved_ts)}, "payload": {"before": None, "after": {"ts": resolved_ts}}}
    return [*records[:DDL_AFTER], ddl, *records[DDL_AFTER:], resolved]


@dataclass
class Matrix:
    services: Services
    input: list[dict]
    runs: dict[str, RunResult] = field(default_factory=dict)
    pairs: set = field(default_factory=set)

    def loc_in(self, fmt: str) -> str:
        return slug(self.services.run_id, "in", fmt)

    def loc_pair(self, src: str, dst: str) -> str:
        return slug(self.services.run_id, src, "to", dst)

    def pair_id(self, src: str, dst: str) -> str:
        return slug("pair", src, dst)

    def connector_settings(self, fmt: str, loc: str) -> dict:
        return connector(fmt, self.services, loc, "destination")["settings"]

    def readback_path(self, src: str, dst: str) -> Path:
        return self.services.root / "out" / f"{slug(src, 'to', dst)}.jsonl"

    def dlq_path(self, pid: str) -> Path:
        return self.services.root / "dlq" / f"{pid}.jsonl"


@pytest.fixture(scope="session")
def journey(request, kafka_broker, schema_registry, moto_server, tmp_path_factory):  # noqa: F811
    """Runs the four stages for every selected pair once per session; yields the ``Matrix``."""
    import s3fs

    root = tmp_path_factory.mktemp("journeys")
    bucket = "journeys" + uuid.uuid4().hex[:8]
    s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": moto_server},
                      skip_instance_cache=True).mkdir(bucket)
    services = Services(kafka_broker, schema_registry, moto_server, bucket, root, "j" + uuid.uuid4().hex[:6])
    pairs = sorted(request.config.stash.get(_PAIRS_KEY, set()))

    gen_out = root / "generated.jsonl"
    generator = {"plugin": "builtin:generator", "settings": {
        "format.type": "tidb", **{f"collections.{t}.format.type": "tidb" for t in TABLES},
        "operations": "create,update,delete", "recordCount": str(RECORDS), "partitions": "1", "seed": str(SEED)}}
    runs = {}
    runs["generate"] = cdcflow_run(root, "generate", [pipeline(
        "generate", generator, {"plugin": "builtin:file", "settings": {"path": str(gen_out)}},
        root / "dlq" / "generate.jsonl")])
    assert runs["generate"].returncode == 0, runs["generate"].stderr[-3000:]
    records = splice_input(read_lines(gen_out))
    matrix = Matrix(services, records, runs, set(pairs))
    input_file = connector("file", services, matrix.loc_in("file"), "destination")["settings"]["path"]
    Path(input_file).parent.mkdir(parents=True, exist_ok=True)
    Path(input_file).write_text("".join(json.dumps(r) + "\n" for r in records))
    file_source = {"plugin": "builtin:file", "settings": {"path": input_file, "format": "opencdc/json"}}

    sources = sorted({s for s, _ in pairs} - {"file"})
    produce = [pipeline(slug("produce", f), file_source, connector(f, services, matrix.loc_in(f), "destination"),
                        matrix.dlq_path(slug("produce", f))) for f in sources]
    if produce:
        runs["produce"] = cdcflow_run(root, "produce", produce)
    runs["pairs"] = cdcflow_run(root, "pairs", [
        pipeline(matrix.pair_id(s, d), connector(s, services, matrix.loc_in(s), "source"),
                 connector(d, services, matrix.loc_pair(s, d), "destination"), matrix.dlq_path(matrix.pair_id(s, d)))
        for s, d in pairs])
    for s, d in pairs:  # a destination that wrote nothing must not keep the other cells from being read
        if d.startswith("kafka-"):
            for topic in topics(matrix.loc_pair(s, d)):
                try:
                    create_topic(services.kafka, topic, 1)
                except KafkaException:  # it exists: the destination wrote to it
                    pass
    runs["readback"] = cdcflow_run(root, "readback", [
        pipeline(slug("readback", s, d), connector(d, services, matrix.loc_pair(s, d), "source"),
                 {"plugin": "builtin:file", "settings": {"path": str(matrix.readback_path(s, d))}},
                 matrix.dlq_path(slug("readback", s, d)))
        for s, d in pairs])
    yield matrix
