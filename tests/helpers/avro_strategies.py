"""Hypothesis strategies for native values that derived Avro schemas hold (shared by the Avro
decode and encode kernel tests): edge ints, decimals of every shape, unicode with multi-byte
runs, dates, datetimes, TIME-like timedeltas, and nested rows of them."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from hypothesis import strategies as st

TIME_LIMIT = dt.timedelta(days=999_999)
ints = st.one_of(st.integers(-(1 << 63), (1 << 64) - 1), st.integers(-(10 ** 60), 10 ** 60),
                 st.sampled_from([0, -1, 63, 64, -65, 8191, 8192, -128, -129, 127, 128, 255, 256, -(1 << 63),
                                  (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 64, -(1 << 64), -(1 << 63) - 1]))
decimals = st.one_of(
    st.decimals(places=30, min_value=-(10 ** 35) + 1, max_value=10 ** 35 - 1, allow_nan=False, allow_infinity=False),
    st.decimals(places=2, allow_nan=False, allow_infinity=False),
    st.decimals(),  # NaN, Infinity, -0, positive exponents: decimal text
    st.sampled_from([Decimal("-1.28"), Decimal("1.27"), Decimal("-0"), Decimal("0.000"), Decimal("1E+2"),
                     Decimal("-" + "9" * 65), Decimal("9" * 35 + "." + "9" * 30), Decimal("-0." + "0" * 29 + "1"),
                     Decimal("1E-7"), Decimal("-1.23E-9"), Decimal("0E-10"), Decimal("-128"), Decimal("-1.28E+2")]),
)
unicode_text = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),
    st.sampled_from(["", "\u2028\u2029", "\x00\x1f\x7f", "𝄞😀", "é"]),
    st.builds(lambda c, n: c * n, st.sampled_from(["x", "é", "€", "😀"]), st.integers(0, 9000)),  # multi-byte lengths
)
SCALARS = [
    st.none(), st.booleans(), ints, st.floats(), unicode_text, st.binary(max_size=300), decimals,
    st.dates(), st.datetimes(), st.timedeltas(min_value=-TIME_LIMIT, max_value=TIME_LIMIT),
]


def rows(depth: int = 2) -> st.SearchStrategy:
    values = [st.one_of(SCALARS), *[st.lists(st.one_of(st.none(), s), max_size=4) for s in SCALARS[1:]]]
    if depth:
        inner = rows(depth - 1)
        values += [inner, inner.flatmap(lambda d: st.lists(st.just(d), max_size=3))]
    return st.dictionaries(unicode_text, st.one_of(values), max_size=6)


# a hand-written schema with every kind a derived schema lacks (int, float, enum, fixed, map,
# a union of records and an array, recursion, a decimal, a renamed field) and values for it
HAND_SCHEMA = {
    "type": "record", "name": "Hand", "namespace": "t", "fields": [
        {"name": "i", "type": "int"},
        {"name": "f", "type": "float"},
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "m", "type": {"type": "map", "values": ["null", "long", "Color"]}},
        {"name": "ch", "type": ["null", {"type": "record", "name": "A", "fields": [{"name": "x", "type": "long"}]},
                               {"type": "record", "name": "B", "fields": [{"name": "y", "type": "string"}]},
                               {"type": "array", "items": "Four"}]},
        {"name": "next", "type": ["null", "Hand"]},  # recursive
        {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 1}},
        {"name": "orig_name", "cdcflow.name": "original name", "type": "boolean"},
    ]}


def hand_value(depth: int) -> st.SearchStrategy:
    nxt = st.none() if depth == 0 else st.one_of(st.none(), hand_value(depth - 1))
    return st.fixed_dictionaries({
        "i": st.integers(-(1 << 31), (1 << 31) - 1),
        "f": st.one_of(st.floats(width=32), st.just(float("nan"))),
        "e": st.sampled_from(["RED", "GREEN"]), "fx": st.binary(min_size=4, max_size=4),
        "m": st.dictionaries(unicode_text, st.one_of(st.none(), st.integers(-5, 5 ** 20), st.just("RED")), max_size=4),
        "ch": st.one_of(st.none(), st.builds(lambda x: {"x": x}, st.integers(-100, 100)),
                        st.builds(lambda y: {"y": y}, unicode_text), st.lists(st.binary(min_size=4, max_size=4))),
        "next": nxt,
        "d": st.sampled_from([Decimal("1234.5"), Decimal("-0.1"), Decimal("0.0"), Decimal("-9999.9")]),
        "original name": st.booleans(),
    })
