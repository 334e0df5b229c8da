"""Settings (URI + discrete, TiCDC's rules), dispatch rules and the consistency buffer — no broker needed."""

from __future__ import annotations

import zlib

import pytest

from cdcflow.connectors.kafka.consistency import Dedup, TransactionBuffer
from cdcflow.connectors.kafka.dispatch import dispatcher, topic_for
from cdcflow.connectors.kafka.settings import DESTINATION_PARAMS, SOURCE_PARAMS, resolve
from cdcflow.errors import ConfigError
from cdcflow.params import masked, validate
from helpers.kafka import ORDERS, DDLEvent, ResolvedEvent, row, tso


def dst(settings):
    return resolve(validate("kafka", DESTINATION_PARAMS, settings), "destination")


def src(settings):
    return resolve(validate("kafka", SOURCE_PARAMS, settings), "source")


def test_uri_parsed_and_discrete_settings_win():
    s = dst({"uri": "kafka://h1:9092,h2:9092/t_{schema}_{table}?protocol=avro&enable-tidb-extension=true"
                    "&max-message-bytes=1000&sasl-user=u&sasl-password=pw&kafka-version=2.4.0",
             "max-message-bytes": "2000"})
    assert s.servers == "h1:9092,h2:9092"
    assert s.topic_rule == "t_{schema}_{table}"
    assert s.protocol == "avro" and s.enable_tidb_extension
    assert s.max_message_bytes == 2000
    assert s.client["sasl.username"] == "u" and s.client["sasl.password"] == "pw"
    assert s.client["security.protocol"] == "sasl_plaintext"


@pytest.mark.parametrize("settings, parameter, rule", [
    ({"uri": "kafka://h:1/fixed?protocol=avro"}, "topic", "avro-topic-rule"),
    ({"uri": "kafka://h:1/t_{table}?protocol=avro"}, "topic", "avro-topic-rule"),
    ({"uri": "kafka://h:1/t?protocol=canal-json&avro-enable-watermark=true&enable-tidb-extension=true"},
     "avro-enable-watermark", "avro-only"),
    ({"uri": "kafka://h:1/t_{schema}_{table}?protocol=avro&avro-enable-watermark=true"},
     "avro-enable-watermark", "needs-extension"),
    ({"uri": "kafka://h:1/t?protocol=canal-json&bogus=1"}, "uri", "query"),
    ({"uri": "http://h:1/t?protocol=canal-json"}, "uri", "scheme"),
    ({"servers": "h:1", "topic": "t", "protocol": "raw"}, "protocol", "source-only"),  # no protocol: Conduit's mode
    ({"servers": "h:1", "topic": "t", "protocol": "canal-json", "partition": "columns"}, "columns", "required"),
    ({"uri": "kafka://h:1/t?protocol=canal-json&avro-decimal-handling-mode=exact"}, "avro-decimal-handling-mode",
     "inclusion"),
    ({"uri": "kafka://h:1/t_{schema}_{table}?protocol=avro&schema-registry=ftp://x"}, "schema-registry", "url"),
])
def test_destination_rules(settings, parameter, rule):
    with pytest.raises(ConfigError) as e:
        dst(settings)
    assert (e.value.parameter, e.value.rule) == (parameter, rule)


@pytest.mark.parametrize("settings, rule", [
    ({"uri": "kafka://h:1/t?protocol=canal-json", "consistency": "transaction"}, "needs-resolved-ts"),
    ({"uri": "kafka://h:1/t?protocol=avro&enable-tidb-extension=true", "consistency": "transaction"},
     "needs-resolved-ts"),
    ({"uri": "kafka://h:1/t?protocol=opencdc-json", "consistency": "transaction"}, "needs-resolved-ts"),
    ({"uri": "kafka://h:1/t_{table}?protocol=canal-json"}, "concrete"),
])
def test_source_rules(settings, rule):
    with pytest.raises(ConfigError) as e:
        src(settings)
    assert e.value.rule == rule


def test_source_transaction_allowed_with_resolved_events():
    assert src({"uri": "kafka://h:1/a?protocol=canal-json&enable-tidb-extension=true",
                "consistency": "transaction", "topics": "a,b"}).topics == ["a", "b"]
    assert src({"uri": "kafka://h:1/a?protocol=open-protocol", "consistency": "transaction"}).consistency \
        == "transaction"


def test_sasl_password_is_secret():
    shown = masked(SOURCE_PARAMS, {"kafka.sasl.password": "hunter2", "kafka.sasl.username": "u"})
    assert shown == {"kafka.sasl.password": "***", "kafka.sasl.username": "u"}


