"""Engine throughput: generator → field.set + filter → file on Spark local[2], versus the
same work as a plain single-process Python loop (what a user would otherwise write).

    .venv/bin/python tests/benchmarks/bench_engine.py [--records 1000000] [--master local[2]]
    taskset -c 0 .venv/bin/python tests/benchmarks/bench_engine.py --overhead-only [--overhead-records 200000]

Both sides use the same generator rows (structured, 4 fields, create/update/delete), the
same two transforms' logic (set a metadata key from the operation; drop deletes) and write
the same JSON lines (cdcflow.convert.jsonform) with one write + fsync per 10 000-record batch.
Peak memory is the driver process's max RSS (the engine never collects records on the driver).

The engine's own per-record cost is printed first: the task function (``run_partition``:
metadata stamps, chains, write, DLQ window, checkpoint, ack) run in this process on one
partition of a nearly free pipeline (generator raw → ``log`` at trace level, which writes
nothing), minus the same source and destination driven by a bare read/write/ack loop.
CPU time (``time.process_time``), best of three, cyclic GC off; pin to one core.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

SETTINGS = {
    "format.type": "structured",
    "format.options.id": "int",
    "format.options.name": "string",
    "format.options.flag": "bool",
    "format.options.at": "time",
    "operations": "create,update,delete",
    "seed": "3",
}
BATCH = 10_000


def plain_loop(records: int, out: Path, partitions: int) -> float:
    """The baseline: one process, no Spark; reads the same generator partitions one after another."""
    from cdcflow.convert.jsonform import dumps_lines
    from cdcflow.record import Operation
    from cdcflow.registry import load_registry

    info = load_registry().connector("builtin:generator")
    settings = info.validate("source", {**SETTINGS, "recordCount": str(records), "partitions": str(partitions)})
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    started = time.perf_counter()
    for p in range(partitions):
        src = info.new_source()
        src.configure(settings)
        src.open(None, str(p))
        while (batch := src.read(BATCH)) is not None:
            kept = []
            for r in batch:
                r.metadata["seen"] = f"seen {r.operation.text}"
                if r.operation != Operation.DELETE:
                    kept.append(r)
            os.write(fd, dumps_lines(kept))
            os.fsync(fd)
        src.teardown()
    os.close(fd)
    return time.perf_counter() - started


PIPELINE = """\
version: "2.2"
engine:
  batch-size: {batch}
pipelines:
  - id: bench
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
{settings}
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {out}
    processors:
      - id: tag
        plugin: field.set
        settings:
          field: .Metadata["seen"]
          value: "seen {{{{ Operation }}}}"
      - id: drop-deletes
        plugin: filter
        condition: Operation == "delete"
"""


def engine_run(records: int, out: Path, master: str, workdir: Path, partitions: int) -> tuple[float, float, int]:
    from cdcflow.engine.plan import Limits
    from cdcflow.engine.runner import run_files

    settings = {**SETTINGS, "recordCount": str(records), "partitions": str(partitions)}
    text = PIPELINE.format(batch=BATCH, out=out,
                           settings="\n".join(f'          {k}: "{v}"' for k, v in settings.items()))
    path = workdir / "bench.yaml"
    path.write_text(text)
    started = time.perf_counter()
    outcome = run_files([str(path)], master=master, until_idle=True, progress=False,
                        limits=Limits(task_seconds=30.0), out=open(os.devnull, "w"))
    total = time.perf_counter() - started
    if outcome.exit_code != 0:
        raise SystemExit(f"engine run failed: {outcome.problems or outcome.failures}")
    return total, outcome.startup_seconds, outcome.totals.total_written()


OVERHEAD_SOURCE = {"format.type": "raw", "format.options.id": "int", "partitions": "1"}


def _overhead_engine(records: int, batch: int, work: Path) -> float:
    """CPU seconds of ``run_partition`` over ``records`` (in this process, no Spark)."""
    import gc

    from cdcflow.engine.plan import Limits, PartitionTask, RunContext
    from cdcflow.engine.state import StateDir
    from cdcflow.engine.task import run_partition, teardown_all
    from cdcflow.pipeline.validate import validate_files
    from cdcflow.registry import load_registry

    settings = "\n".join(f'          {k}: "{v}"' for k, v in {**OVERHEAD_SOURCE, "recordCount": records}.items())
    path = work / "overhead.yaml"
    path.write_text(f"""version: "2.2"
