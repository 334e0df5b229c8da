"""Throughput of the built-in connectors, in process, one core.

    .venv/bin/python tests/benchmarks/bench_builtin_connectors.py [--records N]

Generator: records/s produced per format. File: records/s appended (one write +
fsync per batch of 1000) and read back, for structured 1 KB-ish records and for
rows of every TiDB type.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from cdcflow.registry import load_registry

BATCH = 1000


def generate(reg, settings: dict[str, str], n: int) -> tuple[list, float]:
    info = reg.connector("builtin:generator")
    src = info.new_source()
    src.configure(info.validate("source", {**settings, "recordCount": str(n)}))
    src.open(None)
    out = []
    start = time.perf_counter()
    while (batch := src.read(BATCH)) is not None:
        out += batch
    return out, time.perf_counter() - start


def file_round_trip(reg, records: list, path: Path) -> tuple[float, float]:
    info = reg.connector("builtin:file")
    dest = info.new_destination()
    dest.configure(info.validate("destination", {"path": str(path)}))
    dest.open()
    start = time.perf_counter()
    for i in range(0, len(records), BATCH):
        dest.write(records[i:i + BATCH])
    write_s = time.perf_counter() - start
    dest.teardown()
    src = info.new_source()
    src.configure(info.validate("source", {"path": str(path), "format": "opencdc/json"}))
    src.open(None)
    got = 0
    start = time.perf_counter()
    while got < len(records):
        got += len(src.read(BATCH))
    return write_s, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20_000)
    n = ap.parse_args().records
    reg = load_registry(None)
    formats = {
        "structured (8 fields)": {"format.type": "structured", **{f"format.options.f{i}": t for i, t in
                                  enumerate(["int", "string", "time", "bool"] * 2)}},
        "raw (8 fields)": {"format.type": "raw", **{f"format.options.f{i}": t for i, t in
                           enumerate(["int", "string", "time", "bool"] * 2)}},
        "tidb (45 columns)": {"format.type": "tidb", "operations": "create,update,delete"},
    }
    print(f"{'records':<22} {'generate rec/s':>15} {'file write rec/s':>17} {'file read rec/s':>16} {'MB written':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, settings in formats.items():
            records, gen_s = generate(reg, settings, n)
            path = Path(tmp) / f"{label.split()[0]}.jsonl"
            write_s, read_s = file_round_trip(reg, records, path)
            mb = path.stat().st_size / 1e6
            print(f"{label:<22} {n / gen_s:>15,.0f} {n / write_s:>17,.0f} {n / read_s:>16,.0f} {mb:>11.1f}")


if __name__ == "__main__":
    main()
