"""The ``kafka`` source: TiCDC messages (or cdcflow's opencdc-json) from Kafka topics.

``consistency: row`` — one engine partition per Kafka partition (``topic:N``),
each consumer ``assign()``ed from the saved position, rows streamed as they come.
``consistency: transaction`` — one engine partition (``*``) consuming every Kafka
partition, because releasing rows up to the *global* resolved ts needs all of
them in one place (see ``consistency.TransactionBuffer``).

Positions are the engine's checkpoint: where to continue reading (offset, and
how many events of a multi-event open-protocol message were already returned)
plus the replay filter's state. Offsets are committed to the consumer group
only in ``ack``, i.e. after every destination wrote durably; a position-less
start uses the group's committed offsets, else ``read-from``.

Silence is not idleness until the broker confirms it: a read that gets nothing while the
source cannot show it is caught up (``lag()`` failed or was not 0, offset commits fail, or
nothing came for a while) asks the broker for the partitions' high watermarks, and keeps
reading until the broker confirms nothing waits or ``broker-timeout`` passes without a
message or an answer: then ``KafkaPartitionUnavailableError`` (an ``InfrastructureError``)
names the partition and the servers. Tansu 0.6 reports a high watermark as its last batch's
base offset + 1, below the real end: a partition counts as caught up when the position is at
or past the high watermark, never when it is below.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Sequence

import orjson
from confluent_kafka import (OFFSET_BEGINNING, OFFSET_END, TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError,
                             KafkaException, TopicPartition)

from cdcflow.convert import jsonform
from cdcflow.errors import CdcflowError, InfrastructureError
from cdcflow.record import META_COLLECTION, META_CREATED_AT, Operation, Record
from cdcflow.sdk import Source

from ..ticdc.errors import CodecError
from ..ticdc.events import CONTROL_RESOLVED, DDLEvent, ResolvedEvent, RowChange, to_record, to_records
from .codecs import decoder_for, delete_ts_from_headers
from .consistency import Dedup, TransactionBuffer
from .errors import KafkaUnavailableError
from .settings import PLUGIN, KafkaSettings, client_config, make_client, resolve
from .topics import TopicGone, TopicWatch

#: metadata prefix of a raw message's headers, as Conduit's kafka source names them
RAW_HEADER_PREFIX = "kafka.header."

log = logging.getLogger("cdcflow.connectors.kafka.source")

ALL_PARTITIONS = "*"
_ROW, _TXN = "row", "txn"
_POLL_CHUNK = 500  # messages per consume() call within one read()
_QUIET_CHECK = 5.0  # seconds without a message before asking whether the topics are still there
_ASK_TIMEOUT = 5.0  # longest wait for one watermark answer (a frozen broker never answers)
_FRAME_SLACK = 512  # protocol overhead librdkafka needs on top of the largest message it fetches
_FETCH_MAX = 52_428_800  # librdkafka's default fetch.max.bytes
_KEY_ROOM = 65_536  # key bytes a message may add to its value before its size is checked one by one


class KafkaSourceError(CdcflowError):
    """A message could not be read or decoded; names topic, partition and offset."""

    def __init__(self, plugin_id: str, topic: str, partition: int, offset: int, message: str):
        self.topic, self.partition, self.offset = topic, partition, offset
        super().__init__(f"kafka source {plugin_id or PLUGIN}: {topic}[{partition}]@{offset}: {message}")


class KafkaPartitionUnavailableError(KafkaSourceError, KafkaUnavailableError):
    """A partition cannot be read: broker or coordinator gone, topic gone or recreated, a consumer
    error, or data the broker has that does not arrive. An outage, never a record's fault."""

    def __init__(self, plugin_id: str, topic: str, partition: int, offset: int, message: str, *, servers: str):
        KafkaSourceError.__init__(self, plugin_id, topic, partition, offset, message)
        self.service, self.endpoint = "kafka", servers


