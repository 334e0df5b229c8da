"""Model-based restart tests of the kafka source, through the real (Tansu) broker.

A seeded generator plays TiCDC: transactions (1..80 rows sharing a commit ts, some of 33..50
rows per partition) over one or two tables, dispatched to 1..3 partitions as TiCDC's dispatchers
do (by handle key, by table, by commit ts), only each table's rows in commit-ts order within a
partition, DDLs broadcast as barriers, resolved events broadcast (sometimes a little late on a
partition), and TiCDC crashes: every partition stops at its own point (mid-transaction too), then
everything after a checkpoint that every partition had been promised is produced again, with new
message boundaries (open protocol, 1..64 rows a message; canal-json) and rows of a transaction in
another order. Each scenario also picks how many records one ``read()`` asks for.

The source reads the whole topic once from scratch (the reference, checked against what the
model says TiCDC semantics give); then, for cut points of every kind (inside large transactions,
inside messages, inside releases, on control records, some at random), a fresh source opened at
that record's position must give exactly the rest of the reference, and again from a cut inside
that continuation. Positions must stay under 1 KB. The restarts of one scenario run side by
side (each is a consumer of its own waiting on fetches). The handmade tests at the end pin the
defects this model found (transaction positions without the partitions' resolved ts and the
frontier, split key updates taken for replays, positions growing with the tables).
"""

from __future__ import annotations

import random
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import orjson
import pytest
from confluent_kafka import Producer

from cdcflow.connectors.ticdc.canal_json import CanalJsonEncoder, CanalJsonOptions
from cdcflow.connectors.ticdc.events import META_COMMIT_TS, META_RESOLVED_TS
from cdcflow.connectors.ticdc.open_protocol import OpenProtocolEncoder
from cdcflow.record import META_COLLECTION, Operation
from cdcflow.connectors.ticdc.tidb import TableSchema
from helpers.kafka import ORDERS, DDLEvent, ResolvedEvent, RowChange, create_topic, make_source, row, tso

ITEMS = TableSchema("shop", "items", ORDERS.columns)
TABLES = (ORDERS, ITEMS)
MAX_POSITION = 1024  # bytes, whatever the transaction size
# TiCDC splits an UPDATE that changes the handle key into DELETE + INSERT (the default for MQ sinks):
# one transaction can then hold a DELETE and an INSERT of one handle; the generator makes such
# transactions (False: only updates that keep their key).
SPLIT_KEY_UPDATES = True
KEYS = 400  # handle keys drawn per table (a transaction of 150 rows of one table needs 150 distinct)


# ------------------------------------------------------------------------------------ the model
@dataclass
class Txn:
    ts: int
    rows: list  # (table, key, kind)


@dataclass
class Ddl:
    ts: int
    table: TableSchema

    @property
    def query(self) -> str:
        return f"ALTER TABLE {self.table.table} COMMENT 'v{self.ts}'"


@dataclass
class Resolved:
    ts: int


@dataclass
class Scenario:
    seed: int
    protocol: str  # open-protocol | canal-json
    consistency: str  # row | transaction
    partitions: int
    batch: int  # open-protocol max-batch-size
    dispatcher: str  # index-value | table | ts
    read_size: int  # max_records of each read(): how much one release can see
    log: list  # Txn / Ddl / Resolved in commit-ts order: what TiDB did and TiCDC promised
    streams: list = field(default_factory=list)  # per partition: segments (lists of events) as produced

    def describe(self) -> str:
        sizes = [len(i.rows) for i in self.log if type(i) is Txn]
        return (f"seed={self.seed} {self.protocol} {self.consistency} partitions={self.partitions} "
                f"batch={self.batch} dispatch={self.dispatcher} read={self.read_size} txn sizes={sizes} "
                f"segments={[len(s) for s in self.streams[0]]}")


def _partition_of(sc: Scenario, table: TableSchema, key: int, ts: int) -> int:
    if sc.dispatcher == "index-value":
        return zlib.crc32(f"{table.table}:{key}".encode()) % sc.partitions
    if sc.dispatcher == "table":
        return zlib.crc32(table.table.encode()) % sc.partitions
    return (ts >> 18) % sc.partitions


