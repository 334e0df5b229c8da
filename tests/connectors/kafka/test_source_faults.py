"""The kafka source on a real broker: what is a message's fault, what is the broker's, and when
silence counts as caught up."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from helpers.kafka_pipeline import OPTIONS, orders, produce

from cdcflow.connectors.kafka.source import KafkaPartitionUnavailableError, KafkaSourceError
from cdcflow.connectors.ticdc.avro import AvroEncoder
from cdcflow.errors import InfrastructureError
from cdcflow.schemaregistry.client import RegistryClient
from helpers.kafka import create_topic, make_source


def avro_source(servers: str, registry: str, topic: str, **extra) -> object:
    return make_source({"uri": f"kafka://{servers}/{topic}?protocol=avro&enable-tidb-extension=true",
                        "schema-registry": registry, "group.id": topic, **extra})


def read_until_error(src, within: float = 15) -> tuple[list, Exception | None]:
    got: list = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            got.extend(src.read(100))
        except Exception as e:  # noqa: BLE001 - the test looks at what it is
            return got, e
    return got, None


def test_an_empty_avro_value_is_malformed_not_a_delete(kafka_broker, schema_registry, unique_name):
    """A DELETE is a key with a *missing* value (a tombstone); b"" is not one. Before: the row
    with that key came out as a DELETE, silently."""
    topic = unique_name
    create_topic(kafka_broker, topic, 1)
    produce(kafka_broker, schema_registry, topic, [(0, ev) for ev in orders(range(3))])
    key, _ = AvroEncoder(OPTIONS, RegistryClient(schema_registry)).encode_one(orders([7])[0], topic)
    p = Producer({"bootstrap.servers": kafka_broker})
    p.produce(topic, key=key, value=b"", partition=0)
    assert p.flush(10) == 0
    src = avro_source(kafka_broker, schema_registry, topic)
    src.open(None, f"{topic}:0")
    try:
        got, error = read_until_error(src)
    finally:
        src.teardown()
    assert all(r.key["id"] in (0, 1, 2) for r in got)  # the row of key 7 never comes out (as a DELETE)
    assert isinstance(error, KafkaSourceError) and not isinstance(error, InfrastructureError), repr(error)
    assert (error.topic, error.partition, error.offset) == (topic, 0, 3)
    assert "empty" in str(error), str(error)


def test_a_message_over_max_message_bytes_is_refused_naming_its_offset(kafka_broker, schema_registry, unique_name):
    """Before: the source ignored max-message-bytes and read anything."""
    topic = unique_name
    create_topic(kafka_broker, topic, 1)
    produce(kafka_broker, schema_registry, topic, [(0, ev) for ev in orders(range(2))])
    p = Producer({"bootstrap.servers": kafka_broker})
    p.produce(topic, key=b"k", value=b"\x00" * 5000, partition=0)
    assert p.flush(10) == 0
    src = avro_source(kafka_broker, schema_registry, topic, **{"max-message-bytes": "4096"})
    src.open(None, f"{topic}:0")
    try:
        _, error = read_until_error(src)
    finally:
        src.teardown()
    assert isinstance(error, KafkaSourceError) and not isinstance(error, InfrastructureError), repr(error)
    assert error.offset == 2 and "max-message-bytes 4096" in str(error) and "5001 bytes" in str(error), str(error)


def test_lag_is_what_waits_on_the_broker_and_zero_only_when_caught_up(kafka_broker, schema_registry, unique_name):
    """``lag()`` (what ``--until-idle`` relies on) comes from the broker's high watermark; Tansu's is
    its last batch's base offset + 1, so the figure is a lower bound but 0 only at the end."""
    topic = unique_name
    create_topic(kafka_broker, topic, 1)
    produce(kafka_broker, schema_registry, topic, [(0, ev) for ev in orders(range(500))])
    src = avro_source(kafka_broker, schema_registry, topic)
    src.open(None, f"{topic}:0")
    try:
        assert src.lag() > 0  # nothing read yet
        got: list = []
        deadline = time.monotonic() + 20
        while len(got) < 500 and time.monotonic() < deadline:
            got.extend(src.read(100))
        assert len(got) == 500
        assert src.lag() == 0
        assert src.read(100) == []  # caught up, confirmed: an empty read, not a wait
        produce(kafka_broker, schema_registry, topic, [(0, ev) for ev in orders(range(500, 510))])
        assert src.lag() > 0
    finally:
        src.teardown()


@pytest.mark.timeout(60)
def test_lag_is_not_zero_before_a_fetch_answered_even_past_tansus_watermark(kafka_broker, schema_registry,
                                                                          unique_name):
    """A task serving several partitions reads each without waiting (``read_wait = 0``), so a consumer
    that just started returns [] before its first fetch answered. Tansu, asked for a partition's
    high watermark, answers its last record batch's base offset + 1: a position inside that batch
    is past it. Before: ``lag()`` said 0 then, the partition counted as caught up, and
    ``--until-idle`` ended with the rest of the batch unread (rows lost in the kill -9 test). Now
    ``lag()`` says 0 only once a fetch has answered."""
    from confluent_kafka import Consumer, TopicPartition

    topic = unique_name
    create_topic(kafka_broker, topic, 1)
    produce(kafka_broker, schema_registry, topic, [(0, ev) for ev in orders(range(500))])  # one or two batches
    committer = Consumer({"bootstrap.servers": kafka_broker, "group.id": topic})
    committer.commit(offsets=[TopicPartition(topic, 0, 400)], asynchronous=False)
    assert committer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1] <= 400  # Tansu's figure
    committer.close()
    src = avro_source(kafka_broker, schema_registry, topic)
    src.read_wait = 0.0
    src.open(None, f"{topic}:0")
    try:
        first = src.read(100)
        if first:
            pytest.skip("the first fetch answered before the first read: nothing to test")
        assert src.lag() != 0
        got: list = []
        deadline = time.monotonic() + 20
        while len(got) < 100 and time.monotonic() < deadline:
            got.extend(src.read(100))
        assert [r.key["id"] for r in got] == list(range(400, 500))
        assert src.lag() == 0
    finally:
        src.teardown()


def test_the_registry_down_is_the_sources_outage_not_the_messages_fault(kafka_broker, tmp_path, unique_name):
    from cdcflow.dev.registry import RegistryService

    topic = unique_name
    create_topic(kafka_broker, topic, 1)
    with RegistryService(tmp_path / "data", log_path=tmp_path / "r.log") as registry:
        url = registry.url
        produce(kafka_broker, url, topic, [(0, ev) for ev in orders(range(3))])
    src = avro_source(kafka_broker, url, topic, **{"schema-registry-timeout": "1s"})
    src.open(None, f"{topic}:0")
    try:
        got, error = read_until_error(src)
    finally:
        src.teardown()
    assert not got
    assert isinstance(error, InfrastructureError) and not isinstance(error, KafkaSourceError), repr(error)
    assert error.service == "schema-registry" and error.endpoint == url


def test_metadata_of_a_broker_that_is_down_fails_within_broker_timeout():
    from cdcflow.dev.process import free_port

    servers = f"127.0.0.1:{free_port()}"
    src = make_source({"uri": f"kafka://{servers}/t?protocol=canal-json", "broker-timeout": "2s"}, id="in")
    started = time.monotonic()
    with pytest.raises(InfrastructureError) as e:
        src.partitions()
    assert time.monotonic() - started < 6
    assert e.value.service == "kafka" and e.value.endpoint == servers
    assert "kafka source in" in str(e.value) and servers in str(e.value)
    assert not isinstance(e.value, KafkaPartitionUnavailableError)
