"""The compiled record writer (``cdcflow.convert._wire.Writer``) against the Python writer.

``framing.frame_records`` with the kernel must give exactly what ``frame_batches(to_wire(...))``
gives without it: the same message bytes, the same record indexes per message, the same
oversized records, or the same error, for records of every value kind, every batch size
limit, and the unusual records the kernel hands to Python.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.leakcheck import traced_growth

from cdcflow.convert import protobuf
from cdcflow.convert.protobuf import from_wire, to_wire
from cdcflow.record import Operation, Record
from cdcflow.schemas import SchemaStore
from cdcflow.standalone.framing import frame_batches, frame_records

from test_convert_roundtrip import records

needs_kernel = pytest.mark.skipif(protobuf._writer is None, reason="the _wire kernel is not built (or turned off)")

WRITE_SETTINGS = settings(max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _outcome(fn):
    """("ok", result) or (error type, message)."""
    try:
        return "ok", fn()
    except Exception as e:  # noqa: BLE001 - the point is that both paths fail alike
        return type(e).__name__, str(e)


def _python_framed(batch, structured: str, limit: int, first: int):
    """The reference: Python serializes each record, then frames (a fresh store: same schema choices)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(protobuf, "_writer", None)
        return _outcome(lambda: frame_records(batch, SchemaStore(), structured, limit, first))


def _kernel_framed(batch, structured: str, limit: int, first: int):
    return _outcome(lambda: frame_records(batch, SchemaStore(), structured, limit, first))


def _agree(batch, structured: str = "avro", limit: int = 1 << 26, first: int = 0):
    expected = _python_framed(batch, structured, limit, first)
    assert _kernel_framed(batch, structured, limit, first) == expected
    return expected


@needs_kernel
@WRITE_SETTINGS
@given(st.lists(records(mixed_payload=True), min_size=1, max_size=8), st.sampled_from(["avro", "struct"]),
       st.sampled_from([1 << 26, 4096, 700, 200, 80]), st.integers(0, 1000))
def test_records_of_every_value_kind_frame_alike(batch, structured, limit, first):
    """Every value kind (raw, Avro-encoded structured, Struct), split and oversized alike."""
    _agree(batch, structured, limit, first)


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12) | st.sampled_from(
    ["", "\u2028\u2029", "\x00\x1f\x7f", "\U0001f600 astral", "é" * 70, "k" * 200])


@st.composite
def _raw_records(draw):
    """Plain records: what the kernel writes itself. Long values take the varints past one byte."""
    data = st.none() | st.binary(max_size=40) | st.sampled_from([b"", b"x" * 130, b"y" * 20_000])
    metadata = draw(st.sampled_from([{}, {"opencdc.collection": "t"}]) | st.dictionaries(_text, _text, max_size=4))
    return Record(draw(st.binary(max_size=20) | st.just(b"p" * 300)), draw(st.sampled_from(list(Operation))),
                  metadata, draw(data), draw(data), draw(data))


@needs_kernel
@WRITE_SETTINGS
@given(st.lists(_raw_records(), min_size=1, max_size=12), st.sampled_from([1 << 26, 30_000, 600, 100]))
def test_raw_records_frame_alike_and_read_back(batch, limit):
    status, (messages, oversized) = _agree(batch, limit=limit)
    assert status == "ok"
    back = [r for data, _ in messages for r in from_wire(data, SchemaStore())]
    assert back == [r for i, r in enumerate(batch) if i not in oversized]


@needs_kernel
def test_metadata_dicts_shared_equal_or_changing_frame_alike():
    shared = {"a": "1", "b": "2"}
    batch = [Record(b"1", Operation.CREATE, shared, b"k", None, b"v"),
             Record(b"2", Operation.CREATE, shared, b"k", None, b"v"),
             Record(b"3", Operation.CREATE, dict(shared), b"k", None, b"v"),
             Record(b"4", Operation.CREATE, {"b": "2", "a": "1"}, b"k", None, b"v"),  # equal, other order
             Record(b"5", Operation.CREATE, {}, b"k", None, b"v"),
             Record(b"6", Operation.CREATE, shared, b"k", None, b"v")]
    assert _agree(batch)[0] == "ok"


class _Str(str):
    pass


class _Bytes(bytes):
    pass


class _Duck:
    """Not a Record, but has its attributes: Python's writer takes it, so the kernel must."""

    def __init__(self, **kw):
        self.position, self.operation, self.metadata = b"d", Operation.UPDATE, {"m": "1"}
        self.key = self.before = self.after = None
        self.__dict__.update(kw)


