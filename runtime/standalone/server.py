"""Serving a cdcflow connector or transform as a standalone plugin, as Conduit expects one.

The process refuses to start without the magic cookie, listens on a port in
[PLUGIN_MIN_PORT, PLUGIN_MAX_PORT] (or a unix socket), prints the handshake
line as its first stdout output, reports health ``plugin`` SERVING and serves
SpecifierPlugin + SourcePlugin/DestinationPlugin (connectors) or
TransformPlugin (transforms) until GRPCController.Shutdown, SIGTERM or the
death of its host. Records travel as the lossless protobuf form
(``cdcflow.convert.protobuf``); schemas go through the host's SchemaService
when the host offers one.
"""

from __future__ import annotations

import gc
import logging
import os
import queue
import random
import shutil
import signal
import sys
import tempfile
import threading
import traceback
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Iterator, Mapping, TextIO

import grpc
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ..convert.protobuf import from_wire, to_proto
from ..engine import middleware
from ..engine.fastpath import WireDestination
from ..errors import CdcflowError, ConfigError, InfrastructureError
from ..params import REDACTOR, Parameter, secret_values, validate
from ..pb.connector.v2 import (
    destination_pb2, destination_pb2_grpc, source_pb2, source_pb2_grpc, specifier_pb2, specifier_pb2_grpc,
)
from ..pb.transform.v1 import transform_pb2, transform_pb2_grpc
from ..record import Record
from ..schemas import SchemaStore, default_store, set_default_store
from ..sdk import ConnectorPlugin, Destination, Failed, Filtered, Source, Transform
from . import handshake as hs
from .framing import encode_acks, frame_records
from .schema_service import RemoteSchemaStore
from .spec import CONNECTOR, TRANSFORM, params_to_proto

log = logging.getLogger("cdcflow.standalone.server")

#: records asked of the source per read; the Run stream splits them by size
READ_BATCH = 10_000
#: at most this many records (whole request messages) go to one destination write
WRITE_RECORDS = 10_000
#: request messages decoded ahead of the destination's writes
_INBOX_MESSAGES = 8
#: bytes of an undecoded request message counted as one record against WRITE_RECORDS
_WIRE_RECORD_BYTES = 1024
#: request messages decoded ahead after a ``write_wire`` converted its messages through records
_WIRE_PAUSE_MESSAGES = 32
_IDLE_MIN, _IDLE_MAX = 0.001, 0.1
#: allocations between young-generation collections in a plugin process (Python's default: 700)
GC_YOUNG_THRESHOLD = 10_000


@dataclass(frozen=True)
class ServedPlugin:
    """What is served, whatever it came from (ConnectorPlugin, Transform class, registry entry)."""

    name: str
    version: str
    kind: str
    summary: str = ""
    description: str = ""
    author: str = ""
    source_params: Mapping[str, Parameter] = field(default_factory=dict)
    destination_params: Mapping[str, Parameter] = field(default_factory=dict)
    params: Mapping[str, Parameter] = field(default_factory=dict)
    new_source: Callable[[], Source] | None = None
    new_destination: Callable[[], Destination] | None = None
    new_transform: Callable[[], Transform] | None = None


def _with_sdk(own: Mapping[str, Parameter], side: str) -> dict[str, Parameter]:
    """A connector's parameters and Conduit's ``sdk.*`` ones, which the server applies around it
    (``cdcflow.engine.middleware``), as a connector built with Conduit's SDK lists and applies them."""
    return {**(middleware.SOURCE_PARAMS if side == "source" else middleware.DESTINATION_PARAMS), **own}


