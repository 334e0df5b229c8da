"""``to_wire`` (the standalone host's record bytes) parses to exactly the messages ``to_proto`` builds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdcflow.convert import protobuf
from cdcflow.convert.protobuf import PbRecord, batch_bytes, to_batch, to_proto, to_wire
from cdcflow.errors import ConversionError
from cdcflow.record import Operation, Record
from cdcflow.schemas import SchemaStore

from helpers.record_strategies import SETTINGS, records



@SETTINGS
@given(st.lists(records(mixed_payload=True), min_size=1, max_size=4), st.sampled_from(["avro", "struct"]))
def test_wire_bytes_parse_to_the_proto_messages(batch, structured):
    # Which schema version a derived payload gets depends on what the store already holds,
    # so each side starts from an empty store of its own: same history, same answer.
    try:
        pbs = to_proto(batch, SchemaStore(), structured)
    except ConversionError as e:  # Struct cannot hold every value: both refuse alike
        with pytest.raises(ConversionError) as info:
            to_wire(batch, SchemaStore(), structured)
        assert str(info.value) == str(e)
        return
    wire = to_wire(batch, SchemaStore(), structured)
    assert [PbRecord.FromString(w) for w in wire] == pbs


@SETTINGS
@given(st.lists(records(mixed_payload=True), max_size=7), st.sampled_from(["avro", "struct"]))
def test_batch_bytes_are_one_batch_message_of_all_pieces(batch, structured):
    """Pieces of two records: their bytes joined are the batch message of the whole batch,
    and the schema choice runs through the pieces as through one message."""
    try:
        expected = to_batch(batch, SchemaStore(), structured)
    except ConversionError as e:
        with pytest.raises(ConversionError) as info:
            batch_bytes(batch, SchemaStore(), structured)
        assert str(info.value) == str(e)
        return
    old, protobuf.PIECE_RECORDS = protobuf.PIECE_RECORDS, 2
    kernel, protobuf._kernel = protobuf._kernel, None  # upb's pieces (the kernel: test_wire_twin.py)
    try:
        data = batch_bytes(batch, SchemaStore(), structured)
    finally:
        protobuf.PIECE_RECORDS, protobuf._kernel = old, kernel
    assert data == expected.SerializeToString(deterministic=True)


def test_empty_data_and_defaults_are_kept():
    r = Record(b"", Operation.UNSPECIFIED, {}, b"", b"", None)
    (w,) = to_wire([r])
    pb = PbRecord.FromString(w)
    assert pb.HasField("key") and pb.key.WhichOneof("data") == "raw_data" and pb.key.raw_data == b""
    assert pb.payload.HasField("before") and not pb.payload.HasField("after")
    assert pb == to_proto([r])[0]


def test_long_values_use_multi_byte_lengths():
    r = Record(b"p" * 300, Operation.DELETE, {"k" * 20000: "v" * 200}, None, None, b"x" * 70000)
    assert PbRecord.FromString(to_wire([r])[0]) == to_proto([r])[0]


# -- from_wire: records straight from a batch message's bytes ------------------------------

from hypothesis import HealthCheck, settings  # noqa: E402

from cdcflow.convert.protobuf import from_proto, from_wire  # noqa: E402
from cdcflow.errors import SchemaError  # noqa: E402
from cdcflow.pb.connector.v2 import destination_pb2  # noqa: E402

Batch = destination_pb2.Destination.Run.Request


def _message(wire: list[bytes]) -> bytes:
    """A batch message of records' bytes (each one field 1), framed here so odd shapes stay as they are."""
    return b"".join(_field(1, 2, w) for w in wire)


def _reference(message: bytes, store: SchemaStore) -> list[Record]:
    """What upb + from_proto make of the message: the answer from_wire must give."""
    return from_proto(Batch.FromString(message).records, store)


def _outcome(fn):
    try:
        return "ok", fn()
    except (ConversionError, SchemaError) as e:
        return type(e).__name__, str(e)


@SETTINGS
@given(st.lists(records(mixed_payload=True), min_size=1, max_size=5), st.sampled_from(["avro", "struct"]))
def test_from_wire_equals_upb_and_from_proto(batch, structured):
    store = SchemaStore()
    try:
        wire = to_wire(batch, store, structured)
    except ConversionError:
        return  # Struct cannot hold every value (test above)
    message = _message(wire)
    assert from_wire(message, store) == _reference(message, store)


