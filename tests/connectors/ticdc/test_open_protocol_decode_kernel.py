"""The compiled open-protocol decoder against the Python decoder it accelerates.

Every test decodes the same messages twice: once with the kernel off (the reference) and once
through ``OpenProtocolDecoder.decode`` with the kernel on, after the decoder has seen the table
(the kernel reads only signatures the Python path registered). Events are compared strictly:
types and reprs of every value (int vs float, Decimal exponent, -0.0, datetime vs date, str vs
bytes) and dict key order; errors by class and text. Where the kernel must decide (encoder
output) the tests also check it did not hand the message back.
"""

from __future__ import annotations

import struct

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.connectors.ticdc import open_protocol as op
from cdcflow.connectors.ticdc.events import DDLEvent, ResolvedEvent, RowChange
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

from helpers.kernels import OPEN_DECODE, outcome
from helpers.tidb_strategies import tables_and_rows
from helpers.leakcheck import traced_growth

pytestmark = OPEN_DECODE.required()

L = struct.Struct(">Q")
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def strict(v):
    """A value in a form where equal means identical: type and repr, dict order kept."""
    if type(v) is dict:
        return ("dict", [(k, strict(x)) for k, x in v.items()])
    return (type(v).__name__, repr(v))


def event_form(ev):
    if type(ev) is RowChange:
        return ("row", ev.table, ev.kind, strict(ev.commit_ts), strict(ev.row), strict(ev.old), ev.extra)
    return (type(ev).__name__, ev)


def decoded(decode, key, value):
    """``outcome`` of decoding one message, its events in ``event_form``."""
    return outcome(lambda: decode(key, value), lambda events: [event_form(e) for e in events])


def kernel_handles(dec: op.OpenProtocolDecoder, key, value) -> bool:
    """Whether the compiled decoder decides this message itself (no hand-back)."""
    return dec._kernel is not None and dec._kernel.decode(key, value) is not None


def differential(messages, warm=(), tables=None):
    """Outcomes per message, Python path vs kernel path, each decoder first fed ``warm``.
    Returns (python outcomes, kernel outcomes, how many messages the kernel decided)."""
    with OPEN_DECODE.off():
        py_dec = op.OpenProtocolDecoder(tables)
        for k, v in warm:
            decoded(py_dec.decode, k, v)
        expected = [decoded(py_dec.decode, k, v) for k, v in messages]
    k_dec = op.OpenProtocolDecoder(tables)
    for k, v in warm:
        decoded(k_dec.decode, k, v)
    handled = 0
    got = []
    for k, v in messages:
        handled += kernel_handles(k_dec, k, v)
        got.append(decoded(k_dec.decode, k, v))
    return expected, got, handled


def frames(buf: bytes, pos: int) -> list[bytes]:
    docs = []
    while pos + 8 <= len(buf):
        n = L.unpack_from(buf, pos)[0]
        docs.append(buf[pos + 8:pos + 8 + n])
        pos += 8 + n
    return docs


def framed_key(docs) -> bytes:
    return L.pack(1) + b"".join(L.pack(len(d)) + d for d in docs)


def framed_value(docs) -> bytes:
    return b"".join(L.pack(len(d)) + d for d in docs)


def events_of(table, rows):
    evs = []
    for i, row in enumerate(rows):
        kind = ("insert", "update", "delete")[i % 3]
        old = rows[i - 1] if kind == "update" else None
        evs.append(RowChange(table, kind, (1_700_000_000_000 + i) << 18, row, old))
    return evs


# --------------------------------------------------------------------------- encoder output, every TiDB type

@SETTINGS
@given(tables_and_rows(max_rows=5), st.booleans())
def test_encoder_output_of_every_type_decodes_identically_in_the_kernel(table_rows, with_table):
    table, rows = table_rows
    events = events_of(table, rows) + [DDLEvent(table.schema, table.table, "ALTER TABLE t ADD c INT", 7, 5),
                                       ResolvedEvent(123)]
    messages = op.OpenProtocolEncoder({"max-batch-size": 2}).encode(events)
    tables = {table.collection: table} if with_table else None
    expected, got, handled = differential(messages, warm=messages, tables=tables)
    assert got == expected
    assert all(o[0] == "ok" for o in expected)
    # every row and resolved message of real encoder output is the kernel's (DDL is Python's)
    assert handled == len(messages) - 1