def test_dispatch_rules_follow_the_reference():
    ev = row(ORDERS, 42, tso(7))
    h_table = zlib.crc32(b"orders", zlib.crc32(b"shop"))
    assert dispatcher("default")(ev, 5) == h_table % 5
    assert dispatcher("table")(ev, 7) == h_table % 7
    assert dispatcher("ts")(ev, 3) == tso(7) % 3
    h_key = h_table ^ zlib.crc32(b"42", zlib.crc32(b"id"))
    assert dispatcher("index-value")(ev, 11) == h_key % 11
    h_cols = h_table ^ zlib.crc32(b"n42", zlib.crc32(b"name"))
    assert dispatcher("columns", ["name"])(ev, 13) == h_cols % 13
    assert topic_for("tidb_{schema}_{table}", "shop", "orders") == "tidb_shop_orders"


def test_dedup_by_table_handle_and_commit_ts():
    d = Dedup()
    assert d.admit_row(row(ORDERS, 1, 100))
    assert d.admit_row(row(ORDERS, 2, 100))  # same ts, other key: a second row of the transaction
    assert not d.admit_row(row(ORDERS, 1, 100))  # replay
    assert not d.admit_row(row(ORDERS, 3, 99))  # below the mark: replay
    assert d.admit_row(row(ORDERS, 1, 101))
    restored = Dedup.from_state(d.state())
    assert not restored.admit_row(row(ORDERS, 1, 101)) and restored.admit_row(row(ORDERS, 2, 101))
    ddl = DDLEvent("shop", "orders", "ALTER TABLE orders ADD c INT", 200)
    assert d.admit_ddl(ddl) and not d.admit_ddl(ddl)


def test_transaction_buffer_releases_up_to_global_resolved_with_ddl_barrier():
    buf = TransactionBuffer(["t:0", "t:1"], {})
    buf.add("t:0", row(ORDERS, 1, 10), 0, 0, 1)
    buf.add("t:1", row(ORDERS, 2, 5), 0, 0, 1)
    buf.add("t:0", ResolvedEvent(12), 1, 0, 1)
    assert buf.release() == []  # partition 1 has promised nothing yet
    buf.add("t:1", row(ORDERS, 3, 15), 1, 0, 1)
    ddl = DDLEvent("shop", "orders", "ALTER", 20)
    buf.add("t:1", ddl, 2, 0, 1)
    buf.add("t:0", ddl, 2, 0, 1)
    buf.add("t:0", row(ORDERS, 4, 25), 3, 0, 1)
    buf.add("t:1", ResolvedEvent(30), 3, 0, 1)
    got = buf.release()
    assert [(e.ts, type(e.event).__name__) for e in got] == [
        (5, "RowChange"), (10, "RowChange"), (15, "RowChange"), (20, "DDLEvent"), (20, "DDLEvent")]
    for e in got[:2]:
        buf.mark_done(e)
    assert buf.resume() == {"t:0": (2, 0), "t:1": (1, 0)}  # what is still buffered is read again


@pytest.mark.parametrize("query, expected", [
    ("sasl-user=u&sasl-password=p&enable-tls=true", {"security.protocol": "sasl_ssl", "sasl.mechanism": "PLAIN"}),
    ("enable-tls=true&sasl-user=u&sasl-password=p", {"security.protocol": "sasl_ssl"}),  # order does not matter
    ("sasl-user=u&sasl-password=p&sasl-mechanism=scram-sha-512",
     {"security.protocol": "sasl_plaintext", "sasl.mechanism": "SCRAM-SHA-512"}),
    ("ca=/c.pem&cert=/t.pem&key=/k.pem", {"security.protocol": "ssl", "ssl.ca.location": "/c.pem"}),
    ("enable-tls=true&insecure-skip-verify=true",
     {"security.protocol": "ssl", "enable.ssl.certificate.verification": "false"}),
    ("insecure-skip-verify=true", {}),  # only with TLS, as TiCDC
    ("compression=zstd&kafka-client-id=cdc", {"compression.type": "zstd", "client.id": "cdc"}),
    ("sasl-mechanism=gssapi&sasl-gssapi-auth-type=keytab&sasl-gssapi-keytab-path=/k.keytab"
     "&sasl-gssapi-service-name=kafka&sasl-gssapi-user=cdc&sasl-gssapi-realm=EXAMPLE.COM"
     "&sasl-gssapi-disable-pafxfast=true",
     {"security.protocol": "sasl_plaintext", "sasl.mechanism": "GSSAPI", "sasl.kerberos.keytab": "/k.keytab",
      "sasl.kerberos.service.name": "kafka", "sasl.kerberos.principal": "cdc@EXAMPLE.COM"}),
])
def test_ticdc_client_parameters_become_librdkafka_properties(query, expected):
    s = dst({"uri": f"kafka://h:1/t?protocol=canal-json&{query}"})
    assert {k: s.client.get(k) for k in expected} == expected
    if not expected:
        assert "security.protocol" not in s.client and "enable.ssl.certificate.verification" not in s.client


