"""The host side: specify standalone plugins and drive them as cdcflow plugins.

``StandaloneSource``, ``StandaloneDestination`` and ``StandaloneTransform``
implement the SDK interfaces (``cdcflow.sdk``) over connector.v2 / transform.v1,
so the runtime drives a plugin process exactly like an in-process plugin.
Delivery is strict: ``write`` returns only after the plugin acknowledged every
record, and a plugin that dies mid-stream raises ``PluginCrashedError``; nothing
it had not acknowledged counts as delivered.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import grpc

from ..convert.protobuf import from_proto, from_wire
from ..errors import PluginCrashedError
from ..params import Parameter
from ..pb.connector.v2 import destination_pb2, source_pb2, specifier_pb2
from ..pb.opencdc.v1 import opencdc_pb2
from ..pb.transform.v1 import transform_pb2
from ..record import Record
from ..schemas import SchemaStore, default_store
from ..sdk import FILTERED, Destination, Failed, Result, Source, Transform
from .framing import encode_acks, frame_records
from .process import HostOptions, PluginCallError, PluginProcess
from .schema_service import host_services
from .spec import CONNECTOR, TRANSFORM, PluginSpec, params_from_proto, settings_to_wire

__all__ = [
    "HostOptions", "PluginCallError", "PluginProcess", "PluginSpec", "StandaloneDestination",
    "StandaloneSource", "StandaloneTransform", "specify", "start_plugin",
]

log = logging.getLogger(__name__)

_SPECIFY = "/connector.v2.SpecifierPlugin/Specify"
_TRANSFORM_SPECIFY = "/transform.v1.TransformPlugin/Specify"
# RPCs probed to learn which sides a Conduit plugin implements (see _has_service)
_SOURCE_PROBE = "/connector.v2.SourcePlugin/Stop"
_DESTINATION_PROBE = "/connector.v2.DestinationPlugin/Stop"
#: a request no protobuf parser accepts (a truncated varint): the server rejects
#: it before any handler runs, so probing a method has no side effect
_UNPARSABLE = b"\xff"
_CLOSE = object()


def start_plugin(
    path: str | Path, *, name: str | None = None, connector_id: str = "", options: HostOptions | None = None
) -> PluginProcess:
    """Start ``path`` with the host's schema service target and token in its environment."""
    services = host_services()
    return PluginProcess(
        path, name=name, connector_id=connector_id, options=options,
        utilities_target=services.target, token=services.token,
    ).start()


def _has_service(proc: PluginProcess, method: str, timeout: float) -> bool:
    call = proc.channel.unary_unary(method, request_serializer=lambda _: _UNPARSABLE,
                                    response_deserializer=lambda b: b)
    try:
        call(None, timeout=timeout)
    except grpc.RpcError as e:
        return e.code() is not grpc.StatusCode.UNIMPLEMENTED
    return True


def _specify_running(proc: PluginProcess, timeout: float) -> PluginSpec:
    from ..pb.connector.v2 import specifier_pb2_grpc
    from ..pb.transform.v1 import transform_pb2_grpc

    try:
        resp = specifier_pb2_grpc.SpecifierPluginStub(proc.channel).Specify(
            specifier_pb2.Specifier.Specify.Request(), timeout=timeout)
    except grpc.RpcError as e:
        if e.code() is not grpc.StatusCode.UNIMPLEMENTED:
            raise proc.rpc_failed(e, "Specify") from None
    else:
        s = resp.specification
        return PluginSpec(
            name=s.name, version=s.version, summary=s.summary, description=s.description, author=s.author,
            kind=CONNECTOR, source_params=params_from_proto(s.source_params),
            destination_params=params_from_proto(s.destination_params),
            has_source=_has_service(proc, _SOURCE_PROBE, timeout),
            has_destination=_has_service(proc, _DESTINATION_PROBE, timeout),
        )
    try:
        t = transform_pb2_grpc.TransformPluginStub(proc.channel).Specify(
            transform_pb2.Specify.Request(), timeout=timeout)
    except grpc.RpcError as e:
        if e.code() is grpc.StatusCode.UNIMPLEMENTED:
            raise PluginCrashedError(
                proc.name, "serves neither connector.v2.SpecifierPlugin nor transform.v1.TransformPlugin") from None
        raise proc.rpc_failed(e, "Specify") from None
    return PluginSpec(
        name=t.name, version=t.version, summary=t.summary, description=t.description, author=t.author,
        kind=TRANSFORM, params=params_from_proto(t.parameters),
    )


