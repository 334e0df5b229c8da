"""``jsonform.dumps_wire``: a batch message's bytes straight to JSON lines and its ack message.

The reference is the pure-Python path: ``dumps_lines(from_wire(message, store))`` with
both kernels off, and ``framing.encode_acks`` of the positions. The kernel must give exactly
those bytes for plain messages, and None (the caller converts the message itself) for every
message it does not handle: structured data, schema references, odd shapes, malformed bytes.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.connectors.ticdc.events import INSERT, UPDATE, RowChange, to_record
from cdcflow.convert import jsonform
from cdcflow.convert.protobuf import from_wire
from cdcflow.convert.schemaref import META_SCHEMA_DERIVED
from cdcflow.errors import CdcflowError
from cdcflow.record import (
    META_KEY_SCHEMA_SUBJECT,
    META_KEY_SCHEMA_VERSION,
    META_PAYLOAD_SCHEMA_SUBJECT,
    META_PAYLOAD_SCHEMA_VERSION,
    Operation,
    Record,
)
from cdcflow.schemas import SchemaStore
from cdcflow.standalone.framing import encode_acks, frame_records
from cdcflow.varint import uvarint

from helpers import tidb_strategies as tidb_st  # every TiDB type and its edge values
from helpers.leakcheck import traced_growth

pytestmark = pytest.mark.skipif(jsonform._kernel is None, reason="JSON-form kernel not built or CDCFLOW_PURE_PYTHON=1")
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMIT = 1 << 26


@contextlib.contextmanager
def pure_python():
    """dumps_lines' kernel (``_jsonform.c``) off; from_wire is upb's parse + ``from_proto``."""
    saved = jsonform._kernel
    jsonform._kernel = None
    try:
        yield
    finally:
        jsonform._kernel = saved


def reference(message: bytes, store: SchemaStore | None = None) -> tuple[bytes, bytes] | None:
    """What the Python path makes of the message, or None when from_wire refuses it or a record."""
    with pure_python():
        failed: dict = {}
        try:
            records = from_wire(message, store, failed)
        except CdcflowError:
            return None
        if failed:
            return None
        return jsonform.dumps_lines(records), encode_acks([r.position for r in records])


def one_message(records: list[Record], store: SchemaStore | None = None, structured: str = "avro") -> bytes:
    messages = frame_records(records, store, structured, LIMIT)[0]
    assert len(messages) <= 1
    return messages[0][0] if messages else b""


# ---------------------------------------------------------------------------- strategies
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30) | st.sampled_from(
    ["", "\u2028\u2029", "\x00\x01\x1f\x7f", "\"\\/", "\U0001F600\U00010000", "a\tb\nc\rd\be\ff", "é" * 9, "<a&b>"])
# keys from_wire keeps as they are: the version keys and the derived mark without a subject
_meta_keys = _text | st.sampled_from(
    ["opencdc.collection", META_KEY_SCHEMA_VERSION, META_PAYLOAD_SCHEMA_VERSION, META_SCHEMA_DERIVED])
_metadata = st.dictionaries(_meta_keys, _text, max_size=5)
_data = st.none() | st.binary(max_size=300) | st.sampled_from([b"", b"\x00", bytes(range(256)) * 5])


@st.composite
def raw_records(draw) -> list[Record]:
    # a few metadata dicts shared by the records: runs of one block, and blocks that come back
    pool = draw(st.lists(_metadata, min_size=1, max_size=3))
    n = draw(st.integers(0, 12))
    return [Record(draw(st.binary(max_size=200)), draw(st.sampled_from(list(Operation))),
                   dict(draw(st.sampled_from(pool))), draw(_data), draw(_data), draw(_data)) for _ in range(n)]


# ---------------------------------------------------------------------------- differential
@SETTINGS
@given(raw_records())
def test_plain_messages_same_as_python(records):
    message = one_message(records)
    expected = reference(message)
    assert expected is not None
    assert jsonform.dumps_wire(message) == expected
    assert expected[1] == encode_acks([r.position for r in records])


@settings(max_examples=30, deadline=None)
@given(raw_records())
def test_a_store_changes_nothing_for_raw_data(records):
    store = SchemaStore()
    try:
        message = one_message(records, store)
        assert jsonform.dumps_wire(message) == reference(message, store)
    finally:
        store.close()


def test_megabyte_payloads_and_long_positions():
    records = [Record(b"p" * 300, Operation.UPDATE, {"opencdc.collection": "t"}, b"k" * 200,
                      bytes(range(256)) * 4096, b"\xff" * (1 << 20) + b"x"),
               Record(b"", Operation.DELETE, {}, None, b"", None)]
    message = one_message(records)
    got = jsonform.dumps_wire(message)
    assert got is not None and got == reference(message)


def test_an_empty_message_has_no_lines_and_no_acks():
    assert jsonform.dumps_wire(b"") == (b"", b"") == reference(b"")


def test_metadata_is_read_as_upb_reads_it():
    """Duplicate keys (the last wins), an entry without its value, entry fields in reverse order:
    the kernel asks upb (through from_wire's own parse), so the text and key order match."""
    def entry(body: bytes) -> bytes:
        return b"\x1a" + uvarint(len(body)) + body

    def record(metadata_block: bytes) -> bytes:
        return b"\x0a\x01p" + b"\x10\x01" + metadata_block + b"\x2a\x05\x12\x03\x0a\x01x"

    blocks = [
        entry(b"\x0a\x01a\x12\x011") + entry(b"\x0a\x01b\x12\x012") + entry(b"\x0a\x01a\x12\x013"),
        entry(b"\x0a\x01a"),
        entry(b"\x12\x011\x0a\x01a"),
        entry(b""),
    ]
    for block in blocks:
        message = b"".join(b"\x0a" + uvarint(len(r)) + r for r in (record(block), record(b""), record(block)))
        expected = reference(message)
        assert expected is not None
        assert jsonform.dumps_wire(message) == expected


# ---------------------------------------------------------------------------- handed back
def test_structured_and_schema_messages_are_handed_back():
    row = {"id": 1, "name": "x", "when": b"\x00"}
    store = SchemaStore()
    try:
        structured = [Record(b"1", Operation.CREATE, {"opencdc.collection": "t"}, {"id": 1}, None, row)]
        assert jsonform.dumps_wire(one_message(structured, store)) is None  # lossless Avro + its reference
        assert jsonform.dumps_wire(one_message(structured, None, "struct")) is None  # Struct (Data field 2)
        for key in (META_KEY_SCHEMA_SUBJECT, META_PAYLOAD_SCHEMA_SUBJECT):
            for subject in ("", "no-such-subject"):  # empty: from_wire drops the references
                raw = [Record(b"1", Operation.CREATE, {key: subject, "x": "y"}, b"k", None, b"v")]
                message = one_message(raw, store)
                assert jsonform.dumps_wire(message) is None
        # a raw record among structured ones: the whole message goes back
        mixed = [Record(b"0", Operation.CREATE, {}, b"k", None, b"v")] + structured
        assert jsonform.dumps_wire(one_message(mixed, store)) is None
    finally:
        store.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tidb_st.tables_and_rows(min_rows=1, max_rows=3))
