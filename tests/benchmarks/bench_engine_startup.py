"""Where an engine run's wall time goes: the driver's phases and a timeline per Spark task.

Runs ``bench_storage.py``'s engine case "read -> file" (``storage`` source, 4 tables = 4 Spark
partitions, 20 CSV files -> ``file`` destination) through ``run_files`` and prints

* the driver's phases (registry load, validation, Spark start, planning, the micro-batch jobs,
  executor teardown, stop), wall seconds;
* per micro-batch job and per task, the task's timeline (``TaskStats.timeline``) in seconds from
  the job's submission: daemon started, worker forked, task started, registry loaded,
  pipeline opened, source opened, first batch read, work done, end; plus the task's CPU (the
  daemon's start is when the worker's parent process started: PySpark's daemon under Spark);
* what is not parallel work: wall time after Spark start-up minus (sum of task work / cores).

    .venv/bin/python tests/benchmarks/bench_engine_startup.py [--rows 1000000] [--master local[2]] [--runs 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from bench_storage import ENGINE_PIPELINE, FILES, TABLES, rows, table

from cdcflow.connectors.storage.destination import StorageDestination
from cdcflow.connectors.storage.settings import DESTINATION_PARAMS
from cdcflow.connectors.ticdc.events import INSERT, RowChange, to_record
from cdcflow.params import validate
from cdcflow.schemas import default_store

STEPS = ("daemon", "worker", "task", "registry", "pipeline", "source", "first-batch", "work", "end")


def make_lake(root: str, n: int) -> None:
    settings = {"uri": root, "include-commit-ts": "true", "date-separator": "none"}
    store = default_store()
    dest = StorageDestination()
    dest.configure(validate("storage", DESTINATION_PARAMS, settings))
    dest.open()
    per_table = n // TABLES
    step = per_table // (FILES // TABLES)
    for i in range(TABLES):
        t = table(i)
        evs = [RowChange(t, INSERT, (1 << 18) * 10 + k, r) for k, r in enumerate(rows(per_table, t, 0))]
        for s in range(0, per_table, step):
            dest.write([to_record(e, b"", store) for e in evs[s:s + step]])
    dest.teardown()


def cpu_of(pid: int) -> tuple[float, int] | None:
    """(user + system CPU seconds, parent pid) of a live process, from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), int(fields[1])


def jvm_pid() -> int | None:
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    return proc.pid if proc is not None else None


