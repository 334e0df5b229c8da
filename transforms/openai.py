"""``openai.embeddings`` and ``openai.textgen``: Conduit's OpenAI processors, over the
shared client in ``ai_http`` (settings keep Conduit's snake_case names).

Both read ``field`` as text and write the answer back into the same field: raw data and
the position get the answer's bytes, a text field gets text. Embeddings are requested for
up to ``batch_size`` records at once (the API takes a list of inputs); Conduit asks one
record at a time, with the same result.
"""

from __future__ import annotations

import base64
import struct
from typing import Any, Mapping, Sequence

import orjson

from cdcflow.params import Parameter, ParamType
from cdcflow.record import Record
from cdcflow.sdk import Result

from .ai_http import ApiClient, ApiTransform, Backoff, RecordFault, field_text
from .base import compile_ref

#: Conduit's globalConfig of both processors, plus cdcflow's base URL and time limit
COMMON_PARAMETERS: Mapping[str, Parameter] = {
    "field": Parameter(default=".Payload.After", description="Field read as the input and replaced by the answer."),
    "api_key": Parameter(required=True, secret=True, description="OpenAI API key (sent as a bearer token)."),
    "model": Parameter(required=True, description="OpenAI model, e.g. text-embedding-3-small or gpt-4o-mini."),
    "user": Parameter(description="User identifier passed to the API."),
    "max_retries": Parameter(ParamType.INT, default="3", description="Retries of a call after an outage, 429 or 5xx."),
    "initial_backoff": Parameter(ParamType.INT, default="1000", description="First wait before a retry, in ms."),
    "max_backoff": Parameter(ParamType.INT, default="30000", description="Longest wait before a retry, in ms."),
    "backoff_factor": Parameter(ParamType.FLOAT, default="2.0", description="Multiplier of the wait per retry."),
    "base_url": Parameter(default="https://api.openai.com/v1",
                          description="cdcflow: API base URL (an OpenAI-compatible server or a proxy)."),
    "timeout": Parameter(ParamType.DURATION, default="60s", greater_than=0,
                         description="cdcflow: time limit of one HTTP call."),
}


class _OpenAI(ApiTransform):
    """Settings, client and field handling both OpenAI processors share."""

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self._field = compile_ref(self, "field", config["field"] or ".Payload.After")
        self._config = dict(config)

    def open(self) -> None:
        c = self._config
        backoff = Backoff(int(c["max_retries"]), int(c["initial_backoff"]) / 1000, float(c["backoff_factor"]),
                          int(c["max_backoff"]) / 1000, jitter=True)
        self._client = ApiClient("openai", c["base_url"], api_key=c["api_key"], timeout=float(c["timeout"]),
                                 backoff=backoff)

    def _options(self, names: Sequence[str]) -> dict[str, Any]:
        """The optional request fields that are set (Go leaves zero values out of the JSON)."""
        return {n: self._config[n] for n in names if self._config.get(n) not in (None, "")}

    def _read(self, r: Record) -> str:
        try:
            return field_text(self._field.get(r))
        except Exception as e:  # noqa: BLE001 - reported as the record's failure
            raise RecordFault(f"field {self._field.reference!r}: {e}") from None

    def _store(self, r: Record, answer: str) -> None:
        """Write ``answer`` where the input was read, typed as Conduit does: text into a text field, bytes else."""
        self._field.set(r, answer if isinstance(self._field.get(r), str) else answer.encode("utf-8"))


class OpenAIEmbeddings(_OpenAI):
    name = "openai.embeddings"
    summary = "Generate embeddings for records using OpenAI models."
    description = (
        "Sends the text of `field` to OpenAI's embeddings API (`base_url`/embeddings) and replaces the field with "
        "the embedding as a JSON array of numbers. Several records go in one request (`batch_size`). Outages, "
        "429 and 5xx are retried (`max_retries`, `initial_backoff`, `max_backoff`, `backoff_factor`) and then "
        "fail the batch; a request the API refuses (other 4xx) fails its records."
    )
    parameters = {
        **COMMON_PARAMETERS,
        "dimensions": Parameter(ParamType.INT, description="Number of dimensions of the embeddings."),
        "encoding_format": Parameter(inclusion=("", "float", "base64"),
                                     description="Format the API returns the embeddings in: float or base64."),
        "batch_size": Parameter(ParamType.INT, default="64", greater_than=0,
                                description="cdcflow: records per API request (the API takes up to 2048 inputs)."),
    }

    def _embed(self, texts: list[str]) -> list[list[float]]:
        body = {"input": texts, "model": self._config["model"],
                **self._options(("encoding_format", "user"))}
        if int(self._config.get("dimensions") or 0) > 0:
            body["dimensions"] = int(self._config["dimensions"])
        data = self._client.post("/embeddings", body).get("data") or []
        if len(data) != len(texts):
            raise RecordFault(f"openai API returned {len(data)} embeddings for {len(texts)} inputs")
        return [_vector(d["embedding"]) for d in sorted(data, key=lambda d: d.get("index", 0))]

    def process(self, records: Sequence[Record]) -> list[Result]:
        return self.ask(records, self._read, int(self._config["batch_size"]),
                        lambda texts: [orjson.dumps(v).decode() for v in self._embed(texts)], self._store)


