"""Consumer-side consistency for TiCDC streams (the consumer rules of TiCDC's MQ protocol design).

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
from typing import Any, Callable

import orjson

from ..ticdc.events import DDLEvent, ResolvedEvent, RowChange

Event = RowChange | DDLEvent | ResolvedEvent

INLINE_HANDLES = 32  # row identities positions carry themselves, over all tables; past this, an offset
INLINE_TABLES = 4  # tables with open marks positions carry themselves; past this, an offset


class Dedup:
    """Replay filter for rows and DDL events (one instance per ordered stream).

    A resolved ts R (the stream's promise that every row and DDL with commit ts <= R was sent)
    makes everything at or below R a replay: ``complete_ts``. Above it, per table, a mark: the
    highest applied commit ts and the rows applied at exactly that ts, identified by operation
    and handle key (TiCDC splits an update that changes a unique key into a delete and an
    insert of the same handle, in one transaction).

    The state goes into every record position, so it is kept as JSON too and rebuilt only
    where it changed: one fragment per table, the tail (DDL, ``complete_ts``) apart. It stays
    small whatever the transactions: while at most ``INLINE_TABLES`` tables have open marks,
    holding at most ``INLINE_HANDLES`` rows in all, they are written out; past that the position
    names one offset instead, the first row any open mark was set by (``["at", offset]``; marks
    are kept in the order they were set, so that is the first one's). Every row that shaped the marks lies at
    or after it, so a source restarted there reads from it again up to the resume point and
    admits those rows once more (``rebuild_start`` / ``rebuild_row`` / ``end_rebuild``): the
    marks come back exactly. ``admit_row_json`` is the hot path: admit and return the state.
    """

    __slots__ = ("marks", "ddl_ts", "ddl_queries", "complete_ts", "rebuild_from", "_open", "_ref", "_tables",
                 "_fragments", "_tail_json", "_json")

    def __init__(self) -> None:
        # collection -> [commit ts, row identities applied at that ts, offset of the first (-1: unknown)]
        self.marks: dict[str, list] = {}
        self.ddl_ts = 0  # highest DDL commit ts applied
        self.ddl_queries: set[str] = set()  # queries applied at ddl_ts (broadcast copies share ts)
        self.complete_ts = 0  # everything at or below it is a replay
        self.rebuild_from: int | None = None  # a restored state's marks are read again from this offset
        self._open = 0  # row identities held over all marks
        self._ref = False  # more than INLINE_HANDLES of them: positions name an offset instead
        # id(table) -> (table, collection, handle text function, collection as JSON)
        self._tables: dict[int, tuple[Any, str, Callable[[dict], str], bytes]] = {}
        self._fragments: dict[str, bytes] = {}  # collection -> JSON '"coll":[ts,[rows],at]'
        self._tail_json: bytes | None = None  # JSON 'ddl_ts,[queries],complete_ts'
        self._json: bytes | None = None  # state_json(), None when something changed since

    def _table(self, t: Any) -> tuple[Any, str, Callable[[dict], str], bytes]:
        info = self._tables.get(id(t))
        if info is None or info[0] is not t:
            if len(self._tables) > 1024:
                self._tables.clear()
            coll = t.collection
            handle = _handle_function(tuple(c.name for c in t.columns if c.handle_key))
            info = self._tables[id(t)] = (t, coll, handle, orjson.dumps(coll))
        return info

    def admit_row(self, ev: RowChange, at: int = -1) -> bool:
        """True for a row to apply, False for a replay. Rows without a commit ts (0) or with an
        estimated one are always applied (and set no mark: an estimate above the real commit ts
        would drop the table's next rows as replays; a delete applied twice is harmless). ``at`` is the offset the row was read at (-1: none; the marks are then always written out)."""
        return not ev.commit_ts or self.admit_row_json(ev, at) is not None

    def admit_row_json(self, ev: RowChange, at: int = -1) -> bytes | None:
        """``state_json()`` after admitting the row, or None for a replay."""
        ts = ev.commit_ts
        if not ts or ev.ts_estimated:
            return self.state_json()
        if ts <= self.complete_ts:
            return None
        t = ev.table
        info = self._tables.get(id(t))
        if info is None or info[0] is not t:
            info = self._table(t)
        coll = info[1]
        mark = self.marks.get(coll)
        if mark is None or ts > mark[0]:
            row = ev.row
            h = ev.kind[0] + info[2](row if row is not None else {})
            marks = self.marks
            if mark is not None:
                self._open -= len(mark[1])
                del marks[coll]  # to the end: marks stay in the order they were set
            self._open += 1
            mark = marks[coll] = [ts, {h}, at]
        elif ts < mark[0]:
            return None
        else:
            handles = mark[1]
            row = ev.row
            h = ev.kind[0] + info[2](row if row is not None else {})
            if h in handles:
                return None
            handles.add(h)
            self._open += 1
            if self._ref and self._json is not None:
                return self._json  # the position names the offset only: nothing changed
        if (self._open > INLINE_HANDLES or len(self.marks) > INLINE_TABLES) != self._ref:
            self._ref = not self._ref
            self._fragments.clear()
        if self._ref:
            self._json = None
            return self.state_json()
        if len(mark[1]) == 1:
            fragment = b"%s:[%d,[%s],%d]" % (info[3], ts, orjson.dumps(h), mark[2])
        else:
            fragment = b"%s:[%d,%s,%d]" % (info[3], ts, orjson.dumps(sorted(mark[1])), mark[2])
        fragments = self._fragments
        fragments[coll] = fragment
        if len(fragments) != 1 or len(self.marks) != 1:
            self._json = None
            return self.state_json()
        tail = self._tail_json
        if tail is None:
            tail = self._tail()
        text = self._json = b"[{%s},%s]" % (fragment, tail)
        return text

    def admit_ddl(self, ev: DDLEvent) -> bool:
        ts = ev.commit_ts
        if ts <= self.complete_ts or ts < self.ddl_ts or (ts == self.ddl_ts and ev.query in self.ddl_queries):
            return False
        if ts > self.ddl_ts:
            self.ddl_ts = ts
            self.ddl_queries = set()
        self.ddl_queries.add(ev.query)
        self._tail_json = self._json = None
        return True

    def complete_through(self, ts: int) -> None:
        """The stream promised every row and DDL with commit ts <= ``ts`` has been sent (a resolved
        ts, or the released frontier): the marks at or below it go, one number stands for them."""
        if ts <= self.complete_ts:
            return
        self.complete_ts = ts
        marks, fragments = self.marks, self._fragments
        for coll in [c for c, m in marks.items() if m[0] <= ts]:
            self._open -= len(marks.pop(coll)[1])
            fragments.pop(coll, None)
        if self.ddl_ts <= ts:
            self.ddl_queries = set()
        if (self._open > INLINE_HANDLES or len(marks) > INLINE_TABLES) != self._ref:
            self._ref = not self._ref
            fragments.clear()
        self._tail_json = self._json = None

    # -- restart inside a large transaction ------------------------------------------------
    def rebuild_start(self) -> int | None:
        """Offset to read from again: a restored state that named it instead of its marks."""
        return self.rebuild_from

    def rebuild_row(self, ev: RowChange, at: int) -> None:
        """A row read again (at offset ``at``, before the resume point): admitted once more, as
        it was the first time, which restores the marks."""
        if self.rebuild_from is not None and at >= self.rebuild_from and type(ev) is RowChange:
            self.admit_row(ev, at)

    def end_rebuild(self) -> None:
        """The stretch was read again (or cannot be: the source warns that replays of the
        transactions in it are no longer recognised)."""
        self.rebuild_from = None
        self._fragments.clear()
        self._json = None

    # -- state ---------------------------------------------------------------------------
    def _tail(self) -> bytes:
        text = self._tail_json = b"%d,%s,%d" % (self.ddl_ts, orjson.dumps(sorted(self.ddl_queries)),
                                                self.complete_ts)
        return text

    def state_json(self) -> bytes:
        """The state as JSON (for a position), rebuilt only for what changed since the last call."""
        text = self._json
        if text is not None:
            return text
        tail = self._tail_json if self._tail_json is not None else self._tail()
        marks = self.marks
        if self._ref:
            first = next(iter(marks.values()))[2]
            if first >= 0:
                text = self._json = b'[["at",%d],%s]' % (first, tail)
                return text
        fragments = self._fragments
        for coll, (ts, handles, at) in marks.items():
            if coll not in fragments:
                fragments[coll] = b"%s:[%d,%s,%d]" % (orjson.dumps(coll), ts, orjson.dumps(sorted(handles)), at)
        text = self._json = b"[{%s},%s]" % (b",".join(fragments[c] for c in marks), tail)
        return text

    def state(self) -> list:
        """The state as JSON-able data (what ``from_state`` takes)."""
        return orjson.loads(self.state_json())

    @classmethod
    def from_state(cls, data: list | None) -> "Dedup":
        d = cls()
        if data:
            marks, d.ddl_ts, queries = data[:3]
            d.ddl_queries = set(queries or ())
            d.complete_ts = int(data[3]) if len(data) > 3 else 0
            if isinstance(marks, list):  # ["at", offset]: the marks are read again from there
                d.rebuild_from = int(marks[1])
            else:
                for coll, mark in marks.items():
                    d.marks[coll] = [int(mark[0]), set(mark[1] or ()), int(mark[2]) if len(mark) > 2 else -1]
                d._open = sum(len(m[1]) for m in d.marks.values())
                d._ref = d._open > INLINE_HANDLES or len(d.marks) > INLINE_TABLES
        return d


def _handle_function(names: tuple[str, ...]) -> Callable[[dict], str]:
    if len(names) == 1:
        name = names[0]
        return lambda row: repr((row.get(name),))
    if names:
        return lambda row: repr(tuple(map(row.get, names)))
    return lambda row: repr(tuple(sorted(row.items())))  # no handle key: the whole row identifies it


@dataclass(slots=True)
class Pending:
    """One buffered event and where it was read (message offset, index of the event in the message)."""

    ts: int
    order: int  # 0 row, 1 DDL: at equal ts rows leave first
    partition: str
    offset: int
    index: int
    event: Event
    resolved: int | None  # the partition's resolved ts when it came in: what a restart here knows
    done: bool = False


class TransactionBuffer:
    """Per-partition buffers released up to the minimum resolved ts over all partitions."""

    def __init__(self, partitions: list[str], resume: dict[str, tuple[int, int]],
                 resolved: dict[str, int | None] | None = None, frontier: int = 0):
        """``resolved`` and ``frontier`` come from a position (``resume_resolved``, ``frontier``):
        a partition's resolved event before its resume point is not read again."""
        self.partitions = list(partitions)
        self.resolved: dict[str, int | None] = {p: (resolved or {}).get(p) for p in partitions}
        self.pending: dict[str, deque[Pending]] = {p: deque() for p in partitions}
        self.consumed: dict[str, tuple[int, int]] = dict(resume)  # where reading would continue
        self.frontier = frontier  # highest global resolved ts released so far
        self._late = False  # an event at or below the frontier came in since the last release (a replay)
        # partition -> buffered rows whose commit ts is an estimate (RowChange.ts_estimated)
        self._estimated: dict[str, list[Pending]] = {}

    def add(self, partition: str, event: Event, offset: int, index: int, count: int) -> None:
        """Buffer one event of the message at ``offset`` (``index`` of ``count`` events)."""
        t = type(event)
        if t is ResolvedEvent:
            self._advance(partition, event.ts)
        elif t is DDLEvent:
            self.pending[partition].append(Pending(event.commit_ts, 1, partition, offset, index, event,
                                                   self.resolved[partition]))
            # TiCDC writes a DDL after every older row of this partition: it doubles as a resolved ts
            self._advance(partition, event.commit_ts)
            self._late = self._late or event.commit_ts <= self.frontier
        else:
            entry = Pending(event.commit_ts, 0, partition, offset, index, event, self.resolved[partition])
            self.pending[partition].append(entry)
            if t is RowChange:
                estimated = self._estimated.get(partition)
                if estimated and event.commit_ts and not event.ts_estimated:
                    self._bound(estimated, event)
                if event.ts_estimated:
                    self._estimated.setdefault(partition, []).append(entry)
            self._late = self._late or event.commit_ts <= self.frontier
        self.consumed[partition] = (offset + 1, 0) if index + 1 >= count else (offset, index + 1)

    @staticmethod
    def _bound(estimated: list[Pending], row: RowChange) -> None:
        """A row of a table after rows of it whose commit ts was estimated: theirs is at most
        this one's (a partition carries a table's rows in commit ts order), so an estimate above
        it comes down to it; released in commit ts order, they still come before it."""
        t = row.table
        keep = []
        for e in estimated:
            if e.done:
                continue
            ev = e.event
            if ev.table.schema == t.schema and ev.table.table == t.table:
                if e.ts > row.commit_ts:
                    e.ts = ev.commit_ts = row.commit_ts
            else:
                keep.append(e)
        estimated[:] = keep

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
        if limit is None or (limit <= self.frontier and not self._late):
            return []  # nothing can have become releasable: no scan of what waits
        self._late = False
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

    def resume_resolved(self) -> dict[str, int | None]:
        """Per partition: its resolved ts as of its ``resume`` point. Restored with it, a restart
        releases what was promised without waiting for new resolved events, and cannot release
        past entries it has not read again yet (their partition's promise lies after them)."""
        return {p: (q[0].resolved if q else self.resolved[p]) for p, q in self.pending.items()}

    def buffered(self) -> int:
        return sum(len(q) for q in self.pending.values())
