"""The compiled canal-json row writer (_canal_json.Plan) against the pure-Python encoder.

Every message must be byte-identical to the Python path's, and every row the kernel hands back
must come out of the Python path with the same bytes or the same typed error.
"""

from __future__ import annotations

import datetime
import decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.connectors.ticdc import canal_json as cj
from cdcflow.connectors.ticdc.errors import UnrepresentableValue, UnsupportedEvent
from cdcflow.connectors.ticdc.events import DDLEvent, ResolvedEvent, RowChange
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

from helpers.kernels import CANAL_JSON, both, outcome
from helpers.tidb_strategies import tables_and_rows, values
from helpers.leakcheck import traced_growth

pytestmark = CANAL_JSON.required()

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_700_000_000_123
OPTIONS = st.builds(cj.CanalJsonOptions, enable_tidb_extension=st.booleans(), content_compatible=st.booleans(),
                    only_output_updated_columns=st.booleans())


def encode_both(events, options, now=NOW):
    """(outcomes with the kernel, the same with pure Python): each of ``encode_many`` and, per
    event, ``encode``, by a fresh encoder (it caches each table's plan, kernel part included)."""
    def run():
        enc = cj.CanalJsonEncoder(options, now_ms=lambda: now)
        return outcome(lambda: enc.encode_many(events)), [outcome(lambda e=e: enc.encode(e)) for e in events]
    return both(CANAL_JSON, run)


def _events(table, rows, kinds):
    out = []
    for i, row in enumerate(rows):
        kind = kinds[i % len(kinds)]
        old = rows[i - 1] if kind == "update" else None
        out.append(RowChange(table, kind, (1_700_000_000_000 + i) << 18, row, old))
    return out


KINDS = st.lists(st.sampled_from(["insert", "update", "delete"]), min_size=1, max_size=4)


@SETTINGS
@given(data=tables_and_rows(min_rows=1, max_rows=5), kinds=KINDS, options=OPTIONS)
def test_valid_rows_equal_python(data, kinds, options):
    table, rows = data
    events = _events(table, rows, kinds)
    got, want = encode_both(events, options)
    assert got == want


# --------------------------------------------------------------------------- values the kernel hands back

class _Int(int):
    pass


class _Str(str):
    pass


_ODD = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(2**63, 2**70), st.just(_Int(3)), st.just(_Str("s")),
    st.text(st.characters(blacklist_categories=()), max_size=6),  # incl. lone surrogates
    st.sampled_from(["\u2028<&>\u2029", "\x00\x08\x0c\x1f\x7f", "\U0001f600", "a\ud800"]),
    st.binary(max_size=4), st.floats(), st.decimals(places=None), st.just(decimal.Decimal("1E+3")),
    st.just(decimal.Decimal("1.234567")), st.dates(), st.datetimes(),
    st.datetimes(timezones=st.just(datetime.timezone.utc)), st.timedeltas(), st.just([1]),
)


@st.composite
def tables_and_odd_rows(draw):
    """A table and rows where each value is, at random, valid for its column or anything at all."""
    table, _ = draw(tables_and_rows(min_rows=1, max_rows=1))
    rows = []
    for _ in range(draw(st.integers(1, 4))):
        row = {}
        for col in table.columns:
            row[col.name] = draw(st.one_of(values(col), _ODD) if draw(st.booleans()) else values(col))
        if draw(st.integers(0, 5)) == 0 and row:  # partial row / unknown column
            row.pop(next(iter(row)))
            if draw(st.booleans()):
                row["zz_unknown"] = 1
        rows.append(row)
    return table, rows


@SETTINGS
@given(data=tables_and_odd_rows(), kinds=KINDS, options=OPTIONS)
def test_odd_values_equal_python(data, kinds, options):
    table, rows = data
    events = _events(table, rows, kinds)
    got, want = encode_both(events, options)
    assert got == want


