"""ENUM/SET members of a CSV table: TiCDC's schema file has no place for them, but the schema file
of a version a DDL started carries the DDL as ``Query``. The storage source takes the members a
``CREATE TABLE`` defines and keeps them for later versions whose DDL leaves the column alone."""

from __future__ import annotations

import dataclasses
import json

from cdcflow.connectors.generator import SOURCE_PARAMS as GEN_PARAMS
from cdcflow.connectors.generator import GeneratorSource
from cdcflow.connectors.ticdc.events import DDLEvent, RowChange, from_record, to_record
from cdcflow.connectors.ticdc.tidb import Column
from cdcflow.params import validate
from cdcflow.schemas import default_store
from helpers.storage import make_destination, read_all

CREATE = ("CREATE TABLE `all_types` (`id` BIGINT PRIMARY KEY, `c_enum` ENUM('red','green','blue'), "
          "`c_set` SET('a','b','c','d'))")


def _records():
    """Generator rows, a DDL adding a column, rows of the new version."""
    store = default_store()
    g = GeneratorSource()
    g.configure(validate("generator", GEN_PARAMS, {"format.type": "tidb", "recordCount": "20", "seed": "3"}))
    g.open(None, "0")
    events = [from_record(r, store) for r in g.read(20)]
    old = events[0].table
    bare = tuple(dataclasses.replace(c, elements=()) for c in old.columns)  # as a CSV reader sees them
    new = dataclasses.replace(old, columns=old.columns + (Column("c_added", "INT"),), index={})
    ddl = DDLEvent(old.schema, old.table, f"ALTER TABLE `{old.table}` ADD COLUMN `c_added` INT",
                   events[9].commit_ts + 1, 5, new)
    out = events[:10] + [ddl] + [RowChange(new, ev.kind, ev.commit_ts + 1, dict(ev.row, c_added=1), None)
                                 for ev in events[10:]]
    return bare, [to_record(e, str(i).encode(), store) for i, e in enumerate(out)]


def _members(tmp_path, query: str | None):
    settings = {"uri": str(tmp_path), "protocol": "csv"}
    bare, records = _records()
    assert all(not c.elements for c in bare)
    d = make_destination(settings)
    assert d.write(records) is None
    meta = tmp_path / "cdcflow_gen" / "all_types" / "meta"
    first = sorted(meta.iterdir(), key=lambda p: int(p.name.split("_")[1]))[0]
    if query is not None:  # the first version as TiCDC writes it when a CREATE TABLE started it
        doc = json.loads(first.read_text())
        doc["Query"], doc["Type"] = query, 3
        first.write_text(json.dumps(doc, indent=4))
    store = default_store()
    out = {}
    for _, r in read_all(settings):
        ev = from_record(r, store)
        if type(ev) is RowChange:
            t = ev.table
            out.setdefault(len(t.columns), {c.name: c.elements for c in t.columns if c.type in ("ENUM", "SET")})
    return out


def test_members_from_create_table_carried_to_the_next_version(tmp_path):
    got = _members(tmp_path, CREATE)
    assert len(got) == 2  # two table versions (before and after the ALTER)
    for members in got.values():  # the ALTER of version 2 does not define them: carried over
        assert members == {"c_enum": ("red", "green", "blue"), "c_set": ("a", "b", "c", "d")}


def test_without_a_ddl_the_members_stay_unknown(tmp_path):
    got = _members(tmp_path, None)
    assert len(got) == 2
    for members in got.values():
        assert members == {"c_enum": (), "c_set": ()}
