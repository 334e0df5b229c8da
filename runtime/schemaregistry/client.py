"""A small client of a Confluent-compatible schema registry (the built-in one or Confluent's).

It is the registry the TiCDC Avro codec takes (``register(subject, text) -> id``,
``schema_by_id(id) -> text``) when a pipeline names an external registry URL.
Ids and texts are cached: an id never changes meaning, and a (subject, text)
pair that was registered once keeps its id. The client pickles (Spark ships it
to executors); the HTTP connection pool is rebuilt on the other side.

Which failures are whose: a registry that cannot be reached (connection refused, timeout,
DNS), answers 5xx or 429, refuses the credentials (401/403), or answers what is not a
registry's answer (non-JSON, a 404 without a Confluent error code) is an outage,
``RegistryUnavailableError`` — a ``cdcflow.errors.InfrastructureError``, never a record's
fault. Only what the registry *answers* about the schema itself (409 incompatible, 422
invalid, 40403 no such id) is a ``RegistryError`` a codec turns into that record's error.
Every request is bounded by ``timeout`` (connect, read, write and pool wait).

Basic auth comes from the URL (``http://user:p%40ss@host:8081``, URL-encoded as
TiCDC accepts it) or from ``auth=(user, password)``; it never appears in
``url``, ``repr`` or error messages.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import httpx

from ..errors import InfrastructureError, SchemaError
from ..masking import mask_uri

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
_ACCEPT = f"{MEDIA_TYPE}, application/vnd.schemaregistry+json, application/json"


class RegistryError(SchemaError):
    """The registry refused a request; carries HTTP status, Confluent error code, subject and its message."""

    def __init__(self, message: str, *, status: int | None = None, error_code: int | None = None,
                 subject: str | None = None, url: str | None = None):
        self.status = status
        self.error_code = error_code
        self.subject = subject
        self.url = url
        self.registry_message = message
        where = f"subject {subject!r}: " if subject else ""
        code = f" (HTTP {status}, error {error_code})" if status is not None else ""
        at = f" [registry {url}]" if url else ""
        super().__init__(f"{where}{message}{code}{at}")


class RegistryUnavailableError(RegistryError, InfrastructureError):
    """The registry could not be reached (connection refused, timeout, DNS): an outage, never a record's fault."""

    def __init__(self, message: str, **kw):
        RegistryError.__init__(self, message, **kw)
        self.service, self.endpoint = "schema-registry", kw.get("url")


class RegistryAuthError(RegistryUnavailableError):
    """401/403: missing or wrong credentials. The registry is unusable for every record alike, so it
    is an outage of the service as this pipeline is configured, not a record's fault."""


class SubjectNotFoundError(RegistryError):
    """40401."""


class VersionNotFoundError(RegistryError):
    """40402."""


class SchemaNotFoundError(RegistryError):
    """40403 (and unknown ids)."""


class IncompatibleSchemaError(RegistryError):
    """409: the subject's compatibility level refuses the schema."""


class InvalidSchemaError(RegistryError):
    """422/42201: not a valid schema (or an unsupported type)."""


_BY_CODE = {40401: SubjectNotFoundError, 40402: VersionNotFoundError, 40403: SchemaNotFoundError,
            409: IncompatibleSchemaError, 42201: InvalidSchemaError}


def _error_class(status: int, code: int | None) -> type[RegistryError]:
    if status in (401, 403):
        return RegistryAuthError
    if status >= 500 or status in (408, 429) or (status == 404 and code is None):
        # the service failing, overloaded, or not a registry at this URL (a Confluent registry
        # always names an error code): an outage, whatever the request was about
        return RegistryUnavailableError
    if code in _BY_CODE:
        return _BY_CODE[code]
    if status == 409:
        return IncompatibleSchemaError
    return RegistryError


@dataclass(frozen=True)
class RegisteredSchema:
    subject: str
    version: int
    id: int
    schema: str


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``http://u:p@h:1/x`` -> (``http://h:1/x``, (u, p)); user and password URL-decoded."""
    parts = urlsplit(url.rstrip("/"))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RegistryError(f"schema registry URL must be http(s)://host[:port], got {mask_uri(url)!r}")
    if parts.username is None:
        return urlunsplit(parts), None
    netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if parts.port is not None:
        netloc += f":{parts.port}"
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return clean, (unquote(parts.username), unquote(parts.password or ""))


