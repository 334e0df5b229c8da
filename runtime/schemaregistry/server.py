"""Confluent-compatible schema registry: the REST face of cdcflow's schema store.

The store is ``RegistryStore``: ``cdcflow.schemas.SchemaStore``'s tables plus the
soft-delete, hard-delete and mode operations only the REST API needs.

Serves the endpoints ``confluent_kafka``'s ``SchemaRegistryClient`` (and its
Avro serializer/deserializer) and TiCDC use, with Confluent's status codes,
error codes and media type, so either can point at it unchanged. Built on
aiohttp: a maintained asyncio HTTP server that is already a dependency of the
storage stack (fsspec/s3fs), so the registry adds no package.

Handlers call the SQLite store synchronously on the event loop: each request
is milliseconds, and with no ``await`` between the compatibility check and the
registration, two concurrent registrations under one subject cannot both pass
the check against the same old version.

Run: ``cdcflow registry serve`` or ``python -m cdcflow.schemaregistry.server``.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hmac
import json
import logging
import os
import sys
from pathlib import Path
from typing import Mapping, Sequence

try:
    from aiohttp import web
except ModuleNotFoundError:  # the dev extra is not installed: build_app() says so
    web = None

from ..extras import require
from ..errors import SchemaError
from ..schemas import AVRO, StoredSchema
from .compatibility import DEFAULT_LEVEL, InvalidLevel, InvalidSchema, normalize_level, parse_avro, problems
from .store import RegistryStore

log = logging.getLogger("cdcflow.schemaregistry")

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
STORE_FILE = "schemas.sqlite"  # the same name the engine gives its state-directory store

# Confluent error codes
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
VERSION_SOFT_DELETED = 40406
VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_MODE_NOT_CONFIGURED = 40409
INCOMPATIBLE = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
SERVER_ERROR = 50001

MAX_VERSION = 2**31 - 1
MAX_ID = 2**31 - 1  # ids travel as a signed 32-bit big-endian int in the Confluent wire format
READWRITE = "READWRITE"
MODES = (READWRITE, "READONLY", "READONLY_OVERRIDE", "IMPORT")
SUPPORTED_MODES = (READWRITE, "READONLY")  # IMPORT needs caller-chosen ids; the store allocates them
DEFAULT_CONTEXT = "."
ALL_SUBJECTS_PREFIX = ":*:"  # Confluent's "every context" prefix
# Config keys of Confluent data contracts / compatibility groups: refused, never silently ignored.
UNSUPPORTED_CONFIG_KEYS = ("compatibilityGroup", "defaultMetadata", "overrideMetadata", "defaultRuleSet",
                           "overrideRuleSet")
# Newer Confluent endpoints answered with an explicit "not supported" instead of aiohttp's bare 404.
UNSUPPORTED_ENDPOINTS = (
    ("/schemas/guids/{tail:.*}", "schema GUIDs are"),
    ("/subjects/{subject}/metadata", "metadata lookups (data contracts) are"),
    ("/contexts/{tail:.+}", "schema contexts are"),
    ("/associations{tail:.*}", "schema associations are"),
    ("/exporters{tail:.*}", "schema exporters are"),
    ("/dek-registry{tail:.*}", "client-side field encryption keys (dek-registry) are"),
)


class RegistryHTTPError(Exception):
    """Becomes a Confluent error body ``{"error_code": ..., "message": ...}``."""

    def __init__(self, status: int, error_code: int, message: str):
        self.status = status
        self.error_code = error_code
        self.message = message
        super().__init__(message)


def _own_or_global(request, own: str | None, global_value, code: int, what: str) -> str:
    """A subject's own setting; without one, the global one if ``?defaultToGlobal=true``, else 404."""
    if own is not None:
        return own
    if not _flag(request, "defaultToGlobal"):
        raise RegistryHTTPError(404, code, f"Subject '{request.match_info['subject']}' does not have "
                                f"subject-level {what} configured")
    return global_value()


