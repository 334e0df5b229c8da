"""A Spark standalone cluster started by a test: one master and workers, each worker with its own
private temporary directory and working directory (so executors share no filesystem with the
driver's state directory), and a way to kill a worker the hard way (SIGKILL of the worker JVM and
its executor JVM; their Python workers must end by themselves)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cdcflow.dev.process import free_port


def wait_for_text(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[1]} exited: {path.read_text(errors='replace')[-2000:]}")
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {text!r}: {path.read_text(errors='replace')[-2000:]}")


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), whatever process group or session it moved to
    (PySpark's daemon makes a group of its own)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class StandaloneCluster:
    """``python``'s Spark distribution (``SPARK_HOME`` = the pyspark package) as a standalone cluster."""

    def __init__(self, base: Path, env: dict[str, str] | None = None):
        import pyspark

        self.base = base
        self.spark_home = Path(pyspark.__file__).parent
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.env.update({"SPARK_HOME": str(self.spark_home), "PYSPARK_PYTHON": sys.executable, **(env or {})})
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.url = ""

    def _spawn(self, args: list[str], log: Path, env: dict[str, str], cwd: Path) -> subprocess.Popen:
        with open(log, "w") as out:
            return subprocess.Popen([str(self.spark_home / "bin" / "spark-class"), *args], stdout=out,
                                    stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)

    def start_master(self) -> str:
        port = free_port()
        log = self.base / "master.log"
        self.master = self._spawn(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                                   str(port), "--webui-port", str(free_port())], log, self.env, self.base)
        wait_for_text(log, "I have been elected leader", self.master, 90)
        self.url = f"spark://127.0.0.1:{port}"
        return self.url

    def add_worker(self, cores: int = 1, memory: str = "1g", private: bool = True) -> subprocess.Popen:
        """A worker; ``private``: its own temporary, local and working directories."""
        n = len(self.workers)
        home = self.base / f"worker{n}"
        home.mkdir(parents=True, exist_ok=True)
        env = dict(self.env)
        if private:
            for name in ("tmp", "local", "work"):
                (home / name).mkdir(exist_ok=True)
            env.update({"TMPDIR": str(home / "tmp"), "SPARK_LOCAL_DIRS": str(home / "local"),
                        "SPARK_WORKER_DIR": str(home / "work")})
        log = self.base / f"worker{n}.log"
        proc = self._spawn(["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                            "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                            "--work-dir", str(home / "work")], log, env, home)
        wait_for_text(log, "Successfully registered with master", proc, 90)
        self.workers.append(proc)
        return proc

    def executors(self, worker: int) -> list[int]:
        """Pids of the executor JVMs a worker runs now."""
        out = []
        for pid in descendants(self.workers[worker].pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"CoarseGrainedExecutorBackend" in f.read():
                        out.append(pid)
            except OSError:
                continue
        return out

    def kill_worker(self, worker: int) -> list[int]:
        """SIGKILL the worker JVM and its executor JVMs, as a lost machine would end them; the
        executor's Python daemon and workers must then end on their own (their JVM is gone) within
        a few seconds, or this fails: an orphan still working would write beside the retried task."""
        proc = self.workers[worker]
        below = descendants(proc.pid)
        jvms = [proc.pid, *self.executors(worker)]
        for pid in jvms:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(30)
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in below) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [p for p in below if _alive(p)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        if left:
            raise AssertionError(f"processes of the killed worker outlived it: {left}")
        return [proc.pid, *below]

    def wait_no_executors(self, timeout: float = 60) -> None:
        """Until no live worker runs an executor (after a driver was killed, the workers end its executors)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(self.executors(i) for i, w in enumerate(self.workers) if w.poll() is None):
                return
            time.sleep(0.2)
        raise AssertionError("executors of a killed driver still run")

    def stop(self) -> None:
        procs = [w for w in self.workers] + ([self.master] if self.master else [])
        for p in procs:
            if p.poll() is None:
                victims = descendants(p.pid)
                p.terminate()
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
                for pid in victims:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
