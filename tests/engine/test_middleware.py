"""Conduit's connector middleware settings (``sdk.*``) applied by the engine around in-process plugins."""

from __future__ import annotations

import pytest

from cdcflow.engine.middleware import DestinationMiddleware, RateLimiter, SourceMiddleware, connector_settings
from cdcflow.registry import load_registry


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_rate_limiter_lets_a_burst_through_then_paces_as_go_rate_limiter_does():
    clock = FakeClock()
    limiter = RateLimiter(10.0, 5, clock=clock, sleep=clock.sleep)
    limiter.wait(5)  # the bucket starts full
    assert clock.slept == []
    limiter.wait(5)  # empty: 5 tokens take half a second at 10/s
    assert clock.slept == [pytest.approx(0.5)]
    clock.now += 10  # a long pause refills to the burst, not beyond
    limiter.wait(5)
    limiter.wait(1)
    assert clock.slept[1:] == [pytest.approx(0.1)]


def test_destination_middleware_writes_in_chunks_and_joins_per_record_results():
    calls: list[list[int]] = []

    def write(chunk):
        calls.append(list(chunk))
        return [None if r % 4 else f"bad {r}" for r in chunk] if any(r % 4 == 0 for r in chunk) else None

    mw = DestinationMiddleware(batch_size=3)
    assert mw.write(write, list(range(1, 9))) == [None, None, None, "bad 4", None, None, None, "bad 8"]
    assert calls == [[1, 2, 3], [4, 5, 6], [7, 8]]
    calls.clear()
    assert DestinationMiddleware(batch_size=3).write(write, [1, 2, 3]) is None and calls == [[1, 2, 3]]


def test_rate_limited_destination_waits_for_its_tokens_chunk_by_chunk():
    clock = FakeClock()
    mw = DestinationMiddleware(limiter=RateLimiter(100.0, 25, clock=clock, sleep=clock.sleep))
    sizes: list[int] = []
    assert mw.write(lambda chunk: sizes.append(len(chunk)), list(range(100))) is None
    assert sizes == [25, 25, 25, 25]  # a burst at most per write, as Conduit's middleware splits
    assert sum(clock.slept) == pytest.approx(0.75)  # 75 records beyond the first burst at 100/s


def test_settings_split_between_plugin_and_middleware_for_in_process_plugins_only():
    reg = load_registry()
    file_info = reg.connector("file")
    settings = file_info.validate("destination", {"path": "/tmp/x", "sdk.batch.size": "7", "sdk.rate.perSecond": "2.5"})
    assert "sdk.batch.size" not in connector_settings(settings, file_info)
    mw = DestinationMiddleware.of(settings, file_info)
    assert mw.batch_size == 7 and mw.limiter is not None and (mw.limiter.rate, mw.limiter.burst) == (2.5, 3)
    gen = reg.connector("generator")
    src = gen.validate("source", {"recordCount": "5", "sdk.batch.size": "100", "sdk.batch.delay": "10ms"})
    assert SourceMiddleware.of(src, gen).read_size(10_000) == 100

    class Standalone:  # a standalone plugin applies its own middleware: it gets every setting
        type = "standalone"

    assert connector_settings(settings, Standalone()) == settings
    assert not DestinationMiddleware.of(settings, Standalone()).active


@pytest.mark.parametrize("plugin,side", [("file", "destination"), ("generator", "source"), ("log", "destination"),
                                         ("storage", "destination"), ("storage", "source")])
def test_every_built_in_connector_takes_conduit_sdk_settings(plugin, side):
    info = load_registry().connector(plugin)
    spec = info.spec_for(side)
    assert {"sdk.batch.size", "sdk.batch.delay", "sdk.schema.extract.payload.enabled"} <= set(spec)
    assert ("sdk.rate.perSecond" in spec) is (side == "destination")


def test_a_record_format_cdcflow_cannot_write_is_refused_not_ignored():
    from cdcflow.errors import ConfigError

    info = load_registry().connector("file")
    with pytest.raises(ConfigError) as err:
        info.validate("destination", {"path": "/tmp/x", "sdk.record.format": "avro/json"})
    assert err.value.parameter == "sdk.record.format" and "debezium/json" in str(err.value)