def build_log(rng: random.Random, tables: tuple, partitions: int) -> list:
    ms = 1000
    log: list = []
    live: dict[str, set] = {t.table: set() for t in tables}
    for _ in range(rng.randint(3, 9)):
        ms += rng.randint(1, 4)
        r = rng.random()
        if r < 0.12:
            log.append(Ddl(tso(ms), rng.choice(tables)))
        elif r < 0.35:
            log.append(Resolved(tso(ms)))
        else:
            # large ones exceed the 32 handles a position holds on each partition they reach
            n = rng.choice([1, 1, 2, 3, 5, 8, rng.randint(1, 80), rng.randint(33, 50) * partitions])
            used: set = set()
            rows = []
            pool = sorted(live[tables[0].table])
            if SPLIT_KEY_UPDATES and len(pool) >= 2 and rng.random() < 0.5:
                # UPDATE ... SET id = <free key> for a, then id = a for b: DELETE a, INSERT free, DELETE b, INSERT a
                a, b = rng.sample(pool, 2)
                free = next(k for k in range(KEYS) if k not in live[tables[0].table])
                rows += [(tables[0], a, "delete"), (tables[0], free, "insert"), (tables[0], b, "delete"),
                         (tables[0], a, "insert")]
                live[tables[0].table] = live[tables[0].table] - {b} | {free}
                used.update({(tables[0].table, a), (tables[0].table, b), (tables[0].table, free)})
            for _ in range(n):
                t = rng.choice(tables)
                key = rng.randrange(KEYS)
                while (t.table, key) in used:
                    key = rng.randrange(KEYS)
                used.add((t.table, key))
                if key in live[t.table]:
                    kind = rng.choice(["update", "update", "delete"])
                    if kind == "delete":
                        live[t.table].discard(key)
                else:
                    kind = "insert"
                    live[t.table].add(key)
                rows.append((t, key, kind))
            log.append(Txn(tso(ms), rows))
    log.append(Resolved(tso(ms + 1)))  # TiCDC keeps sending resolved ts: everything gets released
    return log


def generate(sc: Scenario, rng: random.Random, items: list) -> list[list]:
    """Per partition: the events TiCDC sends for ``items`` (one run of it, no crash)."""
    out: list[list] = [[] for _ in range(sc.partitions)]
    for item in items:
        if type(item) is Txn:
            rows = list(item.rows)
            rng.shuffle(rows)  # order inside a transaction is not fixed across TiCDC runs
            for t, key, kind in rows:
                out[_partition_of(sc, t, key, item.ts)].append(row(t, key, item.ts, kind))
        elif type(item) is Ddl:
            for seq in out:
                seq.append(DDLEvent("shop", item.table.table, item.query, item.ts, 8))
        else:
            for seq in out:
                seq.append(ResolvedEvent(item.ts))
    for seq in out:  # tables are written by their own pipelines: only each table's rows keep ts order
        for i in range(len(seq) - 1):
            a, b = seq[i], seq[i + 1]
            if (type(a) is RowChange and type(b) is RowChange and a.table is not b.table
                    and a.commit_ts < b.commit_ts and rng.random() < 0.2):
                seq[i], seq[i + 1] = b, a
    for seq in out:  # a resolved event may reach a partition after a few newer rows (never before older)
        i = 0
        while i < len(seq):
            if type(seq[i]) is ResolvedEvent and rng.random() < 0.3:
                j = i
                for _ in range(rng.randint(1, 3)):
                    if j + 1 < len(seq) and type(seq[j + 1]) is RowChange:
                        seq[j], seq[j + 1] = seq[j + 1], seq[j]
                        j += 1
                i = j + 1
            else:
                i += 1
    return out


