"""canal-json codec: golden messages from the TiCDC docs/reference, options, malformed corpus,
hypothesis round trips (type-strict, through the OpenCDC mapping)."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.connectors.ticdc import canal_json as cj
from cdcflow.connectors.ticdc.canal_json import decode as cj_decode
from cdcflow.connectors.ticdc.canal_json import schema as cj_schema
from cdcflow.connectors.ticdc.errors import CodecError, MalformedMessage, UnrepresentableValue, UnsupportedEvent
from cdcflow.connectors.ticdc.events import DDLEvent, ResolvedEvent, RowChange, to_record
from cdcflow.errors import ConfigError
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

from helpers.tidb_strategies import rows, tables

TSO = 429918007904436226
EXT = cj.CanalJsonOptions(enable_tidb_extension=True)


def fixed_clock():
    return 1639633142960


def _table():
    return TableSchema("test", "t", (
        Column("id", "INT", primary_key=True, handle_key=True, nullable=False),
        Column("c_decimal", "DECIMAL", precision=10, scale=4),
        Column("c_varbinary", "VARBINARY", length=16, binary=True),
        Column("c_enum", "ENUM", elements=("a", "b", "c")),
        Column("c_set", "SET", elements=("a", "b")),
        Column("c_datetime", "DATETIME", fsp=3),
        Column("c_time", "TIME", fsp=0),
        Column("c_float", "DOUBLE"),
        Column("c_ubig", "BIGINT", unsigned=True),
    ))


def _row(**kw):
    row = {"id": 2, "c_decimal": decimal.Decimal("2333.6543"), "c_varbinary": b"\x01", "c_enum": "b",
           "c_set": "a,b", "c_datetime": datetime.datetime(2020, 2, 20, 2, 20, 20, 123000),
           "c_time": datetime.timedelta(hours=-838, minutes=-59, seconds=-59), "c_float": 153.123,
           "c_ubig": 2**64 - 1}
    row.update(kw)
    return row


# --------------------------------------------------------------------------- golden

def test_binary_escaping_matches_ticdc_doc_example():
    # bytes [5 7 10 15 36 50 43 99 120 60 38 255 254 45 55 70] from TiCDC's canal-json docs
    raw = bytes([5, 7, 10, 15, 36, 50, 43, 99, 120, 60, 38, 255, 254, 45, 55, 70])
    msg = cj.CanalJsonEncoder(now_ms=fixed_clock).encode(RowChange(_table(), "insert", TSO, _row(c_varbinary=raw)))
    assert b'"c_varbinary":"\\u0005\\u0007\\n\\u000f$2+cx\\u003c\\u0026\xc3\xbf\xc3\xbe-7F"' in msg
    assert cj.CanalJsonDecoder().decode(msg).row["c_varbinary"] == raw


def test_control_bytes_use_lowercase_u00xx_not_short_escapes():
    msg = cj.CanalJsonEncoder().encode(RowChange(_table(), "insert", TSO, _row(c_varbinary=b"\x08\x0c\x1f\\\x7f>")))
    assert b'"\\u0008\\u000c\\u001f\\\\\x7f\\u003e"' in msg
    assert cj.CanalJsonDecoder().decode(msg).row["c_varbinary"] == b"\x08\x0c\x1f\\\x7f>"


def test_ddl_message_from_ticdc_docs_decodes():
    doc = b'''{"id": 0, "database": "test", "table": "", "pkNames": null, "isDdl": true, "type": "QUERY",
      "es": 1639633094670, "ts": 1639633095489, "sql": "drop database if exists test", "sqlType": null,
      "mysqlType": null, "data": null, "old": null, "_tidb": {"commitTs": 429918007904436226}}'''
    ev = cj.CanalJsonDecoder().decode(doc)
    assert ev == DDLEvent("test", "", "drop database if exists test", TSO, None, None,
                          {cj.META_CANAL_TYPE: "QUERY"})


def test_ddl_encode_fields_and_types():
    enc = cj.CanalJsonEncoder(EXT, now_ms=fixed_clock)
    msg = orjson.loads(enc.encode(DDLEvent("test", "t", "CREATE TABLE t (id INT)", TSO, 3)))
    assert msg == {"id": 0, "database": "test", "table": "t", "pkNames": None, "isDdl": True, "type": "CREATE",
                   "es": TSO >> 18, "ts": 1639633142960, "sql": "CREATE TABLE t (id INT)", "sqlType": None,
                   "mysqlType": None, "data": None, "old": None, "_tidb": {"commitTs": TSO}}
    for action, canal in [(4, "ERASE"), (11, "TRUNCATE"), (14, "RENAME"), (7, "CINDEX"), (33, "DINDEX"),
                          (5, "ALTER"), (1, "QUERY"), (999, "QUERY")]:
        assert orjson.loads(enc.encode(DDLEvent("s", "t", "q", TSO, action)))["type"] == canal
    # canal types that name one action code decode to it; the others keep the canal type in extra
    back = cj.CanalJsonDecoder().decode(enc.encode(DDLEvent("test", "t", "CREATE TABLE t (id INT)", TSO, 3)))
    assert back == DDLEvent("test", "t", "CREATE TABLE t (id INT)", TSO, 3)
    alter = cj.CanalJsonDecoder().decode(enc.encode(DDLEvent("s", "t", "ALTER TABLE t ADD c INT", TSO, 5)))
    assert alter.ddl_type is None and alter.extra == {cj.META_CANAL_TYPE: "ALTER"}
    assert cj.CanalJsonDecoder().decode(enc.encode(alter)) == alter


def test_watermark_message_from_ticdc_docs():
    doc = b'''{"id": 0, "database": "", "table": "", "pkNames": null, "isDdl": false, "type": "TIDB_WATERMARK",
      "es": 1640007049196, "ts": 1640007050284, "sql": "", "sqlType": null, "mysqlType": null,
      "data": null, "old": null, "_tidb": {"watermarkTs": 429918007904436226}}'''
    assert cj.CanalJsonDecoder().decode(doc) == ResolvedEvent(TSO)
    out = orjson.loads(cj.CanalJsonEncoder(EXT, now_ms=lambda: 1640007050284).encode(ResolvedEvent(TSO)))
    assert out == {**orjson.loads(doc), "es": TSO >> 18}
    with pytest.raises(UnsupportedEvent):
        cj.CanalJsonEncoder().encode(ResolvedEvent(TSO))


def test_dml_message_from_ticdc_docs_decodes_to_native_values():
    doc = b'''{"id": 0, "database": "test", "table": "tp_int", "pkNames": ["id"], "isDdl": false,
      "type": "INSERT", "es": 1639633141221, "ts": 1639633142960, "sql": "",
      "sqlType": {"c_bigint": -5, "c_int": 4, "c_mediumint": 4, "c_smallint": 5, "c_tinyint": -6, "id": 4},
      "mysqlType": {"c_bigint": "bigint", "c_int": "int", "c_mediumint": "mediumint", "c_smallint": "smallint",
                    "c_tinyint": "tinyint", "id": "int"},
      "data": [{"c_bigint": "9223372036854775807", "c_int": "2147483647", "c_mediumint": "8388607",
                "c_smallint": "32767", "c_tinyint": "127", "id": "2"}],
      "old": null, "_tidb": {"commitTs": 429918007904436226}}'''
    ev = cj.CanalJsonDecoder().decode(doc)
    assert ev.kind == "insert" and ev.commit_ts == TSO and ev.old is None
    assert ev.row == {"c_bigint": 2**63 - 1, "c_int": 2**31 - 1, "c_mediumint": 8388607, "c_smallint": 32767,
                      "c_tinyint": 127, "id": 2}
    assert [c.name for c in ev.table.handle_key] == ["id"]
    rec = to_record(ev, b"p")
    assert rec.key == {"id": 2} and rec.metadata["opencdc.collection"] == "test.tp_int"


def test_dml_field_order_and_values():
    enc = cj.CanalJsonEncoder(EXT, now_ms=fixed_clock)
    msg = enc.encode(RowChange(_table(), "update", TSO, _row(), _row(c_float=0.5)))
    obj = orjson.loads(msg)
    assert list(obj) == ["id", "database", "table", "pkNames", "isDdl", "type", "es", "ts", "sql", "sqlType",
                         "mysqlType", "old", "data", "_tidb"]
    assert obj["data"] == [{"id": "2", "c_decimal": "2333.6543", "c_varbinary": "\u0001", "c_enum": "2",
                            "c_set": "3", "c_datetime": "2020-02-20 02:20:20.123", "c_time": "-838:59:59",
                            "c_float": "153.123", "c_ubig": "18446744073709551615"}]
    assert obj["old"][0]["c_float"] == "0.5" and len(obj["old"][0]) == 9
    assert obj["sqlType"] == {"id": 4, "c_decimal": 3, "c_varbinary": 2004, "c_enum": 4, "c_set": -7,
                              "c_datetime": 93, "c_time": 92, "c_float": 8, "c_ubig": 3}
    assert obj["mysqlType"]["c_ubig"] == "bigint unsigned" and obj["mysqlType"]["c_enum"] == "enum"
    assert obj["_tidb"] == {"commitTs": TSO} and obj["es"] == TSO >> 18 and obj["pkNames"] == ["id"]


def test_sqltype_promotion_for_large_unsigned_values():
    t = TableSchema("s", "u", (Column("a", "TINYINT", unsigned=True), Column("b", "SMALLINT", unsigned=True),
                               Column("c", "INT", unsigned=True), Column("d", "BIGINT", unsigned=True),
                               Column("e", "MEDIUMINT", unsigned=True)))
    enc = cj.CanalJsonEncoder()
    small = orjson.loads(enc.encode(RowChange(t, "insert", TSO, {"a": 127, "b": 32767, "c": 2**31 - 1,
                                                                "d": 2**63 - 1, "e": 2**24 - 1})))
    big = orjson.loads(enc.encode(RowChange(t, "insert", TSO, {"a": 128, "b": 32768, "c": 2**31,
                                                              "d": 2**63, "e": 2**24 - 1})))
    assert small["sqlType"] == {"a": -6, "b": 5, "c": 4, "d": -5, "e": 4}
    assert big["sqlType"] == {"a": 5, "b": 4, "c": -5, "d": 3, "e": 4}
    assert cj.CanalJsonDecoder().decode(enc.encode(RowChange(t, "insert", TSO, {
        "a": 255, "b": None, "c": 2**32 - 1, "d": 2**64 - 1, "e": 0}))).row["d"] == 2**64 - 1


def test_content_compatible_mysql_types_and_old_shape():
    t = TableSchema("s", "cc", (
        Column("id", "INT", primary_key=True, handle_key=True, nullable=False),
        Column("u", "INT", unsigned=True), Column("d", "DECIMAL", precision=5, scale=2),
        Column("v", "VARCHAR", length=123), Column("e", "ENUM", elements=("a", "b", "c", "it's")),
        Column("st", "SET", elements=("a", "b")), Column("dt", "DATETIME", fsp=3), Column("bt", "BIT", length=8),
    ))
    enc = cj.CanalJsonEncoder(cj.CanalJsonOptions(content_compatible=True))
    row = {"id": 1, "u": 7, "d": decimal.Decimal("1.50"), "v": "x", "e": "it's", "st": "", "dt": None, "bt": 65}
    msg = enc.encode(RowChange(t, "update", TSO, row, {**row, "v": "old"}))
    obj = orjson.loads(msg)
    assert obj["mysqlType"] == {"id": "int(11)", "u": "int(10) unsigned", "d": "decimal(5,2)",
                                "v": "varchar(123)", "e": "enum('a','b','c','it''s')", "st": "set('a','b')",
                                "dt": "datetime(3)", "bt": "bit(8)"}
    assert obj["old"] == [{"v": "old"}]  # content-compatible: only the changed columns
    assert obj["data"][0]["e"] == "4" and obj["data"][0]["st"] == "0" and obj["data"][0]["bt"] == "65"
    ev = cj.CanalJsonDecoder().decode(msg)
    assert ev.table.column("e").elements == ("a", "b", "c", "it's")
    assert ev.table.column("d").scale == 2 and ev.table.column("dt").fsp == 3 and ev.table.column("u").unsigned
    assert ev.row == row
    assert ev.old == {**row, "v": "old"}  # unchanged columns filled from the new image


def test_only_output_updated_columns_round_trips_full_old_image():
    enc = cj.CanalJsonEncoder(cj.CanalJsonOptions(only_output_updated_columns=True, enable_tidb_extension=True))
    t = _table()
    old = _row(c_float=1.0, c_enum="a")
    msg = enc.encode(RowChange(t, "update", TSO, _row(), old))
    assert set(orjson.loads(msg)["old"][0]) == {"c_float", "c_enum"}
    dec = cj.CanalJsonDecoder({"test.t": t})
    assert dec.decode(msg).old == old


def test_default_mysql_type_enum_set_fallback_keeps_index_and_bitmask_text():
    """Pinned fallback: without elements (default mysqlType), ENUM stays its index text, SET its
    bitmask text; encoding such a column back writes the text unchanged, and a name is refused."""
    msg = cj.CanalJsonEncoder().encode(RowChange(_table(), "insert", TSO, _row()))
    ev = cj.CanalJsonDecoder().decode(msg)
    assert ev.row["c_enum"] == "2" and ev.row["c_set"] == "3"
    assert ev.table.column("c_enum").elements == ()
    assert orjson.loads(cj.CanalJsonEncoder().encode(ev))["data"][0]["c_enum"] == "2"
    bad = RowChange(ev.table, "insert", TSO, {**ev.row, "c_enum": "b"})
    with pytest.raises(UnrepresentableValue, match="c_enum"):
        cj.CanalJsonEncoder().encode(bad)
    # a known table schema supplies the elements
    assert cj.CanalJsonDecoder({"test.t": _table()}).decode(msg).row == _row()


def test_without_extension_commit_ts_comes_from_es():
    msg = cj.CanalJsonEncoder().encode(RowChange(_table(), "delete", TSO, _row()))
    assert "_tidb" not in orjson.loads(msg)
    ev = cj.CanalJsonDecoder().decode(msg)
    assert ev.commit_ts == (TSO >> 18) << 18 and ev.kind == "delete" and ev.row == {
        **_row(), "c_enum": "2", "c_set": "3"}


def test_handle_key_only_and_claim_check_messages_are_recognised():
    t = _table()
    ev = RowChange(t, "delete", TSO, {"id": 9}, None,
                   {cj_decode.META_ONLY_HANDLE_KEY: "true", cj_decode.META_CLAIM_CHECK_LOCATION: "s3://b/claim/1.json"})
    msg = cj.CanalJsonEncoder(EXT).encode(ev)
    obj = orjson.loads(msg)
    assert obj["_tidb"] == {"commitTs": TSO, "onlyHandleKey": True, "claimCheckLocation": "s3://b/claim/1.json"}
    assert obj["data"] == [{"id": "9"}] and obj["mysqlType"] == {"id": "int"}
    back = cj.CanalJsonDecoder().decode(msg)
    assert back.row == {"id": 9} and back.extra == ev.extra
    rec = to_record(back, b"")
    assert rec.metadata[cj_decode.META_ONLY_HANDLE_KEY] == "true" and rec.key == {"id": 9}
    # the claim-check file holds the full message
    full = cj.CanalJsonEncoder(EXT).encode(RowChange(t, "delete", TSO, _row(id=9)))
    claim = orjson.dumps({"key": base64.b64encode(b"k").decode(), "value": base64.b64encode(full).decode()})
    assert cj.decode_claim_check(claim, cj.CanalJsonDecoder({"test.t": t})).row == _row(id=9)
    with pytest.raises(MalformedMessage):
        cj.decode_claim_check(b'{"key": "", "value": "***"}')


def test_float_and_decimal_text_forms():
    assert cj_schema.float_text(1e22) == "10000000000000000000000"
    assert cj_schema.float_text(1.5e-07) == "0.00000015"
    assert cj_schema.float_text(2.0) == "2" and cj_schema.float_text(-0.5) == "-0.5"
    assert cj_schema.decimal_text(decimal.Decimal("1.5"), 4) == "1.5000"
    assert cj_schema.decimal_text(decimal.Decimal("0E-30"), 30) == "0." + "0" * 30
    with pytest.raises(cj_schema._ValueProblem):
        cj_schema.decimal_text(decimal.Decimal("1.23456"), 4)
    with pytest.raises(cj_schema._ValueProblem):
        cj_schema.float_text(float("nan"))
    assert cj_schema.time_text(datetime.timedelta(hours=838, minutes=59, seconds=59), 0) == "838:59:59"
    assert cj.parse_time("-837:59:59.5") == -datetime.timedelta(hours=837, minutes=59, seconds=59.5)
    with pytest.raises(ValueError, match="out of range"):
        cj.parse_time("838:59:59.5")
    assert cj_schema.datetime_text(datetime.datetime(2020, 1, 1), 3) == "2020-01-01 00:00:00.000"


def test_options_from_config():
    o = cj.CanalJsonOptions.from_config({"enable-tidb-extension": "true", "content-compatible": True})
    assert o.enable_tidb_extension and o.content_compatible and not o.only_output_updated_columns
    with pytest.raises(ConfigError, match="enable-tidb-extension"):
        cj.CanalJsonOptions.from_config({"enable-tidb-extension": "maybe"})


def test_unrepresentable_values_name_table_column_and_value():
    enc = cj.CanalJsonEncoder()
    for col, value in [("c_decimal", decimal.Decimal("1.23456")), ("c_datetime", datetime.datetime(2020, 1, 1, 0, 0, 0, 1)),
                       ("c_enum", "zzz"), ("c_set", "a,q"), ("id", "1"), ("c_float", float("inf"))]:
        with pytest.raises(UnrepresentableValue) as e:
            enc.encode(RowChange(_table(), "insert", TSO, _row(**{col: value})))
        assert e.value.table == "test.t" and e.value.column == col and e.value.value == value


# --------------------------------------------------------------------------- malformed corpus

_GOOD = orjson.loads(cj.CanalJsonEncoder(EXT).encode(RowChange(_table(), "insert", TSO, _row())))


def _mutate(**kw):
    obj = dict(_GOOD)
    for k, v in kw.items():
        if v is ...:
            del obj[k]
        else:
            obj[k] = v
    return orjson.dumps(obj)


MALFORMED = [
    (b"", "not JSON"),
    (b"{not json", "not JSON"),
    (b'[1, 2]', "not an object"),
    (b'"text"', "not an object"),
    (b'{"hello": "world"}', "field 'type' is missing"),
    (_mutate(type=...), "field 'type' is missing"),
    (_mutate(isDdl="no"), "isDdl"),
    (_mutate(type="UPSERT"), "unknown DML type"),
    (_mutate(data=...), "field 'data' is missing"),
    (_mutate(data=[]), "exactly one row"),
    (_mutate(data={"id": "1"}), "field 'data' must be list"),
    (_mutate(mysqlType=None), "mysqlType"),
    (_mutate(database=5), "database"),
    (_mutate(pkNames="id"), "pkNames"),
    (_mutate(_tidb={"commitTs": "x"}), "commitTs"),
    (_mutate(_tidb=[1]), "_tidb"),
    (_mutate(mysqlType={**_GOOD["mysqlType"], "id": "geometry"}), "unknown MySQL type"),
    (_mutate(data=[{**_GOOD["data"][0], "id": "abc"}]), "cannot read 'abc' as INT"),
    (_mutate(data=[{**_GOOD["data"][0], "id": 1}]), "JSON strings or null"),
    (_mutate(data=[{**_GOOD["data"][0], "c_datetime": "2020-13-01 00:00:00"}]), "as DATETIME"),
    (_mutate(data=[{**_GOOD["data"][0], "c_datetime": "2020-01-01T00:00:00"}]), "as DATETIME"),
    (_mutate(data=[{**_GOOD["data"][0], "c_time": "25:61:00"}]), "as TIME"),
    (_mutate(data=[{**_GOOD["data"][0], "c_varbinary": "\u20ac"}]), r"above U\+00FF"),
    (_mutate(data=[{**_GOOD["data"][0], "c_decimal": "1.2.3"}]), "as DECIMAL"),
    (_mutate(data=[{**_GOOD["data"][0], "nope": "1"}]), "no mysqlType"),
    (_mutate(old=[1]), "old must be null"),
    (_mutate(type="UPDATE", old={"a": 1}), "old must be null"),
    (_mutate(isDdl=True, type="MERGE"), "unknown DDL type"),
    (_mutate(type="TIDB_WATERMARK", _tidb={}), "watermarkTs"),
]


@pytest.mark.parametrize("message,match", MALFORMED, ids=[str(i) for i in range(len(MALFORMED))])
def test_malformed_corpus_gives_typed_error_with_position(message, match):
    dec = cj.CanalJsonDecoder()
    # UPDATE-with-old cases need a well-formed update message shape otherwise
    with pytest.raises(MalformedMessage, match=match) as e:
        dec.decode(message)
    assert isinstance(e.value, CodecError) and e.value.codec == "canal-json"
    assert e.value.position is not None


def test_json_error_position_is_the_byte_offset():
    with pytest.raises(MalformedMessage) as e:
        cj.CanalJsonDecoder().decode(b'{"type": "INSERT",, }')
    assert e.value.position == 18


def test_decode_many_names_the_message():
    good = orjson.dumps(_GOOD)
    with pytest.raises(MalformedMessage, match="message 1"):
        cj.CanalJsonDecoder().decode_many([good, b"{"])
    assert len(cj.CanalJsonDecoder().decode_many([good, good])) == 2


# --------------------------------------------------------------------------- round trips

def _normalised(ev: RowChange, *, extension: bool) -> RowChange:
    ts = ev.commit_ts if extension else (ev.commit_ts >> 18) << 18
    return dataclasses.replace(ev, commit_ts=ts)


def _assert_round_trip(table, batch, options, decoder_tables):
    enc = cj.CanalJsonEncoder(options, now_ms=fixed_clock)
    dec = cj.CanalJsonDecoder(decoder_tables)
    messages = enc.encode_many(batch)
    back = dec.decode_many(messages)
    for orig, got in zip(batch, back, strict=True):
        want = _normalised(orig, extension=options.enable_tidb_extension)
        assert to_record(got, b"") == to_record(want, b""), (orig, messages)


@st.composite
def _events(draw):
    table = draw(tables())
    kinds = st.sampled_from(["insert", "update", "delete"])
    out = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(kinds)
        row = draw(rows(table))
        old = draw(rows(table)) if kind == "update" else None
        out.append(RowChange(table, kind, draw(st.integers(0, 2**63 - 1)), row, old))
    return table, out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_events(), st.booleans(), st.booleans())
def test_round_trip_content_compatible(data, extension, updated_only):
    table, batch = data
    opts = cj.CanalJsonOptions(enable_tidb_extension=extension, content_compatible=True,
                               only_output_updated_columns=updated_only)
    _assert_round_trip(table, batch, opts, None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_events(), st.booleans())
def test_round_trip_default_types_with_known_table(data, updated_only):
    table, batch = data
    opts = cj.CanalJsonOptions(enable_tidb_extension=True, only_output_updated_columns=updated_only)
    _assert_round_trip(table, batch, opts, {table.collection: table})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_events())
def test_encode_is_stable_after_a_decode(data):
    """Default mysqlType, no known table (ENUM/SET as index text, fsp from the value):
    re-encoding what was decoded gives back the same values."""
    table, batch = data
    enc = cj.CanalJsonEncoder(EXT, now_ms=fixed_clock)
    first = cj.CanalJsonDecoder().decode_many(enc.encode_many(batch))
    again = cj.CanalJsonDecoder().decode_many(enc.encode_many(first))
    for a, b in zip(first, again, strict=True):
        assert to_record(a, b"") == to_record(b, b"")
