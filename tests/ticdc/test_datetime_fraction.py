"""DATETIME text with 1 to 6 fraction digits parses on every supported Python.

Python 3.10's ``datetime.fromisoformat`` takes only 0, 3 or 6 fraction digits (3.11 took
any), and TiDB writes as many as the column's fsp (0-6): these fail on 3.10 without
``tidb.datetime_from_text`` (run by .ci/pythons)."""

from __future__ import annotations

import datetime as dt

import pytest

from cdcflow import tidb

CASES = [("2020-01-02 03:04:05", 0)] + [
    ("2020-01-02 03:04:05." + "123456"[:n], int("123456"[:n].ljust(6, "0"))) for n in range(1, 7)]


@pytest.mark.parametrize(("text", "micro"), CASES, ids=[f"fsp{n}" for n in range(7)])
def test_every_fsp_parses_to_the_same_value(text, micro):
    want = dt.datetime(2020, 1, 2, 3, 4, 5, micro)
    assert tidb.parse_datetime(text) == want
    expr = tidb.inline_parse_expr("DATETIME", "v", "None")
    assert eval(expr, dict(tidb.INLINE_NAMES), {"v": text}) == want  # the generated decoders' form


@pytest.mark.parametrize("bad", ["2020-01-02 03:04:05.", "2020-01-02 03:04:05.1234567", "2020-01-02T03:04:05"])
def test_other_shapes_are_still_rejected(bad):
    with pytest.raises(ValueError):
        tidb.parse_datetime(bad)
