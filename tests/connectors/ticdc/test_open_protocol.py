"""Open protocol codec: golden messages, framing and batching, options, round trips."""

from __future__ import annotations

import base64
import datetime as dt
import struct
from decimal import Decimal

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.connectors.ticdc import open_protocol as op
from cdcflow.connectors.ticdc.open_protocol import schema as op_schema
from cdcflow.connectors.ticdc.errors import UnrepresentableValue
from cdcflow.connectors.ticdc.events import DDLEvent, ResolvedEvent, RowChange, to_record
from cdcflow.errors import ConfigError
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

from helpers.tidb_strategies import tables_and_rows

L = struct.Struct(">Q").pack


def frame_key(*docs: bytes, version: int = 1) -> bytes:
    return L(version) + b"".join(L(len(d)) + d for d in docs)


def frame_value(*docs: bytes) -> bytes:
    return b"".join(L(len(d)) + d for d in docs)


def j(obj) -> bytes:
    return orjson.dumps(obj)


# --------------------------------------------------------------------------- golden: TiCDC-shaped input

def test_decodes_a_ticdc_shaped_batch_of_every_value_form():
    """Two rows in one message as TiCDC writes them (columns sorted by name, as
    Go marshals a map; flags from the reference §5)."""
    key1 = j({"ts": 425378_118_122_422_273, "scm": "shop", "tbl": "items", "t": 1})
    key2 = j({"ts": 425378_118_122_422_274, "scm": "shop", "tbl": "items", "t": 1})
    cols = {
        "bigu": {"t": 8, "f": 0x80 | 0x40, "v": 18446744073709551615},
        "bin": {"t": 15, "f": 0x01 | 0x40, "v": "\\x00\\xff\\\"q\\\\"},  # Go-quoted bytes 00 ff " q \
        "bit": {"t": 16, "f": 0x80 | 0x40, "v": 65},
        "blob": {"t": 252, "f": 0x01 | 0x40, "v": base64.b64encode(b"\x00\x01").decode()},
        "d": {"t": 10, "f": 0x40, "v": "2020-02-20"},
        "dec": {"t": 246, "f": 0x40, "v": "-2333.654321"},
        "dt": {"t": 12, "f": 0x40, "v": "2020-02-20 02:20:20.123"},
        "e": {"t": 247, "f": 0x40, "v": 2},
        "fl": {"t": 4, "f": 0x40, "v": 0.1},
        "id": {"t": 3, "h": True, "f": 0x02 | 0x08, "v": 7766},
        "j": {"t": 245, "f": 0x40, "v": "{\"a\": 1}"},
        "s": {"t": 248, "f": 0x40, "v": 3},
        "tm": {"t": 11, "f": 0x40, "v": "-838:59:59"},
        "txt": {"t": 252, "f": 0x40, "v": base64.b64encode("héllo".encode()).decode()},
        "vc": {"t": 15, "f": 0x40, "v": "aabb"},
        "y": {"t": 13, "f": 0x40, "v": 2020},
        "nul": {"t": 3, "f": 0x40, "v": None},
    }
    value1 = j({"u": cols})
    value2 = j({"d": {"id": cols["id"]}})
    events = op.OpenProtocolDecoder().decode(frame_key(key1, key2), frame_value(value1, value2))
    assert [type(e) for e in events] == [RowChange, RowChange]
    ins, dele = events
    assert ins.kind == "insert" and dele.kind == "delete"
    assert ins.commit_ts == 425378_118_122_422_273
    assert ins.table.collection == "shop.items"
    assert ins.row == {
        "bigu": 2**64 - 1, "bin": b'\x00\xff"q\\', "bit": 65, "blob": b"\x00\x01",
        "d": dt.date(2020, 2, 20), "dec": Decimal("-2333.654321"),
        "dt": dt.datetime(2020, 2, 20, 2, 20, 20, 123000), "e": "2", "fl": op_schema.to_float32(0.1),
        "id": 7766, "j": '{"a": 1}', "s": "3", "tm": -dt.timedelta(hours=838, minutes=59, seconds=59),
        "txt": "héllo", "vc": "aabb", "y": 2020, "nul": None,
    }
    assert str(ins.row["dec"]) == "-2333.654321"  # scale from the text
    t = ins.table
    assert t.column("id").handle_key and t.column("id").primary_key and not t.column("id").nullable
    assert t.column("bigu").unsigned and t.column("bigu").type == "BIGINT"
    assert t.column("bin").type == "VARBINARY" and t.column("bin").binary
    assert t.column("blob").type == "BLOB" and t.column("txt").type == "TEXT"
    assert [c.name for c in t.handle_key] == ["id"]
    assert dele.row == {"id": 7766}
    rec = to_record(ins, b"p0")
    assert rec.key == {"id": 7766} and rec.metadata["ticdc.commit-ts"] == str(ins.commit_ts)