def test_tidb_rows_are_handed_back(table_rows):
    table, rows = table_rows
    store = SchemaStore()
    try:
        records = [to_record(RowChange(table, INSERT, 400 + k, row), b"p%d" % k, store) for k, row in enumerate(rows)]
        records.append(to_record(RowChange(table, UPDATE, 500, rows[-1], old=rows[0]), b"u", store))
        assert jsonform.dumps_wire(one_message(records, store)) is None
    finally:
        store.close()


GOOD = b"\x0a\x01p\x10\x01\x1a\x06\x0a\x01a\x12\x01b\x22\x03\x0a\x01k\x2a\x05\x12\x03\x0a\x01v"


def _framed(*records: bytes) -> bytes:
    return b"".join(b"\x0a" + uvarint(len(r)) + r for r in records)


@pytest.mark.parametrize("message", [
    _framed(GOOD) + b"\x12\x00",                            # a top-level field other than records
    _framed(GOOD + b"\x32\x00"),                            # an unknown record field
    _framed(b"\x10\x01\x0a\x01p"),                          # fields out of order
    _framed(b"\x0a\x01p\x0a\x01q"),                         # a repeated field
    _framed(b"\x10\x09"),                                   # an operation without a name
    _framed(b"\x10\x81\x01"),                               # an operation past one varint byte
    _framed(b"\x1a\x06\x0a\x01a\x12\x01\xff"),              # metadata that is not UTF-8
    _framed(b"\x1a\x04\x0a\x05a"),                          # a torn metadata entry
    _framed(b"\x22\x03\x12\x01\x00"),                       # a key in Data field 2 (Struct)
    _framed(b"\x22\x05\x0a\x01k\x0a\x01k"),                 # raw data twice in one Data
    _framed(b"\x2a\x02\x1a\x00"),                           # an unknown Change field
    _framed(b"\x2a\x04\x12\x00\x0a\x00"),                   # before after after
    _framed(GOOD)[:-1],                                     # cut short
    b"\x0a\xff\xff\xff\xff\xff\x01",                        # a length prefix of over 5 bytes
    b"\x0a\x80",                                            # a length prefix cut short
    b"\x0a\x05\x0a\x01",                                    # a record past the message's end
], ids=lambda m: m.hex()[:24])
def test_unusual_or_malformed_messages_are_handed_back(message):
    assert jsonform.dumps_wire(message) is None


