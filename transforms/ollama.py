"""``ollama``: Conduit's processor that rewrites a record's structured data with a model on an
Ollama server (``/api/generate``), over the shared client in ``ai_http``.

As in Conduit: the field (under .Payload) is read as structured data (raw JSON is parsed), the
prompt is Conduit's instruction wrapper around ``prompt`` and the data, checked for length and
blocked patterns, the answer must be JSON and replaces the field.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import orjson

from cdcflow.params import Parameter, ParamType
from cdcflow.record import Record
from cdcflow.sdk import Result

from .ai_http import ApiClient, ApiTransform, Backoff, RecordFault
from .base import compile_ref

#: models Conduit's processor accepts
ALLOWED_MODELS = ("llama3.2",)
_SUFFIX = ("For the prompt, return a valid json following the instructions provided. "
           "Only send back records in the json format with no explanation.")
_BLOCKED = ("rm -rf", "DROP TABLE", "<script>", "javascript:", "data:text/html")
_MIN_PROMPT, _MAX_PROMPT = 3, 4096


def build_prompt(user_prompt: str, data: Mapping[str, Any]) -> str:
    """Conduit's prompt around the record's data, refused (the record fails) when too short,
    too long or carrying a blocked pattern."""
    text = orjson.dumps(data, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str).decode()
    prompt = f"Instructions: {{{user_prompt}}}\n Record: {{{text}}} \n Suffix {{{_SUFFIX}}}"
    if len(prompt) < _MIN_PROMPT:
        raise RecordFault(f"prompt with length {len(prompt)} is too short, must be {_MIN_PROMPT} characters")
    if len(prompt) > _MAX_PROMPT:
        raise RecordFault(f"prompt with length {len(prompt)} exceeds context window allowance, "
                          f"must be less than {_MAX_PROMPT} characters")
    low = prompt.lower()
    for pattern in _BLOCKED:
        if pattern.lower() in low:
            raise RecordFault(f"prompt validation failed: potentially malicious pattern: {pattern}")
    return prompt


def _structured(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, (bytes, bytearray, str)):
        if not value:
            return {}
        data = orjson.loads(value)
        if not isinstance(data, dict):
            raise RecordFault("cannot process field: the JSON is not an object")
        return data
    if value is None:
        raise RecordFault("cannot process field: field to unmarshal nil")
    raise RecordFault(f"cannot process field: unexpected data type {type(value).__name__}")


class Ollama(ApiTransform):
    name = "ollama"
    summary = "Processes data through an Ollama instance"
    description = (
        "Sends the structured data of `field` with `prompt` to the model `model` on the Ollama server at `url` "
        "(`/api/generate`, JSON format) and replaces the field with the JSON object the model answers. An "
        "unreachable server, a timeout or a 5xx fails the batch; an answer that is not a JSON object fails the "
        "record."
    )
    parameters = {
        "field": Parameter(default=".Payload.After", regex=r"^\.Payload.*",
                           description="Field (under .Payload) whose structured data is rewritten."),
        "url": Parameter(required=True, description="Base URL of the Ollama server, e.g. http://localhost:11434."),
        "model": Parameter(default="llama3.2", inclusion=ALLOWED_MODELS, description="Model to use."),
        "prompt": Parameter(description="Instructions for the model."),
        "timeout": Parameter(ParamType.DURATION, default="120s", greater_than=0,
                             description="cdcflow: time limit of one HTTP call."),
    }

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self._field = compile_ref(self, "field", config["field"] or ".Payload.After")
        self._config = dict(config)

    def open(self) -> None:
        self._client = ApiClient("ollama", self._config["url"], timeout=float(self._config["timeout"]),
                                 backoff=Backoff(retries=2))

    def _generate(self, prompts: list[str]) -> list[dict[str, Any]]:
        [prompt] = prompts
        answer = self._client.post("/api/generate", {"model": self._config["model"], "prompt": prompt,
                                                     "format": "json", "stream": False})
        if not answer.get("done"):
            raise RecordFault("error response from ollama: not done")
        try:
            return [_structured(answer.get("response") or "")]
        except orjson.JSONDecodeError as e:
            raise RecordFault(f"invalid JSON in response: {e}") from None

    def _prompt(self, r: Record) -> str:
        return build_prompt(self._config.get("prompt") or "", _structured(self._field.get(r)))

    def process(self, records: Sequence[Record]) -> list[Result]:
        return self.ask(records, self._prompt, 1, self._generate, self._field.set)
