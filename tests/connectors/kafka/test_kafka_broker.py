"""The kafka source and destination against a real Tansu broker (and the built-in REST registry for Avro)."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from cdcflow.connectors.kafka.destination import KafkaDestinationError
from cdcflow.connectors.kafka.source import KafkaSourceError
from cdcflow.connectors.ticdc.avro import AvroOptions, build_schema, schema_text
from cdcflow.connectors.ticdc.events import META_COMMIT_TS
from cdcflow.connectors.ticdc.open_protocol import OpenProtocolEncoder
from cdcflow.convert import jsonform
from cdcflow.record import Operation
from cdcflow.schemaregistry.client import RegistryClient
from cdcflow.connectors.ticdc.tidb import Column, TableSchema
from helpers.kafka import (
    ORDERS, DDLEvent, ResolvedEvent, create_topic, make_destination, make_source, raw_messages, read_all, record,
    row, tso,
)


def _rows(records):
    return [r for r in records if r.control is None]


@pytest.mark.parametrize("protocol", ["canal-json", "open-protocol", "avro", "opencdc-json"])
def test_round_trip_through_kafka(kafka_broker, unique_name, protocol):
    rule = unique_name + ("-{schema}-{table}" if protocol == "avro" else "")
    opts = "&enable-tidb-extension=true" if protocol != "opencdc-json" else ""
    dst = make_destination({"uri": f"kafka://{kafka_broker}/{rule}?protocol={protocol}{opts}",
                            "partition": "index-value"})
    events = [row(ORDERS, i, tso(1000 + i)) for i in range(20)]
    events.append(row(ORDERS, 3, tso(2000), "update"))
    events.append(row(ORDERS, 4, tso(2001), "delete"))
    sent = [record(e, str(i).encode()) for i, e in enumerate(events)]
    assert dst.write(sent) is None
    dst.teardown()
    topic = rule.replace("{schema}", "shop").replace("{table}", "orders")
    src = make_source({"servers": kafka_broker, "topics": topic, "protocol": protocol,
                       "enable-tidb-extension": "true" if opts else "false"})
    got = []
    for p in src.partitions():
        got += read_all(src, p, idle=0.8)
        src.teardown()
    got = _rows(got)
    assert len(got) == len(sent)
    by_key = {}
    for r in got:
        by_key.setdefault(r.key["id"], []).append(r)
    for s in sent:
        if protocol == "avro" and s.operation == Operation.DELETE:  # Avro: key + tombstone, no commit ts
            assert any(x.operation == Operation.DELETE for x in by_key[s.key["id"]])
            continue
        r = next(x for x in by_key[s.key["id"]] if x.metadata[META_COMMIT_TS] == s.metadata[META_COMMIT_TS])
        assert r.operation == s.operation
        if s.operation != Operation.DELETE:
            assert r.after == s.after
    # index-value dispatch: every change of one key lands in one partition, in commit-ts order
    for changes in by_key.values():
        ts = [int(r.metadata[META_COMMIT_TS]) for r in changes if r.operation != Operation.DELETE]
        assert ts == sorted(ts)


def test_avro_written_by_cdcflow_reads_with_confluent_deserializer(kafka_broker, schema_registry, unique_name):
    dst = make_destination({"uri": f"kafka://{kafka_broker}/{unique_name}-{{schema}}-{{table}}?protocol=avro"
                                   f"&enable-tidb-extension=true", "schema-registry": schema_registry})
    assert dst.write([record(row(ORDERS, i, tso(5000 + i))) for i in range(3)]) is None
    dst.teardown()
    topic = f"{unique_name}-shop-orders"
    deser = AvroDeserializer(SchemaRegistryClient({"url": schema_registry}))
    values = []
    for m in raw_messages(kafka_broker, topic, idle=0.8):
        values.append(deser(m.value(), SerializationContext(topic, MessageField.VALUE)))
        key = deser(m.key(), SerializationContext(topic, MessageField.KEY))
        assert key == {"id": values[-1]["id"]}
    values.sort(key=lambda v: v["id"])
    assert [v["id"] for v in values] == [0, 1, 2]
    assert values[1]["name"] == "n1" and str(values[1]["price"]) == "1.25"
    assert values[2]["_tidb_op"] == "c" and values[2]["_tidb_commit_ts"] == tso(5002)
    client = RegistryClient(schema_registry)
    assert client.versions(f"{topic}-value") == [1] and client.versions(f"{topic}-key") == [1]


def test_confluent_serializer_output_decodes_in_source(kafka_broker, schema_registry, unique_name):
    topic = f"{unique_name}-shop-orders"
    create_topic(kafka_broker, topic, 1)
    opts = AvroOptions(enable_tidb_extension=True)
    sr = SchemaRegistryClient({"url": schema_registry})
    value_ser = AvroSerializer(sr, schema_text(build_schema(ORDERS, opts, key=False)),
                               conf={"auto.register.schemas": True})
    key_ser = AvroSerializer(sr, schema_text(build_schema(ORDERS, opts, key=True)))
    p = Producer({"bootstrap.servers": kafka_broker})
    for i in range(4):
        value = {"id": i, "name": f"n{i}", "price": __import__("decimal").Decimal(f"{i}.25"),
                 "_tidb_op": "c", "_tidb_commit_ts": tso(7000 + i), "_tidb_commit_physical_time": 7000 + i}
        p.produce(topic, key=key_ser({"id": i}, SerializationContext(topic, MessageField.KEY)),
                  value=value_ser(value, SerializationContext(topic, MessageField.VALUE)))
    p.flush(10)
    src = make_source({"uri": f"kafka://{kafka_broker}/{topic}?protocol=avro&enable-tidb-extension=true",
                       "schema-registry": schema_registry})
    got = _rows(read_all(src, f"{topic}:0", idle=0.8))
    src.teardown()
    assert [r.after["id"] for r in got] == [0, 1, 2, 3]
    assert got[2].after["price"] == __import__("decimal").Decimal("2.25")
    assert got[3].metadata[META_COMMIT_TS] == str(tso(7003))


def _produce_open(kafka_broker, topic, plan):
    """plan: list of (partition, event); each event in a message of its own, in this order."""
    enc = OpenProtocolEncoder()
    p = Producer({"bootstrap.servers": kafka_broker, "linger.ms": 0})
    for part, ev in plan:
        (key, value), = enc.encode([ev])
        p.produce(topic, key=key, value=value, partition=part)
        p.flush(10)


def test_transaction_consistency_three_partitions_and_replay(kafka_broker, unique_name):
    topic = unique_name
    create_topic(kafka_broker, topic, 3)
    other = TableSchema("shop", "items", ORDERS.columns)
    ddl = DDLEvent("shop", "orders", "ALTER TABLE orders ADD COLUMN c INT", tso(300), 5)
    plan = [
        (0, row(ORDERS, 1, tso(100))), (1, row(other, 2, tso(101))), (2, row(ORDERS, 3, tso(150))),
        (0, row(other, 4, tso(160))), (1, row(ORDERS, 5, tso(120))),
        (0, ResolvedEvent(tso(200))), (1, ResolvedEvent(tso(200))),
        (2, row(ORDERS, 6, tso(210))),  # after partition 2 has said nothing: held
        (0, ddl), (1, ddl), (2, ddl),  # DDL broadcast: barrier
        (0, row(ORDERS, 7, tso(310))), (1, row(other, 8, tso(305))), (2, row(ORDERS, 9, tso(400))),
        (0, ResolvedEvent(tso(350))), (1, ResolvedEvent(tso(350))), (2, ResolvedEvent(tso(350))),
    ]
    _produce_open(kafka_broker, topic, plan)
    settings = {"uri": f"kafka://{kafka_broker}/{topic}?protocol=open-protocol", "consistency": "transaction"}
    src = make_source(settings)
    assert list(src.partitions()) == ["*"]
    got = read_all(src, "*", idle=1.0)
    position = got[-1].position
    src.teardown()

    def shape(records):
        out = []
        for r in records:
            if r.control == "ddl":
                out.append(("ddl", int(r.metadata[META_COMMIT_TS]) >> 18))
            elif r.control is None:
                out.append((r.after["id"], int(r.metadata[META_COMMIT_TS]) >> 18))
        return out

    # rows ≤ global resolved (350) only; commit-ts order; the DDL after every older row and before every newer
    assert shape(got) == [(1, 100), (2, 101), (5, 120), (3, 150), (4, 160), (6, 210), ("ddl", 300),
                          (8, 305), (7, 310)]
    resolved = [int(r.metadata["ticdc.resolved-ts"]) >> 18 for r in got if r.control == "resolved"]
    assert resolved and resolved[-1] == 350

    # TiCDC restarts: the same segment again, then new rows; nothing already emitted comes twice
    _produce_open(kafka_broker, topic, plan + [
        (0, ResolvedEvent(tso(500))), (1, ResolvedEvent(tso(500))), (2, ResolvedEvent(tso(500)))])
    src = make_source(settings)
    again = read_all(src, "*", position=position, idle=1.0)
    src.teardown()
    assert shape(again) == [(9, 400)]


def test_row_mode_restart_resumes_from_committed_offsets(kafka_broker, unique_name):
    topic = unique_name
    create_topic(kafka_broker, topic, 1)
    dst = make_destination({"uri": f"kafka://{kafka_broker}/{topic}?protocol=canal-json&enable-tidb-extension=true"})
    assert dst.write([record(row(ORDERS, i, tso(100 + i))) for i in range(10)]) is None
    settings = {"uri": f"kafka://{kafka_broker}/{topic}?protocol=canal-json&enable-tidb-extension=true",
                "group.id": unique_name}
    src = make_source(settings)
    src.open(None, f"{topic}:0")
    first = []
    deadline = time.monotonic() + 10
    while len(first) < 4 and time.monotonic() < deadline:
        first += src.read(4 - len(first))
    src.ack([r.position for r in first])  # the rest was read but never acknowledged downstream
    src.read(100)
    src.teardown()
    src = make_source(settings)
    rest = read_all(src, f"{topic}:0", position=None, idle=0.8)  # no engine state: the group's offsets
    src.teardown()
    assert [r.after["id"] for r in first] == [0, 1, 2, 3]
    assert [r.after["id"] for r in rest] == list(range(4, 10))
    # replayed upstream messages (TiCDC restart) are dropped on a source resumed from a position
    assert dst.write([record(row(ORDERS, i, tso(100 + i))) for i in range(5, 10)]) is None
    src = make_source(settings)
    assert read_all(src, f"{topic}:0", position=rest[-1].position, idle=0.8) == []
    src.teardown()
    dst.teardown()


def test_oversized_message_is_that_records_error(kafka_broker, unique_name):
    dst = make_destination({"uri": f"kafka://{kafka_broker}/{unique_name}?protocol=canal-json",
                            "max-message-bytes": "600"})
    big = row(ORDERS, 2, tso(10))
    big.row["name"] = "x" * 2000
    errors = dst.write([record(row(ORDERS, 1, tso(9))), record(big), record(row(ORDERS, 3, tso(11)))])
    dst.teardown()
    assert errors[0] is None and errors[2] is None
    assert "exceeds max-message-bytes 600" in errors[1]
    assert len(raw_messages(kafka_broker, unique_name, idle=0.8)) == 2


def test_opencdc_json_record_that_does_not_convert_is_that_records_error(kafka_broker, unique_name):
    """The batch is written as JSON in one go; a record the JSON form cannot hold must not fail
    its neighbours: it alone gets the error, the others arrive as ``dumps_record`` writes them."""
    dst = make_destination({"uri": f"kafka://{kafka_broker}/{unique_name}?protocol=opencdc-json"})
    good = [record(row(ORDERS, i, tso(20 + i))) for i in range(3)]
    bad = record(row(ORDERS, 9, tso(30)))
    bad.after = {**bad.after, "note": object()}
    errors = dst.write([good[0], bad, good[1], good[2]])
    dst.teardown()
    assert errors[0] is None and errors[2] is None and errors[3] is None
    assert errors[1] and "object" in errors[1]
    got = sorted(m.value() for m in raw_messages(kafka_broker, unique_name, idle=0.8))
    assert got == sorted(jsonform.dumps_record(r) for r in good)


def test_avro_schema_evolution_new_version_and_409_to_dlq(kafka_broker, schema_registry, unique_name):
    rule = f"{unique_name}-{{schema}}-{{table}}"
    dst = make_destination({"uri": f"kafka://{kafka_broker}/{rule}?protocol=avro", "schema-registry": schema_registry})
    assert dst.write([record(row(ORDERS, 1, tso(1)))]) is None
    widened = TableSchema("shop", "orders", ORDERS.columns + (Column("note", "VARCHAR", length=10),))
    ev = row(widened, 2, tso(2))
    ev.row["note"] = "hi"
    assert dst.write([record(ev)]) is None
    subject = f"{unique_name}-shop-orders-value"
    client = RegistryClient(schema_registry)
    assert client.versions(subject) == [1, 2]
    strict = TableSchema("shop", "orders", widened.columns + (Column("must", "INT", nullable=False),))
    bad = row(strict, 3, tso(3))
    bad.row.update(note=None, must=7)
    good = [row(widened, i, tso(i)) for i in (4, 5)]
    for g in good:
        g.row["note"] = None
    errors = dst.write([record(good[0]), record(bad), record(good[1])])
    dst.teardown()
    assert errors[0] is None and errors[2] is None
    assert "registry refused the schema" in errors[1] and "409" in errors[1], errors[1]
    assert client.versions(subject) == [1, 2]
    assert len(raw_messages(kafka_broker, subject[:-len("-value")], idle=0.8)) == 4  # the refused row is not sent


def _open_protocol_kinds(key: bytes) -> list[int]:
    """The ``t`` of every event in an open-protocol batch key (version, then length-prefixed JSON keys)."""
    assert int.from_bytes(key[:8], "big") == 1
    kinds, at = [], 8
    while at < len(key):
        n = int.from_bytes(key[at:at + 8], "big")
        kinds.append(json.loads(key[at + 8:at + 8 + n])["t"])
        at += 8 + n
    return kinds


def _open_protocol_values(value: bytes) -> list[bytes]:
    out, at = [], 0
    while at < len(value):
        n = int.from_bytes(value[at:at + 8], "big")
        out.append(value[at + 8:at + 8 + n])
        at += 8 + n
    return out


def _read_placed(protocol: str, m) -> tuple[str, list[int]]:
    """What a message carries and the row ids in it, read the way a TiCDC consumer reads it
    (the formats' framing and field names, no cdcflow decoder)."""
    if protocol == "open-protocol":
        kinds = set(_open_protocol_kinds(m.key()))
        assert len(kinds) == 1, kinds
        kind = {1: "row", 2: "ddl", 3: "resolved"}[kinds.pop()]
        ids = [int(json.loads(v)["u"]["id"]["v"]) for v in _open_protocol_values(m.value())] if kind == "row" else []
        return kind, ids
    value = json.loads(m.value())
    if value["type"] == "TIDB_WATERMARK":
        return "resolved", []
    if value["isDdl"]:
        return "ddl", []
    return "row", [int(value["data"][0]["id"])]


@pytest.mark.parametrize("protocol, extension, ddl_partitions, resolved_partitions", [
    ("open-protocol", False, [0, 1, 2], [0, 1, 2]),  # both broadcast
    ("canal-json", True, [0], [0, 1, 2]),  # DDL to partition 0, watermarks everywhere
    ("canal-json", False, [0], []),  # no watermarks without the extension
])
def test_control_events_go_to_the_partitions_ticdc_uses(kafka_broker, unique_name, protocol, extension,
                                                        ddl_partitions, resolved_partitions):
    topic = unique_name
    create_topic(kafka_broker, topic, 3)
    dst = make_destination({"uri": f"kafka://{kafka_broker}/{topic}?protocol={protocol}"
                                   f"&enable-tidb-extension={str(extension).lower()}", "partition": "index-value"})
    ddl = DDLEvent("shop", "orders", "ALTER TABLE orders ADD COLUMN c INT", tso(50), 5)
    events = [row(ORDERS, i, tso(10 + i)) for i in range(12)]
    events[6:6] = [ddl]
    events.append(ResolvedEvent(tso(60)))
    assert dst.write([record(e) for e in events]) is None
    dst.teardown()
    placed: dict[str, list[int]] = {"row": [], "ddl": [], "resolved": []}
    rows: list[tuple[int, int, int]] = []  # (partition, offset, id)
    for m in raw_messages(kafka_broker, topic, idle=0.8):
        kind, ids = _read_placed(protocol, m)
        placed[kind].append(m.partition())
        rows += [(m.partition(), m.offset(), i) for i in ids]
    assert sorted(placed["ddl"]) == ddl_partitions
    assert sorted(placed["resolved"]) == resolved_partitions
    assert sorted(i for _, _, i in rows) == list(range(12))
    assert len({p for p, _, _ in rows}) > 1  # index-value spread the rows
    # where the DDL lands it keeps its place: rows written before it come before it, the others after
    ddl_offset = {m.partition(): m.offset() for m in raw_messages(kafka_broker, topic, idle=0.5)
                  if _read_placed(protocol, m)[0] == "ddl"}
    for part, offset, i in rows:
        if part in ddl_offset:
            assert (i < 6) == (offset < ddl_offset[part]), (part, offset, i)


def test_topic_settings_as_ticdc_applies_them(kafka_broker, unique_name):
    """``auto-create-topic=false``: a missing topic fails the write, naming it (nothing is acknowledged).
    ``partition-num`` on an existing topic: rows go to that many partitions, control events still
    to every partition (a transaction-mode consumer waits for every partition's resolved ts);
    more than the topic has is an error."""
    missing = make_destination({"uri": f"kafka://{kafka_broker}/{unique_name}-missing?protocol=canal-json"
                                       "&auto-create-topic=false"})
    with pytest.raises(KafkaDestinationError, match=f"{unique_name}-missing.*auto-create-topic is false"):
        missing.write([record(row(ORDERS, 1, tso(1)))])
    missing.teardown()

    topic = unique_name
    create_topic(kafka_broker, topic, 4)
    dst = make_destination({"uri": f"kafka://{kafka_broker}/{topic}?protocol=open-protocol&partition-num=2",
                            "partition": "index-value"})
    assert dst.write([record(row(ORDERS, i, tso(10 + i))) for i in range(40)] + [record(ResolvedEvent(tso(99)))]) \
        is None
    dst.teardown()
    placed: dict[str, set[int]] = {"row": set(), "resolved": set()}
    for m in raw_messages(kafka_broker, topic, idle=0.8):
        placed[_read_placed("open-protocol", m)[0]].add(m.partition())
    assert placed == {"row": {0, 1}, "resolved": {0, 1, 2, 3}}

    too_many = make_destination({"uri": f"kafka://{kafka_broker}/{topic}?protocol=open-protocol&partition-num=5"})
    with pytest.raises(KafkaDestinationError, match="partition-num 5 is more than the 4 partitions"):
        too_many.write([record(row(ORDERS, 1, tso(1)))])
    too_many.teardown()


@pytest.mark.parametrize("consistency", ["row", "transaction"])
def test_a_position_from_another_incarnation_of_the_topic_is_refused(kafka_broker, unique_name, consistency):
    """Positions carry the topic's id; one naming another id (the topic was recreated since) is a
    typed error naming the topic, never a silent resume at offsets that now mean other messages.
    (tests/connectors/kafka/test_broker_faults.py recreates a topic for real on a replaced broker, row mode.)"""
    topic = unique_name
    create_topic(kafka_broker, topic, 2)
    uri = f"kafka://{kafka_broker}/{topic}?protocol=open-protocol"
    dst = make_destination({"uri": uri, "partition": "index-value"})
    assert dst.write([record(row(ORDERS, i, tso(10 + i))) for i in range(6)] + [record(ResolvedEvent(tso(50)))]) \
        is None
    dst.teardown()
    settings = {"uri": uri, "consistency": consistency}
    part = "*" if consistency == "transaction" else f"{topic}:0"
    src = make_source(settings)
    got = read_all(src, part, idle=0.8)
    src.teardown()
    state = json.loads(got[-1].position)
    ids = state[-1]
    if consistency == "transaction":
        assert list(ids) == [topic] and ids[topic]
        state[-1] = {topic: "AAAAAAAAAAAAAAAAAAAAAA"}
    else:
        assert isinstance(ids, str) and ids
        state[-1] = "AAAAAAAAAAAAAAAAAAAAAA"
    src = make_source(settings)
    with pytest.raises(KafkaSourceError, match=f"{topic}.*was recreated"):
        src.open(json.dumps(state).encode(), part)
    src.teardown()
    src = make_source(settings)  # the genuine position still opens
    src.open(got[-1].position, part)
    src.teardown()