def specify(path: str | Path, *, timeout: float = 10.0, options: HostOptions | None = None) -> PluginSpec:
    """Start the plugin at ``path``, ask for its specification, stop it."""
    opts = options or HostOptions(start_timeout=timeout, stop_timeout=min(timeout, 5.0))
    proc = start_plugin(path, options=opts)
    try:
        return _specify_running(proc, timeout)
    finally:
        proc.stop()


#: records converted per message while the plugin works on the previous one
PIPELINE_RECORDS = 2_000
#: ... except the first message of a batch: the plugin waits for it
FIRST_MESSAGE_RECORDS = 500


def _slices(n: int) -> Iterator[tuple[int, int]]:
    """(start, stop) of the records of each message of an ``n``-record batch."""
    start = 0
    stop = min(n, FIRST_MESSAGE_RECORDS)
    while start < n:
        yield start, stop
        start, stop = stop, min(n, stop + PIPELINE_RECORDS)
_AckResponse = destination_pb2.Destination.Run.Response


def _raw_stream(channel: grpc.Channel, method: str, response_type: Any) -> Any:
    """A bidirectional stream whose requests are already-encoded message bytes (responses too
    when ``response_type`` is None)."""
    return channel.stream_stream(method, request_serializer=None,
                                 response_deserializer=response_type.FromString if response_type else None)


class _RequestStream:
    """The host's half of a bidirectional stream: a queue the gRPC client drains."""

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.closed = False

    def put(self, request: Any) -> None:
        self._q.put(request)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._q.put(_CLOSE)

    def __iter__(self) -> Iterator[Any]:
        while True:
            item = self._q.get()
            if item is _CLOSE:
                return
            yield item


class _PluginClient:
    """What the three adapters share: the process, its spec, calls, conversion."""

    _kind = CONNECTOR

    def __init__(
        self, path: str | Path, *, name: str | None = None, options: HostOptions | None = None,
        store: SchemaStore | None = None,
    ):
        self.path = Path(path)
        self._name = name or self.path.name
        self.options = options or HostOptions()
        self._store = store
        self.proc: PluginProcess | None = None
        self.spec: PluginSpec | None = None
        self._stub: Any = None  # the gRPC stub of the plugin's service, set by configure
        self._requests: _RequestStream | None = None  # the open bidirectional stream's requests
        self._responses: Any = None  # ... and its responses (destination and transform)

    @property
    def plugin_name(self) -> str:
        return self._name

    def _start(self) -> PluginProcess:
        if self.proc is None:
            self.proc = start_plugin(self.path, name=self._name, connector_id=getattr(self, "id", "") or "",
                                     options=self.options)
            try:
                self.spec = _specify_running(self.proc, self.options.call_timeout)
            except BaseException:
                self.proc.stop()
                self.proc = None
                raise
        return self.proc

    def _params(self, side: str) -> Mapping[str, Parameter]:
        s = self.spec
        if s is None:
            return {}
        return {"source": s.source_params, "destination": s.destination_params}.get(side, s.params)

    def _call(self, fn: Any, request: Any, method: str) -> Any:
        try:
            return fn(request, timeout=self.options.call_timeout)
        except grpc.RpcError as e:
            raise self.proc.rpc_failed(e, method) from None

    @property
    def store(self) -> SchemaStore:
        return self._store or default_store()

    def _structured(self) -> str:
        mode = self.options.structured
        if mode == "auto":
            return "avro" if self.proc is not None and self.proc.is_cdcflow else "struct"
        return mode

    def _drain_stream(self) -> None:
        """Close the bidirectional stream and read what the plugin still sends until it ends it."""
        if self._requests is not None:
            self._requests.close()
            try:
                for _ in self._responses:
                    pass
            except grpc.RpcError:
                pass

    def _request_teardown(self, request: Any, method: str) -> None:
        """Ask a live plugin to tear down; a failure is only logged (teardown runs after failures too)."""
        if self.proc is not None and self.proc.alive() and self._stub is not None:
            try:
                self._call(self._stub.Teardown, request, method)
            except Exception as e:  # noqa: BLE001 - teardown runs after failures too
                log.warning("plugin %s: %s", self._name, e)

    def _shutdown(self) -> None:
        if self.proc is not None:
            self.proc.stop()


