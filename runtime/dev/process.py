"""Background service processes: free ports, start with a readiness wait, stop by pid.

The broker and the registry are both local processes that tests and ``cdcflow
dev`` start and must stop again without leaving anything behind. A pid alone
can be reused by the system after a crash, so a started process is remembered
as a ``ServiceProcess`` (pid + kernel start time + command line) and only a
process that still matches all three is ever signalled.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..errors import CdcflowError


class ServiceError(CdcflowError):
    """A local service (broker, registry) did not start, or could not be stopped."""

    def __init__(self, service: str, message: str, *, log_path: str | None = None):
        self.service = service
        self.log_path = log_path
        tail = _log_tail(log_path)
        where = f" (log: {log_path})" if log_path else ""
        super().__init__(f"{service}: {message}{where}" + (f"\n{tail}" if tail else ""))


def _log_tail(path: str | None, lines: int = 15) -> str:
    if not path:
        return ""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the caller retries if it is taken before use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, kernel start time in clock ticks) of ``pid``; None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[0], int(fields[19])  # fields 3 and 22 of the whole line


def _start_ticks(pid: int) -> int | None:
    stat = _proc_stat(pid)
    return stat[1] if stat else None


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [p.decode(errors="replace") for p in raw.split(b"\0") if p]


@dataclass
class ServiceProcess:
    """What identifies a process we started; JSON-serialisable for the dev state file."""

    name: str
    pid: int
    argv: list[str]
    address: str
    start_ticks: int | None = None
    log_path: str | None = None
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "ServiceProcess":
        return cls(**data)

    def is_ours(self) -> bool:
        """The pid is still the very process we started (not a reused pid); a zombie counts."""
        stat = _proc_stat(self.pid)
        if stat is None:
            return False
        state, ticks = stat
        if self.start_ticks is not None and ticks != self.start_ticks:
            return False
        if state == "Z":  # exited, not reaped yet: no command line left to compare
            return self.start_ticks is not None
        cmd = _cmdline(self.pid)
        for _ in range(50):  # empty while a just-spawned child is still inside execve (vfork)
            if cmd != []:
                break
            time.sleep(0.01)
            cmd = _cmdline(self.pid)
        return cmd is not None and cmd == self.argv

    def is_running(self) -> bool:
        if not self.is_ours():
            return False
        try:  # reap it if it is our child and has exited
            done, _ = os.waitpid(self.pid, os.WNOHANG)
            if done == self.pid:
                return False
        except ChildProcessError:
            pass
        stat = _proc_stat(self.pid)
        return stat is not None and stat[0] != "Z"


def spawn(name: str, argv: Sequence[str], address: str, *, log_path: str | None = None,
          detach: bool = False, env: dict | None = None) -> tuple[subprocess.Popen, ServiceProcess]:
    """Start ``argv`` with stdout/stderr to ``log_path`` (or discarded).

    ``detach`` puts it in a new session so it outlives the caller (``cdcflow dev up``)
    and a Ctrl-C in the caller's terminal does not reach it.
    """
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=detach, close_fds=True, env=env)
    except OSError as e:
        raise ServiceError(name, f"cannot start {argv[0]}: {e}") from None
    finally:
        if log_path:
            out.close()
    info = ServiceProcess(name=name, pid=proc.pid, argv=list(argv), address=address,
                          start_ticks=_start_ticks(proc.pid), log_path=log_path)
    return proc, info


def wait_ready(name: str, proc: subprocess.Popen, probe: Callable[[], bool], *, timeout: float,
               log_path: str | None = None) -> None:
    """Poll ``probe`` until it returns True; fail early if the process exits."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        code = proc.poll()
        if code is not None:
            raise ServiceError(name, f"exited with code {code} before it was ready", log_path=log_path)
        try:
            if probe():
                return
        except Exception:  # noqa: BLE001 - any failure of the probe means "not yet"
            pass
        if time.monotonic() >= deadline:
            raise ServiceError(name, f"not ready after {timeout:.0f}s", log_path=log_path)
        time.sleep(delay)
        delay = min(delay * 2, 0.25)


