"""google.protobuf.Struct conversion pins its documented LOSSY rules."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from google.protobuf import struct_pb2

from cdcflow.convert.structpb import from_struct, to_struct
from cdcflow.errors import ConversionError


def _rt(value):
    s = struct_pb2.Struct.FromString(to_struct(value).SerializeToString())
    return from_struct(s)


def test_ints_within_2_53_stay_ints_bigger_become_text():
    back = _rt({"a": 1 << 53, "b": -(1 << 53), "c": (1 << 53) + 1, "d": (1 << 64) - 1})
    assert back == {"a": 1 << 53, "b": -(1 << 53), "c": str((1 << 53) + 1), "d": "18446744073709551615"}
    assert type(back["a"]) is int


def test_integral_floats_come_back_as_int_others_as_float():
    back = _rt({"x": 2.0, "y": 2.5, "z": -0.0})
    assert back == {"x": 2, "y": 2.5, "z": 0} and type(back["x"]) is int and type(back["y"]) is float


def test_text_forms():
    back = _rt({
        "dec": Decimal("1.50"), "tiny": Decimal("0.0000001"), "b": b"\x00\xff", "d": dt.date(2020, 2, 20),
        "ts": dt.datetime(2020, 2, 20, 2, 20, 20, 123456), "ts0": dt.datetime(2020, 2, 20, 2, 20, 20),
        "t": dt.timedelta(hours=-838, minutes=-59, seconds=-59), "t2": dt.timedelta(hours=25, microseconds=5),
    })
    assert back == {
        "dec": "1.50", "tiny": "0.0000001", "b": "AP8=", "d": "2020-02-20", "ts": "2020-02-20 02:20:20.123456",
        "ts0": "2020-02-20 02:20:20", "t": "-838:59:59", "t2": "25:00:00.000005",
    }


def test_containers_bools_nulls_strings():
    value = {"l": [1, "a", None, True, {"n": [False]}], "s": "x", "n": None}
    assert _rt(value) == value


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_floats_are_refused(bad):
    with pytest.raises(ConversionError) as info:
        to_struct({"a": [1, {"b": bad}]})
    assert info.value.path == "$.a[1].b"


def test_unsupported_types_are_refused():
    with pytest.raises(ConversionError):
        to_struct({"a": object()})
