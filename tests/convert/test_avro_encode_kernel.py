"""The Avro encode kernel (runtime/_avro_encode.c) against the generated Python writer and fastavro.

``Codec.encode`` tries the kernel first; the kernel either writes exactly the bytes the
generated writer writes (and fastavro, the reference, writes for the prepared value) or
hands the value back, and the Python path then writes the same bytes or raises the typed
error. These tests compare the paths on generated schemas and values (every TiDB type
mapping, nested records/arrays/maps/unions, big values), on values that do not fit (same
error type and message), check that the kernel really decides the usual shapes itself
(not just handing everything back), and that it does not leak.
"""

from __future__ import annotations

import datetime as dt
import enum
import gc
import re
from decimal import Decimal, localcontext

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cdcflow import avro_values
from cdcflow.avro_values import Codec, derive_shared_schema
from cdcflow.connectors.ticdc.schema import table_schema_avro
from cdcflow.errors import ConversionError

from helpers import tidb_strategies as tidb_st  # every TiDB type and its edge values
from helpers.leakcheck import traced_growth
from helpers.avro_strategies import HAND_SCHEMA, SCALARS, hand_value, rows

kernel = avro_values._encode_kernel
pytestmark = pytest.mark.skipif(kernel is None, reason="encode kernel not built or CDCFLOW_PURE_PYTHON=1")


# --------------------------------------------------------------------------- helpers

def outcome(fn, value):
    """("ok", bytes) or ("error", type name, message without object addresses)."""
    try:
        return ("ok", fn(value))
    except Exception as e:  # noqa: BLE001 - compared as data
        return ("error", type(e).__name__, re.sub(r" at 0x[0-9a-f]+", "", str(e)))


def pure_encode(codec: Codec, value):
    saved = avro_values._encode_kernel
    avro_values._encode_kernel = None
    try:
        return codec.encode(value)
    finally:
        avro_values._encode_kernel = saved


def plan_of(codec: Codec):
    """The kernel's encode for the codec's plan (bytes or HAND_BACK); False: no plan."""
    if codec._kernel_encode is None:
        codec._build_kernel_encode(kernel)
    return codec._kernel_encode and codec._kernel_encode.encode


def assert_same_everywhere(codec: Codec, value, kernel_decides: bool | None = None) -> None:
    """Kernel path == generated path (bytes or error) == fastavro's bytes for what encodes;
    with ``kernel_decides`` the plan itself wrote the bytes (True) or handed back (False)."""
    with_kernel = outcome(codec.encode, value)
    without = outcome(lambda v: pure_encode(codec, v), value)
    assert with_kernel == without
    if with_kernel[0] == "ok":
        assert with_kernel == outcome(codec._reference_encode, value)
    if kernel_decides is not None:
        assert plan_of(codec), "no kernel plan for this schema"
        got = plan_of(codec)(value)
        assert (got is not kernel.HAND_BACK) == kernel_decides
        if kernel_decides:
            assert got == with_kernel[1]


# --------------------------------------------------------------------------- TiDB rows

@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tidb_st.tables_and_rows(max_rows=3))
def test_every_tidb_type_encodes_as_the_python_writer_does(table_rows):
    table, rows = table_rows
    codec = Codec(table_schema_avro(table))
    for row in rows:
        native = outcome(lambda v: pure_encode(codec, v), row)
        assume(native[0] == "ok")  # a value the TiDB mapping does not hold natively (not this test's subject)
        assert_same_everywhere(codec, row, kernel_decides=True)


# --------------------------------------------------------------------------- derived schemas

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(rows(), min_size=1, max_size=2))
def test_derived_schemas_nested_values_encode_alike(values):
    codec = Codec(derive_shared_schema(values, "Payload"))
    for value in values:
        assert_same_everywhere(codec, value, kernel_decides=True)


# values no derived schema expects: the wrong type, out of range, subclasses, lone surrogates
class MyStr(str):
    pass


class MyInt(int):
    pass


class Color(enum.IntEnum):
    RED = 1


