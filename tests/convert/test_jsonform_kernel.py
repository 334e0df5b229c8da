"""The compiled JSON-form writer (runtime/convert/_jsonform.c) against the Python path.

Every test compares ``dumps_lines`` / ``dumps_record`` with the kernel on and off
(``monkeypatch.setattr(jsonform, "_kernel", None)``): same bytes, same typed errors, and the
reader gets the same records back. Records the kernel is not sure of go back to Python; the
tests count those hand-backs to show the fast path really ran (or really did not).
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.connectors.ticdc.events import INSERT, UPDATE, RowChange, to_record
from cdcflow.convert import jsonform
from cdcflow.errors import ConversionError
from cdcflow.record import Operation, Record
from cdcflow.schemas import SchemaStore

from helpers import tidb_strategies as tidb_st  # every TiDB type and its edge values
from helpers.leakcheck import traced_growth

kernel = jsonform._kernel
pytestmark = pytest.mark.skipif(kernel is None, reason="JSON-form kernel not built or CDCFLOW_PURE_PYTHON=1")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture()
def store():
    s = SchemaStore()
    yield s
    s.close()


def python_lines(records, store=None) -> bytes:
    saved, jsonform._kernel = jsonform._kernel, None
    try:
        return jsonform.dumps_lines(records, store)
    finally:
        jsonform._kernel = saved


def python_error(records, store=None) -> Exception:
    saved, jsonform._kernel = jsonform._kernel, None
    try:
        jsonform.dumps_lines(records, store)
    except Exception as e:  # noqa: BLE001 - the test compares it
        return e
    finally:
        jsonform._kernel = saved
    raise AssertionError("the Python path wrote the records")


def kernel_lines(records, store=None) -> tuple[bytes, int]:
    """The kernel's output and how many records it handed back to Python."""
    handed = []
    if store is None:
        out = kernel.dumps(list(records), jsonform._KERNEL_CONFIG, None,
                           lambda r: handed.append(r) or jsonform._plain_line(r))
    else:
        w = jsonform._Writer(jsonform.refs_for(store))
        out = kernel.dumps(list(records), jsonform._KERNEL_CONFIG, w.resolve, lambda r: handed.append(r) or w.line(r))
    assert out is not None
    return out, len(handed)


def _outcome(fn):
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - compared: the same typed error on both paths
        return None, (type(e), str(e))


def same_as_python(records, store=None, fresh_store_each=False) -> int:
    """Assert the kernel writes what Python writes (or raises the same typed error); return the
    hand-back count."""
    if fresh_store_each:  # derived schemas: both sides must start from the same store state
        a, b = SchemaStore(), SchemaStore()
        try:
            expected = _outcome(lambda: python_lines(records, a))
            got = _outcome(lambda: kernel_lines(records, b))
        finally:
            a.close()
            b.close()
    else:
        expected = _outcome(lambda: python_lines(records, store))
        got = _outcome(lambda: kernel_lines(records, store))
    assert (got[0][0] if got[0] else None, got[1]) == expected
    return got[0][1] if got[0] else -1


# ---------------------------------------------------------------------------- values
_floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, 1e16, 1e15, 9.999999999999999e15, 1e-5, 1.5e-5, 1e-6, 1e-7, 5e-324, 1.7976931348623157e308,
     0.1, 123456789012345678.0, math.nan, math.inf, -math.inf])
_ints = st.integers() | st.sampled_from([(1 << 63) - 1, -(1 << 63), 1 << 63, (1 << 64) - 1, 1 << 64, -(1 << 63) - 1,
                                         10 ** 40, -(10 ** 40)])
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40) | st.sampled_from(
    ["\u2028\u2029", "\x00\x01\x1f\x7f", "\"\\/", "\U0001F600\U00010000", "a\tb\nc\rd\be\ff", "é" * 9])
_decimals = st.decimals(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [Decimal("0E-30"), Decimal("-0E-30"), Decimal("1E-30"), Decimal("-0.00"), Decimal("1E+5"), Decimal("1.50"),
     Decimal("0.0000001"), Decimal("sNaN"), Decimal("-Infinity"), Decimal("9" * 35 + "." + "9" * 30)])
