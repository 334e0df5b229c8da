"""Conduit's ``connutils.v1.SchemaService`` between a host and its plugins.

Host side: ``HostServices`` serves the service from a ``SchemaStore`` on one
loopback port per host process, shared by every plugin the host starts; each
call must carry the host's token in the ``conduit-connector-token`` metadata.
Plugin side: ``RemoteSchemaStore`` is a ``SchemaStore`` whose data lives in the
host, so record conversion in a plugin names the same subjects/versions/ids
the host sees. It caches everything it learns: the conversion hot path asks
for the same few schemas over and over.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from concurrent import futures
from typing import Callable

import grpc

from ..errors import SchemaError
from ..pb.connutils.v1 import schema_pb2 as connutils_pb2
from ..pb.connutils.v1 import schema_pb2_grpc as connutils_grpc
from ..pb.schema.v1 import schema_pb2
from ..schemas import AVRO, SchemaStore, StoredSchema, canonical, default_store
from .handshake import DEFAULT_MAX_RECORD_SIZE, TOKEN_METADATA_KEY

_TYPE_TO_PB = {AVRO: schema_pb2.Schema.TYPE_AVRO}
_PB_TO_TYPE = {v: k for k, v in _TYPE_TO_PB.items()}


def schema_to_proto(s: StoredSchema) -> schema_pb2.Schema:
    return schema_pb2.Schema(
        subject=s.subject, version=s.version, id=s.id, type=_TYPE_TO_PB.get(s.type, 0), bytes=s.bytes
    )


class SchemaServicer(connutils_grpc.SchemaServiceServicer):
    """``store_fn`` is called per request, so the service follows the process's
    default store (``cdcflow.schemas.set_default_store``) unless a store is fixed."""

    def __init__(self, store_fn: Callable[[], SchemaStore], token: str):
        self._store_fn = store_fn
        self._token = token

    def _authorize(self, context: grpc.ServicerContext) -> None:
        sent = dict(context.invocation_metadata()).get(TOKEN_METADATA_KEY)
        if sent is None or not secrets.compare_digest(str(sent), self._token):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, f"missing or wrong {TOKEN_METADATA_KEY}")

    def CreateSchema(self, request, context):
        self._authorize(context)
        stype = _PB_TO_TYPE.get(request.type)
        if stype is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported schema type {request.type} (only AVRO)")
        try:
            stored = self._store_fn().register(request.subject, request.bytes.decode(), stype)
        except (SchemaError, UnicodeDecodeError) as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"subject {request.subject!r}: {e}")
        return connutils_pb2.CreateSchemaResponse(schema=schema_to_proto(stored))

    def GetSchema(self, request, context):
        self._authorize(context)
        try:
            stored = self._store_fn().get(request.subject, request.version)
        except SchemaError as e:
            context.abort(grpc.StatusCode.NOT_FOUND, str(e))
        return connutils_pb2.GetSchemaResponse(schema=schema_to_proto(stored))


class HostServices:
    """The services a host offers its plugins, on 127.0.0.1, started on first use."""

    def __init__(self, store: SchemaStore | None = None, token: str | None = None):
        self.token = token or secrets.token_hex(32)
        self._store = store
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="cdcflow-host-services"),
            options=[("grpc.max_receive_message_length", DEFAULT_MAX_RECORD_SIZE),
                     ("grpc.max_send_message_length", DEFAULT_MAX_RECORD_SIZE)],
        )
        connutils_grpc.add_SchemaServiceServicer_to_server(
            SchemaServicer(lambda: self._store or default_store(), self.token), self._server
        )
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.target = f"127.0.0.1:{port}"
        self._server.start()

    def stop(self) -> None:
        self._server.stop(grace=1).wait()


_shared: HostServices | None = None
_shared_lock = threading.Lock()


def host_services() -> HostServices:
    """The one ``HostServices`` of this process (backed by ``default_store()``)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = HostServices()
        return _shared


