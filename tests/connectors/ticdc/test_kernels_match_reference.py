"""Every TiCDC codec kernel against its Python reference, in one harness.

Each job runs one codec operation on generated tables and rows (``strategies.tables_and_rows``):
once as the install runs it (the compiled twin when it is built and on) and once with the
module's kernel reference set to None (the Python reference). Both must give the same outcome,
type-strict: the same bytes, the same events (int vs float vs bool, Decimal exponents, date vs
datetime), or the same typed error with the same message. The reference side is also checked
against the rows it started from (the round trip), so with ``CDCFLOW_PURE_PYTHON=1`` (compiled
paths off) the harness still tests the path that runs.

The hand-written edge cases of each kernel stay in its own test module (test_csv_kernel.py,
test_csv_kernel_records.py, test_canal_json_kernel.py, test_open_protocol_*_kernel.py), compared
with the same helpers (``helpers.kernels``: ``Kernel``, ``outcome``, ``both``); this file is the
one place that lists which kernels exist and holds each to its reference on the same generated
inputs. The Avro decode kernel's crafted bytes and malformed messages, and the Avro encode kernel's
crafted values, are here too.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import struct
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from helpers.kernels import CANAL_JSON, CSV, OPEN_DECODE, OPEN_ENCODE, Kernel, both, outcome, strict
from helpers.avro_registry import store_registry
from helpers.avro_cases import malformed_cases
from helpers.tidb_strategies import tables_and_rows

from cdcflow import accel
from cdcflow.connectors.ticdc import csv as tcsv
from cdcflow.connectors.ticdc.avro import AvroDecoder, AvroEncoder, AvroOptions
from cdcflow.connectors.ticdc.avro import decode as avro_decode_mod
from cdcflow.connectors.ticdc.avro import encode as avro_encode_mod
from cdcflow.connectors.ticdc.canal_json import decode as cj_decode
from cdcflow.connectors.ticdc.canal_json import encode as cj_encode
from cdcflow.connectors.ticdc.events import DELETE, INSERT, UPDATE, RowChange, to_records
from cdcflow.connectors.ticdc.open_protocol import decode as op_decode
from cdcflow.connectors.ticdc.open_protocol import encode as op_encode
from cdcflow.connectors.ticdc.tidb import Column, TableSchema
from cdcflow.schemas import SchemaStore

COMMIT_TS = 449_000_000_000_000_000

AVRO_DECODE = Kernel("cdcflow.connectors.ticdc.avro._decode", ((avro_decode_mod, "_kernel"),))
AVRO_ENCODE = Kernel("cdcflow.connectors.ticdc.avro._encode", ((avro_encode_mod, "_kernel"),))

#: every compiled twin of a TiCDC codec (``Kernel``: its accel name and the attributes holding it)
KERNELS: tuple[Kernel, ...] = (CSV, CANAL_JSON, OPEN_DECODE, OPEN_ENCODE, AVRO_DECODE, AVRO_ENCODE)


def test_every_codec_kernel_is_listed_here():
    """A kernel added to (or removed from) accel.KERNELS for a TiCDC codec shows up here."""
    listed = {k.name for k in KERNELS}
    assert {k for k in accel.KERNELS if k.startswith("cdcflow.connectors.ticdc.")} == listed


def events_of(table, rows) -> list[RowChange]:
    return [RowChange(table, INSERT, COMMIT_TS + i, row) for i, row in enumerate(rows)]


# Each job makes its codec objects inside ``run``: they cache per-table plans, and a plan made
# with the kernel off would keep the compiled run on the Python path.

def csv_decode(table, rows, store):
    o = tcsv.CsvOptions(include_commit_ts=True)
    with CSV.off():
        data = tcsv.encode_rows(events_of(table, rows), table, o)
    return lambda: tcsv.CsvDecoder(table, o, source="f.csv").decode_columns(data)


def csv_encode(table, rows, store):
    o = tcsv.CsvOptions(include_commit_ts=True)
    return lambda: tcsv.encode_rows(events_of(table, rows), table, o)


def canal_json_encode(table, rows, store):
    # a fresh encoder per run: it caches each table's plan, kernel part included
    options = cj_encode.CanalJsonOptions(enable_tidb_extension=True)
    return lambda: cj_encode.CanalJsonEncoder(options, now_ms=lambda: 0).encode_many(events_of(table, rows))


def open_decode(table, rows, store):
    with OPEN_ENCODE.off():
        messages = op_encode.OpenProtocolEncoder().encode(events_of(table, rows))

    def run():
        dec = op_decode.OpenProtocolDecoder()
        dec.decode_many(messages)  # a table signature is first read in Python, which makes the kernel's plan
        return dec.decode_many(messages)
    return run


def open_encode(table, rows, store):
    records = to_records(events_of(table, rows), [b"%d" % i for i in range(len(rows))], store)
    return lambda: op_encode.OpenProtocolEncoder().encode_records(records, store)


# Avro: the option sets TiCDC has (extension on/off, DECIMAL and unsigned BIGINT as bytes/long or
# text), one per example by the table's version
AVRO_OPTIONS = [AvroOptions(ext, dec, big) for ext in (True, False) for dec in ("precise", "string")
                for big in ("long", "string")]


def avro_case(table, rows):
    """(options, table, rows) of an example: two examples in three get plain column names (TiCDC's
    Avro names need no sanitizing), because a schema with renamed columns is read by fastavro only."""
    opts = AVRO_OPTIONS[table.version % len(AVRO_OPTIONS)]
    if table.version % 3:
        names = {c.name: f"c{i}" for i, c in enumerate(table.columns)}
        table = dataclasses.replace(table, columns=tuple(dataclasses.replace(c, name=names[c.name])
                                                         for c in table.columns))
        rows = [{names[k]: v for k, v in row.items()} for row in rows]
    return opts, table, rows


def damaged(key: bytes | None, value: bytes) -> list[tuple[bytes | None, bytes | None]]:
    """Bad bytes made from a good message: truncated, trailing, an over-long varint, a first body
    byte that is another union index or value, an empty body."""
    return [(key, value[:-1]), (key, value + b"\x00"), (key, value[:5] + b"\xff" * 10 + b"\x01" + value[5:]),
            (key, value[:5] + b"\x04" + value[6:]), (key, value[:5] + b"\x01" + value[6:]), (key, value[:5]),
            (key[:-1] if key else key, None)]


def decode_outcomes(dec, messages) -> list:
    """Each message's event (every field it carries) or its typed error with its position."""
    out = []
    for k, v in messages:
        try:
            ev = dec.decode(k, v, None, "p", 1)  # message_ms fixed: a first DELETE's ts is an estimate
            out.append((ev.table.collection, ev.table.columns, ev.kind, ev.commit_ts, ev.row, ev.old, ev.extra,
                        ev.ts_estimated))
        except Exception as e:  # noqa: BLE001 - the typed error, its text and position must match
            # fastavro's EOFError names its BytesIO by address: not part of what must match
            out.append((type(e).__name__, re.sub(r" at 0x[0-9a-f]+>", ">", str(e)), getattr(e, "position", None)))
    return out