def build_scenario(seed: int, consistency: str | None = None) -> Scenario:
    rng = random.Random(seed)
    partitions = rng.randint(1, 3)
    sc = Scenario(
        seed=seed,
        protocol=rng.choice(["open-protocol", "open-protocol", "canal-json"]),
        consistency=consistency or rng.choice(["row", "transaction"]),
        partitions=partitions,
        batch=rng.choice([1, 4, 16, 64]),
        dispatcher=rng.choice(["index-value", "index-value", "table", "ts"]),
        read_size=rng.choice([1000, 1000, 50, 7]),
        log=build_log(rng, TABLES[:rng.randint(1, 2)], partitions),
    )
    streams: list[list] = [[] for _ in range(sc.partitions)]
    checkpoint = 0
    for _ in range(rng.choice([0, 1, 1, 2])):  # TiCDC crashes
        seqs = generate(sc, rng, [i for i in sc.log if i.ts > checkpoint])
        promised = None
        for p, seq in enumerate(seqs):
            cut = rng.randint(0, len(seq))
            streams[p].append(seq[:cut])
            sent = {ev.ts for ev in seq[:cut] if type(ev) is ResolvedEvent}
            promised = sent if promised is None else promised & sent
        # it restarts from a checkpoint every partition had been promised (or the last one)
        checkpoint = rng.choice([checkpoint] + sorted(promised or ()))
    for p, seq in enumerate(generate(sc, rng, [i for i in sc.log if i.ts > checkpoint])):
        streams[p].append(seq)
    sc.streams = streams
    return sc


def produce(sc: Scenario, servers: str, topic: str) -> None:
    create_topic(servers, topic, sc.partitions)
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5, "enable.idempotence": True})
    for p, segments in enumerate(sc.streams):
        for seg in segments:  # each TiCDC run batches on its own: message boundaries differ
            if sc.protocol == "open-protocol":
                msgs = OpenProtocolEncoder({"max-batch-size": sc.batch}).encode(seg)
            else:
                enc = CanalJsonEncoder(CanalJsonOptions(enable_tidb_extension=True), now_ms=lambda: 0)
                msgs = [(None, enc.encode(ev)) for ev in seg]
            for key, value in msgs:
                producer.produce(topic, key=key, value=value, partition=p)
    assert producer.flush(30) == 0


# ------------------------------------------------------------------------------------ expectations
def shape(r) -> tuple:
    """What a record says, for comparisons: (control, table, key, commit ts, op)."""
    c = r.control
    if c == "resolved":
        return ("resolved", None, None, int(r.metadata[META_RESOLVED_TS]), None)
    if c == "ddl":
        return ("ddl", r.metadata.get(META_COLLECTION), None, int(r.metadata[META_COMMIT_TS]), None)
    key = r.key["id"] if isinstance(r.key, dict) else (r.after or r.before)["id"]
    return (None, r.metadata.get(META_COLLECTION), key, int(r.metadata[META_COMMIT_TS]), r.operation.name)


_OPS = {"insert": Operation.CREATE.name, "update": Operation.UPDATE.name, "delete": Operation.DELETE.name}


def _event_shape(ev) -> tuple:
    if type(ev) is RowChange:
        return (None, ev.table.collection, ev.row["id"], ev.commit_ts, _OPS[ev.kind])
    if type(ev) is DDLEvent:
        return ("ddl", f"{ev.schema}.{ev.table_name}", None, ev.commit_ts, None)
    return ("resolved", None, None, ev.ts, None)


def expected_row_mode(sc: Scenario, p: int) -> list[tuple]:
    """Partition ``p`` in order, every row and DDL once (its first copy), every resolved event."""
    seen: set = set()
    out = []
    for seg in sc.streams[p]:
        for ev in seg:
            s = _event_shape(ev)
            if s[0] != "resolved":
                ident = s
                if ident in seen:
                    continue
                seen.add(ident)
            out.append(s)
    return out


def expected_transaction_mode(sc: Scenario) -> list[tuple]:
    """Rows and DDLs once each, in release order: commit ts, rows before DDL, partition, offset."""
    first: dict = {}
    for p, segments in enumerate(sc.streams):
        n = 0
        for seg in segments:
            for ev in seg:
                s = _event_shape(ev)
                if s[0] != "resolved":
                    first.setdefault(s, ((s[3], s[0] is not None, p, n), s))
                n += 1
    return [s for _, s in sorted(first.values())]


def _data(shapes: list[tuple]) -> list[tuple]:
    return [s for s in shapes if s[0] != "resolved"]


# ------------------------------------------------------------------------------------ reading
def settings_of(sc: Scenario, servers: str, topic: str, group: str) -> dict:
    uri = f"kafka://{servers}/{topic}?protocol={sc.protocol}"
    if sc.protocol == "canal-json":
        uri += "&enable-tidb-extension=true"
    return {"uri": uri, "consistency": sc.consistency, "group.id": group, "poll-timeout": "50ms"}