class RemoteSchemaStore(SchemaStore):
    """A ``SchemaStore`` kept by the host, reached over ``connutils.v1.SchemaService``.

    Only what the service offers works: ``register``, ``get``/``latest`` and
    lookups of schemas this process has already seen (``by_id``, ``lookup``).
    Listing and deleting subjects are the host's business and raise SchemaError.
    """

    def __init__(self, target: str, token: str, *, timeout: float = 30.0):  # noqa: D107 - no sqlite here
        self.path = f"remote:{target}"
        self._channel = grpc.insecure_channel(
            target, options=[("grpc.max_receive_message_length", DEFAULT_MAX_RECORD_SIZE)]
        )
        self._stub = connutils_grpc.SchemaServiceStub(self._channel)
        self._metadata = ((TOKEN_METADATA_KEY, token),)
        self._timeout = timeout
        self._lock = threading.Lock()
        self._by_sv: dict[tuple[str, int], StoredSchema] = {}
        self._by_id: dict[int, tuple[str, str]] = {}
        self._registered: dict[tuple[str, str], StoredSchema] = {}  # (subject, fingerprint)

    def close(self) -> None:
        self._channel.close()

    def _remember(self, pb: schema_pb2.Schema) -> StoredSchema:
        s = StoredSchema(pb.subject, pb.version, pb.id, _PB_TO_TYPE.get(pb.type, AVRO), pb.bytes.decode())
        with self._lock:
            self._by_sv[(s.subject, s.version)] = s
            self._by_id[s.id] = (s.type, s.text)
        return s

    def _call(self, method, request, what: str):
        try:
            return method(request, metadata=self._metadata, timeout=self._timeout)
        except grpc.RpcError as e:
            raise SchemaError(f"schema service {self.path}: {what}: {e.code().name}: {e.details()}") from None

    @staticmethod
    def _fingerprint(text: str, type: str) -> str:
        canon = canonical(text) if type == AVRO else text
        return hashlib.sha256(f"{type}\0{canon}".encode()).hexdigest()

    def register(self, subject: str, text: str, type: str = AVRO) -> StoredSchema:
        if not subject:
            raise SchemaError("subject must not be empty")
        key = (subject, self._fingerprint(text, type))
        hit = self._registered.get(key)
        if hit is not None:
            return hit
        if type not in _TYPE_TO_PB:
            raise SchemaError(f"schema type {type!r} cannot be registered through the host (only AVRO)")
        resp = self._call(
            self._stub.CreateSchema,
            connutils_pb2.CreateSchemaRequest(subject=subject, type=_TYPE_TO_PB[type], bytes=text.encode()),
            f"create schema under {subject!r}",
        )
        stored = self._remember(resp.schema)
        self._registered[key] = stored
        return stored

    def get(self, subject: str, version: int) -> StoredSchema:
        if version > 0:
            hit = self._by_sv.get((subject, version))
            if hit is not None:
                return hit
        resp = self._call(
            self._stub.GetSchema,
            connutils_pb2.GetSchemaRequest(subject=subject, version=version),
            f"get schema {subject!r} version {version}",
        )
        return self._remember(resp.schema)

    def by_id(self, schema_id: int) -> tuple[str, str]:
        hit = self._by_id.get(schema_id)
        if hit is None:
            raise SchemaError(f"schema id {schema_id} not seen by this plugin (the host service has no lookup by id)")
        return hit

    def lookup(self, subject: str, text: str, type: str = AVRO) -> StoredSchema | None:
        return self._registered.get((subject, self._fingerprint(text, type)))

    def _host_only(self, what: str):
        raise SchemaError(f"{what} is not available to a standalone plugin (the host owns the schema store)")

    def subjects(self) -> list[str]:
        self._host_only("listing subjects")

    def versions(self, subject: str) -> list[int]:
        self._host_only("listing versions")

    def delete_subject(self, subject: str) -> list[int]:
        self._host_only("deleting subjects")

    def set_compatibility(self, subject: str | None, level: str) -> None:
        self._host_only("setting compatibility")

    def compatibility(self, subject: str | None) -> str | None:
        return None