@SETTINGS
@given(st.lists(records(mixed_payload=False), min_size=1, max_size=5))
def test_from_wire_gives_back_what_to_wire_took(batch):
    store = SchemaStore()
    assert from_wire(_message(to_wire(batch, store)), store) == batch


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    from cdcflow.varint import uvarint

    tag = uvarint(number << 3 | wire_type)
    return tag + (uvarint(len(payload)) + payload if wire_type == 2 else payload)


def test_records_in_other_shapes_read_as_upb_reads_them():
    """Field order, repeats, unknown fields, Struct data, long varints: upb has the last word."""
    store = SchemaStore()
    raw = PbRecord(position=b"p1", operation=2, metadata={"a": "1", "b": "2"})
    raw.key.raw_data = b"k"
    raw.payload.after.raw_data = b"v" * 300
    struct = PbRecord(position=b"p2")
    struct.key.structured_data.update({"id": 7})
    struct.payload.before.structured_data.update({"x": "y"})
    canonical = raw.SerializeToString()
    odd = [
        canonical,
        struct.SerializeToString(),
        _field(5, 2, _field(2, 2, _field(1, 2, b"late"))) + _field(1, 2, b"pos") + _field(3, 2, _field(1, 2, b"m")),
        canonical + _field(1, 2, b"second-position"),  # a repeated scalar: the last one wins
        canonical + _field(4, 2, _field(1, 2, b"merged-key")),  # a repeated message: merged
        _field(99, 2, b"unknown") + canonical,
        canonical + _field(98, 0, b"\x96\x01"),
        b"\x0a\x02p3\x10\x81\x00",  # operation 1 as a two-byte varint
        _field(3, 2, _field(1, 2, b"dup") + _field(2, 2, b"x")) + _field(3, 2, _field(1, 2, b"dup") + _field(2, 2, b"y")),
        _field(3, 2, _field(2, 2, b"only-value")),
        b"",  # an empty record
        _field(4, 2, b""),  # an empty Data: no key
        _field(5, 2, b""),  # an empty Change
    ]
    message = b"".join(_field(1, 2, r) for r in odd)
    assert from_wire(message, store) == _reference(message, store)
    extra = _field(7, 2, b"batch-level unknown") + message
    assert from_wire(extra, store) == _reference(extra, store)
    # each shape also as the last record of a message (nothing follows its bytes)
    for r in odd:
        alone = _field(1, 2, r)
        assert from_wire(alone, store) == _reference(alone, store)


_small_records = st.builds(
    Record, st.binary(max_size=4), st.sampled_from(list(Operation)),
    st.dictionaries(st.sampled_from(["a", "opencdc.collection"]), st.text(max_size=3), max_size=2),
    st.one_of(st.none(), st.binary(max_size=6), st.fixed_dictionaries({"id": st.integers(-5, 5)})),
    st.one_of(st.none(), st.binary(max_size=6)),
    st.one_of(st.none(), st.binary(max_size=200), st.fixed_dictionaries({"v": st.text(max_size=4)})),
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_small_records, min_size=1, max_size=3), st.data())
def test_corrupted_bytes_fail_or_read_as_upb_reads_them(batch, data):
    """Differential fuzz: flip, cut or insert bytes; from_wire and upb agree, or both refuse."""
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
    message = bytes(message)
    try:
        pbs = Batch.FromString(message).records
    except Exception:  # noqa: BLE001 - upb refuses the message
        with pytest.raises(ConversionError, match="malformed batch message"):
            from_wire(message, store)
        return
    assert _outcome(lambda: from_wire(message, store)) == _outcome(lambda: from_proto(pbs, store))


def test_failed_records_are_reported_by_index_with_their_position():
    store = SchemaStore()
    good = Record(b"g", Operation.CREATE, {"opencdc.collection": "t"}, {"id": 1}, None, {"v": 1})
    wire = to_wire([good, good], store)
    bad_op = PbRecord(position=b"bad-op", operation=17).SerializeToString()
    bad_avro = PbRecord.FromString(wire[0])
    bad_avro.position = b"bad-avro"
    bad_avro.payload.after.raw_data = b"\xff\xff\xff"
    message = _message([wire[0], bad_op, bad_avro.SerializeToString(), wire[1]])
    failed: dict = {}
    out = from_wire(message, store, failed)
    assert out[0] == good and out[3] == good and out[1] is None and out[2] is None
    assert failed[1][0] == b"bad-op" and "unknown operation number 17" in str(failed[1][1])
    assert failed[2][0] == b"bad-avro" and "payload (schema 't.payload'" in str(failed[2][1])
    with pytest.raises(ConversionError, match="bad-op"):
        from_wire(message, store)


