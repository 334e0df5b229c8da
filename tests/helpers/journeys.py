"""The journey matrix's formats, what each carries, and the expected stream of a (source, destination) cell.

``FACTS`` is the matrix's side of docs/codec-cross-format.md's table "What each format carries":
``test_doc_table_agrees_with_the_matrix`` reads the doc's cells and maps them onto these facts, and
the cells compare the `cdcflow run` output with ``expected_rows`` built from them — so the doc,
the model and what the pipelines do must all agree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cdcflow.connectors.generator import all_types_columns

FORMATS = ("kafka-avro", "kafka-canal-json", "kafka-open-protocol", "storage-csv", "storage-canal-json", "file")
#: the table the input's DDL changes (a table version starts there)
DDL_TABLE = "shop.orders"


def read_lines(path: Path) -> list[dict]:
    """The OpenCDC JSON lines of a ``file`` destination's output (none when it wrote nothing)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@dataclass(frozen=True)
class Facts:
    doc_column: str  # the column of the doc's table that describes this format as the matrix sets it up
    old_image: bool  # an UPDATE's before-image survives
    deleted_row: str  # "full" or "key only"
    elements: bool  # ENUM/SET member names survive (without them: 1-based index / bitmask text)
    names: bool  # the format writes ENUM/SET values as names (so an index text cannot be written)
    update_by_old_image: bool = False  # an UPDATE is told from an INSERT only by its before-image
    members_known: bool = True  # a reader of the format knows each ENUM/SET column's member list
    indexes: bool = False  # the format writes ENUM/SET as index / bitmask (needs the member list)
    #: a key-only deleted row is written with every column of the table's current version, the key's
    #: values set, the others NULL (the storage destination; docs/codec-cross-format.md "Deletes and commit ts")
    fills_deleted_row: bool = False


FACTS: dict[str, Facts] = {
    "kafka-avro": Facts("Avro", old_image=False, deleted_row="key only", elements=True, names=True),
    # content-compatible on the destination (mysqlType carries ENUM/SET members, DECIMAL scale)
    "kafka-canal-json": Facts("canal-json content-compatible", True, "full", True, False, indexes=True),
    "kafka-open-protocol": Facts("open protocol", True, "full", False, False, update_by_old_image=True,
                                 indexes=True),
    # include-commit-ts=true, output-old-value left at its default (false); the schema files the storage
    # destination writes for rows without a DDL have no member lists (docs/codec-cross-format.md, ENUM and SET)
    "storage-csv": Facts("CSV + schema file", False, "full", True, True, members_known=False,
                         fills_deleted_row=True),
    "storage-canal-json": Facts("canal-json content-compatible", True, "full", True, False, indexes=True,
                                fills_deleted_row=True),
    "file": Facts("", True, "full", True, False),  # OpenCDC JSON lines: lossless
}
#: the options a doc cell "with `output-old-value`" depends on, as the matrix sets them
OUTPUT_OLD_VALUE = {"CSV + schema file": False, "open protocol": True}

_ELEMENTS = {c.name: c for c in all_types_columns() if c.type in ("ENUM", "SET")}


def _index_text(column: str, value):
    """ENUM → 1-based index, SET → bitmask, as decimal text (formats without members)."""
    if value is None or _is_index(value):
        return value
    col = _ELEMENTS[column]
    if col.type == "ENUM":
        return str(col.elements.index(value) + 1) if value else "0"
    members = set(value.split(",")) if value else set()
    return str(sum(1 << i for i, e in enumerate(col.elements) if e in members))


def _is_index(value) -> bool:
    return isinstance(value, str) and value.isdigit()


@dataclass
class Expected:
    rows: list[dict]  # records expected in the read-back, in input order
    refused: list[dict]  # records the destination must refuse (to its DLQ), with the reason


def expected_rows(src: str, dst: str, rows: list[dict], key: tuple[str, ...] = ("id",)) -> Expected:
    """The input's row records as they read back after ``src`` then ``dst``."""
    out, refused = [], []
    for rec in rows:
        before, after = rec["payload"]["before"], rec["payload"]["after"]
        columns = list(before) if before else []  # the table's columns when the row changed
        op = rec["operation"]
        ok = True
        known = True  # the generator knows every member list
        for fmt in (src, dst):
            f = FACTS[fmt]
            if f.indexes and not known and any(v and not _is_index(v) for img in (before, after) if img
                                               for c, v in img.items() if c in _ELEMENTS):
                ok = False  # a name without its member list has no index to write
                break
            if op == "update" and before is None and f.update_by_old_image:
                op = "create"  # an UPDATE without its old image reads back as an INSERT
            if f.names and any(_is_index(v) and v != "0" for img in (before, after) if img
                               for c, v in img.items() if c in _ELEMENTS):
                ok = False  # an index is never written as if it were a name
                break
            if f.names:  # index 0 / bitmask 0 are '' / the empty set with or without members
                before, after = ({c: "" if c in _ELEMENTS and v == "0" else v for c, v in img.items()}
                                 if img else img for img in (before, after))
            if not f.elements:
                before, after = ({c: _index_text(c, v) if c in _ELEMENTS else v for c, v in img.items()}
                                 if img else img for img in (before, after))
            if op == "update" and not f.old_image:
                before = None
            if op == "delete" and f.deleted_row == "key only":
                before = {k: before[k] for k in key}
            elif op == "delete" and f.fills_deleted_row and len(before) < len(columns):
                before = {c: before.get(c) if c in key else None for c in columns}
            known = known and f.members_known
        exp = {**rec, "operation": op, "payload": {"before": before, "after": after}}
        (out if ok else refused).append(exp)
    return Expected(out, refused)