ODD_VALUES = st.one_of(
    st.one_of(SCALARS),
    st.sampled_from([MyStr("x"), MyInt(3), Color.RED, True, 1.0, "\ud800", "a\udfffb", bytearray(b"x"), (1, 2),
                     dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc), dt.timedelta(days=999_999_999),
                     Decimal("NaN"), Decimal("sNaN"), Decimal("-Infinity"), Decimal("-0.00"), 1 << 200,
                     {"nested": 1}, [1, "x"], {1: 2}, {"a": "\udc80"}]),
)


def replace_one_leaf(value, path_choice: int, replacement):
    """``value`` (a dict tree) with one leaf or list item replaced; which one is ``path_choice``."""
    leaves = []

    def walk(container, key, v):
        leaves.append((container, key))
        if type(v) is dict:
            for k, x in v.items():
                walk(v, k, x)
        elif type(v) is list:
            for i, x in enumerate(v):
                walk(v, i, x)

    for k, x in value.items():
        walk(value, k, x)
    if not leaves:
        return value
    container, key = leaves[path_choice % len(leaves)]
    container[key] = replacement
    return value


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows(1), st.integers(0, 1000), ODD_VALUES)
def test_values_that_do_not_fit_give_the_same_bytes_or_error(value, which, odd):
    codec = Codec(derive_shared_schema([value], "Payload"))
    import copy

    changed = replace_one_leaf(copy.deepcopy(value), which, odd)
    assert_same_everywhere(codec, changed)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows(1), rows(1))
def test_a_value_of_another_shape_gives_the_same_error(a, b):
    codec = Codec(derive_shared_schema([a], "Payload"))
    assert_same_everywhere(codec, b)


# --------------------------------------------------------------------------- hand-written schemas

@settings(max_examples=200, deadline=None)
@given(hand_value(2))
def test_named_recursive_enum_fixed_map_union_float_schemas(value):
    assert_same_everywhere(Codec(HAND_SCHEMA), value, kernel_decides=True)


@settings(max_examples=300, deadline=None)
@given(hand_value(1), st.sampled_from(["i", "f", "e", "fx", "m", "ch", "next", "d", "original name"]), ODD_VALUES)
def test_hand_schema_values_that_do_not_fit(value, field, odd):
    value[field] = odd
    assert_same_everywhere(Codec(HAND_SCHEMA), value)


def record(fields: dict) -> dict:
    return {"type": "record", "name": "R", "fields": [{"name": k, "type": t} for k, t in fields.items()]}


BIGINT20 = {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0, "cdcflow.type": "int"}
BIGINT19 = dict(BIGINT20, precision=19)
BIGINT3 = dict(BIGINT20, precision=3)
BIGINT_ANY = {"type": "bytes", "cdcflow.type": "int"}
DEC_65_30 = {"type": "bytes", "logicalType": "decimal", "precision": 65, "scale": 30}
DEC_5_2 = {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}
TIME = {"type": "long", "cdcflow.type": "time-micros"}
DATE = {"type": "int", "logicalType": "date"}
DATETIME = {"type": "long", "logicalType": "local-timestamp-micros"}
DEC_TEXT = {"type": "string", "cdcflow.type": "decimal"}
MAX_DEC = Decimal("9" * 35 + "." + "9" * 30)


