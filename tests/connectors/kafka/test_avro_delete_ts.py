"""An Avro DELETE (key + tombstone) carries no commit ts (issue 14): before anything on its partition
bounds it, the source estimates it from the Kafka message time. An estimate can lie above the real
commit ts, so it must never act as a replay mark nor order the delete after the table's later rows:
either would lose a row. Real Tansu broker, real registry."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from helpers.kafka_pipeline import OPTIONS, kafka_to_file, lines, run_to_end

from cdcflow.connectors.ticdc.avro import AvroEncoder
from cdcflow.schemaregistry.client import RegistryClient
from helpers.kafka import ORDERS, create_topic, make_destination, make_source, raw_messages, read_all, record, row, tso

LATE_MS = 5000  # the message time of the delete: later than the commit ts of the row after it


def _produce(servers: str, registry: str, topic: str, resolved_ms: int | None = None) -> None:
    """DELETE of id 1 whose message time is LATE_MS, then an INSERT of id 1 (re-created) committed at 2000 ms."""
    enc = AvroEncoder(OPTIONS, RegistryClient(registry))
    key, _ = enc.encode_one(row(ORDERS, 1, tso(1000), "delete"), topic)
    ins_key, ins_value = enc.encode_one(row(ORDERS, 1, tso(2000)), topic)
    p = Producer({"bootstrap.servers": servers, "enable.idempotence": True})
    p.produce(topic, key=key, value=None, partition=0, timestamp=LATE_MS)
    p.produce(topic, key=ins_key, value=ins_value, partition=0, timestamp=LATE_MS + 1)
    if resolved_ms is not None:  # a watermark (avro-enable-watermark): every commit ts <= it was sent
        p.produce(topic, key=None, value=b"\x02" + tso(resolved_ms).to_bytes(8, "big"), partition=0)
    assert p.flush(10) == 0


def _source(servers: str, registry: str, topic: str, **extra):
    return make_source({"uri": f"kafka://{servers}/{topic}?protocol=avro&enable-tidb-extension=true",
                        "schema-registry": registry, "group.id": topic, **extra})


def _rows(records) -> list[tuple[str, int, int]]:
    return [(r.operation.text, r.key["id"], int(r.metadata["ticdc.commit-ts"])) for r in records
            if r.metadata.get("cdcflow.control") is None]


def test_an_estimated_delete_ts_never_drops_the_tables_next_row(kafka_broker, schema_registry, unique_name):
    """consistency: row. The delete's ts is the message time (never 0); had it set the table's
    replay mark, the INSERT at 2000 ms (below 5000 ms) would be dropped as a replay."""
    topic = unique_name
    create_topic(kafka_broker, topic, 1)
    _produce(kafka_broker, schema_registry, topic)
    src = _source(kafka_broker, schema_registry, topic)
    try:
        got = _rows(read_all(src, f"{topic}:0"))
    finally:
        src.teardown()
    assert got == [("delete", 1, tso(LATE_MS)), ("create", 1, tso(2000))]


def test_an_estimated_delete_is_released_before_the_tables_next_row(kafka_broker, schema_registry, unique_name):
    """consistency: transaction releases in commit ts order. The delete came first on its partition,
    so its real commit ts is at most the INSERT's: released at its estimate (5000 ms) it would come
    after the re-created row, and the row would end deleted downstream."""
    topic = unique_name
    create_topic(kafka_broker, topic, 1)
    _produce(kafka_broker, schema_registry, topic, resolved_ms=6000)
    src = _source(kafka_broker, schema_registry, topic, consistency="transaction",
                  **{"avro-enable-watermark": "true"})
    try:
        got = _rows(read_all(src, "*"))
    finally:
        src.teardown()
    assert got == [("delete", 1, tso(2000)), ("create", 1, tso(2000))]


def test_a_delete_written_by_cdcflow_keeps_its_own_commit_ts(kafka_broker, schema_registry, unique_name):
    """cdcflow's destination puts the DELETE's commit ts in a header of the tombstone: the first
    delete of a table reads back with its own ts (before: 0), not an estimate."""
    dst = make_destination({"uri": f"kafka://{kafka_broker}/{unique_name}-{{schema}}-{{table}}?protocol=avro"
                                   "&enable-tidb-extension=true", "schema-registry": schema_registry})
    try:
        assert dst.write([record(row(ORDERS, 3, tso(1000) + 7, "delete")), record(row(ORDERS, 4, tso(2000)))]) is None
    finally:
        dst.teardown()
    topic = f"{unique_name}-shop-orders"
    tomb = [m for m in raw_messages(kafka_broker, topic, idle=0.8) if m.value() is None]
    assert [h for h in tomb[0].headers()] == [("cdcflow-commit-ts", str(tso(1000) + 7).encode())]
    src = _source(kafka_broker, schema_registry, topic)
    try:
        got = _rows(read_all(src, f"{topic}:0"))
    finally:
        src.teardown()
    assert got == [("delete", 3, tso(1000) + 7), ("create", 4, tso(2000))]


@pytest.mark.slow
def test_cdcflow_run_keeps_every_row_after_an_estimated_delete(kafka_broker, schema_registry, unique_name, tmp_path):
    """The same stream as TiCDC writes it (no header) through `cdcflow run` into a file: the delete
    is dated by its message time, the re-created row is not lost as a replay."""
    topic = unique_name
    create_topic(kafka_broker, topic, 1)
    _produce(kafka_broker, schema_registry, topic)
    out = tmp_path / "out.jsonl"
    run_to_end(kafka_to_file(tmp_path, kafka_broker, schema_registry, topic, unique_name, out, "estimated"), tmp_path / "state")
    got = [(r["operation"], r["key"]["id"], int(r["metadata"]["ticdc.commit-ts"])) for r in lines(out)]
    assert got == [("delete", 1, tso(LATE_MS)), ("create", 1, tso(2000))]
