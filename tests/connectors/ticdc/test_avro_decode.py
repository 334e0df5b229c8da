"""AvroDecoder on rows of every TiDB type: values back as encoded, warm and cold decoders alike.

A warm decoder has its schemas and per-schema plans cached; a cold one parses them for the
message. Both must give the same events, and on malformed messages the same typed error at the
same position.
"""

from __future__ import annotations

import datetime
import struct
from decimal import Decimal

import pytest
from helpers.avro_registry import store_registry
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.tidb_strategies import tables_and_rows

from cdcflow.connectors.ticdc.avro import AvroDecoder, AvroEncoder, AvroOptions
from cdcflow.connectors.ticdc.errors import CodecError, MalformedMessage
from cdcflow.connectors.ticdc.events import DELETE, INSERT, UPDATE, RowChange
from cdcflow.record import Record
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

from helpers.avro_cases import malformed_cases

OPTIONS = st.builds(AvroOptions, st.booleans(), st.sampled_from(["precise", "string"]),
                    st.sampled_from(["long", "string"]))
TS = st.one_of(st.integers(0, 2**64 - 1), st.integers(1 << 55, 1 << 62),  # short, 9-byte and 10-byte varints
               st.sampled_from([0, 1, (1 << 63) - 1, 1 << 63, 2**64 - 1]))


def _view(ev):
    """Everything a decoded event carries, type-strict (1 != 1.0 != True, Decimal exponents)."""
    row = {k: (type(v).__name__, v.as_tuple() if isinstance(v, Decimal) else v) for k, v in (ev.row or {}).items()}
    return (type(ev).__name__, ev.kind, ev.commit_ts, list(ev.row or ()), row, ev.old, ev.extra,
            ev.table.collection, ev.table.columns)


def _decode_all(dec, messages):
    out = []
    for k, v in messages:
        try:
            out.append(_view(dec.decode(k, v, message_ms=1)))  # fixed: a first DELETE's ts is an estimate
        except CodecError as e:
            out.append((type(e).__name__, e.position))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=tables_and_rows(min_rows=1, max_rows=4, handle_key=True), opts=OPTIONS,
       kinds=st.lists(st.sampled_from([INSERT, UPDATE, DELETE]), min_size=4, max_size=4),
       stamps=st.lists(TS, min_size=4, max_size=4))
def test_rows_decode_back_warm_and_cold_alike(data, opts, kinds, stamps):
    """Rows (not DELETEs: their commit ts depends on what the decoder read before, by design)
    decode alike with the plans cached and fresh; their kind is the encoded one (every row is an
    INSERT without the extension, as TiCDC)."""
    table, rows = data
    reg = store_registry()
    events = [RowChange(table, kind, ts, row) for row, kind, ts in zip(rows, kinds, stamps) if kind != DELETE]
    messages = AvroEncoder(opts, reg).encode(events, "topic.x")
    warm_dec = AvroDecoder(opts, reg)
    warm = _decode_all(warm_dec, messages + messages)  # the second round with the plans cached
    cold = [_decode_all(AvroDecoder(opts, reg), [m])[0] for m in messages]
    assert warm == cold + cold
    kind = (lambda k: k) if opts.enable_tidb_extension else (lambda k: INSERT)
    assert [(got[0], got[1]) for got in cold] == [("RowChange", kind(ev.kind)) for ev in events]


def _table(*cols: Column) -> TableSchema:
    return TableSchema("s", "t", (Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True), *cols))


