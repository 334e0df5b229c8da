"""The Avro decode kernel (runtime/_avro_decode.c) against the generated Python reader and fastavro.

``Codec.decode`` tries the kernel first; the kernel either returns exactly what the
generated reader returns (same types, Decimal exponents, float bits, dict key order)
or hands the bytes back. These tests compare the three paths on generated schemas
and values (every TiDB type mapping, nested records/arrays/maps/unions), on mutated
and truncated bytes (same value, or the same error type and message), check that
the kernel really decides the usual shapes itself (not just handing everything
back), and that it does not leak.
"""

from __future__ import annotations

import datetime as dt
import gc
import re
import struct
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cdcflow import avro_values
from cdcflow.avro_values import Codec, derive_shared_schema
from cdcflow.connectors.ticdc.schema import table_schema_avro
from cdcflow.errors import ConversionError

from helpers import tidb_strategies as tidb_st  # every TiDB type and its edge values
from helpers.leakcheck import traced_growth
from helpers.avro_strategies import HAND_SCHEMA, hand_value, rows

kernel = avro_values._kernel
pytestmark = pytest.mark.skipif(kernel is None, reason="decode kernel not built or CDCFLOW_PURE_PYTHON=1")


# --------------------------------------------------------------------------- helpers

def typed(v):
    """A form equal only for values of the same types, float bits, Decimal exponents and key order."""
    t = type(v)
    if t is dict:
        return ("dict", [(typed(k), typed(x)) for k, x in v.items()])
    if t is list:
        return ("list", [typed(x) for x in v])
    if t is float:
        return ("float", struct.pack("<d", v))
    if t is Decimal:
        return ("Decimal", v.as_tuple())
    if t in (dt.datetime, dt.date, dt.timedelta, dt.time):
        return (t.__name__, repr(v), getattr(v, "fold", None))
    return (t.__name__, v)


def unfolded(v):
    """``v`` with fold=0 datetimes: Avro keeps no fold, so decoded values never carry one."""
    if type(v) is dt.datetime:
        return v.replace(fold=0)
    if type(v) is dict:
        return {k: unfolded(x) for k, x in v.items()}
    if type(v) is list:
        return [unfolded(x) for x in v]
    return v


def outcome(fn, data):
    """("ok", typed value) or ("error", type name, message without object addresses)."""
    try:
        return ("ok", typed(fn(data)))
    except Exception as e:  # noqa: BLE001 - compared as data
        return ("error", type(e).__name__, re.sub(r" at 0x[0-9a-f]+", "", str(e)))


def zero_byte_items(t) -> bool:
    """Whether an Avro type holds an array whose items can be zero bytes long (nulls, empty
    records): a mutated count there makes every decoder (Python and fastavro) build a list that
    long, which is the reference's behaviour but no test's business."""
    def empty(x) -> bool:
        return x == "null" or (isinstance(x, dict) and x.get("type") == "record" and all(empty(f["type"]) for f in x["fields"]))

    if isinstance(t, list):
        return any(zero_byte_items(b) for b in t)
    if not isinstance(t, dict):
        return False
    if t.get("type") == "array" and (empty(t["items"]) or zero_byte_items(t["items"])):
        return True
    return any(zero_byte_items(f["type"]) for f in t.get("fields", ())) or zero_byte_items(t.get("values"))


def pure_decode(codec: Codec, data: bytes):
    saved = avro_values._kernel
    avro_values._kernel = None
    try:
        return codec.decode(data)
    finally:
        avro_values._kernel = saved


def plan_of(codec: Codec):
    """The kernel's decode for the codec's plan (value or HAND_BACK); False: no plan."""
    if codec._kernel_decode is None:
        codec._build_kernel_decode(kernel)
    return codec._kernel_decode and codec._kernel_decode.decode


def assert_same_everywhere(codec: Codec, data: bytes, kernel_decides: bool | None = None) -> None:
    """Kernel path == generated path (value or error); with ``kernel_decides`` the plan itself
    returned a value (True) or handed back (False)."""
    with_kernel = outcome(codec.decode, data)
    without = outcome(lambda d: pure_decode(codec, d), data)
    assert with_kernel == without
    if with_kernel[0] == "ok":
        assert with_kernel == outcome(codec._reference_decode, data)
    if kernel_decides is not None:
        assert plan_of(codec), "no kernel plan for this schema"
        decided = plan_of(codec)(data) is not kernel.HAND_BACK
        assert decided == kernel_decides


# --------------------------------------------------------------------------- TiDB rows