def read_until(settings: dict, partition: str, position: bytes | None, done, read_size: int = 1000,
               stall: float = 5.0, settle: float = 0.15) -> list:
    """Records from a fresh source opened at ``position``, until ``done(records)`` and nothing more
    comes for ``settle`` seconds, or nothing comes for ``stall`` seconds. Nothing is acknowledged."""
    src = make_source(settings)
    try:
        src.open(position, partition)
        out: list = []
        quiet = time.monotonic()
        while True:
            batch = src.read(read_size)
            now = time.monotonic()
            if batch:
                out.extend(batch)
                quiet = now
            elif now - quiet > (settle if done(out) else stall):
                return out
    finally:
        src.teardown()


def _cuts(rng: random.Random, records: list, txn: bool, k: int) -> list[int]:
    """Cut points worth trying: inside large transactions (``{"at": ...}``), inside messages,
    inside releases, on control records (of each kind the first, the last and one more), the
    first and the last record, and ``k`` at random."""
    kinds: dict[str, list[int]] = {"control": [], "at": [], "inside": []}
    for i, r in enumerate(records):
        state = orjson.loads(r.position)
        if r.control is not None:
            kinds["control"].append(i)
        if txn and state[4]:
            kinds["inside"].append(i)
        elif not txn and state[2]:
            kinds["inside"].append(i)
        if b'"at"' in r.position:
            kinds["at"].append(i)
    picks = {0, len(records) - 1}
    for found in kinds.values():
        if found:
            picks.update((found[0], found[-1], rng.choice(found)))
    picks.update(rng.sample(range(len(records)), min(k, len(records))))
    return sorted(i for i in picks if i >= 0)


def check_scenario(sc: Scenario, servers: str, topic: str, cuts_per_stream: int = 3) -> None:
    produce(sc, servers, topic)
    settings = settings_of(sc, servers, topic, f"g-{topic}")
    rng = random.Random(sc.seed * 7919)
    txn = sc.consistency == "transaction"
    ctx = sc.describe()
    parts = ["*"] if txn else [f"{topic}:{p}" for p in range(sc.partitions)]
    final = max(i.ts for i in sc.log if type(i) is Resolved)

    def restart(position: bytes, expect: list, where: str, before: list | None = None) -> list:
        """A fresh source at ``position`` must give ``expect`` (shapes)."""
        n = len(_data(expect))
        want_resolved = max((s[3] for s in expect if s[0] == "resolved"), default=None)

        def done(rs):
            if len(_data([shape(r) for r in rs])) < n:
                return False
            return want_resolved is None or any(r.control == "resolved" and shape(r)[3] >= want_resolved
                                                for r in rs)

        got = read_until(settings, part, position, done, sc.read_size)
        assert_same_continuation(expect, [shape(r) for r in got], txn, f"{ctx}: {where} ({position[:150]!r})",
                                 before)
        big = max((len(r.position) for r in got), default=0)
        assert big < MAX_POSITION, f"{ctx}: {where}: a position of {big} bytes"
        return got

    def cut_at(i: int, j_pick: float) -> None:
        shapes = [shape(r) for r in ref]
        rest = restart(ref[i].position, shapes[i + 1:], f"restart at record {i} of {len(ref)}", shapes[:i + 1])
        if len(rest) > 2:  # a restart of the restarted source, from inside its continuation
            j = int(j_pick * (len(rest) - 1))
            cont = [shape(r) for r in rest]
            restart(rest[j].position, cont[j + 1:], f"restart at record {i}, then at {j} of that", cont[:j + 1])

    for p, part in enumerate(parts):
        want = expected_transaction_mode(sc) if txn else expected_row_mode(sc, p)
        n_data = len(_data(want))

        def complete(records):
            got = [r for r in records if r.control != "resolved"]
            return len(got) >= n_data and (not txn or any(shape(r)[3] >= final for r in records
                                                          if r.control == "resolved"))

        ref = read_until(settings, part, None, complete, sc.read_size)
        got = [shape(r) for r in ref]
        if txn:
            assert _data(got) == want, ctx
            check_transaction_semantics(got, ctx)
        else:
            assert got == want, ctx
        big = max((len(r.position) for r in ref), default=0)
        assert big < MAX_POSITION, f"{ctx}: a position of {big} bytes"
        # each restart is a consumer of its own: run them side by side, they mostly wait on fetches
        with ThreadPoolExecutor(max_workers=8) as pool:
            for f in [pool.submit(cut_at, i, rng.random()) for i in _cuts(rng, ref, txn, cuts_per_stream)]:
                f.result()