def _json(data, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(data).encode(), status=status, content_type=MEDIA_TYPE)


def _error(status: int, error_code: int, message: str, headers: dict | None = None) -> web.Response:
    return web.Response(body=json.dumps({"error_code": error_code, "message": message}).encode(),
                        status=status, content_type=MEDIA_TYPE, headers=headers)


def parse_credentials(auth: str | None) -> tuple[str, str] | None:
    """``"user:password"`` -> (user, password); the password may contain ':'."""
    if auth is None:
        return None
    user, sep, password = auth.partition(":")
    if not sep or not user:
        raise ValueError("basic auth must be given as user:password")
    return user, password


#: environment variable holding ``user:password`` for ``--auth`` (kept off the command line)
AUTH_ENV = "CDCFLOW_REGISTRY_AUTH"


def auth_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> str | None:
    """The ``user:password`` that ``--auth`` / ``--auth-file`` ask for, checked; None without auth.

    Credentials are read from the file or from ``$CDCFLOW_REGISTRY_AUTH``, never taken
    from the command line, which every local user can read in ``ps`` or ``/proc``.
    Raises ValueError with a message fit for the user.
    """
    environ = os.environ if environ is None else environ
    if isinstance(args.auth, str):
        raise ValueError(f"--auth takes no value: credentials on the command line are visible to every local "
                         f"user; put user:password in ${AUTH_ENV} or in a file named by --auth-file")
    if args.auth_file:
        try:
            auth = Path(args.auth_file).read_text().strip()
        except OSError as e:
            raise ValueError(f"cannot read --auth-file: {e}") from None
    elif args.auth:
        auth = environ.get(AUTH_ENV, "")
        if not auth:
            raise ValueError(f"--auth needs user:password in ${AUTH_ENV} (or use --auth-file)")
    else:
        return None
    parse_credentials(auth)
    return auth


def _auth_middleware(credentials: tuple[str, str]):
    expected = f"{credentials[0]}:{credentials[1]}".encode()

    @web.middleware
    async def check_basic_auth(request: web.Request, handler):
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        given = b""
        if scheme.lower() == "basic":
            try:
                given = base64.b64decode(token.strip(), validate=True)
            except (binascii.Error, ValueError):
                given = b""
        if not hmac.compare_digest(given, expected):
            return _error(401, 401, "Unauthorized", headers={"WWW-Authenticate": 'Basic realm="cdcflow-registry"'})
        return await handler(request)

    return check_basic_auth


async def _errors_middleware(request: web.Request, handler):
    try:
        return await handler(request)
    except RegistryHTTPError as e:
        return _error(e.status, e.error_code, e.message)
    except web.HTTPException as e:  # aiohttp's own 404/405: same body shape as everything else
        if e.status < 400:
            raise
        return _error(e.status, e.status, e.reason)
    except Exception as e:  # noqa: BLE001 - a client gets a Confluent 500, the log the traceback
        log.exception("registry: %s %s failed", request.method, request.path)
        return _error(500, SERVER_ERROR, f"internal error: {e}")