def describe_target(target: Any) -> ServedPlugin:
    """Normalise a ConnectorPlugin, a Transform subclass or a registry ``PluginInfo``."""
    if isinstance(target, ConnectorPlugin):
        return ServedPlugin(
            name=target.name, version=target.version, kind=CONNECTOR, summary=target.summary,
            description=target.description, author=target.author,
            source_params=_with_sdk(target.source_params, "source"),
            destination_params=_with_sdk(target.destination_params, "destination"), new_source=target.source,
            new_destination=target.destination,
        )
    if isinstance(target, type) and issubclass(target, Transform):
        return ServedPlugin(
            name=target.name, version=target.version, kind=TRANSFORM, summary=target.summary,
            description=target.description, author=target.author, params=dict(target.parameters),
            new_transform=target,
        )
    kind = getattr(target, "kind", None)
    if kind == CONNECTOR:
        return ServedPlugin(
            name=target.name, version=target.version, kind=CONNECTOR, summary=target.summary,
            description=target.description, author=target.author,
            source_params=_with_sdk(target.source_params, "source"),
            destination_params=_with_sdk(target.destination_params, "destination"),
            new_source=target.new_source if target.has_source else None,
            new_destination=target.new_destination if target.has_destination else None,
        )
    if kind == TRANSFORM:
        return ServedPlugin(
            name=target.name, version=target.version, kind=TRANSFORM, summary=target.summary,
            description=target.description, author=target.author, params=dict(target.params),
            new_transform=target.new_transform,
        )
    raise TypeError(f"cannot serve {target!r}: expected a ConnectorPlugin, a Transform subclass or a PluginInfo")


def _configure(plugin: ServedPlugin, spec: Mapping[str, Parameter], raw: Mapping[str, str],
               context: grpc.ServicerContext) -> dict[str, Any]:
    settings = dict(raw)
    REDACTOR.add(*secret_values(spec, settings))
    try:
        return validate(plugin.name, spec, settings)
    except ConfigError as e:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))


#: trailing metadata of an UNAVAILABLE answer: the ``InfrastructureError``'s service and endpoint
OUTAGE_SERVICE_KEY, OUTAGE_ENDPOINT_KEY = "cdcflow-outage-service", "cdcflow-outage-endpoint"


def _fail(context: grpc.ServicerContext, what: str, e: BaseException) -> None:
    """Log the traceback to the plugin's log stream and end the RPC with the reason."""
    if isinstance(e, CdcflowError):  # expected failures carry their context; no traceback
        log.error("%s failed: %s", what, e)
    else:
        log.error("%s failed: %s\n%s", what, e, traceback.format_exc())
    code = grpc.StatusCode.INVALID_ARGUMENT if isinstance(e, ConfigError) else grpc.StatusCode.INTERNAL
    if isinstance(e, InfrastructureError):
        # an outage: UNAVAILABLE, with service and endpoint for the host to raise it again as one
        code = grpc.StatusCode.UNAVAILABLE
        context.set_trailing_metadata(((OUTAGE_SERVICE_KEY, e.service or ""), (OUTAGE_ENDPOINT_KEY, e.endpoint or "")))
    msg = str(e) if isinstance(e, CdcflowError) else f"{type(e).__name__}: {e}"
    context.abort(code, f"{what}: {msg}")


class _Decoded:
    """One request message's records (None where one did not decode) and why those did not."""

    __slots__ = ("records", "failed")

    def __init__(self, records: list[Record | None], failed: dict[int, tuple[bytes, Exception]]):
        self.records, self.failed = records, failed


_END = object()  # the host closed its side of the stream


def _is_message(item: Any) -> bool:
    """A request message in the inbox: decoded, or its bytes (for ``write_wire``)."""
    return type(item) is bytes or type(item) is _Decoded