_datetimes = st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59, 59, 999999))
_times = st.timedeltas(min_value=dt.timedelta(hours=-838, minutes=-59, seconds=-59),
                       max_value=dt.timedelta(hours=838, minutes=59, seconds=59)) | st.sampled_from(
    [dt.timedelta.max, dt.timedelta.min, dt.timedelta(microseconds=-1), dt.timedelta(days=-1)])
_scalars = (st.none() | st.booleans() | _ints | _floats | _text | st.binary(max_size=40) | _decimals
            | st.dates() | _datetimes | _times)
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(_text, inner, max_size=3), max_leaves=8)
_metadata = st.dictionaries(_text, _text, max_size=4)
_data = st.none() | st.binary(max_size=64) | st.dictionaries(_text, _values, max_size=5)
_operations = st.sampled_from(list(Operation))


@st.composite
def records(draw, data=_data):
    return Record(draw(st.binary(max_size=12)), draw(_operations), draw(_metadata), draw(data), draw(data), draw(data))


# ---------------------------------------------------------------------------- differential: no store
@SETTINGS
@given(st.lists(records(), max_size=6))
def test_without_store_same_bytes_as_python(recs):
    assert same_as_python(recs) == 0  # every value here is one the kernel writes itself


@SETTINGS
@given(records())
def test_dumps_record_same_as_python(r):
    expected = python_lines([r])[:-1]
    assert jsonform.dumps_record(r) == expected


# ---------------------------------------------------------------------------- differential: derived schemas
_row_values = st.none() | st.booleans() | _ints | _floats | _text | st.binary(max_size=20) | _decimals | st.dates() \
    | _datetimes | _times | st.lists(_ints | _text, max_size=3) \
    | st.lists(_text | st.binary(max_size=4) | st.dates() | _decimals | st.none(), max_size=4)  # Avro JSON unions


@SETTINGS
@given(st.lists(st.tuples(st.dictionaries(st.sampled_from("abcd"), _row_values, min_size=1, max_size=4),
                          st.sampled_from(["db.t1", "db.t2", None])), min_size=1, max_size=8))
def test_derived_schemas_same_as_python(rows):
    recs = []
    for i, (row, collection) in enumerate(rows):
        meta = {"opencdc.collection": collection} if collection else {}
        recs.append(Record(b"%d" % i, Operation.UPDATE, meta, {"id": i}, row, dict(row)))
    same_as_python(recs, fresh_store_each=True)


def test_derived_fast_path_runs_without_hand_backs(store):
    rows = [{"id": i, "name": f"n{i}", "score": i / 3, "ok": bool(i & 1), "d": Decimal(i).scaleb(-2)}
            for i in range(50)]
    recs = [Record(b"%d" % i, Operation.CREATE, {"opencdc.collection": "db.t"}, {"id": i}, None, row)
            for i, row in enumerate(rows)]
    jsonform.dumps_lines(recs[:1], store)  # derives and registers the schemas
    assert same_as_python(recs, store) == 0
    line = orjson.loads(jsonform.dumps_lines(recs[:1], store))
    assert line["metadata"]["cdcflow.schema.derived"] == "key,payload"
    assert jsonform.loads_lines(jsonform.dumps_lines(recs, store), store) == recs


def test_schema_change_mid_batch_hands_back_and_stays_identical():
    recs = [Record(b"%d" % i, Operation.CREATE, {}, {"id": i}, None,
                   {"v": i} if i % 3 else {"v": f"text {i}", "extra": b"x"}) for i in range(12)]
    same_as_python(recs, fresh_store_each=True)


# ---------------------------------------------------------------------------- differential: named TiDB schemas
@SETTINGS
@given(tidb_st.tables_and_rows(min_rows=1, max_rows=4))
def test_tidb_rows_named_schemas_same_as_python(table_rows):
    table, rows = table_rows
    a, b = SchemaStore(), SchemaStore()
    try:
        recs_a = [to_record(RowChange(table, INSERT, 400 + k, row), b"p%d" % k, a) for k, row in enumerate(rows)]
        recs_a += [to_record(RowChange(table, UPDATE, 500, rows[-1], old=rows[0]), b"u", a)]
        recs_b = [to_record(RowChange(table, INSERT, 400 + k, row), b"p%d" % k, b) for k, row in enumerate(rows)]
        recs_b += [to_record(RowChange(table, UPDATE, 500, rows[-1], old=rows[0]), b"u", b)]
        expected = python_lines(recs_a, a)
        got, _ = kernel_lines(recs_b, b)
        assert got == expected
        assert jsonform.loads_lines(got, b) == recs_b
    finally:
        a.close()
        b.close()


