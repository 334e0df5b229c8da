"""The AI processors (openai.embeddings, openai.textgen, cohere.command, cohere.embed,
cohere.rerank, ollama) against a local fake server that answers in the request/response
shapes of the providers' API references (OpenAI /v1/embeddings and /v1/chat/completions,
Cohere /v2/chat, /v2/embed and /v2/rerank, Ollama /api/generate).

The documented examples come from Conduit's processor examples
(github.com/ConduitIO/conduit pkg/plugin/processor/builtin/impl/{openai,cohere,ollama}/*_examples_test.go,
published as conduit-site docs/1-using/6-processors/1-builtin/<name>.mdx); each test names its
source. Outages are real: a port nobody listens on, a server that answers 503/429, a handler
that takes longer than the time limit.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from helpers.ai_fake import KEY, fake_providers
from helpers.engine import cli, write_pipeline
from helpers.transforms import configure_only, make

from cdcflow.convert.jsonform import dumps_lines, loads_lines
from cdcflow.dev.process import free_port
from cdcflow.errors import ConfigError, InfrastructureError
from cdcflow.record import META_DLQ_NACK_ERROR, META_DLQ_NACK_NODE_ID, Operation, Record
from cdcflow.sdk import Failed


@pytest.fixture()
def server():
    with fake_providers() as srv:
        yield srv


def openai(name, srv, **kw):
    return make(name, api_key=KEY, base_url=f"{srv.url}/v1", **kw)


def cohere(name, srv, **kw):
    return make(name, apiKey=KEY, baseURL=srv.url, **kw)


# -- documented examples -------------------------------------------------------------


def test_openai_embeddings_doc_example(server):
    # Conduit openai/embeddings_examples_test.go (ExampleEmbeddingsProcessor)
    t = openai("openai.embeddings", server, model="text-embedding-3-small", field=".Payload.After")
    r = Record(b"test-position", Operation.CREATE, {"key1": "val1"}, b"test-key",
               after=b"This is a sample text to generate embeddings for.")
    assert t.process([r]) == [Record(b"test-position", Operation.CREATE, {"key1": "val1"}, b"test-key",
                                     after=b"[0.1,0.2,0.3,0.4,0.5]")]
    path, body = server.requests[0]
    assert path == "/v1/embeddings" and body == {"input": ["This is a sample text to generate embeddings for."],
                                                 "model": "text-embedding-3-small"}


def test_openai_textgen_doc_example(server):
    # Conduit openai/textgen_examples_test.go (ExampleTextgenProcessor)
    t = openai("openai.textgen", server, model="gpt-4o-mini", temperature="0",
               developer_message="You will receive a payload. Your task is to output back the payload in uppercase.")
    r = Record(b"pos-1", Operation.CREATE, after=b"hello world")
    assert t.process([r]) == [Record(b"pos-1", Operation.CREATE, after=b"HELLO WORLD")]
    _, body = server.requests[0]
    assert body["messages"][0] == {"role": "developer", "content": "You will receive a payload. Your task is to "
                                                                  "output back the payload in uppercase."}
    assert body["messages"][1] == {"role": "user", "content": "hello world"} and "temperature" not in body


def test_cohere_command_doc_example(server):
    # Conduit cohere/command_examples_test.go (ExampleCommandProcessor)
    t = cohere("cohere.command", server, prompt="hello")
    r = Record(b"pos-1", Operation.UPDATE, after=b"who are you?")
    assert t.process([r]) == [Record(b"pos-1", Operation.UPDATE, after=b"cohere command response content")]
    # Go's Sprintf("hello", input): no verb, so the input is appended as an EXTRA argument
    assert server.requests[0][1] == {"model": "command", "messages": [
        {"role": "user", "content": "hello%!(EXTRA string=who are you?)"}]}


def test_cohere_embed_doc_example(server):
    # Conduit cohere/embed_examples_test.go (ExampleEmbedProcessor): the stored bytes are the
    # zstd frame the example's output shows (header 04 00, raw block, checksum)
    t = cohere("cohere.embed", server, inputField=".Payload.After", outputField=".Payload.After")
    r = Record(b"pos-1", Operation.CREATE, {}, after=b"test input")
    [out] = t.process([r])
    assert out.metadata == {"cohere.embed.model": "embed-english-v2.0"}
    assert out.after == b"(\xb5/\xfd\x04\x00i\x00\x00[0.1,0.2,0.3]\x89^xH"
    assert server.requests[0][1] == {"model": "embed-english-v2.0", "texts": ["test input"],
                                     "embedding_types": ["float"]}


def test_cohere_rerank_doc_example(server):
    # Conduit cohere/rerank_examples_test.go (ExampleRerankProcessor)
    t = cohere("cohere.rerank", server, query="What is the capital of the United States?")
    text = "Carson City is the capital city of the American state of Nevada."
    [out] = t.process([Record(b"pos-1", Operation.UPDATE, after=text.encode())])
    assert out == Record(b"pos-1", Operation.UPDATE, after=(
        '{"document":{"text":"Carson City is the capital city of the American state of Nevada."},'
        '"index":0,"relevance_score":0.9}').encode())


def test_ollama_doc_example(server):
    # Conduit ollama/ollama_examples_test.go (ExampleOllamaProcessor)
    t = make("ollama", url=server.url, model="llama3.2", field=".Payload.After",
             prompt="Take the incoming record in JSON format, with a structure of {'test-field': integer}. "
                    "Add one to the value of the integer and return that field.")
    r = Record(b"test-position", Operation.CREATE, {"key1": "val1"}, b"test-key", after={"test-field": 123})
    assert t.process([r]) == [Record(b"test-position", Operation.CREATE, {"key1": "val1"}, b"test-key",
                                     after={"test-field": 124})]
    _, body = server.requests[0]
    assert body["format"] == "json" and body["stream"] is False and body["model"] == "llama3.2"
    assert body["prompt"].startswith("Instructions: {Take the incoming record")


# -- batching, field types, record faults ---------------------------------------------


def test_embeddings_batch_requests_and_a_refused_input_fails_only_its_record(server):
    t = openai("openai.embeddings", server, model="m", batch_size="3")
    recs = [Record(after={"text": f"t{i}"}) for i in range(5)] + [Record(after=b"REFUSE me"), Record(after=None)]
    out = t.process(recs)
    assert all(o.after == b"[0.1,0.2,0.3,0.4,0.5]" for o in out[:5])
    assert isinstance(out[5], Failed) and "status 400" in out[5].message and "input refused" in out[5].message
    assert isinstance(out[6], Failed) and "unsupported type" in out[6].message
    sizes = [len(b["input"]) for _, b in server.requests]
    # 5 good + 1 refused in requests of 3: [3, 3 refused -> 1, 1, 1]
    assert sizes == [3, 3, 1, 1, 1]
    assert server.requests[0][1]["input"][0] == '{"text":"t0"}'  # structured data is sent as its JSON


def test_text_field_gets_text_and_cohere_embed_batches(server):
    t = openai("openai.textgen", server, model="m", developer_message="up", field=".Payload.After.name")
    [out] = t.process([Record(after={"name": "ann", "id": 1})])
    assert out.after == {"name": "ANN", "id": 1}
    c = cohere("cohere.embed", server, maxTextsPerRequest="2", model="embed-english-v3.0",
               inputType="search_document")
    out = c.process([Record(after=f"t{i}".encode()) for i in range(5)])
    assert [len(b["texts"]) for p, b in server.requests if p == "/v2/embed"] == [2, 2, 1]
    assert all(o.metadata["cohere.embed.model"] == "embed-english-v3.0" for o in out)
    assert server.requests[-1][1]["input_type"] == "search_document"


def test_textgen_request_options_use_the_api_names(server):
    t = openai("openai.textgen", server, model="m", developer_message="up", temperature="0.5", max_tokens="0",
               top_log_probs="2", log_probs="true", stop="END, STOP", seed="0", **{"logit_bias.50256": "-100",
                                                                                "metadata.team": "data"})
    t.process([Record(after=b"x")])
    body = server.requests[0][1]
    assert {k: v for k, v in body.items() if k != "messages"} == {
        "model": "m", "temperature": 0.5, "top_logprobs": 2, "logprobs": True, "stop": ["END", "STOP"], "seed": 0,
        "logit_bias": {"50256": -100}, "metadata": {"team": "data"}}


def test_rerank_sends_the_batch_as_one_query(server):
    t = cohere("cohere.rerank", server, query="q")
    out = t.process([Record(after=b"a"), Record(after=b"b"), Record(after=b"c")])
    assert [json.loads(o.after)["relevance_score"] for o in out] == [0.9, 0.8, 0.7]
    assert len(server.requests) == 1 and server.requests[0][1]["documents"] == ["a", "b", "c"]


def test_command_and_ollama_record_faults(server):
    t = cohere("cohere.command", server, prompt="Answer: %s")
    out = t.process([Record(after=b"REFUSE"), Record(after=b"fine")])
    assert isinstance(out[0], Failed) and "status 400" in out[0].message
    assert out[1].after == b"cohere command response content"
    assert server.requests[-1][1]["messages"][0]["content"] == "Answer: fine"
    o = make("ollama", url=server.url)
    out = o.process([Record(after={"x": "DROP TABLE users"}), Record(after=b"not json"), Record(after={"n": 1})])
    assert isinstance(out[0], Failed) and "malicious pattern" in out[0].message
    assert isinstance(out[1], Failed)
    assert out[2].after == {"n": 2}


# -- outages: the batch fails, no record is blamed, the key never shows -----------------


@pytest.mark.parametrize("status", [503, 429])
def test_5xx_and_429_are_retried_then_fail_the_batch(server, status):
    server.fail_with = status
    t = openai("openai.embeddings", server, model="m", max_retries="2", initial_backoff="10", max_backoff="20")
    with pytest.raises(InfrastructureError) as e:
        t.process([Record(after=b"x")])
    assert len(server.requests) == 3 and e.value.service == "openai" and f"status {status}" in str(e.value)
    assert e.value.endpoint == f"{server.url}/v1/embeddings"


def test_retry_then_success(server):
    t = cohere("cohere.command", server, prompt="%s", **{"backoffRetry.count": "3", "backoffRetry.min": "10ms"})
    server.fail_with = 503
    threading.Timer(0.05, lambda: setattr(server, "fail_with", None)).start()
    [out] = t.process([Record(after=b"x")])
    assert out.after == b"cohere command response content" and len(server.requests) >= 2


def test_connection_refused_and_timeout_are_outages(server):
    dead = f"http://127.0.0.1:{free_port()}"
    for t in (make("openai.textgen", api_key=KEY, base_url=dead, model="m", developer_message="d", max_retries="0"),
              make("cohere.rerank", apiKey=KEY, baseURL=dead, query="q"),
              make("ollama", url=dead)):
        with pytest.raises(InfrastructureError) as e:
            t.process([Record(after={"a": 1})])
        assert "ConnectError" in str(e.value) and KEY not in str(e.value)
    server.delay = 1.0
    t = cohere("cohere.embed", server, timeout="200ms")
    started = time.monotonic()
    with pytest.raises(InfrastructureError, match="Timeout"):
        t.process([Record(after=b"x")])
    assert time.monotonic() - started < 1.0


def test_api_key_is_masked_in_errors(server):
    # an API that echoes the credentials it was sent in its error (some proxies do) must not
    # put the key into the record's error, which travels to the DLQ
    t = openai("openai.embeddings", server, model="m")
    [out] = t.process([Record(after=b"ECHO")])
    assert isinstance(out, Failed) and "status 400" in out.message and "Bearer ***" in out.message
    assert KEY not in out.message


def test_settings():
    with pytest.raises(ConfigError) as e:
        configure_only("openai.embeddings", model="m")
    assert e.value.parameter == "api_key"
    with pytest.raises(ConfigError, match="inputType is required"):
        configure_only("cohere.embed", apiKey="k", model="embed-english-v3.0")
    with pytest.raises(ConfigError):
        configure_only("ollama", url="http://x", model="mistral")
    with pytest.raises(ConfigError):
        configure_only("ollama", url="http://x", field=".Key")
    with pytest.raises(ConfigError) as e:
        configure_only("cohere.rerank", apiKey="k")
    assert e.value.parameter == "query"


# -- journeys through cdcflow run ---------------------------------------------------------

FAMILIES = {
    "openai": f"""\
      - id: embed
        plugin: openai.embeddings
        settings: {{api_key: "{KEY}", base_url: "${{FAKE}}/v1", model: text-embedding-3-small,
                   field: .Payload.After.vector, max_retries: "0"}}
      - id: upper
        plugin: openai.textgen
        settings: {{api_key: "{KEY}", base_url: "${{FAKE}}/v1", model: gpt-4o-mini, developer_message: upper,
                   field: .Payload.After.name, max_retries: "0"}}