@SETTINGS
@given(raw_records(), st.data())
def test_damaged_messages_give_python_s_answer_or_none(records, data):
    """Bytes flipped, cut or inserted anywhere: the kernel gives exactly what the Python path
    gives, or hands the message back; never different lines, never an exception."""
    message = bytearray(one_message(records[:4]))
    for _ in range(data.draw(st.integers(1, 3))):
        how = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        at = data.draw(st.integers(0, max(len(message) - 1, 0)))
        if how == "flip" and message:
            message[at] = data.draw(st.integers(0, 255))
        elif how == "cut":
            del message[at:]
        else:
            message[at:at] = bytes([data.draw(st.integers(0, 255))])
    message = bytes(message)
    got = jsonform.dumps_wire(message)
    if got is not None:
        assert got == reference(message)


# ---------------------------------------------------------------------------- the rest
def test_without_the_kernel_every_message_is_handed_back(monkeypatch):
    message = one_message([Record(b"1", Operation.CREATE, {}, b"k", None, b"v")])
    assert jsonform.dumps_wire(message) is not None
    monkeypatch.setattr(jsonform, "_kernel", None)
    assert jsonform.dumps_wire(message) is None


def test_the_kernel_checks_its_arguments():
    kernel = jsonform._kernel
    message = one_message([Record(b"1", Operation.CREATE, {"a": "b"}, b"k", None, b"v")])
    with pytest.raises(TypeError):
        kernel.dumps_wire("text", jsonform._WIRE_OPERATION_TEXTS, jsonform._wire_metadata_json)
    with pytest.raises(TypeError):
        kernel.dumps_wire(message, ("create",), jsonform._wire_metadata_json)
    with pytest.raises(TypeError):
        kernel.dumps_wire(message, jsonform._WIRE_OPERATION_TEXTS, lambda block: "not bytes")
    with pytest.raises(ZeroDivisionError):
        kernel.dumps_wire(message, jsonform._WIRE_OPERATION_TEXTS, lambda block: 1 / 0)
    # an operation number without a text: handed back
    assert kernel.dumps_wire(message, (b'"x"',), jsonform._wire_metadata_json) is None


def test_no_leak_over_many_messages():
    kernel = jsonform._kernel
    records = [Record(i.to_bytes(8, "big"), Operation.CREATE, {"opencdc.collection": f"t{i % 3}", "k": "\u2028"},
                      str(i).encode(), None, bytes(range(256)) * 2) for i in range(200)]
    plain = one_message(records)
    schema = one_message([Record(b"1", Operation.CREATE, {META_KEY_SCHEMA_SUBJECT: "s"}, b"k", None, b"v")])
    malformed = plain[:-3]

    def run():
        assert jsonform.dumps_wire(plain) is not None
        assert jsonform.dumps_wire(schema) is None
        assert jsonform.dumps_wire(malformed) is None
        try:
            kernel.dumps_wire(plain, jsonform._WIRE_OPERATION_TEXTS, lambda block: 1 / 0)
        except ZeroDivisionError:
            pass

    assert traced_growth(run, rounds=300, warmup=3) < 64 * 1024
