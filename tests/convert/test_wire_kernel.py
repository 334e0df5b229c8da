"""``from_wire`` (a batch message's bytes to records) against upb's parse + ``from_proto``.

Both must give the same records, or the same typed error, for every input: records of every
value kind (structured ones as Avro named by metadata), TiDB rows with their column-type
schemas, odd shapes upb reads differently from encoders, and corrupted bytes. With ``failed``,
a record that does not convert is None and reported by its index, the others are kept.
(The Avro decoder kernel's tests at the end read through the same path.)
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import re
import sys
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.leakcheck import traced_growth

from cdcflow.convert.avro import codec_for
from cdcflow.convert.protobuf import PbRecord, from_proto, from_wire, to_wire
from cdcflow.errors import ConversionError, SchemaError
from cdcflow.pb.connector.v2 import destination_pb2
from cdcflow.record import Operation, Record
from cdcflow.schemas import SchemaStore
from cdcflow.varint import uvarint

from helpers.record_strategies import SETTINGS, records


Batch = destination_pb2.Destination.Run.Request
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _message(wire: list[bytes]) -> bytes:
    """A batch message of records' bytes (each one field 1), framed here so odd shapes stay as they are."""
    return b"".join(_field(1, 2, w) for w in wire)


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    tag = uvarint(number << 3 | wire_type)
    return tag + (uvarint(len(payload)) + payload if wire_type == 2 else payload)


def _outcome(fn):
    """("ok", result) or (error type, message): what a caller can tell apart."""
    try:
        return "ok", fn()
    except (ConversionError, SchemaError) as e:  # fastavro's messages name a BytesIO by address
        return type(e).__name__, re.sub(r" at 0x[0-9a-f]+", "", str(e))


def _three_ways(message: bytes, store: SchemaStore, with_failed: bool = False) -> None:
    """``from_wire`` agrees with upb + ``from_proto`` on ``message`` (record by record with ``failed``)."""
    def read():
        failed: dict | None = {} if with_failed else None
        out = from_wire(message, store, failed)
        return out, _failures(failed)

    got = _outcome(read)
    try:
        pbs = Batch.FromString(message).records
    except Exception:  # noqa: BLE001 - upb refuses the whole message
        assert got[0] == "ConversionError" and "malformed batch message" in got[1]
        return
    if not with_failed:
        assert got == _outcome(lambda: (from_proto(pbs, store), None))
        return
    records, failures = [], {}
    for i, pb in enumerate(pbs):  # one record at a time: its error alone, by its index
        one = _outcome(lambda: from_proto([pb], store)[0])
        if one[0] == "ok":
            records.append(one[1])
        else:
            records.append(None)
            failures[i] = (pb.position, *one)
    assert got == ("ok", (records, failures))


def _failures(failed: dict | None):
    if failed is None:
        return None
    return {i: (p, type(e).__name__, re.sub(r" at 0x[0-9a-f]+", "", str(e))) for i, (p, e) in failed.items()}


# -- differential properties ---------------------------------------------------------------------

@SETTINGS
@given(st.lists(records(mixed_payload=True), min_size=1, max_size=5), st.sampled_from(["avro", "struct"]))
def test_records_of_every_value_kind_read_alike(batch, structured):
    store = SchemaStore()
    try:
        wire = to_wire(batch, store, structured)
    except ConversionError:
        return  # Struct cannot hold every value
    _three_ways(_message(wire), store)


@SETTINGS
@given(st.lists(records(mixed_payload=False), min_size=1, max_size=5))
def test_from_wire_gives_back_what_to_wire_took(batch):
    store = SchemaStore()
    assert from_wire(_message(to_wire(batch, store)), store) == batch


@st.composite
def _tidb_batches(draw):
    from helpers.tidb_strategies import tables_and_rows

    from cdcflow.connectors.ticdc.schema import attach_table

    table, rows = draw(tables_and_rows(max_rows=4))
    store = SchemaStore()
    key_names = [c.name for c in table.handle_key]
    batch = []
    for i, row in enumerate(rows):
        md = {"opencdc.collection": f"{table.schema}.{table.table}", "note": draw(st.sampled_from(["", "\u2028", "\x00\x7f", "𝔘"]))}
        r = Record(str(i).encode(), draw(st.sampled_from(list(Operation))), md,
                   {k: row[k] for k in key_names} or None, draw(st.sampled_from([None, row])), row)
        attach_table(r, table, store)
        batch.append(r)
    return store, batch


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_tidb_batches())
def test_tidb_rows_with_their_column_type_schemas_read_alike(store_batch):
    store, batch = store_batch
    message = _message(to_wire(batch, store))
    _three_ways(message, store)
    assert from_wire(message, store) == batch


_small_records = st.builds(
    Record, st.binary(max_size=4), st.sampled_from(list(Operation)),
    st.dictionaries(st.sampled_from(["a", "opencdc.collection", "\u2028"]), st.text(max_size=3), max_size=2),
    st.one_of(st.none(), st.binary(max_size=6), st.fixed_dictionaries({"id": st.integers(-5, 5)})),
    st.one_of(st.none(), st.binary(max_size=6)),
    st.one_of(st.none(), st.binary(max_size=200),
              st.fixed_dictionaries({"v": st.text(max_size=4), "d": st.one_of(st.none(), st.dates()),
                                     "f": st.floats(allow_nan=False, allow_infinity=False), "t": st.datetimes()})),
)


