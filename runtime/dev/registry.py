"""The built-in schema registry as a local background process (``cdcflow dev up``, test fixtures).

It runs ``python -m cdcflow.schemaregistry.server`` rather than the full
``cdcflow`` command so start-up does not import the engine.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..schemaregistry.server import AUTH_ENV
from .process import LocalService

SERVICE = "schema registry"


def registry_argv(host: str, port: int, data_dir: str, auth: bool = False) -> list[str]:
    """The server's command line; with ``auth`` it reads the credentials from ``$CDCFLOW_REGISTRY_AUTH``."""
    argv = [sys.executable, "-m", "cdcflow.schemaregistry.server", "--host", host, "--port", str(port),
            "--data", data_dir]
    if auth:
        argv.append("--auth")
    return argv


def registry_responds(url: str, timeout: float = 1.0) -> bool:
    """True when the HTTP server answers (any status: a 401 under auth still means it is up)."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("GET", "/")
        return conn.getresponse().status < 500
    finally:
        conn.close()


class RegistryService(LocalService):
    """The registry server in its own process; ``auth="user:password"`` turns on basic auth.

    ``url`` never carries the credentials, and neither does the command line: the
    child gets them in its environment (readable by its owner only).
    """

    SERVICE = SERVICE

    def __init__(self, data_dir: str | Path, *, host: str = "127.0.0.1", port: int | None = None,
                 auth: str | None = None, log_path: str | Path | None = None, detach: bool = False,
                 startup_timeout: float = 30.0):
        super().__init__(host=host, port=port, log_path=log_path, detach=detach, startup_timeout=startup_timeout)
        self.data_dir = str(data_dir)
        self.auth = auth

    @property
    def url(self) -> str:
        return self._started_address()

    def prepare(self) -> None:
        Path(self.data_dir).mkdir(parents=True, exist_ok=True)

    def argv(self, port: int) -> list[str]:
        return registry_argv(self.host, port, self.data_dir, bool(self.auth))

    def env(self) -> dict[str, str] | None:
        return {**os.environ, AUTH_ENV: self.auth} if self.auth else None

    def address(self, port: int) -> str:
        return f"http://{self.host}:{port}"

    def probe(self, address: str) -> bool:
        return registry_responds(address)
