"""Cross-format conversion: every decoded format encoded as every other (4x4), and
one pinned test per documented fallback (docs/codec-cross-format.md)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from helpers.tidb_strategies import tables_and_rows

from cdcflow.connectors.ticdc import convert
from cdcflow.connectors.ticdc.avro import StoreRegistry
from cdcflow.connectors.ticdc.errors import UnrepresentableValue, UnsupportedEvent
from cdcflow.connectors.ticdc.events import DDLEvent, RowChange, to_record
from cdcflow.schemas import SchemaStore
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

F = convert.FORMATS
OPTIONS = {
    convert.AVRO: {"enable-tidb-extension": "true"},
    convert.CANAL_JSON: {"enable-tidb-extension": True},  # default mysqlType: no scale, elements, fsp
    convert.CSV: {"include-commit-ts": True, "output-old-value": True},
    convert.OPEN_PROTOCOL: {},
}
# What each format carries, as configured above.
CARRIES_OLD = {convert.AVRO: False, convert.CANAL_JSON: True, convert.CSV: True, convert.OPEN_PROTOCOL: True}
FULL_DELETE = {convert.AVRO: False, convert.CANAL_JSON: True, convert.CSV: True, convert.OPEN_PROTOCOL: True}
WRITES_NAMES = {convert.AVRO: True, convert.CANAL_JSON: False, convert.CSV: True, convert.OPEN_PROTOCOL: False}


@pytest.fixture(scope="module")
def registry():
    store = SchemaStore()
    yield StoreRegistry(store)
    store.close()


def codec(fmt, registry):
    return convert.codec_for(fmt, OPTIONS[fmt], registry=registry, now_ms=lambda: 0)


class Unrepresentable(Exception):
    pass


def model_hop(table: TableSchema, state: dict, fmt: str) -> dict:
    """What one encode+decode through ``fmt`` leaves of an event (kind, ts, row, old)."""
    state = dict(state)
    key_names = [c.name for c in table.columns if c.handle_key]

    def convert_row(row):
        if row is None:
            return None
        out = {}
        for name, v in row.items():
            col = table.column(name)
            if v is not None and col.type in ("ENUM", "SET"):
                is_index = state["index_text"]
                if WRITES_NAMES[fmt] and is_index:
                    if v != "0":
                        raise Unrepresentable(name)
                    v = ""
                elif not WRITES_NAMES[fmt] and not is_index:
                    v = str(col.elements.index(v) + 1) if col.type == "ENUM" else str(
                        sum(1 << col.elements.index(m) for m in v.split(",")) if v else 0)
            out[name] = v
        return out

    was_index = state["index_text"]
    state["row"] = convert_row(state["row"])
    state["old"] = convert_row(state["old"])
    if not WRITES_NAMES[fmt]:
        state["index_text"] = True
    elif was_index:
        # values written as names ('' from index 0) read back as names
        state["index_text"] = False
        state["names_unknown"] = True
    if state["kind"] == "delete":
        if not FULL_DELETE[fmt]:
            state["row"] = {n: state["row"][n] for n in key_names}
            # a tombstone carries no commit ts: the decoder gives the newest one it read before
            state["ts"] = state.get("prev_ts", 0)
    if not CARRIES_OLD[fmt]:
        state["old"] = None
    if fmt == convert.OPEN_PROTOCOL and state["kind"] == "update" and state["old"] is None:
        state["kind"] = "insert"
    return state


def _events(table, rows):
    out = []
    for i, row in enumerate(rows):
        kind = ("insert", "update", "delete")[i % 3]
        out.append(RowChange(table, kind, (1_700_000_000_000 + i) << 18 | i, row,
                             rows[i - 1] if kind == "update" else None))
    return out


@pytest.mark.parametrize("src, dst", [(a, b) for a in F for b in F], ids=[f"{a}->{b}" for a in F for b in F])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(table_rows=tables_and_rows(min_rows=1, max_rows=3, handle_key=True))
def test_any_format_to_any_format_keeps_values(registry, src, dst, table_rows):
    table, rows = table_rows
    events = _events(table, rows)
    source, target = codec(src, registry), codec(dst, registry)
    first = source.decode(source.encode(events))
    assert len(first) == len(events)
    expected = []
    failure = None
    prev = [0, 0]  # the commit ts of the previous event after the first / second hop
    for ev in events:
        state = {"kind": ev.kind, "ts": ev.commit_ts, "row": ev.row, "old": ev.old, "index_text": False}
        try:
            hop1 = model_hop(table, {**state, "prev_ts": prev[0]}, src)
            prev[0] = hop1["ts"]
            hop2 = model_hop(table, {**hop1, "prev_ts": prev[1]}, dst)
            prev[1] = hop2["ts"]
            expected.append(hop2)
        except Unrepresentable as e:
            failure = failure or e
            expected.append(None)
    if failure is not None:
        with pytest.raises(UnrepresentableValue) as info:
            target.decode(target.encode(first))
        assert info.value.table == table.collection and info.value.column
        return
    second = target.decode(target.encode(first))
    assert len(second) == len(events)
    for got, exp in zip(second, expected):
        assert [c.name for c in got.table.handle_key] == [c.name for c in table.handle_key]
        want = RowChange(got.table, exp["kind"], exp["ts"], exp["row"], exp["old"], got.extra)
        assert to_record(got, b"p") == to_record(want, b"p"), (src, dst)


# --------------------------------------------------------------------------- pinned fallbacks

def _op_table(*cols):
    return TableSchema("db", "t", (Column("id", "INT", nullable=False, primary_key=True, handle_key=True),) + cols)


def _through_open(table, rows):
    """Events as the open protocol delivers them: no scale, fsp, BIT width or elements."""
    c = convert.codec_for(convert.OPEN_PROTOCOL)
    return c.decode(c.encode([RowChange(table, "insert", 1 << 18, r) for r in rows]))


def _avro_value_schema(registry, table_collection):
    store = registry.store
    text = store.latest(table_collection.replace(".", "_") + "-value").text
    return {f["name"]: f for f in json.loads(text)["fields"]}


def test_decimal_scale_comes_from_the_values(registry):
    evs = _through_open(_op_table(Column("d", "DECIMAL", precision=10, scale=3)),
                        [{"id": 1, "d": Decimal("1.500")}, {"id": 2, "d": Decimal("0.000")}])
    assert evs[0].table.column("d").scale is None
    adapted = convert.adapt_events(evs, convert.AVRO)
    assert (adapted[0].table.column("d").precision, adapted[0].table.column("d").scale) == (65, 3)
    avro = convert.codec_for(convert.AVRO, OPTIONS[convert.AVRO], registry=registry, topic="pin.decimal")
    back = avro.decode(avro.encode(evs))
    field = _avro_value_schema(registry, "pin.decimal")["d"]
    assert field["type"][1]["logicalType"] == "decimal" and field["type"][1]["scale"] == 3
    assert [e.row["d"].as_tuple() for e in back] == [Decimal("1.500").as_tuple(), Decimal("0.000").as_tuple()]


def test_mixed_decimal_scales_leave_the_scale_unknown(registry):
    t = TableSchema("db", "t", (Column("id", "INT", nullable=False, handle_key=True), Column("d", "DECIMAL")))
    evs = [RowChange(t, "insert", 1, {"id": 1, "d": Decimal("1.5")}),
           RowChange(t, "insert", 2, {"id": 2, "d": Decimal("1.25")})]
    assert convert.adapt_events(evs, convert.AVRO)[0].table.column("d").scale is None
    avro = convert.codec_for(convert.AVRO, OPTIONS[convert.AVRO], registry=registry, topic="pin.mixed")
    back = avro.decode(avro.encode(evs))  # Avro's own fallback: a string field keeps each text
    assert _avro_value_schema(registry, "pin.mixed")["d"]["type"][1]["type"] == "string"
    assert [str(e.row["d"]) for e in back] == ["1.5", "1.25"]


def test_bit_width_unknown_becomes_64(registry):
    evs = _through_open(_op_table(Column("b", "BIT", length=64, unsigned=True)), [{"id": 1, "b": 2**64 - 1}])
    assert evs[0].table.column("b").length is None
    avro = convert.codec_for(convert.AVRO, OPTIONS[convert.AVRO], registry=registry, topic="pin.bit")
    [back] = avro.decode(avro.encode(evs))
    assert _avro_value_schema(registry, "pin.bit")["b"]["type"][1]["connect.parameters"]["length"] == "64"
    assert back.row["b"] == 2**64 - 1


@pytest.mark.parametrize("target", [convert.AVRO, convert.CSV])
def test_enum_index_cannot_become_a_name(registry, target):
    table = _op_table(Column("e", "ENUM", elements=("a", "b")), Column("s", "SET", elements=("x", "y")))
    evs = _through_open(table, [{"id": 1, "e": "b", "s": ""}])
    assert evs[0].row == {"id": 1, "e": "2", "s": "0"}  # index / bitmask text: elements unknown
    with pytest.raises(UnrepresentableValue, match="elements are unknown") as info:
        convert.codec_for(target, OPTIONS[target], registry=registry).encode(evs)
    assert (info.value.table, info.value.column, info.value.value) == ("db.t", "e", "2")


def test_index_zero_and_empty_set_become_empty_names():
    table = _op_table(Column("e", "ENUM"), Column("s", "SET"))
    ev = RowChange(table, "insert", 1, {"id": 1, "e": "0", "s": "0"})
    [out] = convert.adapt_events([ev], convert.CSV)
    assert out.row == {"id": 1, "e": "", "s": ""} and ev.row["e"] == "0"  # input untouched


def test_enum_index_passes_between_index_formats():
    table = _op_table(Column("e", "ENUM", elements=("a", "b")))
    evs = _through_open(table, [{"id": 1, "e": "b"}])
    canal = convert.codec_for(convert.CANAL_JSON, OPTIONS[convert.CANAL_JSON], now_ms=lambda: 0)
    [msg] = canal.encode(evs)
    assert json.loads(msg)["data"] == [{"id": "1", "e": "2"}]
    assert canal.decode([msg])[0].row["e"] == "2"


def test_float_digits_map_to_their_float32():
    t = _op_table(Column("f", "FLOAT"))
    ev = RowChange(t, "insert", 1, {"id": 1, "f": 0.1})  # as a decoder of "0.1" text yields it
    for target in (convert.AVRO, convert.OPEN_PROTOCOL):
        assert convert.adapt_events([ev], target)[0].row["f"] == 0.10000000149011612
    assert convert.adapt_events([ev], convert.CANAL_JSON)[0] is ev  # written as digits: untouched
    bad = RowChange(t, "insert", 1, {"id": 1, "f": 0.1000000001})  # no float32 has these digits
    with pytest.raises(UnrepresentableValue, match="float32") as info:
        convert.codec_for(convert.OPEN_PROTOCOL).encode([bad])
    assert info.value.column == "f"


def test_fsp_unknown_writes_the_values_own_fraction():
    table = _op_table(Column("ts", "DATETIME", fsp=3), Column("tm", "TIME", fsp=3))
    evs = _through_open(table, [{"id": 1, "ts": dt.datetime(2020, 1, 1, 0, 0, 0, 120000),
                                 "tm": dt.timedelta(seconds=1)}])
    assert evs[0].table.column("ts").fsp is None
    canal = convert.codec_for(convert.CANAL_JSON, {"enable-tidb-extension": True, "content-compatible": True},
                              now_ms=lambda: 0)
    [msg] = canal.encode(evs)
    data = json.loads(msg)["data"][0]
    assert (data["ts"], data["tm"]) == ("2020-01-01 00:00:00.120000", "00:00:01")
    assert canal.decode([msg])[0].row == evs[0].row


def test_avro_delete_is_the_key_alone(registry):
    """A tombstone carries the key schema only: the deleted row is its key, the
    table its key columns, the commit ts an estimate (no message time here: now) to a
    decoder that has read nothing before it (see test_avro.py). CSV then writes a row of
    the key columns; a CSV row missing a column of its table is refused."""
    table = _op_table(Column("v", "VARCHAR", length=5))
    avro = convert.codec_for(convert.AVRO, OPTIONS[convert.AVRO], registry=registry)
    before = time.time_ns() // 1_000_000
    [back] = avro.decode(avro.encode([RowChange(table, "delete", 7 << 18, {"id": 1, "v": "x"})]))
    assert back.kind == "delete" and back.row == {"id": 1} and back.ts_estimated
    assert before <= back.commit_ts >> 18 <= time.time_ns() // 1_000_000
    assert [c.name for c in back.table.columns] == ["id"]
    csv = convert.codec_for(convert.CSV, OPTIONS[convert.CSV])
    [(csv_table, data)] = csv.encode([back])
    assert csv_table is back.table and data == b'"D","t","db",%d,false,1\r\n' % back.commit_ts
    with pytest.raises(UnrepresentableValue, match="every column") as info:
        csv.encode([RowChange(table, "delete", 1, {"id": 1})])
    assert info.value.column == "v"


def test_update_without_old_image_reads_back_as_insert_from_open_protocol(registry):
    table = _op_table(Column("v", "INT"))
    ev = RowChange(table, "update", 5 << 18, {"id": 1, "v": 2}, {"id": 1, "v": 1})
    avro = convert.codec_for(convert.AVRO, OPTIONS[convert.AVRO], registry=registry)
    [via_avro] = avro.decode(avro.encode([ev]))
    assert via_avro.kind == "update" and via_avro.old is None
    out = convert.transcode(convert.codec_for(convert.AVRO, OPTIONS[convert.AVRO], registry=registry).encode([ev]),
                            avro, convert.codec_for(convert.OPEN_PROTOCOL))
    [back] = convert.codec_for(convert.OPEN_PROTOCOL).decode(out)
    assert back.kind == "insert" and back.row == {"id": 1, "v": 2}


def test_csv_carries_rows_only():
    with pytest.raises(UnsupportedEvent):
        convert.codec_for(convert.CSV).encode([DDLEvent("db", "t", "TRUNCATE TABLE t", 1, 11)])


def test_control_events_between_open_protocol_and_canal_json():
    from cdcflow.connectors.ticdc.events import ResolvedEvent

    ddl = DDLEvent("db", "t", "TRUNCATE TABLE t", 9 << 18, 11)
    op = convert.codec_for(convert.OPEN_PROTOCOL)
    canal = convert.codec_for(convert.CANAL_JSON, OPTIONS[convert.CANAL_JSON], now_ms=lambda: 0)
    back = canal.decode(convert.transcode(op.encode([ddl, ResolvedEvent(10 << 18)]), op, canal))
    assert back == [ddl, ResolvedEvent(10 << 18)]


def test_adapt_table_leaves_complete_tables_alone():
    t = _op_table(Column("d", "DECIMAL", precision=5, scale=2), Column("b", "BIT", length=3))
    assert convert.adapt_table(t, convert.AVRO) is t
    with pytest.raises(ValueError):
        convert.adapt_table(t, "protobuf")
    t2 = dataclasses.replace(t, columns=(Column("b", "BIT"),), index={})
    assert convert.adapt_table(t2, convert.CANAL_JSON).column("b").length == 64