def _r(**kw) -> Record:
    r = Record(b"p", Operation.CREATE, {"a": "1"}, b"k", None, b"v")
    for k, v in kw.items():
        setattr(r, k, v)
    return r


ODD = {
    "metadata value not str": _r(metadata={"a": 1}),
    "metadata key str subclass": _r(metadata={_Str("a"): "1"}),
    "metadata lone surrogate": _r(metadata={"a": "\ud800"}),
    "metadata None": _r(metadata=None),
    "metadata not a dict": _r(metadata=[("a", "1")]),
    "key bytes subclass": _r(key=_Bytes(b"k")),
    "after bytearray": _r(after=bytearray(b"v")),
    "after str": _r(after="v"),
    "position None": _r(position=None),
    "position bytearray": _r(position=bytearray(b"p")),
    "operation plain int": _r(operation=3),
    "operation 300": _r(operation=300),
    "operation -1": _r(operation=-1),
    "operation float": _r(operation=1.0),
    "duck record": _Duck(after=b"v"),
    "duck with dict data": _Duck(after={"x": 1}),
    "dict subclass data": _r(after=type("D", (dict,), {})(x=1)),
    "unencodable structured": _r(after={"x": object()}),
}


@needs_kernel
@pytest.mark.parametrize("name", sorted(ODD))
@pytest.mark.parametrize("where", ["alone", "between plain records"])
def test_unusual_records_go_to_python(name, where):
    """The kernel hands these to Python, which writes them or raises its own error."""
    plain = Record(b"x", Operation.CREATE, {"a": "1"}, b"k", None, b"v")
    batch = [ODD[name]] if where == "alone" else [plain, ODD[name], plain]
    _agree(batch)
    _agree(batch, "struct")


@needs_kernel
def test_structured_records_with_changing_shapes_frame_alike():
    """Schema reuse across records (``_Preparer``): same shape, new shape, back again."""
    batch = [Record(str(i).encode(), Operation.CREATE, {"opencdc.collection": "t"}, {"id": i}, None,
                    {"id": i, "s": "x" * i} if i % 7 else {"other": float(i)}) for i in range(40)]
    assert _agree(batch, limit=2000)[0] == "ok"


@needs_kernel
def test_writer_refuses_bad_arguments():
    with pytest.raises(TypeError):
        protobuf._kernel.Writer(type("NoSlots", (), {}))
    with pytest.raises(TypeError):
        protobuf._writer.frame((), None, None, 1, 1, 0)  # records must be a list
    with pytest.raises(SystemError):  # a prepare() that breaks the contract
        protobuf._writer.frame([_r(after="v")], lambda r: "nope", None, 1 << 20, 11, 0)


@needs_kernel
def test_no_memory_grows_over_repeated_batches():
    """Plain, structured, handed-back, oversized and failing batches: nothing leaks."""
    store = SchemaStore()
    rows = [Record(str(i).encode(), Operation.CREATE, {"opencdc.collection": "t"}, {"id": i}, None,
                   {"id": i, "s": "x" * 50, "f": i / 3}) for i in range(30)]
    raw = [Record(str(i).encode(), Operation.CREATE, {"m": str(i % 3)}, b"k", None, b"v" * (i * 40))
           for i in range(30)]
    odd = [ODD[name] for name in sorted(ODD) if _outcome(lambda n=name: to_wire([ODD[n]], store))[0] == "ok"]
    batch = rows + raw + odd
    failing = raw[:3] + [ODD["metadata lone surrogate"]]

    def once():
        messages, oversized = frame_records(batch, store, "avro", 900)
        assert messages and oversized
        with pytest.raises(UnicodeEncodeError):
            frame_records(failing, store, "avro", 1 << 20)

    growth = traced_growth(once, 300)
    assert growth < 8 * 1024, growth


def test_python_writer_without_the_kernel(monkeypatch):
    """With the kernel off, ``frame_records`` is ``frame_batches(to_wire(...))`` itself."""
    monkeypatch.setattr(protobuf, "_writer", None)
    store = SchemaStore()
    batch = [Record(b"1", Operation.CREATE, {"a": "1"}, b"k", None, b"v" * 100),
             Record(b"2", Operation.DELETE, {"a": "1"}, {"id": 2}, {"id": 2}, None)]
    assert protobuf.wire_messages(batch, store, "avro", 1 << 20, 11) is None
    assert frame_records(batch, store, "avro", 150, 5) == frame_batches(to_wire(batch, store), 150, 5)
