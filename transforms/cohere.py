"""``cohere.command``, ``cohere.embed`` and ``cohere.rerank``: Conduit's Cohere processors
(API v2), over the shared client in ``ai_http``.

What each reads and writes follows Conduit: command sends ``prompt`` formatted with the
record's text and stores the answer's text; embed stores each embedding as zstd-compressed
JSON (the bytes Go's encoder writes) and names the model in metadata; rerank sends the whole
batch as the documents of one query and stores each document's result as JSON.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import orjson

from cdcflow.errors import ConfigError
from cdcflow.extras import require
from cdcflow.params import Parameter, ParamType
from cdcflow.record import Record
from cdcflow.sdk import Result

from .ai_http import ApiClient, ApiTransform, Backoff, RecordFault, field_text
from .base import compile_ref, plugin_name

#: metadata key naming the model of cohere.embed's output (Conduit's EmbedModelMetadata)
EMBED_MODEL_METADATA = "cohere.embed.model"

COMMON_PARAMETERS: Mapping[str, Parameter] = {
    "apiKey": Parameter(required=True, secret=True, description="Cohere API key (sent as a bearer token)."),
    "backoffRetry.count": Parameter(ParamType.FLOAT, default="0", greater_than=-1,
                                    description="Retries of a request after an outage, 429 or 5xx."),
    "backoffRetry.factor": Parameter(ParamType.FLOAT, default="2", greater_than=0,
                                     description="Multiplier of the wait per retry."),
    "backoffRetry.min": Parameter(ParamType.DURATION, default="100ms", description="First wait."),
    "backoffRetry.max": Parameter(ParamType.DURATION, default="5s", description="Longest wait."),
    "baseURL": Parameter(default="https://api.cohere.com", description="cdcflow: API base URL (v2 paths below it)."),
    "timeout": Parameter(ParamType.DURATION, default="60s", greater_than=0,
                         description="cdcflow: time limit of one HTTP call."),
}

#: the fields cohere.command and cohere.rerank read from and write to
BODY_PARAMETERS: Mapping[str, Parameter] = {
    "request.body": Parameter(default=".Payload.After", description="Field whose text is sent."),
    "response.body": Parameter(default=".Payload.After", description="Field the answer is stored in."),
}

_GO_VERB = re.compile(r"%[-+# 0]*\d*(?:\.\d+)?[svqd%]")


def go_sprintf_one(template: str, value: str) -> str:
    """Go's ``fmt.Sprintf(prompt, input)`` for the verbs prompts use: the first verb takes the
    input, ``%%`` is a percent sign, and a verb without an argument reads ``%!v(MISSING)``."""
    used = False

    def fill(m: re.Match[str]) -> str:
        nonlocal used
        verb = m.group(0)
        if verb == "%%":
            return "%"
        if used:
            return f"%!{verb[-1]}(MISSING)"
        used = True
        return f'"{value}"' if verb.endswith("q") else value

    out = _GO_VERB.sub(fill, template)
    return out if used else f"{out}%!(EXTRA string={value})"


class _Cohere(ApiTransform):
    #: settings naming the field read and the field written
    input_setting, output_setting = "request.body", "response.body"

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self._in = compile_ref(self, self.input_setting, config[self.input_setting] or ".Payload.After")
        self._out = compile_ref(self, self.output_setting, config[self.output_setting] or ".Payload.After")
        self._config = dict(config)

    def open(self) -> None:
        c = self._config
        backoff = Backoff(int(float(c["backoffRetry.count"])), float(c["backoffRetry.min"]),
                          float(c["backoffRetry.factor"]), float(c["backoffRetry.max"]))
        self._client = ApiClient("cohere", c["baseURL"], api_key=c["apiKey"], timeout=float(c["timeout"]),
                                 backoff=backoff)

    def _read(self, r: Record) -> str:
        try:
            return field_text(self._in.get(r))
        except Exception as e:  # noqa: BLE001 - reported as the record's failure
            raise RecordFault(f"failed to get input from {self._in.reference!r}: {e}") from None


class CohereCommand(_Cohere):
    name = "cohere.command"
    summary = "Conduit processor for Cohere's command model."
    description = (
        "Sends `prompt`, with its %s replaced by the text of `request.body`, to Cohere's chat API "
        "(`baseURL`/v2/chat) and stores the answer's text in `response.body`. Outages, 429 and 5xx are retried "
        "(`backoffRetry.*`) and then fail the batch; a request the API refuses fails that record."
    )
    parameters = {
        "model": Parameter(default="command", description="Cohere command model."),
        "prompt": Parameter(required=True, description="Prompt; %s is replaced by the record's text (Go's Sprintf)."),
        **BODY_PARAMETERS,
        **COMMON_PARAMETERS,
    }

    def _chat(self, texts: list[str]) -> list[str]:
        [text] = texts
        body = {"model": self._config["model"],
                "messages": [{"role": "user", "content": go_sprintf_one(self._config["prompt"], text)}]}
        content = (self._client.post("/v2/chat", body).get("message") or {}).get("content") or []
        if len(content) != 1:
            raise RecordFault("invalid chat content")
        return [content[0]["text"]]

    def process(self, records: Sequence[Record]) -> list[Result]:
        return self.ask(records, self._read, 1, self._chat, self._out.set)


class CohereEmbed(_Cohere):
    name = "cohere.embed"
    summary = "Conduit processor for Cohere's embed model."
    description = (
        "Sends the text of `inputField` of up to `maxTextsPerRequest` records at once to Cohere's embed API "
        "(`baseURL`/v2/embed), stores each embedding as zstd-compressed JSON in `outputField` and the model in "
        "the metadata key cohere.embed.model. Outages, 429 and 5xx are retried (`backoffRetry.*`) and then fail "
        "the batch; a request the API refuses fails its records (each record is then sent alone)."
    )
    input_setting, output_setting = "inputField", "outputField"
    parameters = {
        "model": Parameter(default="embed-english-v2.0", description="Cohere embed model."),
        "inputType": Parameter(description="Input type (search_document, search_query, classification, "
                                           "clustering, image); required for models v3 and later."),
        "inputField": Parameter(default=".Payload.After", description="Field whose text is embedded."),
        "outputField": Parameter(default=".Payload.After", description="Field the compressed embedding is stored in."),
        "maxTextsPerRequest": Parameter(ParamType.INT, default="96", greater_than=0,
                                        description="Texts per API request (the API takes at most 96)."),
        **COMMON_PARAMETERS,
    }

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        if "v2" not in config["model"] and not config.get("inputType"):
            raise ConfigError(plugin_name(self), "inputType", "required",
                              f"inputType is required for model {config['model']!r} (v3 or higher)")
        zstd = require("zstandard", plugin_name(self))
        # no content size in the frame header: the same bytes Go's zstd encoder writes
        self._compress = zstd.ZstdCompressor(write_checksum=True, write_content_size=False).compress

    def _embed(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self._config["model"], "texts": texts, "embedding_types": ["float"]}
        if self._config.get("inputType"):
            body["input_type"] = self._config["inputType"]
        vectors = (self._client.post("/v2/embed", body).get("embeddings") or {}).get("float") or []
        if len(vectors) != len(texts):
            raise RecordFault(f"cohere API returned {len(vectors)} embeddings for {len(texts)} texts")
        return vectors

    def _store(self, r: Record, vector: list[float]) -> None:
        r.metadata[EMBED_MODEL_METADATA] = self._config["model"]
        self._out.set(r, self._compress(orjson.dumps(vector)))

    def process(self, records: Sequence[Record]) -> list[Result]:
        return self.ask(records, self._read, int(self._config["maxTextsPerRequest"]), self._embed, self._store)


class CohereRerank(_Cohere):
    name = "cohere.rerank"
    summary = "Conduit processor for Cohere's rerank model."
    description = (
        "Sends the text of `request.body` of every record of the batch as the documents of one `query` to "
        "Cohere's rerank API (`baseURL`/v2/rerank) and stores each document's result, "
        "{\"document\":{\"text\":…},\"index\":…,\"relevance_score\":…}, as JSON text in `response.body`. "
        "Outages, 429 and 5xx are retried (`backoffRetry.*`) and then fail the batch; a request the API refuses "
        "fails the batch's records (their scores depend on each other, so they are not sent one by one)."
    )
    parameters = {
        "model": Parameter(default="rerank-v3.5", description="Cohere rerank model."),
        "query": Parameter(required=True, description="The search query."),
        **BODY_PARAMETERS,
        **COMMON_PARAMETERS,
    }

    def _rerank(self, texts: list[str]) -> list[str]:
        body = {"model": self._config["model"], "query": self._config["query"], "documents": texts,
                "return_documents": True}
        results = self._client.post("/v2/rerank", body).get("results") or []
        if len(results) != len(texts):
            raise RecordFault("invalid rerank response")
        by_index = {res.get("index"): res for res in results}
        return [_rerank_json(by_index.get(i) or {}) for i in range(len(texts))]

    def process(self, records: Sequence[Record]) -> list[Result]:
        return self.ask(records, self._read, len(records), self._rerank_whole, self._out.set)

    def _rerank_whole(self, texts: list[str]) -> list[str]:
        if not texts:
            return []
        try:
            return self._rerank(texts)
        except RecordFault as e:  # the documents rank against each other: all of them fail
            return [e] * len(texts)  # type: ignore[list-item]


def _rerank_json(result: Mapping[str, Any]) -> str:
    """One result as Go's RerankResult marshals it (fields in declaration order)."""
    doc = result.get("document") or {}
    return orjson.dumps({"document": {"text": doc.get("text", "")}, "index": result.get("index", 0),
                         "relevance_score": result.get("relevance_score", 0)}).decode()