def _weight(item: Any) -> int:
    """Records an inbox item counts for against WRITE_RECORDS."""
    if type(item) is _Decoded:
        return len(item.records)
    return max(1, len(item) // _WIRE_RECORD_BYTES) if type(item) is bytes else 0


class _WireMode:
    """Whether the reader thread passes request messages on undecoded, for ``write_wire``.

    Off for good once the destination declines (NotImplemented). Paused for a while when it
    converted every message of a write through records itself (its ``(positions, failed)``
    results: structured data, say): then decoding ahead in the reader thread while the
    destination writes is faster; after the pause the bytes are offered again. Both threads
    touch the counter without a lock: a message decoded or passed on either way is written alike.
    """

    __slots__ = ("on", "paused")

    def __init__(self, on: bool):
        self.on, self.paused = on, 0

    def take_bytes(self) -> bool:
        """For the reader thread, per message: pass this one on undecoded?"""
        if not self.on:
            return False
        if self.paused > 0:
            self.paused -= 1
            return False
        return True

    def pause(self) -> None:
        self.paused = _WIRE_PAUSE_MESSAGES


def _decode_error(error: Exception) -> str:
    """The ack error of a record that did not decode."""
    return f"cannot decode record: {error}"


def _read_requests(requests: Iterator[bytes], store: SchemaStore, inbox: queue.Queue, done: threading.Event,
                   wire: _WireMode) -> None:
    """Decode request messages into ``inbox`` until the stream ends; an exception ends it too.
    Messages ``wire`` takes go in undecoded: the destination takes their bytes."""
    def put(item: Any) -> bool:
        while not done.is_set():
            try:
                inbox.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    try:
        for data in requests:
            if wire.take_bytes():
                item: Any = data
            else:
                failed: dict[int, tuple[bytes, Exception]] = {}
                item = _Decoded(from_wire(data, store, failed), failed)
            if not put(item):
                return
    except grpc.RpcError:
        pass  # the host went away; Run ends through its context
    except Exception as e:  # noqa: BLE001 - reported by Run
        put(e)
        return
    put(_END)


def _decode_all(items: list[Any], store: SchemaStore) -> tuple[list[_Decoded], Exception | None]:
    """The inbox items as decoded messages, up to the first that is not a batch message (and its error)."""
    out: list[_Decoded] = []
    for item in items:
        if type(item) is bytes:
            failed: dict[int, tuple[bytes, Exception]] = {}
            try:
                item = _Decoded(from_wire(item, store, failed), failed)
            except Exception as e:  # noqa: BLE001 - as the reader thread reports it
                return out, e
        out.append(item)
    return out, None


class _Lifecycle:
    """Tracks every plugin instance opened, so shutdown tears down what is left."""

    def __init__(self) -> None:
        self.instances: list[Any] = []
        self.torn_down: set[int] = set()

    def teardown(self, inst: Any) -> None:
        if inst is not None and id(inst) not in self.torn_down:
            self.torn_down.add(id(inst))
            inst.teardown()

    def teardown_all(self) -> None:
        for inst in self.instances:
            try:
                self.teardown(inst)
            except Exception as e:  # noqa: BLE001 - shutting down anyway
                log.warning("teardown at shutdown failed: %s", e)


class SpecifierServicer(specifier_pb2_grpc.SpecifierPluginServicer):
    def __init__(self, plugin: ServedPlugin):
        self._plugin = plugin

    def Specify(self, request, context):
        p = self._plugin
        return specifier_pb2.Specifier.Specify.Response(specification=specifier_pb2.Specification(
            name=p.name, summary=p.summary, description=p.description, version=p.version, author=p.author,
            source_params=params_to_proto(p.source_params), destination_params=params_to_proto(p.destination_params),
        ))


class SourceServicer(source_pb2_grpc.SourcePluginServicer):
    def __init__(self, plugin: ServedPlugin, life: _Lifecycle, connector_id: str, max_size: int):
        self._plugin, self._life, self._id, self._max = plugin, life, connector_id, max_size
        self._src: Source | None = None
        self._partition = ""
        self._lock = threading.Lock()  # one call into the source at a time
        self._stop = threading.Event()
        self._last = b""
        self._mw = middleware.SourceMiddleware()

    def Configure(self, request, context):
        typed = _configure(self._plugin, self._plugin.source_params, request.config, context)
        try:
            self._mw = middleware.SourceMiddleware.from_settings(typed, self._id)
            src = self._plugin.new_source()
            src.id = self._id
            src.configure(middleware.without_sdk(typed))
            parts = list(src.partitions())
        except Exception as e:  # noqa: BLE001
            _fail(context, "Source.Configure", e)
        if len(parts) != 1:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"{self._plugin.name} splits into {len(parts)} partitions; a standalone source serves one "
                          "(configure it with a single partition)")
        self._src, self._partition = src, parts[0]
        self._life.instances.append(src)
        return source_pb2.Source.Configure.Response()

    def Open(self, request, context):
        if self._src is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "Open before Configure")
        try:
            self._src.open(request.position or None, self._partition)
        except Exception as e:  # noqa: BLE001
            _fail(context, "Source.Open", e)
        return source_pb2.Source.Open.Response()

    def _consume_acks(self, requests: Iterator[Any], done: threading.Event, failure: list[BaseException]) -> None:
        try:
            for req in requests:
                if req.ack_positions:
                    with self._lock:
                        self._src.ack(list(req.ack_positions))
        except grpc.RpcError:
            pass  # the host went away; Run ends through context
        except Exception as e:  # noqa: BLE001 - reported by Run
            failure.append(e)
        finally:
            done.set()

    def Run(self, request_iterator, context):
        if self._src is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "Run before Open")
        store = default_store()
        acks_done, failure = threading.Event(), []
        threading.Thread(target=self._consume_acks, args=(request_iterator, acks_done, failure),
                         name="source-acks", daemon=True).start()
        idle = _IDLE_MIN
        while not self._stop.is_set() and context.is_active() and not failure:
            with self._lock:
                if self._stop.is_set():
                    break
                try:
                    batch = self._src.read(self._mw.read_size(READ_BATCH))
                    if batch:
                        self._mw.apply(batch)
                    if batch is None:
                        break  # a bounded source is done: stay quiet until Stop, like Conduit's sources
                    messages, oversized = frame_records(batch, store, "avro", self._max) if batch else ([], {})
                except Exception as e:  # noqa: BLE001
                    _fail(context, "Source.Run", e)
                if batch:
                    self._last = batch[-1].position
            if not batch:
                self._stop.wait(idle)
                idle = min(idle * 2, _IDLE_MAX)
                continue
            idle = _IDLE_MIN
            if oversized:
                i, err = next(iter(oversized.items()))
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"record {batch[i].position!r}: {err}")
            for data, _ in messages:
                yield data
        # Keep the stream open until the host closed its side: acks may still come.
        while not acks_done.wait(0.2):
            if not context.is_active():
                return
        if failure:
            _fail(context, "Source.ack", failure[0])

    def Stop(self, request, context):
        self._stop.set()
        with self._lock:  # waits for a batch being read and converted
            last = self._last
            try:
                if self._src is not None:
                    self._src.stop()
            except Exception as e:  # noqa: BLE001
                _fail(context, "Source.Stop", e)
        return source_pb2.Source.Stop.Response(last_position=last)

    def Teardown(self, request, context):
        try:
            self._life.teardown(self._src)
        except Exception as e:  # noqa: BLE001
            _fail(context, "Source.Teardown", e)
        return source_pb2.Source.Teardown.Response()

    # cdcflow sources have no lifecycle hooks; Conduit calls these, so they answer
    def LifecycleOnCreated(self, request, context):
        return source_pb2.Source.Lifecycle.OnCreated.Response()

    def LifecycleOnUpdated(self, request, context):
        return source_pb2.Source.Lifecycle.OnUpdated.Response()

    def LifecycleOnDeleted(self, request, context):
        return source_pb2.Source.Lifecycle.OnDeleted.Response()


