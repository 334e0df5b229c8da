"""Every public method of confluent_kafka's SchemaRegistryClient against the built-in registry.

Status and error codes follow Confluent's REST API reference: 40401 subject, 40402 version,
40403 schema not found; 40404/40405 subject (not) soft-deleted; 40406/40407 version (not)
soft-deleted; 40408/40409 no subject-level compatibility/mode; 42202 invalid version; 42203
invalid level; 42204 invalid mode; 42205 operation not permitted. Each test uses its own
subjects; tests that change global settings restore them.
"""

import inspect

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.common.schema_registry_client import (
    ConfigCompatibilityLevel,
    ServerConfig,
)
from confluent_kafka.schema_registry.error import SchemaRegistryError
from helpers.registry_cases import ADD_NULLABLE_WITH_DEFAULT, V1, record

# Every public method and where it is exercised; a new client release adding methods fails
# test_every_public_method_is_exercised until someone decides what the registry answers.
EXERCISED = {
    "register_schema", "register_schema_full_response", "get_schema", "get_schema_types",
    "get_subjects_by_schema_id", "get_schema_versions", "lookup_schema", "get_subjects", "delete_subject",
    "get_latest_version", "get_version", "get_versions", "get_referenced_by", "delete_version",
    "set_compatibility", "get_compatibility", "test_compatibility", "test_compatibility_all_versions",
    "set_config", "get_config", "delete_config", "get_mode", "update_mode", "delete_mode", "get_global_mode",
    "update_global_mode", "get_contexts", "clear_caches", "clear_latest_caches", "close", "config", "new_client",
    # not supported by this registry: answered with a clear error (test_unsupported_features_fail_clearly)
    "get_schema_by_guid", "get_latest_with_metadata", "get_associations_by_resource_name", "create_association",
    "delete_associations",
}


def _own(unique_name, *fields):
    """A schema no other test registers (ids are shared between subjects holding the same text)."""
    return record(*(fields or (("id", "long"),)), name="r_" + unique_name.replace("-", "_"))


def _client(url):
    return SchemaRegistryClient({"url": url, "max.retries": 0})


@pytest.fixture
def sr(schema_registry):
    client = _client(schema_registry)
    yield client
    client.close()


def _fails(fn, status, code):
    with pytest.raises(SchemaRegistryError) as e:
        fn()
    assert (e.value.http_status_code, e.value.error_code) == (status, code), e.value.error_message
    return e.value.error_message


def test_every_public_method_is_exercised():
    public = {n for n, _ in inspect.getmembers(SchemaRegistryClient, inspect.isfunction) if not n.startswith("_")}
    assert public == EXERCISED


def test_register_and_reads(sr, schema_registry, unique_name):
    subject = f"{unique_name}-value"
    v1_id = sr.register_schema(subject, Schema(V1, "AVRO"))
    full = sr.register_schema_full_response(subject, Schema(ADD_NULLABLE_WITH_DEFAULT, "AVRO"))
    assert full.schema_id != v1_id and full.subject == subject
    # normalize: whitespace does not make a new version
    assert sr.register_schema(subject, Schema(V1.replace(",", ", "), "AVRO"), normalize_schemas=True) == v1_id
    fresh = _client(schema_registry)
    assert fresh.get_schema(v1_id).schema_str == V1
    assert _client(schema_registry).get_schema(v1_id, subject_name=subject, fmt="resolved").schema_str == V1
    assert fresh.get_latest_version(subject).version == 2
    assert fresh.get_version(subject, "latest").schema_id == full.schema_id
    assert fresh.get_version(subject, 1).schema.schema_str == V1
    assert fresh.get_versions(subject) == [1, 2]
    assert fresh.get_referenced_by(subject, 1) == []
    found = fresh.lookup_schema(subject, Schema(V1.replace(",", " ,"), "AVRO"), normalize_schemas=True)
    assert (found.schema_id, found.version) == (v1_id, 1)
    assert subject in fresh.get_subjects_by_schema_id(v1_id)
    assert fresh.get_subjects_by_schema_id(v1_id, subject_name=subject) == [subject]
    assert [(v.subject, v.version) for v in fresh.get_schema_versions(v1_id, subject_name=subject)] == [(subject, 1)]
    assert fresh.get_schema_types() == ["AVRO"]
    assert fresh.get_contexts() == ["."]
    fresh.clear_caches()
    fresh.clear_latest_caches()
    assert fresh.config()["url"] == schema_registry
    assert SchemaRegistryClient.new_client({"url": schema_registry}).get_versions(subject) == [1, 2]


