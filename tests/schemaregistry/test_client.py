"""cdcflow's RegistryClient: the codec's registry interface, caching, typed errors."""

import pickle
import socket

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from helpers.registry_cases import ADD_NULLABLE_WITH_DEFAULT, V1, record

from cdcflow.connectors.ticdc.avro import AvroDecoder, AvroEncoder, AvroOptions
from cdcflow.connectors.ticdc.events import INSERT, RowChange
from cdcflow.dev.registry import RegistryService
from cdcflow.errors import SchemaError
from cdcflow.schemaregistry.client import (
    IncompatibleSchemaError,
    InvalidSchemaError,
    RegistryClient,
    RegistryError,
    RegistryUnavailableError,
    SchemaNotFoundError,
    SubjectNotFoundError,
    split_credentials,
)
from cdcflow.connectors.ticdc.tidb import Column, TableSchema


def test_register_lookup_latest(schema_registry, unique_name):
    with RegistryClient(schema_registry, timeout=5) as c:
        c.check_reachable()
        first = c.register(unique_name, V1)
        second = c.register(unique_name, ADD_NULLABLE_WITH_DEFAULT)
        assert c.schema_by_id(first) == V1
        latest = c.latest(unique_name)
        assert (latest.subject, latest.version, latest.id, latest.schema) == (unique_name, 2, second,
                                                                               ADD_NULLABLE_WITH_DEFAULT)
        assert c.lookup(unique_name, V1).version == 1
        assert c.lookup(unique_name, record(("zz", "int"))) is None
        assert c.lookup(unique_name + "-none", V1) is None
        assert c.versions(unique_name) == [1, 2]
        assert c.delete_subject(unique_name) == [1, 2]
        with pytest.raises(SubjectNotFoundError):
            c.latest(unique_name)


def test_typed_errors_carry_subject_status_and_message(schema_registry, unique_name):
    with RegistryClient(schema_registry) as c:
        c.register(unique_name, V1)
        with pytest.raises(IncompatibleSchemaError) as e:
            c.register(unique_name, record(("id", "long"), ("name", "string"), ("must", "int")))
        assert isinstance(e.value, SchemaError)
        assert (e.value.status, e.value.error_code, e.value.subject) == (409, 409, unique_name)
        assert "must" in e.value.registry_message and unique_name in str(e.value)
        with pytest.raises(InvalidSchemaError) as e:
            c.register(unique_name, '{"type": "record"}')
        assert e.value.status == 422 and e.value.error_code == 42201
        with pytest.raises(SchemaNotFoundError):
            c.schema_by_id(10_000_000)


def test_caches_ids_and_texts(tmp_path):
    """After the registry stops, what was registered or fetched is still answered from the cache."""
    with RegistryService(tmp_path / "data") as service:
        c = RegistryClient(service.url)
        schema_id = c.register("cache-value", V1)
        other = RegistryClient(service.url).register("cache2-value", record(("k", "int")))
        assert c.schema_by_id(other) == record(("k", "int"))
    assert c.register("cache-value", V1) == schema_id
    assert c.schema_by_id(schema_id) == V1 and c.schema_by_id(other) == record(("k", "int"))
    with pytest.raises(RegistryUnavailableError):
        c.register("cache-value", ADD_NULLABLE_WITH_DEFAULT)
    # pickled (as Spark ships it), the cache travels and the connection is rebuilt lazily
    clone = pickle.loads(pickle.dumps(c))
    assert clone.schema_by_id(schema_id) == V1
    with pytest.raises(RegistryUnavailableError):
        clone.check_reachable()


def test_unreachable_registry():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RegistryUnavailableError) as e:
        RegistryClient(f"http://127.0.0.1:{port}", timeout=1).check_reachable()
    assert f"127.0.0.1:{port}" in str(e.value)


def test_url_credentials_are_split_and_decoded():
    assert split_credentials("http://u%40x:p%3Aw@host:8081/") == ("http://host:8081", ("u@x", "p:w"))
    assert split_credentials("https://host") == ("https://host", None)
    with pytest.raises(RegistryError) as e:
        split_credentials("ftp://u:secret@host")
    assert "secret" not in str(e.value)


TABLE = TableSchema("shop", "orders", (
    Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
    Column("note", "VARCHAR", length=20),
    Column("price", "DECIMAL", precision=10, scale=2),
))


def test_ticdc_avro_codec_uses_the_client(schema_registry, unique_name):
    """The codec registers TiCDC-shaped schemas through the client; confluent's deserializer reads them."""
    from decimal import Decimal

    topic = unique_name
    with RegistryClient(schema_registry) as c:
        row = {"id": 5, "note": "hi", "price": Decimal("12.50")}
        key, value = AvroEncoder(AvroOptions(), c).encode([RowChange(TABLE, INSERT, 1, row)], topic)[0]
        assert sorted(s for s in c.subjects() if s.startswith(topic)) == [f"{topic}-key", f"{topic}-value"]
        decoded = AvroDeserializer(SchemaRegistryClient({"url": schema_registry}))(
            value, SerializationContext(topic, MessageField.VALUE))
        assert decoded == row
        event = AvroDecoder(AvroOptions(), RegistryClient(schema_registry)).decode(key, value)
        assert event.row["id"] == 5 and event.row["note"] == "hi"