def avro_decode(table, rows, store):
    opts, table, rows = avro_case(table, rows)
    reg = store_registry()
    events = [RowChange(table, UPDATE if i % 2 else INSERT, COMMIT_TS + i, row) for i, row in enumerate(rows)]
    messages = AvroEncoder(opts, reg).encode(events, "t")
    deletes = [(k, None) for k, _ in messages if k is not None]  # tombstones: DELETE of the key
    bad = damaged(*messages[0])
    return lambda: decode_outcomes(AvroDecoder(opts, reg), messages + deletes + bad)


AVRO_KINDS = (INSERT, UPDATE, DELETE)


def avro_encode(table, rows, store):
    opts, table, rows = avro_case(table, rows)
    events = [RowChange(table, AVRO_KINDS[i % 3], COMMIT_TS + i, row) for i, row in enumerate(rows)]
    # a fresh encoder (and registry) per run: the plan holds the compiled writer or not
    return lambda: AvroEncoder(opts, store_registry()).encode(events, "t")


def round_trip(job: str, table, rows, store, result) -> None:
    """The reference's result read back (or, for decoders, compared) gives the rows it began with."""
    if job == "avro-encode":
        opts, table, rows = avro_case(table, rows)
        reg = store_registry()
        messages = AvroEncoder(opts, reg).encode(  # the same registry ids as ``result``'s fresh one
            [RowChange(table, AVRO_KINDS[i % 3], COMMIT_TS + i, row) for i, row in enumerate(rows)], "t")
        assert messages == result
        dec = AvroDecoder(opts, reg)
        for i, ((k, v), row) in enumerate(zip(messages, rows)):
            ev = dec.decode(k, v, None, "p", 1)
            if AVRO_KINDS[i % 3] == DELETE:
                assert v is None and ev.kind == DELETE
            else:
                assert ev.row == row
        return
    if job == "avro-decode":
        opts, table, rows = avro_case(table, rows)
        back = result[:len(rows)]
        assert [b[4] for b in back] == rows
        kinds = [UPDATE if i % 2 else INSERT for i in range(len(rows))]
        if opts.enable_tidb_extension:
            assert [(b[2], b[3]) for b in back] == [(k, COMMIT_TS + i) for i, k in enumerate(kinds)]
        else:  # without the extension a row is an INSERT without commit ts (as TiCDC)
            assert [(b[2], b[3]) for b in back] == [(INSERT, 0)] * len(rows)
        return
    if job == "csv-encode":
        back = tcsv.CsvDecoder(table, tcsv.CsvOptions(include_commit_ts=True)).decode(result)
    elif job == "canal-json-encode":
        dec = cj_decode.CanalJsonDecoder({table.collection: table})
        back = [dec.decode(m) for m in result]
    elif job == "open-encode":
        back = op_decode.OpenProtocolDecoder().decode_many(result)
    else:
        back = result.events() if isinstance(result, tcsv.CsvColumns) else result
    assert [e.commit_ts for e in back] == [COMMIT_TS + i for i in range(len(rows))]
    if job in ("csv-encode", "csv-decode"):  # CSV carries every value exactly (given the table)
        assert [e.row for e in back] == rows