class DestinationServicer(destination_pb2_grpc.DestinationPluginServicer):
    def __init__(self, plugin: ServedPlugin, life: _Lifecycle, connector_id: str):
        self._plugin, self._life, self._id = plugin, life, connector_id
        self._dst: Destination | None = None
        self._mw = middleware.DestinationMiddleware()

    def Configure(self, request, context):
        typed = _configure(self._plugin, self._plugin.destination_params, request.config, context)
        try:
            self._mw = middleware.DestinationMiddleware.from_settings(typed)
            dst = self._plugin.new_destination()
            dst.id = self._id
            dst.configure(middleware.without_sdk(typed))
            self._mw.attach(dst, self._id)
        except Exception as e:  # noqa: BLE001
            _fail(context, "Destination.Configure", e)
        self._dst = dst
        self._life.instances.append(dst)
        return destination_pb2.Destination.Configure.Response()

    def Open(self, request, context):
        if self._dst is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "Open before Configure")
        try:
            self._dst.open()
        except Exception as e:  # noqa: BLE001
            _fail(context, "Destination.Open", e)
        return destination_pb2.Destination.Open.Response()

    def Run(self, request_iterator, context):
        """Records in, acks out, one ack message per request message.

        A reader thread decodes request N+1 while this thread writes request N;
        requests that arrived while the destination wrote are written together
        (one ``write``, so one sync, for several messages). Every ack leaves
        only after the ``write`` holding its record returned. A destination with
        ``write_wire`` (``cdcflow.engine.fastpath.WireDestination``) gets the messages' bytes
        instead: no records are built.
        """
        if self._dst is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "Run before Open")
        inbox: queue.Queue = queue.Queue(maxsize=_INBOX_MESSAGES)
        done = threading.Event()
        store = default_store()
        # a destination that takes message bytes gets them undecoded
        wire = _WireMode(isinstance(self._dst, WireDestination) and not self._mw.active)  # chunks go through write
        threading.Thread(target=_read_requests, args=(request_iterator, store, inbox, done, wire),
                         name="destination-decode", daemon=True).start()
        try:
            ended = False
            while not ended:
                batch = [inbox.get()]
                count = _weight(batch[0])
                while count < WRITE_RECORDS:
                    try:
                        item = inbox.get_nowait()
                    except queue.Empty:
                        break
                    batch.append(item)
                    if not _is_message(item):
                        break
                    count += _weight(item)
                tail = batch.pop() if not _is_message(batch[-1]) else None
                if batch:
                    try:
                        malformed = yield from self._write_messages(batch, store, wire)
                    except InfrastructureError as e:  # an outage fails the stream; no record is nacked
                        _fail(context, "Destination.Run", e)
                    if malformed is not None:
                        _fail(context, "Destination.Run", malformed)
                if tail is _END:
                    ended = True
                elif tail is not None:
                    _fail(context, "Destination.Run", tail)
        finally:
            done.set()

    def _write_messages(self, batch: list[Any], store: SchemaStore,
                        wire: _WireMode) -> Generator[bytes, None, Exception | None]:
        """Write the inbox's messages (decoded, or bytes for ``write_wire``); yield their ack messages.

        Returns the error of a message that is not a batch message: the messages before it are
        written and acknowledged, as when the reader thread finds it, and the stream fails.
        """
        failure: Exception | None = None
        if wire.on and all(type(m) is bytes for m in batch):
            try:
                results = self._dst.write_wire(batch)
                if results is not NotImplemented:
                    if len(results) != len(batch):
                        raise CdcflowError(f"destination returned {len(results)} results for {len(batch)} messages")
                    if all(type(result) is not bytes for result in results):
                        wire.pause()
                    for result in results:
                        if type(result) is bytes:
                            yield result
                        else:
                            positions, failed = result
                            yield encode_acks(positions, {i: _decode_error(e) for i, (_, e) in failed.items()})
                    return None
                wire.on = False  # it declined: records from now on
            except Exception as e:  # noqa: BLE001 - nacked below, as a failed write
                failure = e
        decoded, malformed = _decode_all(batch, store)
        if decoded:
            # a malformed message makes write_wire refuse the lot: the ones before it go through write
            yield from self._write(decoded, failure if malformed is None else None)
        return malformed

    def _write(self, batch: list["_Decoded"], failure: Exception | None = None) -> Iterator[bytes]:
        """Write the messages' records with one ``write``; their ack messages. With ``failure``
        (a ``write_wire`` of them failed) nothing is written and every record is nacked."""
        good = [r for d in batch for r in d.records if r is not None]
        # the positions as they arrived: a destination may change its records
        sent = [[r.position if r is not None else d.failed[i][0] for i, r in enumerate(d.records)]
                if d.failed else [r.position for r in d.records] for d in batch]
        try:
            if failure is not None:
                raise failure
            mw = self._mw
            res = (mw.write(self._dst.write, good) if mw.active else self._dst.write(good)) if good else None
            if res is not None and len(res) != len(good):
                raise CdcflowError(f"destination returned {len(res)} results for {len(good)} records")
        except InfrastructureError:
            raise  # not the records' fault: Run fails the stream (UNAVAILABLE), the host retries the batch
        except Exception as e:  # noqa: BLE001 - the whole write failed: every record in it is nacked
            msg = str(e) if isinstance(e, CdcflowError) else f"{type(e).__name__}: {e}"
            log.error("write of %d records failed: %s", len(good), msg)
            res = [msg] * len(good)
        results = iter(res) if res is not None else None
        for d, positions in zip(batch, sent):
            if results is None and not d.failed:
                yield encode_acks(positions)
                continue
            errors: dict[int, str] = {}
            for i, r in enumerate(d.records):
                if r is None:
                    errors[i] = _decode_error(d.failed[i][1])
                elif results is not None:
                    err = next(results)
                    if err:
                        errors[i] = err
            yield encode_acks(positions, errors)

    def Stop(self, request, context):
        try:
            if self._dst is not None:
                self._dst.stop(request.last_position or None)
        except Exception as e:  # noqa: BLE001
            _fail(context, "Destination.Stop", e)
        return destination_pb2.Destination.Stop.Response()

    def Teardown(self, request, context):
        try:
            self._life.teardown(self._dst)
        except Exception as e:  # noqa: BLE001
            _fail(context, "Destination.Teardown", e)
        return destination_pb2.Destination.Teardown.Response()

    def LifecycleOnCreated(self, request, context):
        return destination_pb2.Destination.Lifecycle.OnCreated.Response()

    def LifecycleOnUpdated(self, request, context):
        return destination_pb2.Destination.Lifecycle.OnUpdated.Response()

    def LifecycleOnDeleted(self, request, context):
        return destination_pb2.Destination.Lifecycle.OnDeleted.Response()