def test_subject_listing_prefix_and_paging(sr, unique_name):
    names = [f"{unique_name}-{i}" for i in range(3)]
    for n in names:
        sr.register_schema(n, Schema(V1, "AVRO"))
    assert sr.get_subjects(subject_prefix=unique_name) == names
    assert sr.get_subjects(subject_prefix=unique_name, offset=1, limit=1) == names[1:2]
    assert sr.get_subjects(subject_prefix=unique_name + "-nothing") == []
    assert set(names) <= set(sr.get_subjects())


def test_not_found_error_paths(sr, unique_name):
    subject = f"{unique_name}-value"
    _fails(lambda: sr.get_versions(subject), 404, 40401)
    _fails(lambda: sr.get_latest_version(subject), 404, 40401)
    _fails(lambda: sr.get_version(subject, 1), 404, 40401)
    _fails(lambda: sr.lookup_schema(subject, Schema(V1, "AVRO")), 404, 40401)
    _fails(lambda: sr.delete_subject(subject), 404, 40401)
    _fails(lambda: sr.delete_version(subject, 1), 404, 40401)
    _fails(lambda: sr.get_schema(2**31 - 2), 404, 40403)
    _fails(lambda: sr.get_subjects_by_schema_id(2**31 - 2), 404, 40403)
    _fails(lambda: sr.get_schema_versions(2**31 - 2), 404, 40403)
    sr.register_schema(subject, Schema(V1, "AVRO"))
    _fails(lambda: sr.get_version(subject, 7), 404, 40402)
    _fails(lambda: sr.get_version(subject, 0), 422, 42202)
    _fails(lambda: sr.delete_version(subject, 7), 404, 40402)
    _fails(lambda: sr.get_referenced_by(subject, 7), 404, 40402)
    _fails(lambda: sr.lookup_schema(subject, Schema(record(("x", "int")), "AVRO")), 404, 40403)


def test_version_soft_then_permanent_delete(sr, schema_registry, unique_name):
    subject = f"{unique_name}-value"
    v1, v2 = _own(unique_name), _own(unique_name, ("id", "long"), ("note", ["null", "string"], None))
    v1_id = sr.register_schema(subject, Schema(v1, "AVRO"))
    v2_id = sr.register_schema(subject, Schema(v2, "AVRO"))
    _fails(lambda: sr.delete_version(subject, 1, permanent=True), 404, 40407)  # must be soft-deleted first
    assert sr.delete_version(subject, 1) == 1
    _fails(lambda: sr.delete_version(subject, 1), 404, 40406)  # already soft-deleted
    fresh = _client(schema_registry)
    assert fresh.get_versions(subject) == [2]
    assert fresh.get_versions(subject, deleted=True) == [1, 2]
    assert fresh.get_versions(subject, deleted_only=True) == [1]
    _fails(lambda: fresh.get_version(subject, 1), 404, 40402)
    assert fresh.get_version(subject, 1, deleted=True).schema_id == v1_id
    _fails(lambda: _client(schema_registry).lookup_schema(subject, Schema(v1, "AVRO")), 404, 40403)
    assert _client(schema_registry).lookup_schema(subject, Schema(v1, "AVRO"), deleted=True).version == 1
    assert fresh.get_schema(v1_id).schema_str == v1  # soft delete keeps the id readable
    assert fresh.get_schema_versions(v1_id) == []
    assert [(v.subject, v.version) for v in fresh.get_schema_versions(v1_id, deleted=True)] == [(subject, 1)]
    assert fresh.get_subjects_by_schema_id(v1_id, deleted=True) == [subject]
    assert sr.delete_version(subject, 1, permanent=True) == 1
    assert _client(schema_registry).get_versions(subject, deleted=True) == [2]
    _fails(lambda: _client(schema_registry).get_schema(v1_id), 404, 40403)  # nothing refers to it any more
    assert sr.delete_version(subject, "latest") == 2
    assert _client(schema_registry).get_schema(v2_id).schema_str == v2


