"""The exact requests TiCDC's Confluent schema manager sends (pkg/sink/codec/avro), via urllib.

Facts from pingcap/tiflow and pingcap/ticdc ``confluent_schema_registry.go``:
- start-up: ``GET <registry URL with trailing '/' trimmed>``; needs status 200 (ticdc) and a body
  that is exactly ``{}`` (both).
- register: ``POST /subjects/<url.QueryEscape(topic + "-key"|"-value")>/versions`` with body
  ``{"schema": <json.Compact(schema)>}`` (no ``schemaType``), headers ``Accept:
  application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json``
  and ``Content-Type: application/vnd.schemaregistry.v1+json``; any status but 200 is an error;
  reads ``id`` and refuses 0. Re-registering after a cache miss must give the same id.
- decode: ``GET /schemas/ids/<id>`` (same Accept); 200 reads ``schema``; 404 means "not found";
  anything else is an error.
- clear: ``DELETE /subjects/<subject>``; 200 and 404 both mean done.
- retries: tiflow retries 5xx (and transport errors) until its context ends, so a malformed
  request must get a 4xx, never a 5xx.
- credentials: ``user:password@`` in the URL, URL-encoded; Go sends them as basic auth.
"""

import base64
import json
import urllib.error
import urllib.request
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.dev.registry import RegistryService

ACCEPT = "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def ticdc_value_schema(table: str, *, extra_column: bool = False) -> str:
    """A TiCDC-shaped value schema (namespace, connect.parameters), pretty-printed as generated."""
    fields = [
        {"name": "id", "type": {"type": "long", "connect.parameters": {"tidb_type": "BIGINT"}}},
        {"default": None, "name": "note",
         "type": ["null", {"type": "string", "connect.parameters": {"tidb_type": "TEXT"}}]},
    ]
    if extra_column:
        fields.append({"name": "qty", "type": {"type": "int", "connect.parameters": {"tidb_type": "INT"}}})
    return json.dumps({"type": "record", "name": table, "namespace": "default.shop", "fields": fields}, indent=2)


def compact(text: str) -> str:
    """Go's json.Compact: whitespace between tokens removed, everything else kept."""
    return json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)