class TransformServicer(transform_pb2_grpc.TransformPluginServicer):
    def __init__(self, plugin: ServedPlugin, life: _Lifecycle, connector_id: str):
        self._plugin, self._life, self._id = plugin, life, connector_id
        self._t: Transform | None = None

    def Specify(self, request, context):
        p = self._plugin
        return transform_pb2.Specify.Response(
            name=p.name, summary=p.summary, description=p.description, version=p.version, author=p.author,
            parameters=params_to_proto(p.params),
        )

    def Configure(self, request, context):
        typed = _configure(self._plugin, self._plugin.params, request.config, context)
        try:
            t = self._plugin.new_transform()
            t.id = self._id
            t.configure(typed)
        except Exception as e:  # noqa: BLE001
            _fail(context, "Transform.Configure", e)
        self._t = t
        self._life.instances.append(t)
        return transform_pb2.Configure.Response()

    def Open(self, request, context):
        if self._t is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "Open before Configure")
        try:
            self._t.open()
        except Exception as e:  # noqa: BLE001
            _fail(context, "Transform.Open", e)
        return transform_pb2.Open.Response()

    def Process(self, request_iterator, context):
        if self._t is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "Process before Open")
        store = default_store()
        P = transform_pb2.Process
        for data in request_iterator:
            failed: dict[int, tuple[bytes, Exception]] = {}
            try:
                records = from_wire(data, store, failed)
            except CdcflowError as e:  # the message itself is malformed
                _fail(context, "Transform.Process", e)
            errors = {i: f"cannot decode record: {e}" for i, (_, e) in failed.items()}
            good = [r for r in records if r is not None] if errors else records
            try:
                res = self._t.process(good) if good else []
                if len(res) != len(good):
                    raise CdcflowError(f"transform returned {len(res)} results for {len(good)} records")
                outs: list[Record] = []
                for r in res:
                    if isinstance(r, Record):
                        outs.append(r)
                    elif isinstance(r, list):
                        outs.extend(r)
                out_pbs = iter(to_proto(outs, store, structured="avro")) if outs else iter(())
            except Exception as e:  # noqa: BLE001
                _fail(context, "Transform.Process", e)
            resp = P.Response()
            results = resp.results
            it = iter(res)
            for i in range(len(records)):
                slot = results.add()
                if i in errors:
                    slot.error.message = errors[i]
                    continue
                r = next(it)
                if isinstance(r, Record):
                    slot.record.CopyFrom(next(out_pbs))
                elif isinstance(r, Filtered):
                    slot.filtered.SetInParent()
                elif isinstance(r, Failed):
                    slot.error.message = r.message
                else:
                    multiple = slot.multiple
                    multiple.SetInParent()
                    for _ in r:
                        multiple.records.append(next(out_pbs))
            yield resp

    def Teardown(self, request, context):
        try:
            self._life.teardown(self._t)
        except Exception as e:  # noqa: BLE001
            _fail(context, "Transform.Teardown", e)
        return transform_pb2.Teardown.Response()


