"""TiCDC's own storage files read by the ``storage`` source (issue 14, "TiCDC's files").

Fixtures in ``data/ticdc`` are TiCDC's files (sources in its README): schema files whose names
TiCDC computed, the database schema file of its design doc, the v6.5.0-7.0 layout. Each behaviour
is checked in-process and once through ``cdcflow run`` (a subprocess with its own Spark, ``slow``).
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest
from cdcflow.connectors.storage import schemafile
from cdcflow.connectors.storage.source import (
    StorageReadError,
    StorageRootError,
    _Cursor,
)
from cdcflow.connectors.ticdc.events import DDLEvent, RowChange, from_record
from cdcflow.connectors.ticdc.tidb import Column, TableSchema
from cdcflow.convert.jsonform import loads_lines
from cdcflow.schemas import SchemaStore, default_store
from helpers.storage import make_destination, make_source, read_all

DATA = Path(__file__).parent / "data" / "ticdc"
REPO = Path(__file__).resolve().parents[3]


def _events(settings: dict) -> list[tuple[str, object]]:
    store = default_store()
    return [(part, from_record(r, store)) for part, r in read_all(settings)]


def _copy(name: str, tmp_path: Path) -> Path:
    lake = tmp_path / name
    shutil.copytree(DATA / name, lake)
    return lake


# ----------------------------------------------------------------------------- 1. checksums


@pytest.mark.parametrize("rel", ["schema1/table1/meta/schema_100_3752767265.json",
                                 "test/table1/meta/schema_100_4192708364.json"])
def test_ticdc_schema_files_pass_their_checksum(rel):
    # names TiCDC's tests expect; the first has numeric defaults (10, 12345678) cdcflow re-rendered as text
    path = DATA / "checksum" / rel
    sf = schemafile.parse(str(path), path.read_bytes())
    assert sf.checksum == int(path.stem.rsplit("_", 1)[1])
    if sf.table.table == "table1" and sf.schema == "schema1":
        assert {c.name: c.default for c in sf.table.columns} == {
            "Id": 10, "LastName": "Default LastName", "FirstName": "Default FirstName", "Birthday": 12345678}


# Go's MarshalIndent of TiCDC's checksum body (name-sorted columns, Version 0) for a table whose
# default holds '&', '<' and '>' and whose columns carry ColumnId (output-column-id=true)
_GO_BODY = """{
    "Table": "t",
    "Schema": "s",
    "Version": 0,
    "TableColumns": [
        {
            "ColumnId": "1",
            "ColumnName": "a",
            "ColumnType": "INT",
            "ColumnPrecision": "11",
            "ColumnNullable": "false",
            "ColumnIsPk": "true"
        },
        {
            "ColumnId": "2",
            "ColumnName": "b",
            "ColumnType": "VARCHAR",
            "ColumnDefault": "x \\u0026 \\u003cy\\u003e",
            "ColumnPrecision": "20"
        }
    ],
    "TableColumnsTotal": 2
}"""
_GO_FILE = """{
    "Table": "t",
    "Schema": "s",
    "Version": 1,
    "TableVersion": 7,
    "Query": "",
    "Type": 0,
    "TableColumns": [
        {
            "ColumnId": "2",
            "ColumnName": "b",
            "ColumnType": "VARCHAR",
            "ColumnDefault": "x \\u0026 \\u003cy\\u003e",
            "ColumnPrecision": "20"
        },
        {
            "ColumnId": "1",
            "ColumnName": "a",
            "ColumnType": "INT",
            "ColumnPrecision": "11",
            "ColumnNullable": "false",
            "ColumnIsPk": "true"
        }
    ],
    "TableColumnsTotal": 2
}"""


def test_html_escaped_default_and_column_ids_pass_their_checksum():
    crc = zlib.crc32(_GO_BODY.encode())
    sf = schemafile.parse(f"s/t/meta/schema_7_{crc:010d}.json", _GO_FILE.encode())
    assert sf.checksum == crc
    assert sf.table.column("b").default == "x & <y>"


def test_a_changed_schema_file_is_still_refused():
    crc = zlib.crc32(_GO_BODY.encode())
    with pytest.raises(schemafile.SchemaFileError, match="does not match"):
        schemafile.parse(f"s/t/meta/schema_7_{crc:010d}.json", _GO_FILE.replace('"20"', '"21"').encode())
    with pytest.raises(schemafile.SchemaFileError, match="TableVersion 7"):
        schemafile.parse(f"s/t/meta/schema_8_{crc:010d}.json", _GO_FILE.encode())


def test_writer_renders_text_as_go_does_and_its_names_verify():
    # the writer's checksum and content for a default with '&<>' are Go's bytes, which TiCDC re-marshals
    table = TableSchema("s", "t", (Column("b", "VARCHAR", length=20, default="x & <y>", has_default=True),
                                   Column("a", "INT", length=11, nullable=False, primary_key=True,
                                          handle_key=True)), 7)
    name, content = schemafile.render("s", table, 7)
    body = _GO_BODY.replace('            "ColumnId": "1",\n', "").replace('            "ColumnId": "2",\n', "")
    assert name == f"schema_7_{zlib.crc32(body.encode()):010d}.json"
    assert b'"x \\u0026 \\u003cy\\u003e"' in content
    assert schemafile.parse(f"s/t/meta/{name}", content).table == table


def test_source_reads_ticdc_schema_files_with_numeric_defaults():
    got = _events({"uri": str(DATA / "checksum")})
    rows = [(p, ev.row) for p, ev in got if type(ev) is RowChange]
    assert [r["Id"] for p, r in rows if p == "schema1/table1"] == [1, 2]
    assert [r for p, r in rows if p == "test/table1"] == [{"col1": 5, "col2": "x&<y>"}]


# ----------------------------------------------------------------------------- 2. database DDLs


def test_database_schema_file_is_a_ddl_before_the_tables_records():
    got = _events({"uri": str(DATA / "database")})
    first = got[0][1]
    assert type(first) is DDLEvent and first.table_name == "" and first.schema == "schema1"
    assert (first.query, first.ddl_type, first.commit_ts) == ("CREATE DATABASE `schema1`", 1, 441349361156227000)
    assert [type(ev).__name__ for _, ev in got] == ["DDLEvent", "DDLEvent", "RowChange", "RowChange"]
    assert got[1][1].query.startswith("CREATE TABLE")


def test_database_ddl_position_resumes_without_repeating_it(tmp_path):
    settings = {"uri": str(DATA / "database")}
    src = make_source(settings)
    src.open(None, "schema1/table1")
    first = src.read(1)
    assert len(first) == 1
    again = make_source(settings)
    again.open(first[0].position, "schema1/table1")
    rest = []
    while batch := again.read(100):
        rest += batch
    store = default_store()
    assert [type(from_record(r, store)).__name__ for r in rest] == ["DDLEvent", "RowChange", "RowChange"]
    # a position of the data written before database DDLs surfaced: the older DDL is not repeated
    assert _Cursor.decode(b"441349361156227074|2023-05-09|1|1").db_done == 441349361156227074


def test_database_ddl_newer_than_every_table_version_follows_the_rows(tmp_path):
    lake = _copy("database", tmp_path)
    name, content = schemafile.render("schema1", None, 441349361156227999,
                                      "ALTER DATABASE `schema1` CHARACTER SET utf8mb4", 1)
    (lake / "schema1" / "meta" / name).write_bytes(content)
    got = [ev for _, ev in _events({"uri": str(lake)})]
    assert [type(ev).__name__ for ev in got] == ["DDLEvent", "DDLEvent", "RowChange", "RowChange", "DDLEvent"]
    assert got[-1].query.startswith("ALTER DATABASE") and got[-1].table_name == ""


def test_database_without_tables_is_its_own_partition(tmp_path):
    lake = tmp_path / "lake"
    shutil.copytree(DATA / "database" / "schema1" / "meta", lake / "schema1" / "meta")
    got = _events({"uri": str(lake)})
    assert [(p, ev.query) for p, ev in got] == [("schema1", "CREATE DATABASE `schema1`")]


def test_storage_destination_writes_the_database_ddl_back_under_ticdcs_name(tmp_path):
    records = [r for _, r in read_all({"uri": str(DATA / "database")})]
    dst = make_destination({"uri": str(tmp_path / "out")})
    assert dst.write(records) is None
    assert (tmp_path / "out/schema1/meta/schema_441349361156227000_3233644819.json").read_bytes() == \
        (DATA / "database/schema1/meta/schema_441349361156227000_3233644819.json").read_bytes()


# ----------------------------------------------------------------------------- 3. v6.5.0-7.0 layout


def test_legacy_layout_is_read_with_its_schema_json():
    got = _events({"uri": str(DATA / "legacy")})
    assert [type(ev).__name__ for _, ev in got] == ["DDLEvent", "RowChange", "RowChange"]
    assert got[0][1].query.startswith("CREATE TABLE") and got[1][1].row["LastName"] == "Smith"


# ----------------------------------------------------------------------------- 5. first contact


def test_missing_root_is_an_error_when_running_until_idle(tmp_path):
    src = make_source({"uri": str(tmp_path / "nope")})
    src.until_idle = True
    with pytest.raises(StorageRootError, match=str(tmp_path / "nope")):
        src.partitions()


def test_root_that_is_a_file_is_an_error_when_running_until_idle(tmp_path):
    (tmp_path / "lake").write_text("not a directory")
    src = make_source({"uri": str(tmp_path / "lake")})
    src.until_idle = True
    with pytest.raises(StorageRootError, match="does not exist"):
        src.partitions()


def test_missing_root_warns_while_streaming(tmp_path, caplog, monkeypatch):
    import cdcflow.connectors.storage.source as source_module

    src = make_source({"uri": str(tmp_path / "nope")})
    with caplog.at_level(logging.WARNING):
        assert list(src.partitions()) == [""]
        src.open(None, "")
        assert src.read(10) == []
        assert src.read(10) == []  # not again before the interval
        later = source_module.time.monotonic() + source_module.ROOT_WARNING_INTERVAL + 1
        monkeypatch.setattr(source_module.time, "monotonic", lambda: later)
        assert src.read(10) == []  # and again after it
    said = [r.getMessage() for r in caplog.records if str(tmp_path / "nope") in r.getMessage()]
    assert len(said) == 3 and all("does not exist" in m for m in said)


@pytest.mark.parametrize("written,read", [("none", "day"), ("day", "none"), ("month", "day"), ("day", "month")])
def test_date_layout_present_is_read_whatever_the_setting(tmp_path, written, read):
    lake = tmp_path / "lake"
    day = DATA / "checksum" / "schema1" / "table1" / "100" / "2023-05-09"
    dirs = {"none": "", "day": "2023-05-09", "month": "2023-05"}
    target = lake / "schema1" / "table1" / "100" / dirs[written]
    target.mkdir(parents=True)
    shutil.copy(day / "CDC00000000000000000001.csv", target / "CDC000001.csv")
    shutil.copytree(DATA / "checksum" / "schema1" / "table1" / "meta", lake / "schema1" / "table1" / "meta")
    got = _events({"uri": str(lake), "date-separator": read})
    assert [ev.row["Id"] for _, ev in got] == [1, 2]


def test_partition_directories_present_are_read_whatever_the_setting(tmp_path):
    lake = tmp_path / "lake"
    for pid in ("61", "62"):
        target = lake / "schema1" / "table1" / "100" / pid / "2023-05-09"
        target.mkdir(parents=True)
        shutil.copy(DATA / "checksum/schema1/table1/100/2023-05-09/CDC00000000000000000001.csv",
                    target / "CDC000001.csv")
    shutil.copytree(DATA / "checksum" / "schema1" / "table1" / "meta", lake / "schema1" / "table1" / "meta")
    got = _events({"uri": str(lake), "enable-partition-separator": "false"})
    assert [(p, ev.table.partition, ev.row["Id"]) for p, ev in got] == [
        ("schema1/table1/61", 61, 1), ("schema1/table1/61", 61, 2), ("schema1/table1/62", 62, 1),
        ("schema1/table1/62", 62, 2)]


def test_protocol_mismatch_is_named(tmp_path):
    lake = _copy("checksum", tmp_path)
    with pytest.raises(StorageReadError, match=r"CDC00000000000000000001\.csv is a csv data file.*protocol: csv"):
        _events({"uri": str(lake), "protocol": "canal-json"})


# ----------------------------------------------------------------------------- journeys: cdcflow run

PIPELINE = """\
version: "2.2"
pipelines:
  - id: ticdc
    connectors:
      - id: lake
        type: source
        plugin: builtin:storage
        settings:
{settings}
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: "{out}"
"""


def cdcflow_run(tmp_path: Path, settings: dict, *extra: str) -> tuple[subprocess.CompletedProcess, list]:
    out = tmp_path / "out.jsonl"
    body = "\n".join(f'          {k}: "{v}"' for k, v in settings.items())
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(PIPELINE.format(settings=body, out=out))
    proc = subprocess.run([sys.executable, "-m", "cdcflow.cli", "run", str(pipeline), "--until-idle",
                           "--state-dir", str(tmp_path / "state"), *extra], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    store = SchemaStore(str(tmp_path / "state" / "schemas.sqlite"))  # the store the run's executors used
    events = [from_record(r, store) for r in loads_lines(out.read_bytes(), store)] if out.exists() else []
    return proc, events


@pytest.mark.slow
def test_journey_ticdc_schema_files_and_database_ddl(tmp_path):
    # items 1 and 2: TiCDC-named schema files with numeric and '&<>' values, a database DDL first
    lake = _copy("database", tmp_path)
    shutil.copytree(DATA / "checksum" / "test", lake / "test")
    proc, events = cdcflow_run(tmp_path, {"uri": str(lake)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    def of(schema):
        return [ev for ev in events if (ev.schema if type(ev) is DDLEvent else ev.table.schema) == schema]

    schema1 = of("schema1")
    assert type(schema1[0]) is DDLEvent and schema1[0].query == "CREATE DATABASE `schema1`"
    assert schema1[0].table_name == "" and schema1[1].query.startswith("CREATE TABLE")
    assert [ev.row["Id"] for ev in schema1[2:]] == [1, 2]
    assert [ev.row for ev in of("test") if type(ev) is RowChange] == [{"col1": 5, "col2": "x&<y>"}]


@pytest.mark.slow
def test_journey_legacy_layout(tmp_path):
    proc, events = cdcflow_run(tmp_path, {"uri": str(DATA / "legacy")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [type(ev).__name__ for ev in events] == ["DDLEvent", "RowChange", "RowChange"]
    assert [ev.row["FirstName"] for ev in events[1:]] == ["Bob", "Alice"]


@pytest.mark.slow
def test_journey_missing_uri_is_an_error_naming_it(tmp_path):
    missing = tmp_path / "no-such-lake"
    proc, events = cdcflow_run(tmp_path, {"uri": str(missing)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert str(missing) in proc.stdout + proc.stderr and "does not exist" in proc.stdout + proc.stderr
    assert events == []


@pytest.mark.slow
def test_journey_missing_uri_is_a_warning_while_streaming(tmp_path):
    missing = tmp_path / "no-such-lake"
    out = tmp_path / "out.jsonl"
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(PIPELINE.format(settings=f'          uri: "{missing}"', out=out))
    proc = subprocess.Popen([sys.executable, "-m", "cdcflow.cli", "run", str(pipeline), "--state-dir",
                             str(tmp_path / "state")], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    seen: list[str] = []
    threading.Thread(target=lambda: seen.extend(proc.stdout), daemon=True).start()

    def warned() -> bool:
        return any(str(missing) in line and "does not exist" in line for line in list(seen))

    try:
        deadline = time.monotonic() + 180
        while not warned() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(8)  # micro-batches over the source's empty partition: still running, no output
        assert proc.poll() is None, "".join(seen)[-3000:]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    assert warned(), "".join(seen)[-3000:]
    assert not out.exists() or out.read_bytes() == b""


@pytest.mark.slow
def test_journey_date_separator_none_tree_read_with_the_default(tmp_path):
    lake = tmp_path / "lake"
    target = lake / "schema1" / "table1" / "100"
    target.mkdir(parents=True)
    shutil.copy(DATA / "checksum/schema1/table1/100/2023-05-09/CDC00000000000000000001.csv", target / "CDC000001.csv")
    shutil.copytree(DATA / "checksum/schema1/table1/meta", lake / "schema1/table1/meta")
    proc, events = cdcflow_run(tmp_path, {"uri": str(lake)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [ev.row["Id"] for ev in events] == [1, 2]