""",
    "cohere": f"""\
      - id: command
        plugin: cohere.command
        settings: {{apiKey: "{KEY}", baseURL: "${{FAKE}}", prompt: "Say %s", request.body: .Payload.After.name,
                   response.body: .Payload.After.answer}}
      - id: embed
        plugin: cohere.embed
        settings: {{apiKey: "{KEY}", baseURL: "${{FAKE}}", inputField: .Payload.After.name,
                   outputField: .Payload.After.vector}}
      - id: rerank
        plugin: cohere.rerank
        settings: {{apiKey: "{KEY}", baseURL: "${{FAKE}}", query: q, request.body: .Payload.After.name,
                   response.body: .Payload.After.rank}}
""",
    "ollama": """\
      - id: llm
        plugin: ollama
        settings: {url: "${FAKE}", prompt: "add one to every integer"}
""",
}

PIPELINE = """\
version: "2.2"
engine:
  error-recovery.min-delay: 100ms
  error-recovery.max-delay: 200ms
  error-recovery.max-retries: "1"
pipelines:
  - id: ai
    connectors:
      - id: in
        type: source
        plugin: builtin:file
        settings:
          path: ${{CDCFLOW_FILE_DIR}}/in.jsonl
          format: opencdc/json
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: ${{CDCFLOW_FILE_DIR}}/out.jsonl
    processors:
{processors}    dead-letter-queue:
      plugin: builtin:file
      settings:
        path: ${{CDCFLOW_FILE_DIR}}/dlq.jsonl
      window-size: 0