@FUZZ
@given(st.lists(_small_records, min_size=1, max_size=3), st.data(), st.booleans())
def test_corrupted_messages_read_alike_or_fail_alike(batch, data, with_failed):
    """Flip, cut or insert bytes: all three agree, record by record, error by error."""
    store = SchemaStore()
    message = bytearray(_message(to_wire(batch, store)))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(message)))
        edit = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if edit == "flip" and at < len(message):
            message[at] = data.draw(st.integers(0, 255))
        elif edit == "cut":
            del message[at:at + data.draw(st.integers(1, 4))]
        else:
            message[at:at] = data.draw(st.binary(min_size=1, max_size=3))
    _three_ways(bytes(message), store, with_failed)


# -- shapes encoders do not write -----------------------------------------------------------------------

def _canonical() -> PbRecord:
    pb = PbRecord(position=b"p1", operation=2, metadata={"a": "1", "b": "2"})
    pb.key.raw_data = b"k"
    pb.payload.after.raw_data = b"v" * 300
    return pb


ODD_RECORDS = {
    "canonical": _canonical().SerializeToString(),
    "struct data": PbRecord(position=b"s", key={"structured_data": {"id": 7}}).SerializeToString(),
    "fields out of order": _field(5, 2, _field(2, 2, _field(1, 2, b"late"))) + _field(1, 2, b"pos"),
    "repeated position": _canonical().SerializeToString() + _field(1, 2, b"second"),
    "repeated key (merged)": _canonical().SerializeToString() + _field(4, 2, _field(1, 2, b"merged")),
    "unknown field first": _field(99, 2, b"unknown") + _canonical().SerializeToString(),
    "unknown varint field": _canonical().SerializeToString() + _field(98, 0, b"\x96\x01"),
    "operation as two-byte varint": b"\x0a\x02p3\x10\x81\x00",
    "operation 0 written out": b"\x0a\x01p\x10\x00",
    "operation out of range": b"\x0a\x01p\x10\x05",
    "operation far out of range": b"\x0a\x01p\x10\xff\x01",
    "duplicate map keys": _field(3, 2, _field(1, 2, b"dup") + _field(2, 2, b"x"))
    + _field(3, 2, _field(1, 2, b"dup") + _field(2, 2, b"y")),
    "map entry without key": _field(3, 2, _field(2, 2, b"only-value")),
    "map entry, fields reversed": _field(3, 2, _field(2, 2, b"v") + _field(1, 2, b"k")),
    "invalid UTF-8 in metadata": _field(3, 2, _field(1, 2, b"k") + _field(2, 2, b"\xff\xfe")),
    "invalid UTF-8 in metadata key": _field(3, 2, _field(1, 2, b"\xc3") + _field(2, 2, b"v")),
    "empty record": b"",
    "empty Data": _field(4, 2, b""),
    "empty Change": _field(5, 2, b""),
    "non-minimal length varint": b"\x0a\x82\x00pp",
    "raw data twice in a Data": _field(4, 2, _field(1, 2, b"a") + _field(1, 2, b"b")),
    "after before before": _field(5, 2, _field(2, 2, _field(1, 2, b"a")) + _field(1, 2, _field(1, 2, b"b"))),
    "big position": _field(1, 2, b"p" * 70000),
    "truncated position": b"\x0a\x05ab",
    "length past the record": _field(4, 2, b"\x0a\x09abc"),
    "10-byte length varint": b"\x0a\x81\x80\x80\x80\x80\x80\x80\x80\x80\x00p",
    "11-byte varint": b"\x10\x81\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00",
    "group wire type": b"\x0b\x0c",
}


@pytest.mark.parametrize("name", sorted(ODD_RECORDS))
@pytest.mark.parametrize("with_failed", [False, True])
def test_odd_shapes_read_as_upb_reads_them(name, with_failed):
    store = SchemaStore()
    odd = ODD_RECORDS[name]
    canonical = ODD_RECORDS["canonical"]
    for parts in ([odd], [canonical, odd, canonical], [odd, odd]):
        _three_ways(b"".join(_field(1, 2, p) for p in parts), store, with_failed)


@pytest.mark.parametrize("message", [
    _field(7, 2, b"batch-level unknown") + _field(1, 2, b""),
    _field(1, 2, b"") + b"\x0a\x05ab",  # the last record runs past the end
    b"\x0a\x80",  # a length cut short
    b"\x0a" + b"\xff" * 11,
    b"\x12\x00",
    b"",
])
def test_messages_that_are_not_a_plain_run_of_records(message):
    _three_ways(message, SchemaStore())
    _three_ways(message, SchemaStore(), with_failed=True)


def _schema_store(schema: dict, subject: str = "s") -> SchemaStore:
    store = SchemaStore()
    store.register(subject, json.dumps(schema))
    return store