def send(method: str, url: str, body: dict | None = None, auth: tuple[str, str] | None = None):
    """(status, raw body) of one request with TiCDC's headers."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Accept", ACCEPT)
    if data is not None:
        req.add_header("Content-Type", CONTENT_TYPE)
    if auth is not None:  # what Go's http.Client derives from the URL's user info
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def register(base: str, subject: str, schema: str, auth=None):
    # Go's url.QueryEscape; for Kafka topic names it equals Python's quote_plus
    return send("POST", f"{base}/subjects/{quote_plus(subject)}/versions", {"schema": compact(schema)}, auth)


def test_startup_probe_body_is_exactly_empty_object(schema_registry):
    for url in (schema_registry, schema_registry + "/"):
        status, body = send("GET", url.rstrip("/"))
        assert (status, body) == (200, b"{}")


def test_register_lookup_and_reregister(schema_registry, unique_name):
    topic = unique_name.replace("-", "_")
    subject = f"{topic}-value"
    status, body = register(schema_registry, subject, ticdc_value_schema(topic))
    assert status == 200
    schema_id = json.loads(body)["id"]
    assert isinstance(schema_id, int) and 0 < schema_id < 2**31
    # a TiCDC restart loses its cache and registers the same schema again: same id, no new version
    assert register(schema_registry, subject, ticdc_value_schema(topic)) == (200, body)
    status, versions = send("GET", f"{schema_registry}/subjects/{quote(subject)}/versions")
    assert (status, json.loads(versions)) == (200, [1])
    # the decoder resolves the id from the message header
    status, body = send("GET", f"{schema_registry}/schemas/ids/{schema_id}")
    assert status == 200
    assert json.loads(json.loads(body)["schema"]) == json.loads(ticdc_value_schema(topic))


def test_unknown_id_is_404(schema_registry):
    status, body = send("GET", f"{schema_registry}/schemas/ids/{2**31 - 3}")
    assert status == 404 and json.loads(body)["error_code"] == 40403


def test_incompatible_schema_is_a_4xx_not_retried(schema_registry, unique_name):
    """Adding a NOT NULL column without default under BACKWARD: 409, which TiCDC reports, not retries."""
    topic = unique_name.replace("-", "_")
    assert register(schema_registry, f"{topic}-value", ticdc_value_schema(topic))[0] == 200
    status, body = register(schema_registry, f"{topic}-value", ticdc_value_schema(topic, extra_column=True))
    assert status == 409 and json.loads(body)["error_code"] == 409


def test_clear_registry_is_idempotent(schema_registry, unique_name):
    topic = unique_name.replace("-", "_")
    register(schema_registry, f"{topic}-key", ticdc_value_schema(topic))
    url = f"{schema_registry}/subjects/{quote_plus(topic + '-key')}"
    assert send("DELETE", url) == (200, b"[1]")
    assert send("DELETE", url)[0] == 404  # "already cleaned" for TiCDC
    assert send("DELETE", f"{schema_registry}/subjects/{topic}-never")[0] == 404


def test_credentials_from_the_url(tmp_path, unique_name):
    with RegistryService(tmp_path / "data", auth="cdc:p@ss/w:rd", log_path=tmp_path / "r.log") as service:
        assert send("GET", service.url)[0] == 401
        assert send("GET", service.url, auth=("cdc", "p@ss/w:rd")) == (200, b"{}")
        topic = unique_name.replace("-", "_")
        status, body = register(service.url, f"{topic}-value", ticdc_value_schema(topic), auth=("cdc", "p@ss/w:rd"))
        assert status == 200 and json.loads(body)["id"] > 0
        assert register(service.url, f"{topic}-value", ticdc_value_schema(topic), auth=("cdc", "x"))[0] == 401


@pytest.mark.parametrize("raw", [
    b'{"schema": "' + b"[" * 5000 + b"]" * 5000 + b'"}',  # nesting deeper than the JSON parser's stack
    b'{"schema":' + b"[" * 100000 + b"]" * 100000 + b"}",
    b"\xff\xfe",
    b"[]",
    b'{"schema": 5}',
])
def test_malformed_registrations_are_4xx(schema_registry, unique_name, raw):
    req = urllib.request.Request(f"{schema_registry}/subjects/{unique_name}/versions", data=raw, method="POST",
                                 headers={"Content-Type": CONTENT_TYPE, "Accept": ACCEPT})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert 400 <= e.value.code < 500
    assert "error_code" in json.loads(e.value.read())


@pytest.mark.parametrize("path", ["/schemas/ids/99999999999999999999999", "/schemas/ids/-1", "/schemas/ids/x",
                                  "/schemas/ids/4294967296/subjects"])
def test_out_of_range_ids_are_404(schema_registry, path):
    status, body = send("GET", schema_registry + path)
    assert status == 404 and json.loads(body)["error_code"] == 40403


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["type", "name", "fields", "items", "values", "symbols", "size", "default", "namespace",
                         "logicalType", "precision", "scale", "aliases", "order"]) | st.text(max_size=4),
        inner, max_size=5),
    max_leaves=20)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=json_values)
def test_arbitrary_schema_json_never_gets_a_5xx(schema_registry, schema):
    """Whatever the schema text, the registry decides (200/409/422); it never fails with a 5xx."""
    status, body = send("POST", f"{schema_registry}/subjects/fuzz-value/versions",
                        {"schema": json.dumps(schema)})
    assert status in (200, 409, 422), body
    status, body = send("POST", f"{schema_registry}/compatibility/subjects/fuzz-value/versions",
                        {"schema": json.dumps(schema)})
    assert status in (200, 422), body
