"""The host's connutils.v1.SchemaService: token checked, backed by the host's SchemaStore."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from cdcflow.errors import SchemaError
from cdcflow.pb.connutils.v1 import schema_pb2 as cu
from cdcflow.pb.connutils.v1 import schema_pb2_grpc as cu_grpc
from cdcflow.pb.schema.v1 import schema_pb2
from cdcflow.record import Record
from cdcflow.schemas import SchemaStore, default_store
from cdcflow.standalone.schema_service import HostServices, RemoteSchemaStore
from cdcflow.standalone.host import StandaloneTransform, host_services

from helpers.standalone import served

SCHEMA = '{"type": "record", "name": "row", "fields": [{"name": "id", "type": "long"}]}'


@pytest.fixture
def service():
    store = SchemaStore()
    svc = HostServices(store=store, token="s3cret")
    yield svc, store
    svc.stop()


def test_token_required(service) -> None:
    svc, _ = service
    stub = cu_grpc.SchemaServiceStub(grpc.insecure_channel(svc.target))
    req = cu.CreateSchemaRequest(subject="s", type=schema_pb2.Schema.TYPE_AVRO, bytes=SCHEMA.encode())
    for metadata in ((), (("conduit-connector-token", "wrong"),)):
        with pytest.raises(grpc.RpcError) as err:
            stub.CreateSchema(req, metadata=metadata, timeout=5)
        assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as err:
            stub.GetSchema(cu.GetSchemaRequest(subject="s", version=1), metadata=metadata, timeout=5)
        assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED


def test_create_and_get_through_host_store(service) -> None:
    svc, store = service
    stub = cu_grpc.SchemaServiceStub(grpc.insecure_channel(svc.target))
    md = (("conduit-connector-token", "s3cret"),)
    created = stub.CreateSchema(cu.CreateSchemaRequest(subject="db.t.payload", type=schema_pb2.Schema.TYPE_AVRO,
                                                       bytes=SCHEMA.encode()), metadata=md).schema
    assert (created.subject, created.version, created.type) == ("db.t.payload", 1, schema_pb2.Schema.TYPE_AVRO)
    assert store.get("db.t.payload", 1).id == created.id
    again = stub.CreateSchema(cu.CreateSchemaRequest(subject="db.t.payload", type=schema_pb2.Schema.TYPE_AVRO,
                                                     bytes=SCHEMA.replace(" ", "").encode()), metadata=md).schema
    assert (again.version, again.id) == (1, created.id)  # same schema stored once
    other = store.register("db.t.payload", SCHEMA.replace('"long"', '"string"'))
    got = stub.GetSchema(cu.GetSchemaRequest(subject="db.t.payload", version=2), metadata=md).schema
    assert (got.version, got.id, got.bytes.decode()) == (2, other.id, other.text)
    with pytest.raises(grpc.RpcError) as err:
        stub.GetSchema(cu.GetSchemaRequest(subject="nope", version=1), metadata=md)
    assert err.value.code() is grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as err:
        stub.CreateSchema(cu.CreateSchemaRequest(subject="x", type=schema_pb2.Schema.TYPE_AVRO, bytes=b"{nope"),
                          metadata=md)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_remote_store(service) -> None:
    svc, store = service
    remote = RemoteSchemaStore(svc.target, "s3cret")
    s = remote.register("k", SCHEMA)
    assert store.get("k", s.version) == s
    assert remote.get("k", 1) == s and remote.latest("k") == s
    assert remote.by_id(s.id) == ("AVRO", SCHEMA)
    assert remote.lookup("k", SCHEMA) == s
    with pytest.raises(SchemaError, match="not found"):
        remote.get("missing", 1)
    with pytest.raises(SchemaError, match="UNAUTHENTICATED"):
        RemoteSchemaStore(svc.target, "bad").register("k", SCHEMA)
    remote.close()


def test_plugin_registers_through_host(plugins_dir: Path) -> None:
    t = StandaloneTransform(served(plugins_dir, "schema-registering", "SchemaRegisteringTransform"))
    t.configure({})
    t.open()
    out = t.process([Record(position=b"1", key=b"alpha")])[0]
    t.teardown()
    assert out.metadata["store"] == "RemoteSchemaStore" and out.metadata["same"] == "True"
    host = default_store().get("from-plugin", int(out.metadata["version"]))
    assert host.id == int(out.metadata["id"]) and '"alpha"' in host.text
    assert host_services().target  # the one shared service of this process
