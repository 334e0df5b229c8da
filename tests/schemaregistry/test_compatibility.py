"""Compatibility levels: the pure rule and the registry's answer over HTTP must agree."""

import pytest
from helpers.registry_cases import CASES, V1, case_id, record

from cdcflow.schemaregistry.client import IncompatibleSchemaError, RegistryClient
from cdcflow.schemaregistry.compatibility import LEVELS, InvalidLevel, InvalidSchema, normalize_level, problems


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_rule(case):
    level, history, candidate, ok = case
    assert (problems(level, candidate, history) == []) is ok


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_registration_per_level(schema_registry, unique_name, case):
    level, history, candidate, ok = case
    with RegistryClient(schema_registry) as client:
        client.set_compatibility("NONE", unique_name)
        ids = [client.register(unique_name, text) for text in history]
        client.set_compatibility(level, unique_name)
        assert client.compatibility(unique_name) == level
        if ok:
            new_id = client.register(unique_name, candidate)
            assert new_id not in ids
            assert client.versions(unique_name) == list(range(1, len(history) + 2))
            assert client.latest(unique_name).id == new_id
        else:
            with pytest.raises(IncompatibleSchemaError) as e:
                client.register(unique_name, candidate)
            assert e.value.status == 409 and e.value.error_code == 409
            assert e.value.subject == unique_name and level in e.value.registry_message
            assert client.versions(unique_name) == list(range(1, len(history) + 1))


def test_not_null_column_without_default_refused_under_default_backward(schema_registry, unique_name):
    """The issue's schema-evolution case under the global default level, no subject config."""
    with RegistryClient(schema_registry) as client:
        assert client.compatibility() == "BACKWARD"
        client.register(unique_name, V1)
        nullable = record(("id", "long"), ("name", "string"), ("note", ["null", "string"], None))
        assert client.register(unique_name, nullable) > 0
        with pytest.raises(IncompatibleSchemaError, match="qty"):
            client.register(unique_name, record(("id", "long"), ("name", "string"),
                                                ("note", ["null", "string"], None), ("qty", "int")))
        assert client.versions(unique_name) == [1, 2]


def test_compatibility_endpoint_matches_registration(schema_registry, unique_name):
    with RegistryClient(schema_registry) as client:
        client.register(unique_name, V1)
        assert client.is_compatible(unique_name, record(("id", "long"), ("name", "string"), ("q", "int"))) is False
        assert client.is_compatible(unique_name, record(("id", "long")), version=1) is True


def test_levels_are_validated():
    assert normalize_level("full_transitive") == "FULL_TRANSITIVE"
    assert set(LEVELS) == {"BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
                           "FULL_TRANSITIVE", "NONE"}
    with pytest.raises(InvalidLevel):
        normalize_level("SIDEWAYS")
    with pytest.raises(InvalidSchema):
        problems("NONE", '{"type": "record", "name": "r"}', [])
