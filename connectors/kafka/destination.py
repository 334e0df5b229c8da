"""The ``kafka`` destination: records → TiCDC messages (or opencdc-json) on Kafka.

Dispatch is TiCDC's (``dispatch``): rows by the topic rule and partition
dispatcher; DDL and resolved events broadcast to every partition (open
protocol, Avro watermarks), canal-json DDL to partition 0 and watermarks
everywhere when the extension is on. A batch is encoded first, then produced
on an idempotent producer; ``write`` returns after every delivery report, and a
record is written only when all messages it went into were delivered. Records
that cannot be encoded, exceed ``max-message-bytes`` or whose schema the
registry refuses (409) are that record's error → DLQ with the reason. A broker
or registry that fails is nobody's record's fault: an ``InfrastructureError``
(``KafkaDestinationError``, ``RegistryUnavailableError``) fails the whole batch.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from typing import Any, Sequence

import orjson
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cdcflow.convert import jsonform
from cdcflow.errors import CdcflowError, ConfigError, InfrastructureError
from cdcflow.record import META_COLLECTION, Record
from cdcflow.sdk import Destination

from ..ticdc.events import (
    META_ONLY_HANDLE_KEY, META_SCHEMA, META_TABLE, DDLEvent, ResolvedEvent, RowChange, from_record,
)
from ..ticdc.convert import names_event
from ..ticdc.open_protocol import MessageTooLarge
from .codecs import delete_ts_header, encoder_for
from .dispatch import dispatcher, table_hash, topic_for
from .errors import KafkaUnavailableError
from .settings import PLUGIN, KafkaSettings, make_client, resolve

log = logging.getLogger("cdcflow.connectors.kafka.destination")

_FRAME_SLACK = 512  # librdkafka's per-message overhead we allow on top of max-message-bytes
# delivery errors caused by the message itself (its record goes to the DLQ); any other failed report
# (timeouts, lost brokers, a fenced producer) fails the whole batch, which is then not acknowledged
_RECORD_FAULTS = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD,
                            KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_MSG, KafkaError.INVALID_MSG_SIZE})


class KafkaDestinationError(KafkaUnavailableError):
    """The batch could not be produced at all (broker unreachable, topic missing or not creatable,
    delivery reports missing or failed for a reason other than the message)."""


def _schema_table(r: Record) -> tuple[str, str]:
    md = r.metadata
    schema, table = md.get(META_SCHEMA), md.get(META_TABLE)
    if schema is None:
        coll = md.get(META_COLLECTION) or ""
        schema, _, table = coll.partition(".") if "." in coll else ("", "", coll)
    return schema or "", table or ""


class KafkaDestination(Destination):
    _record_format: Any = None

    def configure(self, config) -> None:
        super().configure(config)
        self.settings: KafkaSettings = resolve(config, "destination")
        self._producer: Producer | None = None

    @property
    def record_format(self) -> Any:
        """``sdk.record.format`` when it is not the JSON form (set by the engine's middleware): as
        Conduit's kafka destination writes ``Record.Bytes()``, in Conduit's record mode only."""
        return self._record_format

    @record_format.setter
    def record_format(self, fmt: Any) -> None:
        if fmt is not None and self.settings.protocol != "opencdc-json":
            raise ConfigError(self.id or PLUGIN, "sdk.record.format", "unsupported",
                              f"{fmt.name!r}: protocol {self.settings.protocol} writes its own messages "
                              "(sdk.record.format applies to Conduit's record mode: no protocol, or opencdc-json)")
        self._record_format = fmt

    def open(self) -> None:
        s = self.settings
        from cdcflow.schemas import default_store

        self._store = default_store()
        self._encoder = encoder_for(s)
        registry = getattr(self._encoder, "registry", None)
        if hasattr(registry, "check_reachable"):
            registry.check_reachable()  # as TiCDC: an unreachable registry fails at start, not per record
        self._dispatch = dispatcher(s.partition, s.columns)
        self._producer = make_client(Producer, s, **{
            "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "allow.auto.create.topics": False,  # topics are created here, with partition-num
            "message.max.bytes": min(1_000_000_000, s.max_message_bytes + _FRAME_SLACK),
            "batch.num.messages": 10000, "queue.buffering.max.messages": 1_000_000})
        self._admin = make_client(AdminClient, s)
        self._partitions: dict[str, int] = {}  # topic -> partitions rows are dispatched over
        self._all_partitions: dict[str, int] = {}  # topic -> partitions it has (control events go to all)

    def _unavailable(self, message: str) -> KafkaDestinationError:
        return KafkaDestinationError(message, servers=self.settings.servers)

    # -- topics --------------------------------------------------------------------------
    def _partition_count(self, topic: str) -> int:
        """Partitions rows of ``topic`` are dispatched over: the topic's own count, or ``partition-num``
        when the user set it (TiCDC's rule: fewer than the topic has is allowed, more is an error).
        A missing topic is created with ``partition-num`` and ``replication-factor`` unless
        ``auto-create-topic`` is false."""
        n = self._partitions.get(topic)
        if n is not None:
            return n
        s = self.settings
        who = f"kafka destination {self.id or PLUGIN}"
        # a broker that does not answer is nobody's record's fault: the batch fails (KafkaDestinationError,
        # the engine then saves no position), within delivery-timeout, instead of each record's DLQ entry
        wait = max(1.0, min(10.0, s.delivery_timeout))
        try:
            tmd = self._producer.list_topics(topic, timeout=wait).topics.get(topic)
        except KafkaException as e:
            raise self._unavailable(f"{who}: no metadata for topic {topic!r} from {s.servers} within "
                                    f"{wait:g}s: {e.args[0].str()}") from None
        if tmd is None or tmd.error is not None or not tmd.partitions:
            if not s.auto_create_topic:
                raise self._unavailable(f"{who}: topic {topic!r} does not exist on {s.servers} and "
                                        "auto-create-topic is false")
            futures = self._admin.create_topics([NewTopic(topic, s.partition_num, s.replication_factor)],
                                                operation_timeout=wait, request_timeout=wait)
            try:
                futures[topic].result(wait + 5)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise self._unavailable(f"{who}: cannot create topic {topic!r} on {s.servers}: "
                                            f"{e.args[0].str()}") from None
            except concurrent.futures.TimeoutError:
                raise self._unavailable(f"{who}: creating topic {topic!r} on {s.servers} got no answer "
                                        f"within {wait + 5:g}s") from None
            deadline = time.monotonic() + wait
            while True:
                try:
                    tmd = self._producer.list_topics(topic, timeout=wait).topics.get(topic)
                except KafkaException:
                    tmd = None
                if tmd is not None and tmd.error is None and tmd.partitions:
                    break
                if time.monotonic() > deadline:
                    raise self._unavailable(f"{who}: topic {topic!r} has no partitions after creating it")
                time.sleep(0.05)
        n = self._all_partitions[topic] = len(tmd.partitions)
        if s.partition_num_set:
            if s.partition_num > n:
                raise self._unavailable(
                f"kafka destination {self.id or PLUGIN}: partition-num {s.partition_num} is more than the "
                f"{n} partitions topic {topic!r} has")
            n = s.partition_num
        self._partitions[topic] = n
        return n

    def _broadcast_topics(self) -> list[str]:
        """Topics a resolved event goes to: every topic written so far, plus a static topic."""
        topics = set(self._partitions)
        if "{" not in self.settings.topic_rule:
            topics.add(self.settings.topic_rule)
        return sorted(topics)

    # -- encoding ------------------------------------------------------------------------
    def _plan(self, records: Sequence[Record], errors: list[str | None]) -> list[tuple]:
        """Messages to produce: (topic, partition, key, value, indexes of the records they carry,
        headers or None)."""
        s = self.settings
        proto = s.protocol
        out: list[tuple] = []
        open_rows: dict[tuple[str, int], list[tuple[int, RowChange]]] = {}
        max_bytes = s.max_message_bytes

        cut_large = s.large_message_handle_option == "handle-key-only"

        def emit(topic: str, part: int, key: Any, value: Any, idxs: list[int], rows: list | None = None,
                 headers: list | None = None) -> None:
            size = (len(key) if key else 0) + (len(value) if value else 0)
            if size > max_bytes:
                if cut_large and rows:
                    self._emit_handle_key_only(topic, part, idxs, rows, size, errors, emit)
                    return
                for i in idxs:
                    errors[i] = (f"message of {size} bytes for {topic}[{part}] exceeds max-message-bytes "
                                 f"{max_bytes}")
                return
            out.append((topic, part, key, value, idxs, headers))

        def flush_open_rows() -> None:
            for (topic, part), rows in open_rows.items():
                self._encode_open_rows(topic, part, rows, errors, emit)
            open_rows.clear()

        values = self._opencdc_values(records) if proto == "opencdc-json" else None
        for i, r in enumerate(records):
            try:
                if proto == "opencdc-json":
                    self._plan_opencdc(i, r, emit, values[i] if values is not None else None)
                    continue
                ev = from_record(r, self._store)
                t = type(ev)
                if t is RowChange:
                    topic = topic_for(s.topic_rule, ev.table.schema, ev.table.table)
                    part = self._dispatch(ev, self._partition_count(topic))
                    if proto == "open-protocol":
                        open_rows.setdefault((topic, part), []).append((i, ev))
                    elif proto == "avro":
                        msg = self._encoder.encode_one(names_event(ev, "avro"), topic)
                        # a tombstone has no room for its commit ts: a header carries it to cdcflow readers
                        emit(topic, part, msg[0], msg[1], [i],
                             headers=delete_ts_header(ev.commit_ts) if msg[1] is None else None)
                    else:
                        emit(topic, part, None, self._encoder.encode(ev), [i], [ev])
                    continue
                # control events keep their place: rows before them go out first
                flush_open_rows()
                self._plan_control(i, ev, emit)
            except InfrastructureError:
                raise  # broker or registry down: the batch fails, no record is to blame
            except Exception as e:  # noqa: BLE001 - one record's problem goes to the DLQ with its reason
                errors[i] = f"{type(e).__name__}: {e}"
        flush_open_rows()
        return out

    def _encode_open_rows(self, topic, part, rows, errors, emit) -> None:
        enc = self._encoder
        size = self.settings.max_batch_size
        for start in range(0, len(rows), size):
            chunk = rows[start:start + size]
            try:
                msgs = enc.encode([ev for _, ev in chunk])
            except Exception:  # noqa: BLE001 - find the bad rows one by one, keep the good ones
                for i, ev in chunk:
                    try:
                        encoded = enc.encode([ev])
                    except MessageTooLarge as e:  # the codec enforces max-message-bytes itself
                        if self.settings.large_message_handle_option == "handle-key-only":
                            self._emit_handle_key_only(topic, part, [i], [ev], 0, errors, emit)
                        else:
                            errors[i] = f"{type(e).__name__}: {e}"
                        continue
                    except Exception as e:  # noqa: BLE001
                        errors[i] = f"{type(e).__name__}: {e}"
                        continue
                    for k, v in encoded:
                        emit(topic, part, k, v, [i], [ev])
                continue
            idxs = [i for i, _ in chunk]
            for k, v in msgs:
                emit(topic, part, k, v, idxs, [ev for _, ev in chunk])

    def _emit_handle_key_only(self, topic, part, idxs, rows, size, errors, emit) -> None:
        """``large-message-handle-option=handle-key-only``: a row whose message is too large goes out
        with its handle-key columns only, flagged (canal-json ``_tidb.onlyHandleKey``, open protocol
        ``ohk``), as TiCDC does; a multi-row open-protocol message is first split into single rows."""
        max_bytes = self.settings.max_message_bytes
        if len(rows) > 1:
            for i, ev in zip(idxs, rows):
                try:
                    encoded = self._encode_row(ev)
                except Exception as e:  # noqa: BLE001 - that row's problem, to the DLQ
                    errors[i] = f"{type(e).__name__}: {e}"
                    continue
                for k, v in encoded:
                    emit(topic, part, k, v, [i], [ev])
            return
        (i,), (ev,) = idxs, rows
        if ev.extra.get(META_ONLY_HANDLE_KEY) == "true":  # already cut: nothing left to drop
            errors[i] = (f"message of {size or 'too many'} bytes for {topic}[{part}] exceeds max-message-bytes {max_bytes} "
                         "even with the handle key only")
            return
        names = [c.name for c in ev.table.handle_key]
        if not names:
            errors[i] = (f"message of {size or 'too many'} bytes for {topic}[{part}] exceeds max-message-bytes {max_bytes}; "
                         f"table {ev.table.collection} has no handle key for handle-key-only")
            return
        cut = RowChange(ev.table, ev.kind, ev.commit_ts, {n: (ev.row or {}).get(n) for n in names},
                        {n: ev.old.get(n) for n in names} if ev.old is not None else None,
                        {**ev.extra, META_ONLY_HANDLE_KEY: "true"})
        try:
            encoded = self._encode_row(cut)
        except Exception as e:  # noqa: BLE001 - MessageTooLarge included: even the key does not fit
            errors[i] = f"handle-key-only: {type(e).__name__}: {e}"
            return
        for k, v in encoded:
            emit(topic, part, k, v, [i], [cut])

    def _encode_row(self, ev: RowChange) -> list[tuple[Any, Any]]:
        if self.settings.protocol == "canal-json":
            return [(None, self._encoder.encode(ev))]
        return self._encoder.encode([ev])

    def _plan_control(self, i: int, ev: DDLEvent | ResolvedEvent, emit) -> None:
        s = self.settings
        proto = s.protocol
        if proto == "avro":
            msg = self._encoder.encode_one(ev, "")
            if msg is None:
                return  # TiCDC's Avro carries DDL/checkpoints only with avro-enable-watermark
            key, value = msg
        elif proto == "canal-json":
            if type(ev) is ResolvedEvent and not s.enable_tidb_extension:
                return  # watermarks exist only with the extension
            key, value = None, self._encoder.encode(ev)
        else:
            (key, value), = self._encoder.encode([ev])
        if type(ev) is DDLEvent and ev.table_name:
            topics = [topic_for(s.topic_rule, ev.schema, ev.table_name)]
        else:
            topics = self._broadcast_topics()
        for topic in topics:
            self._partition_count(topic)
            parts = [0] if (proto == "canal-json" and type(ev) is DDLEvent) else range(self._all_partitions[topic])
            for p in parts:
                emit(topic, p, key, value, [i])

    def _opencdc_values(self, records: Sequence[Record]) -> list[bytes] | None:
        """Every record's JSON form (or ``sdk.record.format``'s bytes), written as one batch; None
        when one of them does not convert (each is then written alone, so only that one goes to the
        DLQ)."""
        fmt = self._record_format
        try:
            return [fmt.serialize(r) for r in records] if fmt is not None else jsonform.dumps_each(records)
        except Exception:  # noqa: BLE001 - ``_plan_opencdc`` names the record and the reason
            return None

    def _plan_opencdc(self, i: int, r: Record, emit, value: bytes | None = None) -> None:
        s = self.settings
        schema, table = _schema_table(r)
        if "{{" in s.topic_rule:  # Conduit's topic template, rendered with each record
            topic = self._topic_template().render(r)
            if not topic:
                raise ValueError(f"topic template {s.topic_rule!r} gives an empty topic for this record")
        else:
            topic = topic_for(s.topic_rule, schema, table)
        n = self._partition_count(topic)
        if value is None:
            fmt = self._record_format
            value = fmt.serialize(r) if fmt is not None else jsonform.dumps_record(r)
        key = r.key if isinstance(r.key, bytes) else (
            orjson.dumps(r.key, option=orjson.OPT_SORT_KEYS, default=str) if r.key is not None else None)
        if s.partition == "ts":
            part = int(r.metadata.get("ticdc.commit-ts", "0") or 0) % n
        elif s.partition in ("default", "table"):
            part = table_hash(schema, table) % n
        else:  # key-based: the key's bytes stand for the handle key
            import zlib

            part = zlib.crc32(key or b"", table_hash(schema, table)) % n
        emit(topic, part, key, value, [i])

    def _topic_template(self) -> Any:
        template = getattr(self, "_topic_tpl", None)
        if template is None:
            from cdcflow.expr import Template

            template = self._topic_tpl = Template.compile(self.settings.topic_rule)
        return template

    # -- writing -------------------------------------------------------------------------
    def write(self, records: Sequence[Record]) -> Sequence[str | None] | None:
        if self._producer is None:
            raise CdcflowError(f"kafka destination {self.id or PLUGIN}: write before open")
        errors: list[str | None] = [None] * len(records)
        messages = self._plan(records, errors)
        producer = self._producer
        pending: dict[tuple[str, int], int] = {}  # (topic, partition) -> messages awaiting their report
        failed: list[str] = []  # delivery errors that are not the record's fault

        def report(idxs):
            def on_delivery(err, msg):
                where = (msg.topic(), msg.partition())
                pending[where] -= 1
                if err is None:
                    return
                why = f"delivery to {where[0]}[{where[1]}] failed: {err.str()}"
                if err.code() not in _RECORD_FAULTS:
                    failed.append(why)
                    return
                for i in idxs:
                    if errors[i] is None:
                        errors[i] = why
            return on_delivery

        for topic, part, key, value, idxs, headers in messages:
            cb = report(idxs)
            while True:
                try:
                    if headers is None:
                        producer.produce(topic, value=value, key=key, partition=part, on_delivery=cb)
                    else:
                        producer.produce(topic, value=value, key=key, partition=part, on_delivery=cb,
                                         headers=headers)
                    pending[(topic, part)] = pending.get((topic, part), 0) + 1
                    break
                except BufferError:
                    producer.poll(0.05)
                except KafkaException as e:
                    why = f"produce to {topic}[{part}] refused: {e}"
                    for i in idxs:
                        errors[i] = errors[i] or why
                    break
        deadline = time.monotonic() + self.settings.delivery_timeout
        while any(pending.values()):
            producer.flush(0.5)
            if time.monotonic() > deadline and any(pending.values()):
                waiting = sorted(f"{t}[{p}]" for (t, p), n in pending.items() if n)
                raise self._unavailable(
                f"kafka destination {self.id or PLUGIN}: {sum(pending.values())} messages undelivered after "
                f"{self.settings.delivery_timeout:g}s to {', '.join(waiting[:5])}"
                f"{' ...' if len(waiting) > 5 else ''} (brokers {self.settings.servers})")
        if failed:
            raise self._unavailable(f"kafka destination {self.id or PLUGIN}: {len(failed)} messages not "
                                    f"delivered: {failed[0]}")
        return errors if any(e is not None for e in errors) else None

    def stop(self, last_position: bytes | None) -> None:
        if self._producer is not None:
            self._producer.flush(self.settings.delivery_timeout)

    def teardown(self) -> None:
        # every message of a successful write is delivered before it returns; what is still queued
        # belongs to a failed batch, which was not acknowledged and will be written again
        producer, self._producer = getattr(self, "_producer", None), None
        if producer is not None:
            producer.purge(in_queue=True, in_flight=False)
            producer.flush(1)
