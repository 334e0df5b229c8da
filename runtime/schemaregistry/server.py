"""Confluent-compatible schema registry: the REST face of ``cdcflow.schemas.SchemaStore``.

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
import sys
from pathlib import Path
from typing import Sequence

from aiohttp import web

from ..errors import SchemaError
from ..schemas import AVRO, SchemaStore, StoredSchema
from .compatibility import DEFAULT_LEVEL, InvalidLevel, InvalidSchema, normalize_level, parse_avro, problems

log = logging.getLogger("cdcflow.schemaregistry")

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
STORE_FILE = "schemas.sqlite"  # the same name the engine gives its state-directory store

# Confluent error codes
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
INCOMPATIBLE = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
SERVER_ERROR = 50001


class RegistryHTTPError(Exception):
    """Becomes a Confluent error body ``{"error_code": ..., "message": ...}``."""

    def __init__(self, status: int, error_code: int, message: str):
        self.status = status
        self.error_code = error_code
        self.message = message
        super().__init__(message)


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


@web.middleware
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
    except ValueError as e:
        raise RegistryHTTPError(400, 400, f"request body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise RegistryHTTPError(422, 422, "request body must be a JSON object")
    return data


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


class RegistryRoutes:
    """The endpoints, over one ``SchemaStore``."""

    def __init__(self, store: SchemaStore):
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
        try:
            parse_avro(text)
        except InvalidSchema as e:
            raise RegistryHTTPError(422, INVALID_SCHEMA, str(e)) from None
        return text

    def _live_versions(self, subject: str) -> list[int]:
        versions = self.store.versions(subject)
        if not versions:
            raise RegistryHTTPError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        return versions

    def _version(self, subject: str, version_text: str) -> StoredSchema:
        versions = self._live_versions(subject)
        if version_text in ("latest", "-1"):
            return self.store.get(subject, versions[-1])
        try:
            version = int(version_text)
        except ValueError:
            version = 0
        if version < 1:
            raise RegistryHTTPError(422, INVALID_VERSION,
                                    f"The specified version '{version_text}' is not a valid version id. "
                                    "Allowed values are between [1, 2^31-1] and the string \"latest\"")
        if version not in versions:
            raise RegistryHTTPError(404, VERSION_NOT_FOUND, f"Version {version} not found.")
        return self.store.get(subject, version)

    def _global_level(self) -> str:
        return self.store.compatibility(None) or DEFAULT_LEVEL

    def _level(self, subject: str) -> str:
        return self.store.compatibility(subject) or self._global_level()

    def _schema_id(self, request: web.Request) -> tuple[int, str, str]:
        try:
            schema_id = int(request.match_info["id"])
            schema_type, text = self.store.by_id(schema_id)
        except (ValueError, SchemaError):
            raise RegistryHTTPError(404, SCHEMA_NOT_FOUND, "Schema not found") from None
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

    async def mode(self, request):
        return _json({"mode": "READWRITE"})

    async def subjects(self, request):
        return _json(self.store.subjects())

    async def versions(self, request):
        return _json(self._live_versions(request.match_info["subject"]))

    async def get_version(self, request):
        s = self._version(request.match_info["subject"], request.match_info["version"])
        return _json(self._version_body(s))

    async def get_version_schema(self, request):
        s = self._version(request.match_info["subject"], request.match_info["version"])
        return web.Response(text=s.text, content_type=MEDIA_TYPE)

    async def register(self, request):
        subject = request.match_info["subject"]
        text = self._schema_from_body(await _body(request))
        existing = self.store.lookup(subject, text)
        if existing is not None:
            return _json({"id": existing.id})
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
        self._live_versions(subject)
        found = self.store.lookup(subject, text)
        if found is None:
            raise RegistryHTTPError(404, SCHEMA_NOT_FOUND, "Schema not found")
        return _json(self._version_body(found))

    async def delete_subject(self, request):
        """Soft delete: versions disappear from reads; ids stay resolvable, as in Confluent."""
        subject = request.match_info["subject"]
        self._live_versions(subject)
        return _json(self.store.delete_subject(subject))

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

    def _usages(self, schema_id: int) -> list[tuple[str, int]]:
        return [(subject, v) for subject in self.store.subjects() for v in self.store.versions(subject)
                if self.store.get(subject, v).id == schema_id]

    async def schema_subjects(self, request):
        schema_id, _, _ = self._schema_id(request)
        return _json(sorted({subject for subject, _ in self._usages(schema_id)}))

    async def schema_versions(self, request):
        schema_id, _, _ = self._schema_id(request)
        return _json([{"subject": s, "version": v} for s, v in self._usages(schema_id)])

    # -- config -----------------------------------------------------------------------------
    async def get_global_config(self, request):
        return _json({"compatibilityLevel": self._global_level()})

    async def put_global_config(self, request):
        level = self._level_from_body(await _body(request))
        self.store.set_compatibility(None, level)
        return _json({"compatibility": level})

    async def get_subject_config(self, request):
        subject = request.match_info["subject"]
        level = self.store.compatibility(subject)
        if level is None:
            if not _flag(request, "defaultToGlobal"):
                raise RegistryHTTPError(404, SUBJECT_COMPATIBILITY_NOT_CONFIGURED,
                                        f"Subject '{subject}' does not have subject-level compatibility configured")
            level = self._global_level()
        return _json({"compatibilityLevel": level})

    async def put_subject_config(self, request):
        level = self._level_from_body(await _body(request))
        self.store.set_compatibility(request.match_info["subject"], level)
        return _json({"compatibility": level})

    @staticmethod
    def _level_from_body(body: dict) -> str:
        try:
            return normalize_level(body.get("compatibility", body.get("compatibilityLevel")))
        except InvalidLevel as e:
            raise RegistryHTTPError(422, INVALID_COMPATIBILITY_LEVEL, str(e)) from None

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


def build_app(store: SchemaStore, *, auth: str | None = None) -> web.Application:
    """The aiohttp application; ``auth="user:password"`` requires basic auth on every endpoint."""
    middlewares = [_errors_middleware]
    credentials = parse_credentials(auth)
    if credentials is not None:
        middlewares.insert(0, _auth_middleware(credentials))
    app = web.Application(middlewares=middlewares, client_max_size=16 * 1024 * 1024)
    r = RegistryRoutes(store)
    app.add_routes([
        web.get("/", r.root),
        web.get("/schemas/types", r.schema_types),
        web.get("/mode", r.mode),
        web.get("/subjects", r.subjects),
        web.post("/subjects/{subject}", r.lookup),
        web.delete("/subjects/{subject}", r.delete_subject),
        web.get("/subjects/{subject}/versions", r.versions),
        web.post("/subjects/{subject}/versions", r.register),
        web.get("/subjects/{subject}/versions/{version}", r.get_version),
        web.get("/subjects/{subject}/versions/{version}/schema", r.get_version_schema),
        web.get("/schemas/ids/{id}", r.schema_by_id),
        web.get("/schemas/ids/{id}/schema", r.schema_by_id_text),
        web.get("/schemas/ids/{id}/subjects", r.schema_subjects),
        web.get("/schemas/ids/{id}/versions", r.schema_versions),
        web.get("/config", r.get_global_config),
        web.put("/config", r.put_global_config),
        web.get("/config/{subject}", r.get_subject_config),
        web.put("/config/{subject}", r.put_subject_config),
        web.post("/compatibility/subjects/{subject}/versions", r.test_against_all),
        web.post("/compatibility/subjects/{subject}/versions/{version}", r.test_against_version),
    ])
    app.on_cleanup.append(lambda _app: _close(store))
    return app


async def _close(store: SchemaStore) -> None:
    store.close()


def open_store(data_dir: str | Path) -> SchemaStore:
    return SchemaStore(Path(data_dir) / STORE_FILE)


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
    parser.add_argument("--auth", default=None, metavar="USER:PASSWORD",
                        help="require HTTP basic auth with these credentials")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdcflow.schemaregistry.server",
                                     description="Confluent-compatible schema registry over cdcflow's schema store.")
    add_serve_arguments(parser)
    args = parser.parse_args(argv)
    try:
        parse_credentials(args.auth)
    except ValueError as e:
        parser.error(str(e))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve(host=args.host, port=args.port, data_dir=args.data, auth=args.auth)
    return 0


if __name__ == "__main__":
    sys.exit(main())