TABLE = TableSchema("shop", "orders<&>", (
    Column("id", "BIGINT", unsigned=True, primary_key=True, handle_key=True, nullable=False),
    Column("n", "INT", unsigned=True),
    Column("name\u2028", "VARCHAR", length=64),
    Column("price", "DECIMAL", precision=10, scale=2),
    Column("w", "DOUBLE"),
    Column("at", "DATETIME", fsp=3),
    Column("d", "DATE"),
    Column("t", "TIME", fsp=2),
    Column("st", "ENUM", elements=("new", "paid")),
    Column("tags", "SET", elements=("a", "b")),
    Column("raw", "VARBINARY", length=8, binary=True),
    Column("j", "JSON"),
    Column("p0", "DECIMAL"),
))


def _row(**over):
    row = {"id": 1, "n": 7, "name\u2028": "x<y>&z\u2028\u2029\b\f\x01\"\\", "price": decimal.Decimal("9.95"),
           "w": 1.5, "at": datetime.datetime(2024, 5, 1, 12, 0, 0, 123000), "d": datetime.date(2024, 5, 2),
           "t": datetime.timedelta(hours=-30, microseconds=-10000), "st": "paid", "tags": "a,b",
           "raw": b"\x00\xff<", "j": '{"a": [1, "\u00e9"]}', "p0": decimal.Decimal("12.5")}
    row.update(over)
    return row


HANDED_BACK = [
    _row(id=2**64 - 1),  # unsigned BIGINT above the signed max: sqlType promotion
    _row(n=2**31),  # unsigned INT promotion
    _row(n=2**31 - 1),
    _row(id=2**64),  # beyond BIGINT UNSIGNED: Python formats it
    _row(price=decimal.Decimal("9.9")),  # the formatter pads
    _row(price=decimal.Decimal("9.999")),  # too many digits: error
    _row(price=decimal.Decimal("1E+2")),
    _row(price=decimal.Decimal("NaN")),
    _row(w=1e300), _row(w=float("nan")), _row(w=1e-7), _row(w=3),
    _row(at=datetime.datetime(2024, 1, 1, 0, 0, 0, 1)),  # finer than fsp 3: error
    _row(at=datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)),
    _row(d=datetime.datetime(2024, 1, 1)),  # a datetime in a DATE column
    _row(t=datetime.timedelta(microseconds=1)),  # finer than fsp 2
    _row(st="nope"), _row(st=""), _row(tags="c"), _row(tags=""),
    _row(raw="text"), _row(j=b"bytes"), _row(**{"name\u2028": "\ud800"}), _row(**{"name\u2028": _Str("s")}),
    _row(id=True), _row(id=_Int(5)), _row(id="1"),
    {k: v for k, v in _row().items() if k != "j"},
    dict(_row(), extra_column=1),
]


@pytest.mark.parametrize("kind", ["insert", "update", "delete"])
@pytest.mark.parametrize("options", [cj.CanalJsonOptions(), cj.CanalJsonOptions(enable_tidb_extension=True,
                                                                                only_output_updated_columns=True)])
def test_handed_back_rows_equal_python(kind, options):
    good = _row()
    for row in HANDED_BACK:
        events = [RowChange(TABLE, kind, 5 << 18, good, good if kind == "update" else None),
                  RowChange(TABLE, kind, 6 << 18, row, good if kind == "update" else None),
                  RowChange(TABLE, kind, 7 << 18, good, row if kind == "update" else None)]
        got, want = encode_both(events, options)
        assert got == want, row