def test_subject_soft_then_permanent_delete(sr, schema_registry, unique_name):
    subject = f"{unique_name}-value"
    v1 = _own(unique_name)
    schema_id = sr.register_schema(subject, Schema(v1, "AVRO"))
    sr.set_compatibility(subject, "NONE")
    _fails(lambda: sr.delete_subject(subject, permanent=True), 404, 40405)
    assert sr.delete_subject(subject) == [1]
    _fails(lambda: sr.delete_subject(subject), 404, 40404)
    assert subject not in sr.get_subjects()
    assert subject in sr.get_subjects(deleted=True)
    assert subject in sr.get_subjects(deleted_only=True)
    assert sr.get_compatibility(subject) == "NONE"  # a soft delete keeps the subject's settings
    assert sr.delete_subject(subject, permanent=True) == [1]
    assert subject not in sr.get_subjects(deleted=True)
    _fails(lambda: sr.get_versions(subject, deleted=True), 404, 40401)
    _fails(lambda: sr.get_compatibility(subject), 404, 40408)  # a permanent one removes them
    _fails(lambda: _client(schema_registry).get_schema(schema_id), 404, 40403)
    # the same text again starts the subject over and gets its old id back
    assert _client(schema_registry).register_schema(subject, Schema(v1, "AVRO")) == schema_id
    assert sr.get_versions(subject) == [1]


def test_compatibility_checks(sr, unique_name):
    subject = f"{unique_name}-value"
    sr.register_schema(subject, Schema(record(("id", "long"), ("x", "int")), "AVRO"))
    sr.set_compatibility(subject, "NONE")
    sr.register_schema(subject, Schema(record(("id", "long"), ("x", "string")), "AVRO"))
    sr.set_compatibility(subject, "BACKWARD_TRANSITIVE")
    # reads version 2 (x string) but not version 1 (int does not promote to string)
    candidate = Schema(record(("id", "long"), ("x", "string"), ("z", "int", 0)), "AVRO")
    assert sr.test_compatibility(subject, candidate, version=1) is False
    assert sr.test_compatibility(subject, candidate, version=2) is True
    assert sr.test_compatibility(subject, candidate, verbose=True) is True  # "latest" = version 2
    assert sr.test_compatibility_all_versions(subject, candidate, verbose=True) is False  # transitive
    sr.set_compatibility(subject, "BACKWARD")
    assert sr.test_compatibility_all_versions(subject, candidate) is True  # latest only
    assert sr.test_compatibility_all_versions(f"{unique_name}-new", candidate) is True  # nothing to break
    _fails(lambda: sr.test_compatibility(subject, candidate, version=9), 404, 40402)
    _fails(lambda: sr.test_compatibility(f"{unique_name}-none", candidate), 404, 40401)


def test_config_set_get_delete(sr, unique_name):
    subject = f"{unique_name}-value"
    _fails(lambda: sr.get_compatibility(subject), 404, 40408)
    _fails(lambda: sr.delete_config(subject), 404, 40401)
    assert sr.set_compatibility(subject, "full") == {"compatibility": "FULL"}
    assert sr.get_compatibility(subject) == "FULL"
    assert sr.get_config(subject).compatibility_level is ConfigCompatibilityLevel.FULL
    sr.set_config(subject, ServerConfig(compatibility=ConfigCompatibilityLevel.FORWARD_TRANSITIVE))
    assert sr.get_compatibility(subject) == "FORWARD_TRANSITIVE"
    assert sr.delete_config(subject).compatibility_level is ConfigCompatibilityLevel.FORWARD_TRANSITIVE
    _fails(lambda: sr.get_compatibility(subject), 404, 40408)
    _fails(lambda: sr.set_compatibility(subject, "SIDEWAYS"), 422, 42203)
    message = _fails(lambda: sr.set_config(subject, ServerConfig(
        compatibility=ConfigCompatibilityLevel.FULL, compatibility_group="app.version")), 422, 42203)
    assert "compatibilityGroup" in message