@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tidb_st.tables_and_rows(max_rows=3))
def test_every_tidb_type_decodes_as_the_python_reader_does(table_rows):
    table, rows = table_rows
    codec = Codec(table_schema_avro(table))
    for row in rows:
        try:
            data = codec.encode(row)
        except ConversionError:
            assume(False)  # a value the TiDB mapping does not hold natively (not this test's subject)
        assert_same_everywhere(codec, data, kernel_decides=True)
        assert typed(codec.decode(data)) == typed(unfolded({col.name: row[col.name] for col in table.columns}))


# --------------------------------------------------------------------------- derived schemas

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(rows(), min_size=1, max_size=2))
def test_derived_schemas_nested_values_decode_alike(values):
    codec = Codec(derive_shared_schema(values, "Payload"))
    for value in values:
        data = codec.encode(value)
        assert_same_everywhere(codec, data, kernel_decides=True)
        assert typed(codec.decode(data)) == typed(unfolded(value))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows(1), st.data())
def test_mutated_and_truncated_bytes_give_the_same_value_or_error(value, draw):
    schema = derive_shared_schema([value], "Payload")
    assume(not zero_byte_items(schema))
    codec = Codec(schema)
    data = bytearray(codec.encode(value))
    how = draw.draw(st.sampled_from(["truncate", "flip", "insert", "append"]))
    at = draw.draw(st.integers(0, max(len(data) - 1, 0)))
    if how == "truncate":
        del data[at:]
    elif how == "flip" and data:
        data[at] ^= draw.draw(st.integers(1, 255))
    elif how == "insert":
        data[at:at] = draw.draw(st.binary(min_size=1, max_size=11))
    else:
        data += draw.draw(st.binary(min_size=1, max_size=3))
    assert_same_everywhere(codec, bytes(data))


# --------------------------------------------------------------------------- hand-written schemas

@settings(max_examples=200, deadline=None)
@given(hand_value(2))
def test_named_recursive_enum_fixed_map_union_float_schemas(value):
    codec = Codec(HAND_SCHEMA)
    data = codec.encode(value)
    assert_same_everywhere(codec, data, kernel_decides=True)


def test_blocks_with_byte_sizes_are_read_by_the_kernel():
    codec = Codec({"type": "record", "name": "R", "fields": [{"name": "xs", "type": {"type": "array", "items": "long"}},
                                                             {"name": "m", "type": {"type": "map", "values": "long"}}]})
    data = bytes([3, 4, 2, 4, 2, 6, 0]) + bytes([1, 6, 2]) + b"k" + bytes([8, 0])
    assert_same_everywhere(codec, data, kernel_decides=True)
    assert codec.decode(data) == {"xs": [1, 2, 3], "m": {"k": 4}}


LONG = {"type": "record", "name": "L", "fields": [{"name": "v", "type": "long"}]}
STRING = {"type": "record", "name": "S", "fields": [{"name": "s", "type": "string"}]}
DATE = {"type": "record", "name": "D", "fields": [{"name": "d", "type": {"type": "int", "logicalType": "date"}}]}
DATETIME = {"type": "record", "name": "T", "fields": [
    {"name": "t", "type": {"type": "long", "logicalType": "local-timestamp-micros"}}]}


def zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


@pytest.mark.parametrize("schema, data, decides", [
    (LONG, zigzag(-(1 << 63)), True),
    (LONG, zigzag((1 << 63) - 1), True),
    (LONG, b"\x80\x00", True),                      # a redundant continuation byte: still 0
    (LONG, b"\xff" * 9 + b"\x01", True),            # ten bytes, 64 bits
    (LONG, b"\xff" * 9 + b"\x02", False),           # a 65th bit
    (LONG, b"\xff" * 10 + b"\x00", False),          # eleven bytes
    (LONG, b"\x80", False),                         # truncated varint
    (LONG, b"\x02\x00", False),                     # trailing byte
    (STRING, b"\x04\xc3\x28", False),               # invalid UTF-8
    (STRING, b"\x06\xed\xa0\x80", False),           # an encoded surrogate: strict UTF-8 refuses it
    (STRING, b"\x03", False),                       # negative length
    (STRING, b"\x08abc", False),                    # length beyond the data
    (STRING, zigzag(7) + "\u2028😀".encode(), True),  # line separator and an astral character
    (DATE, zigzag(-719162), True),                  # 0001-01-01
    (DATE, zigzag(2932896), True),                  # 9999-12-31
    (DATE, zigzag(-719163), False),                 # before year 1
    (DATE, zigzag(2932897), False),                 # after 9999
    (DATETIME, zigzag(-62135596800000000), True),   # 0001-01-01 00:00
    (DATETIME, zigzag(253402300799999999), True),   # 9999-12-31 23:59:59.999999
    (DATETIME, zigzag(-62135596800000001), False),
    (DATETIME, zigzag(253402300800000000), False),
    (DATETIME, zigzag(-1), True),                   # 1969-12-31 23:59:59.999999 (floor division)
])
def test_edges_and_hand_backs(schema, data, decides):
    assert_same_everywhere(Codec(schema), data, kernel_decides=decides)