@pytest.mark.parametrize("t, value, decides", [
    ("long", (1 << 63) - 1, True), ("long", -(1 << 63), True), ("long", 1 << 63, False), ("long", True, False),
    ("long", MyInt(1), False), ("long", Color.RED, False), ("long", 1.0, False),
    ("int", (1 << 31) - 1, True), ("int", -(1 << 31), True), ("int", 1 << 31, False),
    ("float", 0.5, True), ("float", float("nan"), True), ("float", float("-inf"), True), ("float", 0.1, False),
    ("float", 1e300, False),  # too large for 32 bits: the Python path raises its own error
    ("double", -0.0, True), ("double", float("nan"), True), ("double", 1, False),
    ("bytes", b"\x00" * (1 << 20), True), ("bytes", bytearray(b"x"), False), ("bytes", "x", False),
    ("string", "x" * (1 << 20), True), ("string", "é€😀\u2028\x00" * 1000, True), ("string", "\ud800", False),
    ("string", MyStr("x"), False), ("string", b"x", False),
    (BIGINT20, (1 << 64) - 1, True), (BIGINT20, 1 << 63, True), (BIGINT20, -(1 << 63), True),
    (BIGINT20, -(1 << 63) - 1, True), (BIGINT20, -(1 << 64), True), (BIGINT20, 10 ** 20 - 1, True),
    (BIGINT20, 10 ** 20, False), (BIGINT20, -(10 ** 20), False), (BIGINT20, -128, True), (BIGINT20, -129, True),
    (BIGINT20, 0, True), (BIGINT20, -1, True), (BIGINT20, 255, True), (BIGINT20, True, False),
    (BIGINT19, 10 ** 19 - 1, True), (BIGINT19, 10 ** 19, False), (BIGINT19, -(10 ** 19) + 1, True),
    (BIGINT19, -(10 ** 19), False), (BIGINT3, 999, True), (BIGINT3, -1000, False), (BIGINT3, 1 << 63, False),
    (BIGINT_ANY, 1 << 1000, True), (BIGINT_ANY, -(1 << 1000), True), (BIGINT_ANY, -(1 << 1000) - 1, True),
    (DEC_65_30, MAX_DEC, True), (DEC_65_30, MAX_DEC.copy_negate(), True), (DEC_65_30, Decimal("0E-30"), True),
    (DEC_65_30, Decimal("-1E-30"), True), (DEC_65_30, Decimal("1.5"), False), (DEC_65_30, Decimal("-0E-30"), False),
    (DEC_65_30, Decimal("1" + "0" * 35 + "." + "0" * 30), False),  # 66 digits
    (DEC_5_2, Decimal("-1.28"), True), (DEC_5_2, Decimal("1.28"), True), (DEC_5_2, Decimal("999.99"), True),
    (DEC_5_2, Decimal("-999.99"), True), (DEC_5_2, Decimal("0.00"), True), (DEC_5_2, Decimal("1E-2"), True),
    (DEC_5_2, Decimal("1000.00"), False), (DEC_5_2, Decimal("NaN"), False), (DEC_5_2, Decimal("Infinity"), False),
    (DEC_5_2, 1, False), (DEC_5_2, Decimal("-0.00"), False),
    (DEC_TEXT, Decimal("NaN"), True), (DEC_TEXT, Decimal("-0"), True), (DEC_TEXT, Decimal("1E+5"), True),
    (DEC_TEXT, Decimal("sNaN"), True), (DEC_TEXT, "1.5", False),
    (DATE, dt.date.min, True), (DATE, dt.date.max, True), (DATE, dt.date(1970, 1, 1), True),
    (DATE, dt.datetime(2020, 1, 1), False),
    (DATETIME, dt.datetime.min, True), (DATETIME, dt.datetime.max, True), (DATETIME, dt.datetime(1969, 12, 31, 23, 59, 59, 999999), True),
    (DATETIME, dt.datetime(2020, 1, 1, fold=1), True), (DATETIME, dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc), False),
    (DATETIME, dt.date(2020, 1, 1), False),
    (TIME, dt.timedelta(hours=-838, minutes=-59, seconds=-59), True), (TIME, dt.timedelta(microseconds=-1), True),
    (TIME, dt.timedelta(days=106_751_990), True), (TIME, dt.timedelta(days=106_751_991), False),
    (TIME, dt.timedelta(days=-106_751_992), False), (TIME, dt.timedelta.max, False),
])
def test_edges_and_hand_backs(t, value, decides):
    assert_same_everywhere(Codec(record({"v": t})), {"v": value}, kernel_decides=decides)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.integers(-(10 ** 100), 10 ** 100), st.integers(-(1 << 300), 1 << 300),
                 st.sampled_from([(1 << 64), -(1 << 64), -(1 << 255), (1 << 255) - 1, 10 ** 78 - 1, -(10 ** 78) + 1,
                                  10 ** 78, -(10 ** 18), 10 ** 18 - 1, 10 ** 18, 2 ** 63, -(2 ** 63), -(2 ** 63) - 1])),
       st.integers(0, 90), st.integers(0, 3))