def test_decodes_ddl_and_resolved_messages():
    ddl = op.OpenProtocolDecoder().decode(
        frame_key(j({"ts": 5, "scm": "shop", "tbl": "items", "t": 2})),
        frame_value(j({"q": "ALTER TABLE items ADD c INT", "t": 5})))
    assert ddl == [DDLEvent("shop", "items", "ALTER TABLE items ADD c INT", 5, 5)]
    resolved = op.OpenProtocolDecoder().decode(frame_key(j({"ts": 99, "t": 3})), L(0))
    assert resolved == [ResolvedEvent(99)]


def test_type_codes_ticdc_passes_through_are_decoded_with_exact_values():
    # TiCDC's decoder (pkg/sink/codec/internal/column.go, ToRowChangeColumn / FormatColumn) keeps any
    # type code and its JSON value; e.g. 6 NULL, 14 NEWDATE, 225 vector, 255 geometry
    image = {"id": {"t": 3, "h": True, "f": 11, "v": 1}, "n": {"t": 6, "f": 64, "v": None},
             "d": {"t": 14, "f": 64, "v": "2024-02-29"}, "vec": {"t": 225, "f": 64, "v": "[1,2.5]"},
             "g": {"t": 255, "f": 65, "v": "POINT(1 2)"}, "x": {"t": 0, "f": 64, "v": 18446744073709551615}}
    key = frame_key(j({"ts": 7, "scm": "s", "tbl": "t", "t": 1}))
    dec = op.OpenProtocolDecoder()
    for _ in range(2):  # the second message goes through the compiled decoder when it is built
        [ev] = dec.decode(key, frame_value(j({"u": image})))
        assert ev.row == {"id": 1, "n": None, "d": dt.date(2024, 2, 29), "vec": "[1,2.5]", "g": "POINT(1 2)",
                          "x": "18446744073709551615"}
        assert [c.type for c in ev.table.columns] == ["INT", "NULL", "DATE", "VECTOR", "GEOMETRY", "MYSQL_TYPE_0"]
        to_record(ev, b"p")  # and it makes a record


def test_key_extras_surface_as_ticdc_metadata_and_encode_back():
    key = j({"ts": 1, "scm": "s", "tbl": "t", "rid": 42, "ptn": 7, "t": 1, "ohk": True, "ccl": "s3://b/k"})
    value = j({"u": {"id": {"t": 3, "h": True, "f": 2, "v": 1}}})
    [ev] = op.OpenProtocolDecoder().decode(frame_key(key), frame_value(value))
    assert ev.table.partition == 7
    assert ev.extra == {op_schema.EXTRA_ROW_ID: "42", op_schema.EXTRA_ONLY_HANDLE_KEY: "true",
                        op_schema.EXTRA_CLAIM_CHECK: "s3://b/k"}
    [(k2, v2)] = op.OpenProtocolEncoder().encode([ev])
    assert orjson.loads(k2[16:]) == orjson.loads(key)
    assert list(orjson.loads(k2[16:])) == ["ts", "scm", "tbl", "rid", "ptn", "t", "ohk", "ccl"]


# --------------------------------------------------------------------------- golden: what we write

TABLE = TableSchema("shop", "items", (
    Column("id", "INT", nullable=False, primary_key=True, handle_key=True),
    Column("name", "VARCHAR", length=20),
    Column("price", "DECIMAL", precision=10, scale=4),
    Column("raw", "VARBINARY", length=8, binary=True),
))