@SETTINGS
@given(tables_and_rows(min_rows=2, max_rows=5), st.sampled_from(["only-updated", "handle-only", "no-old"]))
def test_partial_images_give_the_python_result(table_rows, mode):
    """Images with fewer columns than the table: only the updated columns in the old image
    (read column by column, in the message's order), handle-key-only deletes (a signature and
    plan of their own). The kernel decides them, with Python's result."""
    table, rows = table_rows
    options = {"only-updated": {"only-output-updated-columns": True},
               "handle-only": {"delete-only-output-handle-key-columns": True},
               "no-old": {"output-old-value": False}}[mode]
    messages = op.OpenProtocolEncoder({"max-batch-size": 3, **options}).encode(events_of(table, rows))
    expected, got, _ = differential(messages, warm=messages[:1])
    assert got == expected
    expected, got, handled = differential(messages, warm=messages)
    assert got == expected
    assert handled == len(messages)


def test_old_images_the_python_path_reads_in_plan_order_or_rejects_are_handed_back():
    key, value = row_message({"a": (3, 64, b"1"), "b": (3, 64, b"2"), "c": (3, 64, b"3")})
    vdoc = frames(value, 0)[0]
    image = vdoc[5:-1]  # {"a":...,"b":...,"c":...}
    cols = image[1:-1].split(b"},")
    a, b, c = cols[0] + b"}", cols[1] + b"}", cols[2]
    olds = {
        "every column, other order": b"{" + b",".join([b, a, c]) + b"}",
        "repeated column": b"{" + b",".join([b, b]) + b"}",
        "unknown column": b'{"z":{"t":3,"f":64,"v":1}}',
        "other flags": b"{" + b.replace(b'"f":64', b'"f":65') + b"}",
        "bad value": b"{" + b.replace(b'"v":2', b'"v":"x"') + b"}",
    }
    messages = [(key, framed_value([b'{"u":' + image + b',"p":' + old + b"}"])) for old in olds.values()]
    partial = [(key, framed_value([b'{"u":' + image + b',"p":' + old + b"}"]))
               for old in (b"{}", b"{" + c + b"}", b"{" + b",".join([c, a]) + b"}")]
    expected, got, handled = differential(messages + partial, warm=[(key, value)])
    assert got == expected
    assert handled == len(partial)
    assert got[-1][1][0][5] == strict({"c": 3, "a": 1})


# --------------------------------------------------------------------------- hand-mutated messages

_BYTES = [b" ", b"\n", b'"', b"\\", b"{", b"}", b",", b":", b"0", b"9", b"-", b".", b"e", b"\x00", b"\x1f",
          b"\xff", b"\xc3", b"\xed\xa0\x80", b"n", b"t", b"[", b"\\u0041", b"\\/", b'"x":1,', b"\xe2\x80\xa8"]


