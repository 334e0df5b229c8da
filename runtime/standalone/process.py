"""One running plugin executable: launch, handshake, gRPC channel, logs, stop.

Everything that can go wrong at this level (the executable dies, prints the
wrong thing, never becomes healthy) becomes a ``PluginCrashedError`` naming
the plugin and carrying what it printed, its exit code and the tail of its
stderr, because that is where the plugin wrote why.
"""

from __future__ import annotations

import collections
import json
import logging
import queue
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ..errors import CdcflowError, ConfigError, InfrastructureError, PluginCrashedError
from .handshake import (
    CDCFLOW_HEALTH_SERVICE,
    DEFAULT_MAX_PORT,
    DEFAULT_MAX_RECORD_SIZE,
    DEFAULT_MIN_PORT,
    HEALTH_SERVICE,
    SHUTDOWN_METHOD,
    HandshakeLine,
    parse_handshake,
    plugin_env,
)

_STDERR_TAIL = 30
_LEVELS = {
    "trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
    "warning": logging.WARNING, "error": logging.ERROR, "fatal": logging.CRITICAL, "panic": logging.CRITICAL,
    "critical": logging.CRITICAL,
}


@dataclass(frozen=True)
class HostOptions:
    """How a host runs standalone plugins.

    ``max_record_size`` bounds one gRPC message both ways (and is passed to the
    plugin); ``structured`` picks how structured data travels to the plugin:
    ``avro`` (lossless, cdcflow plugins), ``struct`` (google.protobuf.Struct,
    what Conduit plugins expect) or ``auto`` (avro when the plugin is served by
    cdcflow, struct otherwise).
    """

    max_record_size: int = DEFAULT_MAX_RECORD_SIZE
    start_timeout: float = 15.0
    stop_timeout: float = 5.0
    call_timeout: float = 60.0
    log_level: str = "info"
    min_port: int = DEFAULT_MIN_PORT
    max_port: int = DEFAULT_MAX_PORT
    structured: str = "auto"
    extra_env: Mapping[str, str] = field(default_factory=dict)


class PluginCallError(CdcflowError):
    """A plugin answered an RPC with an error status (it is still running)."""

    def __init__(self, plugin: str, method: str, code: str, details: str):
        self.plugin, self.method, self.code, self.details = plugin, method, code, details
        super().__init__(f"plugin {plugin}: {method} failed: {code}: {details}")