# -- source --------------------------------------------------------------------------
class StandaloneSource(_PluginClient, Source):
    """A source plugin process. ``read`` never blocks: it returns what has arrived."""

    def __init__(self, path: str | Path, **kw: Any):
        super().__init__(path, **kw)
        self._reader: threading.Thread | None = None
        self._buf: collections.deque[Record] = collections.deque()
        self._cond = threading.Condition()
        self._received_last: bytes | None = None
        self._ended = False
        self._error: BaseException | None = None
        self._stopping = False
        self._call_obj: Any = None

    def configure(self, config: Mapping[str, Any]) -> None:
        from ..pb.connector.v2 import source_pb2_grpc

        super().configure(config)
        proc = self._start()
        self._stub = source_pb2_grpc.SourcePluginStub(proc.channel)
        wire = settings_to_wire(config, self._params("source"))
        self._call(self._stub.Configure, source_pb2.Source.Configure.Request(config=wire), "Source.Configure")

    def open(self, position: bytes | None, partition: str = "") -> None:
        self._call(self._stub.Open, source_pb2.Source.Open.Request(position=position or b""), "Source.Open")
        self._requests = _RequestStream()
        run = self.proc.channel.stream_stream(  # records arrive as message bytes: from_wire reads them
            "/connector.v2.SourcePlugin/Run", request_serializer=source_pb2.Source.Run.Request.SerializeToString,
            response_deserializer=None)
        self._call_obj = run(iter(self._requests))
        self._reader = threading.Thread(target=self._receive, name=f"plugin-{self._name}-run", daemon=True)
        self._reader.start()

    def _receive(self) -> None:
        store = self.store
        try:
            for data in self._call_obj:
                records = from_wire(data, store)
                if not records:
                    continue
                with self._cond:
                    self._buf.extend(records)
                    self._received_last = records[-1].position
                    self._cond.notify_all()
        except grpc.RpcError as e:
            if not (self._requests.closed and e.code() is grpc.StatusCode.CANCELLED):
                self._error = self.proc.rpc_failed(e, "Source.Run")
        except Exception as e:  # noqa: BLE001 - surfaced to the reader of records
            self._error = e
        finally:
            with self._cond:
                self._ended = True
                self._cond.notify_all()

    def read(self, max_records: int) -> list[Record] | None:
        buf = self._buf
        if buf:
            n = min(max_records, len(buf))
            return [buf.popleft() for _ in range(n)]
        if self._error is not None:
            raise self._error
        if self._ended:
            if self._stopping:
                return None
            raise self.proc.crashed("closed its Run stream before it was stopped")
        return []

    def ack(self, positions: Sequence[bytes]) -> None:
        if positions:
            self._requests.put(source_pb2.Source.Run.Request(ack_positions=list(positions)))

    def stop(self) -> bytes | None:
        """Ask the plugin to stop; wait until its last record arrived. The Run
        stream stays open so acks for those records still reach the plugin."""
        self._stopping = True
        last = self._call(self._stub.Stop, source_pb2.Source.Stop.Request(), "Source.Stop").last_position
        if last:
            deadline = time.monotonic() + self.options.call_timeout
            with self._cond:
                while self._received_last != last and not self._ended:
                    if not self._cond.wait(timeout=max(0.0, deadline - time.monotonic())):
                        raise PluginCrashedError(
                            self._name, f"named last position {last!r} in Stop but never sent that record")
            if self._error is not None:
                raise self._error
        return last or None

    def teardown(self) -> None:
        try:
            if self._requests is not None:
                self._requests.close()  # all acks are queued before this
                self._reader.join(timeout=self.options.stop_timeout)
                if self._reader.is_alive():
                    self._call_obj.cancel()
                    self._reader.join(timeout=self.options.stop_timeout)
            self._request_teardown(source_pb2.Source.Teardown.Request(), "Source.Teardown")
        finally:
            self._shutdown()


