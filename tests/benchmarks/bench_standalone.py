"""Records/s through a destination in-process vs the same destination as a standalone plugin.

The destination is the builtin ``file`` connector (JSON form, one write + fsync
per batch). Records are ~1 KB: a raw payload, and a structured row of ten
fields. Batches are what the runtime hands a destination (default 10 000).
Besides records/s it prints the CPU time per record of the host process and
of the plugin process (from /proc): on a loaded machine those are the steadier
figures; the wall-clock ratio needs two idle cores (host and plugin overlap).

    .venv/bin/python tests/benchmarks/bench_standalone.py [--records N] [--batch N] [--rounds N]
        [--network tcp|unix] [--dir DIR]

The two modes are measured in turns (``--rounds`` each) and the table gives medians: on a
shared or disk-bound machine single runs of either mode swing by 2x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from cdcflow.engine.middleware import connector_settings
from cdcflow.engine.spark.heap import keep_freed_memory
from cdcflow.record import Operation, Record
from cdcflow.registry import load_registry
from cdcflow.standalone.export import export_launcher
from cdcflow.standalone.host import HostOptions, StandaloneDestination


def raw_records(n: int) -> list[Record]:
    body = bytes(range(256)) * 4
    return [Record(position=i.to_bytes(8, "big"), operation=Operation.CREATE,
                   metadata={"opencdc.collection": "bench.raw"}, key=str(i).encode(), after=body) for i in range(n)]


def structured_records(n: int) -> list[Record]:
    out = []
    for i in range(n):
        row = {"id": i, "name": f"name-{i:08d}", "email": f"user{i}@example.com", "score": i * 0.5,
               "active": bool(i & 1), "count": i * 7, "note": "x" * 700, "city": "Amsterdam", "zip": "1011AB",
               "tags": "a,b,c,d"}
        out.append(Record(position=i.to_bytes(8, "big"), operation=Operation.CREATE,
                          metadata={"opencdc.collection": "bench.rows"}, key={"id": i}, after=row))
    return out


def plugin_cpu(dest) -> float:
    """CPU seconds (user + system) the plugin process used so far; 0 in-process."""
    proc = getattr(dest, "proc", None)
    if proc is None:
        return 0.0
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(dest, records: list[Record], batch: int) -> tuple[float, float, float]:
    """Wall seconds, host CPU seconds, plugin CPU seconds."""
    c0, p0, t0 = time.process_time(), plugin_cpu(dest), time.perf_counter()
    for i in range(0, len(records), batch):
        res = dest.write(records[i:i + batch])
        assert res is None, res
    return time.perf_counter() - t0, time.process_time() - c0, plugin_cpu(dest) - p0


def measure(info, launcher, tmp: str, label: str, mode: str, records: list[Record], args) -> tuple[float, float, float]:
    """One mode once: records/s, host and plugin CPU µs per record."""
    path = Path(tmp) / f"{label.replace(' ', '_')}-{mode}.jsonl"
    if mode == "in-process":
        dest = info.new_destination()
    else:
        env = {"CDCFLOW_PLUGIN_NETWORK": args.network} if args.network else {}
        dest = StandaloneDestination(launcher, options=HostOptions(extra_env=env))
    # the built-in's settings as the plugin itself takes them (the engine applies the sdk.* middleware
    # around an in-process plugin; the served plugin does not list those settings)
    dest.configure(connector_settings(info.validate("destination", {"path": str(path)}), info))
    dest.open()
    run(dest, records[: args.batch], args.batch)  # warm-up: schemas, connections
    elapsed, host_cpu, plug_cpu = run(dest, records, args.batch)
    dest.stop(records[-1].position)
    dest.teardown()
    # each measurement starts from the same page cache: the written file goes (its pages with
    # it) and the rest is synced, so the next one does not pay this one's writeback
    path.unlink()
    os.sync()
    per = 1e6 / len(records)
    return len(records) / elapsed, host_cpu * per, plug_cpu * per


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5,
                    help="measurements per mode, interleaved (in-process, standalone, in-process, ...); "
                         "the table shows medians")
    ap.add_argument("--network", choices=("tcp", "unix"), default=None,
                    help="what the plugin listens on (default: the runtime's default, a unix socket)")
    ap.add_argument("--dir", default=None,
                    help="where the destination writes (default: the temp dir; /dev/shm keeps disk writeback out)")
    args = ap.parse_args()
    keep_freed_memory()  # as in a Spark worker, where an in-process destination runs
    info = load_registry().connector("builtin:file")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        launcher = export_launcher("builtin:file", Path(tmp) / "plugins")
        print(f"plugin listens on: {args.network or 'the default (unix socket)'}; writes to {tmp}; "
              f"median of {args.rounds} interleaved rounds")
        print(f"{'payload':<12}{'mode':<14}{'records/s':>12}{'MB/s':>9}{'ratio':>8}"
              f"{'host µs/rec':>13}{'plugin µs/rec':>15}   ratio per round")
        for label, make in (("raw 1KB", raw_records), ("structured", structured_records)):
            records = make(args.records)
            volume = sum(len(r.after) if isinstance(r.after, bytes) else 1024 for r in records) / 1e6
            got: dict[str, list[tuple[float, float, float]]] = {"in-process": [], "standalone": []}
            for _ in range(args.rounds):
                for mode in got:
                    got[mode].append(measure(info, launcher, tmp, label, mode, records, args))
            per_round = [s[0] / i[0] for i, s in zip(got["in-process"], got["standalone"])]
            base = statistics.median(r[0] for r in got["in-process"])
            for mode, runs in got.items():
                rate = statistics.median(r[0] for r in runs)
                host, plugin = (statistics.median(r[k] for r in runs) for k in (1, 2))
                rounds = " ".join(f"{x:.2f}" for x in per_round) if mode == "standalone" else ""
                print(f"{label:<12}{mode:<14}{rate:>12,.0f}{volume * rate / len(records):>9.1f}{rate / base:>8.2f}"
                      f"{host:>13.2f}{plugin:>15.2f}   {rounds}")


if __name__ == "__main__":
    main()