def test_decimals_of_every_width_encode_alike(unscaled, scale, spare):
    """Up to 18 digits, up to 78 (limbs in C) and beyond (Python's int): the same bytes."""
    digits = tuple(int(c) for c in str(abs(unscaled)))
    value = Decimal((int(unscaled < 0), digits, -scale))
    precision = max(len(digits), scale, 1) + spare
    codec = Codec(record({"v": {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}}))
    assert_same_everywhere(codec, {"v": value}, kernel_decides=True)
    assert_same_everywhere(codec, {"v": value.normalize()})  # another exponent (or rounded): refused alike


def test_decimal_text_follows_the_context_as_str_does():
    codec = Codec(record({"v": DEC_TEXT, "d": DEC_5_2}))
    value = {"v": Decimal("1E+5"), "d": Decimal("1E-2")}
    with localcontext() as ctx:
        ctx.capitals = 0  # str() writes "1e+5": the kernel writes what str says, or hands back
        assert_same_everywhere(codec, value)
        assert codec.encode(value) == pure_encode(codec, value)


@pytest.mark.parametrize("value, decides", [
    (None, True), (5, True), (2.5, True), ("x", True), ({"x": 1}, True), ({"y": "z"}, True), ([b"abcd"], True),
    ({"x": "not a long"}, False), ({"x": 1, "y": "z"}, False), ([b"abc"], False), (True, False), ({}, False),
])
def test_unions_take_the_first_branch_that_fits(value, decides):
    codec = Codec({"type": "record", "name": "U", "fields": [{"name": "u", "type": [
        "null", "long", "double", "string",
        {"type": "record", "name": "A", "fields": [{"name": "x", "type": "long"}]},
        {"type": "record", "name": "B", "fields": [{"name": "y", "type": "string"}]},
        {"type": "array", "items": {"type": "fixed", "name": "F", "size": 4}}]}]})
    assert_same_everywhere(codec, {"u": value}, kernel_decides=decides)