@st.composite
def mutated(draw):
    """(original message, mutated message): one edit in one JSON document (re-framed so the
    framing stays valid) or in the framing itself."""
    table, rows = draw(tables_and_rows(min_rows=1, max_rows=3))
    messages = op.OpenProtocolEncoder({"max-batch-size": 3}).encode(events_of(table, rows))
    key, value = messages[0]
    kdocs, vdocs = frames(key, 8), frames(value, 0)
    where = draw(st.sampled_from(["key", "value", "value", "value", "framing"]))
    if where == "framing":
        blob = key if draw(st.booleans()) else value
        cut = draw(st.integers(0, len(blob)))
        edit = draw(st.sampled_from(["truncate", "byte"]))
        if edit == "truncate":
            new = blob[:cut]
        else:
            new = blob[:cut] + draw(st.sampled_from(_BYTES)) + blob[cut + 1:]
        mutated_msg = (new, value) if blob is key else (key, new)
        return (key, value), mutated_msg
    docs = kdocs if where == "key" else vdocs
    i = draw(st.integers(0, len(docs) - 1))
    doc = docs[i]
    pos = draw(st.integers(0, len(doc)))
    edit = draw(st.sampled_from(["insert", "replace", "delete", "dup-column", "value"]))
    if edit == "insert":
        doc = doc[:pos] + draw(st.sampled_from(_BYTES)) + doc[pos:]
    elif edit == "replace":
        doc = doc[:pos] + draw(st.sampled_from(_BYTES)) + doc[pos + 1:]
    elif edit == "delete":
        doc = doc[:pos] + doc[pos + 1:]
    elif edit == "dup-column" and b'":{"t":' in doc:
        start = doc.index(b"{", 1) + 1  # first column entry
        end = doc.index(b"}", start) + 1
        doc = doc[:start] + doc[start:end] + b"," + doc[start:]
    else:  # a value replaced by an odd JSON value
        at = doc.find(b'"v":')
        if at >= 0:
            end = doc.index(b"}", at)
            odd = draw(st.sampled_from([b"-0", b"-0.0", b"1e400", b"1E5", b"18446744073709551616", b"true",
                                        b"[]", b'"1E+2"', b'" 1"', b'"NaN"', b'"YQ="', b'"YR=="', b'"\\ud800"',
                                        b'"\\u00e9"', b"0.5", b"-1", b'"0000-00-00"', b'"839:00:00"', b"1.0"]))
            doc = doc[:at + 4] + odd + doc[end:]
    docs = list(docs)
    docs[i] = doc
    mutated_msg = (framed_key(docs), value) if where == "key" else (key, framed_value(docs))
    return (key, value), mutated_msg


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_messages_give_the_python_result_or_error(pair):
    original, bad = pair
    expected, got, _ = differential([bad, original], warm=[original])
    assert got == expected


# --------------------------------------------------------------------------- value edges per kind

def row_message(cols: dict[str, tuple[int, int, bytes]], ts: bytes = b"1") -> tuple[bytes, bytes]:
    """A one-row insert message with raw JSON values: {name: (type code, flags, value bytes)}."""
    key = b'{"ts":' + ts + b',"scm":"s","tbl":"t","t":1}'
    parts = [orjson.dumps(n) + b':{"t":%d,"f":%d,"v":' % (t, f) + v + b"}" for n, (t, f, v) in cols.items()]
    return framed_key([key]), framed_value([b'{"u":{' + b",".join(parts) + b"}}"])


def typical(t, f):
    return {1: b"1", 2: b"1", 3: b"1", 8: b"1", 9: b"1", 13: b"2020", 16: b"1", 4: b"0.5", 5: b"0.5",
            246: b'"1.5"', 10: b'"2020-01-02"', 7: b'"2020-01-02 03:04:05"', 12: b'"2020-01-02 03:04:05"',
            11: b'"01:02:03"', 245: b'"{}"', 247: b"1", 248: b"1", 15: b'"ab"', 253: b'"ab"', 254: b'"ab"',
            249: b'"YQ=="', 250: b'"YQ=="', 251: b'"YQ=="', 252: b'"YQ=="', 6: b"null", 14: b'"2020-01-02"',
            225: b'"[1,2]"', 255: b'"POINT(1 2)"', 0: b'"x"'}[t]