def assert_same_continuation(expect: list, got: list, txn: bool, ctx: str, before: list | None = None) -> None:
    """Row mode: exactly the same records. Transaction mode: exactly the same rows and DDLs; the
    resolved records may group differently (releases follow how messages were polled) but must
    increase, never fall behind one already emitted before the cut, and end at the same value."""
    if not txn:
        assert got == expect, ctx
        return
    assert _data(got) == _data(expect), ctx
    resolved = [s[3] for s in got if s[0] == "resolved"]
    assert resolved == sorted(set(resolved)), f"{ctx}: resolved records {resolved}"
    prior = [s[3] for s in (before or []) if s[0] == "resolved"]
    if prior and resolved:
        assert resolved[0] >= prior[-1], f"{ctx}: resolved {resolved[0]} after {prior[-1]} was emitted"
    want = [s[3] for s in expect if s[0] == "resolved"]
    if want:
        assert resolved and resolved[-1] == want[-1], f"{ctx}: resolved records {resolved}, expected to end at {want[-1]}"
    check_transaction_semantics(got, ctx)


def check_transaction_semantics(shapes: list[tuple], ctx: str) -> None:
    """Rows once each, in commit-ts order, rows before a DDL of equal ts; every record after a
    resolved record is newer than it, every row is covered by a resolved record after it."""
    data = _data(shapes)
    idents = list(data)
    assert len(idents) == len(set(idents)), f"{ctx}: duplicates"
    order = [(s[3], s[0] is not None) for s in data]
    assert order == sorted(order), f"{ctx}: not in commit-ts order"
    last_resolved = 0
    pending_max = 0
    for s in shapes:
        if s[0] == "resolved":
            assert s[3] >= pending_max, f"{ctx}: row at {pending_max} released before resolved {s[3]}"
            last_resolved, pending_max = s[3], 0
        else:
            assert s[3] > last_resolved, f"{ctx}: {s} after resolved {last_resolved}"
            pending_max = max(pending_max, s[3])
    assert pending_max == 0, f"{ctx}: rows after the last resolved record"


# ------------------------------------------------------------------------------------ tests
SEEDS = range(24)


@pytest.mark.parametrize("seed", SEEDS)
def test_restart_anywhere_gives_exactly_the_rest(kafka_broker, unique_name, seed):
    check_scenario(build_scenario(seed), kafka_broker, unique_name)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1000, 1100))
def test_restart_anywhere_gives_exactly_the_rest_many(kafka_broker, unique_name, seed):
    check_scenario(build_scenario(seed), kafka_broker, unique_name, cuts_per_stream=8)


# ------------------------------------------------------------------------------------ found by the model
def _handmade(servers: str, topic: str, streams: list, consistency: str = "transaction") -> tuple[Scenario, dict]:
    sc = Scenario(seed=0, protocol="open-protocol", consistency=consistency, partitions=len(streams), batch=1,
                  dispatcher="table", read_size=1000, log=[], streams=[[s] for s in streams])
    produce(sc, servers, topic)
    return sc, settings_of(sc, servers, topic, f"g-{topic}")


def test_transaction_restart_inside_a_release_when_a_partition_had_nothing_pending(kafka_broker, unique_name):
    # partition 0: three rows of one transaction, then resolved 200; partition 1: only resolved 200
    _, settings = _handmade(kafka_broker, unique_name, [
        [row(ORDERS, i, tso(100)) for i in range(3)] + [ResolvedEvent(tso(200))],
        [ResolvedEvent(tso(200))]])
    ref = read_until(settings, "*", None, lambda rs: len(rs) >= 4)
    assert [shape(r)[2] for r in ref] == [0, 1, 2, None]  # three rows, then resolved 200
    # the position of row 0 resumes partition 1 at offset 1: its resolved event is never read again
    rest = read_until(settings, "*", ref[0].position, lambda rs: len(rs) >= 3, stall=2.0)
    assert [shape(r) for r in rest] == [shape(r) for r in ref[1:]]


