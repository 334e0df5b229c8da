"""Consumer-side consistency for TiCDC streams (seed 003, reference §7).

``Dedup`` drops rows TiCDC sends again after it restarts (delivery is
at-least-once): per table the highest applied commit ts and the handle keys
applied at exactly that ts. commit ts is not unique across rows, so a row is a
replay when its ts is below the table's mark, or equal to it with a handle key
already applied. Its state is small and travels inside every record position,
so it survives restarts of cdcflow too.

``TransactionBuffer`` gives transaction-level consistency: rows wait per Kafka
partition until every partition has promised (resolved event / watermark) that
nothing older can still come; then they leave in commit-ts order. A DDL is a
barrier: it leaves after every row older than it and before every row newer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from ..ticdc.events import DDLEvent, ResolvedEvent, RowChange

Event = RowChange | DDLEvent | ResolvedEvent


class Dedup:
    """Replay filter for rows and DDL events (one instance per ordered stream)."""

    __slots__ = ("marks", "ddl_ts", "ddl_queries", "_handles")

    def __init__(self) -> None:
        self.marks: dict[str, list] = {}  # collection -> [commit ts, set of handle texts at that ts]
        self.ddl_ts = 0  # highest DDL commit ts applied
        self.ddl_queries: set[str] = set()  # queries applied at ddl_ts (broadcast copies share ts)
        self._handles: dict[int, tuple[Any, tuple[str, ...]]] = {}

    def _handle_text(self, ev: RowChange) -> str:
        t = ev.table
        hit = self._handles.get(id(t))
        if hit is None or hit[0] is not t:
            names = tuple(c.name for c in t.columns if c.handle_key)
            hit = self._handles[id(t)] = (t, names)
        row = ev.row or {}
        names = hit[1]
        if names:
            return repr(tuple(row.get(n) for n in names))
        return repr(tuple(sorted(row.items())))  # no handle key: the whole row identifies it

    def admit_row(self, ev: RowChange) -> bool:
        """True for a row to apply, False for a replay. Rows without a commit ts (0) are always applied."""
        ts = ev.commit_ts
        if not ts:
            return True
        coll = ev.table.collection
        mark = self.marks.get(coll)
        if mark is None or ts > mark[0]:
            self.marks[coll] = [ts, {self._handle_text(ev)}]
            return True
        if ts < mark[0]:
            return False
        h = self._handle_text(ev)
        if h in mark[1]:
            return False
        mark[1].add(h)
        return True

    def admit_ddl(self, ev: DDLEvent) -> bool:
        if ev.commit_ts < self.ddl_ts or (ev.commit_ts == self.ddl_ts and ev.query in self.ddl_queries):
            return False
        if ev.commit_ts > self.ddl_ts:
            self.ddl_ts = ev.commit_ts
            self.ddl_queries = set()
        self.ddl_queries.add(ev.query)
        return True

    def state(self) -> list:
        """JSON-able snapshot (for a position)."""
        return [{c: [m[0], sorted(m[1])] for c, m in self.marks.items()}, self.ddl_ts, sorted(self.ddl_queries)]

    @classmethod
    def from_state(cls, data: list | None) -> "Dedup":
        d = cls()
        if data:
            marks, d.ddl_ts, queries = data
            d.marks = {c: [int(m[0]), set(m[1])] for c, m in marks.items()}
            d.ddl_queries = set(queries)
        return d


@dataclass(slots=True)
class Pending:
    """One buffered event and where it was read (message offset, index of the event in the message)."""

    ts: int
    order: int  # 0 row, 1 DDL: at equal ts rows leave first
    partition: str
    offset: int
    index: int
    event: Event
    done: bool = False


class TransactionBuffer:
    """Per-partition buffers released up to the minimum resolved ts over all partitions."""

    def __init__(self, partitions: list[str], resume: dict[str, tuple[int, int]]):
        self.partitions = list(partitions)
        self.resolved: dict[str, int | None] = {p: None for p in partitions}
        self.pending: dict[str, deque[Pending]] = {p: deque() for p in partitions}
        self.consumed: dict[str, tuple[int, int]] = dict(resume)  # where reading would continue
        self.frontier = 0  # highest global resolved ts released so far

    def add(self, partition: str, event: Event, offset: int, index: int, count: int) -> None:
        """Buffer one event of the message at ``offset`` (``index`` of ``count`` events)."""
        t = type(event)
        if t is ResolvedEvent:
            self._advance(partition, event.ts)
        elif t is DDLEvent:
            self.pending[partition].append(Pending(event.commit_ts, 1, partition, offset, index, event))
            # TiCDC writes a DDL after every older row of this partition: it doubles as a resolved ts
            self._advance(partition, event.commit_ts)
        else:
            self.pending[partition].append(Pending(event.commit_ts, 0, partition, offset, index, event))
        self.consumed[partition] = (offset + 1, 0) if index + 1 >= count else (offset, index + 1)

    def _advance(self, partition: str, ts: int) -> None:
        cur = self.resolved[partition]
        if cur is None or ts > cur:
            self.resolved[partition] = ts

    def global_resolved(self) -> int | None:
        vals = self.resolved.values()
        if any(v is None for v in vals):
            return None
        return min(vals)  # type: ignore[type-var]

    def release(self) -> list[Pending]:
        """Entries complete under the global resolved ts, in (commit ts, rows before DDL) order.

        Entries are only marked done; ``resume`` then tells where each partition
        must be re-read from to rebuild what is still buffered.
        """
        limit = self.global_resolved()
        if limit is None:
            return []
        out: list[Pending] = []
        for q in self.pending.values():
            out.extend(e for e in q if e.ts <= limit and not e.done)
        out.sort(key=lambda e: (e.ts, e.order, e.partition, e.offset, e.index))
        if limit > self.frontier:
            self.frontier = limit
        return out

    def mark_done(self, entry: Pending) -> None:
        entry.done = True
        q = self.pending[entry.partition]
        while q and q[0].done:
            q.popleft()

    def resume(self) -> dict[str, tuple[int, int]]:
        """Per partition: (offset, events to skip in that message) to continue from after a restart."""
        out = {}
        for p, q in self.pending.items():
            if q:
                out[p] = (q[0].offset, q[0].index)
            elif p in self.consumed:
                out[p] = self.consumed[p]
        return out

    def buffered(self) -> int:
        return sum(len(q) for q in self.pending.values())
