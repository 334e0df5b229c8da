"""The JSON form's optional restoring reader (``convert/jsontypes``, generated per schema) and reading details.

Reader: a value the strict Avro check (``Codec.prepare``) accepts, written as the JSON form
writes it (plain JSON), comes back type-strict with its schema; JSON that does not fit the
schema is refused (the record then keeps its plain JSON values). Plus: big integers read
exactly, line boundaries.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cdcflow.convert import jsontypes
from cdcflow.convert.avro import Codec, codec_for, derive_shared_schema
from cdcflow.convert.jsonform import _may_hold_big_ints, dumps_lines, jsonable, loads_lines, loads_record
from cdcflow.errors import ConversionError
from cdcflow.record import (
    META_COLLECTION,
    META_PAYLOAD_SCHEMA_SUBJECT,
    META_PAYLOAD_SCHEMA_VERSION,
    Operation,
    Record,
    _data_eq,
)
from cdcflow.schemas import SchemaStore

TIME_MIN = dt.timedelta(hours=-838, minutes=-59, seconds=-59)
ints = st.one_of(st.integers(-(1 << 63), (1 << 64) - 1), st.integers(-(10 ** 30), 10 ** 30),
                 st.sampled_from([0, -(1 << 63), (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 64]))
decimals = st.one_of(
    st.decimals(places=2, allow_nan=False, allow_infinity=False),
    st.decimals(places=7, min_value=-(10 ** 12), max_value=10 ** 12, allow_nan=False, allow_infinity=False),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.sampled_from([Decimal("-0.00"), Decimal("0.12"), Decimal("1E+2"), Decimal("0.0000001"), Decimal("-1.50")]),
)
SCALARS = [st.none(), st.booleans(), ints, st.floats(), st.text(max_size=12), st.binary(max_size=20), decimals,
           st.dates(), st.datetimes(), st.timedeltas(min_value=TIME_MIN, max_value=-TIME_MIN)]
scalar = st.one_of(SCALARS)


def _row(depth: int = 2) -> st.SearchStrategy:
    values = [scalar, *[st.lists(st.one_of(st.none(), s), max_size=3) for s in SCALARS[1:]]]
    if depth:
        inner = _row(depth - 1)
        values += [inner, inner.flatmap(lambda d: st.lists(st.just(d), max_size=2))]
    return st.dictionaries(st.text(max_size=6), st.one_of(values), max_size=5)


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _ambiguous(codec: Codec) -> bool:
    """Does the schema hold a union whose branches plain JSON cannot tell apart?"""
    seen, todo = set(), [codec.root]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.kind == "union":
            if jsontypes._ambiguous(node.branches):
                return True
            todo.extend(node.branches)
        todo.extend(f for _, _, f in getattr(node, "fields", ()))
        todo.extend(n for n in (getattr(node, "items", None), getattr(node, "values", None)) if n is not None)
    return False


def _fits(codec: Codec, value) -> bool:
    try:
        codec.prepare(value)
    except ConversionError:
        return False
    return True


def _read(codec: Codec, j):
    """The restored value, or the _Bad error's (message, path)."""
    try:
        return jsontypes._reader(codec)(j)
    except jsontypes._Bad as b:
        raise ConversionError(b.message, path="$" + "".join(reversed(b.path))) from None


@SETTINGS
@given(st.lists(_row(), min_size=1, max_size=2), _row())
def test_values_written_plain_come_back_with_their_schema(values, other):
    """Values against their own derived schema, and a different value against it (mostly refused)."""
    codec = codec_for(derive_shared_schema(values, "Payload"))
    assume(not _ambiguous(codec))
    for value in [*values, other]:
        written = orjson.dumps(jsonable(value))
        if _fits(codec, value):
            assert _data_eq(_read(codec, json.loads(written)), value)  # json: exact big ints


@pytest.mark.parametrize(
    "schema, value, path, text",
    [
        ({"type": "record", "name": "R", "fields": [{"name": "a", "type": ["null", "long"]}]}, {"a": "x"}, "$.a",
         "JSON str fits no branch of ['null', 'long']"),
        ({"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}, {"b": 1}, "$",
         "object keys ['b'] do not match the schema's ['a']"),
        ({"type": "record", "name": "R", "fields": [{"name": "a", "type": {"type": "array", "items": "double"}}]},
         {"a": [1.5, "x"]}, "$.a[1]", "expected a number, got str"),
        ({"type": "record", "name": "R", "fields": [{"name": "m", "type": {"type": "map", "values": "boolean"}}]},
         {"m": {"k": 1}}, "$.m.k", "expected a boolean, got int"),
        ({"type": "record", "name": "R", "fields": [
            {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}}]},
         {"d": "1.x"}, "$.d", "invalid decimal '1.x'"),
        ({"type": "record", "name": "R", "fields": [{"name": "t", "type": {"type": "long", "cdcflow.type": "time-micros"}}]},
         {"t": "25:61:00"}, "$.t", "invalid TIME '25:61:00'"),
        ({"type": "record", "name": "R", "fields": [{"name": "b", "type": "bytes"}]}, {"b": "***"}, "$.b",
         "invalid base64"),
    ],
)
def test_json_that_does_not_fit_is_refused_naming_the_path(schema, value, path, text):
    with pytest.raises(ConversionError) as info:
        _read(codec_for(schema), value)
    assert info.value.path == path and text in str(info.value)


