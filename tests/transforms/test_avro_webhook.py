"""avro.encode / avro.decode against cdcflow's schema store, and webhook.http against a
real HTTP server started on 127.0.0.1 in the test (Conduit's documented examples)."""

from __future__ import annotations

import json
import time

import pytest
from helpers.transforms import configure_only, make
from helpers.webhook_server import WebhookHandler, webhook_server

from cdcflow.errors import ConfigError
from cdcflow.pipeline.chain import ProcessorSetupError
from cdcflow.record import Operation, Record
from cdcflow.schemas import SchemaStore, set_default_store
from cdcflow.sdk import Failed

PRE_REGISTERED = json.dumps({
    "type": "record", "name": "record",
    "fields": [{"name": "myString", "type": "string"}, {"name": "myInt", "type": "int"}],
})


@pytest.fixture
def store():
    """A fresh in-memory store as the process default, so ids start at 1 as in Conduit's examples."""
    s = SchemaStore()
    set_default_store(s)
    yield s
    set_default_store(None)
    s.close()


def _rec(**kw):
    return Record(b"test-position", Operation.CREATE, {"key1": "val1"}, **kw)


def test_avro_encode_pre_registered_doc_example(store):
    store.register("example-preRegistered", PRE_REGISTERED)
    t = make("avro.encode", **{"schema.strategy": "preRegistered", "schema.preRegistered.subject": "example-preRegistered",
                               "schema.preRegistered.version": "1", "field": ".Key"})
    r = _rec(key={"myString": "bar", "myInt": 1})
    t.process([r])
    assert r == _rec(key=bytes([0, 0, 0, 0, 1, 6, 98, 97, 114, 2]))


def test_avro_decode_doc_example(store):
    store.register("example-decode", PRE_REGISTERED)
    r = _rec(key=bytes([0, 0, 0, 0, 1, 6, 98, 97, 114, 2]))
    make("avro.decode", field=".Key").process([r])
    assert r == _rec(key={"myString": "bar", "myInt": 1})


def test_avro_encode_auto_register_doc_example(store):
    t = make("avro.encode", **{"schema.strategy": "autoRegister", "schema.autoRegister.subject": "example-autoRegister"})
    r = _rec(after={"myString": "bar", "myInt": 1, "myFloat": 2.3, "myMap": {"foo": True, "bar": 2.2},
                    "myStruct": {"foo": 1, "bar": False}})
    t.process([r])
    # the bytes of Conduit's documented example: fields in name order, schema id 1
    assert r.after == bytes([0, 0, 0, 0, 1, 102, 102, 102, 102, 102, 102, 2, 64, 2, 154, 153, 153, 153, 153, 153, 1,
                             64, 1, 6, 98, 97, 114, 0, 2])
    assert store.versions("example-autoRegister") == [1]
    assert store.compatibility("example-autoRegister") == "NONE"


def test_avro_round_trip_keeps_native_types(store):
    import datetime as dt
    from decimal import Decimal

    enc = make("avro.encode", **{"schema.strategy": "autoRegister", "schema.autoRegister.subject": "s"})
    dec = make("avro.decode")
    value = {"id": 18446744073709551615, "price": Decimal("9.90"), "at": dt.datetime(2024, 1, 2, 3, 4, 5), "b": b"\x00"}
    r = Record(after=dict(value))
    dec.process(enc.process([r]))
    assert r.after == value and type(r.after["price"]) is Decimal
    # same shape again: no new version
    enc.process([Record(after=dict(value))])
    assert store.versions("s") == [1]


