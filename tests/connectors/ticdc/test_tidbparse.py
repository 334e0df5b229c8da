"""runtime/_c/tidbparse.h (TiDB text -> Python value, fast path) against the Python parsers it
mirrors, through the ``_csv.parse_value`` test entry point: every value it returns is exactly
(type, digits, exponent) what Python returns; every text Python refuses it hands back
(NotImplemented); the canonical texts TiDB writes it must not hand back."""

from __future__ import annotations

import datetime
import decimal
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cdcflow.connectors.ticdc.tidb import TIME_MAX_US, format_go_float, format_time, parse_date, parse_datetime, parse_time

_csv = pytest.importorskip("cdcflow.connectors.ticdc.csv._csv", reason="the CSV kernel is not built")
INT, FLOAT, DECIMAL, DATE, DATETIME, TIME = 1, 2, 3, 4, 5, 6


def parse(kind: int, text: str, max_us: int = -1):
    return _csv.parse_value(kind, text, max_us)


def same(kernel_value, reference_value) -> bool:
    """Type-strict equality: repr tells int from float from bool, Decimal exponents, -0.0, date
    from datetime."""
    return type(kernel_value) is type(reference_value) and repr(kernel_value) == repr(reference_value)


def check(kind: int, text: str, reference, max_us: int = -1):
    """The kernel's answer for ``text`` is the reference's value, or it hands the text back; a
    text the reference refuses is always handed back. Returns whether it was handled."""
    got = parse(kind, text, max_us)
    try:
        want = reference(text)
    except (ValueError, ArithmeticError):
        assert got is NotImplemented, (text, got)
        return False
    if got is NotImplemented:
        return False
    assert same(got, want), (text, got, want)
    return True


# Texts near each shape: signs, spaces, underscores, exponents, non-ASCII digits, empty parts.
_NEAR = st.text(alphabet="0123456789-+._ eE:\u0663\u00b2\t", max_size=30)


# --------------------------------------------------------------------------- integers

@settings(max_examples=400, deadline=None)
@given(st.one_of(st.integers(-2**63, 2**64 - 1), st.integers(-2**70, 2**70)))
@example(-2**63)
@example(2**64 - 1)
@example(2**64)
@example(-2**63 - 1)
@example(0)
def test_int_canonical(value):
    handled = check(INT, str(value), int)
    assert handled == (-2**63 <= value <= 2**64 - 1)


@settings(max_examples=400, deadline=None)
@given(_NEAR)
@example("007")
@example("-0")
@example("+5")
@example(" 5")
@example("1_000")
@example("\u0663")
@example("-")
@example("")
@example("0" * 25 + "1")
def test_int_near_shapes(text):
    check(INT, text, int)


# --------------------------------------------------------------------------- floats

_FLOAT_SHAPE = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")


@settings(max_examples=400, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False),
       st.sampled_from([repr, format_go_float, lambda v: f"{v:.17g}", lambda v: f"{v:e}", lambda v: f"{v:.3f}"]))
def test_float_canonical(value, form):
    text = form(value)
    handled = check(FLOAT, text, float)
    assert handled == (bool(_FLOAT_SHAPE.fullmatch(text)) and len(text) <= 64), text


@settings(max_examples=400, deadline=None)
@given(_NEAR)
@example("1e999")
@example("-1e999")
@example("1e-400")
@example(".5")
@example("5.")
@example("inf")
@example("nan")
@example("1" * 80)
@example("0.1e+05")
def test_float_near_shapes(text):
    check(FLOAT, text, float)


# --------------------------------------------------------------------------- decimals

@settings(max_examples=400, deadline=None)
@given(st.integers(0, 30).flatmap(lambda p: st.decimals(allow_nan=False, allow_infinity=False, places=p))
       | st.decimals(allow_nan=False, allow_infinity=False))
def test_decimal_canonical(value):
    text = format(value, "f")
    assert check(DECIMAL, text, decimal.Decimal) == (len(text) <= 201)
    check(DECIMAL, str(value), decimal.Decimal)


@settings(max_examples=300, deadline=None)
@given(_NEAR)
@example("1E3")
@example("NaN")
@example("-0.000")
@example("00012.3400")
@example("9" * 65 + "." + "9" * 30)
def test_decimal_near_shapes(text):
    check(DECIMAL, text, decimal.Decimal)


# --------------------------------------------------------------------------- dates and times

@settings(max_examples=300, deadline=None)
@given(st.dates())
def test_date_canonical(value):
    assert check(DATE, value.isoformat(), parse_date)


@settings(max_examples=400, deadline=None)
@given(st.from_regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", fullmatch=True) | _NEAR)
@example("0000-01-01")
@example("2023-02-29")
@example("2024-02-29")
@example("2024-13-01")
@example("2024-04-31")
@example("2024-1-011")
@example("+024-01-01")
def test_date_near_shapes(text):
    check(DATE, text, parse_date)


@settings(max_examples=300, deadline=None)
@given(st.datetimes(), st.integers(0, 6))
def test_datetime_canonical(value, fsp):
    text = value.isoformat(" ", "microseconds")[: 20 + fsp] if fsp else value.isoformat(" ", "seconds")
    assert check(DATETIME, text, parse_datetime)


@settings(max_examples=400, deadline=None)
@given(st.from_regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{0,8})?", fullmatch=True) | _NEAR)
@example("2024-01-02 24:00:00")
@example("2024-01-02 23:59:60")
@example("2024-01-02T03:04:05")
@example("2024-01-02 03:04:05.")
@example("2024-01-02 03:04:05.1234567")
@example("2024-01-02 03:04:05+08:00")
def test_datetime_near_shapes(text):
    check(DATETIME, text, parse_datetime)


@settings(max_examples=300, deadline=None)
@given(st.integers(-TIME_MAX_US, TIME_MAX_US), st.sampled_from([None, 0, 1, 3, 6]))
def test_time_canonical(us, fsp):
    if fsp is not None and us % 10 ** (6 - fsp):
        us -= us % 10 ** (6 - fsp)
    text = format_time(datetime.timedelta(microseconds=us), fsp)
    assert check(TIME, text, lambda t: parse_time(t, TIME_MAX_US), TIME_MAX_US)
    assert check(TIME, text, parse_time)


@settings(max_examples=400, deadline=None)
@given(st.from_regex(r"-?[0-9]{1,4}:[0-9]{2}:[0-9]{2}(\.[0-9]{0,8})?", fullmatch=True) | _NEAR,
       st.sampled_from([None, TIME_MAX_US]))
@example("838:59:59", TIME_MAX_US)
@example("838:59:59.000001", TIME_MAX_US)
@example("-839:00:00", TIME_MAX_US)
@example("999:59:59.999999", None)
@example("-00:00:00", None)
@example("12:60:00", None)
def test_time_near_shapes(text, max_us):
    check(TIME, text, lambda t: parse_time(t, max_us), -1 if max_us is None else max_us)


def test_unknown_kind_is_a_value_error():
    with pytest.raises(ValueError):
        parse(0, "1")
