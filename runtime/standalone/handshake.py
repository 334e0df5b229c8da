"""The go-plugin launch handshake, both sides.

A host starts a plugin executable with a fixed environment (the magic cookie
proves a host launched it; the rest tells it ports, limits and where the host's
services are). The plugin answers with one stdout line
``CORE|APP|NETWORK|ADDRESS|PROTOCOL[|TLS]`` naming its gRPC address. These are
wire facts of HashiCorp go-plugin as Conduit configures it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from ..errors import CdcflowError, PluginCrashedError

MAGIC_COOKIE_KEY = "CONDUIT_PLUGIN_MAGIC_COOKIE"
MAGIC_COOKIE_VALUE = "204e8e812c3a1bb73b838928c575b42a105dd2e9aa449be481bc4590486df53f"

CORE_PROTOCOL_VERSION = 1  # go-plugin's own protocol, always 1
APP_PROTOCOL_VERSION = 2  # Conduit connector protocol v2
PROTOCOL_GRPC = "grpc"

ENV_PROTOCOL_VERSIONS = "PLUGIN_PROTOCOL_VERSIONS"
ENV_MIN_PORT = "PLUGIN_MIN_PORT"
ENV_MAX_PORT = "PLUGIN_MAX_PORT"
ENV_UNIX_SOCKET_DIR = "PLUGIN_UNIX_SOCKET_DIR"
ENV_CONNECTOR_ID = "CONDUIT_CONNECTOR_ID"
ENV_LOG_LEVEL = "CONDUIT_CONNECTOR_LOG_LEVEL"
ENV_MAX_RECEIVE_RECORD_SIZE = "CONDUIT_CONNECTOR_MAX_RECEIVE_RECORD_SIZE"
ENV_UTILITIES_TARGET = "CONDUIT_CONNECTOR_UTILITIES_GRPC_TARGET"
ENV_TOKEN = "CONDUIT_CONNECTOR_TOKEN"
#: cdcflow's own switch: serve on a unix socket instead of loopback TCP
ENV_NETWORK = "CDCFLOW_PLUGIN_NETWORK"

#: gRPC metadata key carrying the token on calls to the host's services
TOKEN_METADATA_KEY = "conduit-connector-token"

#: Conduit's default is 4 MiB, too small for wide rows; ours is configurable
DEFAULT_MAX_RECORD_SIZE = 64 * 1024 * 1024
DEFAULT_MIN_PORT = 10000
DEFAULT_MAX_PORT = 25000


class HandshakeError(PluginCrashedError):
    """The plugin's first stdout line is not a usable handshake line."""


@dataclass(frozen=True)
class HandshakeLine:
    core_version: int
    app_version: int
    network: str  # tcp | unix
    address: str  # host:port or socket path
    protocol: str = PROTOCOL_GRPC
    tls_cert: str = ""

    @property
    def grpc_target(self) -> str:
        """The address as a gRPC channel target."""
        if self.network == "unix":
            return f"unix:{self.address}" if self.address.startswith("/") else f"unix:{os.path.abspath(self.address)}"
        return self.address

    def format(self) -> str:
        return "|".join(
            (str(self.core_version), str(self.app_version), self.network, self.address, self.protocol, self.tls_cert)
        )