def test_a_union_of_a_map_and_a_record_tries_them_in_order():
    codec = Codec({"type": "record", "name": "M", "fields": [{"name": "u", "type": [
        {"type": "map", "values": "long"}, {"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]}]}]})
    assert_same_everywhere(codec, {"u": {"a": 1}}, kernel_decides=True)  # the map
    assert_same_everywhere(codec, {"u": {"a": "x"}}, kernel_decides=True)  # the map refuses it: the record
    assert codec.encode({"u": {"a": "x"}}) == b"\x02\x02x"
    assert_same_everywhere(codec, {"u": {"a": "\ud800"}}, kernel_decides=False)


def test_non_record_roots():
    for schema, value in (({"type": "long"}, 5), (["null", "string"], "é"), ({"type": "array", "items": "long"}, [1, 2, 3]),
                          ({"type": "map", "values": "string"}, {"k": "v", "é": ""}), ({"type": "null"}, None)):
        assert_same_everywhere(Codec(schema), value, kernel_decides=True)


def test_deep_recursion_is_handed_back_and_still_encodes():
    codec = Codec({"type": "record", "name": "N", "fields": [{"name": "next", "type": ["null", "N"]}]})

    def chain(n):
        v = None
        for _ in range(n):
            v = {"next": v}
        return v

    assert_same_everywhere(codec, chain(10), kernel_decides=True)
    assert_same_everywhere(codec, chain(200), kernel_decides=False)
    assert codec.encode(chain(200)) == b"\x02" * 199 + b"\x00"


def test_foreign_logical_types_get_no_plan():
    codec = Codec(record({"ts": {"type": "long", "logicalType": "timestamp-millis"}}))
    value = {"ts": dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)}
    assert codec.decode(codec.encode(value)) == value
    assert plan_of(codec) is False and codec.encoder() == codec.encode


def test_encoder_is_the_plan_and_behaves_as_encode():
    codec = Codec(HAND_SCHEMA)
    encoder = codec.encoder()
    assert type(encoder) is kernel.Plan
    value = {"i": 1, "f": 0.5, "e": "RED", "fx": b"abcd", "m": {"k": None}, "ch": {"y": "z"}, "next": None,
             "d": Decimal("0.0"), "original name": True}
    assert encoder(value) == codec.encode(value) == pure_encode(codec, value) == codec._reference_encode(value)
    bad = dict(value, e="BLUE")
    with pytest.raises(ConversionError, match=r"\$\.e"):
        encoder(bad)
    assert outcome(encoder, bad) == outcome(lambda v: pure_encode(codec, v), bad)
    with pytest.raises(TypeError):
        encoder()
    with pytest.raises(TypeError):
        encoder(value, value)
    assert kernel.Plan(((kernel.K_LONG,),), 0)("x") is kernel.HAND_BACK  # no fallback: the sentinel


def test_switching_the_kernel_off_uses_the_python_writer(monkeypatch):
    codec = Codec(record({"v": "long"}))
    calls = []
    python = codec._encode_python
    monkeypatch.setattr(codec, "_encode_python", lambda v: calls.append(v) or python(v))
    assert codec.encode({"v": 1}) == b"\x02" and calls == []
    monkeypatch.setattr(avro_values, "_encode_kernel", None)
    assert codec.encode({"v": 1}) == b"\x02" and calls == [{"v": 1}]
    assert codec.encoder() == codec.encode


def test_a_reentrant_call_through_a_key_eq_writes_its_own_buffer():
    codec = Codec(record({"a": "string", "b": "string"}))
    encoder = codec.encoder()
    inner = []

    class Collides:
        """A key hashing like "b": looking "b" up runs this __eq__, which encodes another value."""

        def __hash__(self):
            return hash("b")

        def __eq__(self, other):
            inner.append(encoder({"a": "inner", "b": "x" * 500}))
            return False

    value = {"a": "outer", Collides(): "?"}
    assert outcome(encoder, value) == outcome(lambda v: pure_encode(codec, v), value)
    assert inner and all(b == pure_encode(codec, {"a": "inner", "b": "x" * 500}) for b in inner)
    assert encoder({"a": "after", "b": "y"}) == b"\x0aafter\x02y"


def test_a_codec_and_its_plan_make_no_reference_cycle():
    import weakref

    codec = Codec(record({"v": "long"}))
    assert codec.encode({"v": 1}) == b"\x02" and codec._kernel_encode
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
    with pytest.raises(TypeError):
        kernel.Plan(((kernel.K_BIGINT, 5, None),), 0)  # a precision needs its limit
    with pytest.raises(ValueError):
        kernel.Plan(((kernel.K_UNION, (0, 1), (0,)),), 0)
    with pytest.raises(ValueError):
        kernel.Plan(((kernel.K_LONG,),), 1)


# --------------------------------------------------------------------------- leaks

def test_no_leak_on_values_hand_backs_and_errors():
    sample = {
        "id": 1, "big": 1 << 70, "u64": (1 << 64) - 1, "s": "é" * 40, "b": b"\x00" * 20, "f": 0.5,
        "d": Decimal("-12.34"), "w": Decimal("1" * 40 + "." + "1" * 20), "dt": Decimal("NaN"),
        "day": dt.date(2024, 1, 2), "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 6), "t": dt.timedelta(hours=-5),
        "xs": [1, None, "x"], "sub": {"a": [{"b": 1.5}]}, "n": None}
    codec = Codec(derive_shared_schema([sample, dict(sample, big=-(1 << 70), xs=[None])], "Leak"))
    encoder = codec.encoder()
    good = [sample, dict(sample, big=-(1 << 70), s="ü" * 400, w=Decimal("-" + "2" * 40 + "." + "2" * 20), xs=[None])]
    handed_back = [dict(sample, s="\ud800"), dict(sample, id=MyInt(1))]  # same bytes or an error, from Python
    wrong = [dict(sample, id="x"), dict(sample, sub={"a": [{"b": "no"}]}), {"id": 1}]
    for v in good:
        assert encoder.encode(v) is not kernel.HAND_BACK
    for v in handed_back + wrong:
        assert encoder.encode(v) is kernel.HAND_BACK

    def run():
        for _ in range(300):
            for v in good:
                encoder(v)
            for v in handed_back + wrong:
                encoder.encode(v)
                try:
                    encoder(v)  # the fallback's bytes or typed error
                except ConversionError:
                    pass

    grown = traced_growth(run, 3)
    assert grown < 20_000, f"traced memory grew by {grown} bytes"
