"""The journey matrix (issue 14): every source format × every destination format through `cdcflow run`.

Formats: kafka avro (built-in registry), kafka canal-json, kafka open protocol, storage CSV (on moto
S3), storage canal-json (local disk), file (OpenCDC JSON lines). The input is generator rows of every
TiDB type in two tables, inserts, updates and deletes, with a DDL in the middle, an update that
changes its row's key and a resolved ts at the end (conftest.py builds it and runs the stages).
Each cell reads its destination back with `cdcflow run` into a file and checks, against
``helpers.journeys.expected_rows`` (the documented fallbacks of docs/codec-cross-format.md):

- every row change arrives exactly once, with the values both formats carry;
- commit ts and dates are the rows' own (never 0 / 1970-01-01);
- the DDL and the resolved ts land where TiCDC puts them; storage destinations start a table
  version only at the DDL and checkpoint at the resolved ts.

Five cells run by default (file → each format → file); the whole matrix under ``-m slow`` (both share the stages).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from pathlib import Path

import pytest

from helpers.journeys import DDL_TABLE, FACTS, FORMATS, OUTPUT_OLD_VALUE, expected_rows, read_lines

#: the default cells: the input file into each format and read back, so every connector runs on both
#: sides and the "produce" stage (one Spark start) is not needed
FAST = {("file", f) for f in FORMATS if f != "file"}

#: (check, source, destination) → reason, for cells failing on a known, documented limit
KNOWN: dict[tuple[str, str, str], str] = {}


def cells(check: str) -> list:
    out = []
    for s, d in itertools.product(FORMATS, FORMATS):
        marks = [pytest.mark.journey] + ([] if (s, d) in FAST else [pytest.mark.slow])
        if (check, s, d) in KNOWN:
            marks.append(pytest.mark.xfail(reason=KNOWN[(check, s, d)], strict=True))
        out.append(pytest.param((s, d), marks=marks, id=f"{s}-to-{d}"))
    return out


pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(1800)]


def _rows(records: list[dict]) -> list[dict]:
    return [r for r in records if "cdcflow.control" not in r["metadata"]]


def _controls(records: list[dict], kind: str) -> list[dict]:
    return [r for r in records if r["metadata"].get("cdcflow.control") == kind]


def _ident(r: dict) -> tuple:
    return r["metadata"]["opencdc.collection"], r["operation"], r["key"]["id"]


def _no_failure(journey, s, d):
    for stage, pid in (("produce", f"produce_{s.replace('-', '')}"), ("pairs", journey.pair_id(s, d)),
                       ("readback", f"readback_{s.replace('-', '')}_{d.replace('-', '')}")):
        run = journey.runs.get(stage)
        assert run is None or not run.failures_of(pid), f"{stage} failed: {run.failures_of(pid)}"


@pytest.mark.parametrize("pair", cells("rows"))
def test_every_row_change_arrives_once_with_its_values(journey, pair):
    s, d = pair
    _no_failure(journey, s, d)
    exp = expected_rows(s, d, _rows(journey.input))
    got = _rows(read_lines(journey.readback_path(s, d)))
    counts = Counter(_ident(r) for r in got)
    assert counts == Counter(_ident(r) for r in exp.rows), "row changes lost or repeated"
    by_ident = {_ident(r): r for r in got}
    for e in exp.rows:
        g = by_ident[_ident(e)]
        assert g["key"] == e["key"], _ident(e)
        for image in ("before", "after"):
            assert g["payload"][image] == e["payload"][image], (_ident(e), image)
    # refused values (an ENUM index where names are written) go to the cell's DLQ, nothing else does
    dlq = read_lines(journey.dlq_path(journey.pair_id(s, d)))
    assert sorted(_ident(r) for r in dlq) == sorted(_ident(r) for r in exp.refused)
    assert all("UnrepresentableValue" in r["metadata"]["conduit.dlq.nack.error"] for r in dlq)
    for stage in (f"produce_{s.replace('-', '')}", f"readback_{s.replace('-', '')}_{d.replace('-', '')}"):
        assert read_lines(journey.dlq_path(stage)) == [], f"{stage} rejected records"


@pytest.mark.parametrize("pair", cells("commit_ts"))
def test_commit_ts_and_dates_are_the_rows_own(journey, pair):
    s, d = pair
    # keyed by what reads back: a format without old images reads an UPDATE whose before image a
    # stage dropped as a create
    want = {_ident(r): r["metadata"]["opencdc.createdAt"] for r in expected_rows(s, d, _rows(journey.input)).rows}
    got = _rows(read_lines(journey.readback_path(s, d)))
    assert got
    for r in got:
        # an Avro DELETE too: its tombstone has no commit ts, the header cdcflow's destination adds carries it
        created = r["metadata"]["opencdc.createdAt"]
        assert created == want[_ident(r)], (_ident(r), created)
        ts = r["metadata"].get("ticdc.commit-ts")
        if ts is not None:
            assert int(ts) == (int(created) // 1_000_000) << 18, (_ident(r), ts)
    if d.startswith("storage-"):  # the date directory is the rows' commit date (2024-01-01), never 1970
        data = [p.split("/") for p in _storage_files(journey, s, d)]
        dates = {parts[3] for parts in data if parts[0] == "shop" and parts[2].isdigit() and parts[-1].startswith("CDC0")}
        assert dates == {"2024-01-01"}


def _storage_files(journey, s, d) -> list[str]:
    settings = journey.connector_settings(d, journey.loc_pair(s, d))
    uri = settings["uri"]
    if uri.startswith("s3://"):
        import s3fs

        fs = s3fs.S3FileSystem(key="testing", secret="testing", skip_instance_cache=True,
                               client_kwargs={"endpoint_url": settings["s3.endpoint"]})
        root = uri[len("s3://"):]
        return [p[len(root):].lstrip("/") for p in fs.find(root)]
    root = Path(uri)
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()]


def _read_storage(journey, s, d, name: str) -> str:
    settings = journey.connector_settings(d, journey.loc_pair(s, d))
    uri = settings["uri"]
    if uri.startswith("s3://"):
        import s3fs

        fs = s3fs.S3FileSystem(key="testing", secret="testing", skip_instance_cache=True,
                               client_kwargs={"endpoint_url": settings["s3.endpoint"]})
        return fs.cat(f"{uri[len('s3://'):]}/{name}").decode()
    return (Path(uri) / name).read_text()


@pytest.mark.parametrize("pair", cells("ddl"))
def test_ddl_and_resolved_land_where_ticdc_puts_them(journey, pair):
    s, d = pair
    (ddl_in,) = _controls(journey.input, "ddl")
    (resolved_in,) = _controls(journey.input, "resolved")
    ddl_ts = int(ddl_in["metadata"]["ticdc.commit-ts"])
    resolved_ts = int(resolved_in["metadata"]["ticdc.resolved-ts"])
    out = read_lines(journey.readback_path(s, d))

    # the DDL: once, its own statement and commit ts, between the rows of its table it separates
    (ddl,) = _controls(out, "ddl")
    assert ddl["payload"]["after"]["query"] == ddl_in["payload"]["after"]["query"]
    assert int(ddl["metadata"]["ticdc.commit-ts"]) == ddl_ts
    assert ddl["metadata"]["opencdc.collection"] == DDL_TABLE
    table_order = [r for r in out if r["metadata"].get("opencdc.collection") == DDL_TABLE]
    at = table_order.index(ddl)
    ts_of = {r["key"]["id"]: int(r["metadata"]["opencdc.createdAt"]) // 1_000_000 << 18 for r in _rows(journey.input)}
    assert all(ts_of[r["key"]["id"]] < ddl_ts for r in table_order[:at])
    assert all(ts_of[r["key"]["id"]] > ddl_ts for r in table_order[at + 1:])

    # resolved ts: carried by kafka and file, never by storage (a checkpoint file instead)
    resolved = _controls(out, "resolved")
    if s.startswith("storage-") or d.startswith("storage-"):
        assert resolved == []
    else:
        assert resolved and {int(r["metadata"]["ticdc.resolved-ts"]) for r in resolved} == {resolved_ts}
        last_row = max(i for i, r in enumerate(out) if "cdcflow.control" not in r["metadata"])
        assert any(i > last_row for i, r in enumerate(out) if r in resolved), "a resolved ts follows the rows"

    if d.startswith("storage-"):
        rows = _rows(journey.input)
        versions = {}
        for p in _storage_files(journey, s, d):  # a version is its schema file, shop/T/meta/schema_V_CRC.json
            m = re.fullmatch(r"shop/(\w+)/meta/schema_(\d+)_\d{10}\.json", p)
            if m:
                versions.setdefault(f"shop.{m.group(1)}", set()).add(int(m.group(2)))
        first = {t: min(int(r["metadata"]["opencdc.createdAt"]) // 1_000_000 << 18 for r in rows
                        if r["metadata"]["opencdc.collection"] == t) for t in versions}
        assert versions == {"shop.orders": {first["shop.orders"], ddl_ts}, "shop.items": {first["shop.items"]}}, \
            "a table version starts only at the DDL"


@pytest.mark.parametrize("pair", [p for p in cells("checkpoint") if p.values[0][1].startswith("storage-")])
def test_storage_checkpoint_is_the_resolved_ts_or_the_last_row(journey, pair):
    """``metadata`` holds the resolved ts the source carried, else the newest row's commit ts."""
    s, d = pair
    (resolved_in,) = _controls(journey.input, "resolved")
    rows = _rows(journey.input)
    checkpoint = int(re.search(r'"checkpoint-ts":\s*(\d+)', _read_storage(journey, s, d, "metadata")).group(1))
    max_row = max(int(r["metadata"]["opencdc.createdAt"]) // 1_000_000 << 18 for r in rows)
    assert checkpoint == (max_row if s.startswith("storage-") else int(resolved_in["metadata"]["ticdc.resolved-ts"]))


def test_doc_table_agrees_with_the_matrix():
    """docs/codec-cross-format.md's "What each format carries" says what ``FACTS`` models."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "codec-cross-format.md").read_text()
    lines = [ln for ln in doc.split("## What each format carries", 1)[1].splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    table = {cells[0]: dict(zip(header[1:], cells[1:]))
             for cells in ([c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:])}
    for fmt, f in FACTS.items():
        if not f.doc_column:
            continue
        col = f.doc_column
        elements = table["ENUM/SET elements"][col]
        if elements.startswith("only from the DDL"):  # names are written, the member list is not always known
            assert (f.elements, f.members_known) == (True, False), (fmt, "elements", elements)
        else:
            assert elements.startswith("yes") == f.elements, (fmt, "elements", elements)
            assert f.members_known or not f.elements, (fmt, "members known", elements)
        old = table["old image of UPDATE"][col]
        carried = OUTPUT_OLD_VALUE[col] if old.startswith("with `output-old-value`") else old.startswith("yes")
        assert carried == f.old_image, (fmt, "old image", old)
        assert table["deleted row"][col] == f.deleted_row, (fmt, "deleted row")