def test_encodes_exact_bytes_for_an_update():
    ev = RowChange(TABLE, "update", 400, {"id": 1, "name": "b", "price": Decimal("1.5000"), "raw": b"\x00a"},
                   {"id": 1, "name": "a", "price": Decimal("1.0000"), "raw": None})
    [(key, value)] = op.OpenProtocolEncoder().encode([ev])
    k = b'{"ts":400,"scm":"shop","tbl":"items","t":1}'
    assert key == L(1) + L(len(k)) + k
    v = (b'{"u":{"id":{"t":3,"h":true,"f":10,"v":1},"name":{"t":15,"f":64,"v":"b"},'
         b'"price":{"t":246,"f":64,"v":"1.5000"},"raw":{"t":15,"f":65,"v":"\\\\x00a"}},'
         b'"p":{"id":{"t":3,"h":true,"f":10,"v":1},"name":{"t":15,"f":64,"v":"a"},'
         b'"price":{"t":246,"f":64,"v":"1.0000"},"raw":{"t":15,"f":65,"v":null}}}')
    assert value == L(len(v)) + v


def test_ddl_and_resolved_wire_shape():
    msgs = op.OpenProtocolEncoder().encode([DDLEvent("shop", "items", "TRUNCATE TABLE items", 9, 11),
                                            ResolvedEvent(10)])
    k = b'{"ts":9,"scm":"shop","tbl":"items","t":2}'
    v = b'{"q":"TRUNCATE TABLE items","t":11}'
    assert msgs[0] == (L(1) + L(len(k)) + k, L(len(v)) + v)
    k = b'{"ts":10,"t":3}'
    assert msgs[1] == (L(1) + L(len(k)) + k, b"\x00" * 8)


def test_float_is_written_in_float32_shortest_form():
    t = TableSchema("s", "t", (Column("f", "FLOAT"),))
    [(_, value)] = op.OpenProtocolEncoder().encode([RowChange(t, "insert", 1, {"f": op_schema.to_float32(0.1)})])
    assert b'"v":0.1}' in value


# --------------------------------------------------------------------------- batching

def _rows(n, table=TABLE):
    return [RowChange(table, "insert", i, {"id": i, "name": "x" * 10, "price": Decimal("0.0000"), "raw": b""})
            for i in range(n)]


def test_rows_batch_up_to_max_batch_size():
    msgs = op.OpenProtocolEncoder({"max-batch-size": 4}).encode(_rows(10))
    dec = op.OpenProtocolDecoder()
    assert [len(dec.decode(k, v)) for k, v in msgs] == [4, 4, 2]
    assert [e.commit_ts for k, v in msgs for e in dec.decode(k, v)] == list(range(10))


def test_rows_batch_within_max_message_bytes():
    rows = _rows(20)
    one = op.OpenProtocolEncoder({"max-batch-size": 1}).encode(rows[:1])[0]
    per_row = len(one[0]) - 8 + len(one[1]) + 16
    limit = 36 + 3 * per_row + 10  # room for exactly three rows
    msgs = op.OpenProtocolEncoder({"max-batch-size": 100, "max-message-bytes": limit}).encode(rows)
    assert all(len(k) + len(v) + 36 <= limit + 8 for k, v in msgs)
    dec = op.OpenProtocolDecoder()
    assert [len(dec.decode(k, v)) for k, v in msgs] == [3] * 6 + [2]


def test_a_row_larger_than_max_message_bytes_is_an_error():
    with pytest.raises(op.MessageTooLarge, match="max-message-bytes is 100"):
        op.OpenProtocolEncoder({"max-message-bytes": 100}).encode(_rows(1))


def test_control_events_close_the_batch_and_keep_order():
    evs = _rows(2) + [DDLEvent("shop", "items", "q", 3, 5)] + _rows(1) + [ResolvedEvent(9)]
    msgs = op.OpenProtocolEncoder().encode(evs)
    assert len(msgs) == 4
    dec = op.OpenProtocolDecoder()
    out = [e for k, v in msgs for e in dec.decode(k, v)]
    assert [type(e).__name__ for e in out] == ["RowChange", "RowChange", "DDLEvent", "RowChange", "ResolvedEvent"]


