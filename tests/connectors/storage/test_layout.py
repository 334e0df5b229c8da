"""Byte-for-byte layout checks (seed 001), schema files, path escapes, numbering after restarts."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest
from cdcflow.connectors.storage import layout, schemafile
from cdcflow.connectors.storage.source import StorageReadError
from cdcflow.connectors.ticdc.events import (
    DELETE,
    INSERT,
    UPDATE,
    DDLEvent,
    RowChange,
    to_record,
)
from cdcflow.connectors.ticdc.tidb import Column, TableSchema
from cdcflow.errors import ConfigError
from cdcflow.schemas import default_store
from helpers.storage import make_destination, read_all

EMPLOYEE = TableSchema("hr", "employee", (
    Column("Id", "INT", nullable=False, primary_key=True, handle_key=True),
    Column("LastName", "VARCHAR", length=20),
    Column("FirstName", "VARCHAR", length=30),
    Column("HireDate", "DATE"),
    Column("OfficeLocation", "VARCHAR", length=20),
), version=433305438660591000)

SEED_CSV = (
    '"I","employee","hr",433305438660591626,101,"Smith","Bob","2014-06-04","New York"\r\n'
    '"U","employee","hr",433305438660591627,101,"Smith","Bob","2015-10-08","Los Angeles"\r\n'
    '"D","employee","hr",433305438660591629,101,"Smith","Bob","2017-03-13","Dallas"\r\n'
    '"I","employee","hr",433305438660591630,102,"Alex","Alice","2017-03-14","Shanghai"\r\n'
    '"U","employee","hr",433305438660591630,102,"Alex","Alice","2018-06-15","Beijing"\r\n'
)


def _emp(id_, last, first, date, office):
    return {"Id": id_, "LastName": last, "FirstName": first, "HireDate": dt.date.fromisoformat(date),
            "OfficeLocation": office}


def employee_records():
    store = default_store()
    evs = [
        RowChange(EMPLOYEE, INSERT, 433305438660591626, _emp(101, "Smith", "Bob", "2014-06-04", "New York")),
        RowChange(EMPLOYEE, UPDATE, 433305438660591627, _emp(101, "Smith", "Bob", "2015-10-08", "Los Angeles")),
        RowChange(EMPLOYEE, DELETE, 433305438660591629, _emp(101, "Smith", "Bob", "2017-03-13", "Dallas")),
        RowChange(EMPLOYEE, INSERT, 433305438660591630, _emp(102, "Alex", "Alice", "2017-03-14", "Shanghai")),
        RowChange(EMPLOYEE, UPDATE, 433305438660591630, _emp(102, "Alex", "Alice", "2018-06-15", "Beijing")),
    ]
    return [to_record(e, f"p/{i}".encode(), store) for i, e in enumerate(evs)]


def test_database_schema_checksum_matches_seed():
    name, content = schemafile.render("schema1", None, 441349361156227000, "CREATE DATABASE `schema1`", 1)
    assert name == "schema_441349361156227000_3233644819.json"
    assert content.decode() == (
        '{\n    "Table": "",\n    "Schema": "schema1",\n    "Version": 1,\n'
        '    "TableVersion": 441349361156227000,\n    "Query": "CREATE DATABASE `schema1`",\n'
        '    "Type": 1,\n    "TableColumns": null,\n    "TableColumnsTotal": 0\n}')


def test_employee_csv_layout_byte_for_byte(storage_uri):
    uri, extra = storage_uri
    d = make_destination({"uri": uri, "protocol": "csv", "include-commit-ts": "true", "date-separator": "none",
                          "file-index-width": "6", **extra})
    assert d.write(employee_records()) is None
    files = d.files
    v = EMPLOYEE.version
    assert files.read(f"hr/employee/{v}/CDC000001.csv").decode() == SEED_CSV
    assert files.read(f"hr/employee/{v}/meta/CDC.index") == b"CDC000001.csv\n"
    crc = schemafile.checksum("hr", EMPLOYEE)
    content = files.read(f"hr/employee/meta/schema_{v}_{crc:010d}.json")
    assert json.loads(content)["TableColumns"][0] == {
        "ColumnName": "Id", "ColumnType": "INT", "ColumnNullable": "false", "ColumnIsPk": "true"}
    assert list(json.loads(content)) == ["Table", "Schema", "Version", "TableVersion", "Query", "Type",
                                         "TableColumns", "TableColumnsTotal"]
    assert content.startswith(b'{\n    "Table": "employee",\n    "Schema": "hr",\n    "Version": 1,')
    assert json.loads(files.read("metadata")) == {"checkpoint-ts": 433305438660591630}
    # a second batch is the next file, and the index follows
    assert d.write(employee_records()[:1]) is None
    assert files.read(f"hr/employee/{v}/meta/CDC.index") == b"CDC000002.csv\n"
    assert files.read(f"hr/employee/{v}/CDC000001.csv").decode() == SEED_CSV


def test_paths_width_and_date_directories(tmp_path):
    d = make_destination({"uri": f"file://{tmp_path}", "date-separator": "day"})
    d.write(employee_records()[:1])
    ts = 433305438660591626
    day = dt.datetime.fromtimestamp((ts >> 18) / 1000, dt.timezone.utc).strftime("%Y-%m-%d")
    p = tmp_path / "hr" / "employee" / str(EMPLOYEE.version) / day
    assert sorted(os.listdir(p)) == ["CDC00000000000000000001.csv", "meta"]
    assert layout.date_dir(ts, "month") == day[:7] and layout.date_dir(ts, "year") == day[:4]


def test_restart_and_second_writer_continue_numbering_without_overwrite(tmp_path):
    settings = {"uri": str(tmp_path), "date-separator": "none", "file-index-width": "6"}
    v = EMPLOYEE.version
    d1 = make_destination(settings)
    d1.write(employee_records()[:2])
    d2 = make_destination(settings)  # a second writer (or a restart) on the same directory
    d2.write(employee_records()[2:3])
    d1.write(employee_records()[3:])  # d1's cached number is taken: it must move past it
    base = tmp_path / "hr" / "employee" / str(v)
    names = sorted(n for n in os.listdir(base) if n.startswith("CDC"))
    assert names == ["CDC000001.csv", "CDC000002.csv", "CDC000003.csv"]
    # the index names a file that was never written (crash between index and data): reused
    (base / "meta" / "CDC.index").write_text("CDC000007.csv\n")
    make_destination(settings).write(employee_records()[:1])
    assert (base / "CDC000007.csv").exists() and not (base / "CDC000004.csv").exists()
    rows = [r for _, r in read_all(settings)]
    assert len(rows) == 6
    assert not [n for n in os.listdir(base) if n.endswith(".tmp")]


@pytest.mark.parametrize("schema,table", [("..", "t"), ("hr", "../../etc"), ("a/b", "t"), ("hr", "t\x00x"),
                                          ("hr", "t\nx"), ("", "t"), ("hr", "meta"), ("metadata", "t")])
def test_path_escape_is_refused(tmp_path, schema, table):
    bad = TableSchema(schema, table, (Column("id", "INT", nullable=False, primary_key=True, handle_key=True),))
    store = default_store()
    good = employee_records()[0]
    recs = [to_record(RowChange(bad, INSERT, 1 << 18, {"id": 1}), b"x", store), good]
    d = make_destination({"uri": str(tmp_path / "root")})
    errors = d.write(recs)
    assert errors[0] is not None and "not allowed" in errors[0] and errors[1] is None
    for dirpath, _, _ in os.walk(tmp_path):
        assert os.path.realpath(dirpath).startswith(os.path.realpath(tmp_path / "root")) or dirpath == str(tmp_path)
    assert sorted(os.listdir(tmp_path / "root")) == ["hr", "metadata"]
    ddl = to_record(DDLEvent(schema, table, "DROP TABLE x", 5 << 18, 4), b"y", store)
    assert d.write([ddl])[0] is not None


def test_bad_csv_line_and_bad_schema_file_name_file_and_line(tmp_path):
    settings = {"uri": str(tmp_path), "date-separator": "none", "include-commit-ts": "true"}
    make_destination(settings).write(employee_records())
    v = EMPLOYEE.version
    f = tmp_path / "hr" / "employee" / str(v) / "CDC00000000000000000001.csv"
    lines = f.read_bytes().split(b"\r\n")
    lines[2] = lines[2].replace(b',"Dallas"', b"")  # wrong column count on line 3
    f.write_bytes(b"\r\n".join(lines))
    with pytest.raises(StorageReadError, match=r"CDC00000000000000000001\.csv line 3"):
        read_all(settings)
    lines[2] = lines[2] + b',"Dallas"'
    lines[1] = lines[1].replace(b"101", b"1x1")  # undecodable INT
    f.write_bytes(b"\r\n".join(lines))
    with pytest.raises(StorageReadError, match=r"line 2, column 5 \(Id\)"):
        read_all(settings)
    lines[1] = lines[1].replace(b"1x1", b"101")
    f.write_bytes(b"\r\n".join(lines))
    assert len(read_all(settings)) == 5
    (schema_file,) = (tmp_path / "hr" / "employee" / "meta").iterdir()
    schema_file.write_text(schema_file.read_text().replace('"Id"', '"Idx"'))
    with pytest.raises(StorageReadError, match="checksum in the name"):
        read_all(settings)
    schema_file.unlink()
    with pytest.raises(StorageReadError, match="no schema file"):
        read_all(settings)


def test_uri_query_and_discrete_settings(tmp_path):
    d = make_destination({"uri": f"file://{tmp_path}?protocol=canal-json&date-separator=none&file-index-width=8",
                          "date-separator": "year"})
    s = d.settings
    assert (s.format, s.date_separator, s.index_width, s.extension) == ("canal-json", "year", 8, "json")
    with pytest.raises(ConfigError):
        make_destination({"uri": f"ftp://host/x"})
    with pytest.raises(ConfigError):
        make_destination({"uri": f"{tmp_path}?bogus=1"})


def test_one_batch_across_days_and_tables_keeps_row_order_per_directory(tmp_path):
    """A batch whose runs span two days and two tables, with a record that cannot be written in
    the middle: each (table, day) directory gets one file holding its rows in arrival order, the
    bad record alone gets an error."""
    d = make_destination({"uri": f"file://{tmp_path}", "date-separator": "day", "include-commit-ts": "true"})
    store = default_store()
    day_ms = 86_400_000
    t0 = (1_700_000_000_000 // day_ms * day_ms + day_ms - 2) << 18  # 2 ms before a UTC midnight
    other = TableSchema("hr", "office", (Column("Id", "INT", nullable=False, primary_key=True, handle_key=True),),
                        version=5)
    evs = []
    for k in range(6):
        evs.append(RowChange(EMPLOYEE, INSERT, t0 + (k << 18), {"Id": k, "LastName": "a", "FirstName": "b",
                                                                "HireDate": dt.date(2020, 1, 1), "OfficeLocation": None}))
        evs.append(RowChange(other, UPDATE if k % 2 else DELETE, t0 + (k << 18), {"Id": 100 + k}, {"Id": 1} if k % 2 else None))
    records = [to_record(e, b"", store) for e in evs]
    records[4].after = {**records[4].after, "HireDate": "not a date"}  # employee row k=2
    errors = d.write(records)
    assert errors is not None and [i for i, e in enumerate(errors) if e] == [4] and "HireDate" in errors[4]
    days = [layout.date_dir(t0, "day"), layout.date_dir(t0 + (5 << 18), "day")]
    assert days[0] != days[1]
    got = {}
    for table, version in (("employee", EMPLOYEE.version), ("office", 5)):
        for day in days:
            text = (tmp_path / "hr" / table / str(version) / day / "CDC00000000000000000001.csv").read_text()
            got[(table, day)] = [line.split(",")[4] for line in text.splitlines()]
    assert got[("employee", days[0])] == ["0", "1"] and got[("employee", days[1])] == ["3", "4", "5"]
    assert got[("office", days[0])] == ["100", "101"] and got[("office", days[1])] == ["102", "103", "104", "105"]
