"""The REST surface as TiCDC and curl see it: status codes, Confluent error bodies, media type."""

import httpx
import pytest
from helpers.registry_cases import V1, record

MEDIA = "application/vnd.schemaregistry.v1+json"


@pytest.fixture
def http(schema_registry):
    with httpx.Client(base_url=schema_registry, timeout=5) as c:
        yield c


def _error(response, status, code):
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(MEDIA)
    body = response.json()
    assert body["error_code"] == code and body["message"]


def test_root_is_empty_object(http):
    r = http.get("/")
    assert r.status_code == 200 and r.json() == {} and r.headers["content-type"].startswith(MEDIA)


def test_register_read_back_and_raw_schema(http, unique_name):
    r = http.post(f"/subjects/{unique_name}/versions", json={"schema": V1, "schemaType": "AVRO"})
    assert r.status_code == 200 and set(r.json()) == {"id"}
    schema_id = r.json()["id"]
    # the same text again: same id, no new version
    assert http.post(f"/subjects/{unique_name}/versions", json={"schema": V1}).json() == {"id": schema_id}
    assert http.get(f"/subjects/{unique_name}/versions").json() == [1]
    for v in ("1", "latest", "-1"):
        assert http.get(f"/subjects/{unique_name}/versions/{v}").json() == {
            "subject": unique_name, "version": 1, "id": schema_id, "schema": V1}
    assert http.get(f"/subjects/{unique_name}/versions/latest/schema").text == V1
    assert http.get(f"/schemas/ids/{schema_id}").json() == {"schema": V1}
    assert http.get(f"/schemas/ids/{schema_id}/schema").text == V1
    assert unique_name in http.get(f"/schemas/ids/{schema_id}/subjects").json()
    # whitespace does not make a different schema
    spaced = V1.replace(",", ", ")
    assert http.post(f"/subjects/{unique_name}/versions", json={"schema": spaced}).json() == {"id": schema_id}
    lookup = http.post(f"/subjects/{unique_name}", json={"schema": spaced}).json()
    assert (lookup["subject"], lookup["version"], lookup["id"]) == (unique_name, 1, schema_id)


def test_not_found_errors(http, unique_name):
    _error(http.get(f"/subjects/{unique_name}/versions"), 404, 40401)
    _error(http.get(f"/subjects/{unique_name}/versions/1"), 404, 40401)
    _error(http.delete(f"/subjects/{unique_name}"), 404, 40401)
    http.post(f"/subjects/{unique_name}/versions", json={"schema": V1})
    _error(http.get(f"/subjects/{unique_name}/versions/9"), 404, 40402)
    _error(http.get(f"/subjects/{unique_name}/versions/zero"), 422, 42202)
    _error(http.post(f"/subjects/{unique_name}", json={"schema": record(("z", "int"))}), 404, 40403)
    _error(http.get("/schemas/ids/987654"), 404, 40403)
    _error(http.get("/no/such/endpoint"), 404, 404)


@pytest.mark.parametrize("body", [
    {"schema": "{not json"},
    {"schema": '{"type": "nope"}'},
    {"schema": '{"type": "record", "name": "r", "fields": [{"name": "a", "type": "int", "default": "x"}]}'},
    {"schema": '{"type": "enum", "name": "e", "symbols": ["A", "A"]}'},
    {"schema": V1, "schemaType": "PROTOBUF"},
    {"no_schema": V1},
])
def test_invalid_schema_is_422_42201(http, unique_name, body):
    _error(http.post(f"/subjects/{unique_name}/versions", json=body), 422, 42201)
    _error(http.get(f"/subjects/{unique_name}/versions"), 404, 40401)  # nothing was stored


def test_malformed_body_is_400(http, unique_name):
    r = http.post(f"/subjects/{unique_name}/versions", content=b"{oops", headers={"Content-Type": MEDIA})
    _error(r, 400, 400)


def test_config_shapes_and_invalid_level(http, unique_name):
    assert http.get("/config").json() == {"compatibilityLevel": "BACKWARD"}
    _error(http.get(f"/config/{unique_name}"), 404, 40408)
    assert http.get(f"/config/{unique_name}", params={"defaultToGlobal": "true"}).json() == {
        "compatibilityLevel": "BACKWARD"}
    assert http.put(f"/config/{unique_name}", json={"compatibility": "forward"}).json() == {"compatibility": "FORWARD"}
    assert http.get(f"/config/{unique_name}").json() == {"compatibilityLevel": "FORWARD"}
    _error(http.put(f"/config/{unique_name}", json={"compatibility": "SOMETIMES"}), 422, 42203)
    _error(http.put("/config", json={}), 422, 42203)
    assert http.get("/config").json() == {"compatibilityLevel": "BACKWARD"}


def test_compatibility_endpoint(http, unique_name):
    http.post(f"/subjects/{unique_name}/versions", json={"schema": V1})
    bad = record(("id", "long"), ("name", "string"), ("q", "int"))
    r = http.post(f"/compatibility/subjects/{unique_name}/versions/latest", json={"schema": bad},
                  params={"verbose": "true"})
    assert r.json()["is_compatible"] is False and "q" in r.json()["messages"][0]
    assert http.post(f"/compatibility/subjects/{unique_name}/versions", json={"schema": V1}).json() == {
        "is_compatible": True}
    _error(http.post(f"/compatibility/subjects/{unique_name}/versions/5", json={"schema": V1}), 404, 40402)
