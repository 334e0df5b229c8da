"""``cdc.dedup``: drop rows TiCDC delivers again after a restart (replays).

TiCDC sends each change at least once; after a processor restart it resends
changes from its checkpoint, so a partition's stream may repeat rows it already
carried. Within one partition, the rows of one table arrive in commit-ts order,
so a consumer only has to remember, per table, the highest commit-ts it applied
(TiCDC's own consumer rule) plus the rows it applied at exactly that ts (one
transaction's rows may be split across the replay point):

- commit-ts below the table's highest → a replay, dropped;
- equal → dropped if the same row (handle key, operation) was already applied;
- above → applied; it becomes the table's highest and the row set restarts.

Memory is one entry per (stream, table) plus the keys of one commit-ts.
Streams are separated by the values of the metadata keys in ``scope``. The
table is the source table (``ticdc.schema``, ``ticdc.table``, ``ticdc.partition``),
not the collection, so dedup after ``cdc.route`` keeps merged shards apart.
Records without ``ticdc.commit-ts`` and control records pass untouched.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from cdcflow.errors import ConfigError
from cdcflow.params import Parameter, ParamType
from cdcflow.record import META_COLLECTION, META_CONTROL, Record
from cdcflow.sdk import FILTERED, Failed, Result, Transform

from .base import plugin_name, to_json
from .patterns import split_list

META_COMMIT_TS = "ticdc.commit-ts"
META_SCHEMA = "ticdc.schema"
META_TABLE = "ticdc.table"
META_PARTITION = "ticdc.partition"
#: metadata key the engine is asked to set to the source partition a record was read from
META_SOURCE_PARTITION = "cdcflow.source.partition"
DEFAULT_SCOPE = f"conduit.source.connector.id,{META_SOURCE_PARTITION}"


def row_identity(record: Record) -> Any:
    """The handle key (or, for tables without one, the row image) plus the operation."""
    key = record.key
    if type(key) is dict:
        try:
            ident: Any = tuple(key.items())
            hash(ident)
        except TypeError:
            ident = to_json(key)
    elif key is not None:
        ident = key
    else:
        ident = to_json({"before": record.before, "after": record.after})
    return (ident, record.operation)


class _TableState:
    __slots__ = ("ts", "applied")

    def __init__(self, ts: int):
        self.ts = ts
        self.applied: set = set()


class CdcDedup(Transform):
    name = "cdc.dedup"
    version = "v0.1.0"
    summary = "Drop replayed TiCDC rows by (table, handle key, commit-ts)."
    description = (
        "Drops data records whose `ticdc.commit-ts` is below the highest commit-ts already passed for the same "
        "table in the same stream, or equal to it for a row (handle key and operation) already passed. Streams "
        "are told apart by the metadata keys in `scope`; tables by ticdc.schema/ticdc.table/ticdc.partition "
        "(else the collection). Records without a commit-ts and control records pass. Memory: one entry per "
        "table plus the rows of one commit-ts."
    )
    author = "cdcflow"
    parameters = {
        "scope": Parameter(
            ParamType.STRING, default=DEFAULT_SCOPE,
            description="Comma-separated metadata keys whose values separate independent streams (partitions).",
        ),
    }

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        scope = split_list(config.get("scope") or "")
        if any(not k for k in scope):
            raise ConfigError(plugin_name(self), "scope", "format", "empty metadata key")
        self._scope = tuple(scope)
        self._state: dict[tuple, _TableState] = {}
        self.dropped = 0

    def _table_key(self, md: Mapping[str, str]) -> tuple:
        table = md.get(META_TABLE)
        source = (md.get(META_SCHEMA), table, md.get(META_PARTITION)) if table else (md.get(META_COLLECTION),)
        return tuple(md.get(k) for k in self._scope) + source

    def process(self, records: Sequence[Record]) -> list[Result]:
        state = self._state
        out: list[Result] = []
        for r in records:
            md = r.metadata
            ts_text = md.get(META_COMMIT_TS)
            if ts_text is None or META_CONTROL in md:
                out.append(r)
                continue
            try:
                ts = int(ts_text)
            except ValueError:
                out.append(Failed(f"metadata {META_COMMIT_TS!r} is not an integer: {ts_text!r}"))
                continue
            key = self._table_key(md)
            table = state.get(key)
            if table is None:
                table = state[key] = _TableState(ts)
            elif ts < table.ts:
                self.dropped += 1
                out.append(FILTERED)
                continue
            elif ts > table.ts:
                table.ts = ts
                table.applied.clear()
            ident = row_identity(r)
            if ident in table.applied:
                self.dropped += 1
                out.append(FILTERED)
                continue
            table.applied.add(ident)
            out.append(r)
        return out