# -- destination ---------------------------------------------------------------------
class StandaloneDestination(_PluginClient, Destination):
    """A destination plugin process; ``write`` returns when every record is acknowledged."""

    def configure(self, config: Mapping[str, Any]) -> None:
        from ..pb.connector.v2 import destination_pb2_grpc

        super().configure(config)
        proc = self._start()
        self._stub = destination_pb2_grpc.DestinationPluginStub(proc.channel)
        wire = settings_to_wire(config, self._params("destination"))
        self._call(self._stub.Configure, destination_pb2.Destination.Configure.Request(config=wire),
                   "Destination.Configure")

    def open(self) -> None:
        self._call(self._stub.Open, destination_pb2.Destination.Open.Request(), "Destination.Open")
        self._requests = _RequestStream()
        run = _raw_stream(self.proc.channel, "/connector.v2.DestinationPlugin/Run", None)
        self._responses = run(iter(self._requests))

    def write(self, records: Sequence[Record]) -> Sequence[str | None] | None:
        if not records:
            return None
        store, mode, limit = self.store, self._structured(), self.options.max_record_size
        results: list[str | None] = [None] * len(records)
        expected: list[bytes] = []  # positions in the order they were sent
        sizes: list[int] = []  # records per message sent
        failed = False
        # Convert and send in slices: the plugin decodes and writes one slice
        # while the host converts the next. The first slice is short, so the
        # plugin starts early instead of idling while the host converts.
        for start, stop in _slices(len(records)):
            messages, oversized = frame_records(records[start:stop], store, mode, limit, start)
            for i, err in oversized.items():
                results[i] = err
                failed = True
            for data, indexes in messages:
                self._requests.put(data)
                expected.extend(records[i].position or b"" for i in indexes)
                sizes.append(len(indexes))
        sent_index = [i for i in range(len(records)) if results[i] is None] if failed else None
        k = 0  # records acknowledged so far
        m = k_m = 0  # the next message whose acks may come as one response, and its first record
        while k < len(expected):
            try:
                resp = next(self._responses)
            except StopIteration:
                raise self.proc.crashed(
                    f"closed its Run stream with {len(expected) - k} records of the batch unacknowledged") from None
            except grpc.RpcError as e:
                err = self.proc.rpc_failed(e, "Destination.Run")
                if isinstance(err, PluginCrashedError):
                    err = self.proc.crashed(
                        f"died with {len(expected) - k} records of the batch unacknowledged ({e.code().name})")
                raise err from None
            while m < len(sizes) and k_m < k:
                k_m += sizes[m]
                m += 1
            if k == k_m and m < len(sizes) and resp == encode_acks(expected[k:k + sizes[m]]):
                k += sizes[m]  # the usual answer: every record of the next message written
                continue
            for ack in _AckResponse.FromString(resp).acks:
                if k >= len(expected):
                    raise PluginCrashedError(self._name, "acknowledged more records than it was sent")
                if ack.position != expected[k]:
                    raise PluginCrashedError(
                        self._name, f"acknowledged position {ack.position!r}, expected {expected[k]!r} "
                        "(acks must come in the order records were sent)")
                if ack.error:
                    results[sent_index[k] if sent_index is not None else k] = ack.error
                    failed = True
                k += 1
        return results if failed else None

    def stop(self, last_position: bytes | None) -> None:
        self._call(self._stub.Stop, destination_pb2.Destination.Stop.Request(last_position=last_position or b""),
                   "Destination.Stop")

    def teardown(self) -> None:
        try:
            self._drain_stream()
            self._request_teardown(destination_pb2.Destination.Teardown.Request(), "Destination.Teardown")
        finally:
            self._shutdown()