EDGES = [
    # integers: bounds, one past, JSON forms orjson reads differently
    (1, 64, [b"-128", b"127", b"128", b"-129", b"-0", b"1.0", b"1e2", b"true", b'"1"']),
    (1, 0xC0, [b"0", b"255", b"256", b"-1", b"-0"]),
    (8, 64, [b"-9223372036854775808", b"9223372036854775807", b"9223372036854775808", b"-9223372036854775809",
             b"00", b"01"]),
    (8, 0xC0, [b"18446744073709551615", b"18446744073709551616", b"123456789012345678901234567890"]),
    (13, 64, [b"0", b"2155", b"2156", b"-1"]),
    (16, 0xC0, [b"18446744073709551615", b"18446744073709551616", b"0"]),
    # floats: zero signs, integers, overflow, float32 rounding and range
    (5, 64, [b"-0", b"-0.0", b"0", b"1e308", b"1e309", b"5e-324", b"1e-400", b"123456789012345678",
             b"12345678901234567890123", b"-9223372036854775809", b'"1.5"', b"0.1", b"1E+2"]),
    (4, 64, [b"0.1", b"3.4028234663852886e38", b"3.5e38", b"-3.5e38", b"1e-46", b"16777217", b"-0"]),
    # decimals: plain, exponent, spaces, NaN, numbers
    (246, 64, [b'"-0.00"', b'"1E+2"', b'" 1"', b'"1_0"', b'"NaN"', b'"Infinity"', b"12", b"1.5", b'"0.1000"',
               b'"' + b"9" * 65 + b'"', b'"abc"', b'"\\u0031"']),
    # temporal: real and unreal dates, fractions, TIME range
    (10, 64, [b'"0000-00-00"', b'"2024-02-29"', b'"2023-02-29"', b'"2024-13-01"', b'"2024-1-01"',
              b'"\xd9\xa3024-01-01"', b"20240101"]),
    (12, 64, [b'"2024-01-02 03:04:05.1"', b'"2024-01-02 03:04:05.1234567"', b'"2024-01-02T03:04:05"',
              b'"2024-01-02 24:00:00"', b'"2024-01-02 03:04:60"', b'"2024-01-02 03:04:05."']),
    (7, 64, [b'"1970-01-01 00:00:01"', b'"2038-01-19 03:14:07.999999"']),
    (11, 64, [b'"838:59:59"', b'"-838:59:59.000000"', b'"839:00:00"', b'"-00:00:00.5"', b'"00:60:00"',
              b'"1:00:00"', b'"100:00:00.1234567"']),
    # strings: escapes, unicode, invalid UTF-8, surrogates, control characters
    (15, 64, [b'"\\u2028\\u2029"', b'"\xe2\x80\xa8"', b'"\\ud83d\\ude00"', b'"\xf0\x9f\x98\x80"', b'"\\ud800"',
              b'"\\udc00"', b'"\\ud800\\u0041"', b'"\xed\xa0\x80"', b'"\xc0\x80"', b'"\xff"', b'"\x01"',
              b'"\\u0000"', b'"\\"\\\\\\/\\b\\f\\n\\r\\t"', b'"\\x41"', b'"\\u00"', b'"\xf4\x90\x80\x80"', b"1"]),
    (245, 64, [b'"{\\"a\\": [1, 2.5, null]}"', b'"\\u00e9"', b"{}"]),
    # Go-quoted binary strings
    (15, 0x41, [b'"plain"', b'"\\\\x00\\\\xff"', b'"\\\\u00e9"', b'"\\\\q"', b'"\\\\"', b'"\xc3\xa9"',
                b'"\\n"', b'"\\\\101"', b'"\\\\400"']),
    # base64
    (252, 0x41, [b'""', b'"YR=="', b'"YQ="', b'"YQ"', b'"YWJjZ"', b'"YWJjZA"', b'"Y==="', b'"YQ==YQ=="',
                 b'"YW=I"', b'"Y W=="', b'"YQ\\u003d="',
                 b'"_-8="', b'"////"']),
    (252, 64, [b'"w6k="', b'"/w=="', b'"7aCA"', b'"AA=="']),
    # ENUM / SET without elements: index / bitmask text
    (247, 64, [b"0", b"3", b"-0", b"-1", b"18446744073709551615", b"18446744073709551616", b"1.5", b'"a"']),
    (248, 64, [b"0", b"7", b"99999999999999999999"]),
    # type codes TiCDC does not write but its consumer passes through (NULL, NEWDATE, vector, geometry, 0)
    (6, 64, [b"null", b"1", b'"a"']),
    (14, 64, [b'"2024-02-29"', b'"2023-02-29"', b"1"]),
    (225, 64, [b'"[1,2.5]"', b"[1, 2.5]", b"18446744073709551616", b"0.1", b"true", b'"\\u00e9"']),
    (255, 0x41, [b'"POINT(1 2)"', b"{}", b"-0"]),
    (0, 64, [b'"x"', b"1e2"]),
]