def _ref_metadata(subject: str = "s", version: str = "1") -> dict[str, str]:
    return {"opencdc.payload.schema.subject": subject, "opencdc.payload.schema.version": version}


def test_schema_failures_are_reported_per_record():
    """Unknown subject, bad Avro bytes, a marker that does not parse: the failed dict says so."""
    schema = {"type": "record", "name": "r", "fields": [{"name": "v", "type": "long"}]}
    store = _schema_store(schema)
    good = PbRecord(position=b"good", metadata=_ref_metadata())
    good.payload.after.raw_data = codec_for(json.dumps(schema)).encode({"v": 5})
    unknown = PbRecord(position=b"unknown", metadata=_ref_metadata("nope"))
    unknown.payload.after.raw_data = b"\x00"
    bad_avro = PbRecord(position=b"bad-avro", metadata=_ref_metadata())
    bad_avro.payload.after.raw_data = b"\x80"
    empty_subject = PbRecord(position=b"empty", metadata=_ref_metadata(""))
    empty_subject.payload.after.raw_data = b"raw stays raw"
    bad_version = PbRecord(position=b"v", metadata=_ref_metadata("s", "x"))
    bad_version.payload.after.raw_data = b"\x0a"
    marker = PbRecord(position=b"m", metadata={**_ref_metadata(), "cdcflow.schema.derived": "payload",
                                                 "cdcflow.schema.replaced": "{not json"})
    marker.payload.after.raw_data = b"\x0a"
    parts = [good, unknown, good, bad_avro, empty_subject, bad_version, marker, good]
    message = _message([p.SerializeToString() for p in parts])
    _three_ways(message, store, with_failed=True)
    _three_ways(message, store)
    failed: dict = {}
    out = from_wire(message, store, failed)
    assert out[0] == out[2] == out[7] and out[0].after == {"v": 5}
    assert out[4].after == b"raw stays raw" and set(failed) == {1, 3, 5, 6}


def test_payloads_of_other_schemas_read_alike():
    """Enums, fixed, arrays, nested records: the records read hold what the codec reads."""
    store = SchemaStore()
    for after in [{"e": "B"}, {"a": [1, 2, 3]}, {"n": {"x": 1, "y": ["z"]}}, {"m": {"k": b"v"}}]:
        batch = [Record(b"p", Operation.CREATE, {"a": "1"}, {"id": 1}, None, after)]
        message = _message(to_wire(batch, store))
        _three_ways(message, store)
        assert from_wire(message, store) == batch


# -- objects, references, memory -------------------------------------------------------------------

def test_records_read_are_ordinary_records():
    store = SchemaStore()
    batch = [Record(b"p", Operation.UPDATE, {"a": "1"}, b"k", None, {"v": 1.5, "s": "x"})]
    out = from_wire(_message(to_wire(batch, store)), store)
    r = out[0]
    counts = sys.getrefcount(r.after), sys.getrefcount(r.metadata)  # before asserts keep temporaries
    assert counts == (2, 2)  # the slot and the call: the record owns its values, nothing else holds them
    assert type(r) is Record and gc.is_tracked(r) and r == batch[0]
    assert set(map(id, gc.get_referents(r))) >= {id(r.position), id(r.metadata), id(r.key), id(r.after)}
    assert r.before is None and r.operation is Operation.UPDATE and repr(r).startswith("Record(")
    r.metadata["b"] = "2"  # each record owns its metadata dict
    assert out[0].metadata is r.metadata and r.copy() == r


def _grows(fn, rounds: int = 300) -> int:
    return traced_growth(fn, rounds)


def test_no_memory_grows_over_repeated_batches():
    """Records, hand-backs, per-record failures and whole-batch errors: nothing leaks."""
    store = SchemaStore()
    rows = [Record(str(i).encode(), Operation.CREATE, {"opencdc.collection": "t"}, {"id": i}, None,
                   {"id": i, "s": "x" * 50, "d": dt.date(2020, 1, 1 + i % 28), "f": i / 3, "n": None,
                    "m": Decimal(1000 + i).scaleb(-2)})
            for i in range(30)]
    raw = [Record(str(i).encode(), Operation.CREATE, {"m": str(i % 3)}, b"k", None, b"v" * 100) for i in range(30)]
    bad_avro = PbRecord.FromString(to_wire(rows[:1], store)[0])
    bad_avro.payload.after.raw_data = b"\xff"
    message = _message(to_wire(rows, store) + to_wire(raw, store) + [ODD_RECORDS["struct data"],
                                                                      bad_avro.SerializeToString(),
                                                                      ODD_RECORDS["operation out of range"]])
    truncated = message + b"\x0a\x05ab"

    def once():
        failed: dict = {}
        assert len(from_wire(message, store, failed)) == 63 and len(failed) == 2
        with pytest.raises(ConversionError):
            from_wire(message, store)
        with pytest.raises(ConversionError):
            from_wire(truncated, store, {})

    growth = _grows(once, rounds=150)
    assert growth < 8 * 1024, growth
