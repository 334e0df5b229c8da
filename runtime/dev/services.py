"""``cdcflow dev``: the embedded broker and the built-in registry as background services.

``up`` starts both detached and records them in ``<state>/services.json``
(pid, kernel start time, command line, address); ``down`` stops exactly those
processes, so a pid reused by something else after a crash is never signalled.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .broker import Broker
from .process import ServiceError, ServiceProcess, terminate
from .registry import RegistryService

DEFAULT_STATE_DIR = ".cdcflow/dev"
STATE_FILE = "services.json"
BROKER = "broker"
REGISTRY = "registry"


@dataclass
class DevServices:
    """The recorded services of one state directory."""

    state_dir: Path
    services: dict[str, ServiceProcess]

    @property
    def bootstrap_servers(self) -> str | None:
        s = self.services.get(BROKER)
        return s.address if s else None

    @property
    def registry_url(self) -> str | None:
        s = self.services.get(REGISTRY)
        return s.address if s else None

    def running(self) -> dict[str, bool]:
        return {name: s.is_running() for name, s in self.services.items()}

    def to_json(self) -> dict:
        running = self.running()
        return {
            "state_dir": str(self.state_dir),
            "bootstrap_servers": self.bootstrap_servers,
            "registry_url": self.registry_url,
            "services": {name: {**s.to_json(), "running": running[name]} for name, s in self.services.items()},
        }


def state_path(state_dir: str | Path) -> Path:
    return Path(state_dir) / STATE_FILE


def load(state_dir: str | Path) -> DevServices | None:
    path = state_path(state_dir)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise ServiceError("dev services", f"state file {path} is not valid JSON: {e}") from None
    services = {name: ServiceProcess.from_json(s) for name, s in data.get("services", {}).items()}
    return DevServices(Path(state_dir), services)


def _save(dev: DevServices) -> None:
    """Write the state file owner-only (0600): it names processes and paths of this user."""
    path = state_path(dev.state_dir)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older file of the same name keeps its mode through O_CREAT
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps({"services": {n: s.to_json() for n, s in dev.services.items()}}, indent=2))
    os.replace(tmp, path)


def up(state_dir: str | Path = DEFAULT_STATE_DIR, *, host: str = "127.0.0.1", broker_port: int | None = None,
       registry_port: int | None = None, registry_auth: str | None = None) -> tuple[DevServices, bool]:
    """Start broker + registry unless this state directory's services already run.

    Returns the services and whether they were started now (False: already up).
    """
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    existing = load(state_dir)
    if existing is not None:
        running = existing.running()
        if running and all(running.values()):
            return existing, False
        down(state_dir)  # half-dead leftovers: stop what is still ours, start afresh
    broker = Broker(host=host, port=broker_port, log_path=state_dir / "broker.log", detach=True).start()
    try:
        registry = RegistryService(state_dir / "registry", host=host, port=registry_port, auth=registry_auth,
                                   log_path=state_dir / "registry.log", detach=True).start()
    except BaseException:
        broker.stop()
        raise
    dev = DevServices(state_dir, {BROKER: broker.info, REGISTRY: registry.info})
    _save(dev)
    return dev, True


def down(state_dir: str | Path = DEFAULT_STATE_DIR) -> dict[str, bool]:
    """Stop the recorded services that are still ours; {name: was stopped now}."""
    dev = load(state_dir)
    if dev is None:
        return {}
    grace = {BROKER: Broker.STOP_GRACE, REGISTRY: RegistryService.STOP_GRACE}
    stopped = {name: terminate(s, timeout=grace.get(name, 10.0)) for name, s in dev.services.items()}
    state_path(state_dir).unlink(missing_ok=True)
    return stopped