@pytest.mark.parametrize("code,flags,values", EDGES, ids=[f"t{e[0]}-f{e[1]}" for e in EDGES])
def test_value_edges_give_the_python_result(code, flags, values):
    warm = row_message({"id": (3, 10, b"1"), "c": (code, flags, typical(code, flags))})
    messages = [row_message({"id": (3, 10, b"1"), "c": (code, flags, v)}) for v in values]
    expected, got, handled = differential(messages, warm=[warm])
    for v, e, g in zip(values, expected, got):
        assert g == e, v
    assert kernel_handles(*_warm_decoder(warm))


def _warm_decoder(message):
    dec = op.OpenProtocolDecoder()
    dec.decode(*message)
    return dec, *message


def _number_literal():
    """JSON number literals of many shapes: shortest reprs, 17-digit forms, exponent forms, and
    digit strings near the limits of the kernel's exact fast path (15 digits, 10**22)."""
    floats = st.floats(allow_nan=False, allow_infinity=False)
    mantissa = st.integers(0, 10**18)
    return st.one_of(
        floats.map(lambda f: orjson.dumps(f)),
        floats.map(lambda f: b"%.17g" % f),
        st.tuples(mantissa, st.integers(-30, 30), st.booleans()).map(
            lambda t: (b"-" if t[2] else b"") + b"%de%d" % (t[0], t[1])),
        st.tuples(mantissa, st.integers(0, 25), st.booleans()).map(
            lambda t: (b"-" if t[2] else b"") + (b"%d" % t[0]).rjust(t[1] + 1, b"0")[:-t[1] or None]
            + (b"." + (b"%d" % t[0]).rjust(t[1] + 1, b"0")[-t[1]:] if t[1] else b"")),
    )


@SETTINGS
@given(st.lists(_number_literal(), min_size=1, max_size=8))
def test_number_literals_read_as_orjson_reads_them(literals):
    cols = {f"c{i}": (5 if i % 2 == 0 else 4, 64, lit) for i, lit in enumerate(literals)}
    warm = row_message({name: (t, f, b"0.5") for name, (t, f, _) in cols.items()})
    expected, got, _ = differential([row_message(cols)], warm=[warm])
    assert got == expected


def test_enum_and_set_with_elements_from_a_table_hint():
    table = TableSchema("s", "t", (Column("id", "INT", handle_key=True, primary_key=True, nullable=False),
                                   Column("e", "ENUM", elements=("a", "b")),
                                   Column("m", "SET", elements=("x", "y"))))
    tables = {table.collection: table}
    msgs = [row_message({"id": (3, 10, b"1"), "e": (247, 64, e), "m": (248, 64, m)})
            for e, m in [(b"0", b"0"), (b"1", b"3"), (b"2", b"2"), (b"3", b"4"), (b"-1", b"1"), (b"null", b"null")]]
    expected, got, handled = differential(msgs, warm=msgs[:1], tables=tables)
    assert got == expected
    assert [o[0] for o in expected] == ["ok", "ok", "ok", "error", "error", "ok"]
    assert handled == 4
    assert got[1][1][0][4] == strict({"id": 1, "e": "a", "m": "x,y"})


# --------------------------------------------------------------------------- framing, keys, state

