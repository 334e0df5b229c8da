import datetime as dt
import json
import time
from decimal import Decimal

import pytest

from cdcflow.connectors.generator import GeneratorPositionError
from cdcflow.connectors.ticdc.schema import table_of
from cdcflow.errors import ConfigError
from cdcflow.record import META_COLLECTION, Operation
from cdcflow.registry import load_registry
from cdcflow.schemas import default_store
from cdcflow.connectors.ticdc.tidb import ALL_TYPES


@pytest.fixture(scope="module")
def info():
    return load_registry(None).connector("builtin:generator")


def open_source(info, settings, partition="0", position=None):
    source = info.new_source()
    source.configure(info.validate("source", settings))
    source.open(position, partition)
    return source


def read_all(source, batch=100):
    out = []
    while (got := source.read(batch)) is not None:
        out += got
    return out


TIDB = {"format.type": "tidb", "recordCount": "40", "operations": "create,update,delete,snapshot"}


def test_same_seed_same_records_other_seed_other_records(info):
    a = read_all(open_source(info, {**TIDB, "seed": "7"}))
    b = read_all(open_source(info, {**TIDB, "seed": "7"}))
    c = read_all(open_source(info, {**TIDB, "seed": "8"}))
    assert len(a) == 40 and a == b
    assert [r.after for r in a] != [r.after for r in c]


def test_tidb_rows_hold_every_type_with_column_types_attached(info):
    records = read_all(open_source(info, TIDB))
    table = table_of(records[0], default_store())
    assert table is not None and table.collection == "cdcflow_gen.all_types"
    assert ALL_TYPES <= {c.type for c in table.columns}
    assert {c.name for c in table.handle_key} == {"id"}
    assert all(r.metadata[META_COLLECTION] == "cdcflow_gen.all_types" for r in records)

    rows = [row for r in records for row in (r.before, r.after) if row is not None]

    def values(col):
        return [row[col] for row in rows]

    assert 2**64 - 1 in values("c_bigint_unsigned") and -(2**63) in values("c_bigint")
    assert 0 in values("c_bigint_unsigned") and 255 in values("c_tinyint_unsigned")
    decimals = [v for v in values("c_decimal") if v is not None]
    assert Decimal("9" * 35 + "." + "9" * 30) in decimals
    assert all(v.as_tuple().exponent == -30 for v in decimals)  # DECIMAL(65,30) keeps its scale
    assert b"" in values("c_varbinary") and b"\x00" * 16 in values("c_binary")
    assert any(isinstance(v, bytes) and b"\x00" in v and len(v) > 200 for v in values("c_longblob"))
    assert "" in values("c_varchar") and "" in values("c_set")
    assert -dt.timedelta(hours=838, minutes=59, seconds=59) in values("c_time")
    assert dt.timedelta(hours=838, minutes=59, seconds=59) in values("c_time")
    assert any(isinstance(v, dt.datetime) and v.microsecond for v in values("c_datetime"))
    assert all(v is None or v.microsecond == 0 for v in values("c_datetime_0"))
    assert None in values("c_json") and None in values("c_enum")
    assert None not in values("c_int_not_null")  # NOT NULL columns never are
    assert {v for v in values("c_enum") if v} <= {"red", "green", "blue"}
    # every value has its native type
    for row in rows:
        assert type(row["c_date"]) is dt.date or row["c_date"] is None
        assert type(row["c_float"]) is float or row["c_float"] is None


def test_operations_carry_before_and_after_as_conduit_does(info):
    records = read_all(open_source(info, TIDB))
    ops = {r.operation for r in records}
    assert ops == {Operation.CREATE, Operation.UPDATE, Operation.DELETE, Operation.SNAPSHOT}
    for r in records:
        assert r.key == {"id": (r.after or r.before)["id"]}
        if r.operation is Operation.UPDATE:
            assert r.before is not None and r.after is not None and r.before["id"] == r.after["id"]
            assert r.before != r.after
        elif r.operation is Operation.DELETE:
            assert r.before is not None and r.after is None
        else:
            assert r.before is None and r.after is not None


def test_resume_from_a_position_continues_exactly(info):
    first = read_all(open_source(info, TIDB))
    resumed = open_source(info, TIDB, position=first[16].position)
    assert read_all(resumed, batch=7) == first[17:]


def test_partitions_split_the_count_and_resume_per_partition(info):
    settings = {"format.type": "structured", "format.options.id": "int", "recordCount": "10", "partitions": "3"}
    probe = info.new_source()
    probe.configure(info.validate("source", settings))
    assert list(probe.partitions()) == ["0", "1", "2"]
    per = {p: read_all(open_source(info, settings, partition=p)) for p in ("0", "1", "2")}
    assert [len(v) for v in per.values()] == [4, 3, 3]
    keys = [r.key["id"] for v in per.values() for r in v]
    assert sorted(keys) == list(range(10))
    assert read_all(open_source(info, settings, "1", per["1"][0].position)) == per["1"][1:]
    with pytest.raises(GeneratorPositionError, match="belongs to partition"):
        open_source(info, settings, "2", per["1"][0].position)


