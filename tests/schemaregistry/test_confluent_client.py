"""confluent_kafka's SchemaRegistryClient and Avro serde against the built-in registry."""

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext
from helpers.registry_cases import ADD_NULLABLE_WITH_DEFAULT, V1, record


@pytest.fixture
def sr(schema_registry):
    return SchemaRegistryClient({"url": schema_registry})


def test_avro_serializer_and_deserializer_round_trip(sr, schema_registry, unique_name):
    ser = AvroSerializer(sr, V1)
    de = AvroDeserializer(sr)
    ctx = SerializationContext(unique_name, MessageField.VALUE)
    data = ser({"id": 7, "name": "héllo"}, ctx)
    assert data[0] == 0
    schema_id = int.from_bytes(data[1:5], "big")
    assert sr.get_latest_version(f"{unique_name}-value").schema_id == schema_id
    # a fresh client (no cache) must fetch the writer schema by id from the server
    assert AvroDeserializer(SchemaRegistryClient({"url": schema_registry}))(data, ctx) == {"id": 7, "name": "héllo"}
    assert de(data, ctx) == {"id": 7, "name": "héllo"}


def test_deserializer_resolves_old_data_with_a_newer_reader_schema(sr, unique_name):
    subject = f"{unique_name}-value"
    ctx = SerializationContext(unique_name, MessageField.VALUE)
    old = AvroSerializer(sr, V1)({"id": 1, "name": "a"}, ctx)
    sr.register_schema(subject, Schema(ADD_NULLABLE_WITH_DEFAULT, "AVRO"))
    reader = AvroDeserializer(sr, ADD_NULLABLE_WITH_DEFAULT)
    assert reader(old, ctx) == {"id": 1, "name": "a", "note": None}


def test_client_api_surface(sr, schema_registry, unique_name):
    subject = f"{unique_name}-value"
    v1_id = sr.register_schema(subject, Schema(V1, "AVRO"))
    v2_id = sr.register_schema(subject, Schema(ADD_NULLABLE_WITH_DEFAULT, "AVRO"))
    assert v2_id != v1_id
    assert subject in sr.get_subjects()
    assert sr.get_versions(subject) == [1, 2]
    v1 = sr.get_version(subject, 1)
    assert (v1.schema_id, v1.version, v1.subject) == (v1_id, 1, subject)
    assert SchemaRegistryClient({"url": schema_registry}).get_schema(v2_id).schema_str == ADD_NULLABLE_WITH_DEFAULT
    found = sr.lookup_schema(subject, Schema(V1, "AVRO"))
    assert (found.schema_id, found.version) == (v1_id, 1)
    # the same text under other subjects (earlier tests) shares the id, as in Confluent
    assert subject in sr.get_subjects_by_schema_id(v1_id)
    assert (subject, 1) in [(v.subject, v.version) for v in sr.get_schema_versions(v1_id)]
    assert (subject, 2) not in [(v.subject, v.version) for v in sr.get_schema_versions(v1_id)]
    assert sr.test_compatibility(subject, Schema(record(("id", "long")), "AVRO")) is True
    sr.set_compatibility(subject, "full")
    assert sr.get_compatibility(subject) == "FULL"
    assert sr.get_schema_types() == ["AVRO"]


def test_lookup_of_unknown_schema_is_40403(sr, unique_name):
    subject = f"{unique_name}-value"
    sr.register_schema(subject, Schema(V1, "AVRO"))
    with pytest.raises(SchemaRegistryError) as e:
        sr.lookup_schema(subject, Schema(record(("other", "int")), "AVRO"))
    assert (e.value.http_status_code, e.value.error_code) == (404, 40403)
    with pytest.raises(SchemaRegistryError) as e:
        sr.lookup_schema(f"{unique_name}-missing", Schema(V1, "AVRO"))
    assert e.value.error_code == 40401


def test_soft_delete_hides_versions_but_keeps_ids(sr, schema_registry, unique_name):
    subject = f"{unique_name}-value"
    schema_id = sr.register_schema(subject, Schema(V1, "AVRO"))
    assert sr.delete_subject(subject) == [1]
    assert subject not in sr.get_subjects()
    with pytest.raises(SchemaRegistryError) as e:
        sr.get_versions(subject)
    assert e.value.error_code == 40401
    fresh = SchemaRegistryClient({"url": schema_registry})
    assert fresh.get_schema(schema_id).schema_str == V1  # data written before the delete stays readable
    # registering again continues the version sequence and keeps the id
    assert fresh.register_schema(subject, Schema(V1, "AVRO")) == schema_id
    assert fresh.get_versions(subject) == [2]


def test_invalid_schema_is_422(sr, unique_name):
    with pytest.raises(SchemaRegistryError) as e:
        sr.register_schema(unique_name, Schema('{"type": "record", "name": "r", "fields": [{"name": "a"}]}', "AVRO"))
    assert (e.value.http_status_code, e.value.error_code) == (422, 42201)


def test_incompatible_is_409(sr, unique_name):
    sr.register_schema(unique_name, Schema(V1, "AVRO"))
    with pytest.raises(SchemaRegistryError) as e:
        sr.register_schema(unique_name, Schema(record(("id", "long"), ("name", "string"), ("q", "int")), "AVRO"))
    assert (e.value.http_status_code, e.value.error_code) == (409, 409)