def test_bad_options_are_config_errors():
    with pytest.raises(ConfigError):
        op.OpenProtocolEncoder({"max-batch-size": 0})
    with pytest.raises(ConfigError):
        op.OpenProtocolEncoder({"output-old-value": "maybe"})
    with pytest.raises(ConfigError):
        op.OpenProtocolEncoder({"no-such-option": 1})
    assert op.OpenProtocolEncoder({"output-old-value": "false"}).options["output-old-value"] is False


# --------------------------------------------------------------------------- options

def test_without_old_value_an_update_reads_back_as_insert():
    """The format marks an update only by its "p" image (documented limitation)."""
    ev = RowChange(TABLE, "update", 1, {"id": 1, "name": "b", "price": None, "raw": None},
                   {"id": 1, "name": "a", "price": None, "raw": None})
    [(k, v)] = op.OpenProtocolEncoder({"output-old-value": False}).encode([ev])
    assert b'"p"' not in v
    [back] = op.OpenProtocolDecoder().decode(k, v)
    assert back.kind == "insert" and back.old is None


def test_only_updated_columns_and_delete_handle_key_only():
    ev = RowChange(TABLE, "update", 1, {"id": 1, "name": "b", "price": None, "raw": None},
                   {"id": 1, "name": "a", "price": None, "raw": None})
    enc = op.OpenProtocolEncoder({"only-output-updated-columns": True,
                                  "delete-only-output-handle-key-columns": True})
    [(k, v)] = enc.encode([ev])
    [back] = op.OpenProtocolDecoder().decode(k, v)
    assert back.kind == "update" and back.old == {"name": "a"}
    [(k, v)] = enc.encode([RowChange(TABLE, "delete", 2, {"id": 1, "name": "b", "price": None, "raw": None})])
    [back] = op.OpenProtocolDecoder().decode(k, v)
    assert back.kind == "delete" and back.row == {"id": 1}


def test_schema_change_with_same_column_names_rebuilds_the_table():
    dec = op.OpenProtocolDecoder()
    key = frame_key(j({"ts": 1, "scm": "s", "tbl": "t", "t": 1}))
    [a] = dec.decode(key, frame_value(j({"u": {"c": {"t": 3, "f": 64, "v": 1}}})))
    [b] = dec.decode(key, frame_value(j({"u": {"c": {"t": 15, "f": 64, "v": "x"}}})))
    assert a.table.column("c").type == "INT" and b.table.column("c").type == "VARCHAR"
    assert b.row == {"c": "x"}


# --------------------------------------------------------------------------- unrepresentable values

@pytest.mark.parametrize("col, value, why", [
    (Column("c", "DOUBLE"), float("nan"), "finite"),
    (Column("c", "FLOAT"), 0.1, "float32"),
    (Column("c", "INT"), 2**31, "int in"),
    (Column("c", "BIGINT", unsigned=True), 2**64, "int in"),
    (Column("c", "INT"), True, "int in"),
    (Column("c", "TIME"), dt.timedelta(hours=839), "838:59:59"),
    (Column("c", "DATETIME", fsp=2), dt.datetime(2020, 1, 1, 0, 0, 0, 1), "fsp 2"),
    (Column("c", "ENUM", elements=("a",)), "b", "not one of"),
    (Column("c", "ENUM"), "a", "elements unknown"),
    (Column("c", "SET", elements=("a",)), "a,b", "not one of"),
    (Column("c", "BIT", length=3), 8, "int in"),
    (Column("c", "DECIMAL"), 1.5, "Decimal"),
    (Column("c", "VARBINARY", binary=True), "text", "bytes"),
])
def test_unrepresentable_values_name_table_column_and_value(col, value, why):
    t = TableSchema("db", "tb", (col,))
    with pytest.raises(UnrepresentableValue, match=why) as info:
        op.OpenProtocolEncoder().encode([RowChange(t, "insert", 1, {"c": value})])
    assert info.value.table == "db.tb" and info.value.column == "c" and info.value.value is value