def _vector(embedding: Any) -> list[float]:
    """An embedding as numbers; ``encoding_format: base64`` answers with little-endian float32s."""
    if isinstance(embedding, str):
        raw = base64.b64decode(embedding)
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return embedding


class OpenAITextgen(_OpenAI):
    name = "openai.textgen"
    summary = "Modify records using OpenAI models."
    description = (
        "Sends the text of `field` as the user message, with `developer_message` as the developer message, to "
        "OpenAI's chat completions API (`base_url`/chat/completions) and replaces the field with the first "
        "choice's text. Outages, 429 and 5xx are retried and then fail the batch; a request the API refuses "
        "(other 4xx) fails that record."
    )
    parameters = {
        **COMMON_PARAMETERS,
        "developer_message": Parameter(required=True, description="System message that guides the model."),
        "strict_output": Parameter(ParamType.BOOL, default="false", description="Conduit setting; not sent."),
        "max_tokens": Parameter(ParamType.INT, description="Maximum number of tokens to generate."),
        "max_completion_tokens": Parameter(ParamType.INT, description="Maximum number of completion tokens."),
        "temperature": Parameter(ParamType.FLOAT, description="Randomness (0-2)."),
        "top_p": Parameter(ParamType.FLOAT, description="Nucleus sampling."),
        "n": Parameter(ParamType.INT, description="Number of completions to generate (the first is kept)."),
        "stream": Parameter(ParamType.BOOL, default="false", description="Conduit setting; not used."),
        "stop": Parameter(description="Comma-separated sequences where the API stops generating."),
        "presence_penalty": Parameter(ParamType.FLOAT, description="Penalty for tokens already present."),
        "seed": Parameter(ParamType.INT, description="Seed for deterministic results."),
        "frequency_penalty": Parameter(ParamType.FLOAT, description="Penalty by token frequency."),
        "logit_bias.*": Parameter(ParamType.INT, description="Bias of a token id, e.g. logit_bias.50256: -100."),
        "log_probs": Parameter(ParamType.BOOL, default="false", description="Return log probabilities."),
        "top_log_probs": Parameter(ParamType.INT, description="Most likely tokens to return probabilities for."),
        "store": Parameter(ParamType.BOOL, default="false", description="Store the conversation in OpenAI."),
        "reasoning_effort": Parameter(description="Amount of reasoning in the response."),
        "metadata.*": Parameter(description="Metadata sent with the request."),
    }

    #: settings whose name in the request differs (Go client's JSON tags)
    _WIRE = {"top_log_probs": "top_logprobs", "log_probs": "logprobs"}
    _NUMBERS = {"max_tokens": int, "max_completion_tokens": int, "n": int, "top_log_probs": int, "seed": int,
                "temperature": float, "top_p": float, "presence_penalty": float, "frequency_penalty": float}

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        body: dict[str, Any] = {"model": config["model"]}
        for name, cast in self._NUMBERS.items():
            v = config.get(name)
            if v not in (None, "") and (cast(v) != 0 or name == "seed"):  # Go omits zero values
                body[self._WIRE.get(name, name)] = cast(v)
        for name in ("log_probs", "store"):
            if str(config.get(name, "")).lower() == "true":
                body[self._WIRE.get(name, name)] = True
        body.update(self._options(("user", "reasoning_effort")))
        if config.get("stop"):
            body["stop"] = [s.strip() for s in str(config["stop"]).split(",") if s.strip()]
        for prefix, key, cast in (("logit_bias.", "logit_bias", int), ("metadata.", "metadata", str)):
            values = {k[len(prefix):]: cast(v) for k, v in config.items() if k.startswith(prefix) and v is not None}
            if values:
                body[key] = values
        self._body = body

    def _complete(self, texts: list[str]) -> list[str]:
        [text] = texts
        messages = [{"role": "developer", "content": self._config["developer_message"]},
                    {"role": "user", "content": text}]
        answer = self._client.post("/chat/completions", {**self._body, "messages": messages})
        choices = answer.get("choices") or []
        if not choices:
            raise RecordFault("openai API returned no choices")
        return [choices[0]["message"]["content"]]

    def process(self, records: Sequence[Record]) -> list[Result]:
        return self.ask(records, self._read, 1, self._complete, self._store)
