"""Batch forms give exactly what their per-item forms give, bad values still name their column,
and TiDB's inline text/parse forms (tidb.py) equal the plain formatters and parsers."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.connectors.ticdc import canal_json as cj
from cdcflow.connectors.ticdc import events as ev_mod
from cdcflow.connectors.ticdc.events import RowChange, from_record, from_records, to_record, to_records
from cdcflow.schemas import SchemaStore

from helpers.tidb_strategies import tables_and_rows

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])
KINDS = st.sampled_from(["insert", "update", "delete"])


def _events(table, rows, kinds):
    out = []
    for i, (row, kind) in enumerate(zip(rows, kinds)):
        old = rows[i - 1] if kind == "update" else None
        out.append(RowChange(table, kind, (1_700_000_000_000 + i) << 18, row, old))
    return out


@SETTINGS
@given(data=tables_and_rows(min_rows=1, max_rows=4), kinds=st.lists(KINDS, min_size=4, max_size=4),
       extra=st.booleans())
def test_batch_record_mapping_equals_per_record(data, kinds, extra):
    table, rows = data
    events = _events(table, rows, kinds)
    if extra:
        events[0].extra[ev_mod.META_ONLY_HANDLE_KEY] = "true"
    positions = [b"%d" % i for i in range(len(events))]
    store = SchemaStore()
    try:
        batch = to_records(events, positions, store)
        single = [to_record(e, p, store) for e, p in zip(events, positions)]
        assert [(r.position, r.operation, r.metadata, list(r.metadata), r.key, r.before, r.after) for r in batch] \
            == [(r.position, r.operation, r.metadata, list(r.metadata), r.key, r.before, r.after) for r in single]
        back_batch = from_records(batch, store)
        back_single = [from_record(r, store) for r in batch]
        assert [(e.table, e.kind, e.commit_ts, e.row, e.old, e.extra) for e in back_batch] \
            == [(e.table, e.kind, e.commit_ts, e.row, e.old, e.extra) for e in back_single]
    finally:
        store.close()


def test_canal_json_bad_value_names_the_column():
    """A value that does not fit its column raises the error naming the column."""
    from cdcflow.connectors.ticdc.errors import UnrepresentableValue
    from cdcflow.connectors.ticdc.tidb import Column, TableSchema

    table = TableSchema("s", "t", (Column("id", "BIGINT", handle_key=True, primary_key=True, nullable=False),
                                   Column("n", "INT")))
    enc = cj.CanalJsonEncoder(now_ms=lambda: 1)
    assert enc.encode(RowChange(table, "insert", 1 << 18, {"id": 1, "n": 2})).count(b'"n":"2"') == 1
    with pytest.raises(UnrepresentableValue, match="s.t.*n"):
        enc.encode(RowChange(table, "insert", 1 << 18, {"id": 1, "n": "2"}))


def test_memoised_dates_stay_exact_and_bounded():
    """DATE texts are memoised per column: repeated texts give equal dates, a bad text is never
    remembered (it still raises), and the memo stops growing at its bound."""
    import datetime

    from cdcflow.connectors.ticdc.errors import MalformedMessage
    from cdcflow.connectors.ticdc.tidb import Column, TableSchema

    table = TableSchema("s", "t", (Column("id", "BIGINT", handle_key=True, primary_key=True, nullable=False),
                                   Column("d", "DATE")))
    enc = cj.CanalJsonEncoder(now_ms=lambda: 1)
    dec = cj.CanalJsonDecoder({table.collection: table})
    days = [datetime.date(2024, 1, 1) + datetime.timedelta(days=i % 3) for i in range(10)]
    msgs = enc.encode_many([RowChange(table, "insert", 1 << 18, {"id": i, "d": d}) for i, d in enumerate(days)])
    assert [e.row["d"] for e in dec.decode_many(msgs)] == days
    bad = msgs[0].replace(b'"2024-01-01"', b'"2024-13-01"')
    with pytest.raises(MalformedMessage, match="data\\[0\\].d"):
        dec.decode(bad)
    with pytest.raises(MalformedMessage):
        dec.decode(bad)  # not remembered
    from cdcflow.connectors.ticdc import tidb

    memo = {}
    for i in range(tidb.DATE_MEMO_SIZE + 10):
        tidb.remember(memo, str(i), i)
    assert len(memo) == tidb.DATE_MEMO_SIZE


# --------------------------------------------------------------------------- inline text forms

def _inline(expr_of, name_space_extra=None):
    from cdcflow.connectors.ticdc import tidb

    ns = dict(tidb.INLINE_NAMES, **(name_space_extra or {}))
    exec(f"def f(v):\n    return {expr_of}\n", ns)
    return ns["f"]


def _outcome(fn, v):
    try:
        return fn(v)
    except Exception as e:  # the same error type as the formatter/parser itself
        return type(e)


_DECIMALS = st.one_of(st.decimals(allow_nan=True, allow_infinity=True, places=None),
                      st.tuples(st.integers(-10**7, 10**7), st.integers(-12, 12)).map(
                          lambda t: __import__("decimal").Decimal(t[0]).scaleb(t[1])),
                      st.decimals(allow_nan=False, allow_infinity=False, places=3),
                      st.sampled_from(["0", "-0", "0E-3", "1E+2", "5.95", "-1.50", "1E-7", "sNaN"]).map(
                          lambda s: __import__("decimal").Decimal(s)))
_DATETIMES = st.one_of(st.datetimes(), st.datetimes(timezones=st.just(__import__("datetime").timezone.utc)))
_WRONG = st.one_of(st.integers(), st.text(max_size=4), st.none(), st.floats(), st.dates())


@settings(max_examples=300, deadline=None)
@given(scale=st.one_of(st.none(), st.integers(0, 6)), fsp=st.one_of(st.none(), st.integers(0, 6)),
       value=st.one_of(_DECIMALS, _DATETIMES, st.dates(), st.floats(), _WRONG))
def test_inline_text_expr_equals_formatter(scale, fsp, value):
    from cdcflow.connectors.ticdc import tidb
    from cdcflow.connectors.ticdc.tidb import Column

    cases = [(Column("c", "DECIMAL", scale=scale), lambda v: tidb.format_decimal(v, scale)),
             (Column("c", "DATETIME", fsp=fsp), lambda v: tidb.format_datetime(v, fsp)),
             (Column("c", "TIMESTAMP", fsp=fsp), lambda v: tidb.format_datetime(v, fsp)),
             (Column("c", "DATE"), tidb.format_date),
             (Column("c", "DOUBLE"), tidb.format_float)]
    for col, formatter in cases:
        expr = tidb.inline_text_expr(col, "v", "slow(v)")
        if expr is None:
            continue
        inline = _inline(expr, {"slow": formatter})
        assert _outcome(inline, value) == _outcome(formatter, value), (col.type, value)


_DT_CHARS = st.sampled_from(list("0123456789-: .TZ+,W"))


@settings(max_examples=500, deadline=None)
@given(text=st.one_of(
    st.dates().map(str), st.datetimes().map(str), st.datetimes().map(lambda d: d.isoformat()),
    st.datetimes().map(lambda d: str(d)[:-3] if d.microsecond else str(d) + ".5"),
    st.datetimes().map(lambda d: str(d) + "+01:00"), st.datetimes().map(lambda d: str(d) + "Z"),
    st.text(_DT_CHARS, min_size=8, max_size=27), st.integers(), st.none(),
    st.tuples(st.datetimes().map(str), st.integers(0, 25), _DT_CHARS).map(  # one character changed
        lambda t: t[0][:t[1]] + t[2] + t[0][t[1] + 1:]),
    st.tuples(st.integers(1, 9999), st.integers(1, 52), st.integers(1, 7), st.times().map(str)).map(
        lambda t: f"{t[0]:04d}-W{t[1]:02d}-{t[2]} {t[3]}")))
def test_inline_parse_expr_equals_parser(text):
    from cdcflow.connectors.ticdc import tidb

    def parse_or_raise(parser):
        def run(v):
            if type(v) is not str:
                raise ValueError("not a str")
            return parser(v)
        return run

    for type_name, parser in (("DATE", tidb.parse_date), ("DATETIME", tidb.parse_datetime)):
        bad = "bad()"
        plain = _inline(tidb.inline_parse_expr(type_name, "v", bad), {"bad": _raise_value_error})
        want = _outcome(parse_or_raise(parser), text)
        assert _outcome(plain, text) == want, (type_name, text)
        if type_name == "DATE":
            memo: dict = {}
            memoised = _inline(tidb.inline_parse_expr("DATE", "v", bad, memo="m"),
                               {"bad": _raise_value_error, "m": memo})
            assert _outcome(memoised, text) == want
            assert _outcome(memoised, text) == want  # second time from the memo, if it parsed
            assert all(type(k) is str for k in memo) and len(memo) <= 1


def _raise_value_error():
    raise ValueError("does not fit")
