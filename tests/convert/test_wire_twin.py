"""The wire kernel (``cdcflow.convert._wire``) against upb, its reference, on the same inputs.

Writing: ``batch_bytes`` must give exactly upb's bytes (``to_batch(...).SerializeToString(deterministic=True)``)
or the same typed error. Reading: ``from_wire`` with the kernel must give the same records (type-strict,
metadata in the same key order) and the same per-record failures or error as with the kernel off.
Each check runs the path the install runs (the kernel when built and on) and the reference path
(``protobuf._kernel`` set to None), so under ``CDCFLOW_PURE_PYTHON=1`` it still tests upb's path.

Why here and not in tests/connectors/ticdc/test_kernels_match_reference.py: that harness generates
TiCDC tables and rows; this kernel's inputs are OpenCDC records and protobuf bytes.
"""

from __future__ import annotations

import contextlib
import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.leakcheck import traced_growth

from cdcflow import accel
from cdcflow.convert import protobuf
from cdcflow.convert.protobuf import batch_bytes, from_wire, to_batch
from cdcflow.errors import ConversionError, SchemaError
from cdcflow.record import Operation, Record
from cdcflow.schemas import SchemaStore

from helpers.record_strategies import MIB, SETTINGS, records

KERNEL = protobuf._kernel
needs_kernel = pytest.mark.skipif(KERNEL is None, reason=f"wire kernel {accel.status()['cdcflow.convert._wire']}")
PATHS = ["installed", "reference"]


@contextlib.contextmanager
def _path(name: str):
    """Run with the kernel as installed, or with upb only."""
    saved = protobuf._kernel
    if name == "reference":
        protobuf._kernel = None
    try:
        yield
    finally:
        protobuf._kernel = saved


def _outcome(fn):
    """("ok", result) or (error type, message without addresses)."""
    try:
        return "ok", fn()
    except Exception as e:  # noqa: BLE001 - any error: both paths must raise the same
        return type(e).__name__, re.sub(r" at 0x[0-9a-f]+", "", str(e))


def _written(batch, structured: str = "avro"):
    """batch_bytes's outcome on each path, each from an empty store (same schema history)."""
    out = {}
    for name in PATHS:
        with _path(name):
            out[name] = _outcome(lambda: batch_bytes(batch, SchemaStore(), structured))
    out["upb"] = _outcome(lambda: to_batch(batch, SchemaStore(), structured).SerializeToString(deterministic=True))
    return out


def _assert_written_alike(batch, structured: str = "avro") -> None:
    got = _written(batch, structured)
    assert got["installed"] == got["upb"]
    assert got["reference"] == got["upb"]


def _read(message: bytes, store: SchemaStore, with_failed: bool):
    def run():
        failed: dict | None = {} if with_failed else None
        out = from_wire(message, store, failed)
        # metadata order too: what a destination writes follows it
        shape = [None if r is None else (r, list(r.metadata)) for r in out]
        return shape, None if failed is None else {i: (p, type(e), str(e)) for i, (p, e) in failed.items()}
    return _outcome(run)


def _assert_read_alike(message: bytes, store: SchemaStore) -> None:
    for with_failed in (False, True):
        with _path("installed"):
            installed = _read(message, store, with_failed)
        with _path("reference"):
            reference = _read(message, store, with_failed)
        assert installed == reference


# -- generated records ------------------------------------------------------------------------

@SETTINGS
@given(st.lists(records(mixed_payload=True), max_size=6), st.sampled_from(["avro", "struct"]))
def test_written_bytes_are_upbs(batch, structured):
    """Raw, structured (Avro or Struct), nested, schema-less, mixed, empty: upb's bytes or upb's error."""
    _assert_written_alike(batch, structured)


@SETTINGS
@given(st.lists(records(mixed_payload=True), min_size=1, max_size=6), st.sampled_from(["avro", "struct"]))
def test_read_records_are_upbs(batch, structured):
    store = SchemaStore()
    try:
        message = batch_bytes(batch, store, structured)
    except ConversionError:
        return  # Struct cannot hold every value: test_written_bytes_are_upbs holds both to the same error
    _assert_read_alike(message, store)


metadata_keys = st.text(alphabet=st.sampled_from("aAbZé€\U0001f600\x00 "), max_size=4)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(metadata_keys, metadata_keys, max_size=8), min_size=1, max_size=4))
def test_metadata_entries_in_upbs_order(metadatas):
    """Keys that are prefixes of others, empty keys and values, multi-byte UTF-8, NUL: upb's
    deterministic order, and read back in upb's order."""
    batch = [Record(b"p%d" % i, Operation.UPDATE, md, b"k", None, b"v") for i, md in enumerate(metadatas)]
    _assert_written_alike(batch)
    store = SchemaStore()
    _assert_read_alike(batch_bytes(batch, store), store)