class Phases:
    """Wall time of the driver's steps, by wrapping the functions ``run_files`` calls."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, float, float]] = []
        self.jobs: list[tuple[float, float, list]] = []
        self._originals: list[tuple[object, str, object]] = []
        self.startup_cpu: list[float] = []  # per job: daemon + workers until their first source was open
        self.process_cpu: list[float] = []  # per job: JVM during the job + daemon + workers

    def restore(self) -> None:
        for module, attr, inner in reversed(self._originals):
            setattr(module, attr, inner)

    def wrap(self, module, attr: str, label: str) -> None:
        inner = getattr(module, attr)
        self._originals.append((module, attr, inner))

        def timed(*args, **kwargs):
            t0 = time.time()
            try:
                return inner(*args, **kwargs)
            finally:
                self.spans.append((label, t0, time.time()))

        setattr(module, attr, timed)

    def wrap_jobs(self, driver_module) -> None:
        inner = driver_module._spark_job
        self._originals.append((driver_module, "_spark_job", inner))

        def job(sc, ctx, tasks, *rest):
            jvm = jvm_pid()
            jvm_cpu = cpu_of(jvm) if jvm else None
            t0 = time.time()
            stats = inner(sc, ctx, tasks, *rest)
            t1 = time.time()
            # the workers and their daemon live on (worker reuse): their CPU since they started
            procs = {s.pid: cpu_of(s.pid) for s in stats}
            daemons = {p[1] for p in procs.values() if p}
            cpu = {"jvm during job": cpu_of(jvm)[0] - jvm_cpu[0] if jvm_cpu and cpu_of(jvm) else None}
            cpu.update({f"daemon {d} (total)": (cpu_of(d) or (None,))[0] for d in daemons})
            firsts = {}
            for s in stats:  # each worker's first task: its CPU since the fork when that source was open
                if s.pid not in firsts or dict(s.timeline).get("task", 0) < dict(firsts[s.pid].timeline).get("task", 0):
                    firsts[s.pid] = s
            self.startup_cpu.append(sum(v for k, v in cpu.items() if k.startswith("daemon") and v)
                                    + sum(s.process_cpu_at_source for s in firsts.values()))
            self.process_cpu.append(sum(v for k, v in cpu.items() if k.startswith("daemon") and v)
                                    + sum(p[0] for p in procs.values() if p) + (cpu["jvm during job"] or 0.0))
            for pid, p in procs.items():
                tasks_cpu = sum(s.cpu_seconds for s in stats if s.pid == pid)
                first = min((s for s in stats if s.pid == pid), key=lambda s: dict(s.timeline).get("task", 0.0))
                if p:
                    cpu[f"worker {pid}: total / outside tasks / until its first source was open"] = (
                        f"{p[0]:.2f} / {p[0] - tasks_cpu:.2f} / {first.process_cpu_at_source:.2f}")
            self.jobs.append((t0, t1, stats, cpu))
            return stats

        driver_module._spark_job = job


def run_once(lake: str, work: str, master: str, n: int, conf: list[str]) -> None:
    import cdcflow.registry as registry_module
    from cdcflow.engine import driver as driver_module
    from cdcflow.engine import runner
    from cdcflow.engine.plan import Limits

    phases = Phases()
    phases.wrap(registry_module, "load_registry", "registry load (driver)")
    phases.wrap(runner, "_validation_problems", "validation")
    phases.wrap(runner, "start_session", "Spark start-up")
    phases.wrap(runner, "ship_plugins", "ship plugins")
    phases.wrap(runner, "plan_partitions", "plan partitions")
    phases.wrap(runner, "_teardown_executors", "executor teardown job")
    from cdcflow.engine.spark import session as session_module

    phases.wrap(session_module.SessionInfo, "stop", "Spark stop")
    phases.wrap_jobs(driver_module)
    path = os.path.join(work, "read.yaml")
    with open(path, "w") as f:
        f.write(ENGINE_PIPELINE.format(pid="read", src=lake, dst_plugin="builtin:file",
                                       dst_settings=f'          path: "{os.path.join(work, "out.jsonl")}"'))
    started = time.time()
    driver_cpu = time.process_time()
    try:
        outcome = runner.run_files([path], master=master, conf=conf, until_idle=True, progress=False,
                                   state_dir=os.path.join(work, "state"), limits=Limits(task_seconds=30.0),
                                   out=open(os.devnull, "w"))
    finally:
        phases.restore()
    total = time.time() - started
    driver_cpu = time.process_time() - driver_cpu
    if outcome.exit_code != 0:
        raise SystemExit(f"engine run failed: {outcome.problems or outcome.failures}")
    written = outcome.totals.total_written()
    after_start = total - outcome.startup_seconds
    print(f"\nrows={written}  wall {total:.2f}s, Spark start-up {outcome.startup_seconds:.2f}s, "
          f"after start-up {after_start:.2f}s = {written / after_start:,.0f} rows/s")
    print(f"{'driver phase':<28}{'from run start':>15}{'seconds':>9}")
    for label, t0, t1 in sorted(phases.spans + [("micro-batch job", j[0], j[1]) for j in phases.jobs],
                                key=lambda s: s[1]):
        print(f"{label:<28}{t0 - started:>15.2f}{t1 - t0:>9.2f}")
    cores = int(master[6:-1]) if master.startswith("local[") and master[6:-1].isdigit() else os.cpu_count() or 1
    work_seconds = 0.0
    for k, (j0, j1, stats, cpu) in enumerate(phases.jobs):
        print(f"\njob {k + 1}: {j1 - j0:.2f}s; task timeline, seconds from the job's submission")
        print(f"{'task':<22}{'pid':>8}" + "".join(f"{s:>10}" for s in STEPS) + f"{'cpu':>7}{'rows':>9}")
        for s in sorted(stats, key=lambda s: dict(s.timeline).get("task", 0)):
            marks = dict(s.timeline)
            cells = "".join(f"{marks[step] - j0:>10.2f}" if step in marks else f"{'-':>10}" for step in STEPS)
            print(f"{str(s.task):<22}{s.pid:>8}{cells}{s.cpu_seconds:>7.2f}{s.read:>9}")
            if "source" in marks and "work" in marks:
                work_seconds += marks["work"] - marks["source"]
        print("CPU seconds: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                          for k, v in cpu.items()))
    print(f"\nCPU seconds of the run: driver process {driver_cpu:.2f}; jobs (JVM during the job + daemon + "
          f"workers) {sum(phases.process_cpu):.2f}; of which start-up before the first record (daemon + "
          f"workers until their first source was open) {sum(phases.startup_cpu):.2f}")
    print(f"task work (source opened -> work done) summed: {work_seconds:.2f}s; / {cores} cores = "
          f"{work_seconds / cores:.2f}s; not parallel work: {after_start - work_seconds / cores:.2f}s of "
          f"{after_start:.2f}s after start-up")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--conf", action="append", default=[], help="k=v Spark setting, as cdcflow run --conf")
    ap.add_argument("--runs", type=int, default=1, help="engine runs in this process (later ones reuse the JVM)")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="bench_engine_startup_")
    try:
        lake = os.path.join(base, "lake")
        make_lake(lake, args.rows)
        for r in range(args.runs):
            work = os.path.join(base, f"run{r}")
            os.makedirs(work)
            run_once(lake, work, args.master, args.rows, args.conf)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