# -- the process -----------------------------------------------------------------------
def _add_service(
    server: grpc.Server, servicer: Any, module: Any, service: str,
    raw_requests: frozenset[str] | set[str] = frozenset(), raw_responses: frozenset[str] | set[str] = frozenset(),
) -> None:
    """Serve ``servicer`` as the generated ``add_*_to_server`` would, except that the methods named
    in ``raw_requests`` / ``raw_responses`` take / give message bytes: the record streams, whose
    batch messages ``cdcflow.convert.protobuf.from_wire`` and ``framing`` parse and build whole."""
    descriptor = module.DESCRIPTOR.services_by_name[service]
    handlers = {}
    for method in descriptor.methods:
        request = None if method.name in raw_requests else GetMessageClass(method.input_type).FromString
        response = None if method.name in raw_responses else GetMessageClass(method.output_type).SerializeToString
        make = _HANDLER_KINDS[(method.client_streaming, method.server_streaming)]
        handlers[method.name] = make(getattr(servicer, method.name), request_deserializer=request,
                                     response_serializer=response)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(descriptor.full_name, handlers),))
    server.add_registered_method_handlers(descriptor.full_name, handlers)


_HANDLER_KINDS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


#: what a served plugin listens on unless the host sets CDCFLOW_PLUGIN_NETWORK
DEFAULT_NETWORK = "tcp" if os.name == "nt" else "unix"