engine:
  batch-size: {batch}
pipelines:
  - id: overhead
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
{settings}
      - id: out
        type: destination
        plugin: builtin:log
        settings:
          level: trace
""")
    result = validate_files([str(path)])
    if result.problems:
        raise SystemExit(f"overhead pipeline invalid: {result.problems}")
    pipe = result.pipelines[0]
    state = StateDir(tempfile.mkdtemp(dir=work)).create()
    ctx = RunContext.prepare({pipe.id: pipe}, state, load_registry(), limits=Limits(task_seconds=1e9))
    gc.disable()
    started = time.process_time()
    stats = run_partition(ctx, PartitionTask(pipe.id, "gen", "0"))
    cpu = time.process_time() - started
    gc.enable()
    teardown_all()
    if stats.error or stats.read != records:
        raise SystemExit(f"overhead run failed: {stats}")
    return cpu


def _overhead_floor(records: int, batch: int) -> float:
    """CPU seconds of the same source and destination in a bare read → write → ack loop."""
    import gc

    from cdcflow.registry import load_registry

    registry = load_registry()
    src_info, dest_info = registry.connector("builtin:generator"), registry.connector("builtin:log")
    dest = dest_info.new_destination()
    dest.configure(dest_info.validate("destination", {"level": "trace"}))
    dest.open()
    src = src_info.new_source()
    src.configure(src_info.validate("source", {**OVERHEAD_SOURCE, "recordCount": str(records)}))
    gc.disable()
    started = time.process_time()
    src.open(None, "0")
    while (got := src.read(batch)) is not None:
        dest.write(got)
        src.ack([r.position for r in got])
    cpu = time.process_time() - started
    gc.enable()
    src.teardown()
    dest.teardown()
    return cpu


def engine_overhead(records: int, batch: int = BATCH, repeat: int = 3) -> tuple[float, float]:
    """(engine, floor) CPU µs per record, best of ``repeat`` interleaved runs."""
    engine, floor = float("inf"), float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeat):
            engine = min(engine, _overhead_engine(records, batch, Path(tmp)))
            floor = min(floor, _overhead_floor(records, batch))
    return engine / records * 1e6, floor / records * 1e6


def print_overhead(records: int) -> None:
    for batch in (BATCH, 1_000):
        engine_us, floor_us = engine_overhead(records, batch)
        print(f"engine task loop, batch {batch:>6,}: {engine_us:.2f} µs/record vs bare loop {floor_us:.2f}"
              f"  → engine overhead {engine_us - floor_us:.2f} µs/record (CPU, in-process)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--partitions", type=int, default=2, help="generator partitions (Spark partitions)")
    ap.add_argument("--overhead-records", type=int, default=200_000)
    ap.add_argument("--overhead-only", action="store_true", help="print the engine's per-record cost only")
    args = ap.parse_args()
    if args.overhead_only:
        print_overhead(args.overhead_records)
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        loop_s = plain_loop(args.records, work / "plain.jsonl", args.partitions)
        plain_lines = sum(1 for _ in open(work / "plain.jsonl", "rb"))
        total_s, startup_s, written = engine_run(args.records, work / "engine.jsonl", args.master, work, args.partitions)
        engine_lines = sum(1 for _ in open(work / "engine.jsonl", "rb"))
    run_s = total_s - startup_s
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the in-process overhead runs
    print_overhead(args.overhead_records)
    n = args.records
    print(f"records: {n:,}   kept after filter: plain {plain_lines:,} / engine {engine_lines:,} (written {written:,})")
    print(f"{'variant':<34}{'seconds':>10}{'records/s':>14}")
    print(f"{'plain Python loop (1 process)':<34}{loop_s:>10.2f}{n / loop_s:>14,.0f}")
    print(f"{'engine ' + args.master + ' total':<34}{total_s:>10.2f}{n / total_s:>14,.0f}")
    print(f"{'engine ' + args.master + ' after start-up':<34}{run_s:>10.2f}{n / run_s:>14,.0f}")
    print(f"Spark start-up: {startup_s:.2f}s   ratio after start-up (engine/plain): {loop_s / run_s:.2f}"
          f"   ratio total: {loop_s / total_s:.2f}")
    print(f"driver peak RSS: {peak_mb:.0f} MiB")
    if plain_lines != engine_lines:
        print("WARNING: outputs differ in size", file=sys.stderr)


if __name__ == "__main__":
    main()