def terminate(info: ServiceProcess, *, timeout: float = 10.0, proc: subprocess.Popen | None = None) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``; only if the process is still ours.

    Returns False when there was nothing (of ours) to stop.
    """
    if proc is None and not info.is_ours():
        return False
    if proc is not None and proc.poll() is not None:
        return False
    try:
        os.kill(info.pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    if _wait_gone(info, proc, timeout):
        return True
    try:
        os.kill(info.pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    if not _wait_gone(info, proc, 5.0):
        raise ServiceError(info.name, f"pid {info.pid} survived SIGKILL")
    return True


def _wait_gone(info: ServiceProcess, proc: subprocess.Popen | None, timeout: float) -> bool:
    if proc is not None:
        try:
            proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    deadline = time.monotonic() + timeout
    while not _exited(info):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _exited(info: ServiceProcess) -> bool:
    """Whether a process we have already signalled is gone, reaping it when it is our child.

    Only the pid and its kernel start time count here, never the command line: an
    exiting process loses its command line before it is dead (and one may exec
    something else on SIGTERM), and judging by it left zombies behind.
    """
    stat = _proc_stat(info.pid)
    if stat is None:
        return True
    if info.start_ticks is not None and stat[1] != info.start_ticks:
        return True  # the pid now belongs to another process
    try:
        done, _ = os.waitpid(info.pid, os.WNOHANG)
        return done == info.pid
    except ChildProcessError:  # not our child: dead once it is a zombie; its parent reaps it
        return stat[0] == "Z"


class LocalService:
    """A service process on a local port, started with a readiness wait and stopped by pid.

    Subclasses say how to build the command line, the address and the readiness
    probe. ``port=None`` picks a free port and retries (another process may take
    it between the pick and the bind). ``detach=True`` lets the process outlive
    this one (``cdcflow dev up``); ``info`` then identifies it for a later stop.
    """

    SERVICE = "service"
    #: seconds between SIGTERM and SIGKILL
    STOP_GRACE = 10.0

    def __init__(self, *, host: str = "127.0.0.1", port: int | None = None, log_path: str | Path | None = None,
                 detach: bool = False, startup_timeout: float = 30.0):
        self.host = host
        self.port = port
        self.log_path = str(log_path) if log_path is not None else None
        self.detach = detach
        self.startup_timeout = startup_timeout
        self.info: ServiceProcess | None = None
        self._proc: subprocess.Popen | None = None

    # -- what a subclass defines ---------------------------------------------------
    def argv(self, port: int) -> list[str]:
        raise NotImplementedError

    def address(self, port: int) -> str:
        raise NotImplementedError

    def probe(self, address: str) -> bool:
        raise NotImplementedError

    def prepare(self) -> None:
        """Called once before the first start attempt."""

    def env(self) -> dict[str, str] | None:
        """The child's environment (None: this process's); how secrets reach it, never argv."""
        return None

    # -- lifecycle -------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self.info.pid if self.info else None

    def _started_address(self) -> str:
        if self.info is None:
            raise ServiceError(self.SERVICE, "not started")
        return self.info.address

    def start(self) -> "LocalService":
        if self.info is not None:
            return self
        self.prepare()
        attempts = 1 if self.port else 3
        last: ServiceError | None = None
        for _ in range(attempts):
            port = self.port or free_port(self.host)
            address = self.address(port)
            proc, info = spawn(self.SERVICE, self.argv(port), address, log_path=self.log_path, detach=self.detach,
                               env=self.env())
            try:
                wait_ready(self.SERVICE, proc, lambda: self.probe(address), timeout=self.startup_timeout,
                           log_path=self.log_path)
            except ServiceError as e:
                last = e
                terminate(info, proc=proc)
                continue
            self._proc, self.info = proc, info
            return self
        assert last is not None
        raise last

    def stop(self, timeout: float | None = None) -> None:
        if self.info is None:
            return
        terminate(self.info, timeout=self.STOP_GRACE if timeout is None else timeout, proc=self._proc)
        self.info, self._proc = None, None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