async def _body(request: web.Request) -> dict:
    raw = await request.read()
    try:
        data = json.loads(raw or b"{}")
    except (ValueError, RecursionError) as e:  # a client error, never a (retried) 500
        raise RegistryHTTPError(400, 400, f"request body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise RegistryHTTPError(422, 422, "request body must be a JSON object")
    return data


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


class RegistryRoutes:
    """The endpoints, over one ``RegistryStore``."""

    def __init__(self, store: RegistryStore):
        self.store = store

    # -- helpers ----------------------------------------------------------------------
    def _schema_from_body(self, body: dict) -> str:
        text = body.get("schema")
        if not isinstance(text, str):
            raise RegistryHTTPError(422, INVALID_SCHEMA, 'request must carry the schema text in "schema"')
        schema_type = str(body.get("schemaType") or AVRO).upper()
        if schema_type != AVRO:
            raise RegistryHTTPError(422, INVALID_SCHEMA, f"schema type {schema_type} is not supported; only AVRO")
        if body.get("references"):
            raise RegistryHTTPError(422, INVALID_SCHEMA, "schema references are not supported")
        for key in ("metadata", "ruleSet"):
            if body.get(key):  # data contracts: refusing beats silently dropping rules a client relies on
                raise RegistryHTTPError(422, INVALID_SCHEMA, f'schema "{key}" (data contracts) is not supported')
        try:
            parse_avro(text)
        except InvalidSchema as e:
            raise RegistryHTTPError(422, INVALID_SCHEMA, str(e)) from None
        return text

    def _states(self, subject: str) -> list[tuple[int, bool]]:
        """(version, soft-deleted) of every stored version; 40401 when there is none."""
        states = self.store.version_states(subject)
        if not states:
            raise RegistryHTTPError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        return states

    @staticmethod
    def _version_number(version_text: str, candidates: list[int]) -> int:
        """``latest``/``-1`` is the newest candidate; otherwise a number in [1, 2^31-1] (42202)."""
        if version_text in ("latest", "-1"):
            return candidates[-1]
        try:
            version = int(version_text)
        except ValueError:
            version = 0
        if not 1 <= version <= MAX_VERSION:
            raise RegistryHTTPError(422, INVALID_VERSION,
                                    f"The specified version '{version_text}' is not a valid version id. "
                                    "Allowed values are between [1, 2^31-1] and the string \"latest\"")
        return version

    def _version(self, subject: str, version_text: str, *, deleted: bool = False) -> StoredSchema:
        """A version of ``subject``; soft-deleted ones count only with ``deleted``."""
        states = self._states(subject)
        candidates = [v for v, gone in states if deleted or not gone]
        if not candidates:
            raise RegistryHTTPError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        version = self._version_number(version_text, candidates)
        if version not in candidates:
            raise RegistryHTTPError(404, VERSION_NOT_FOUND, f"Version {version} not found.")
        found = self.store.get_any(subject, version) if deleted else self.store.get(subject, version)
        if found is None:
            raise RegistryHTTPError(404, VERSION_NOT_FOUND, f"Version {version} not found.")
        return found

    def _global_level(self) -> str:
        return self.store.compatibility(None) or DEFAULT_LEVEL

    def _level(self, subject: str) -> str:
        return self.store.compatibility(subject) or self._global_level()

    def _writable(self, subject: str) -> None:
        """Writes under a subject in (or defaulting to) a read-only mode: 42205, as Confluent."""
        mode = self.store.mode(subject) or self.store.mode(None) or READWRITE
        if mode != READWRITE:
            raise RegistryHTTPError(422, OPERATION_NOT_PERMITTED, f"Subject {subject} is in read-only mode")

    def _schema_id(self, request: web.Request) -> tuple[int, str, str]:
        """A schema id still referred to by some version (live or soft-deleted); 40403 otherwise."""
        try:
            schema_id = int(request.match_info["id"])
            if not 0 < schema_id <= MAX_ID:  # SQLite cannot even hold a larger id: not found, not a 500
                raise ValueError(schema_id)
            schema_type, text = self.store.by_id(schema_id)
        except (ValueError, SchemaError):
            raise RegistryHTTPError(404, SCHEMA_NOT_FOUND, "Schema not found") from None
        if not self.store.id_in_use(schema_id):  # every version using it was hard-deleted
            raise RegistryHTTPError(404, SCHEMA_NOT_FOUND, "Schema not found")
        return schema_id, schema_type, text

    @staticmethod
    def _version_body(s: StoredSchema) -> dict:
        out = {"subject": s.subject, "version": s.version, "id": s.id, "schema": s.text}
        if s.type != AVRO:
            out["schemaType"] = s.type
        return out

    # -- root, subjects -------------------------------------------------------------------
    async def root(self, request):
        return _json({})

    async def schema_types(self, request):
        return _json([AVRO])

    async def contexts(self, request):
        """Only the default context: a ``:.ctx:`` subject prefix is kept as part of the name."""
        return _json(_page(request, [DEFAULT_CONTEXT]))

    async def subjects(self, request):
        deleted_only = _flag(request, "deleted_only")
        deleted = deleted_only or _flag(request, "deleted")
        prefix = request.query.get("subjectPrefix", "")
        if prefix == ALL_SUBJECTS_PREFIX:
            prefix = ""
        names = [s for s, live in self.store.subject_states()
                 if s.startswith(prefix) and (not live if deleted_only else live or deleted)]
        return _json(_page(request, names))

    async def versions(self, request):
        subject = request.match_info["subject"]
        states = self._states(subject)
        if _flag(request, "deleted_only"):
            found = [v for v, gone in states if gone]
        elif _flag(request, "deleted"):
            found = [v for v, _ in states]
        else:
            found = [v for v, gone in states if not gone]
            if not found:
                raise RegistryHTTPError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        return _json(_page(request, found))

    async def get_version(self, request):
        s = self._version(request.match_info["subject"], request.match_info["version"],
                          deleted=_flag(request, "deleted"))
        return _json(self._version_body(s))

    async def get_version_schema(self, request):
        s = self._version(request.match_info["subject"], request.match_info["version"],
                          deleted=_flag(request, "deleted"))
        return web.Response(text=s.text, content_type=MEDIA_TYPE)

    async def referenced_by(self, request):
        """Nothing can reference a version: registrations with references are refused."""
        self._version(request.match_info["subject"], request.match_info["version"])
        return _json([])

    async def register(self, request):
        subject = request.match_info["subject"]
        text = self._schema_from_body(await _body(request))
        existing = self.store.lookup(subject, text)
        if existing is not None:
            return _json({"id": existing.id})
        self._writable(subject)
        previous = [self.store.get(subject, v).text for v in self.store.versions(subject)]
        level = self._level(subject)
        found = problems(level, text, previous)
        if found:
            raise RegistryHTTPError(
                409, INCOMPATIBLE,
                f"Schema being registered is incompatible with an earlier schema for subject \"{subject}\" "
                f"(compatibility {level}): {'; '.join(found)}")
        stored = self.store.register(subject, text)
        log.info("registered subject %s version %d id %d", subject, stored.version, stored.id)
        return _json({"id": stored.id})

    async def lookup(self, request):
        subject = request.match_info["subject"]
        text = self._schema_from_body(await _body(request))
        deleted = _flag(request, "deleted")
        if not any(deleted or not gone for _, gone in self.store.version_states(subject)):
            raise RegistryHTTPError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        found = self.store.lookup_any(subject, text, deleted=deleted)
        if found is None:
            raise RegistryHTTPError(404, SCHEMA_NOT_FOUND, "Schema not found")
        return _json(self._version_body(found))

    async def delete_subject(self, request):
        """Soft delete hides the versions (ids stay resolvable); ``permanent=true`` then removes them."""
        subject = request.match_info["subject"]
        states = self._states(subject)
        live = [v for v, gone in states if not gone]
        self._writable(subject)
        if not _flag(request, "permanent"):
            if not live:
                raise RegistryHTTPError(404, SUBJECT_SOFT_DELETED,
                                        f"Subject '{subject}' was soft deleted. Set permanent=true to delete "
                                        "permanently")
            return _json(self.store.delete_subject(subject))
        if live:
            raise RegistryHTTPError(404, SUBJECT_NOT_SOFT_DELETED,
                                    f"Subject '{subject}' was not deleted first before being permanently deleted")
        every = [v for v, _ in states]
        self.store.hard_delete_versions(subject, every)
        self.store.delete_compatibility(subject)
        self.store.delete_mode(subject)
        return _json(every)

    async def delete_version(self, request):
        """One version: soft first, then ``permanent=true``; answers the version number."""
        subject = request.match_info["subject"]
        states = self._states(subject)
        self._writable(subject)
        permanent = _flag(request, "permanent")
        live = [v for v, gone in states if not gone]
        candidates = [v for v, _ in states] if permanent else live
        if not candidates:
            raise RegistryHTTPError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        version = self._version_number(request.match_info["version"], candidates)
        if version not in {v for v, _ in states}:
            raise RegistryHTTPError(404, VERSION_NOT_FOUND, f"Version {version} not found.")
        if permanent:
            if version in live:
                raise RegistryHTTPError(404, VERSION_NOT_SOFT_DELETED,
                                        f"Subject '{subject}' Version {version} was not deleted first before "
                                        "being permanently deleted")
            self.store.hard_delete_versions(subject, [version])
        else:
            if version not in live:
                raise RegistryHTTPError(404, VERSION_SOFT_DELETED,
                                        f"Subject '{subject}' Version {version} was soft deleted. Set "
                                        "permanent=true to delete permanently")
            self.store.soft_delete_version(subject, version)
        return _json(version)

    # -- schemas by id ---------------------------------------------------------------------
    async def schema_by_id(self, request):
        _, schema_type, text = self._schema_id(request)
        out = {"schema": text}
        if schema_type != AVRO:
            out["schemaType"] = schema_type
        return _json(out)

    async def schema_by_id_text(self, request):
        _, _, text = self._schema_id(request)
        return web.Response(text=text, content_type=MEDIA_TYPE)

    def _usages(self, request) -> list[tuple[str, int]]:
        schema_id, _, _ = self._schema_id(request)
        found = self.store.usages(schema_id, deleted=_flag(request, "deleted"))
        subject = request.query.get("subject")
        return [(s, v) for s, v in found if subject is None or s == subject]

    async def schema_subjects(self, request):
        return _json(_page(request, sorted({subject for subject, _ in self._usages(request)})))

    async def schema_versions(self, request):
        return _json(_page(request, [{"subject": s, "version": v} for s, v in self._usages(request)]))

    # -- config -----------------------------------------------------------------------------
    async def get_global_config(self, request):
        return _json({"compatibilityLevel": self._global_level()})

    async def put_global_config(self, request):
        level = self._level_from_body(await _body(request))
        self.store.set_compatibility(None, level)
        return _json({"compatibility": level})

    async def delete_global_config(self, request):
        """Back to the default level; answers the level that was in force."""
        old = self.store.delete_compatibility(None) or DEFAULT_LEVEL
        return _json({"compatibilityLevel": old})

    async def get_subject_config(self, request):
        subject = request.match_info["subject"]
        level = _own_or_global(request, self.store.compatibility(subject), self._global_level,
                               SUBJECT_COMPATIBILITY_NOT_CONFIGURED, "compatibility")
        return _json({"compatibilityLevel": level})

    async def put_subject_config(self, request):
        level = self._level_from_body(await _body(request))
        self.store.set_compatibility(request.match_info["subject"], level)
        return _json({"compatibility": level})

    async def delete_subject_config(self, request):
        subject = request.match_info["subject"]
        old = self.store.delete_compatibility(subject)
        if old is None:
            if not self.store.version_states(subject):
                raise RegistryHTTPError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
            raise RegistryHTTPError(404, SUBJECT_COMPATIBILITY_NOT_CONFIGURED,
                                    f"Subject '{subject}' does not have subject-level compatibility configured")
        return _json({"compatibilityLevel": old})

    @staticmethod
    def _level_from_body(body: dict) -> str:
        unsupported = sorted(k for k in UNSUPPORTED_CONFIG_KEYS if body.get(k) is not None)
        if unsupported:
            raise RegistryHTTPError(422, INVALID_COMPATIBILITY_LEVEL,
                                    f"config keys {', '.join(unsupported)} are not supported; only compatibility")
        try:
            return normalize_level(body.get("compatibility", body.get("compatibilityLevel")))
        except InvalidLevel as e:
            raise RegistryHTTPError(422, INVALID_COMPATIBILITY_LEVEL, str(e)) from None

    # -- mode -------------------------------------------------------------------------------
    async def get_global_mode(self, request):
        return _json({"mode": self.store.mode(None) or READWRITE})

    async def put_global_mode(self, request):
        mode = _mode_from_body(await _body(request))
        self.store.set_mode(None, mode)
        return _json({"mode": mode})

    async def get_subject_mode(self, request):
        subject = request.match_info["subject"]
        mode = _own_or_global(request, self.store.mode(subject), lambda: self.store.mode(None) or READWRITE,
                              SUBJECT_MODE_NOT_CONFIGURED, "mode")
        return _json({"mode": mode})

    async def put_subject_mode(self, request):
        mode = _mode_from_body(await _body(request))
        self.store.set_mode(request.match_info["subject"], mode)
        return _json({"mode": mode})

    async def delete_subject_mode(self, request):
        subject = request.match_info["subject"]
        old = self.store.delete_mode(subject)
        if old is None:
            raise RegistryHTTPError(404, SUBJECT_MODE_NOT_CONFIGURED,
                                    f"Subject '{subject}' does not have subject-level mode configured")
        return _json({"mode": old})

    # -- compatibility test -------------------------------------------------------------------
    async def test_against_version(self, request):
        """Against one version: the level's direction, without its transitive reach."""
        subject = request.match_info["subject"]
        text = self._schema_from_body(await _body(request))
        old = self._version(subject, request.match_info["version"])
        level = self._level(subject).removesuffix("_TRANSITIVE")
        return self._compat_answer(request, problems(level, text, [old.text]))

    async def test_against_all(self, request):
        """Against the subject as a registration would be checked."""
        subject = request.match_info["subject"]
        text = self._schema_from_body(await _body(request))
        previous = [self.store.get(subject, v).text for v in self.store.versions(subject)]
        return self._compat_answer(request, problems(self._level(subject), text, previous))

    @staticmethod
    def _compat_answer(request, found: list[str]) -> web.Response:
        out: dict = {"is_compatible": not found}
        if _flag(request, "verbose"):
            out["messages"] = found
        return _json(out)


def _mode_from_body(body: dict) -> str:
    mode = body.get("mode")
    if not isinstance(mode, str) or mode.upper() not in MODES:
        raise RegistryHTTPError(422, INVALID_MODE, f"Invalid mode {mode!r}; valid modes: {', '.join(MODES)}")
    mode = mode.upper()
    if mode not in SUPPORTED_MODES:
        raise RegistryHTTPError(422, INVALID_MODE,
                                f"mode {mode} is not supported by this registry; supported: "
                                f"{', '.join(SUPPORTED_MODES)}")
    return mode


def _page(request: web.Request, items: list) -> list:
    """Confluent's ``offset``/``limit`` paging (limit -1: everything)."""
    try:
        offset = int(request.query.get("offset", 0))
        limit = int(request.query.get("limit", -1))
    except ValueError:
        raise RegistryHTTPError(400, 400, "offset and limit must be integers") from None
    items = items[max(offset, 0):]
    return items if limit < 0 else items[:limit]


def _unsupported(feature: str):
    """Endpoints of newer Confluent releases this registry does not implement: a clear 404, not a bare one."""
    async def handler(request):
        raise RegistryHTTPError(404, 404, f"{feature} not supported by the cdcflow schema registry "
                                          f"({request.method} {request.path})")
    return handler


def build_app(store: RegistryStore, *, auth: str | None = None) -> web.Application:
    """The aiohttp application; ``auth="user:password"`` requires basic auth on every endpoint."""
    require("aiohttp", "schema registry server")
    middlewares = [web.middleware(_errors_middleware)]
    credentials = parse_credentials(auth)
    if credentials is not None:
        middlewares.insert(0, _auth_middleware(credentials))
    app = web.Application(middlewares=middlewares, client_max_size=16 * 1024 * 1024)
    r = RegistryRoutes(store)
    app.add_routes([
        web.get("/", r.root),
        web.get("/schemas/types", r.schema_types),
        web.get("/contexts", r.contexts),
        web.get("/mode", r.get_global_mode),
        web.put("/mode", r.put_global_mode),
        web.get("/mode/{subject}", r.get_subject_mode),
        web.put("/mode/{subject}", r.put_subject_mode),
        web.delete("/mode/{subject}", r.delete_subject_mode),
        web.get("/subjects", r.subjects),
        web.post("/subjects/{subject}", r.lookup),
        web.delete("/subjects/{subject}", r.delete_subject),
        web.get("/subjects/{subject}/versions", r.versions),
        web.post("/subjects/{subject}/versions", r.register),
        web.get("/subjects/{subject}/versions/{version}", r.get_version),
        web.delete("/subjects/{subject}/versions/{version}", r.delete_version),
        web.get("/subjects/{subject}/versions/{version}/schema", r.get_version_schema),
        web.get("/subjects/{subject}/versions/{version}/referencedby", r.referenced_by),
        web.get("/schemas/ids/{id}", r.schema_by_id),
        web.get("/schemas/ids/{id}/schema", r.schema_by_id_text),
        web.get("/schemas/ids/{id}/subjects", r.schema_subjects),
        web.get("/schemas/ids/{id}/versions", r.schema_versions),
        web.get("/config", r.get_global_config),
        web.put("/config", r.put_global_config),
        web.delete("/config", r.delete_global_config),
        web.get("/config/{subject}", r.get_subject_config),
        web.put("/config/{subject}", r.put_subject_config),
        web.delete("/config/{subject}", r.delete_subject_config),
        web.post("/compatibility/subjects/{subject}/versions", r.test_against_all),
        web.post("/compatibility/subjects/{subject}/versions/{version}", r.test_against_version),
    ])
    for path, feature in UNSUPPORTED_ENDPOINTS:
        app.router.add_route("*", path, _unsupported(feature))
    app.on_cleanup.append(lambda _app: _close(store))
    return app


async def _close(store: RegistryStore) -> None:
    store.close()


def open_store(data_dir: str | Path) -> RegistryStore:
    return RegistryStore(Path(data_dir) / STORE_FILE)


def serve(*, host: str = "127.0.0.1", port: int = 8081, data_dir: str | Path = ".cdcflow/registry",
          auth: str | None = None) -> None:
    """Serve until SIGINT/SIGTERM. The data directory keeps subjects and ids across restarts."""
    app = build_app(open_store(data_dir), auth=auth)
    print(f"schema registry listening on http://{host}:{port} (data: {Path(data_dir).resolve()}"
          f"{', basic auth' if auth else ''})", flush=True)
    web.run_app(app, host=host, port=port, print=None, access_log=None, handle_signals=True)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8081, help="default: 8081")
    parser.add_argument("--data", default=".cdcflow/registry", metavar="DIR",
                        help=f"directory of the persistent store ({STORE_FILE}); default: .cdcflow/registry")
    parser.add_argument("--auth", nargs="?", const=True, default=False,
                        help=f"require HTTP basic auth; user:password is read from ${AUTH_ENV}")
    parser.add_argument("--auth-file", default=None, metavar="FILE",
                        help="require HTTP basic auth; user:password is the file's content (keep it mode 0600)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdcflow.schemaregistry.server",
                                     description="Confluent-compatible schema registry over cdcflow's schema store.")
    add_serve_arguments(parser)
    args = parser.parse_args(argv)
    try:
        auth = auth_from_args(args)
    except ValueError as e:
        parser.error(str(e))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve(host=args.host, port=args.port, data_dir=args.data, auth=auth)
    return 0


if __name__ == "__main__":
    sys.exit(main())
