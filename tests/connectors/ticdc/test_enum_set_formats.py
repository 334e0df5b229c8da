"""ENUM/SET between every pair of formats (docs/codec-cross-format.md, "ENUM and SET"):

- Avro, CSV and canal-json content-compatible (on read) give element names; canal-json (default)
  and open protocol write and read the 1-based index / bitmask.
- A target that writes names gets the names; one that writes indexes gets them when the
  elements are known; otherwise ``UnrepresentableValue`` names table, column and value.
- What each source knows of the elements: Avro (``allowed``) and content-compatible canal-json
  (``mysqlType``) carry them; default canal-json and open protocol do not; CSV's schema file has
  no place for them, so only the DDL in its ``Query`` tells them (TiCDC writes it there).
"""

from __future__ import annotations

import dataclasses

import pytest

from cdcflow.connectors.storage import schemafile
from cdcflow.connectors.ticdc import convert
from cdcflow.connectors.ticdc.avro import StoreRegistry
from cdcflow.connectors.ticdc.errors import UnrepresentableValue
from cdcflow.connectors.ticdc.events import INSERT, RowChange
from cdcflow.schemas import SchemaStore
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

TABLE = TableSchema("db", "t", (
    Column("id", "INT", nullable=False, primary_key=True, handle_key=True),
    Column("e", "ENUM", elements=("red", "green", "blue")),
    Column("s", "SET", elements=("a", "b", "c")),
))
ROWS = [{"id": 1, "e": "green", "s": "a,c"}, {"id": 2, "e": "red", "s": ""}, {"id": 3, "e": None, "s": None}]
INDEXES = [{"id": 1, "e": "2", "s": "5"}, {"id": 2, "e": "1", "s": "0"}, {"id": 3, "e": None, "s": None}]
CREATE = "CREATE TABLE `t` (`id` INT PRIMARY KEY, `e` ENUM('red','green','blue'), `s` SET('a','b','c'))"

# source format -> (its options, what its decoder gives: "names" or "indexes")
FORMATS = {
    "avro": ({"enable-tidb-extension": "true"}, "names"),
    "canal-json": ({"enable-tidb-extension": True}, "indexes"),
    "canal-json-cc": ({"enable-tidb-extension": True, "content-compatible": True}, "names"),
    "csv": ({"include-commit-ts": True}, "names"),
    "csv+ddl": ({"include-commit-ts": True}, "names"),
    "open-protocol": ({}, "indexes"),
}
KNOWS_ELEMENTS = {"avro", "canal-json-cc", "csv+ddl"}
WRITES_NAMES = {"avro", "csv", "csv+ddl"}
TARGETS = ["avro", "canal-json", "canal-json-cc", "csv", "open-protocol"]


@pytest.fixture(scope="module")
def registry():
    store = SchemaStore()
    yield StoreRegistry(store)
    store.close()


def _codec(fmt, registry):
    base = fmt.split("+")[0].replace("-cc", "")
    return convert.codec_for(base, FORMATS[fmt][0], registry=registry, now_ms=lambda: 0)


def _through_schema_file(table: TableSchema, query: str) -> TableSchema:
    """What a reader knows of ``table`` from its storage schema file (with ``query`` as Query)."""
    name, data = schemafile.render(table.schema, table, 100, query, 3 if query else 0)
    sf = schemafile.parse(name, data)
    return schemafile.with_ddl_elements(sf.table, sf.query)  # as the storage source reads it


def _hop(fmt, events, registry):
    codec = _codec(fmt, registry)
    messages = codec.encode(events)
    if fmt.startswith("csv"):  # the table travels as the storage sink's schema file
        messages = [(_through_schema_file(t, CREATE if fmt == "csv+ddl" else ""), data) for t, data in messages]
    return codec.decode(messages)


def _values(events):
    return [{k: ev.row[k] for k in ("id", "e", "s")} for ev in events]


@pytest.mark.parametrize("src", list(FORMATS))
@pytest.mark.parametrize("dst", TARGETS)
def test_enum_set_every_pair(registry, src, dst):
    events = [RowChange(TABLE, INSERT, (1_700_000_000_000 + i) << 18, r) for i, r in enumerate(ROWS)]
    first = _hop(src, events, registry)
    gives = FORMATS[src][1]
    assert _values(first) == (ROWS if gives == "names" else INDEXES)
    if dst in WRITES_NAMES and gives == "indexes":
        # an index is never written as if it were a name ("0" -> '' aside, with or without elements)
        with pytest.raises(UnrepresentableValue) as info:
            _hop(dst, first, registry)
        assert (info.value.table, info.value.column, info.value.value) == ("db.t", "e", "2")
        return
    if dst not in WRITES_NAMES and gives == "names" and src not in KNOWS_ELEMENTS:
        # a name needs the elements to become an index: refused, naming table, column and value
        with pytest.raises(UnrepresentableValue) as info:
            _hop(dst, first, registry)
        assert (info.value.table, info.value.column, info.value.value) == ("db.t", "e", "green")
        return
    second = _hop(dst, first, registry)
    reads_names = dst in WRITES_NAMES or (dst == "canal-json-cc" and (gives == "names"))
    assert _values(second) == (ROWS if reads_names else INDEXES)


def test_csv_schema_file_members_from_its_ddl():
    plain = _through_schema_file(TABLE, "")
    assert [c.elements for c in plain.columns[1:]] == [(), ()]
    with_ddl = _through_schema_file(TABLE, CREATE)
    assert [c.elements for c in with_ddl.columns[1:]] == [("red", "green", "blue"), ("a", "b", "c")]
    # a DDL that does not define the column leaves it without members (the storage source then
    # carries them over from the previous version)
    other = _through_schema_file(TABLE, "ALTER TABLE `t` ADD COLUMN `x` INT")
    assert [c.elements for c in other.columns[1:]] == [(), ()]


def test_content_compatible_mysql_type_without_members_is_the_bare_type(registry):
    """Index text from a source without members: content-compatible canal-json writes the bare
    ``enum``/``set`` type, never ``enum()`` (which would claim the column has no members)."""
    import json

    table = dataclasses.replace(TABLE, columns=tuple(dataclasses.replace(c, elements=()) for c in TABLE.columns),
                                index={})
    ev = RowChange(table, INSERT, 1 << 18, INDEXES[0])
    (msg,) = _codec("canal-json-cc", registry).encode([ev])
    doc = json.loads(msg)
    assert doc["mysqlType"]["e"] == "enum" and doc["mysqlType"]["s"] == "set"
    assert doc["data"][0]["e"] == "2"