@pytest.mark.parametrize("query, parameter_part", [
    ("ca=/c.pem&enable-tls=false", "enable-tls"),
    ("sasl-mechanism=digest", "sasl-mechanism"),
    ("compression=brotli", "compression"),
    ("sasl-gssapi-auth-type=user&sasl-gssapi-user=u&sasl-gssapi-password=p", "sasl-gssapi-auth-type"),
    ("sasl-gssapi-kerberos-config-path=/etc/krb5.conf", "sasl-gssapi-kerberos-config-path"),
])
def test_ticdc_client_parameters_refused_with_the_reason(query, parameter_part):
    with pytest.raises(ConfigError) as e:
        dst({"uri": f"kafka://h:1/t?protocol=canal-json&{query}"})
    assert e.value.rule == parameter_part


def test_ticdc_topic_parameters_and_the_flat_avro_alias():
    s = dst({"uri": "kafka://h:1/t_{schema}_{table}?protocol=flat-avro&replication-factor=3&auto-create-topic=false"
                    "&kafka-version=2.4.0&required-acks=-1&dial-timeout=5s"})
    assert (s.protocol, s.replication_factor, s.auto_create_topic, s.partition_num_set) == ("avro", 3, False, False)
    assert dst({"servers": "h:1", "topic": "t", "protocol": "canal-json", "partition-num": "2"}).partition_num_set


@pytest.mark.parametrize("settings, says", [
    ({"kafka.no.such.property": "1"}, "No such configuration property"),
    ({"kafka.compression.type": "brotli"}, "compression"),
])
def test_librdkafka_refusing_the_client_is_a_config_error(settings, says):
    """librdkafka validates properties when a client is made; that is a configuration error
    naming the ``kafka.*`` settings, not a bare KafkaException from inside ``open``."""
    from cdcflow.connectors.kafka.settings import make_client
    from confluent_kafka import Producer

    s = dst({"servers": "127.0.0.1:1", "topic": "t", "protocol": "canal-json", **settings})
    with pytest.raises(ConfigError) as e:
        make_client(Producer, s)
    assert e.value.rule == "client" and says in str(e.value) and next(iter(settings))[6:] in str(e.value)


def test_transaction_buffer_scans_only_when_something_can_be_released():
    """A read that brings no new global resolved ts must not walk what waits (a silent partition
    can hold a great many rows); a late event at or below the frontier (a replay) still gets out,
    for the replay filter to judge."""
    buf = TransactionBuffer(["t:0", "t:1"], {})
    buf.add("t:0", row(ORDERS, 1, 10), 0, 0, 1)
    buf.add("t:0", ResolvedEvent(20), 1, 0, 1)
    buf.add("t:1", ResolvedEvent(20), 0, 0, 1)
    first = buf.release()
    assert [e.ts for e in first] == [10]
    buf.mark_done(first[0])
    for i in range(1000):
        buf.add("t:0", row(ORDERS, 100 + i, 30 + i), 2 + i, 0, 1)  # waiting for partition 1
    scanned = []
    buf.pending["t:0"] = _Watched(buf.pending["t:0"], scanned)
    assert buf.release() == [] and scanned == []
    buf.add("t:1", row(ORDERS, 1, 10), 1, 0, 1)  # replayed below the frontier
    assert [e.ts for e in buf.release()] == [10] and scanned


class _Watched:
    """A pending queue that records being iterated (a spy: scans are otherwise invisible)."""

    def __init__(self, queue, scanned):
        self.queue, self.scanned = queue, scanned

    def __iter__(self):
        self.scanned.append(True)
        return iter(self.queue)

    def __getattr__(self, name):
        return getattr(self.queue, name)

    def __len__(self):
        return len(self.queue)

    def __bool__(self):
        return bool(self.queue)

    def __getitem__(self, i):
        return self.queue[i]


def test_every_setting_is_documented():
    """Every setting the connector accepts has its row (or mention) in docs/connector-kafka.md
    (before: content-compatible and only-output-updated-columns were missing)."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "connector-kafka.md").read_text()
    missing = sorted(n for n in {*SOURCE_PARAMS, *DESTINATION_PARAMS} if f"`{n}`" not in doc)
    assert not missing, missing


def test_librdkafka_lines_are_logged_once_as_warnings_at_most(caplog):
    import logging

    from cdcflow.connectors.kafka.clientlog import ClientLog

    log = ClientLog(logging.getLogger("test.librdkafka"))
    with caplog.at_level(logging.DEBUG, logger="test.librdkafka"):
        for ms in (0, 3, 0):  # librdkafka's repeats differ in their numbers only
            log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1",
                    f"Connect to ipv4#127.0.0.1:1 failed: Connection refused (after {ms}ms in state CONNECT)")
        log.log(logging.INFO, "other line")
    levels = [(r.levelno, r.getMessage()[:20]) for r in caplog.records]
    assert [lv for lv, _ in levels] == [logging.WARNING, logging.DEBUG, logging.DEBUG, logging.INFO], levels