"""


def _journey(tmp_path: Path, family: str, url: str, rows: list[Record]):
    (tmp_path / "in.jsonl").write_bytes(dumps_lines(rows))
    path = write_pipeline(tmp_path / "p.yaml", PIPELINE.format(processors=FAMILIES[family]))
    r = cli(["run", str(path), "--until-idle", "--state-dir", str(tmp_path / "state")],
            env_extra={"FAKE": url}, timeout=540)
    assert KEY not in r.stdout + r.stderr
    read = lambda name: loads_lines((tmp_path / name).read_bytes()) if (tmp_path / name).exists() else []  # noqa: E731
    return r, read("out.jsonl"), read("dlq.jsonl")


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_run_file_ai_processor_file(tmp_path: Path, server, family):
    rows = [Record(str(i).encode(), after={"id": i, "name": f"n{i}", "vector": f"text {i}"}) for i in range(6)]
    rows[3].after["name"] = "REFUSE"  # a record the API refuses: DLQ for openai/cohere.command
    r, out, dlq = _journey(tmp_path, family, server.url, rows)
    assert r.returncode == 0, r.stdout + r.stderr
    got = {rec.after["id"]: rec.after for rec in out}
    if family == "openai":
        assert sorted(got) == [0, 1, 2, 4, 5] and [d.after["id"] for d in dlq] == [3]
        assert dlq[0].metadata[META_DLQ_NACK_NODE_ID] == "upper" and "400" in dlq[0].metadata[META_DLQ_NACK_ERROR]
        assert all(a["vector"] == "[0.1,0.2,0.3,0.4,0.5]" and a["name"] == f"N{i}" for i, a in got.items())
    elif family == "cohere":
        assert sorted(got) == [0, 1, 2, 4, 5] and [d.after["id"] for d in dlq] == [3]
        assert dlq[0].metadata[META_DLQ_NACK_NODE_ID] == "command"
        assert all(a["answer"] == "cohere command response content" for a in got.values())
        assert all(json.loads(a["rank"])["document"]["text"] == f"n{i}" for i, a in got.items())
        assert all(isinstance(a["vector"], (bytes, str)) for a in got.values())
    else:
        # the fake model adds one to every integer, the id included
        assert sorted(got) == list(range(1, 7)) and not dlq
        assert all(a["name"] == ("REFUSE" if i == 4 else f"n{i - 1}") for i, a in got.items())


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_run_with_the_api_down_stops_naming_the_node_and_blames_no_record(tmp_path: Path):
    rows = [Record(str(i).encode(), after={"id": i, "name": f"n{i}", "vector": "v"}) for i in range(3)]
    r, out, dlq = _journey(tmp_path, "openai", f"http://127.0.0.1:{free_port()}", rows)
    assert r.returncode != 0
    assert "embed" in r.stderr and "openai" in r.stderr
    assert not out and not dlq


SEVEN = {"custom.javascript": None, "openai.embeddings": "api_key", "openai.textgen": "api_key",
         "cohere.command": "apiKey", "cohere.embed": "apiKey", "cohere.rerank": "apiKey", "ollama": None}


def test_plugins_list_and_describe_show_the_seven():
    listed = json.loads(cli(["plugins", "list", "--json"]).stdout)["plugins"]
    builtins = {p["name"] for p in listed if p["type"] == "builtin" and p["kind"] == "transform"}
    assert set(SEVEN) <= builtins
    for name, key in SEVEN.items():
        if key:
            params = json.loads(cli(["plugins", "describe", name, "--json"]).stdout)["parameters"]["transform"]
            assert params[key]["secret"] and params[key]["required"], name