# -- hand-written shapes ------------------------------------------------------------------------

class _Str(str):
    pass


ODD_VALUES = {
    "empty everything": Record(b"", Operation.UNSPECIFIED, {}, b"", b"", b""),
    "no data": Record(b"p", Operation.DELETE, {"a": ""}, None, None, None),
    "large": Record(MIB, Operation.SNAPSHOT, {"m" * 300: "v" * 70_000}, MIB, None, MIB),
    "operation as int": Record(b"p", 2, {}, None, None, b"v"),
    "operation out of range": Record(b"p", 9, {}, None, None, b"v"),
    "operation huge": Record(b"p", 1 << 40, {}, None, None, b"v"),
    "operation negative": Record(b"p", -1, {}, None, None, b"v"),
    "operation bool": Record(b"p", True, {}, None, None, b"v"),
    "position str": Record("p", Operation.CREATE, {}, None, None, b"v"),
    "position bytearray": Record(bytearray(b"p"), Operation.CREATE, {}, None, None, b"v"),
    "position None": Record(None, Operation.CREATE, {}, None, None, b"v"),
    "metadata value int": Record(b"p", Operation.CREATE, {"a": 1}, None, None, b"v"),
    "metadata str subclass": Record(b"p", Operation.CREATE, {_Str("a"): _Str("b")}, None, None, b"v"),
    "metadata lone surrogate": Record(b"p", Operation.CREATE, {"a": "\ud800"}, None, None, b"v"),
    "metadata not a dict": Record(b"p", Operation.CREATE, [("a", "b")], None, None, b"v"),
    "data str": Record(b"p", Operation.CREATE, {}, "k", None, b"v"),
    "data memoryview": Record(b"p", Operation.CREATE, {}, memoryview(b"k"), None, b"v"),
    "dict subclass": Record(b"p", Operation.CREATE, {}, None, None, type("D", (dict,), {})(a=1)),
    "schema named": Record(b"p", Operation.CREATE, {"opencdc.payload.schema.subject": "nope"}, None, None, b"v"),
    "structured": Record(b"p", Operation.CREATE, {"c": "t"}, {"id": 1}, {"id": 1, "s": "é"}, {"id": 2, "s": None}),
}


@pytest.mark.parametrize("name", sorted(ODD_VALUES))
def test_odd_values_written_as_upb_writes_them(name):
    plain = Record(b"q", Operation.CREATE, {"x": "y"}, None, None, b"w")
    _assert_written_alike([plain, ODD_VALUES[name], plain])
    _assert_written_alike([ODD_VALUES[name]], "struct")


@pytest.mark.parametrize("name", sorted(ODD_VALUES))
def test_odd_values_read_back_alike(name):
    store = SchemaStore()
    try:
        message = batch_bytes([ODD_VALUES[name], Record(b"q", Operation.CREATE, {}, None, None, b"w")], store)
    except Exception:  # noqa: BLE001
        return  # nothing to read: writing refused it, on both paths alike (above)
    _assert_read_alike(message, store)


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    from cdcflow.varint import uvarint
    return uvarint(number << 3 | wire_type) + (uvarint(len(payload)) + payload if wire_type == 2 else payload)


def _good() -> bytes:
    return batch_bytes([Record(b"p%d" % i, Operation.CREATE, {"a": "1", "b": "2"}, b"k", None, b"v") for i in range(3)])


BAD_BYTES = {
    "truncated": _good()[:-3],
    "garbage": b"\xff\xff\xff\xff",
    "length past the end": b"\x0a\x7f" + _good(),
    "bad UTF-8 in metadata": _field(1, 2, _field(3, 2, _field(1, 2, b"\xc3") + _field(2, 2, b"v"))),
    "operation out of range": _field(1, 2, _field(1, 2, b"p") + _field(2, 0, b"\x09")),
    "two-byte operation": _field(1, 2, _field(2, 0, b"\x81\x00")),
    "fields out of order": _field(1, 2, _field(2, 0, b"\x01") + _field(1, 2, b"p")),
    "structured data": _field(1, 2, _field(4, 2, _field(2, 2, b""))),
    "unknown field": _field(1, 2, _field(9, 0, b"\x01")),
    "unknown top-level field": _good() + _field(2, 0, b"\x01"),
    "repeated position": _field(1, 2, _field(1, 2, b"a") + _field(1, 2, b"b")),
    "duplicate metadata key": _field(1, 2, _field(3, 2, _field(1, 2, b"a") + _field(2, 2, b"1"))
                                     + _field(3, 2, _field(1, 2, b"a") + _field(2, 2, b"2"))),
    "empty Data and Change": _field(1, 2, _field(4, 2, b"") + _field(5, 2, b"")),
    "empty message": b"",
    "good then bad": _good() + b"\x0a\x05ab",
}


