"""The generic path: a ``file`` -> ``file`` copy of records, against a one-process orjson loop.

N OpenCDC JSON lines (Conduit's JSON form, written by ``cdcflow.convert.jsonform.dumps_lines``)
are copied (the source with ``format: opencdc/json``) by ``cdcflow run --until-idle`` (one process per run) on ``--master``
(default local[2]) twice: with no processors, and with one ``field.set`` (a metadata field set to
a constant). The baseline is a plain loop in this process: read the file, ``orjson.loads`` every
line, (the same field change,) ``orjson.dumps`` it, write the lines to a file.

Engine figures exclude Spark start-up (printed apart). Ratios are loop seconds / engine seconds
(>= 1.0: cdcflow at least as fast). Rounds are interleaved (loop, engine, loop, engine ...) and the
best of ``--repeat`` is kept, since the machine may be shared; the engine's time is the command's
own end-of-run ``running`` figure. Compare a compiled kernel's worth by running it twice, the
second time with ``CDCFLOW_KERNELS_OFF=_jsonform``.

    .venv/bin/python tests/benchmarks/bench_generic.py [--rows 1000000] [--master local[2]] [--repeat 3]
                                                       [--partitions N]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import orjson

from cdcflow.convert.jsonform import dumps_lines
from cdcflow.record import Operation, Record

PIPELINE = """\
version: "2.2"
pipelines:
  - id: {pid}
    status: running
    connectors:
      - id: in
        type: source
        plugin: builtin:file
        settings:
          path: "{src}"
          format: opencdc/json
{partitions}      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: "{dst}"
{processors}"""

FIELD_SET = """\
    processors:
      - id: mark
        plugin: field.set
        settings:
          field: .Metadata["bench"]
          value: "x"
"""


def write_input(path: str, n: int) -> None:
    """``n`` records as a Conduit generator would make them (structured payload, no schema)."""
    chunk = 10_000
    with open(path, "wb") as f:
        for start in range(0, n, chunk):
            f.write(dumps_lines([
                Record(position=str(k).encode(), operation=Operation.CREATE,
                       metadata={"opencdc.collection": "users", "opencdc.readAt": str(1_700_000_000_000 + k)},
                       key={"id": k},
                       after={"id": k, "name": f"user {k}", "email": f"user{k}@example.com", "age": k % 90,
                              "score": k / 7, "active": k % 2 == 0, "city": "Lisbon"})
                for k in range(start, min(n, start + chunk))]))


def loop(src: str, dst: str, field_set: bool) -> int:
    """The baseline: one process, orjson per line."""
    loads, dumps = orjson.loads, orjson.dumps
    n = 0
    with open(src, "rb") as f, open(dst, "wb") as out:
        while True:
            lines = f.readlines(1 << 22)
            if not lines:
                break
            objs = [loads(line) for line in lines]
            if field_set:
                for o in objs:
                    o["metadata"]["bench"] = "x"
            out.write(b"".join([dumps(o, option=orjson.OPT_APPEND_NEWLINE) for o in objs]))
            n += len(objs)
    return n


def engine(work: str, src: str, pid: str, field_set: bool, master: str,
           partitions: int | None) -> tuple[float, float, int]:
    """(seconds after start-up, start-up seconds, records written) of one ``cdcflow run --until-idle``
    in its own process."""
    dst = os.path.join(work, f"{pid}.out.jsonl")
    path = os.path.join(work, f"{pid}.yaml")
    with open(path, "w") as f:
        f.write(PIPELINE.format(pid=pid, src=src, dst=dst, processors=FIELD_SET if field_set else "",
                                partitions=f'          partitions: "{partitions}"\n' if partitions else ""))
    cli = os.path.join(os.path.dirname(sys.executable), "cdcflow")
    run = subprocess.run([cli, "run", "--until-idle", "--master", master, "--state-dir",
                          os.path.join(work, pid + ".state"), path], capture_output=True, text=True)
    timing = re.search(r"([0-9.]+)s running \+ ([0-9.]+)s Spark start-up", run.stdout + run.stderr)
    if run.returncode != 0 or timing is None:
        raise SystemExit(f"engine run failed ({run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    with open(dst, "rb") as f:
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 22), b""))
    os.unlink(dst)
    return float(timing.group(1)), float(timing.group(2)), lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--partitions", type=int, help="the file source's partitions setting (default: its default)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench_generic_")
    try:
        src = os.path.join(work, "in.jsonl")
        write_input(src, args.rows)
        print(f"rows={args.rows} input={os.path.getsize(src) / 1e6:.0f} MB master={args.master} "
              f"partitions={args.partitions or 'default'} kernels off={os.environ.get('CDCFLOW_KERNELS_OFF', '-')} "
              f"load={os.getloadavg()[0]:.1f}")
        for case, field_set in (("file -> file", False), ("file -> field.set -> file", True)):
            best_loop = best_engine = float("inf")
            startup = 0.0
            for r in range(args.repeat):
                t0 = time.perf_counter()
                got = loop(src, os.path.join(work, "loop.jsonl"), field_set)
                best_loop = min(best_loop, time.perf_counter() - t0)
                assert got == args.rows, got
                seconds, up, wrote = engine(work, src, f"{'set' if field_set else 'copy'}{r}", field_set,
                                                  args.master, args.partitions)
                assert wrote == args.rows, f"engine wrote {wrote} lines of {args.rows}"
                if seconds < best_engine:
                    best_engine, startup = seconds, up
            n = args.rows
            print(f"{case:<28} cdcflow {n / best_engine:>10,.0f} rec/s   loop {n / best_loop:>10,.0f} rec/s   "
                  f"ratio {best_loop / best_engine:.2f}   (start-up {startup:.1f} s, not counted)")
        print(f"load after: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
