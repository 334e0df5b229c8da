"""The HTTP client the AI processors share (openai.*, cohere.*, ollama): JSON over ``httpx``
with a base URL, a bearer API key, a time limit, retries with backoff, and the split
between an outage and a record's fault.

Why one module: every provider is "POST JSON, read JSON", and the rules of the house are
the same for all of them. A transport error, a timeout, a 5xx or a 429 is the service's
problem: it is retried, and when the retries run out it raises ``InfrastructureError`` so
the engine fails (and retries) the whole batch; no record goes to the DLQ for it. Any
other 4xx is about what the request carried, so it raises ``RecordFault`` and only the
records of that request fail. The API key never appears in an error or log line.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

import orjson

from cdcflow.errors import InfrastructureError
from cdcflow.masking import MASK
from cdcflow.record import Record
from cdcflow.sdk import Failed, Result, Transform

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class RecordFault(Exception):
    """The API refused the request because of what it carried (a 4xx other than 429)."""


@dataclass(frozen=True)
class Backoff:
    """Retries after an outage: ``retries`` more attempts, waiting ``first`` × ``factor``^n
    seconds (at most ``longest``), with jitter when ``jitter`` is set (as Conduit's openai
    processors do)."""

    retries: int = 0
    first: float = 0.1
    factor: float = 2.0
    longest: float = 5.0
    jitter: bool = False

    def wait(self, attempt: int) -> float:
        w = min(self.longest, self.first * (self.factor ** attempt))
        return random.uniform(self.first, w) if self.jitter and w > self.first else w


class ApiClient:
    """JSON POSTs to one service. ``service`` names it in errors (``openai``, ``cohere``)."""

    def __init__(self, service: str, base_url: str, *, api_key: str = "", timeout: float = 30.0,
                 backoff: Backoff = Backoff()):
        import httpx  # a core dependency; imported here so loading the built-ins stays cheap

        self._httpx = httpx
        self.service = service
        self.base_url = base_url.rstrip("/")
        self._key = api_key
        self._backoff = backoff
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(timeout=timeout, headers=headers)

    def close(self) -> None:
        self._client.close()

    def _masked(self, text: str) -> str:
        return text.replace(self._key, MASK) if self._key else text

    def post(self, path: str, body: Any) -> Any:
        """POST ``body`` as JSON to ``base_url + path``; the decoded JSON answer."""
        url = self.base_url + path
        content = orjson.dumps(body)
        attempt = 0
        while True:
            try:
                response = self._client.post(url, content=content)
                status = response.status_code
                if status < 300:
                    try:
                        return orjson.loads(response.content)
                    except orjson.JSONDecodeError as e:
                        raise InfrastructureError(f"{self.service}: invalid JSON from {url}: {e}",
                                                  service=self.service, endpoint=url) from None
                detail = response.text[:300]
                if status != 429 and status < 500:
                    raise RecordFault(self._masked(f"{self.service} API: status {status}: {detail}"))
                error = f"status {status}: {detail}"
            except self._httpx.HTTPError as e:
                error = f"{type(e).__name__}: {e}"
            if attempt >= self._backoff.retries:
                raise InfrastructureError(
                    self._masked(f"{self.service} API unavailable after {attempt + 1} attempt(s): {error}"),
                    service=self.service, endpoint=url)
            wait = self._backoff.wait(attempt)
            log.warning("%s API call failed (attempt %d), retrying in %.2fs: %s", self.service, attempt + 1,
                        wait, self._masked(error))
            time.sleep(wait)
            attempt += 1


def in_requests(items: Sequence[T], size: int, call: Callable[[list[T]], list[R]]) -> list[R | RecordFault]:
    """``call`` on ``items`` in requests of at most ``size`` (APIs that take several inputs).

    When the service refuses a request of several inputs, each input is sent alone, so only
    the ones the service refuses fail; an outage (InfrastructureError) fails them all.
    """
    out: list[R | RecordFault] = []
    for i in range(0, len(items), max(1, size)):
        chunk = list(items[i:i + size])
        try:
            out.extend(call(chunk))
        except RecordFault as fault:
            if len(chunk) == 1:
                out.append(fault)
                continue
            for item in chunk:
                try:
                    out.extend(call([item]))
                except RecordFault as e:
                    out.append(e)
    return out


def field_text(value: Any) -> str:
    """A field's value as the text sent to a model, as Conduit reads it: raw data and the
    position as UTF-8 text, structured data as its JSON (keys sorted, as Go writes maps)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str).decode()
    raise RecordFault(f"unsupported type {type(value).__name__}")


class ApiTransform(Transform):
    """What the AI processors share: the client's life and the read → ask → store loop."""

    author = "cdcflow"
    _client: ApiClient | None = None

    def teardown(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def ask(self, records: Sequence[Record], read: Callable[[Record], T], size: int,
            call: Callable[[list[T]], list[Any]], store: Callable[[Record, Any], None]) -> list[Result]:
        """``read`` each record's request input, ``call`` the API ``size`` inputs at a time
        (see ``in_requests``), ``store`` each answer. A record whose input cannot be read,
        whose request is refused or whose answer cannot be stored fails alone; an outage
        (InfrastructureError from ``call``) fails the batch."""
        out: list[Result] = []
        inputs: list[T] = []
        ok: list[int] = []
        for i, r in enumerate(records):
            try:
                inputs.append(read(r))
                ok.append(i)
                out.append(r)
            except Exception as e:  # noqa: BLE001 - one bad record must not fail the batch
                out.append(Failed(str(e)))
        for i, answer in zip(ok, in_requests(inputs, size, call)):
            if isinstance(answer, RecordFault):
                out[i] = Failed(str(answer))
                continue
            try:
                store(records[i], answer)
            except Exception as e:  # noqa: BLE001
                out[i] = Failed(f"failed storing the answer: {e}")
        return out