def _bind(server: grpc.Server, env: Mapping[str, str]) -> tuple[str, str, str | None]:
    """Listen where the host asked; return (network, address, socket dir to remove).

    A unix socket by default, as go-plugin's servers (Conduit's connectors) use on every
    system but Windows: no port to pick or expose, and less overhead per message than
    loopback TCP. ``CDCFLOW_PLUGIN_NETWORK=tcp`` asks for TCP in the plugin port range.
    """
    if (env.get(hs.ENV_NETWORK) or DEFAULT_NETWORK) == "unix":
        parent = env.get(hs.ENV_UNIX_SOCKET_DIR) or None
        sock_dir = tempfile.mkdtemp(prefix="cdcflow-plugin-", dir=parent)
        path = os.path.join(sock_dir, "plugin.sock")
        server.add_insecure_port(f"unix:{path}")
        return "unix", path, sock_dir
    lo = hs.int_env(env, hs.ENV_MIN_PORT, 0)
    hi = hs.int_env(env, hs.ENV_MAX_PORT, 0)
    if lo <= 0 or hi < lo:
        port = server.add_insecure_port("127.0.0.1:0")
        return "tcp", f"127.0.0.1:{port}", None
    span = hi - lo + 1
    first = random.randrange(span)
    for k in range(min(span, 500)):
        p = lo + (first + k) % span
        try:
            if server.add_insecure_port(f"127.0.0.1:{p}") == p:
                return "tcp", f"127.0.0.1:{p}", None
        except RuntimeError:
            continue
    raise hs.PluginEnvError(f"no free port in [{lo}, {hi}]")


def _setup_logging(env: Mapping[str, str], stream: TextIO) -> None:
    root = logging.getLogger()
    if not root.handlers:
        h = logging.StreamHandler(stream)
        h.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        h.addFilter(REDACTOR)
        root.addHandler(h)
    level = env.get(hs.ENV_LOG_LEVEL, "info").upper()
    root.setLevel({"TRACE": "DEBUG", "WARN": "WARNING"}.get(level, level) if level in (
        "TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR") else "INFO")