def test_rows_decode_to_their_values():
    """A warm decoder gives every row's values, kind and commit ts back (decimal exponents kept)."""
    reg = store_registry()
    opts = AvroOptions(enable_tidb_extension=True)
    t = _table(Column("u", "BIGINT", unsigned=True), Column("f", "DECIMAL", precision=12, scale=2),
               Column("d", "DATE"), Column("x", "DOUBLE"), Column("s", "VARCHAR", length=20))
    rows = [{"id": i, "u": 2**64 - 1 - i, "f": Decimal(i * 37 - 1000).scaleb(-2),
             "d": datetime.date(2024, 1, 1 + i % 20), "x": i / 3, "s": "é" * i} for i in range(50)]
    msgs = AvroEncoder(opts, reg).encode([RowChange(t, UPDATE, (1_700_000_000_000 + i) << 18, r)
                                          for i, r in enumerate(rows)], "t")
    dec = AvroDecoder(opts, reg)
    dec.decode(*msgs[0])
    back = [dec.decode(k, v) for k, v in msgs]
    assert [Record(after=e.row) for e in back] == [Record(after=r) for r in rows]
    assert [e.commit_ts for e in back] == [(1_700_000_000_000 + i) << 18 for i in range(50)]
    assert {e.kind for e in back} == {UPDATE}
    assert [e.row["f"].as_tuple().exponent for e in back] == [-2] * 50


def test_malformed_corpus_warm_and_cold():
    """Every malformed message raises its typed error, whether the decoder knows the schemas or not."""
    reg = store_registry()
    t = TableSchema("s", "t", (Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
                               Column("v", "VARCHAR", length=9), Column("d", "DATE")))
    k, v = AvroEncoder(AvroOptions(enable_tidb_extension=True), reg).encode(
        [RowChange(t, INSERT, 1 << 18, {"id": 1, "v": "hello", "d": datetime.date(2020, 1, 1)})], "t")[0]
    cases = [c for c in malformed_cases(k, v) if c[0] != "schema id not a record"]
    warm = AvroDecoder(None, reg)
    warm.decode(k, v)
    warm.decode(k, None)
    cold = AvroDecoder(None, reg)
    for name, key, value, err, position in cases:
        for dec in (warm, cold):
            with pytest.raises(err) as info:
                dec.decode(key, value)
            if position is not None:
                assert info.value.position == position, (name, info.value.position)
    for cut in range(5, len(v)):  # every truncation, warm and cold alike
        results = []
        for dec in (warm, cold):
            try:
                results.append(_view(dec.decode(k, v[:cut])))
            except CodecError as e:
                results.append((type(e).__name__, e.position))
        assert results[0] == results[1], cut
    assert warm.decode(k, v).row == {"id": 1, "v": "hello", "d": datetime.date(2020, 1, 1)}


def test_decimal_beyond_its_precision_is_malformed():
    """fastavro would round (or wrap) it silently; the column conversion refuses it, warm and cold."""
    reg = store_registry()
    t = _table(Column("f", "DECIMAL", precision=3, scale=1))
    k, v = AvroEncoder(None, reg).encode([RowChange(t, INSERT, 0, {"id": 1, "f": Decimal("12.3")})], "t")[0]
    unscaled = (123).to_bytes(1, "big")
    assert v.endswith(b"\x02" + unscaled)  # union branch 1, length 1, the unscaled 123
    too_wide = v[:-2] + b"\x04" + (12345).to_bytes(2, "big")
    for dec in (AvroDecoder(None, reg), AvroDecoder(None, reg)):
        assert dec.decode(k, v).row["f"] == Decimal("12.3")
        with pytest.raises(MalformedMessage, match="digits"):
            dec.decode(k, too_wide)


def test_foreign_logical_types_are_read_by_fastavro():
    """A logical type TiCDC does not write (timestamp-millis): fastavro reads it, the row decodes."""
    import json

    from cdcflow.schemas import SchemaStore
    from cdcflow.connectors.ticdc.avro import StoreRegistry

    store = SchemaStore()
    reg = StoreRegistry(store)
    schema = {"type": "record", "name": "t", "namespace": "default.s", "fields": [
        {"name": "id", "type": {"type": "long", "connect.parameters": {"tidb_type": "BIGINT"}}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis",
                                "connect.parameters": {"tidb_type": "BIGINT"}}}]}
    sid = reg.register("t-value", json.dumps(schema))
    body = b"\x00" + struct.pack(">I", sid) + b"\x02\x04"
    dec = AvroDecoder(None, reg)
    ev = dec.decode(None, body)
    assert ev.row["id"] == 1 and ev.row["ts"] is not None
