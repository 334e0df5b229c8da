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
