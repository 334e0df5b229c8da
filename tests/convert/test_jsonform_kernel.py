"""The compiled JSON-form writer (runtime/convert/_jsonform.c) against the Python path.

Every test compares ``dumps_lines`` / ``dumps_record`` with the kernel on and off: same bytes
(Go's order, escaping and number texts), same typed errors. Records the kernel is not sure of
go back to Python; the tests count those hand-backs to show the fast path really ran (or
really did not).
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

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
pytestmark = pytest.mark.skipikernel = jsonform._kernel
pytestmark = pytest.mark.skipif(kernel is None, reason="JSON-form kernel not built or CDCFLOW_PURE_PYTHON=1")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def python_lines(records) -> bytes:
    saved, jsonform._kernel = jsonform._kernel, None
    try:
        return jsonform.dumps_lines(records)
    finally:
        jsonform._kernel = saved


def python_error(records) -> Exception:
    saved, jsonform._kernel = jsonform._kernel, None
    try:
        jsonform.dumps_lines(records)
    except Exception as e:  # noqa: BLE001 - the test compares it
        return e
    finally:
        jsonform._kernel = saved
    raise AssertionError("the Python path wrote the records")


def kernel_lines(records) -> tuple[bytes, int]:
    """The kernel's output and how many records it handed back to Python."""
    handed = []
    out = kernel.dumps(list(records), jsonform._KERNEL_CONFIG, lambda r: handed.append(r) or jsonform._handback(r))
    assert out is not None
    return out, len(handed)


def _outcome(fn):
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - compared: the same typed error on both paths
        return None, (type(e), str(e))


def same_as_python(records) -> int:
    """Assert the kernel writes what Python writes (or raises the same typed error); return the
    hand-back count."""
    expected = _outcome(lambda: python_lines(records))
    got = _outcome(lambda: kernel_lines(records))
    assert (got[0][0] if got[0] else None, got[1]) == expected
    return got[0][1] if got[0] else -1


# ---------------------------------------------------------------------------- values
_floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, 1e16, 1e15, 9.999999999999999e15, 1e-5, 1.5e-5, 1e-6, 1e-7, 5e-324, 1.7976931348623157e308,
     0.1, 123456789012345678.0, math.nan, math.inf, -math.inf])
_ints = st.integers() | st.sampled_from([(1 << 63) - 1, -(1 << 63), 1 << 63, (1 << 64) - 1, 1 << 64, -(1 << 63) - 1,
                                         10 ** 40, -(10 ** 40)])
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40) | st.sampled_from(
    ["\u2028\u2029", "\x00\x01\x1f\x7f", "\"\\/", "\U0001F600\U00010000", "a\tb\nc\rd\be\ff", "é" * 9,
     "<a href='x'>&amp;</a>", "\\b\\f\\\\", "\u2027\u202a\u00e2\u0080"])
_decimals = st.decimals(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [Decimal("0E-30"), Decimal("-0E-30"), Decimal("1E-30"), Decimal("-0.00"), Decimal("1E+5"), Decimal("1.50"),
     Decimal("0.0000001"), Decimal("sNaN"), Decimal("-Infinity"), Decimal("9" * 35 + "." + "9" * 30)])
_datetimes = st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59, 59, 999999)) | st.sampled_from(
    [dt.datetime(2020, 1, 1, 0, 0, 0, 100000), dt.datetime(2020, 1, 1, 0, 0, 0, 1), dt.datetime(5, 6, 7, 8, 9, 10, 120)])
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


# ---------------------------------------------------------------------------- differential
@SETTINGS
@given(st.lists(records(), max_size=6))
def test_same_bytes_as_python(recs):
    same_as_python(recs)


@SETTINGS
@given(records())
def test_dumps_record_same_as_python(r):
    expected = python_lines([r])[:-1]
    assert jsonform.dumps_record(r) == expected


_common = (st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 64) - 1) | _text | st.binary(max_size=20)
           | st.floats(min_value=1e-4, max_value=1e15) | st.dates()
           | st.datetimes(min_value=dt.datetime(1, 1, 1)) | _times)


@SETTINGS
@given(st.lists(records(st.none() | st.binary(max_size=20) | st.dictionaries(_text, _common, max_size=5)), max_size=6))
def test_common_values_need_no_hand_back(recs):
    assert same_as_python(recs) == 0


@SETTINGS
@given(tidb_st.tables_and_rows(min_rows=1, max_rows=4))
def test_tidb_rows_same_as_python(table_rows):
    table, rows = table_rows
    store = SchemaStore()
    try:
        recs = [to_record(RowChange(table, INSERT, 400 + k, row), b"p%d" % k, store) for k, row in enumerate(rows)]
        recs += [to_record(RowChange(table, UPDATE, 500, rows[-1], old=rows[0]), b"u", store)]
        same_as_python(recs)
    finally:
        store.close()


def test_generator_records_of_every_type_need_no_hand_back():
    from cdcflow.connectors.generator import SOURCE_PARAMS, GeneratorSource
    from cdcflow.params import validate

    src = GeneratorSource()
    src.configure(validate("generator", SOURCE_PARAMS, {
        "format.type": "tidb", "recordCount": "300", "operations": "create,update,delete,snapshot"}))
    src.open(None, "0")
    recs = src.read(300)
    assert same_as_python(recs) == 0