def test_column_not_in_table_is_an_error():
    with pytest.raises(UnrepresentableValue, match="not in the table"):
        op.OpenProtocolEncoder().encode([RowChange(TABLE, "insert", 1, {"id": 1, "zzz": 2})])


# --------------------------------------------------------------------------- Go quoting

@pytest.mark.parametrize("raw, quoted", [
    (b"abc", "abc"),
    (b'a"b\\c', 'a\\"b\\\\c'),
    (b"\x00\x07\n\x7f", "\\x00\\a\\n\\x7f"),
    (b"\xff\xe2\x82", "\\xff\\xe2\\x82"),  # invalid UTF-8 byte by byte
    ("é€😀".encode(), "é€😀"),  # printable runes stay
    ("\u2028\u00ad".encode(), "\\u2028\\u00ad"),  # non-printable runes
    ("\U000e0001".encode(), "\\U000e0001"),
])
def test_go_quote_vectors(raw, quoted):
    assert op.go_quote(raw) == quoted
    assert op.go_unquote(quoted) == raw


def test_go_unquote_accepts_octal_and_rejects_bad_escapes():
    assert op.go_unquote("\\101\\x41\\u0041") == b"AAA"
    for bad in ("\\q", "\\x4", "\\'", "\\uD800", "tail\\"):
        with pytest.raises(ValueError):
            op.go_unquote(bad)


@given(st.binary(max_size=64))
def test_go_quote_round_trips_any_bytes(raw):
    quoted = op.go_quote(raw)
    quoted.encode("utf-8")  # always valid text for JSON
    assert op.go_unquote(quoted) == raw


# --------------------------------------------------------------------------- round trips

def _project(table: TableSchema, row: dict | None) -> dict | None:
    """What open protocol carries without the table's elements: ENUM index and SET
    bitmask, as decimal text (the documented fallback, shared with canal-json)."""
    if row is None:
        return None
    out = {}
    for name, v in row.items():
        col = table.column(name)
        if v is not None and col.type == "ENUM":
            v = str(col.elements.index(v) + 1)
        elif v is not None and col.type == "SET":
            v = str(sum(1 << col.elements.index(m) for m in v.split(",")) if v else 0)
        out[name] = v
    return out


def _events(table, rows):
    evs = []
    for i, row in enumerate(rows):
        kind = ("insert", "update", "delete")[i % 3]
        old = rows[i - 1] if kind == "update" else None
        evs.append(RowChange(table, kind, 400_000 + i, row, old))
    return evs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables_and_rows(max_rows=4))
def test_round_trip_with_the_table_known_is_exact(table_rows):
    table, rows = table_rows
    events = _events(table, rows)
    msgs = op.OpenProtocolEncoder({"max-batch-size": 2}).encode(events)
    back = op.OpenProtocolDecoder({table.collection: table}).decode_many(msgs)
    assert len(back) == len(events)
    for a, b in zip(events, back):
        assert b.table is table
        assert to_record(b, b"p") == to_record(a, b"p")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables_and_rows(max_rows=4))
def test_round_trip_from_the_wire_alone(table_rows):
    """Without the table, values are intact except ENUM/SET, which stay index/bitmask text,
    and the column model is what type codes and flags carry."""
    table, rows = table_rows
    events = _events(table, rows)
    back = op.OpenProtocolDecoder().decode_many(op.OpenProtocolEncoder().encode(events))
    for a, b in zip(events, back):
        assert b.kind == a.kind and b.commit_ts == a.commit_ts
        exp = to_record(RowChange(table, a.kind, a.commit_ts, _project(table, a.row), _project(table, a.old)), b"p")
        assert to_record(b, b"p") == exp
        for col in table.columns:
            got = b.table.column(col.name)
            binary = col.binary or col.type in ("BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB")
            assert (got.type, got.unsigned, got.nullable, got.handle_key, got.binary) == (
                col.type, col.unsigned, col.nullable, col.handle_key, binary)
    # a second hop from the wire-only model loses nothing more
    again = op.OpenProtocolDecoder().decode_many(op.OpenProtocolEncoder().encode(back))
    assert [to_record(e, b"p") for e in again] == [to_record(e, b"p") for e in back]