def test_transaction_restart_does_not_emit_resolved_records_below_the_emitted_frontier(kafka_broker, unique_name):
    # both partitions promise 250; TiCDC then restarts from an older checkpoint and sends 200 again
    _, settings = _handmade(kafka_broker, unique_name, [
        [ResolvedEvent(tso(250)), row(ITEMS, 7, tso(320)), ResolvedEvent(tso(200)), row(ITEMS, 7, tso(320)),
         ResolvedEvent(tso(400))],
        [ResolvedEvent(tso(250)), row(ORDERS, 1, tso(300)), ResolvedEvent(tso(200)), row(ORDERS, 1, tso(300)),
         ResolvedEvent(tso(400))]])

    def done(rs):
        return any(r.control == "resolved" and shape(r)[3] == tso(400) for r in rs)

    # one message per read: the frontier moves message by message, as when messages trickle in
    ref = read_until(settings, "*", None, done, read_size=1)
    assert [(s[0], s[2], s[3] >> 18) for s in map(shape, ref)] == [
        ("resolved", None, 250), (None, 1, 300), (None, 7, 320), ("resolved", None, 400)]
    rest = read_until(settings, "*", ref[1].position, done, read_size=1)
    assert [shape(r) for r in rest] == [shape(r) for r in ref[2:]]  # got resolved 200 first


def test_row_position_stays_small_after_a_transaction_over_many_tables(kafka_broker, unique_name):
    """Marks a resolved ts completed are not carried on (found by this model: ~35 bytes a table)."""
    tables = [TableSchema("shop", f"t{n:03d}", ORDERS.columns) for n in range(100)]
    _, settings = _handmade(kafka_broker, unique_name, [
        [row(t, 1, tso(100)) for t in tables] + [ResolvedEvent(tso(150)), row(tables[0], 2, tso(200))]],
        consistency="row")
    got = read_until(settings, f"{unique_name}:0", None, lambda rs: len(rs) >= 102)
    assert [shape(r)[2] for r in got[-2:]] == [None, 2]
    assert len(got[-1].position) < MAX_POSITION, len(got[-1].position)


def test_row_position_stays_small_inside_a_transaction_over_many_tables(kafka_broker, unique_name):
    tables = [TableSchema("shop", f"t{n:03d}", ORDERS.columns) for n in range(100)]
    txn = [row(t, k, tso(100)) for k in range(10) for t in tables]
    _, settings = _handmade(kafka_broker, unique_name, [txn + [ResolvedEvent(tso(150))]], consistency="row")
    got = read_until(settings, f"{unique_name}:0", None, lambda rs: len(rs) >= len(txn) + 1)
    assert len(got) == len(txn) + 1
    assert max(len(r.position) for r in got) < MAX_POSITION, max(len(r.position) for r in got)


@pytest.mark.parametrize("consistency", ["row", "transaction"])
def test_split_key_update_delete_and_insert_of_one_handle_in_one_transaction(kafka_broker, unique_name,
                                                                             consistency):
    """TiCDC splits an UPDATE that changes the handle key into DELETE + INSERT: one transaction can
    hold both for one handle, and neither is a replay of the other (found by this model)."""
    # UPDATE orders SET id = id + 1 ORDER BY id DESC over ids 1, 2 (TiCDC splits each key change)
    ts = tso(100)
    txn = [row(ORDERS, 2, ts, "delete"), row(ORDERS, 3, ts), row(ORDERS, 1, ts, "delete"), row(ORDERS, 2, ts)]
    _, settings = _handmade(kafka_broker, unique_name, [txn + [ResolvedEvent(tso(150))]], consistency=consistency)
    part = "*" if consistency == "transaction" else f"{unique_name}:0"
    got = read_until(settings, part, None, lambda rs: len(_data([shape(r) for r in rs])) >= 4, stall=1.5)
    assert sorted((s[2], s[4]) for s in _data([shape(r) for r in got])) == [
        (1, "DELETE"), (2, "CREATE"), (2, "DELETE"), (3, "CREATE")]
