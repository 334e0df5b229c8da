"""``cdc.filter``: keep or drop whole tables, and keep or drop columns, by pattern.

Dropping at the start of a pipeline is the cheapest way to shed tables and
columns no destination wants (and PII no one should receive). Tables are judged
by ``opencdc.collection``; dropped records count as acknowledged. Column rules
change ``.Payload.Before`` / ``.Payload.After`` of data records only: keys (the
row's identity) and control records stay as they are.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from cdcflow.errors import ConfigError
from cdcflow.params import Parameter, ParamType
from cdcflow.record import META_COLLECTION, META_CONTROL, Record
from cdcflow.sdk import FILTERED, Result, Transform

from .base import plugin_name
from .patterns import ColumnSet, NameSet

_META_TABLE = "ticdc.table"
_CONTROL_DDL = "ddl"


class CdcFilter(Transform):
    name = "cdc.filter"
    version = "v0.1.0"
    summary = "Keep or drop tables and columns by pattern."
    description = (
        "Drops records of tables (collections) not matching `tables.include` (when set) or matching "
        "`tables.exclude`; removes columns matching `columns.exclude`, or not matching `columns.include` (when "
        "set), from .Payload.Before and .Payload.After. Patterns are comma- or newline-separated globs (regular "
        "expressions with `regex: true`); a column pattern matches the column name or `<collection>.<column>`. "
        "DDL records of dropped tables are dropped too; resolved records, schema-level DDL and records without "
        "a collection pass."
    )
    author = "cdcflow"
    parameters = {
        "tables.include": Parameter(description="Tables to keep, e.g. shop.*, shop_*.orders_*."),
        "tables.exclude": Parameter(description="Tables to drop, e.g. *.tmp_*, audit.*."),
        "columns.include": Parameter(description="Columns to keep (all others are removed), e.g. id, shop.users.name."),
        "columns.exclude": Parameter(description="Columns to remove, e.g. password, *.users.ssn."),
        "regex": Parameter(ParamType.BOOL, default="false", description="Patterns are regular expressions, not globs."),
    }

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        plugin = plugin_name(self)
        regex = bool(config["regex"])
        self._include = NameSet.parse(config.get("tables.include"), regex, plugin, "tables.include")
        self._exclude = NameSet.parse(config.get("tables.exclude"), regex, plugin, "tables.exclude")
        self._keep_columns = ColumnSet.parse(config.get("columns.include"), regex, plugin, "columns.include")
        self._drop_columns = ColumnSet.parse(config.get("columns.exclude"), regex, plugin, "columns.exclude")
        if not (self._include or self._exclude or self._keep_columns or self._drop_columns):
            raise ConfigError(plugin, None, "required",
                              "set at least one of tables.include, tables.exclude, columns.include, columns.exclude")
        if self._keep_columns and self._drop_columns:
            raise ConfigError(plugin, "columns.include", "conflict",
                              "set columns.include or columns.exclude, not both")
        self._tables: dict[str, bool] = {}

    def _keep_table(self, collection: str) -> bool:
        hit = self._tables.get(collection)
        if hit is None:
            hit = (not self._include or self._include.match(collection)) and not self._exclude.match(collection)
            if len(self._tables) > 65536:
                self._tables.clear()
            self._tables[collection] = hit
        return hit

    def process(self, records: Sequence[Record]) -> list[Result]:
        judge_tables = bool(self._include or self._exclude)
        drop, keep = self._drop_columns, self._keep_columns
        out: list[Result] = []
        for r in records:
            md = r.metadata
            collection = md.get(META_COLLECTION)
            control = md.get(META_CONTROL)
            if control is not None:
                if judge_tables and control == _CONTROL_DDL and collection and md.get(_META_TABLE) \
                        and not self._keep_table(collection):
                    out.append(FILTERED)
                else:
                    out.append(r)
                continue
            if collection is None:
                out.append(r)
                continue
            if judge_tables and not self._keep_table(collection):
                out.append(FILTERED)
                continue
            if drop or keep:
                for row in (r.before, r.after):
                    if type(row) is not dict:
                        continue
                    doomed = drop.matching(collection, row) if drop else keep.not_matching(collection, row)
                    for column in doomed:
                        row.pop(column, None)
            out.append(r)
        return out
