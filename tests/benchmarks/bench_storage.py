"""Storage connector throughput: N CSV rows (10 columns, 20 files, 4 tables).

Single process (the per-partition work an executor does):
  read  - the storage source, one instance per table partition, vs a loop of ``csv.reader``
          with the same type conversion by hand;
  write - the storage destination vs ``csv.writer`` with the same formatting by hand.
Through the engine (``run_files`` on ``--master``, default local[2], 4 tables = 4 Spark partitions):
  read  - ``storage`` source -> ``file`` destination (JSON lines) vs the csv.reader loop;
  copy  - ``storage`` source -> ``storage`` destination (a second layout), i.e. reading and writing
          every row, vs the csv.reader loop + csv.writer loop (the engine needs a source to write from;
          a lake-to-lake copy is the write path users run).
A second, clearly labelled baseline does the same job as read -> file by hand (csv.reader + the
conversion + one orjson line per row written to a file); the strict one stays the issue's target.
Ratios are baseline seconds / cdcflow seconds (>= 1.0: cdcflow at least as fast); engine seconds
exclude Spark start-up (reported separately).

    .venv/bin/python tests/benchmarks/bench_storage.py [--rows 1000000] [--master local[2]] [--no-engine]
                                                       [--profile]

``--profile`` also prints where the single-process read spends its time (cProfile, by own time).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import decimal
import io
import os
import shutil
import sys
import tempfile
import time

import orjson

from cdcflow.connectors.storage.destination import StorageDestination
from cdcflow.connectors.storage.settings import DESTINATION_PARAMS, SOURCE_PARAMS
from cdcflow.connectors.storage.source import StorageSource
from cdcflow.connectors.ticdc.events import INSERT, RowChange, to_record
from cdcflow.params import validate
from cdcflow.schemas import default_store
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

TABLES = 4
FILES = 20


def table(i: int) -> TableSchema:
    return TableSchema("bench", f"t{i}", (
        Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True), Column("a", "INT"),
        Column("b", "BIGINT"), Column("c", "DOUBLE"), Column("d", "DECIMAL", precision=12, scale=2),
        Column("e", "VARCHAR", length=64), Column("f", "VARCHAR", length=64), Column("g", "DATE"),
        Column("h", "DATETIME", fsp=0), Column("i", "TINYINT")), version=1 << 18)


def rows(n: int, t: TableSchema, start: int):
    base = dt.datetime(2024, 1, 1)
    for k in range(start, start + n):
        yield {"id": k, "a": k % 1000, "b": k * 7, "c": k / 3, "d": decimal.Decimal(k % 100000).scaleb(-2),
               "e": f"name {k}", "f": "x,y\"z", "g": dt.date(2024, 1, 1 + k % 28),
               "h": base + dt.timedelta(seconds=k), "i": k % 100}


ENGINE_PIPELINE = """\
version: "2.2"
engine:
  batch-size: 10000
