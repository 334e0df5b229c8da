"""Every documented example of Conduit's built-in processors, run as written.

Source: github.com/ConduitIO/conduit, pkg/plugin/processor/builtin/internal/exampleutil/specs/<processor>.json
(Conduit generates them from each processor's ``*_examples_test.go``; conduit-site publishes the same
examples in docs/1-using/6-processors/1-builtin/<processor>.mdx). The 36 examples were copied verbatim
into ``data/conduit_processor_examples.json`` (commit named in the file). Each case configures the
processor with the example's settings, feeds it the example's input record and compares the output
with the example's, in the form the file writes them: raw data as text (binary raw data, such as
Avro or zstd bytes, is compared in that lossy text form, invalid UTF-8 as U+FFFD), ``[]byte`` inside
structured data as base64, positions as base64, ``null`` for an empty position or metadata.

Changes to the examples, each the location of a service: the HTTP server Conduit's webhook example
starts on the fixed port 54321 is started here on a free port (the URL is rewritten to it). Conduit's
Avro examples register their schema in a registry before they run; here each gets a fresh schema store
holding that schema. Conduit's AI examples replace the API client with a mock; here the processor's
base URL points at a local server answering as the provider's API does, with the mock's answers
(``helpers.ai_fake``). What still differs is a strict expected failure with the reason (``NOT_AS_WRITTEN``).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from pathlib import Path
from typing import Any

import pytest
from helpers.ai_fake import fake_providers
from helpers.transforms import chain
from helpers.webhook_server import webhook_server

from cdcflow.convert.textforms import rfc3339_text
from cdcflow.record import Operation, Record
from cdcflow.schemas import SchemaStore, default_store, set_default_store

DATA = json.loads((Path(__file__).parent / "data" / "conduit_processor_examples.json").read_text())

#: the schema Conduit's Avro examples register before they run (avro/decode_examples_test.go,
#: encode_examples_test.go): each example gets a fresh store holding it, as id 1
EXAMPLE_SCHEMA = ('{"type":"record","name":"record","fields":[{"name":"myString","type":"string"},'
                  '{"name":"myInt","type":"int"}]}')
REGISTERED = {
    "avro.decode.json:Decode a record field in Avro format": "example-decode",
    "avro.encode.json:Pre-register schema": "example-preRegistered",
    "avro.encode.json:Auto-register schema": None,  # registers its own schema: only a fresh store
}

#: examples that do not give Conduit's output here, and why (the test expects them to fail, strictly)
NOT_AS_WRITTEN: dict[str, str] = {}


def record_of(doc: dict[str, Any]) -> Record:
    """A record from the examples' JSON (raw data is written as text there)."""
    op = doc["operation"]
    return Record(
        position=base64.b64decode(doc["position"]) if doc["position"] else b"",
        operation=Operation.UNSPECIFIED if op == "Operation(0)" else Operation.from_text(op),
        metadata=dict(doc["metadata"] or {}),
        key=_data_of(doc["key"]),
        before=_data_of(doc["payload"]["before"]),
        after=_data_of(doc["payload"]["after"]),
    )


def _data_of(value: Any) -> Any:
    return value.encode("utf-8") if isinstance(value, str) else value


def doc_of(r: Record) -> dict[str, Any]:
    """A record in the examples' JSON form."""
    return {
        "position": base64.b64encode(r.position).decode() if r.position else None,
        "operation": r.operation.text if r.operation else "Operation(0)",
        "metadata": dict(r.metadata) or None,
        "key": _doc_data(r.key),
        "payload": {"before": _doc_data(r.before), "after": _doc_data(r.after)},
    }


def _doc_data(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return _doc_value(value)


def _doc_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _doc_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_doc_value(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, dt.datetime):
        return rfc3339_text(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


#: the setting that points each AI processor at its API (the fake one here), and the path under it
AI_URL = {
    "openai.embeddings": ("base_url", "/v1"), "openai.textgen": ("base_url", "/v1"),
    "cohere.command": ("baseURL", ""), "cohere.embed": ("baseURL", ""), "cohere.rerank": ("baseURL", ""),
    "ollama": ("url", ""),
}


@pytest.fixture(scope="module")
def providers():
    with fake_providers() as srv:
        yield srv


@pytest.fixture(scope="module")
def greeter():
    with webhook_server() as url:
        yield url


def _cases():
    for i, e in enumerate(DATA["examples"]):
        case = f"{e['file']}:{e['summary']}"
        reason = NOT_AS_WRITTEN.get(case)
        yield pytest.param(e, id=case, marks=[pytest.mark.xfail(reason=reason, strict=True)] if reason else [])


@pytest.mark.parametrize("example", list(_cases()))
def test_conduit_processor_example(example, request):
    settings = dict(example["config"])
    if example["processor"] == "webhook.http":  # the example's server listens on 54321; ours on a free port
        url = request.getfixturevalue("greeter")
        settings = {k: v.replace("http://127.0.0.1:54321", url) for k, v in settings.items()}
    elif example["processor"] in AI_URL:  # Conduit's example swaps in a mock client; we point at a fake API
        providers = request.getfixturevalue("providers")
        providers.key = settings.get("api_key") or settings.get("apiKey")
        name, suffix = AI_URL[example["processor"]]
        settings[name] = providers.url + suffix
    case = f"{example['file']}:{example['summary']}"
    previous = default_store()
    if case in REGISTERED:  # Conduit's example fills its registry first
        store = SchemaStore(None)
        if REGISTERED[case]:
            store.register(REGISTERED[case], EXAMPLE_SCHEMA)
        set_default_store(store)
    try:
        c = chain(("example", example["processor"], None, settings))
        try:
            out = c.process([record_of(example["have"])])
        finally:
            c.teardown()
    finally:
        set_default_store(previous)
    want = example["want"]
    if isinstance(want, dict) and set(want) == {"error"}:
        assert [n.error for n in out.nacks] == [want["error"]] and not out.records  # error.json: a Go template
    elif want == {}:
        assert out.filtered == 1 and not out.records and not out.nacks
    else:
        assert not out.nacks, out.nacks
        got = [doc_of(r) for r in out.records]
        assert got == [_no_empty_metadata(w) for w in (want if isinstance(want, list) else [want])]


def _no_empty_metadata(doc: dict[str, Any]) -> dict[str, Any]:
    """cdcflow's records always have a metadata map, so Conduit's empty ``{}`` and nil compare equal
    (both are written as ``null`` in the JSON form)."""
    return {**doc, "metadata": doc["metadata"] or None}


def test_every_example_is_here():
    """The fixture holds all 36 documented examples of Conduit's 25 built-in processors."""
    assert len(DATA["examples"]) == 36
    assert len({e["processor"] for e in DATA["examples"]}) == 25
