"""The ``kafka`` connector given Conduit's settings behaves as Conduit's kafka connector
(github.com/ConduitIO/conduit-connector-kafka, source.go and destination): the source reads raw
messages (key and value as raw data, the topic as collection, headers as ``kafka.header.*``),
the destination writes each record's JSON form with the record key as message key, or what
``sdk.record.format`` says."""

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
    # conduit-connector-kafka destination/config.go: the topic defaults to the record's collection
    assert settings("destination", {"servers": "b:1"}).topic_rule == '{{ index .Metadata "opencdc.collection" }}'
    with pytest.raises(ConfigError, match="not a valid template"):
        settings("destination", {"servers": "b:1", "topic": "{{ index .Metadata "})
    with pytest.raises(ConfigError, match="Conduit's record mode"):
        settings("destination", {"servers": "b:1", "topic": "{{ .Key }}", "protocol": "canal-json"})
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
      - id: payloads
        type: destination
        plugin: builtin:kafka
        settings:
          servers: {servers}
          topic: '{{{{ index .Metadata "opencdc.collection" }}}}-payloads'
          sdk.record.format: template
          sdk.record.format.options: '{{{{ printf "%s" .Payload.After }}}}'
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
    # sdk.record.format template (Conduit's record serializer): each message is the rendered template,
    # on the topic Conduit's topic template names
    payloads = raw_messages(kafka_broker, f"{topic}-payloads")
    assert len(payloads) == 40
    text = [v for _, v in sent if v.isascii()]  # a Go template writes bytes; cdcflow's renders text (UTF-8)
    assert sorted(m.value() for m in payloads if m.value().isascii()) == sorted(text)


def test_a_record_format_is_refused_for_a_ticdc_protocol():
    from cdcflow.registry import load_registry
    from cdcflow.engine.middleware import check

    info = load_registry().connector("builtin:kafka")
    raw = {"servers": "b:1", "topic": "t", "protocol": "canal-json", "sdk.record.format": "template",
           "sdk.record.format.options": "{{ .Key }}"}
    settings_ = info.validate("destination", raw, plugin_id="out")
    plugin = info.new_destination()
    plugin.id = "out"
    plugin.configure({k: v for k, v in settings_.items() if not k.startswith("sdk.")})
    with pytest.raises(ConfigError, match="protocol canal-json writes its own messages"):
        check("destination", settings_, plugin, "out")
    raw.pop("protocol")  # Conduit's record mode takes it
    settings_ = info.validate("destination", raw, plugin_id="out")
    plugin.configure({k: v for k, v in settings_.items() if not k.startswith("sdk.")})
    check("destination", settings_, plugin, "out")
    assert plugin.record_format.name == "template"