class _WatermarkClients:
    """One client per process and broker configuration that only asks for high watermarks.

    On a consumer's own connection the request waits behind the fetch in flight (up to
    ``fetch.wait.max.ms``: ~100 ms on Tansu); the engine asks ``lag()`` after empty reads of
    many partitions in turn, so they ask on an idle connection instead (well under 1 ms)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[str, list] = {}  # configuration → [client, sources using it]

    @staticmethod
    def key(s: KafkaSettings) -> str:
        return repr(sorted(client_config(s).items()))

    def acquire(self, s: KafkaSettings) -> str:
        key = self.key(s)
        with self._lock:
            entry = self._clients.get(key)
            if entry is None:
                entry = self._clients[key] = [make_client(Consumer, s, **{
                    "group.id": "cdcflow-watermarks", "enable.auto.commit": False}), 0]
            entry[1] += 1
        return key

    def client(self, key: str):
        with self._lock:
            return self._clients[key][0]

    def release(self, key: str) -> None:
        with self._lock:
            entry = self._clients.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del self._clients[key]
        try:
            entry[0].close()
        except Exception:  # noqa: BLE001 - it asked for watermarks only: nothing to lose
            log.debug("watermark client close failed", exc_info=True)


_WATERMARKS = _WatermarkClients()


def raw_record(msg) -> Record:
    """A message as Conduit's kafka source makes it a record: a create with the message key and
    value as raw data, the topic as collection, the message time as ``opencdc.createdAt`` and
    each header as ``kafka.header.<name>``."""
    metadata = {META_COLLECTION: msg.topic()}
    kind, ms = msg.timestamp()
    if kind != TIMESTAMP_NOT_AVAILABLE:
        metadata[META_CREATED_AT] = str(ms * 1_000_000)
    for name, value in msg.headers() or ():
        metadata[RAW_HEADER_PREFIX + name] = value.decode("utf-8", "replace") if value is not None else ""
    return Record(b"", Operation.CREATE, metadata, msg.key(), None, msg.value())


def _avro_event(decode, msg):
    """One Avro message's event. A tombstone (DELETE) carries no commit ts: the one in cdcflow's
    header, else the decoder's bound for the message's partition, else the message time as an
    estimate (codec-avro.md, "Commit ts of a DELETE")."""
    value = msg.value()
    where = (msg.topic(), msg.partition())
    if value is None:
        kind, ms = msg.timestamp()
        return decode(msg.key(), None, delete_ts_from_headers(msg.headers()), where,
                      ms if kind != TIMESTAMP_NOT_AVAILABLE and ms > 0 else None)
    return decode(msg.key(), value, None, where)


def _split(partition_id: str) -> tuple[str, int]:
    topic, _, num = partition_id.rpartition(":")
    return topic, int(num)


class KafkaSource(Source):
    #: the engine's ``ReadWaitSource`` capability: how long a read waits for messages (None:
    #: ``poll-timeout``); 0 when a task serves several partitions in turn
    read_wait: float | None = None

    def configure(self, config) -> None:
        super().configure(config)
        self.settings: KafkaSettings = resolve(config, "source")
        self._consumer: Consumer | None = None
        self._watermarks: str | None = None  # the key of the client that asks for watermarks
        self._last_position: bytes | None = None
        self._outbox: list[Record] = []
        self._verify = False  # read() must hear from the broker before it may come back empty
        self._acked: list[TopicPartition] | None = None  # offsets of the last ack, recommitted after a failure
        self._commit_failed: tuple[float, str] | None = None  # since when commits fail, and why

    # -- driver side ---------------------------------------------------------------------
    def _metadata_partitions(self) -> list[str]:
        s = self.settings
        consumer = make_client(Consumer, s, **{"group.id": self._group_id()})
        who = f"kafka source {self.id or PLUGIN}"
        try:
            out = []
            for topic in s.topics:
                try:
                    md = consumer.list_topics(topic, timeout=s.broker_timeout)
                except KafkaException as e:
                    raise KafkaUnavailableError(
                        f"{who}: no metadata for topic {topic!r} from {s.servers} within broker-timeout "
                        f"{s.broker_timeout:g}s: {e.args[0].str()}", servers=s.servers) from None
                tmd = md.topics.get(topic)
                if tmd is None or tmd.error is not None or not tmd.partitions:
                    why = tmd.error.str() if tmd is not None and tmd.error is not None else "no partitions"
                    raise KafkaUnavailableError(f"{who}: topic {topic!r} on {s.servers}: {why}", servers=s.servers)
                out.extend(f"{topic}:{p}" for p in sorted(tmd.partitions))
            return out
        finally:
            consumer.close()

    def partitions(self) -> Sequence[str]:
        if self.settings.consistency == "transaction":
            return [ALL_PARTITIONS]
        return self._metadata_partitions()

    def _group_id(self) -> str:
        return self.settings.group_id or f"cdcflow-{self.id or 'kafka'}"

    # -- task side -----------------------------------------------------------------------
    def open(self, position: bytes | None, partition: str = "") -> None:
        s = self.settings
        from cdcflow.schemas import default_store

        self._store = default_store()
        self._decoder = decoder_for(s)
        self._txn = s.consistency == "transaction"
        # prefetch bounded to 32 MiB: a consumer cached in a worker the partition moved away from
        # keeps its queue until it is evicted, and 4 partitions x workers of 256 MiB add up
        # fetches sized so a message of max-message-bytes fits (larger ones are refused in _check_size)
        fetch_max = max(_FETCH_MAX, s.max_message_bytes + _FRAME_SLACK)
        self._consumer = make_client(Consumer, s, **{
            "group.id": self._group_id(), "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": s.read_from, "enable.partition.eof": False,
            "fetch.max.bytes": fetch_max, "receive.message.max.bytes": max(100_000_000, fetch_max + _FRAME_SLACK),
            "fetch.wait.max.ms": 100, "queued.max.messages.kbytes": 32768, "on_commit": self._committed})
        self._watermarks = _WATERMARKS.acquire(s)
        self._max_bytes = s.max_message_bytes
        parts = self._metadata_partitions() if self._txn or partition in ("", ALL_PARTITIONS) else [partition]
        self._parts = parts
        state = orjson.loads(position) if position else None
        resume: dict[str, tuple[int, int]] = {}
        self._released_skip = (0, 0)
        saved_ids: dict[str, str | None] = {}
        txn_resolved: dict[str, int | None] = {}
        txn_frontier = 0
        if state is not None:
            kind = state[0]
            if kind == _ROW and not self._txn:
                resume[parts[0]] = (state[1], state[2])
                self._dedup = Dedup.from_state(state[3])
                if len(state) > 4:
                    saved_ids[_split(parts[0])[0]] = state[4]
            elif kind == _TXN and self._txn:
                resume = {p: (v[0], v[1]) for p, v in state[1].items()}
                self._dedup = Dedup.from_state(state[2])
                if len(state) > 3:
                    self._released_skip = (state[3], state[4])
                if len(state) > 7:
                    txn_resolved, txn_frontier, saved_ids = state[5], state[6], state[7] or {}
            else:
                raise CdcflowError(f"kafka source {self.id or PLUGIN}: saved position is for consistency "
                                   f"{'row' if kind == _ROW else 'transaction'}; the setting changed. "
                                   "Delete the pipeline's state to start over.")
        else:
            self._dedup = Dedup()
        self._skip: dict[str, tuple[int, int]] = {p: r for p, r in resume.items() if r[1]}
        self._assigned = [_split(p) for p in parts]
        self._watch = TopicWatch(s, [t for t, _ in self._assigned])
        try:
            self._watch.start(saved_ids, self._assigned)
        except TopicGone as e:
            raise KafkaPartitionUnavailableError(self.id, e.topic, e.partition,
                                                 resume.get(f"{e.topic}:{e.partition}", (-1,))[0], str(e),
                                                 servers=s.servers) from None
        self._tid = orjson.dumps(self._watch.ids.get(self._assigned[0][0])) if not self._txn else b"null"
        self._last_message = self._topics_checked = time.monotonic()
        committed = {}
        missing = [p for p in parts if p not in resume]
        if missing:
            tps = [TopicPartition(*_split(p)) for p in missing]
            try:
                for tp in self._consumer.committed(tps, timeout=10):
                    if tp.offset >= 0:
                        committed[f"{tp.topic}:{tp.partition}"] = tp.offset
            except KafkaException as e:
                # without them the partition would start at read-from: a silent jump
                topic, num = _split(missing[0])
                raise KafkaPartitionUnavailableError(self.id, topic, num, -1, f"reading the group's committed "
                                                     f"offsets from {s.servers} failed: {e.args[0].str()}",
                                                     servers=s.servers) from None
        default = OFFSET_BEGINNING if s.read_from == "earliest" else OFFSET_END
        self._rebuild_until = self._plan_rebuild(parts, resume)
        assign = []
        for p in parts:
            topic, num = _split(p)
            if self._rebuild_until is not None:
                off = self._dedup.rebuild_start()
            elif p in resume:
                off = resume[p][0]
            elif p in committed:
                off = committed[p]
            else:
                off = default
            assign.append(TopicPartition(topic, num, off))
        self._consumer.assign(assign)
        self._starts = {f"{tp.topic}:{tp.partition}": tp.offset for tp in assign}
        self._buffer = TransactionBuffer(parts, resume, txn_resolved, txn_frontier) if self._txn else None
        self._emitted_resolved = txn_frontier
        self._ids_json = orjson.dumps(self._watch.ids)

    def _plan_rebuild(self, parts: list[str], resume: dict[str, tuple[int, int]]) -> tuple[int, int] | None:
        """A row position restored inside large transactions names where the replay filter's marks
        were first set (``Dedup.rebuild_start``): read from there again, up to the resume point,
        only to admit those rows once more. Returns that resume point, or None when nothing is to
        be read again. Messages already gone (retention) cannot be read: the filter then starts
        empty, and a TiCDC replay of those (long complete) transactions would come through again."""
        dedup = self._dedup
        start = dedup.rebuild_start()
        if start is None:
            return None
        if self._txn or parts[0] not in resume:
            dedup.end_rebuild()
            return None
        until = resume[parts[0]]
        topic, num = _split(parts[0])
        try:
            low, _ = self._consumer.get_watermark_offsets(TopicPartition(topic, num), timeout=10)
        except KafkaException as e:
            low = start
            log.warning("kafka source %s: reading %s's low watermark failed: %s", self.id, parts[0], e)
        if low > start:
            log.warning("kafka source %s: %s from offset %d is gone (retention); replays of the transactions "
                        "there are no longer recognised", self.id, parts[0], start)
            dedup.end_rebuild()
            return None
        if start >= until[0] + (1 if until[1] else 0):
            dedup.end_rebuild()
            return None
        return until

    def _rebuild(self, msgs: list) -> list:
        """Feed the messages before the resume point to the replay filter's rebuild; return the rest."""
        until_off, until_skip = self._rebuild_until
        dedup = self._dedup
        for n, m in enumerate(msgs):
            off = m.offset()
            if off > until_off or (off == until_off and not until_skip):
                dedup.end_rebuild()
                self._rebuild_until = None
                return msgs[n:]
            events = self._decode(m)
            if off == until_off:
                events = events[:until_skip]
            for ev in events:
                if type(ev) is RowChange:
                    dedup.rebuild_row(ev, off)
            if off == until_off:
                dedup.end_rebuild()
                self._rebuild_until = None
                return msgs[n:]  # the rest of this message: ``_skip`` drops what was returned
        return []

    def _decode(self, msg) -> list:
        """Events (or records for opencdc-json) of one message."""
        proto = self.settings.protocol
        try:
            if proto == "avro":
                return [_avro_event(self._decoder.decode, msg)]
            if proto == "canal-json":
                value = msg.value()
                if value is None:
                    return []
                return [self._decoder.decode(value)]
            if proto == "open-protocol":
                return self._decoder.decode(msg.key(), msg.value())
            if proto == "raw":
                return [raw_record(msg)]
            value = msg.value()
            return [] if value is None else [jsonform.loads_record(value, self._store)]
        except InfrastructureError:
            raise  # the registry is down: the batch fails, the message is not to blame
        except (CodecError, CdcflowError, ValueError) as e:
            raise KafkaSourceError(self.id, msg.topic(), msg.partition(), msg.offset(),
                                   f"cannot decode {proto} message: {e}") from None

    def _poll(self, max_messages: int, timeout: float) -> list:
        msgs = self._consumer.consume(num_messages=max(1, max_messages), timeout=timeout)
        if msgs:
            self._last_message = time.monotonic()
            for m in msgs:
                if m.error() is not None:
                    msgs = self._without_errors(msgs)
                    break
            # values first, in one C-level pass (cheaper than a per-message loop); keys are
            # counted only when a value comes near the limit: a TiDB handle key is at most 12 KiB
            if msgs and max(map(len, msgs)) > self._max_bytes - _KEY_ROOM:
                for m in msgs:
                    self._refuse_size(m)
        elif time.monotonic() - max(self._last_message, self._topics_checked) > _QUIET_CHECK:
            self._check_topics()
            self._verify = True  # quiet for a while: is the broker still there?
        return msgs

    def _refuse_size(self, m) -> None:
        size = len(m) + (len(m.key()) if m.key() is not None else 0)
        if size > self._max_bytes:
            raise KafkaSourceError(self.id, m.topic(), m.partition(), m.offset(), f"message of {size} bytes exceeds "
                                   f"max-message-bytes {self._max_bytes}")

    def _check_topics(self) -> None:
        """A consumer whose topic vanished (or was recreated) gets no error from librdkafka: it just
        never receives anything. So a quiet source asks, and says what happened."""
        self._topics_checked = time.monotonic()
        try:
            self._watch.check(self._assigned)
        except TopicGone as e:
            raise KafkaPartitionUnavailableError(self.id, e.topic, e.partition, -1, str(e),
                                                 servers=self.settings.servers) from None

    def _without_errors(self, msgs: list) -> list:
        for m in msgs:
            err = m.error()
            if err is not None and err.code() != KafkaError._PARTITION_EOF:
                raise KafkaPartitionUnavailableError(
                    self.id, m.topic() or "?", -1 if m.partition() is None else m.partition(),
                    -1 if m.offset() is None else m.offset(), f"consumer error from {self.settings.servers}: {err}",
                    servers=self.settings.servers)
        return [m for m in msgs if m.error() is None]

    def read(self, max_records: int) -> list[Record]:
        if self._consumer is None:
            raise CdcflowError(f"kafka source {self.id or PLUGIN}: read before open")
        if self._commit_failed is not None:
            self._recommit()
        out = self._read(max_records)
        if not out and self._verify:
            out = self._read_verified(max_records)
        return out

    def _read_verified(self, max_records: int) -> list[Record]:
        """Nothing came although the source could not show it is caught up: read on until records
        come, or the broker confirms nothing waits behind the position (then ``[]`` is idleness);
        fail once ``broker-timeout`` passes without a message or that confirmation."""
        s = self.settings
        while True:
            if self._commit_failed is not None:
                self._recommit()  # its answer comes with the next poll
            why = self._behind()
            if why is None:
                self._verify = False
                return []
            quiet = time.monotonic() - self._last_message
            if quiet > s.broker_timeout:
                topic, num = self._assigned[0]
                raise KafkaPartitionUnavailableError(
                    self.id, topic if len(self._assigned) == 1 else ",".join(self._parts), num, -1,
                    f"nothing read for {quiet:.0f}s (broker-timeout {s.broker_timeout:g}s) and {why}",
                    servers=s.servers)
            out = self._read(max_records)
            if out:
                return out

    def _behind(self) -> str | None:
        """None when the broker answers that nothing waits behind the position, else why not."""
        try:
            waiting = self._lag(min(_ASK_TIMEOUT, self.settings.broker_timeout))
        except KafkaException as e:
            return f"the broker at {self.settings.servers} does not answer: {e.args[0].str()}"
        if self._commit_failed is not None:
            return f"committing offsets fails: {self._commit_failed[1]}"
        if waiting:
            return f"{waiting} messages wait behind the position on {self.settings.servers} and do not arrive"
        return None

    def _lag(self, timeout: float, cached: bool = False) -> int | None:
        """Messages behind the position per the partitions' high watermarks (a lower bound on
        Tansu, whose high watermark when asked is its last batch's base offset + 1). Raises
        KafkaException when the broker does not answer within ``timeout``. ``cached``: the
        watermarks the last fetch responses carried, without asking the broker (Tansu's are
        exact); None when a partition has had no fetch response yet."""
        consumer = self._consumer
        asking = consumer if cached or self._watermarks is None else _WATERMARKS.client(self._watermarks)
        tps = [TopicPartition(t, n) for t, n in self._assigned]
        positions = consumer.position(tps)
        waiting = 0
        for tp in positions:
            low, high = asking.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=timeout,
                                                       cached=cached) or (-1, -1)
            if cached and (low < 0 or high < 0):
                return None
            pos = tp.offset
            if pos < 0:  # nothing consumed yet: where the assignment starts
                start = self._starts.get(f"{tp.topic}:{tp.partition}", OFFSET_BEGINNING)
                pos = start if start >= 0 else (high if start == OFFSET_END else low)
            waiting += max(0, high - pos)
        return waiting

    def lag(self) -> int | None:
        """Messages waiting behind the position (0 = caught up with what the broker has, verified).
        A positive count the last fetch responses show is answered from them (those messages are
        on their way); otherwise the broker is asked, on a connection of its own (``_WatermarkClients``),
        and its 0 counts only once a fetch has answered (before that: None, unknown). A broker that does not answer raises
        ``KafkaPartitionUnavailableError``; either way a non-zero answer from the broker makes the
        next empty ``read`` wait for its confirmation."""
        if self._consumer is None:
            return None
        try:
            # the watermarks of the last fetch responses show messages behind the position without
            # a request (the engine asks after every empty read of every partition); only "nothing
            # waits" is confirmed with the broker
            behind = self._lag(0, cached=True)
        except KafkaException:
            behind = None
        if behind:
            return behind
        try:
            waiting = self._lag(min(_ASK_TIMEOUT, self.settings.broker_timeout))
        except KafkaException as e:
            self._verify = True
            topic, num = self._assigned[0]
            raise KafkaPartitionUnavailableError(self.id, topic, num, -1, f"high watermark from "
                                                 f"{self.settings.servers}: {e.args[0].str()}",
                                                 servers=self.settings.servers) from None
        self._verify = bool(waiting) or self._commit_failed is not None
        if not waiting and behind is None:
            # no fetch has answered yet: the broker's figure may be Tansu's lower bound, and a
            # consumer that just started has read nothing (the engine reads without waiting)
            return None
        return waiting

    def _read(self, max_records: int) -> list[Record]:
        want = max_records - len(self._outbox)
        if want > 0:
            if self._txn:
                self._read_transaction(self._poll(want, self.settings.poll_timeout if self.read_wait is None
                                                  else self.read_wait))
            else:
                # consumed and turned into records a chunk at a time: messages and events then die
                # young instead of surviving into the garbage collector's old generation (whose full
                # collections cost more than decoding did); like one consume() of ``want`` messages,
                # it gathers up to ``want`` within poll-timeout
                wait = self.settings.poll_timeout if self.read_wait is None else self.read_wait
                deadline = time.monotonic() + wait
                while want > 0:
                    n = min(want, _POLL_CHUNK)
                    msgs = self._poll(n, max(0.0, deadline - time.monotonic()))
                    if msgs and self._rebuild_until is not None:
                        # reading a transaction again is progress, not idleness: it does not count
                        # against this read's messages or its wait
                        deadline = time.monotonic() + wait
                        msgs = self._rebuild(msgs)
                        if not msgs:
                            continue
                    if msgs:
                        self._read_rows(msgs)
                        want -= len(msgs)
                    if len(msgs) < n and time.monotonic() >= deadline:
                        break
        if len(self._outbox) <= max_records:
            out, self._outbox = self._outbox, []
        else:
            out = self._outbox[:max_records]
            del self._outbox[:max_records]
        if out:
            self._last_position = out[-1].position
        return out

    def _events(self, msg, part: str) -> list:
        events = self._decode(msg)
        skip = self._skip.get(part)
        if skip is not None and skip[0] == msg.offset():
            del self._skip[part]
            return [(i, ev) for i, ev in enumerate(events) if i >= skip[1]], len(events)
        return list(enumerate(events)), len(events)

    def _read_rows(self, msgs: list) -> None:
        """Decode, drop replays, then build the batch's records in one ``to_records`` call
        (one generated builder per table instead of per-record dispatch)."""
        if self.settings.protocol == "open-protocol" or self._skip:
            self._read_rows_multi(msgs)
        else:
            self._read_rows_single(msgs)

    def _read_rows_single(self, msgs: list) -> None:
        """Protocols with one event per message: the position is the next offset plus the
        replay filter's state, formatted from its cached JSON (no per-record ``dumps``)."""
        dedup, store, out = self._dedup, self._store, self._outbox
        admit_row_json, admit_ddl, state_json = dedup.admit_row_json, dedup.admit_ddl, dedup.state_json
        tid = self._tid
        proto = self.settings.protocol
        avro, raw = proto == "avro", proto == "raw"
        decode = self._decoder.decode if self._decoder is not None else None
        events: list = []
        positions: list[bytes] = []
        for m in msgs:
            try:
                if avro:
                    ev = _avro_event(decode, m)
                elif raw:
                    ev = raw_record(m)
                else:
                    value = m.value()
                    if value is None:
                        continue
                    ev = decode(value) if decode is not None else jsonform.loads_record(value, self._store)
            except InfrastructureError:
                raise  # the registry is down: the batch fails, the message is not to blame
            except (CodecError, CdcflowError, ValueError) as e:
                raise KafkaSourceError(self.id, m.topic(), m.partition(), m.offset(),
                                       f"cannot decode {proto} message: {e}") from None
            t = type(ev)
            if t is RowChange:
                state = admit_row_json(ev, m.offset())
                if state is None:
                    continue
            elif t is DDLEvent:
                if not admit_ddl(ev):
                    continue
                state = state_json()
            else:
                if t is ResolvedEvent:
                    dedup.complete_through(ev.ts)
                state = state_json()
            pos = b'["row",%d,0,%s,%s]' % (m.offset() + 1, state, tid)
            if t is Record:  # opencdc-json: already a record, keep its place in the batch
                self._place_record(ev, pos, events, positions)
            else:
                events.append(ev)
                positions.append(pos)
        if events:
            out.extend(to_records(events, positions, store))

    def _place_record(self, record: Record, pos: bytes, events: list, positions: list) -> None:
        """A message that already is a record: flush the row events before it so the batch keeps
        message order, then add it with its position (the pending lists are emptied in place)."""
        if events:
            self._outbox.extend(to_records(events, positions, self._store))
            events.clear()
            positions.clear()
        record.position = pos
        self._outbox.append(record)

    def _read_rows_multi(self, msgs: list) -> None:
        """Messages of several events (open protocol), or a restart inside such a message."""
        part = self._parts[0]
        dedup, store, out = self._dedup, self._store, self._outbox
        events: list = []
        positions: list[bytes] = []
        for m in msgs:
            indexed, n = self._events(m, part)
            off = m.offset()
            for i, ev in indexed:
                t = type(ev)
                if t is RowChange:
                    if not dedup.admit_row(ev, off):
                        continue
                elif t is DDLEvent:
                    if not dedup.admit_ddl(ev):
                        continue
                elif t is ResolvedEvent:
                    dedup.complete_through(ev.ts)
                nxt, skip = (off + 1, 0) if i + 1 >= n else (off, i + 1)
                pos = b'["row",%d,%d,%s,%s]' % (nxt, skip, dedup.state_json(), self._tid)
                if t is Record:
                    self._place_record(ev, pos, events, positions)
                else:
                    events.append(ev)
                    positions.append(pos)
        if events:
            out.extend(to_records(events, positions, store))

    def _read_transaction(self, msgs: list) -> None:
        """Buffer, release what the global resolved ts completes, drop replays among it.

        A released record's position is where this release started plus how many records it had
        admitted: ``["txn", resume, state, L, n, resolved, frontier, topic ids]`` = "from the
        replay filter ``state`` at the ``resume`` points, the first ``n`` records admitted with
        commit ts <= ``L`` were emitted". Release order is deterministic (commit ts first), so a
        restart re-reads, re-admits and skips exactly those. ``resolved`` is each partition's
        resolved ts as of its resume point (its resolved event may lie before it, never read
        again) and ``frontier`` the released one, so a restart neither stalls nor repeats resolved
        records. The filter needs no rows past a release (everything at or below the frontier is
        complete), so positions stay small whatever the transaction size.
        """
        buf = self._buffer
        for m in msgs:
            part = f"{m.topic()}:{m.partition()}"
            indexed, n = self._events(m, part)
            off = m.offset()
            if not indexed:  # whole message skipped (already returned before a restart)
                buf.consumed[part] = (off + 1, 0)
            for i, ev in indexed:
                buf.add(part, ev, off, i, n)
        dumps = orjson.dumps
        dedup, store, out = self._dedup, self._store, self._outbox
        start = b'["txn",%s,%s' % (dumps(buf.resume()), dedup.state_json())
        context = b",%s,%d,%s]" % (dumps(buf.resume_resolved()), buf.frontier, self._ids_json)
        entries = buf.release()
        limit = buf.frontier
        skip_ts, skip_n = self._released_skip
        admitted = skipped = 0
        for e in entries:
            ev = e.event
            keep = dedup.admit_row(ev) if type(ev) is RowChange else dedup.admit_ddl(ev)
            buf.mark_done(e)
            if not keep:
                continue
            admitted += 1
            if skipped < skip_n and e.ts <= skip_ts:
                skipped += 1
                continue  # emitted before the restart this release repeats
            out.append(to_record(ev, b"%s,%d,%d%s" % (start, limit, admitted, context), store))
        dedup.complete_through(limit)
        if entries and skip_n:
            self._released_skip = (skip_ts, skip_n - skipped) if skip_n > skipped else (0, 0)
        if buf.frontier > self._emitted_resolved:
            self._emitted_resolved = buf.frontier
            skip_ts, skip_n = self._released_skip
            out.append(to_record(ResolvedEvent(buf.frontier), b'["txn",%s,%s,%d,%d,%s,%d,%s]' % (
                dumps(buf.resume()), dedup.state_json(), skip_ts, skip_n, dumps(buf.resume_resolved()),
                buf.frontier, self._ids_json), store))

    def ack(self, positions: Sequence[bytes]) -> None:
        if not positions or self._consumer is None:
            return
        state = orjson.loads(positions[-1])
        if state[0] == _ROW:
            topic, num = _split(self._parts[0])
            offsets = [TopicPartition(topic, num, state[1])]
        else:
            offsets = [TopicPartition(*_split(p), v[0]) for p, v in state[1].items()]
        self._acked = offsets
        self._commit(offsets)

    def _commit(self, offsets: list[TopicPartition]) -> None:
        # asynchronous: a stalled broker must not hold the task (a synchronous commit has no timeout);
        # a failure is reported to ``_committed`` and fails the source if it lasts (see ``_recommit``)
        try:
            self._consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as e:
            self._commit_failure(str(e.args[0].str()))

    def _committed(self, err, partitions) -> None:
        """Asynchronous commit result (served by the consumer's next poll)."""
        failed = [tp for tp in partitions or () if tp.error is not None]
        if err is not None or failed:
            self._commit_failure(str(err.str() if err is not None else failed[0].error.str()))
        elif self._commit_failed is not None:
            log.info("kafka source %s: committing offsets works again", self.id)
            self._commit_failed = None

    def _commit_failure(self, why: str) -> None:
        """A failed commit: the broker or the group coordinator is gone. Retried with the latest
        acknowledged offsets (``_recommit``); one lasting ``broker-timeout`` fails the source."""
        if self._commit_failed is None:
            log.warning("kafka source %s: committing offsets to %s failed: %s", self.id, self.settings.servers, why)
            self._commit_failed = (time.monotonic(), why)
            self._last_recommit = time.monotonic()
        else:
            self._commit_failed = (self._commit_failed[0], why)
        self._verify = True

    def _recommit(self) -> None:
        since, why = self._commit_failed
        now = time.monotonic()
        if now - since > self.settings.broker_timeout:
            topic, num = self._assigned[0]
            raise KafkaPartitionUnavailableError(
                self.id, topic, num, -1, f"committing offsets to group {self._group_id()!r} on "
                f"{self.settings.servers} has failed for {now - since:.0f}s (broker-timeout "
                f"{self.settings.broker_timeout:g}s): {why}", servers=self.settings.servers)
        if self._acked and now - self._last_recommit >= 1.0:
            self._last_recommit = now
            self._commit(self._acked)

    def stop(self) -> bytes | None:
        return self._last_position

    def teardown(self) -> None:
        watermarks, self._watermarks = getattr(self, "_watermarks", None), None
        if watermarks is not None:
            _WATERMARKS.release(watermarks)
        consumer, self._consumer = getattr(self, "_consumer", None), None
        if consumer is None:
            return

        def close() -> None:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001 - closing after a failure must not hide it
                log.debug("consumer close failed", exc_info=True)

        # librdkafka's close has no timeout and waits for offset commits queued for a group
        # coordinator that is gone: bounded here, the rest is left to finish in the background
        closer = threading.Thread(target=close, name=f"kafka-close-{self.id}", daemon=True)
        closer.start()
        closer.join(min(10.0, self.settings.broker_timeout))
        if closer.is_alive():
            log.warning("kafka source %s: closing the consumer on %s did not finish within %gs; left to finish "
                        "in the background", self.id, self.settings.servers, min(10.0, self.settings.broker_timeout))

    # informative for progress displays
    def buffered(self) -> int:
        return self._buffer.buffered() if getattr(self, "_buffer", None) is not None else 0


__all__ = ["KafkaSource", "KafkaSourceError", "KafkaPartitionUnavailableError", "ALL_PARTITIONS", "CONTROL_RESOLVED"]