def _watch_parent(shutdown: threading.Event) -> None:
    """A plugin outliving its host is an orphan: exit when the parent is gone."""
    parent = os.getppid()
    while not shutdown.wait(1.0):
        if os.getppid() != parent:
            log.warning("host process %d is gone; shutting down", parent)
            shutdown.set()


def serve(target: Any, *, env: Mapping[str, str] | None = None, stdout: TextIO | None = None,
          stderr: TextIO | None = None) -> int:
    """Serve ``target`` until asked to stop; return the process exit code."""
    env = os.environ if env is None else env
    err = stderr or sys.stderr
    try:
        hs.check_cookie(env)
        app_version = hs.negotiate_version(env)
        max_size = hs.int_env(env, hs.ENV_MAX_RECEIVE_RECORD_SIZE, hs.DEFAULT_MAX_RECORD_SIZE)
    except hs.PluginEnvError as e:
        print(str(e), file=err, flush=True)
        return 1
    plugin = describe_target(target)
    handshake_out = stdout or sys.stdout
    sys.stdout = err  # stray prints must never reach the handshake channel
    _setup_logging(env, err)

    utilities = env.get(hs.ENV_UTILITIES_TARGET)
    remote: RemoteSchemaStore | None = None
    if utilities:
        remote = RemoteSchemaStore(utilities, env.get(hs.ENV_TOKEN, ""))
        set_default_store(remote)

    # A plugin turns batches of thousands of records into objects and drops them a moment later:
    # with the default first-generation threshold (700 allocations) the collector walks each
    # batch's young records many times over.
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    connector_id = env.get(hs.ENV_CONNECTOR_ID, "")
    life = _Lifecycle()
    shutdown = threading.Event()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="plugin-rpc"),
        options=[("grpc.max_receive_message_length", max_size), ("grpc.max_send_message_length", max_size)],
    )
    health_servicer = health.HealthServicer()
    health_servicer.set(hs.HEALTH_SERVICE, health_pb2.HealthCheckResponse.SERVING)
    health_servicer.set(hs.CDCFLOW_HEALTH_SERVICE, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)

    def on_shutdown(request: bytes, context: grpc.ServicerContext) -> bytes:
        shutdown.set()
        return b""

    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("plugin.GRPCController", {
        "Shutdown": grpc.unary_unary_rpc_method_handler(
            on_shutdown, request_deserializer=lambda b: b, response_serializer=lambda b: b),
    }),))
    if plugin.kind == TRANSFORM:
        _add_service(server, TransformServicer(plugin, life, connector_id), transform_pb2, "TransformPlugin",
                     raw_requests={"Process"})
    else:
        specifier_pb2_grpc.add_SpecifierPluginServicer_to_server(SpecifierServicer(plugin), server)
        if plugin.new_source is not None:
            _add_service(server, SourceServicer(plugin, life, connector_id, max_size), source_pb2, "SourcePlugin",
                         raw_responses={"Run"})
        if plugin.new_destination is not None:
            _add_service(server, DestinationServicer(plugin, life, connector_id), destination_pb2,
                         "DestinationPlugin", raw_requests={"Run"}, raw_responses={"Run"})

    try:
        network, address, sock_dir = _bind(server, env)
    except hs.PluginEnvError as e:
        print(str(e), file=err, flush=True)
        return 1
    server.start()
    line = hs.HandshakeLine(hs.CORE_PROTOCOL_VERSION, app_version, network, address)
    handshake_out.write(line.format() + "\n")
    handshake_out.flush()
    log.debug("serving %s %s %s on %s:%s", plugin.kind, plugin.name, plugin.version, network, address)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: shutdown.set())
    threading.Thread(target=_watch_parent, args=(shutdown,), name="parent-watch", daemon=True).start()
    shutdown.wait()
    life.teardown_all()
    server.stop(grace=2.0).wait()
    if remote is not None:
        remote.close()
    if sock_dir:
        shutil.rmtree(sock_dir, ignore_errors=True)
    return 0