def test_global_config_delete_restores_default(sr):
    assert sr.get_compatibility() == "BACKWARD"
    sr.set_config(None, ServerConfig(compatibility=ConfigCompatibilityLevel.FULL))
    try:
        assert sr.get_config().compatibility_level is ConfigCompatibilityLevel.FULL
    finally:
        assert sr.delete_config().compatibility_level is ConfigCompatibilityLevel.FULL
    assert sr.get_compatibility() == "BACKWARD"


def test_subject_mode(sr, unique_name):
    subject = f"{unique_name}-value"
    schema_id = sr.register_schema(subject, Schema(V1, "AVRO"))
    assert sr.get_global_mode() == "READWRITE"
    _fails(lambda: sr.get_mode(subject), 404, 40409)
    assert sr.update_mode(subject, "READONLY") == "READONLY"
    assert sr.get_mode(subject) == "READONLY"
    fresh = _client(sr.config()["url"])
    _fails(lambda: fresh.register_schema(subject, Schema(ADD_NULLABLE_WITH_DEFAULT, "AVRO")), 422, 42205)
    _fails(lambda: fresh.delete_version(subject, 1), 422, 42205)
    _fails(lambda: fresh.delete_subject(subject), 422, 42205)
    assert fresh.register_schema(subject, Schema(V1, "AVRO")) == schema_id  # nothing new to write
    assert fresh.get_versions(subject) == [1]
    _fails(lambda: sr.update_mode(subject, "IMPORT"), 422, 42204)
    _fails(lambda: sr.update_mode(subject, "SOMETIMES"), 422, 42204)
    assert sr.delete_mode(subject) == "READONLY"
    _fails(lambda: sr.delete_mode(subject), 404, 40409)
    assert fresh.register_schema(subject, Schema(ADD_NULLABLE_WITH_DEFAULT, "AVRO")) > 0


def test_global_read_only_mode(sr, unique_name):
    subject = f"{unique_name}-value"
    assert sr.update_global_mode("READONLY") == "READONLY"
    try:
        assert sr.get_global_mode() == "READONLY"
        _fails(lambda: sr.register_schema(subject, Schema(V1, "AVRO")), 422, 42205)
    finally:
        assert sr.update_global_mode("READWRITE") == "READWRITE"
    assert sr.register_schema(subject, Schema(V1, "AVRO")) > 0


def test_unsupported_features_fail_clearly(sr, unique_name):
    """Not implemented (see docs/schema-registry.md): Confluent-style errors that say so."""
    from confluent_kafka.schema_registry.common.schema_registry_client import (
        AssociationCreateOrUpdateRequest,
        Metadata,
        MetadataProperties,
    )

    subject = f"{unique_name}-value"
    sr.register_schema(subject, Schema(V1, "AVRO"))
    for call in (lambda: sr.get_schema_by_guid("7c5d3b0e-0000-4000-8000-000000000000"),
                 lambda: sr.get_latest_with_metadata(subject, {"owner": "x"}),
                 lambda: sr.get_associations_by_resource_name("orders", "lkc-1"),
                 lambda: sr.delete_associations("r-1")):
        assert "not supported" in _fails(call, 404, 404)
    assert "not supported" in _fails(lambda: sr.create_association(
        AssociationCreateOrUpdateRequest(resource_name="orders", resource_namespace="lkc-1")), 404, 404)
    for schema in (Schema('{"type": "object"}', "JSON"), Schema('syntax = "proto3";', "PROTOBUF"),
                   Schema(V1, "AVRO", metadata=Metadata(None, MetadataProperties({"owner": "x"}), None))):
        assert "not supported" in _fails(lambda: sr.register_schema(f"{subject}-x", schema), 422, 42201)

