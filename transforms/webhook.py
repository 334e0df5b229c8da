"""``webhook.http``: call an HTTP endpoint per record and keep the response (Conduit's processor).

Requests go out one record at a time, in order, over one pooled connection
(``httpx``). A transport error or a 5xx status is retried with exponential
backoff (``backoffRetry.*``); when the retries run out only that record fails.
A 4xx status is a response like any other and is stored, as in Conduit.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

from cdcflow.errors import ConfigError
from cdcflow.expr import ExpressionError, Template
from cdcflow.params import Parameter, ParamType
from cdcflow.record import Record
from cdcflow.sdk import Result, Transform

from .base import compile_ref, failed, plugin_name

class WebhookHTTP(Transform):
    name = "webhook.http"
    version = "v0.1.0"
    summary = "Trigger an HTTP request for every record."
    description = (
        "Sends an HTTP request per record to `request.url` (a template) with `request.method` and "
        "`request.body` (a template; `{{ toJson . }}` sends the record's JSON form) and headers from "
        "`headers.*`. The response body is stored in `response.body` (raw bytes) and, if set, the status code in "
        "`response.status`. Transport errors and 5xx responses are retried `backoffRetry.count` times, waiting "
        "`backoffRetry.min` × `backoffRetry.factor`^attempt (at most `backoffRetry.max`); `request.timeout` bounds "
        "each attempt."
    )
    author = "cdcflow"
    parameters = {
        "request.url": Parameter(
            ParamType.STRING, required=True,
            description="URL template, e.g. http://host/users/{{ .Payload.After.id }}.",
        ),
        "request.method": Parameter(ParamType.STRING, default="GET", description="HTTP method."),
        "request.body": Parameter(
            ParamType.STRING, default="",
            description="Body template (empty: no body); {{ toJson . }} sends the whole record as JSON.",
        ),
        "request.contentType": Parameter(description="Deprecated: use headers.Content-Type."),
        "request.timeout": Parameter(
            ParamType.DURATION, default="30s", greater_than=0,
            description="cdcflow: time limit of one attempt (connect + send + receive).",
        ),
        "headers.*": Parameter(description="Request headers, e.g. headers.Authorization: Bearer key."),
        "response.body": Parameter(
            ParamType.STRING, default=".Payload.After", description="Field the response body is stored in."
        ),
        "response.status": Parameter(
            ParamType.STRING, default="", description="Field the status code is stored in (empty: not stored)."
        ),
        "backoffRetry.count": Parameter(
            ParamType.FLOAT, default="0", greater_than=-1, description="Retries per record after an error."
        ),
        "backoffRetry.factor": Parameter(
            ParamType.FLOAT, default="2", greater_than=0, description="Multiplier of the wait per retry."
        ),
        "backoffRetry.min": Parameter(ParamType.DURATION, default="100ms", description="First wait."),
        "backoffRetry.max": Parameter(ParamType.DURATION, default="5s", description="Longest wait."),
    }

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        plugin = plugin_name(self)
        self._url = self._template(config["request.url"], "request.url")
        body = config.get("request.body") or ""
        self._body = self._template(body, "request.body") if body else None
        self._method = (config.get("request.method") or "GET").upper()
        headers = {k[len("headers."):]: v for k, v in config.items() if k.startswith("headers.") and v is not None}
        if config.get("request.contentType") and not any(h.lower() == "content-type" for h in headers):
            headers["Content-Type"] = config["request.contentType"]
        self._headers = headers
        self._response_body = compile_ref(self, "response.body", config["response.body"] or ".Payload.After")
        status = config.get("response.status") or ""
        if status.strip() == self._response_body.reference.strip():
            raise ConfigError(plugin, "response.status", "conflict", "response.body and response.status name the same field")
        self._response_status = compile_ref(self, "response.status", status) if status else None
        self._retries = int(config["backoffRetry.count"])
        self._factor = float(config["backoffRetry.factor"])
        self._min = float(config["backoffRetry.min"])
        self._max = float(config["backoffRetry.max"])
        self._timeout = float(config["request.timeout"])
        try:
            import httpx  # imported here so the other built-ins load without it
        except ImportError:
            raise ConfigError(plugin, None, "dependency", "webhook.http needs the httpx package (pip install httpx)") from None
        self._httpx = httpx
        if not self._url.is_literal:
            return
        try:
            httpx.URL(self._url.constant)
        except Exception as e:  # noqa: BLE001 - httpx raises several types for a bad URL
            raise ConfigError(plugin, "request.url", "url", f"invalid URL: {e}") from None

    def _template(self, text: str, parameter: str) -> Template:
        try:
            return Template.compile(text)
        except ExpressionError as e:
            raise ConfigError(plugin_name(self), parameter, "template", str(e)) from None

    def open(self) -> None:
        self._client = self._httpx.Client(timeout=self._timeout, headers=self._headers)

    def teardown(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
            self._client = None

    def _wait(self, attempt: int) -> float:
        return min(self._max, self._min * (self._factor ** attempt))

    def _call(self, record: Record) -> Any:
        url = self._url.render(record)
        content = None if self._body is None else self._body.render(record).encode("utf-8")
        attempt = 0
        while True:
            try:
                response = self._client.request(self._method, url, content=content)
                if response.status_code < 500:
                    return response
                error = f"error status code {response.status_code} (body: {response.text[:200]!r})"
            except self._httpx.HTTPError as e:
                error = f"error executing HTTP request: {type(e).__name__}: {e}"
            if attempt >= self._retries:
                raise RuntimeError(f"{error} (after {attempt + 1} attempts)" if attempt else error)
            time.sleep(self._wait(attempt))
            attempt += 1

    def process(self, records: Sequence[Record]) -> list[Result]:
        out: list[Result] = []
        for r in records:
            try:
                response = self._call(r)
                self._response_body.set(r, response.content)
                if self._response_status is not None:
                    self._response_status.set(r, str(response.status_code))
                out.append(r)
            except Exception as e:  # noqa: BLE001 - one bad record must not fail the batch
                out.append(failed(e))
        return out