def parse_handshake(line: str, plugin: str) -> HandshakeLine:
    """Parse the handshake line printed by ``plugin``; HandshakeError says what is wrong."""
    text = line.strip()
    shown = text if len(text) <= 200 else text[:200] + "..."
    parts = text.split("|")
    if len(parts) < 4:
        raise HandshakeError(
            plugin, f"expected a handshake line CORE|APP|NETWORK|ADDRESS|PROTOCOL on stdout, got {shown!r}"
        )
    try:
        core, app = int(parts[0]), int(parts[1])
    except ValueError:
        raise HandshakeError(plugin, f"handshake line {shown!r}: versions must be integers") from None
    if core != CORE_PROTOCOL_VERSION:
        raise HandshakeError(plugin, f"handshake line {shown!r}: core protocol {core}, expected {CORE_PROTOCOL_VERSION}")
    if app != APP_PROTOCOL_VERSION:
        raise HandshakeError(plugin, f"handshake line {shown!r}: plugin speaks protocol {app}, cdcflow speaks {APP_PROTOCOL_VERSION}")
    network, address = parts[2], parts[3]
    if network not in ("tcp", "unix"):
        raise HandshakeError(plugin, f"handshake line {shown!r}: unsupported network {network!r} (tcp or unix)")
    if not address:
        raise HandshakeError(plugin, f"handshake line {shown!r}: empty address")
    protocol = parts[4] if len(parts) > 4 and parts[4] else "netrpc"  # go-plugin's default when absent
    if protocol != PROTOCOL_GRPC:
        raise HandshakeError(plugin, f"handshake line {shown!r}: protocol {protocol!r}, only grpc is supported")
    tls = parts[5] if len(parts) > 5 else ""
    if len(tls) > 50:  # go-plugin only treats longer values as an AutoMTLS certificate
        raise HandshakeError(plugin, "handshake line carries a TLS certificate; AutoMTLS is not supported")
    return HandshakeLine(core, app, network, address, protocol, tls)


def plugin_env(
    *,
    connector_id: str = "",
    log_level: str = "info",
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
    utilities_target: str | None = None,
    token: str | None = None,
    min_port: int = DEFAULT_MIN_PORT,
    max_port: int = DEFAULT_MAX_PORT,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment a host starts a plugin with (``base`` defaults to ours)."""
    env = dict(os.environ if base is None else base)
    env.update(
        {
            MAGIC_COOKIE_KEY: MAGIC_COOKIE_VALUE,
            ENV_PROTOCOL_VERSIONS: str(APP_PROTOCOL_VERSION),
            ENV_MIN_PORT: str(min_port),
            ENV_MAX_PORT: str(max_port),
            ENV_CONNECTOR_ID: connector_id,
            ENV_LOG_LEVEL: log_level,
            ENV_MAX_RECEIVE_RECORD_SIZE: str(max_record_size),
        }
    )
    if utilities_target:
        env[ENV_UTILITIES_TARGET] = utilities_target
    if token:
        env[ENV_TOKEN] = token
    return env


class PluginEnvError(CdcflowError):
    """The plugin process was not started the way a plugin host starts one (run by hand, wrong protocol)."""


def check_cookie(env: Mapping[str, str]) -> None:
    if env.get(MAGIC_COOKIE_KEY) != MAGIC_COOKIE_VALUE:
        raise PluginEnvError(
            "This is a cdcflow/Conduit standalone plugin. It is launched by a plugin host "
            f"(Conduit or cdcflow), not by hand: {MAGIC_COOKIE_KEY} is missing or wrong."
        )


def negotiate_version(env: Mapping[str, str]) -> int:
    """Protocol version to speak; hosts that say nothing are assumed to speak v2."""
    raw = env.get(ENV_PROTOCOL_VERSIONS, "").strip()
    if not raw:
        return APP_PROTOCOL_VERSION
    try:
        offered = {int(v) for v in raw.split(",") if v.strip()}
    except ValueError:
        raise PluginEnvError(f"{ENV_PROTOCOL_VERSIONS}={raw!r} is not a list of integers") from None
    if APP_PROTOCOL_VERSION not in offered:
        raise PluginEnvError(
            f"host offers protocol versions {sorted(offered)}; this plugin speaks {APP_PROTOCOL_VERSION}"
        )
    return APP_PROTOCOL_VERSION


def int_env(env: Mapping[str, str], key: str, default: int) -> int:
    raw = env.get(key, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise PluginEnvError(f"{key}={raw!r} is not an integer") from None

#: go-plugin's health service name, SERVING while the plugin is up
HEALTH_SERVICE = "plugin"
#: extra health service a cdcflow-served plugin reports SERVING: the host then
#: knows the plugin decodes Avro-in-raw_data records losslessly
CDCFLOW_HEALTH_SERVICE = "cdcflow.standalone"
#: go-plugin's controller service, method Shutdown (empty request/response)
SHUTDOWN_METHOD = "/plugin.GRPCController/Shutdown"
