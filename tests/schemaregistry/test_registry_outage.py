"""Which registry failures are outages (InfrastructureError) and which are the request's own fault.

Real faults on a registry process of the test's own: SIGKILL (connection refused), SIGSTOP (the
socket accepts, nothing answers: a timeout), wrong credentials. The 5xx and the 404-without-code
answers cannot be produced with the built-in registry (it has no such failure mode), so a tiny
HTTP server of the test answers them: that is the only stand-in here.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import signal
import threading
import time

import pytest
from helpers.registry_cases import V1

from cdcflow.connectors.ticdc.avro import AvroDecoder, AvroEncoder, AvroOptions
from cdcflow.connectors.ticdc.errors import CodecError, UnknownSchema
from cdcflow.dev.registry import RegistryService
from cdcflow.errors import InfrastructureError
from cdcflow.schemaregistry.client import (
    IncompatibleSchemaError,
    RegistryAuthError,
    RegistryClient,
    RegistryUnavailableError,
    SchemaNotFoundError,
)
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

TABLE = TableSchema("shop", "orders", (
    Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
    Column("note", "VARCHAR", length=20),
))


@pytest.fixture
def registry(tmp_path):
    service = RegistryService(tmp_path / "data", log_path=tmp_path / "registry.log").start()
    try:
        yield service
    finally:
        if service.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(service.pid, signal.SIGCONT)
        service.stop()


def test_killed_registry_is_an_outage_for_encoder_and_decoder(registry, unique_name):
    from cdcflow.connectors.ticdc.events import INSERT, RowChange

    client = RegistryClient(registry.url, timeout=2)
    key, value = AvroEncoder(AvroOptions(), client).encode_one(RowChange(TABLE, INSERT, 1, {"id": 1, "note": "a"}),
                                                               unique_name)
    os.kill(registry.pid, signal.SIGKILL)
    registry._proc.wait(10)
    fresh = RegistryClient(registry.url, timeout=2)  # nothing cached: every call goes to the registry
    with pytest.raises(InfrastructureError) as e:
        AvroDecoder(AvroOptions(), fresh).decode(key, value)
    assert not isinstance(e.value, CodecError), type(e.value)  # before: UnknownSchema, the message's fault
    assert e.value.service == "schema-registry" and e.value.endpoint == registry.url
    with pytest.raises(InfrastructureError) as e:  # before: UnsupportedEvent, i.e. that record to the DLQ
        AvroEncoder(AvroOptions(), fresh).encode_one(RowChange(TABLE, INSERT, 1, {"id": 2, "note": "b"}),
                                                     unique_name + "-2")
    assert not isinstance(e.value, CodecError), type(e.value)


@pytest.mark.timeout(60)
def test_paused_registry_times_out_within_the_bound(registry, unique_name):
    client = RegistryClient(registry.url, timeout=1.5)
    client.check_reachable()  # connection pooled: the pause hits an open connection
    os.kill(registry.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(RegistryUnavailableError) as e:
            client.register(unique_name, V1)
        took = time.monotonic() - started
    finally:
        os.kill(registry.pid, signal.SIGCONT)
    assert 1.0 < took < 6, took
    assert "Timeout" in str(e.value) and isinstance(e.value, InfrastructureError)
    assert client.register(unique_name, V1) > 0  # resumed: the same client works again


def test_the_registry_answering_about_the_schema_stays_the_records_fault(registry, unique_name):
    client = RegistryClient(registry.url, timeout=5)
    client.register(unique_name, V1)
    with pytest.raises(IncompatibleSchemaError) as e:
        client.register(unique_name, '{"type":"record","name":"r","fields":[{"name":"must","type":"int"}]}')
    assert not isinstance(e.value, InfrastructureError)
    with pytest.raises(SchemaNotFoundError) as e:
        client.schema_by_id(9_999_999)
    assert not isinstance(e.value, InfrastructureError)
    # the decoder: an id the registry says does not exist is that message's error
    with pytest.raises(UnknownSchema):
        AvroDecoder(AvroOptions(), client).decode(None, b"\x00" + (9_999_999).to_bytes(4, "big") + b"\x02")


def test_wrong_credentials_are_an_outage_not_a_record_error(tmp_path):
    with RegistryService(tmp_path / "data", auth="u:right", log_path=tmp_path / "r.log") as service:
        bad = service.url.replace("http://", "http://u:wrong@")
        with pytest.raises(RegistryAuthError) as e:
            RegistryClient(bad, timeout=5).register("s-value", V1)
    assert isinstance(e.value, InfrastructureError) and "wrong" not in str(e.value)


class _Answer(http.server.BaseHTTPRequestHandler):
    status, body = 503, b'{"error_code": 50301, "message": "backend down"}'

    def do_GET(self):  # noqa: N802 - http.server's naming
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("status,body", [(503, b'{"error_code": 50301, "message": "backend down"}'),
                                         (500, b"<html>proxy error</html>"),
                                         (404, b"<html>not found</html>"),  # not a registry at this URL
                                         (200, b"<html>login page</html>")])
def test_server_errors_and_non_registry_answers_are_outages(status, body):
    handler = type("H", (_Answer,), {"status": status, "body": body})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = RegistryClient(f"http://127.0.0.1:{server.server_port}", timeout=5)
        with pytest.raises(RegistryUnavailableError):
            client.schema_by_id(1)
        with pytest.raises(InfrastructureError):
            AvroDecoder(AvroOptions(), client).decode(None, b"\x00\x00\x00\x00\x01\x02")
    finally:
        server.shutdown()
        server.server_close()
