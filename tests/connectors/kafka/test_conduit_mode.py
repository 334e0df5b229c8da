"""The ``kafka`` connector given Conduit's settings behaves as Conduit's kafka connector
(github.com/ConduitIO/conduit-connector-kafka, source.go and destination): the source reads raw
messages (key and value as raw data, the topic as collection, headers as ``kafka.header.*``),
the destination writes each record's JSON form with the record key as message key."""

from __future__ import annotations

import os
import textwrap

import orjson
import pytest
from confluent_kafka import Producer

from cdcflow.connectors.kafka.settings import resolve
from cdcflow.connectors.kafka.settings import SOURCE_PARAMS, DESTINATION_PARAMS
from cdcflow.errors import ConfigError
from cdcflow.params import validate

from helpers.kafka import create_topic, raw_messages


def settings(side: str, raw: dict):
    spec = SOURCE_PARAMS if side == "source" else DESTINATION_PARAMS
    return resolve(validate("kafka", spec, raw), side)


def test_conduit_setting_names_map_onto_the_client_and_modes():
    s = settings("source", {"servers": "b1:9092,b2:9092", "topics": "orders,users", "groupID": "g1",
                            "clientID": "me", "saslMechanism": "SCRAM-SHA-256", "saslUsername": "u",
                            "saslPassword": "pw", "tls.enabled": "true", "caCert": "-----BEGIN CERTIFICATE-----"})
    assert (s.protocol, s.topics, s.group_id, s.read_from) == ("raw", ["orders", "users"], "g1", "latest")
    assert s.client == {"client.id": "me", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u",
                        "sasl.password": "pw", "ssl.ca.pem": "-----BEGIN CERTIFICATE-----",
                        "security.protocol": "sasl_ssl"}
    assert settings("source", {"servers": "b:1", "topics": "t", "readFromBeginning": "true"}).read_from == "earliest"
    d = settings("destination", {"servers": "b:1", "topic": "out", "compression": "zstd", "acks": "all"})
    assert (d.protocol, d.topic_rule, d.client) == ("opencdc-json", "out", {"compression.type": "zstd"})
    with pytest.raises(ConfigError, match="acks"):
        settings("destination", {"servers": "b:1", "topic": "out", "acks": "one"})
    # TiCDC's settings still select TiCDC's protocols
    assert settings("source", {"servers": "b:1", "topics": "t", "protocol": "canal-json"}).read_from == "earliest"


PIPELINE = """\
version: "2.2"
pipelines:
  - id: conduit-kafka
    connectors:
      - id: in
        type: source
        plugin: builtin:kafka
        settings:
          servers: {servers}
          topics: {topic}
          groupID: {group}
          readFromBeginning: true
      - id: out
        type: destination
        plugin: builtin:kafka
        settings:
          servers: {servers}
          topic: {topic}-copy
"""


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.kafka
def test_a_conduit_kafka_to_kafka_pipeline_copies_raw_messages_as_records(kafka_broker, unique_name, tmp_path):
    from cdcflow.engine.runner import run_files

    topic = unique_name
    create_topic(kafka_broker, topic, 2)
    p = Producer({"bootstrap.servers": kafka_broker})
    sent = []
    for i in range(40):
        key, value = (b"k%d" % i if i % 5 else None), (b'{"n": %d}' % i if i % 7 else b"not json at all \xff")
        p.produce(topic, value=value, key=key, partition=i % 2, headers=[("trace", b"t%d" % i)])
        sent.append((key, value))
    assert p.flush(15) == 0
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(servers=kafka_broker, topic=topic, group=unique_name))
    outcome = run_files([str(path)], master="local[2]", until_idle=True, progress=False,
                        state_dir=str(tmp_path / "state"))
    assert outcome.exit_code == 0, outcome
    copies = raw_messages(kafka_broker, f"{topic}-copy")
    assert len(copies) == 40
    got = set()
    for m in copies:
        rec = orjson.loads(m.value())  # the record's JSON form, as Conduit's destination writes it
        assert rec["operation"] == "create" and rec["metadata"]["opencdc.collection"] == topic
        assert rec["metadata"]["kafka.header.trace"].startswith("t") and int(rec["metadata"]["opencdc.createdAt"]) > 0
        key = m.key()
        got.add((key, rec["payload"]["after"]))
    import base64

    assert {(k, base64.b64encode(v).decode()) for k, v in sent} == got  # raw data travels as base64
