"""A registry of our own: persistence across a restart, and basic auth."""

import base64

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from helpers.registry_cases import ADD_NULLABLE_WITH_DEFAULT, V1, record

from cdcflow.dev.registry import RegistryService
from cdcflow.schemaregistry.client import RegistryAuthError, RegistryClient


def test_restart_keeps_subjects_ids_and_config(tmp_path):
    data = tmp_path / "data"
    with RegistryService(data, log_path=tmp_path / "r1.log") as first:
        with RegistryClient(first.url) as c:
            a1 = c.register("orders-value", V1)
            a2 = c.register("orders-value", ADD_NULLABLE_WITH_DEFAULT)
            b1 = c.register("users-value", record(("uid", "int")))
            c.set_compatibility("FULL", "users-value")
    with RegistryService(data, log_path=tmp_path / "r2.log") as second:
        with RegistryClient(second.url) as c:
            assert c.subjects() == ["orders-value", "users-value"]
            assert c.versions("orders-value") == [1, 2]
            assert c.version("orders-value", 1).id == a1 and c.latest("orders-value").id == a2
            assert c.schema_by_id(b1) == record(("uid", "int"))
            assert c.compatibility("users-value") == "FULL"
            # ids keep counting from where they were; re-registering is idempotent
            assert c.register("orders-value", V1) == a1
            new = c.register("other-value", record(("k", "string")))
            assert new > max(a1, a2, b1)


def test_restart_keeps_modes_and_soft_deletes(tmp_path):
    data = tmp_path / "data"
    with RegistryService(data, log_path=tmp_path / "r1.log") as first:
        sr = SchemaRegistryClient({"url": first.url})
        sr.register_schema("orders-value", Schema(V1, "AVRO"))
        sr.register_schema("orders-value", Schema(ADD_NULLABLE_WITH_DEFAULT, "AVRO"))
        assert sr.delete_version("orders-value", 1) == 1
        sr.update_mode("orders-value", "READONLY")
    with RegistryService(data, log_path=tmp_path / "r2.log") as second:
        sr = SchemaRegistryClient({"url": second.url})
        assert sr.get_mode("orders-value") == "READONLY"
        assert sr.get_versions("orders-value") == [2]
        assert sr.get_versions("orders-value", deleted=True) == [1, 2]
        with pytest.raises(SchemaRegistryError) as e:
            sr.register_schema("orders-value", Schema(record(("id", "long")), "AVRO"))
        assert e.value.error_code == 42205


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    base = tmp_path_factory.mktemp("secured")
    with RegistryService(base / "data", auth="ticdc:p@ss:w/rd", log_path=base / "r.log") as service:
        yield service.url


def test_basic_auth_rejects_missing_and_wrong_credentials(secured):
    assert httpx.get(secured + "/").status_code == 401
    r = httpx.get(secured + "/subjects", auth=("ticdc", "wrong"))
    assert r.status_code == 401 and r.json()["error_code"] == 401
    assert r.headers["www-authenticate"].startswith("Basic")
    assert httpx.get(secured + "/subjects", headers={"Authorization": "Basic !!notbase64"}).status_code == 401
    assert httpx.get(secured + "/subjects", headers={
        "Authorization": "Basic " + base64.b64encode(b"ticdc:p@ss:w/rd").decode()}).status_code == 200
    with pytest.raises(RegistryAuthError) as e:
        RegistryClient(secured.replace("http://", "http://ticdc:nope@")).check_reachable()
    assert e.value.status == 401 and "nope" not in str(e.value)


def test_confluent_client_with_basic_auth(secured):
    sr = SchemaRegistryClient({"url": secured, "basic.auth.user.info": "ticdc:p@ss:w/rd"})
    schema_id = sr.register_schema("auth-value", Schema(V1, "AVRO"))
    assert sr.get_schema(schema_id).schema_str == V1
    with pytest.raises(SchemaRegistryError) as e:
        SchemaRegistryClient({"url": secured, "basic.auth.user.info": "ticdc:bad"}).get_subjects()
    assert e.value.http_status_code == 401


def test_our_client_takes_url_encoded_credentials(secured):
    url = secured.replace("http://", "http://ticdc:p%40ss%3Aw%2Frd@")
    with RegistryClient(url) as c:
        c.check_reachable()
        assert "p%40ss" not in repr(c) and c.url == secured
        assert c.register("auth2-value", V1) > 0