# -- transform -----------------------------------------------------------------------
class StandaloneTransform(_PluginClient, Transform):
    """A transform plugin process (transform.v1): one response per batch, one result per record."""

    _kind = TRANSFORM

    def configure(self, config: Mapping[str, Any]) -> None:
        from ..pb.transform.v1 import transform_pb2_grpc

        super().configure(config)
        proc = self._start()
        if self.spec.kind != TRANSFORM:
            raise PluginCrashedError(self._name, "is a connector plugin, not a transform")
        self._stub = transform_pb2_grpc.TransformPluginStub(proc.channel)
        wire = settings_to_wire(config, self._params("transform"))
        self._call(self._stub.Configure, transform_pb2.Configure.Request(config=wire), "Transform.Configure")

    def open(self) -> None:
        self._call(self._stub.Open, transform_pb2.Open.Request(), "Transform.Open")
        self._requests = _RequestStream()
        process = _raw_stream(self.proc.channel, "/transform.v1.TransformPlugin/Process", transform_pb2.Process.Response)
        self._responses = process(iter(self._requests))

    def process(self, records: Sequence[Record]) -> list[Result]:
        if not records:
            return []
        store = self.store
        messages, oversized = frame_records(records, store, self._structured(), self.options.max_record_size)
        for data, _ in messages:
            self._requests.put(data)
        results: list[Any] = [None] * len(records)
        for i, err in oversized.items():
            results[i] = Failed(err)
        out_pbs: list[opencdc_pb2.Record] = []
        shape: list[tuple[int, int, int]] = []  # (index, start in out_pbs, count; -1 = single record)
        for _, indexes in messages:
            try:
                resp = next(self._responses)
            except StopIteration:
                raise self.proc.crashed("closed its Process stream mid-batch") from None
            except grpc.RpcError as e:
                raise self.proc.rpc_failed(e, "Transform.Process") from None
            if len(resp.results) != len(indexes):
                raise PluginCrashedError(
                    self._name, f"answered a batch of {len(indexes)} records with {len(resp.results)} results")
            for i, res in zip(indexes, resp.results):
                which = res.WhichOneof("result")
                if which == "record":
                    shape.append((i, len(out_pbs), -1))
                    out_pbs.append(res.record)
                elif which == "multiple":
                    shape.append((i, len(out_pbs), len(res.multiple.records)))
                    out_pbs.extend(res.multiple.records)
                elif which == "filtered":
                    results[i] = FILTERED
                elif which == "error":
                    results[i] = Failed(res.error.message or "transform plugin reported an error")
                else:
                    raise PluginCrashedError(self._name, f"sent an empty result for record {i} of the batch")
        converted = from_proto(out_pbs, store) if out_pbs else []
        for i, start, count in shape:
            results[i] = converted[start] if count < 0 else converted[start:start + count]
        return results

    def teardown(self) -> None:
        try:
            self._drain_stream()
            self._request_teardown(transform_pb2.Teardown.Request(), "Transform.Teardown")
        finally:
            self._shutdown()