pipelines:
  - id: {pid}
    connectors:
      - id: lake
        type: source
        plugin: builtin:storage
        settings:
          uri: "{src}"
          include-commit-ts: "true"
          date-separator: none
      - id: out
        type: destination
        plugin: {dst_plugin}
        settings:
{dst_settings}
"""


def engine_run(pid: str, src: str, dst_plugin: str, dst_settings: dict, master: str, work: str):
    """(seconds after start-up, start-up seconds, rows written) of one ``run --until-idle``."""
    from cdcflow.engine.plan import Limits
    from cdcflow.engine.runner import run_files

    path = os.path.join(work, f"{pid}.yaml")
    with open(path, "w") as f:
        f.write(ENGINE_PIPELINE.format(pid=pid, src=src, dst_plugin=dst_plugin, dst_settings="\n".join(
            f'          {k}: "{v}"' for k, v in dst_settings.items())))
    started = time.perf_counter()
    outcome = run_files([path], master=master, until_idle=True, progress=False, state_dir=os.path.join(work, pid),
                        limits=Limits(task_seconds=30.0), out=open(os.devnull, "w"))
    total = time.perf_counter() - started
    if outcome.exit_code != 0:
        raise SystemExit(f"engine run failed: {outcome.problems or outcome.failures}")
    return total - outcome.startup_seconds, outcome.startup_seconds, outcome.totals.total_written()


def main() -> None:
    base = tempfile.mkdtemp(prefix="bench_storage_")  # everything the run writes; removed at the end
    try:
        run(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _fresh_dir(base: str, name: str) -> str:
    path = os.path.join(base, name)
    os.makedirs(path)
    return path


def run(base: str) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--no-engine", action="store_true")
    ap.add_argument("--profile", action="store_true", help="profile the single-process read (cProfile)")
    args = ap.parse_args()
    n = args.rows
    root = _fresh_dir(base, "lake")
    settings = {"uri": root, "include-commit-ts": "true", "date-separator": "none"}
    store = default_store()
    per_table = n // TABLES
    batches = []
    for i in range(TABLES):
        t = table(i)
        evs = [RowChange(t, INSERT, (1 << 18) * 10 + k, r) for k, r in enumerate(rows(per_table, t, 0))]
        step = per_table // (FILES // TABLES)
        batches += [[to_record(e, b"", store) for e in evs[s:s + step]] for s in range(0, per_table, step)]

    d = StorageDestination()
    d.configure(validate("storage", DESTINATION_PARAMS, settings))
    d.open()
    t0, c0 = time.perf_counter(), time.process_time()
    for b in batches:
        d.write(b)
    write_s, write_cpu = time.perf_counter() - t0, time.process_time() - c0

    out = io.StringIO()
    t0 = time.perf_counter()
    for b in batches:  # same formatting by hand with csv.writer
        w = csv.writer(out, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\r\n")
        for r in b:
            a = r.after
            w.writerow(["I", "t", "bench", 1, a["id"], a["a"], a["b"], repr(a["c"]), format(a["d"], "f"), a["e"],
                        a["f"], a["g"].isoformat(), a["h"].isoformat(" "), a["i"]])
    base_write_s = time.perf_counter() - t0

    def read_all() -> int:
        src = StorageSource()
        src.configure(validate("storage", SOURCE_PARAMS, settings))
        got = 0
        for part in src.partitions():
            s = StorageSource()
            s.configure(validate("storage", SOURCE_PARAMS, settings))
            s.open(None, part)
            while batch := s.read(10_000):
                got += len(batch)
        return got

    t0, c0 = time.perf_counter(), time.process_time()
    got = read_all()
    read_s, read_cpu = time.perf_counter() - t0, time.process_time() - c0
    if args.profile:
        import cProfile
        import pstats

        profile = cProfile.Profile()
        profile.runcall(read_all)
        print("single-process read, by own time (cProfile):")
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(12)
    assert got == per_table * TABLES, got

    t0 = time.perf_counter()
    cnt = 0
    for dirpath, _, names in os.walk(root):
        for name in sorted(names):
            if not name.endswith(".csv"):
                continue
            with open(os.path.join(dirpath, name), newline="") as f:
                for rec in csv.reader(f):
                    (int(rec[3]), int(rec[4]), int(rec[5]), int(rec[6]), float(rec[7]), decimal.Decimal(rec[8]),
                     rec[9], rec[10], dt.date.fromisoformat(rec[11]), dt.datetime.fromisoformat(rec[12]), int(rec[13]))
                    cnt += 1
    base_read_s = time.perf_counter() - t0

    # The same job by hand (not the strict baseline): csv.reader + the conversion + one
    # JSON line per row written to a file with orjson, i.e. what the engine's read -> file does.
    t0 = time.perf_counter()
    hand = 0
    names = [c.name for c in table(0).columns]
    with open(os.path.join(_fresh_dir(base, "hand"), "out.jsonl"), "wb") as out_file:
        for dirpath, _, files in os.walk(root):
            for name in sorted(files):
                if not name.endswith(".csv"):
                    continue
                with open(os.path.join(dirpath, name), newline="") as f:
                    lines = []
                    for rec in csv.reader(f):
                        row = dict(zip(names, (
                            int(rec[4]), int(rec[5]), int(rec[6]), float(rec[7]), decimal.Decimal(rec[8]), rec[9],
                            rec[10], dt.date.fromisoformat(rec[11]), dt.datetime.fromisoformat(rec[12]),
                            int(rec[13]))))
                        lines.append(orjson.dumps({"operation": "create", "commitTs": int(rec[3]),
                                                   "collection": f"{rec[2]}.{rec[1]}", "after": row},
                                                  default=str))
                        hand += 1
                    out_file.write(b"\n".join(lines) + b"\n")
    hand_read_s = time.perf_counter() - t0
    print(f"rows={got} tables={TABLES} files={len(batches)}")
    print(f"{'case (single process)':<26}{'cdcflow rows/s':>16}{'csv loop rows/s':>17}{'ratio':>8}")
    print(f"{'read':<26}{got / read_s:>16,.0f}{cnt / base_read_s:>17,.0f}{base_read_s / read_s:>8.2f}")
    print(f"{'write':<26}{got / write_s:>16,.0f}{got / base_write_s:>17,.0f}{base_write_s / write_s:>8.2f}")
    print(f"(CPU per row, this process: read {read_cpu / got * 1e6:.2f} us, write {write_cpu / got * 1e6:.2f} us; "
          "pin with taskset -c 0 to compare runs)")
    print(f"{'(same job by hand: csv.reader + conversion + orjson lines to a file: '}{hand / hand_read_s:,.0f} rows/s)")
    if args.no_engine:
        return
    work = _fresh_dir(base, "engine")
    read_e, start_r, wrote = engine_run("read", root, "builtin:file", {"path": os.path.join(work, "out.jsonl")},
                                        args.master, work)
    assert wrote == got, wrote
    copy_e, start_c, wrote = engine_run("copy", root, "builtin:storage",
                                        {"uri": os.path.join(work, "lake2"), "include-commit-ts": "true",
                                         "date-separator": "none"}, args.master, work)
    assert wrote == got, wrote
    base_copy_s = base_read_s + base_write_s
    m = args.master
    print(f"{'case (engine ' + m + ')':<26}{'cdcflow rows/s':>16}{'csv loop rows/s':>17}{'ratio':>8}")
    print(f"{'read -> file':<26}{got / read_e:>16,.0f}{cnt / base_read_s:>17,.0f}{base_read_s / read_e:>8.2f}")
    print(f"{'read -> file vs by hand':<26}{got / read_e:>16,.0f}{hand / hand_read_s:>17,.0f}"
          f"{hand_read_s / read_e:>8.2f}")
    print(f"{'copy storage -> storage':<26}{got / copy_e:>16,.0f}{got / base_copy_s:>17,.0f}"
          f"{base_copy_s / copy_e:>8.2f}")
    print(f"Spark start-up (not in the figures): read {start_r:.1f}s, copy {start_c:.1f}s")


if __name__ == "__main__":
    main()