def test_generator_records_of_every_type_need_no_hand_back():
    from cdcflow.connectors.generator import SOURCE_PARAMS, GeneratorSource
    from cdcflow.params import validate
    from cdcflow.schemas import default_store

    src = GeneratorSource()
    src.configure(validate("generator", SOURCE_PARAMS, {
        "format.type": "tidb", "recordCount": "300", "operations": "create,update,delete,snapshot"}))
    src.open(None, "0")
    recs = src.read(300)
    assert same_as_python(recs, default_store()) == 0
    assert jsonform.loads_lines(jsonform.dumps_lines(recs, default_store()), default_store()) == recs


# ---------------------------------------------------------------------------- records handed back
class _Str(str):
    pass


class _Int(int):
    pass


def _handback_cases():
    base = dict(position=b"p", operation=Operation.CREATE, metadata={"m": "v"}, key=None, before=None, after=None)
    return [
        dict(base, metadata={"m": 1}),  # metadata value not a str
        dict(base, metadata={"m": _Str("v")}),
        dict(base, metadata={"m": "\ud800"}),  # lone surrogate
        dict(base, key=bytearray(b"k")),
        dict(base, key="text"),
        dict(base, position=bytearray(b"p")),
        dict(base, after={"s": "\udfff"}),
        dict(base, after={"i": _Int(3)}),
        dict(base, after={"o": object()}),
        dict(base, after={1: "non-str key"}),
        dict(base, after={"tz": dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)}),
        dict(base, after={"deep": _nest(80)}),
    ]


def _nest(n):
    v: object = 1
    for _ in range(n):
        v = [v]
    return v


@pytest.mark.parametrize("fields", _handback_cases())
@pytest.mark.parametrize("with_store", [False, True])
def test_unusual_records_go_back_to_python_with_the_same_result(fields, with_store, store):
    s = store if with_store else None
    r = Record(**fields)
    recs = [Record(b"ok", Operation.CREATE, {"m": "v"}, b"k", None, b"raw"), r,
            Record(b"ok2", Operation.DELETE, {"m": "v"}, b"k", b"raw", None)]
    try:
        expected = python_lines(recs, s)
    except Exception:  # noqa: BLE001 - Python raises: so must the kernel path, the same error
        err = python_error(recs, s)
        with pytest.raises(type(err)) as got:
            jsonform.dumps_lines(recs, s)
        assert str(got.value) == str(err)
        return
    got, handed = kernel_lines(recs, s)
    assert got == expected
    assert handed == 1


def test_record_subclass_and_unknown_operation_are_handed_back():
    class MyRecord(Record):
        __slots__ = ()

    recs = [MyRecord(b"a", Operation.CREATE, {}, b"k", None, b"v"), Record(b"b", Operation.CREATE, {}, b"k", None, b"v")]
    assert same_as_python(recs) == 1
    odd = Record(b"c", "create", {}, None, None, None)
    assert str(python_error([odd])) == str(pytest.raises(Exception, jsonform.dumps_lines, [odd]).value)


def test_schema_refusal_goes_to_python_which_derives_another(store):
    recs = [Record(b"%d" % i, Operation.CREATE, {}, {"id": i}, None, {"v": i}) for i in range(3)]
    jsonform.dumps_lines(recs, store)
    odd = recs + [Record(b"x", Operation.CREATE, {}, {"id": 9}, None, {"v": "now text"})] + recs
    a, b = SchemaStore(), SchemaStore()
    try:
        python_lines(recs, a)
        kernel_lines(recs, b)
        expected = python_lines(odd, a)
        got, handed = kernel_lines(odd, b)
        # the odd record derives a text schema, which becomes the first one tried: the next int row
        # goes back too (attach finds the int schema again); then the fast path resumes
        assert got == expected and handed == 2
    finally:
        a.close()
        b.close()


