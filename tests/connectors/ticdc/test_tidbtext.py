"""runtime/_c/tidbtext.h against cdcflow.connectors.ticdc.tidb, through _canal_json's thin test entry points.

Each C text function must give exactly the text of the Python fast path (``tidb.inline_text_expr``,
``inline_go_float_expr``; ``format_time`` for TIME) and "not handled" (None) exactly where that fast
path takes its slow branch; the JSON string writer must equal orjson (orjson style) and
canal_json._dumps (Go style) byte for byte.
"""

from __future__ import annotations

import datetime
import decimal
import sys

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcflow.connectors.ticdc import tidb
from cdcflow.connectors.ticdc import canal_json as cj
from cdcflow.connectors.ticdc.canal_json import schema as cj_schema
from helpers.leakcheck import traced_growth

k = pytest.importorskip("cdcflow.connectors.ticdc.canal_json._canal_json", reason="canal-json kernel not built")

SLOW = object()
"""What an inline expression evaluates on its slow branch, in these tests."""


def _fast_path(expr: str):
    """The inline expression as a function returning SLOW on its slow branch."""
    ns = dict(tidb.INLINE_NAMES, SLOW=SLOW)
    exec(f"def f(v):\n    return {expr}\n", ns)
    return ns["f"]


def _c(kind: int, param: int | None):
    p = -1 if param is None else param
    return lambda v: k._text_of(kind, v, p)


def _same(c_fn, py_fast, v):
    want = py_fast(v)
    got = c_fn(v)
    assert got == (None if want is SLOW else want), (v, got, want)
    assert got is None or type(got) is str


_DECIMALS = st.one_of(
    st.decimals(allow_nan=True, allow_infinity=True, places=None),
    st.tuples(st.integers(-10**40, 10**40), st.integers(-35, 12)).map(lambda t: decimal.Decimal(t[0]).scaleb(t[1])),
    st.decimals(allow_nan=False, allow_infinity=False, places=3),
    st.sampled_from(["0", "-0", "0E-3", "1E+2", "5.95", "-1.50", "1E-7", "sNaN", "-0.00", "123", "-5"]).map(
        decimal.Decimal),
)
_FSP = st.one_of(st.none(), st.integers(0, 6))
_DATETIMES = st.one_of(
    st.datetimes(),
    st.datetimes(timezones=st.just(datetime.timezone.utc)),
    st.sampled_from([datetime.datetime(1, 1, 1), datetime.datetime(9999, 12, 31, 23, 59, 59, 999999),
                     datetime.datetime(2020, 1, 1, 0, 0, 0, 100000), datetime.datetime(2020, 1, 1, 0, 0, 0, 1000)]),
)
_FLOATS = st.one_of(st.floats(), st.floats(width=32), st.sampled_from(
    [0.0, -0.0, 1e16, 1e15, 1e-4, 1e-5, 9.999999e-5, 1e6, 999999.9999, -1e6, 5e-324, 1.7976931348623157e308,
     0.1, 100.0, float("nan"), float("inf"), -float("inf")]))


class _Str(str):
    pass


class _Int(int):
    pass


class _Dec(decimal.Decimal):
    pass


class _DT(datetime.datetime):
    pass


_WRONG = st.one_of(st.none(), st.booleans(), st.text(max_size=3), st.binary(max_size=3), st.dates(),
                   st.just(_Str("x")), st.just(_Int(5)), st.just(_Dec("1.00")), st.just(_DT(2020, 1, 1)),
                   st.just(datetime.timedelta(1)), st.just(1.5), st.just(3))


@settings(max_examples=400, deadline=None)
@given(v=st.one_of(st.integers(), st.integers(-(2**63), 2**64 - 1), st.sampled_from(
    [0, -1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1, 2**64, -(2**63) - 1]), _WRONG))
def test_int(v):
    got = k._text_of(k.K_INT, v, -1)
    if type(v) is int and -(2**63) <= v <= 2**64 - 1:
        assert got == str(v)
    else:  # beyond 64 bits (rare) the caller formats in Python; a non-int is Python's to reject
        assert got is None


@settings(max_examples=300, deadline=None)
@given(v=st.one_of(st.text(), st.text(st.characters(blacklist_categories=())), _WRONG))
def test_str(v):
    got = k._text_of(k.K_STR, v, -1)
    if type(v) is not str:
        assert got is None
        return
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogate: Python decides
        assert got is None
    else:
        assert got == v


@settings(max_examples=500, deadline=None)
@given(scale=st.one_of(st.none(), st.integers(0, 30)), v=st.one_of(_DECIMALS, _WRONG))
def test_decimal(scale, v):
    expr = tidb.inline_text_expr(tidb.Column("c", "DECIMAL", scale=scale), "v", "SLOW")
    if expr is None:  # no inline form without a scale: the kernel passes every value
        assert k._text_of(k.K_DECIMAL, v, -1) is None
        return
    _same(_c(k.K_DECIMAL, scale), _fast_path(expr), v)


@settings(max_examples=500, deadline=None)
@given(fsp=_FSP, type_name=st.sampled_from(["DATETIME", "TIMESTAMP"]), v=st.one_of(_DATETIMES, _WRONG))
def test_datetime(fsp, type_name, v):
    expr = tidb.inline_text_expr(tidb.Column("c", type_name, fsp=fsp), "v", "SLOW")
    _same(_c(k.K_DATETIME, fsp), _fast_path(expr), v)