JOBS = {
    "csv-decode": (CSV, csv_decode),
    "csv-encode": (CSV, csv_encode),
    "canal-json-encode": (CANAL_JSON, canal_json_encode),
    "open-decode": (OPEN_DECODE, open_decode),
    "open-encode": (OPEN_ENCODE, open_encode),
    "avro-decode": (AVRO_DECODE, avro_decode),
    "avro-encode": (AVRO_ENCODE, avro_encode),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return SchemaStore(tmp_path_factory.mktemp("kernels") / "schemas.sqlite")


@pytest.mark.parametrize("path", ["compiled", "python"])
@pytest.mark.parametrize("job", list(JOBS))
def test_kernel_matches_reference(job, path, store):
    kernel, make = JOBS[job]
    if path == "compiled" and not kernel.loaded():
        pytest.skip(f"{kernel.name} is off or not built ({accel.status()[kernel.name]})")

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(tables_and_rows(min_rows=1, max_rows=4, handle_key=True))
    def check(case):
        table, rows = case
        run = make(table, rows, store)
        if path == "compiled":
            compiled, reference = both(kernel, run, strict)
            assert compiled == reference
            return
        with kernel.off():
            if outcome(run, strict)[0] == "ok":
                round_trip(job, table, rows, store, run())

    check()


# Avro decode: crafted bytes on a table of every column type TiCDC's Avro carries, and the
# malformed-message corpus of test_avro.py. The compiled run must give what the reference gives
# for each message: the same event, or the same typed error with the same text and position.

ALL_TYPES = TableSchema("s", "t", (
    Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
    Column("i8", "TINYINT"), Column("u32", "INT", unsigned=True), Column("u64", "BIGINT", unsigned=True),
    Column("f", "FLOAT"), Column("d", "DOUBLE"), Column("dec", "DECIMAL", precision=12, scale=2),
    Column("wide", "DECIMAL", precision=40, scale=5), Column("s", "VARCHAR", length=20),
    Column("b", "VARBINARY", length=20, binary=True), Column("bit", "BIT", length=64, unsigned=True),
    Column("bit9", "BIT", length=9, unsigned=True), Column("day", "DATE"), Column("at", "DATETIME", fsp=6),
    Column("ts", "TIMESTAMP", fsp=3), Column("tm", "TIME", fsp=6), Column("y", "YEAR"),
    Column("e", "ENUM", elements=("a", "b")), Column("set", "SET", elements=("x", "y")), Column("j", "JSON")))
ALL_VALUES = {
    "id": -(2**63), "i8": -128, "u32": 2**32 - 1, "u64": 2**64 - 1, "f": -1.5, "d": 2.5e-300,
    "dec": Decimal("-1234567890.12"), "wide": Decimal("12345678901234567890123456789012345.67891"),
    "s": "hello-avro", "b": b"\x00\xff", "bit": 2**64 - 1, "bit9": 300, "day": datetime.date(2024, 2, 29),
    "at": datetime.datetime(2024, 2, 29, 23, 59, 59, 123456), "ts": datetime.datetime(2024, 1, 1, 0, 0, 0, 125000),
    "tm": -datetime.timedelta(hours=838, minutes=59, seconds=59), "y": 2155, "e": "b", "set": "x,y", "j": '{"a": 1}'}

# (what is wrong, the bytes it replaces, the same-length bytes it puts there)
CRAFTED_EDITS = [
    ("invalid UTF-8 in a string", b"hello-avro", b"hello-\xffvro"),
    ("a DATE that does not exist", b"2024-02-29\x02", b"2024-02-30\x02"),
    ("a DATE in another shape", b"2024-02-29\x02", b"2024/02/29\x02"),
    ("a DATETIME past midnight", b"2024-02-29 23:59:59.123456", b"2024-02-29 24:59:59.123456"),
    ("a DATETIME with a T", b"2024-02-29 23:59:59.123456", b"2024-02-29T23:59:59.123456"),
    ("a TIME with 60 minutes", b"-838:59:59", b"-838:60:59"),
    ("a TIME without its sign", b"-838:59:59", b"0838:59:59"),
    ("an unsigned BIGINT text above 2**64-1", b"18446744073709551615", b"18446744073709551616"),
    ("an unsigned BIGINT text of -0", b"18446744073709551615", b"-0000000000000000000"),
    ("a DECIMAL text that is not a number", b"-1234567890.12", b"-1234567890.1x"),
    ("a DECIMAL text with an exponent", b"-1234567890.12", b"-123456789E+12"),
]


def crafted_messages(opts: AvroOptions) -> tuple[list, int]:
    """Good rows (values, all NULL), their tombstones, and the crafted edits of the first; and how
    many edits found their bytes."""
    reg = store_registry()
    nulls = {c.name: None for c in ALL_TYPES.columns} | {"id": 7}
    enc = AvroEncoder(opts, reg)
    (k, v), (k2, v2) = enc.encode([RowChange(ALL_TYPES, UPDATE, COMMIT_TS, ALL_VALUES),
                                   RowChange(ALL_TYPES, INSERT, COMMIT_TS + 1, nulls)], "t")
    messages = [(k, v), (k2, v2), (k, None), (k2, None)]
    found = 0
    for _, old, new in CRAFTED_EDITS:
        if old in v:
            found += 1
            messages.append((k, v.replace(old, new)))
    nullable = v2[5:].index(b"\x00")  # the first nullable field's union index (0: null) in the NULL row
    messages += [(k2, v2[:5 + nullable] + b"\x01" + v2[6 + nullable:]),  # index -1: fastavro takes the last branch
                 (k2, v2[:5 + nullable] + b"\x04" + v2[6 + nullable:])]  # index 2: no such branch
    unscaled = (-123456789012).to_bytes(6, "big", signed=True)  # "dec" as a 12-digit value in precise mode
    if unscaled in v:
        messages.append((k, v.replace(unscaled, (-10**12).to_bytes(6, "big", signed=True))))  # 13 digits
        found += 1
    return [(reg, messages)], found


def test_avro_decode_kernel_matches_reference_on_crafted_bytes():
    if not AVRO_DECODE.loaded():
        pytest.skip(f"{AVRO_DECODE.name} is off or not built ({accel.status()[AVRO_DECODE.name]})")
    found = 0
    for opts in AVRO_OPTIONS:
        [(reg, messages)], n = crafted_messages(opts)
        found += n
        with AVRO_DECODE.off():
            reference = decode_outcomes(AvroDecoder(opts, reg), messages)
        dec = AvroDecoder(opts, reg)
        compiled = decode_outcomes(dec, messages)
        assert compiled == reference, opts
        assert reference[0][4] == ALL_VALUES
        assert sum(len(r) == 3 for r in reference) >= 5, "most crafted edits are errors (some are values)"
        # the good rows were the kernel's to decide (it did not hand them back)
        kid, vid = (struct.unpack(">I", m[1:5])[0] for m in messages[0])
        assert dec._plans[(kid, vid)].kernel.read(messages[0][1]) is not None
        assert dec._plans[(kid, vid)].kernel.read(messages[1][1]) is not None
    assert found >= 30  # the edits hit the bytes they were written for (each applies in some option sets)


def test_avro_decode_kernel_matches_reference_on_malformed_corpus():
    if not AVRO_DECODE.loaded():
        pytest.skip(f"{AVRO_DECODE.name} is off or not built ({accel.status()[AVRO_DECODE.name]})")
    reg = store_registry()
    t = TableSchema("s", "t", (Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
                               Column("v", "VARCHAR", length=9), Column("d", "DATE")))
    k, v = AvroEncoder(AvroOptions(enable_tidb_extension=True), reg).encode(
        [RowChange(t, INSERT, 1 << 18, {"id": 1, "v": "hello", "d": datetime.date(2020, 1, 1)})], "t")[0]
    messages = [(k, v)] + [(key, value) for _, key, value, _, _ in malformed_cases(k, v)]
    messages += [(k, v[:cut]) for cut in range(5, len(v))]  # every truncation
    with AVRO_DECODE.off():
        reference = decode_outcomes(AvroDecoder(None, reg), messages)
    assert decode_outcomes(AvroDecoder(None, reg), messages) == reference


# Avro encode: odd values on the table of every column type, one row each, in every option set.
# The compiled run must give what the reference gives: the same message bytes, or the same typed
# error with the same text (the kernel hands anything it does not take back to fastavro).

ODD_VALUES = [
    ("id", 2**63 - 1), ("id", 2**63), ("id", -(2**63) - 1), ("id", True), ("i8", 127), ("i8", 128),
    ("u32", 0), ("u64", 2**64 - 1), ("u64", 2**63), ("u64", 2**64), ("u64", -1),
    ("f", float("nan")), ("f", float("inf")), ("f", float("-inf")), ("f", -0.0), ("f", 0.1), ("f", 3.4028234663852886e38),
    ("d", float("nan")), ("d", float("-inf")), ("d", -0.0), ("d", 5e-324), ("d", 1), ("d", "1.5"),
    ("dec", Decimal("9999999999.99")), ("dec", Decimal("1E+10")), ("dec", Decimal("0.001")), ("dec", Decimal("NaN")),
    ("wide", Decimal("-99999999999999999999999999999999999.99999")), ("wide", Decimal("1E+40")),
    ("wide", Decimal("1E-30")), ("s", ""), ("s", "\u00e9\u4e2d\U0001f600"), ("s", "a\x00b"), ("s", "bad \udcff text"),
    ("s", "\ud800"), ("s", b"bytes"), ("b", b""), ("b", bytearray(b"\x01")), ("b", "text"), ("b", b"\xff" * 300),
    ("bit", 0), ("bit", 2**64), ("bit9", 512), ("day", datetime.date(1, 1, 1)), ("day", datetime.date(9999, 12, 31)),
    ("day", datetime.datetime(2024, 1, 1)), ("at", datetime.datetime(1, 1, 1)), ("at", datetime.datetime.max),
    ("at", datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)), ("ts", datetime.datetime(2024, 1, 1, 0, 0, 0, 123456)),
    ("tm", datetime.timedelta(hours=839)), ("tm", datetime.timedelta(days=-40)), ("y", 2156), ("y", 0),
    ("e", "c"), ("e", ""), ("set", "x,z"), ("j", "\udcff"), ("j", 1),
]