def test_a_record_format_for_a_destination_writing_its_own_format_is_refused_by_validate(tmp_path):
    """Old code: every format but opencdc/json was refused by the spec, for every destination."""
    from cdcflow.pipeline.validate import validate_files

    path = tmp_path / "p.yaml"
    path.write_text(f"""\
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {{recordCount: "1", format.type: tidb}}}}
      - id: lake
        type: destination
        plugin: builtin:storage
        settings: {{uri: "{tmp_path}/lake", sdk.record.format: debezium/json}}
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {tmp_path}/out.txt
          sdk.record.format: template
          sdk.record.format.options: "{{{{ Payload.After.id }}}}"
""")
    problems = [p.message for p in validate_files([str(path)]).problems]
    assert len(problems) == 1 and "connector 'lake'" in problems[0] and "writes its own format" in problems[0]
    path.write_text(path.read_text().replace("Payload.After.id }}", "Payload.After.id"))
    problems = [p.message for p in validate_files([str(path)]).problems]
    assert any("connector 'out'" in p and "template" in p for p in problems), problems


def test_schema_extraction_attaches_conduits_subjects_and_registers_the_schemas(tmp_path):
    """conduit-connector-sdk source_middleware.go (SourceWithSchemaExtraction, SourceWithSchemaContext):
    the subject is [<context>:][<collection>.]<key|payload>, the context defaulting to the connector
    id; a record that names its schema keeps it; raw data gets none. Old code: accepted, not applied."""
    import json

    from cdcflow.record import Record
    from cdcflow.schemas import SchemaStore

    store = SchemaStore(tmp_path / "schemas")
    info = load_registry().connector("generator")
    settings = info.validate("source", {"recordCount": "1", "format.type": "tidb",
                                        "sdk.schema.extract.payload.enabled": "true",
                                        "sdk.schema.extract.key.enabled": "true"})
    mw = SourceMiddleware.of(settings, info, "gen")
    mw.extraction._store = store
    named = {"opencdc.payload.schema.subject": "theirs", "opencdc.payload.schema.version": "3"}
    batch = [Record(b"1", metadata={"opencdc.collection": "users"}, key={"id": 1}, after={"id": 1, "name": "a"}),
             Record(b"2", metadata={"opencdc.collection": "users"}, key={"id": 2}, after={"id": 2, "name": "b"}),
             Record(b"3", metadata={}, key=b"raw", before={"id": 3}, after=None),
             Record(b"4", metadata={"opencdc.collection": "users"}, after={"id": 4, "extra": True}),
             Record(b"5", metadata=dict(named), key=b"k", after={"x": 1})]
    mw.apply(batch)
    meta = [r.metadata for r in batch]
    assert [m.get("opencdc.payload.schema.subject") for m in meta] == [
        "gen:users.payload", "gen:users.payload", "gen:payload", "gen:users.payload", "theirs"]
    assert [m.get("opencdc.payload.schema.version") for m in meta] == ["1", "1", "1", "2", "3"]
    assert [m.get("opencdc.key.schema.subject") for m in meta] == ["gen:users.key", "gen:users.key", None, None, None]
    fields = json.loads(store.get("gen:users.payload", 2).text)["fields"]
    assert [f["name"] for f in fields] == ["id", "extra"]
    off = SourceMiddleware.of(info.validate("source", {"recordCount": "1", "format.type": "tidb"}), info, "gen")
    assert off.extraction is None  # cdcflow's default: lines stay free of references into the run's store
    ctx = SourceMiddleware.of(info.validate("source", {"recordCount": "1", "format.type": "tidb",
                                                       "sdk.schema.extract.payload.enabled": "true",
                                                       "sdk.schema.context.enabled": "false"}), info, "gen")
    assert ctx.extraction.context == ""


@pytest.mark.slow
@pytest.mark.spark
def test_an_in_process_source_extracts_schemas_in_a_run(tmp_path):
    """The engine applies the source middleware's schema extraction to what an in-process source
    reads: the lines name Conduit's subject, and the schema is in the run's store. Old code: the
    settings were taken and nothing was applied."""
    import orjson

    from cdcflow.engine.runner import run_files

    out = tmp_path / "out.jsonl"
    path = tmp_path / "p.yaml"
    path.write_text(f"""\
version: "2.2"
pipelines:
  - id: extract
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          recordCount: "20"
          collections.users.format.type: structured
          collections.users.format.options.id: int
          collections.users.format.options.name: string
          sdk.schema.extract.payload.enabled: "true"
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {out}
""")
    outcome = run_files([str(path)], master="local[1]", until_idle=True, progress=False,
                        state_dir=str(tmp_path / "state"))
    assert outcome.exit_code == 0, outcome
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert len(lines) == 20
    assert {line["metadata"].get("opencdc.payload.schema.subject") for line in lines} == {"gen:users.payload"}
    assert "opencdc.key.schema.subject" not in lines[0]["metadata"]  # only the payload was asked for