class RegistryClient:
    """``RegistryClient("http://127.0.0.1:8081", timeout=10.0)``; thread-safe."""

    def __init__(self, url: str, *, timeout: float = 10.0, auth: tuple[str, str] | None = None):
        self.url, url_auth = split_credentials(url)
        self.timeout = timeout
        self._auth = auth or url_auth
        self._ids: dict[tuple[str, str], int] = {}
        self._texts: dict[int, str] = {}
        self._lock = threading.Lock()
        self._http: httpx.Client | None = None

    def __repr__(self) -> str:
        return f"RegistryClient({self.url!r}{', auth=***' if self._auth else ''})"

    # -- pickling: Spark ships the codec (and its registry) to executors -----------------
    def __getstate__(self) -> dict:
        return {"url": self.url, "timeout": self.timeout, "auth": self._auth, "texts": dict(self._texts),
                "ids": dict(self._ids)}

    def __setstate__(self, state: dict) -> None:
        self.url, self.timeout, self._auth = state["url"], state["timeout"], state["auth"]
        self._texts, self._ids = state["texts"], state["ids"]
        self._lock = threading.Lock()
        self._http = None

    # -- transport -----------------------------------------------------------------------
    def _client(self) -> httpx.Client:
        if self._http is None:
            with self._lock:
                if self._http is None:
                    self._http = httpx.Client(base_url=self.url, timeout=self.timeout, auth=self._auth,
                                              headers={"Accept": _ACCEPT})
        return self._http

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> "RegistryClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _request(self, method: str, path: str, *, subject: str | None = None, body: dict | None = None,
                 params: dict | None = None, raw: bool = False):
        try:
            response = self._client().request(
                method, path, params=params, json=body,
                headers={"Content-Type": MEDIA_TYPE} if body is not None else None)
        except httpx.HTTPError as e:
            raise RegistryUnavailableError(f"cannot reach the schema registry: {type(e).__name__}: {e}",
                                           subject=subject, url=self.url) from None
        if response.status_code >= 400:
            try:
                data = response.json()
                code, message = data.get("error_code"), data.get("message") or response.reason_phrase
            except ValueError:
                code, message = None, response.text[:300] or response.reason_phrase
            raise _error_class(response.status_code, code)(
                message, status=response.status_code, error_code=code, subject=subject, url=self.url)
        if raw:
            return response.text
        try:
            return response.json()
        except ValueError:
            raise RegistryUnavailableError(f"registry answered {method} {path} with non-JSON: "
                                           f"{response.text[:200]!r}", status=response.status_code,
                                           subject=subject, url=self.url) from None

    @staticmethod
    def _subject_path(subject: str) -> str:
        return quote(subject, safe="")

    # -- the codec's interface --------------------------------------------------------------
    def register(self, subject: str, schema_text: str, schema_type: str = "AVRO") -> int:
        """Register (or find) ``schema_text`` under ``subject``; its global id."""
        key = (subject, schema_text)
        hit = self._ids.get(key)
        if hit is not None:
            return hit
        body = {"schema": schema_text}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        data = self._request("POST", f"/subjects/{self._subject_path(subject)}/versions", subject=subject, body=body)
        schema_id = int(data["id"])
        self._ids[key] = schema_id
        self._texts.setdefault(schema_id, schema_text)
        return schema_id

    def schema_by_id(self, schema_id: int) -> str:
        hit = self._texts.get(schema_id)
        if hit is not None:
            return hit
        data = self._request("GET", f"/schemas/ids/{int(schema_id)}")
        text = data["schema"]
        self._texts[schema_id] = text
        return text

    # -- the rest of the API ------------------------------------------------------------------
    def check_reachable(self) -> None:
        """``GET /`` as TiCDC does before it starts; raises when unreachable or unauthorised."""
        self._request("GET", "/")

    def version(self, subject: str, version: int | str = "latest") -> RegisteredSchema:
        data = self._request("GET", f"/subjects/{self._subject_path(subject)}/versions/{version}", subject=subject)
        out = RegisteredSchema(data.get("subject", subject), int(data["version"]), int(data["id"]), data["schema"])
        self._texts.setdefault(out.id, out.schema)
        return out

    def latest(self, subject: str) -> RegisteredSchema:
        return self.version(subject, "latest")

    def lookup(self, subject: str, schema_text: str) -> RegisteredSchema | None:
        """The version of ``subject`` holding this schema; None when the subject does not hold it."""
        try:
            data = self._request("POST", f"/subjects/{self._subject_path(subject)}", subject=subject,
                                 body={"schema": schema_text})
        except (SchemaNotFoundError, SubjectNotFoundError):
            return None
        return RegisteredSchema(data.get("subject", subject), int(data["version"]), int(data["id"]), data["schema"])

    def subjects(self) -> list[str]:
        return list(self._request("GET", "/subjects"))

    def versions(self, subject: str) -> list[int]:
        return [int(v) for v in self._request("GET", f"/subjects/{self._subject_path(subject)}/versions",
                                              subject=subject)]

    def delete_subject(self, subject: str) -> list[int]:
        """Soft delete; returns the deleted version numbers."""
        out = [int(v) for v in self._request("DELETE", f"/subjects/{self._subject_path(subject)}", subject=subject)]
        with self._lock:
            for key in [k for k in self._ids if k[0] == subject]:
                del self._ids[key]
        return out

    def compatibility(self, subject: str | None = None) -> str:
        """The level in force for ``subject`` (its own, else the global one), or the global level."""
        if subject is None:
            return self._request("GET", "/config")["compatibilityLevel"]
        return self._request("GET", f"/config/{self._subject_path(subject)}", subject=subject,
                             params={"defaultToGlobal": "true"})["compatibilityLevel"]

    def set_compatibility(self, level: str, subject: str | None = None) -> str:
        path = "/config" if subject is None else f"/config/{self._subject_path(subject)}"
        return self._request("PUT", path, subject=subject, body={"compatibility": level})["compatibility"]

    def is_compatible(self, subject: str, schema_text: str, version: int | str = "latest") -> bool:
        data = self._request("POST", f"/compatibility/subjects/{self._subject_path(subject)}/versions/{version}",
                             subject=subject, body={"schema": schema_text})
        return bool(data["is_compatible"])