class PluginProcess:
    """A started plugin executable and the gRPC channel to it."""

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        connector_id: str = "",
        options: HostOptions | None = None,
        utilities_target: str | None = None,
        token: str | None = None,
    ):
        self.path = Path(path)
        self.name = name or self.path.name
        self.options = options or HostOptions()
        self.log = logging.getLogger(f"cdcflow.plugin.{self.name}")
        self._connector_id = connector_id
        self._utilities_target = utilities_target
        self._token = token
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL)
        self._handshake_q: queue.Queue[bytes | None] = queue.Queue(maxsize=1)
        self._threads: list[threading.Thread] = []
        self.channel: grpc.Channel | None = None
        self.handshake: HandshakeLine | None = None
        self.is_cdcflow = False

    # -- start ----------------------------------------------------------------------
    def start(self) -> "PluginProcess":
        opts = self.options
        env = plugin_env(
            connector_id=self._connector_id, log_level=opts.log_level, max_record_size=opts.max_record_size,
            utilities_target=self._utilities_target, token=self._token,
            min_port=opts.min_port, max_port=opts.max_port,
        )
        env.update(opts.extra_env)
        try:
            self._proc = subprocess.Popen(
                [str(self.path)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, close_fds=True,
            )
        except OSError as e:
            raise PluginCrashedError(self.name, f"cannot start {self.path}: {e}") from None
        for target, stream in ((self._pump_stdout, "stdout"), (self._pump_stderr, "stderr")):
            t = threading.Thread(target=target, name=f"plugin-{self.name}-{stream}", daemon=True)
            t.start()
            self._threads.append(t)
        try:
            self.handshake = self._await_handshake()
            self._connect()
        except BaseException:
            self._kill()
            raise
        return self

    def _await_handshake(self) -> HandshakeLine:
        try:
            raw = self._handshake_q.get(timeout=self.options.start_timeout)
        except queue.Empty:
            raise self.crashed(f"printed no handshake line within {self.options.start_timeout:g}s") from None
        if raw is None:
            raise self.crashed("exited before the handshake")
        return parse_handshake(raw.decode("utf-8", "replace"), self.name)

    def _connect(self) -> None:
        size = self.options.max_record_size
        self.channel = grpc.insecure_channel(
            self.handshake.grpc_target,
            options=[("grpc.max_receive_message_length", size), ("grpc.max_send_message_length", size)],
        )
        stub = health_pb2_grpc.HealthStub(self.channel)
        deadline = time.monotonic() + self.options.start_timeout
        last = "no answer"
        while True:
            try:
                status = stub.Check(health_pb2.HealthCheckRequest(service=HEALTH_SERVICE), timeout=1.0).status
                if status == health_pb2.HealthCheckResponse.SERVING:
                    break
                last = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
            except grpc.RpcError as e:
                last = f"{e.code().name}: {e.details()}"
            if self._proc.poll() is not None:
                raise self.crashed("exited before it became healthy")
            if time.monotonic() > deadline:
                raise self.crashed(f"health service {HEALTH_SERVICE!r} not SERVING within "
                                   f"{self.options.start_timeout:g}s (last: {last})")
            time.sleep(0.02)
        try:
            status = stub.Check(health_pb2.HealthCheckRequest(service=CDCFLOW_HEALTH_SERVICE), timeout=2.0).status
            self.is_cdcflow = status == health_pb2.HealthCheckResponse.SERVING
        except grpc.RpcError:
            self.is_cdcflow = False

    # -- output ---------------------------------------------------------------------
    def _pump_stdout(self) -> None:
        out = self._proc.stdout
        first = True
        for raw in iter(out.readline, b""):
            if first:
                first = False
                self._handshake_q.put(raw)
                continue
            self._forward(raw, logging.INFO)
        if first:
            self._handshake_q.put(None)

    def _pump_stderr(self) -> None:
        for raw in iter(self._proc.stderr.readline, b""):
            text = self._forward(raw, logging.INFO)
            if text:
                self._stderr_tail.append(text)

    def _forward(self, raw: bytes, level: int) -> str:
        """Log one line of the plugin's output; JSON log lines keep their level."""
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not text:
            return text
        msg = text
        if text.startswith("{"):
            try:
                obj = json.loads(text)
            except ValueError:
                obj = None
            if isinstance(obj, dict):
                lvl = obj.get("level", obj.get("@level"))
                level = _LEVELS.get(str(lvl).lower(), level) if lvl is not None else level
                m = obj.get("message", obj.get("@message", obj.get("msg")))
                if m is not None:
                    rest = {k: v for k, v in obj.items()
                            if k not in ("level", "@level", "message", "@message", "msg", "time", "@timestamp")}
                    msg = f"{m} {json.dumps(rest, default=str)}" if rest else str(m)
        self.log.log(level, "%s", msg)
        return text

    # -- state and errors -----------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_code(self, wait: float = 0.0) -> int | None:
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout=wait) if wait > 0 else self._proc.poll()
        except subprocess.TimeoutExpired:
            return None

    def crashed(self, what: str) -> PluginCrashedError:
        """A PluginCrashedError describing ``what`` with the exit code and stderr tail."""
        code = self.exit_code(wait=2.0) if self._proc is not None else None
        if code is not None:
            # the pipes close when the process exits; let the readers catch up
            for t in self._threads:
                t.join(timeout=1.0)
        parts = [what]
        if code is not None:
            parts.append(f"exit code {code}")
        tail = list(self._stderr_tail)[-10:]
        if tail:
            parts.append("stderr:\n  " + "\n  ".join(tail))
        return PluginCrashedError(self.name, "; ".join(parts))

    def rpc_failed(self, e: grpc.RpcError, method: str) -> CdcflowError:
        """Typed error for a failed call: crashed if the process is gone, else the plugin's answer."""
        code = e.code()
        gone = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED) and self.exit_code(1.0) is not None
        if gone or not self.alive():
            return self.crashed(f"died during {method} ({code.name})")
        if code is grpc.StatusCode.INVALID_ARGUMENT and method.endswith("Configure"):
            return ConfigError(self.name, None, "plugin", e.details() or "settings rejected by the plugin")
        if code is grpc.StatusCode.UNAVAILABLE:  # the plugin's service is down (server.py's _fail)
            from .server import OUTAGE_ENDPOINT_KEY, OUTAGE_SERVICE_KEY

            trailers = dict(e.trailing_metadata() or ())
            return InfrastructureError(f"plugin {self.name}: {method}: {e.details() or 'unavailable'}",
                                       service=trailers.get(OUTAGE_SERVICE_KEY) or f"plugin {self.name}",
                                       endpoint=trailers.get(OUTAGE_ENDPOINT_KEY) or None)
        return PluginCallError(self.name, method, code.name, e.details() or "")

    # -- stop -----------------------------------------------------------------------
    def stop(self) -> int | None:
        """GRPCController.Shutdown, wait; then SIGTERM, wait; then SIGKILL. Returns the exit code."""
        if self._proc is None:
            return None
        timeout = self.options.stop_timeout
        if self._proc.poll() is None and self.channel is not None:
            shutdown = self.channel.unary_unary(
                SHUTDOWN_METHOD, request_serializer=lambda _: b"", response_deserializer=lambda _: None
            )
            try:
                shutdown(None, timeout=timeout)
            except grpc.RpcError as e:
                self.log.debug("GRPCController.Shutdown: %s", e.code().name)
        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.log.warning("plugin %s did not exit %gs after Shutdown; terminating", self.name, timeout)
            self._proc.terminate()
            try:
                self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.log.warning("plugin %s ignored SIGTERM; killing", self.name)
                self._kill()
        self._close()
        return self._proc.returncode

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._close()

    def _close(self) -> None:
        if self.channel is not None:
            self.channel.close()
        for t in self._threads:
            t.join(timeout=2.0)
        for s in (self._proc.stdout, self._proc.stderr):
            if s is not None:
                s.close()

    def __enter__(self) -> "PluginProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