def test_event_shapes_the_kernel_leaves_to_python():
    good = _row()
    other = TableSchema("shop", "other", (Column("a", "INT"),))
    events = [
        RowChange(TABLE, "insert", 1 << 18, good, extra={"ticdc.only-handle-key": "true"}),
        RowChange(TABLE, "insert", -5, good),  # negative commit ts
        RowChange(TABLE, "insert", 2**70, good),  # commit ts beyond 64 bits
        RowChange(TABLE, "insert", "7", good),
        RowChange(TABLE, "upsert", 1 << 18, good),
        RowChange(TABLE, _Str("insert"), 1 << 18, good),
        RowChange(TABLE, "update", 1 << 18, good, {"id": 1}),  # partial old image
        RowChange(TABLE, "update", 1 << 18, good, [1]),
        RowChange(TABLE, "delete", 1 << 18, {"id": 1}),  # handle key only
        RowChange(TABLE, "insert", 1 << 18, None),
        RowChange(other, "insert", 1 << 18, {"a": 1}),
        DDLEvent("shop", "orders", "ALTER TABLE orders ADD c INT", 9 << 18, 5),
        ResolvedEvent(10 << 18),
        RowChange(TABLE, "insert", 11 << 18, good),
    ]
    for options in (cj.CanalJsonOptions(), cj.CanalJsonOptions(enable_tidb_extension=True)):
        for i in range(len(events)):
            got, want = encode_both(events[i:] + events[:i], options)
            assert got == want
    # a clock that does not give an int leaves every row to Python
    got, want = encode_both([RowChange(TABLE, "insert", 1 << 18, good)], cj.CanalJsonOptions(), now=1.5)
    assert got == want


def test_errors_carry_the_column():
    enc = cj.CanalJsonEncoder(now_ms=lambda: NOW)
    assert enc._plan(TABLE).kernel is not None
    bad = RowChange(TABLE, "insert", 1 << 18, _row(price=decimal.Decimal("1.001")))
    with pytest.raises(UnrepresentableValue, match="price"):
        enc.encode_many([RowChange(TABLE, "insert", 1 << 18, _row()), bad])
    with pytest.raises(UnsupportedEvent):
        enc.encode_many([RowChange(TABLE, "upsert", 1 << 18, _row())])


def test_kernel_is_used_and_can_be_switched_off():
    assert cj.CanalJsonEncoder()._plan(TABLE).kernel is not None
    with CANAL_JSON.off():
        assert cj.CanalJsonEncoder()._plan(TABLE).kernel is None


def test_unencodable_column_name_fails_the_same():
    table = TableSchema("s", "t", (Column("a\ud800", "INT"),))
    got, want = encode_both([RowChange(table, "insert", 1 << 18, {"a\ud800": 1})], cj.CanalJsonOptions())
    assert got == want


def test_generator_input_and_many_tables():
    t2 = TableSchema("s", "t2", (Column("a", "INT"), Column("b", "VARCHAR")))
    events = [RowChange(TABLE if i % 3 else t2, "insert", i << 18, _row() if i % 3 else {"a": i, "b": "é" * i})
              for i in range(30)]
    enc = cj.CanalJsonEncoder(now_ms=lambda: NOW)
    from_gen = enc.encode_many(e for e in events)
    got, want = encode_both(events, cj.CanalJsonOptions())
    assert got == want
    assert got[1][0] == ("ok", from_gen)


# --------------------------------------------------------------------------- leaks

def _traced_growth(fn, rounds: int) -> int:
    return traced_growth(fn, rounds, warmup=20)


def test_no_leak_on_messages_handbacks_and_errors():
    enc = cj.CanalJsonEncoder(cj.CanalJsonOptions(enable_tidb_extension=True, only_output_updated_columns=True),
                              now_ms=lambda: NOW)
    good = _row()
    batch = [RowChange(TABLE, ("insert", "update", "delete")[i % 3], i << 18, _row(id=i, n=i % 100),
                       good if i % 3 == 1 else None) for i in range(60)]
    batch += [RowChange(TABLE, "insert", 1 << 18, row) for row in HANDED_BACK[:4]]
    bad = [RowChange(TABLE, "insert", 1 << 18, good), RowChange(TABLE, "insert", 1 << 18, _row(st="nope"))]

    def once():
        enc.encode_many(batch)
        for ev in batch[:5]:
            enc.encode(ev)
        try:
            enc.encode_many(bad)
        except UnrepresentableValue:
            pass
        enc._plan(TABLE).kernel.message(batch[0], 3.5)
    grown = _traced_growth(once, 300)
    assert grown < 16_384, grown