def test_unknown_schema_reference_names_the_record():
    store = SchemaStore()
    pb = PbRecord(position=b"p7", metadata={"opencdc.payload.schema.subject": "nope",
                                            "opencdc.payload.schema.version": "1"})
    pb.payload.after.raw_data = b"\x00"
    failed: dict = {}
    assert from_wire(_message([pb.SerializeToString()]), store, failed) == [None]
    assert isinstance(failed[0][1], SchemaError) and "p7" in str(failed[0][1])


# -- a batch converts as its records do one by one ---------------------------------------------

def _one_by_one(batch: list[Record], store: SchemaStore, structured: str = "avro") -> list[bytes]:
    return [w for r in batch for w in to_wire([r], store, structured)]


@SETTINGS
@given(st.lists(records(mixed_payload=True), min_size=1, max_size=6))
def test_a_batch_converts_as_its_records_one_by_one(batch):
    """Records after the first try the schemas the one before got: same choice as ``attach``."""
    try:
        expected = _one_by_one(batch, SchemaStore())
    except ConversionError as e:
        with pytest.raises(ConversionError) as info:
            to_wire(batch, SchemaStore())
        assert str(info.value) == str(e)
        return
    assert to_wire(batch, SchemaStore()) == expected


def test_schema_choice_follows_the_values_through_a_batch():
    import json as _json

    named = {"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"}]}
    md_named = {"opencdc.collection": "db.t", "opencdc.payload.schema.subject": "db.t.named",
                "opencdc.payload.schema.version": "1"}
    md_plain = {"opencdc.collection": "db.t"}
    rows = [{"id": 1}, {"id": 2}, {"id": "text"}, {"id": 3}, {"id": 4, "x": 1.5}, {"id": 5, "x": 2.5}, {"id": 6}]
    batch = [Record(str(i).encode(), Operation.UPDATE, dict(md), {"k": i}, None, row)
             for md in (md_named, md_plain) for i, row in enumerate(rows)]
    batch.append(Record(b"raw", Operation.CREATE, dict(md_plain), {"k": 0}, None, b"raw payload"))
    stores = []
    for _ in range(2):
        store = SchemaStore()
        store.register("db.t.named", _json.dumps(named))
        stores.append(store)
    expected = _one_by_one(batch, stores[0])
    got = to_wire(batch, stores[1])
    assert got == expected
    assert from_wire(_message(got), stores[1]) == batch
    subjects = [PbRecord.FromString(w).metadata.get("opencdc.payload.schema.subject") for w in got]
    assert subjects[:4] == ["db.t.named", "db.t.named", "db.t.payload", "db.t.named"]  # named kept where it fits


def test_a_named_schema_keeps_its_priority_after_a_record_that_needed_another():
    import json as _json

    named = {"type": "record", "name": "r", "fields": [{"name": "v", "type": ["null", "string"]}]}
    md = {"opencdc.payload.schema.subject": "named", "opencdc.payload.schema.version": "1"}
    batch = [Record(b"a", Operation.UPDATE, dict(md), None, {"v": None}, {"v": 5}),  # needs a derived schema
             Record(b"b", Operation.UPDATE, dict(md), None, {"v": None}, {"v": None})]  # fits both: named wins
    store = SchemaStore()
    store.register("named", _json.dumps(named))
    got = [PbRecord.FromString(w).metadata["opencdc.payload.schema.subject"] for w in to_wire(batch, store)]
    assert got == ["cdcflow.payload", "named"]


def test_a_metadata_block_that_fails_is_not_taken_for_the_one_before():
    store = SchemaStore()
    plain = PbRecord(position=b"1", metadata={"a": "1"})
    plain.payload.after.raw_data = b"x"
    bad_marker = PbRecord(position=b"2", metadata={"a": "1", "cdcflow.schema.derived": "payload",
                                                  "cdcflow.schema.replaced": "{not json",
                                                  "opencdc.payload.schema.subject": "s"})
    bad_marker.payload.after.raw_data = b"y"
    message = _message([plain.SerializeToString(), bad_marker.SerializeToString(), bad_marker.SerializeToString()])
    failed: dict = {}
    out = from_wire(message, store, failed)
    assert out[0] == _reference(_message([plain.SerializeToString()]), store)[0]
    assert out[1:] == [None, None] and set(failed) == {1, 2}
    assert str(failed[2][1]) == _outcome(lambda: from_proto([bad_marker], store))[1]