def test_message_shapes_outside_the_fast_path_are_handed_back():
    base_key, base_value = row_message({"id": (3, 10, b"1")})
    kdoc, vdoc = frames(base_key, 8)[0], frames(base_value, 0)[0]
    cases = {
        "key with rid": (framed_key([kdoc[:-7] + b',"rid":5,"t":1}']), base_value),
        "key scm empty": (framed_key([b'{"ts":1,"scm":"","tbl":"t","t":1}']), base_value),
        "whitespace": (framed_key([kdoc.replace(b",", b", ")]), base_value),
        "ts as float": (framed_key([b'{"ts":1.0,"scm":"s","tbl":"t","t":1}']), base_value),
        "ts huge": (framed_key([b'{"ts":18446744073709551616,"scm":"s","tbl":"t","t":1}']), base_value),
        "unknown key field": (base_key, framed_value([vdoc[:-1] + b',"x":1}'])),
        "u and d": (base_key, framed_value([vdoc[:-1] + b',"d":{}}'])),
        "p before u": (base_key, framed_value([b'{"p":' + vdoc[5:-1] + b',"u":' + vdoc[5:]])),
        "ddl": (framed_key([b'{"ts":1,"scm":"s","tbl":"t","t":2}']), framed_value([b'{"q":"DROP TABLE t","t":4}'])),
        "version 2": (L.pack(2) + base_key[8:], base_value),
        "bytearray": (bytearray(base_key), base_value),
        "resolved with a value": (framed_key([b'{"ts":5,"t":3}']), framed_value([b"{}"])),
        "value after resolved": (framed_key([b'{"ts":5,"t":3}']), framed_value([b"", b"x"])),
        "more values": (base_key, base_value + base_value),
        "h false": (base_key, framed_value([vdoc.replace(b'"id":{"t":3,', b'"id":{"t":3,"h":false,')])),
    }
    warm = [(base_key, base_value)]
    expected, got, _ = differential(list(cases.values()), warm=warm)
    assert got == expected
    dec, *_ = _warm_decoder(warm[0])
    for name, (k, v) in cases.items():
        assert dec._kernel.decode(k, v) is None, name


def test_resolved_and_rows_in_one_run_and_h_is_optional():
    key, value = row_message({"id": (3, 10, b"1"), "c": (15, 64, b'"x"')})
    kdoc, vdoc = frames(key, 8)[0], frames(value, 0)[0]
    with_h = vdoc.replace(b'"id":{"t":3,', b'"id":{"t":3,"h":true,')
    messages = [(framed_key([b'{"ts":9,"t":3}']), b""), (framed_key([b'{"ts":9,"t":3}']), L.pack(0)),
                (framed_key([kdoc, kdoc]), framed_value([vdoc, with_h])), (key, None)]
    expected, got, handled = differential(messages, warm=[(key, value)])
    assert got == expected
    assert handled == 3  # the last has no value entry: Python words that error


def test_schema_change_under_the_same_column_names_follows_the_python_cache():
    a = row_message({"id": (3, 10, b"1"), "c": (3, 64, b"5")})
    b = row_message({"id": (3, 10, b"1"), "c": (15, 64, b'"5"')})
    seq = [a, b, a, b, b, a]
    expected, got, handled = differential(seq, warm=[a])
    assert got == expected
    assert handled >= 2


def test_update_with_old_image_and_delete():
    table = TableSchema("s", "t", (Column("id", "BIGINT", handle_key=True, primary_key=True, nullable=False),
                                   Column("v", "VARCHAR", length=10)))
    events = [RowChange(table, "update", 5, {"id": 1, "v": "new"}, {"id": 1, "v": "old"}),
              RowChange(table, "delete", 6, {"id": 1, "v": None})]
    messages = op.OpenProtocolEncoder().encode(events)
    expected, got, handled = differential(messages, warm=messages)
    assert got == expected and handled == len(messages)
    assert [e[2] for e in got[0][1]] == ["update", "delete"]


# --------------------------------------------------------------------------- leak check