def encode_outcomes(opts: AvroOptions, rows: list[tuple[str, dict]]) -> list:
    reg = store_registry()
    enc = AvroEncoder(opts, reg)
    return [outcome(lambda: enc.encode([RowChange(ALL_TYPES, kind, COMMIT_TS, row)], "t")) for kind, row in rows]


def test_avro_encode_kernel_matches_reference_on_crafted_values():
    if not AVRO_ENCODE.loaded():
        pytest.skip(f"{AVRO_ENCODE.name} is off or not built ({accel.status()[AVRO_ENCODE.name]})")
    nulls = {c.name: None for c in ALL_TYPES.columns} | {"id": 7}
    rows = [(INSERT, ALL_VALUES), (UPDATE, nulls), (DELETE, ALL_VALUES)]
    rows += [(kind, ALL_VALUES | {name: value}) for name, value in ODD_VALUES for kind in (UPDATE, DELETE)]
    for opts in AVRO_OPTIONS:
        with AVRO_ENCODE.off():
            reference = encode_outcomes(opts, rows)
        assert encode_outcomes(opts, rows) == reference, opts
        assert reference[0][0] == "ok" and sum(r[0] == "error" for r in reference) >= 20
        # the good rows were the kernel's to write (it did not hand them back)
        enc = AvroEncoder(opts, store_registry())
        enc.encode([RowChange(ALL_TYPES, INSERT, COMMIT_TS, ALL_VALUES)], "t")
        (_, plan), = enc._plans.values()
        ext = ("c", COMMIT_TS, COMMIT_TS >> 18) if opts.enable_tidb_extension else None
        assert plan.value_writer.write(plan.value_head, ALL_VALUES, ext) is not None
        assert plan.key_writer.write(plan.key_head, ALL_VALUES, None) is not None