def test_datetime_fsp_out_of_range_passes():
    assert k._text_of(k.K_DATETIME, datetime.datetime(2020, 1, 1), 7) is None


@settings(max_examples=300, deadline=None)
@given(v=st.one_of(st.dates(), _DATETIMES, _WRONG))
def test_date(v):
    _same(_c(k.K_DATE, None), _fast_path(tidb.inline_text_expr(tidb.Column("c", "DATE"), "v", "SLOW")), v)


@settings(max_examples=500, deadline=None)
@given(v=st.one_of(_FLOATS, _WRONG))
def test_float(v):
    _same(_c(k.K_FLOAT, None), _fast_path(tidb.inline_text_expr(tidb.Column("c", "DOUBLE"), "v", "SLOW")), v)


@settings(max_examples=500, deadline=None)
@given(v=st.one_of(_FLOATS, _WRONG))
def test_go_float(v):
    _same(_c(k.K_GO_FLOAT, None), _fast_path(tidb.inline_go_float_expr("v", "SLOW")), v)
    got = k._text_of(k.K_GO_FLOAT, v, -1)
    if got is not None:
        assert got == tidb.format_go_float(v)


_TIMEDELTAS = st.one_of(
    st.timedeltas(),
    st.integers(-tidb.TIME_MAX_US, tidb.TIME_MAX_US).map(lambda us: datetime.timedelta(microseconds=us)),
    st.sampled_from([datetime.timedelta(0), datetime.timedelta(microseconds=-1), datetime.timedelta.max,
                     datetime.timedelta.min, datetime.timedelta(hours=838, minutes=59, seconds=59),
                     datetime.timedelta(seconds=-5, microseconds=120000)]),
)


@settings(max_examples=500, deadline=None)
@given(fsp=_FSP, v=st.one_of(_TIMEDELTAS, _WRONG))
def test_time(fsp, v):
    got = k._text_of(k.K_TIME, v, -1 if fsp is None else fsp)
    try:
        want = tidb.format_time(v, fsp) if type(v) is datetime.timedelta else None
    except tidb.ValueMismatch:
        want = None
    assert got == want, (v, fsp)


@given(v=st.one_of(st.booleans(), st.integers(0, 1), st.none()))
def test_bool(v):
    assert k._text_of(k.K_BOOL, v, -1) == ({True: "1", False: "0"}[v] if type(v) is bool else None)


def test_unknown_kind_passes():
    assert k._text_of(99, 5, -1) is None


# --------------------------------------------------------------------------- JSON strings

_UNICODE = st.text(st.one_of(
    st.characters(blacklist_categories=("Cs",)),
    st.sampled_from(list("\x00\x01\x08\x0c\x1f\x7f\t\n\r\"\\<>&/'\u2028\u2029\u2027\u202a\xe9\U0001f600\ufffd")),
), max_size=40)


@settings(max_examples=600, deadline=None)
@given(s=_UNICODE)
def test_json_str_go_style_equals_canal_dumps(s):
    assert k._json_str(s, k.JSON_GO) == cj_schema._dumps(s)


@settings(max_examples=600, deadline=None)
@given(s=_UNICODE)
def test_json_str_orjson_style_equals_orjson(s):
    assert k._json_str(s, k.JSON_ORJSON) == orjson.dumps(s)


@settings(max_examples=400, deadline=None)
@given(b=st.binary(max_size=40), style=st.sampled_from(["go", "orjson"]))
def test_json_latin1(b, style):
    text = b.decode("latin-1")
    want = cj_schema._dumps(text) if style == "go" else orjson.dumps(text)
    assert k._json_latin1(b, k.JSON_GO if style == "go" else k.JSON_ORJSON) == want


def test_json_str_hands_back_surrogates_and_subclasses():
    assert k._json_str("a\ud800b", k.JSON_GO) is None
    assert k._json_str(_Str("x"), k.JSON_GO) is None
    assert k._json_str(b"x", k.JSON_GO) is None


def test_json_str_long_input_grows_the_buffer():
    s = "<é>" * 100_000 + "\x01" * 1000
    assert k._json_str(s, k.JSON_GO) == cj_schema._dumps(s)
    assert k._json_latin1(bytes(range(256)) * 500, k.JSON_GO) == cj_schema._dumps((bytes(range(256)) * 500).decode("latin-1"))


def test_text_functions_do_not_leak():
    values = [(k.K_INT, 2**64 - 1, -1), (k.K_DECIMAL, decimal.Decimal("12.50"), 2),
              (k.K_DECIMAL, decimal.Decimal("1E+2"), 2), (k.K_DATETIME, datetime.datetime(2020, 1, 1, 1, 1, 1, 5), 6),
              (k.K_TIME, datetime.timedelta(hours=-800, microseconds=3), -1), (k.K_FLOAT, 1e300, -1),
              (k.K_FLOAT, 0.1, -1), (k.K_GO_FLOAT, 123.5, -1), (k.K_STR, "x" * 50, -1)]

    def once():
        for kind, v, p in values:
            k._text_of(kind, v, p)
        k._json_str("a<b" * 20, k.JSON_GO)
        k._json_latin1(b"\xff" * 30, k.JSON_GO)

    grown = traced_growth(once, 2000, warmup=50)
    assert grown < 8192, grown
    assert sys.getrefcount(values[0][1]) < 100
