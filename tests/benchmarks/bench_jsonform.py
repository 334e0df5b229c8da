"""JSON form writer (``jsonform.dumps_lines``, what the ``file`` destination writes): the compiled
kernel (runtime/convert/_jsonform.c) vs the Python path, CPU µs per record, one batch per call.

Record shapes: raw 1 KB payload (bench_standalone's raw records), the 10-field structured row of
bench_standalone (derived schemas), bench_storage's 10-column TiDB row as the storage source makes
it (named schemas), and generator records of every TiDB type (create/update/delete).
Best of 5 interleaved rounds of ``time.process_time()``; run on one core for stable figures:

    taskset -c 0 .venv/bin/python tests/benchmarks/bench_jsonform.py [--records 20000]
"""

from __future__ import annotations

import argparse
import gc
import time

import bench_standalone
import bench_storage

from cdcflow.connectors.generator import SOURCE_PARAMS, GeneratorSource
from cdcflow.connectors.ticdc.events import INSERT, RowChange, to_record
from cdcflow.convert import jsonform
from cdcflow.params import validate
from cdcflow.schemas import default_store


def storage_records(n: int, store) -> list:
    t = bench_storage.table(0)
    out = []
    for k, row in enumerate(bench_storage.rows(n, t, 0)):
        r = to_record(RowChange(t, INSERT, (1 << 18) * 10 + k, row), b"", store)
        r.position = b"bench/t0/%d" % k
        out.append(r)
    return out


def generator_records(n: int) -> list:
    src = GeneratorSource()
    src.configure(validate("generator", SOURCE_PARAMS, {
        "format.type": "tidb", "recordCount": str(n), "operations": "create,update,delete"}))
    src.open(None, "0")
    return src.read(n)


def cpu_of(make) -> tuple[float, float]:
    """CPU seconds of one dumps_lines pass over fresh records, (Python path, kernel): fresh records
    per pass, so no cache a pass leaves in the values (str's UTF-8) helps the next."""
    times = []
    for use_kernel in (False, True):
        batches = make()
        jsonform._kernel = KERNEL if use_kernel else None
        gc.collect()
        gc.disable()
        try:
            c0 = time.process_time()
            for b in batches:
                jsonform.dumps_lines(b)
            times.append(time.process_time() - c0)
        finally:
            gc.enable()
    jsonform._kernel = KERNEL
    return times[0], times[1]


KERNEL = jsonform._kernel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20000)
    n = ap.parse_args().records
    store = default_store()
    if KERNEL is None:
        print("kernel not built or CDCFLOW_PURE_PYTHON=1: nothing to compare")
        return

    def batched(records: list) -> list:
        return [records[i:i + 1000] for i in range(0, len(records), 1000)]

    shapes = [
        ("raw 1 KB", lambda: batched(bench_standalone.raw_records(n))),
        ("structured 10 fields", lambda: batched(bench_standalone.structured_records(n))),
        ("storage TiDB row", lambda: batched(storage_records(n, store))),
        ("generator all types", lambda: batched(generator_records(n))),
    ]
    print(f"{'records':24} {'python us':>10} {'kernel us':>10} {'speed-up':>9}")
    for name, make in shapes:
        batches = make()
        jsonform._kernel = None
        expected = b"".join(jsonform.dumps_lines(b) for b in batches)
        jsonform._kernel = KERNEL
        assert b"".join(jsonform.dumps_lines(b) for b in make()) == expected, name
        py = k = float("inf")
        for _ in range(5):  # interleaved: load from other processes hits both alike
            p, c = cpu_of(make)
            py, k = min(py, p), min(k, c)
        print(f"{name:24} {py / n * 1e6:10.2f} {k / n * 1e6:10.2f} {py / k:8.1f}x")


if __name__ == "__main__":
    main()