def test_union_of_records_told_apart_by_keys_and_foreign_types_pass_through():
    a = {"type": "record", "name": "A", "fields": [{"name": "x", "type": "long"}]}
    b = {"type": "record", "name": "B", "fields": [{"name": "y", "type": {"type": "int", "logicalType": "date"}}]}
    ts = {"type": "long", "logicalType": "timestamp-millis"}  # fastavro's: the reader leaves its JSON as it is
    codec = codec_for({"type": "record", "name": "R", "fields": [
        {"name": "u", "type": {"type": "array", "items": [a, b]}}, {"name": "ts", "type": ts}]})
    value = {"u": [{"x": 1}, {"y": dt.date(2020, 1, 2)}], "ts": dt.datetime(2020, 1, 2, 3, 4, 5)}
    written = orjson.loads(orjson.dumps(jsonable(value)))
    assert written == {"u": [{"x": 1}, {"y": "2020-01-02"}], "ts": "2020-01-02T03:04:05Z"}
    assert _read(codec, written) == {"u": [{"x": 1}, {"y": dt.date(2020, 1, 2)}], "ts": "2020-01-02T03:04:05Z"}


# -- records ------------------------------------------------------------------------------
TABLE = {"type": "record", "name": "orders", "fields": [
    {"name": "id", "type": "long"},
    {"name": "price", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}]},
]}


@pytest.fixture()
def store():
    s = SchemaStore()
    yield s
    s.close()


def _rec(i: int, price: Decimal | None) -> Record:
    md = {META_COLLECTION: "shop.orders", META_PAYLOAD_SCHEMA_SUBJECT: "shop.orders.payload",
          META_PAYLOAD_SCHEMA_VERSION: "1", "n": str(i)}
    return Record(str(i).encode(), Operation.CREATE, md, None, None, {"id": i, "price": price})


def test_records_whose_values_do_not_fit_keep_their_plain_values_and_the_rest_are_restored(store):
    """A price a transform turned into other text does not fit the named schema: that record's
    values stay as JSON; the metadata comes back as written, with nothing added."""
    store.register("shop.orders.payload", json.dumps(TABLE))
    prices = [Decimal("9.90"), "free", None]
    records = [_rec(i, prices[i % len(prices)]) for i in range(6)]
    originals = [r.copy() for r in records]
    data = dumps_lines(records)
    assert records == originals  # inputs untouched
    back = loads_lines(data, store)
    assert [r.metadata for r in back] == [r.metadata for r in records]
    assert [r.after["price"] for r in back] == [Decimal("9.90"), "free", None] * 2
    assert store.versions("shop.orders.payload") == [1]  # reading registers nothing


def test_integers_past_64_bits_are_read_exactly():
    big = [(1 << 64), -(1 << 63) - 1, 10 ** 30, -(10 ** 25), (1 << 64) - 1, -(1 << 63)]
    r = Record(b"p", Operation.CREATE, {"readAt": "1732180000000000000000"}, None, None, {"v": big})
    data = dumps_lines([r])
    assert loads_lines(data)[0].after == {"v": big}
    assert type(loads_record(data.strip()).after["v"][0]) is int


EDGES = [(1 << 64) - 1, 1 << 64, -(1 << 63), -(1 << 63) - 1, 10 ** 19, -(10 ** 19), 10 ** 20]
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10 ** 40), 10 ** 40), st.sampled_from(EDGES),
              st.floats(allow_nan=False, allow_infinity=False),
              st.text(alphabet="0123456789-:, [\n\"\\x", max_size=30)),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(alphabet="0123456789-:, x", max_size=5), c, max_size=3),
    max_leaves=10,
)


@settings(max_examples=500, deadline=None)
@given(json_values, st.sampled_from([None, 0, 2]))
def test_big_integer_scan_misses_nothing_orjson_would_misread(value, indent):
    text = json.dumps(value, indent=indent).encode()
    exact = json.loads(text)
    if not _data_eq(orjson.loads(text), exact):
        assert _may_hold_big_ints(text)


def test_newlines_and_separators_inside_strings_keep_one_record_per_line(store):
    tricky = ",\n,\n,,\n"
    records = [Record(tricky.encode(), Operation.UPDATE, {tricky: tricky}, {"k": tricky}, {"v": [tricky, 1]},
                      {"v": [tricky, 2]}) for _ in range(3)]
    data = dumps_lines(records)
    assert data.count(b"\n") == 3 and data.endswith(b"\n")
    assert loads_lines(data, store) == records
    assert dumps_lines([]) == b""


@pytest.mark.parametrize("text, big", [
    (b'{"u":18446744073709551615,"i":-9223372036854775808}', False),  # orjson reads these exactly
    (b'{"u":18446744073709551616}', True), (b'{"i": -9223372036854775809}', True), (b'[100000000000000000000]', True),
    (b'{"readAt":"17321800000000000000000","n":"-99999999999999999999"}', False),  # digits inside strings
])
def test_big_integer_scan_reads_only_numbers_past_64_bits(text, big):
    assert _may_hold_big_ints(text) is big