def test_unbounded_returns_batches_and_stop_names_the_last_position(info):
    for count in ("0", "-1"):
        source = open_source(info, {"format.options.n": "int", "recordCount": count})
        for _ in range(5):
            assert len(source.read(50)) == 50
        assert source.stop() == b"0/249"


def test_raw_and_structured_formats_and_collections(info):
    settings = {
        "recordCount": "30",
        "collections.users.format.type": "structured",
        "collections.users.format.options.name": "string",
        "collections.users.format.options.active": "bool",
        "collections.events.format.type": "raw",
        "collections.events.format.options.at": "time",
        "collections.events.operations": "delete",
    }
    records = read_all(open_source(info, settings))
    by = {c: [r for r in records if r.collection == c] for c in ("users", "events")}
    assert by["users"] and by["events"] and len(records) == 30
    for r in by["users"]:
        assert r.operation is Operation.CREATE
        assert set(r.after) == {"name", "active"} and isinstance(r.after["active"], bool)
    for r in by["events"]:
        assert r.operation is Operation.DELETE and isinstance(r.before, bytes)
        assert set(json.loads(r.before)) == {"at"}


def test_rate_limits_the_output(info):
    source = open_source(info, {"format.options.id": "int", "rate": "200"})
    start = time.monotonic()
    got = 0
    while got < 30:
        got += len(source.read(100))
    elapsed = time.monotonic() - start
    assert 0.1 <= elapsed < 2.0  # 30 records at 200/s need ~0.15 s


@pytest.mark.parametrize("settings,parameter,rule", [
    ({"format.options.id": "int", "operations": "create,upsert"}, "operations", "regex"),
    ({"format.options.id": "integer"}, "format.options.id", "inclusion"),
    ({"format.type": "structured"}, "format.options.*", "required"),
    ({"format.type": "avro"}, "format.type", "inclusion"),
    ({"format.type": "tidb", "partitions": "0"}, "partitions", "greater-than"),
    ({"format.type": "tidb", "recordCount": "-5"}, "recordCount", "greater-than"),
])
def test_bad_settings_name_parameter_and_rule(info, settings, parameter, rule):
    with pytest.raises(ConfigError) as e:
        source = info.new_source()
        source.configure(info.validate("source", settings))
    assert (e.value.parameter, e.value.rule) == (parameter, rule)


def test_lag_counts_down_to_zero():
    from cdcflow.connectors.generator import GeneratorSource
    from cdcflow.params import validate
    from cdcflow.connectors.builtin import GENERATOR

    src = GeneratorSource()
    src.configure(validate("generator", GENERATOR.source_params, {"recordCount": "5", "format.type": "raw", "format.options.id": "int"}))
    src.open(None, src.partitions()[0])
    assert src.lag() == 5
    got = src.read(3)
    assert len(got) == 3 and src.lag() == 2
    src.read(10)
    assert src.lag() == 0


# -- Conduit's generator settings: format.type file and burst.* (github.com/ConduitIO/conduit-connector-generator,
# config.go: format.options.path is read once and every record carries its bytes; bursts of
# burst.generateTime separated by burst.sleepTime)
def test_file_format_payload_is_the_files_bytes(info, tmp_path):
    data = b'{"hello": "world"}\n\x00\xff binary too'
    (tmp_path / "payload.bin").write_bytes(data)
    src = open_source(info, {"format.type": "file", "format.options.path": str(tmp_path / "payload.bin"),
                             "recordCount": "5", "operations": "create,snapshot"})
    records = read_all(src)
    assert len(records) == 5 and all(r.after == data for r in records)
    assert {r.operation for r in records} <= {Operation.CREATE, Operation.SNAPSHOT}


def test_file_format_names_a_missing_file(info, tmp_path):
    with pytest.raises(ConfigError) as err:
        open_source(info, {"format.type": "file", "format.options.path": str(tmp_path / "nope")})
    assert err.value.parameter == "format.options.path" and "nope" in str(err.value)
    with pytest.raises(ConfigError, match="format.options.path"):
        open_source(info, {"format.type": "file"})


def test_bursts_generate_only_inside_their_windows(info):
    src = open_source(info, {"format.type": "structured", "format.options.id": "int",
                             "burst.generateTime": "150ms", "burst.sleepTime": "250ms"})
    started = src._started
    produced, empty = [], 0
    deadline = time.monotonic() + 1.3
    while time.monotonic() < deadline:
        before = time.monotonic()
        batch = src.read(50)
        if batch:
            produced.append((before - started) % 0.4)
        else:
            empty += 1
    assert produced and empty  # it generated, and it paused
    # every batch began inside a burst window (or within 5 ms of the next one's start)
    assert all(phase < 0.15 or phase > 0.395 for phase in produced)
