"""What every TiCDC codec decodes to and encodes from.

Codecs turn bytes into ``RowChange`` / ``DDLEvent`` / ``ResolvedEvent`` and back;
``to_record`` / ``from_record`` map those to and from OpenCDC records, so the
mapping to OpenCDC exists once for all formats. (Contract fixed here; the
mapping functions are implemented in this module.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdcflow.tidb import TableSchema

INSERT, UPDATE, DELETE = "insert", "update", "delete"


@dataclass(slots=True)
class RowChange:
    """One DML row. ``row`` is the new image (insert/update) or the deleted row
    (delete; may hold only the handle key when the format carries only that);
    ``old`` is the pre-image of an update when the format has one."""

    table: TableSchema
    kind: str
    commit_ts: int
    row: dict | None
    old: dict | None = None
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class DDLEvent:
    """A schema change. ``ddl_type`` is TiDB's DDL action code when known.
    ``table`` is the table's schema after the DDL when the format carries it."""

    schema: str
    table_name: str
    query: str
    commit_ts: int
    ddl_type: int | None = None
    table: TableSchema | None = None
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class ResolvedEvent:
    """Resolved ts (open protocol) or watermark (canal-json): no later row on this
    partition has a smaller commit ts."""

    ts: int
    extra: dict[str, str] = field(default_factory=dict)


Event = RowChange | DDLEvent | ResolvedEvent