@pytest.mark.parametrize("name", sorted(BAD_BYTES))
def test_bad_and_odd_bytes_read_alike(name):
    """Malformed bytes: the same error type and message; odd but valid ones: the same records."""
    _assert_read_alike(BAD_BYTES[name], SchemaStore())


@pytest.mark.parametrize("buffer", [bytearray, memoryview])
def test_other_buffers_read_alike(buffer):
    _assert_read_alike(buffer(_good()), SchemaStore())


@needs_kernel
def test_kernel_covers_the_usual_shapes():
    """The kernel writes and reads raw and Avro records itself (a kernel that handed everything
    back would pass the tests above and buy nothing)."""
    store = SchemaStore()
    raw = [Record(b"%d" % i, Operation.CREATE, {"opencdc.collection": "t"}, b"k", None, b"v" * 1000) for i in range(50)]
    rows = [Record(b"%d" % i, Operation.CREATE, {"c": "t"}, {"id": i}, None, {"id": i, "s": "x"}) for i in range(50)]
    calls = []

    def serialize(prepared):
        calls.append(prepared)
        return protobuf._record_bytes(prepared)

    plan = protobuf._WritePlan(protobuf._Preparer(store, "avro"))
    plan.serialize = serialize
    KERNEL.batch_bytes(raw + rows, plan)
    assert calls == []
    message = batch_bytes(raw + rows, store)
    assert KERNEL.from_wire(message, protobuf._ReadPlan(protobuf._Finisher(store, None))) is not None


def _raw(n: int) -> list[Record]:
    return [Record(b"%d" % i, Operation.CREATE, {"m": str(i % 3), "n": "x"}, b"k", None, b"v" * 100) for i in range(n)]


@needs_kernel
def test_no_memory_grows_over_repeated_batches():
    """The kernel's own paths, writing and reading: records it builds, values and messages it hands
    back, errors raised in the callbacks it makes, records it leaves to Python (Avro named)."""
    store = SchemaStore()
    raw = _raw(30)
    rows = [Record(b"%d" % i, Operation.CREATE, {"c": "t"}, None, None, {"id": i}) for i in range(5)]
    odd = [ODD_VALUES["metadata str subclass"], ODD_VALUES["position None"], ODD_VALUES["metadata lone surrogate"]]
    message = batch_bytes(raw + rows + raw, store)
    hand_back = message + BAD_BYTES["structured data"]

    def once():
        assert len(batch_bytes(raw + odd[:2] + rows, store)) > 0
        with pytest.raises(TypeError):
            batch_bytes(raw + [ODD_VALUES["position str"]], store)
        with pytest.raises(UnicodeEncodeError):
            batch_bytes(raw + odd[2:], store)
        assert len(from_wire(message, store)) == 65
        assert len(from_wire(hand_back, store, {})) == 66
        with pytest.raises(ConversionError):
            from_wire(BAD_BYTES["good then bad"], store)

    # anything lost per record (65 records a round, 28 bytes for the smallest object) passes the
    # bound many times over; more rounds let Python 3.10's own occasional growth (kernel off too) cross it
    assert traced_growth(once, 150, warmup=3) < 8 * 1024


@needs_kernel
@pytest.mark.skipif(sys.version_info < (3, 11), reason="on 3.10 the reference's schema-failure path alone "
                    "(kernels off too) leaves a few KB that grow with the rounds")
def test_no_memory_grows_over_records_that_fail():
    store = SchemaStore()
    unknown = [Record(b"u%d" % i, Operation.CREATE, {"opencdc.payload.schema.subject": "nope"}, None, None, b"v")
               for i in range(2)]
    message = batch_bytes(_raw(30) + unknown + _raw(30), store)

    def once():
        failed: dict = {}
        assert len(from_wire(message, store, failed)) == 62 and list(failed) == [30, 31]
        with pytest.raises(SchemaError):
            from_wire(message, store)

    assert traced_growth(once, 150, warmup=3) < 8 * 1024