def test_avro_errors(store):
    store.register("s", PRE_REGISTERED)
    enc = make("avro.encode", **{"schema.strategy": "preRegistered", "schema.preRegistered.subject": "s"})
    out = enc.process([Record(after={"myString": "x"}), Record(after=b"not json"), Record(after={"myString": "a", "myInt": 2})])
    assert isinstance(out[0], Failed) and "failed encoding data" in out[0].message
    assert isinstance(out[1], Failed) and "invalid JSON" in out[1].message
    assert out[2].after[:5] == bytes([0, 0, 0, 0, 1])
    dec = make("avro.decode")
    out = dec.process([Record(after=b"\x01\x00"), Record(after=bytes([0, 0, 0, 0, 99, 2])), Record(after={"a": 1})])
    assert "wire format" in out[0].message and "99" in out[1].message and "expected raw data" in out[2].message
    with pytest.raises(ConfigError, match="schema.preRegistered.subject"):
        configure_only("avro.encode", **{"schema.strategy": "preRegistered"})
    with pytest.raises(ConfigError, match="must be one of"):
        configure_only("avro.encode", **{"schema.strategy": "inline"})
    with pytest.raises(ConfigError, match="not supported yet") as e:
        configure_only("avro.decode", url="http://registry:8081")
    assert e.value.parameter == "url"
    with pytest.raises(ConfigError, match="not found"):
        make("avro.encode", **{"schema.strategy": "preRegistered", "schema.preRegistered.subject": "missing"})


# -- webhook.http ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    with webhook_server() as url:
        yield url


def test_webhook_sends_headers_and_method(server):
    # Conduit's two documented examples run as written in test_conduit_processor_examples.py
    t = make("webhook.http", **{"request.url": server, "request.body": '{{ printf "%s" .Payload.After }}',
                                "headers.content-type": "application/json"})
    t.process([Record(b"pos-1", Operation.UPDATE, after=b"world")])
    method, _, headers, body = WebhookHandler.seen[-1]
    assert (method, headers["content-type"], body) == ("GET", "application/json", b"world")
    t.teardown()


def test_webhook_whole_record_body(server):
    t = make("webhook.http", **{"request.url": server + "/", "request.method": "POST", "request.body": "{{ toJson . }}",
                                "response.body": ".Metadata.reply"})
    r = Record(b"p", Operation.CREATE, {"a": "b"}, after={"x": 1})
    t.process([r])
    sent = json.loads(WebhookHandler.seen[-1][3])
    assert sent["payload"]["after"] == {"x": 1} and sent["metadata"] == {"a": "b"} and sent["operation"] == "create"
    assert r.metadata["reply"].startswith("hello, {")
    t.teardown()


def test_webhook_retries_with_backoff_then_succeeds_or_fails(server):
    WebhookHandler.fails_left = 2
    t = make("webhook.http", **{"request.url": server + "/flaky", "backoffRetry.count": "2",
                                "backoffRetry.min": "10ms", "backoffRetry.max": "50ms"})
    start = time.monotonic()
    r = Record(after=b"x")
    assert t.process([r]) == [r] and r.after == b"hello, flaky!"
    assert time.monotonic() - start >= 0.03  # waited 10ms + 20ms
    WebhookHandler.fails_left = 5
    [out] = t.process([Record(after=b"x")])
    assert isinstance(out, Failed) and "503" in out.message and "3 attempts" in out.message
    t.teardown()


def test_webhook_4xx_is_a_response_and_timeout_fails_the_record(server):
    t = make("webhook.http", **{"request.url": server + "/missing", "response.status": ".Metadata.status"})
    r = Record()
    t.process([r])
    assert r.metadata["status"] == "404" and r.after == b"nothing here"
    t.teardown()
    slow = make("webhook.http", **{"request.url": server + "/slow", "request.timeout": "200ms"})
    start = time.monotonic()
    out = slow.process([Record(), Record()])
    assert all(isinstance(o, Failed) and "Timeout" in o.message for o in out)
    assert time.monotonic() - start < 1.5
    slow.teardown()


def test_webhook_unreachable_and_bad_settings():
    t = make("webhook.http", **{"request.url": "http://127.0.0.1:1/x"})
    [out] = t.process([Record()])
    assert isinstance(out, Failed) and "ConnectError" in out.message
    t.teardown()
    with pytest.raises(ConfigError, match="value is required"):
        configure_only("webhook.http")
    with pytest.raises(ConfigError, match="same field"):
        configure_only("webhook.http", **{"request.url": "http://x", "response.status": ".Payload.After"})
    with pytest.raises(ConfigError, match="request.url"):
        configure_only("webhook.http", **{"request.url": "http://x/{{ Payload.After. }}"})


def test_webhook_in_chain_open_failure_names_processor():
    from helpers.transforms import chain

    with pytest.raises(ProcessorSetupError, match="hook"):
        chain(("hook", "webhook.http", None, {"request.url": "http://x", "backoffRetry.factor": "0"}))
