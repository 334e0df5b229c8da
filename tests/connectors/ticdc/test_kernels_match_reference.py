"""Every TiCDC text-codec kernel against its Python reference, in one harness.

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
inputs.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from helpers.kernels import CANAL_JSON, CSV, OPEN_DECODE, OPEN_ENCODE, Kernel, both, outcome, strict
from helpers.tidb_strategies import tables_and_rows

from cdcflow import accel
from cdcflow.connectors.ticdc import csv as tcsv
from cdcflow.connectors.ticdc.canal_json import decode as cj_decode
from cdcflow.connectors.ticdc.canal_json import encode as cj_encode
from cdcflow.connectors.ticdc.events import INSERT, RowChange, to_records
from cdcflow.connectors.ticdc.open_protocol import decode as op_decode
from cdcflow.connectors.ticdc.open_protocol import encode as op_encode
from cdcflow.schemas import SchemaStore

COMMIT_TS = 449_000_000_000_000_000

#: every compiled twin of a TiCDC codec (``Kernel``: its accel name and the attributes holding it)
KERNELS: tuple[Kernel, ...] = (CSV, CANAL_JSON, OPEN_DECODE, OPEN_ENCODE)


def test_every_text_codec_kernel_is_listed_here():
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


def round_trip(job: str, table, rows, store, result) -> None:
    """The reference's result read back (or, for decoders, compared) gives the rows it began with."""
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