def test_unknown_named_schema_goes_to_python_which_derives_one():
    r = Record(b"p", Operation.CREATE, {"opencdc.payload.schema.subject": "nope", "opencdc.payload.schema.version": "1"},
               None, None, {"v": 1})
    assert same_as_python([r, r], fresh_store_each=True) == 2


def test_values_that_fit_no_schema_raise_the_same_typed_error(store):
    r = Record(b"p", Operation.CREATE, {}, None, None, {"v": object()})
    err = python_error([r], store)
    assert isinstance(err, ConversionError)
    with pytest.raises(ConversionError) as got:
        jsonform.dumps_lines([r], store)
    assert str(got.value) == str(err)


# ---------------------------------------------------------------------------- sizes, text forms
def test_big_and_empty_bytes_and_positions():
    recs = [Record(b"", Operation.SNAPSHOT, {}, b"", b"", bytes(range(256)) * 4096)]  # 1 MiB payload
    assert same_as_python(recs) == 0
    assert same_as_python([Record(bytes([n]) * n, Operation.CREATE, {}, bytes(n), None, None) for n in range(9)]) == 0


@SETTINGS
@given(st.binary(max_size=300))
def test_base64_matches_binascii(data):
    import binascii

    assert kernel.b64(data) == binascii.b2a_base64(data, newline=False).decode()


@SETTINGS
@given(st.lists(_floats, min_size=1, max_size=20))
def test_floats_exactly_as_orjson_writes_them(values):
    assert same_as_python([Record(b"", Operation.CREATE, {}, None, None, {"f": values})]) == 0


def test_decimal_65_30_and_edge_decimals(store):
    values = [Decimal("0E-30"), Decimal("1E-30"), Decimal("-1E-30"), Decimal("0.000000000000000000000000000001"),
              Decimal("9" * 35 + "." + "9" * 30), Decimal("-" + "9" * 35 + "." + "9" * 30), Decimal("0.5" + "0" * 29)]
    recs = [Record(b"", Operation.CREATE, {}, {"id": i}, None, {"d": v}) for i, v in enumerate(values)]
    same_as_python(recs, fresh_store_each=True)
    assert same_as_python(recs) == 0


# ---------------------------------------------------------------------------- memory
def test_no_leak_over_many_batches(store):
    rows = [{"id": i, "s": "é\n" * 5, "d": Decimal("1.25"), "t": dt.timedelta(hours=-5), "b": b"xy", "f": 0.1,
             "big": 1 << 70, "l": [1, "a"], "dt": dt.datetime(2020, 1, 1, 1, 1, 1, 5)} for i in range(40)]
    recs = [Record(b"%d" % i, Operation.UPDATE, {"opencdc.collection": "db.leak", "k": str(i)}, {"id": i}, row, row)
            for i, row in enumerate(rows)]
    recs.append(Record(b"odd", Operation.CREATE, {"m": 1}, None, None, {"s": "\ud800x"}))  # handed back, raises
    good = recs[:-1]
    jsonform.dumps_lines(good, store)

    def run():
        jsonform.dumps_lines(good, store)
        jsonform.dumps_lines(good)
        try:
            jsonform.dumps_lines(recs, store)
        except Exception:  # noqa: BLE001 - the error path must not leak either
            pass

    assert traced_growth(run, rounds=300, warmup=3) < 64 * 1024


# ---------------------------------------------------------------------------- API
def test_dumps_each_is_dumps_record_per_record(store):
    recs = [Record(b"%d" % i, Operation.CREATE, {"c": "a\nb"}, {"id": i}, None, {"s": "x\ny", "n": i})
            for i in range(5)]
    each = jsonform.dumps_each(recs, store)
    assert each == [jsonform.dumps_record(r, store) for r in recs]
    assert jsonform.dumps_each([], store) == []


def test_config_and_arguments_are_checked():
    with pytest.raises(TypeError):
        kernel.Config(("not", "a", "config"))
    with pytest.raises(TypeError):
        kernel.dumps([], ("a", "tuple"), None, None)
    with pytest.raises(TypeError):
        kernel.dumps(iter([]), jsonform._KERNEL_CONFIG, None, None)
    with pytest.raises(ValueError):
        kernel.Plan(((kernel.K_ARRAY, 5),), 0)  # child index out of range