def test_a_shared_metadata_dict_and_shared_entries_are_written_sorted_each_time():
    """The kernel copies what it wrote for the previous record's metadata: the copy must be right."""
    shared = {"z": "1", "a": "<2>", "m": "3"}
    recs = [Record(b"%d" % i, Operation.CREATE, shared if i % 2 else dict(shared, ts=str(i)), None, None, None)
            for i in range(6)]
    recs.append(Record(b"x", Operation.CREATE, {"a": "<2>", "b": "new", "z": "1"}, None, None, None))
    assert same_as_python(recs) == 0
    assert b'"metadata":{"a":"\\u003c2\\u003e","m":"3","z":"1"}' in kernel_lines(recs)[0]


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
        dict(base, metadata={1: "v"}),
        dict(base, key=bytearray(b"k")),
        dict(base, key="text"),
        dict(base, position=bytearray(b"p")),
        dict(base, after={"s": "\udfff"}),
        dict(base, after={"i": _Int(3)}),
        dict(base, after={"o": object()}),
        dict(base, after={1: "non-str key"}),
        dict(base, after={"tz": dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)}),  # Python writes the offset
        dict(base, after={"f": 1e16}),  # repr has an exponent, Go writes none
        dict(base, after={"f": 2.5e-5}),
        dict(base, after={"deep": _nest(80)}),
    ]


def _nest(n):
    v: object = 1
    for _ in range(n):
        v = [v]
    return v


@pytest.mark.parametrize("fields", _handback_cases())
def test_unusual_records_go_back_to_python_with_the_same_result(fields):
    r = Record(**fields)
    recs = [Record(b"ok", Operation.CREATE, {"m": "v"}, b"k", None, b"raw"), r,
            Record(b"ok2", Operation.DELETE, {"m": "v"}, b"k", b"raw", None)]
    try:
        expected = python_lines(recs)
    except Exception:  # noqa: BLE001 - Python raises: so must the kernel path, the same error
        err = python_error(recs)
        with pytest.raises(type(err)) as got:
            jsonform.dumps_lines(recs)
        assert str(got.value) == str(err)
        return
    got, handed = kernel_lines(recs)
    assert got == expected
    assert handed == 1


def test_record_subclass_and_unknown_operation_are_handed_back():
    class MyRecord(Record):
        __slots__ = ()

    recs = [MyRecord(b"a", Operation.CREATE, {}, b"k", None, b"v"), Record(b"b", Operation.CREATE, {}, b"k", None, b"v")]
    assert same_as_python(recs) == 1
    odd = Record(b"c", "create", {}, None, None, None)
    assert str(python_error([odd])) == str(pytest.raises(Exception, jsonform.dumps_lines, [odd]).value)


def test_values_that_have_no_json_form_raise_the_same_typed_error():
    r = Record(b"p", Operation.CREATE, {}, None, None, {"v": object()})
    err = python_error([r])
    assert isinstance(err, ConversionError)
    with pytest.raises(ConversionError) as got:
        jsonform.dumps_lines([r])
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
def test_floats_exactly_as_python_writes_them(values):
    same_as_python([Record(b"", Operation.CREATE, {}, None, None, {"f": values})])


def test_decimal_65_30_and_edge_decimals():
    values = [Decimal("0E-30"), Decimal("1E-30"), Decimal("-1E-30"), Decimal("0.000000000000000000000000000001"),
              Decimal("9" * 35 + "." + "9" * 30), Decimal("-" + "9" * 35 + "." + "9" * 30), Decimal("0.5" + "0" * 29)]
    recs = [Record(b"", Operation.CREATE, {}, {"id": i}, None, {"d": v}) for i, v in enumerate(values)]
    assert same_as_python(recs) == 0


# ---------------------------------------------------------------------------- memory
def test_no_leak_over_many_batches():
    rows = [{"id": i, "s": "é\n<>" * 5, "d": Decimal("1.25"), "t": dt.timedelta(hours=-5), "b": b"xy", "f": 0.1,
             "big": 1 << 70, "l": [1, "a"], "dt": dt.datetime(2020, 1, 1, 1, 1, 1, 5)} for i in range(40)]
    recs = [Record(b"%d" % i, Operation.UPDATE, {"opencdc.collection": "db.leak", "k": str(i)}, {"id": i}, row, row)
            for i, row in enumerate(rows)]
    recs.append(Record(b"odd", Operation.CREATE, {"m": 1}, None, None, {"s": "\ud800x"}))  # handed back, raises
    good = recs[:-1]

    def run():
        jsonform.dumps_lines(good)
        try:
            jsonform.dumps_lines(recs)
        except Exception:  # noqa: BLE001 - the error path must not leak either
            pass

    assert traced_growth(run, rounds=300, warmup=3) < 64 * 1024


# ---------------------------------------------------------------------------- API
def test_dumps_each_is_dumps_record_per_record():
    recs = [Record(b"%d" % i, Operation.CREATE, {"c": "a\nb"}, {"id": i}, None, {"s": "x\ny", "n": i})
            for i in range(5)]
    each = jsonform.dumps_each(recs)
    assert each == [jsonform.dumps_record(r) for r in recs]
    assert jsonform.dumps_each([]) == []


def test_config_and_arguments_are_checked():
    with pytest.raises(TypeError):
        kernel.Config(("not", "a", "config"))
    with pytest.raises(TypeError):
        kernel.dumps([], ("a", "tuple"), None)
    with pytest.raises(TypeError):
        kernel.dumps(iter([]), jsonform._KERNEL_CONFIG, None)