def test_kernel_does_not_leak_on_results_hand_backs_or_converter_errors():
    table = TableSchema("shop", "orders", (
        Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
        Column("name", "VARCHAR", length=64), Column("price", "DECIMAL", precision=10, scale=2),
        Column("w", "DOUBLE"), Column("at", "DATETIME", fsp=3), Column("day", "DATE"), Column("note", "TEXT"),
        Column("bin", "VARBINARY", length=8, binary=True), Column("tm", "TIME"),
        Column("m", "SET", elements=("a", "b"))))
    import datetime as dt
    from decimal import Decimal
    rows = [{"id": i, "name": f"n\u2028{i}é", "price": Decimal(f"{i}.25"), "w": i / 3,
             "at": dt.datetime(2024, 1, 1, 0, 0, 0, 1000 * i), "day": dt.date(2024, 1, 1 + i % 28),
             "note": "x" * i, "bin": b"\\\x00" + bytes([i]), "tm": dt.timedelta(seconds=i), "m": "a,b"}
            for i in range(16)]
    events = [RowChange(table, "insert" if i % 2 else "update", i, r, r if i % 2 == 0 else None)
              for i, r in enumerate(rows)]
    messages = op.OpenProtocolEncoder({"max-batch-size": 16}).encode(events)
    key, value = messages[0]
    # a hand-back late in the message (rows already built) and a converter error (bad SET mask)
    late_bad = (key, value[:-1] + b"]")
    conv_error = (key, value.replace(b'"t":248,"f":64,"v":3', b'"t":248,"f":64,"v":9', 1))
    changed = [RowChange(table, "update", i, {**r, "name": "other"}, r) for i, r in enumerate(rows)]
    partial = op.OpenProtocolEncoder({"only-output-updated-columns": True, "max-batch-size": 16}).encode(changed)[0]
    dec = op.OpenProtocolDecoder({table.collection: table})
    dec.decode(key, value)
    kernel = dec._kernel
    assert kernel.decode(key, value) is not None and kernel.decode(*partial) is not None
    assert kernel.decode(*late_bad) is None and kernel.decode(*conv_error) is None

    def run(times):
        for _ in range(times):
            kernel.decode(key, value)
            kernel.decode(*partial)
            kernel.decode(*late_bad)
            kernel.decode(*conv_error)

    grown = traced_growth(lambda: run(1), 400, warmup=20)
    # 400 rounds of 16 rows: one leaked object per row would be hundreds of KiB
    assert grown < 32 * 1024, grown


# --------------------------------------------------------------------------- TiCDC-shaped input

def test_ticdc_shaped_batch_is_decided_by_the_kernel():
    """A message as TiCDC writes it: columns sorted by name (Go marshals a map), "h" on the
    handle column, Go's escaping (<, >, & and U+2028 as \\u escapes), a handle-only delete."""
    cols = (b'"bin":{"t":15,"f":65,"v":"\\\\x00\\\\xff\\"q\\\\\\\\"},"bit":{"t":16,"f":192,"v":65},'
            b'"blob":{"t":252,"f":65,"v":"AAE="},"d":{"t":10,"f":64,"v":"2020-02-20"},'
            b'"dec":{"t":246,"f":64,"v":"-2333.654321"},"dt":{"t":12,"f":64,"v":"2020-02-20 02:20:20.123"},'
            b'"e":{"t":247,"f":64,"v":2},"fl":{"t":4,"f":64,"v":0.1},"id":{"t":3,"h":true,"f":10,"v":7766},'
            b'"j":{"t":245,"f":64,"v":"{\\"a\\": \\"\\u003cb\\u003e \\u0026 \\u2028\\"}"},"s":{"t":248,"f":64,"v":3},'
            b'"tm":{"t":11,"f":64,"v":"-838:59:59"},"txt":{"t":252,"f":64,"v":"aMOpbGxv"},'
            b'"vc":{"t":15,"f":64,"v":"a\\u003cb"},"y":{"t":13,"f":64,"v":2020},"nul":{"t":3,"f":64,"v":null}')
    key = framed_key([b'{"ts":425378118122422273,"scm":"shop","tbl":"items","t":1}',
                      b'{"ts":425378118122422274,"scm":"shop","tbl":"items","t":1}'])
    value = framed_value([b'{"u":{' + cols + b"}}", b'{"d":{"id":{"t":3,"h":true,"f":10,"v":7766}}}'])
    expected, got, handled = differential([(key, value)], warm=[(key, value)])
    assert got == expected and handled == 1
    row = got[0][1][0][4]
    assert dict(row[1])["j"] == strict('{"a": "<b> & \u2028"}') and dict(row[1])["bin"] == strict(b'\x00\xff"q\\')
