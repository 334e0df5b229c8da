"""Shared pieces of the kafka connector tests: tables, events, records, plugin construction, reading all."""

from __future__ import annotations

import decimal
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cdcflow.connectors.kafka import DESTINATION_PARAMS, SOURCE_PARAMS, KafkaDestination, KafkaSource
from cdcflow.connectors.ticdc.events import DDLEvent, ResolvedEvent, RowChange, to_record
from cdcflow.params import validate
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

ORDERS = TableSchema("shop", "orders", (
    Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
    Column("name", "VARCHAR", length=64),
    Column("price", "DECIMAL", precision=10, scale=2),
))


def tso(ms: int) -> int:
    """A TiDB TSO with physical milliseconds ``ms``."""
    return ms << 18


def row(table: TableSchema, i: int, ts: int, kind: str = "insert") -> RowChange:
    r = {"id": i, "name": f"n{i}", "price": decimal.Decimal(f"{i}.25")}
    old = {**r, "name": f"old{i}"} if kind == "update" else None  # TiCDC sends the pre-image of updates
    return RowChange(table, kind, ts, r, old)


def record(ev, position: bytes = b"p") -> object:
    from cdcflow.schemas import default_store

    return to_record(ev, position, default_store())


def make_destination(settings: dict, id: str = "dst") -> KafkaDestination:
    d = KafkaDestination()
    d.id = id
    d.configure(validate("kafka", DESTINATION_PARAMS, settings))
    d.open()
    return d


def make_source(settings: dict, id: str = "src") -> KafkaSource:
    s = KafkaSource()
    s.id = id
    s.configure(validate("kafka", SOURCE_PARAMS, settings))
    return s


def create_topic(servers: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(15)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            return
        time.sleep(0.05)
    raise AssertionError(f"topic {topic} not ready")


def read_all(source: KafkaSource, partition: str, position: bytes | None = None, idle: float = 1.5,
             ack: bool = True) -> list:
    """Open ``partition`` at ``position`` and read until nothing arrives for ``idle`` seconds."""
    source.open(position, partition)
    out = []
    quiet = time.monotonic()
    while time.monotonic() - quiet < idle:
        batch = source.read(1000)
        if batch:
            out.extend(batch)
            if ack:
                source.ack([r.position for r in batch])
            quiet = time.monotonic()
    return out


def raw_messages(servers: str, topic: str, idle: float = 1.5) -> list:
    """Every message of ``topic`` as confluent_kafka Message objects (all partitions, from the start)."""
    c = Consumer({"bootstrap.servers": servers, "group.id": "raw-reader", "enable.auto.commit": False})
    md = c.list_topics(topic, timeout=10).topics[topic]
    c.assign([TopicPartition(topic, p, 0) for p in md.partitions])
    out = []
    quiet = time.monotonic()
    try:
        while time.monotonic() - quiet < idle:
            msgs = c.consume(1000, 0.2)
            msgs = [m for m in msgs if m.error() is None]
            if msgs:
                out.extend(msgs)
                quiet = time.monotonic()
    finally:
        c.close()
    return out


__all__ = ["ORDERS", "tso", "row", "record", "make_destination", "make_source", "create_topic", "read_all",
           "raw_messages", "DDLEvent", "ResolvedEvent", "RowChange"]