def test_unions_enums_and_booleans_out_of_range_are_handed_back():
    codec = Codec({"type": "record", "name": "U", "fields": [
        {"name": "u", "type": ["null", "long"]}, {"name": "b", "type": "boolean"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["a", "b"]}}]})
    assert_same_everywhere(codec, b"\x02\x04\x01\x02", kernel_decides=True)
    for bad in (b"\x04\x04\x01\x02", b"\x01\x01\x02", b"\x00\x02\x02", b"\x00\x01\x04", b"\x00\x01\x01"):
        assert_same_everywhere(codec, bad, kernel_decides=False)


def test_non_bytes_input_is_handed_back():
    codec = Codec({"type": "record", "name": "B", "fields": [{"name": "b", "type": "bytes"}]})
    data = codec.encode({"b": b"xyz"})
    for wrapped in (bytearray(data), memoryview(data)):
        assert plan_of(codec)(wrapped) is kernel.HAND_BACK
        assert outcome(codec.decode, wrapped) == outcome(lambda d: pure_decode(codec, d), wrapped)


@pytest.mark.parametrize("precision, scale, unscaled", [
    (5, 2, 12345), (5, 2, -99999), (5, 2, 0), (65, 30, 10 ** 65 - 1), (65, 30, -(10 ** 65 - 1)),
    (65, 0, -(1 << 255)), (65, 0, (1 << 255) - 1), (3, 1, 12345),  # more digits than the precision: rounds
    (78, 0, (1 << 255) - 1), (80, 5, 1 << 300), (10, 10, 5), (1, 0, -(1 << 63)), (1, 1, -9),
])
def test_decimal_bytes_of_any_width_and_scale(precision, scale, unscaled):
    codec = Codec({"type": "record", "name": "Dec", "fields": [
        {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}}]})
    raw = unscaled.to_bytes(((unscaled + (unscaled < 0)).bit_length() + 8) // 8, "big", signed=True)
    for body in (raw, b"\x00" * 3 + raw if unscaled >= 0 else b"\xff" * 3 + raw, b""):
        assert_same_everywhere(codec, zigzag(len(body)) + body, kernel_decides=True)


@settings(max_examples=500, deadline=None)
@given(st.binary(min_size=1, max_size=40), st.integers(1, 90), st.data())
def test_decimal_bytes_differential(body, precision, data):
    scale = data.draw(st.integers(0, precision))
    codec = Codec({"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale})
    assert_same_everywhere(codec, zigzag(len(body)) + body, kernel_decides=True)


def test_decimal_without_the_fast_path_uses_the_plan_conversion():
    calls = []

    def convert(raw: bytes) -> Decimal:
        calls.append(raw)
        return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-2)

    plan = kernel.Plan(((kernel.K_DECIMAL, 5, 2, 0, convert, Decimal),), 0)
    assert plan.decode(b"\x04\x30\x39") == Decimal("123.45") and calls == [b"\x30\x39"]
    fast = kernel.Plan(((kernel.K_DECIMAL, 5, 2, 1, convert, Decimal),), 0)
    assert typed(fast.decode(b"\x04\x30\x39")) == typed(Decimal("123.45")) and len(calls) == 1
    failing = kernel.Plan(((kernel.K_DECIMAL, 5, 2, 0, lambda raw: 1 / 0, Decimal),), 0)
    assert failing.decode(b"\x02\x01") is kernel.HAND_BACK  # a Python failure: the Python path decides


def test_every_date_in_range():
    codec = Codec({"type": "array", "items": {"type": "int", "logicalType": "date"}})
    first, last = dt.date.min.toordinal(), dt.date.max.toordinal()
    days = range(first - 719163, last - 719163 + 1)
    data = zigzag(len(days)) + b"".join(zigzag(d) for d in days) + b"\x00"
    got = plan_of(codec)(data)
    assert got is not kernel.HAND_BACK
    assert got == [dt.date.fromordinal(o) for o in range(first, last + 1)]


def test_deep_recursion_is_handed_back_and_still_decodes():
    codec = Codec({"type": "record", "name": "N", "fields": [{"name": "next", "type": ["null", "N"]}]})
    shallow, deep = b"\x02" * 10 + b"\x00", b"\x02" * 200 + b"\x00"
    assert_same_everywhere(codec, shallow, kernel_decides=True)
    assert_same_everywhere(codec, deep, kernel_decides=False)


def test_zero_byte_items_are_read_up_to_a_bound():
    codec = Codec({"type": "array", "items": "null"})
    assert_same_everywhere(codec, zigzag(3) + b"\x00", kernel_decides=True)
    assert codec.decode(zigzag(3) + b"\x00") == [None, None, None]
    many = zigzag(70_000) + b"\x00"  # beyond the kernel's bound: the Python path builds it
    assert_same_everywhere(codec, many, kernel_decides=False)
    assert codec.decode(many) == [None] * 70_000
    longs = Codec({"type": "array", "items": "long"})  # items of at least a byte: the count is checked
    assert_same_everywhere(longs, zigzag(3) + b"\x00\x00", kernel_decides=False)


def test_foreign_logical_types_get_no_plan():
    codec = Codec({"type": "record", "name": "R", "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]})
    value = {"ts": dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)}
    assert codec.decode(codec.encode(value)) == value
    assert plan_of(codec) is False and codec.decoder() == codec.decode


def test_decoder_is_the_plan_and_behaves_as_decode():
    codec = Codec(HAND_SCHEMA)
    decoder = codec.decoder()
    assert type(decoder) is kernel.Plan
    value = {"i": 1, "f": 0.5, "e": "RED", "fx": b"abcd", "m": {"k": None}, "ch": {"y": "z"}, "next": None,
             "d": Decimal("0.0"), "original name": True}
    data = codec.encode(value)
    assert typed(decoder(data)) == typed(codec.decode(data)) == typed(value)
    # handed back, decided by the fallback (which returns bytearray slices for bytearray input)
    assert typed(decoder(bytearray(data))) == typed(pure_decode(codec, bytearray(data)))
    for bad in (data[:-1], data + b"\x00"):
        with pytest.raises(ConversionError):
            decoder(bad)
        assert outcome(decoder, bad) == outcome(lambda d: pure_decode(codec, d), bad)
    with pytest.raises(TypeError):
        decoder()
    with pytest.raises(TypeError):
        decoder(data, data)
    assert kernel.Plan(((kernel.K_LONG,),), 0)(b"\x80") is kernel.HAND_BACK  # no fallback: the sentinel


def test_a_codec_and_its_plan_make_no_reference_cycle():
    import weakref

    codec = Codec({"type": "record", "name": "W", "fields": [{"name": "v", "type": "long"}]})
    assert codec.decode(b"\x02") == {"v": 1} and codec._kernel_decode
    gone = weakref.ref(codec)
    gc.disable()
    try:
        del codec
        assert gone() is None  # freed by reference counting alone
    finally:
        gc.enable()


def test_bad_plans_are_refused():
    with pytest.raises(ValueError):
        kernel.Plan(((kernel.K_RECORD, ("a",), (5,)),), 0)  # child index out of range
    with pytest.raises(ValueError):
        kernel.Plan(((99,),), 0)
    with pytest.raises(TypeError):
        kernel.Plan(((kernel.K_ENUM, ["a"]),), 0)
    with pytest.raises(ValueError):
        kernel.Plan(((kernel.K_LONG,),), 1)


# --------------------------------------------------------------------------- leaks

def test_no_leak_on_values_hand_backs_and_decimal_conversions():
    codec = Codec(derive_shared_schema([{
        "id": 1, "big": 1 << 70, "s": "é" * 40, "b": b"\x00" * 20, "f": 0.5, "d": Decimal("-12.34"),
        "w": Decimal("1" * 40 + "." + "1" * 20), "dt": Decimal("NaN"), "day": dt.date(2024, 1, 2),
        "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 6), "t": dt.timedelta(hours=-5), "xs": [1, None, "x"],
        "sub": {"a": [{"b": 1.5}]}, "n": None}], "Leak"))
    good = codec.encode({
        "id": 7, "big": -(1 << 70), "s": "ü" * 40, "b": b"\x01" * 20, "f": -1.5, "d": Decimal("99.99"),
        "w": Decimal("2" * 40 + "." + "2" * 20), "dt": Decimal("Infinity"), "day": dt.date(1, 1, 1),
        "ts": dt.datetime(9999, 12, 31), "t": dt.timedelta(0), "xs": ["y", 3], "sub": {"a": [{"b": 2.5}]}, "n": None})
    rounding = Codec({"type": "bytes", "logicalType": "decimal", "precision": 2, "scale": 1})
    batch = [good, good[:-3], good + b"\x00", good[:20] + b"\xff" * 12]
    decode, decode_rounding = plan_of(codec), plan_of(rounding)
    assert decode(good) is not kernel.HAND_BACK and decode_rounding(b"\x04\x01\x00") == Decimal("26")

    def run():
        for _ in range(300):
            for data in batch:
                decode(data)
                try:
                    codec.decode(data)  # the plan call, and its fallback's error for the bad ones
                except ConversionError:
                    pass
            decode_rounding(b"\x04\x01\x00")

    grown = traced_growth(run, 3)
    assert grown < 20_000, f"traced memory grew by {grown} bytes"
