"""CPU per row of the storage source's lazy path: ``CsvDecoder.transcode`` + ``CsvJsonRows.lines``
(CSV text straight to the ``file`` destination's JSON lines) vs ``decode_columns`` +
``numbered_records`` + the engine's metadata stamp + ``jsonform.dumps_lines``.

    taskset -c 0 .venv/bin/python tests/benchmarks/bench_csv_jsonform.py [ROWS]
"""

import sys
import time

from bench_storage import rows, table
from cdcflow.connectors.ticdc.csv import CsvDecoder, CsvOptions, encode_table_rows
from cdcflow.connectors.ticdc.events import INSERT
from cdcflow.convert import jsonform
from cdcflow.schemas import default_store

N = int(sys.argv[1]) if len(sys.argv) > 1 else 250_000
BATCH = 10_000
store = default_store()
t = table(0)
o = CsvOptions(include_commit_ts=True)
data = encode_table_rows(t, [INSERT] * N, [(1 << 18) * 10 + k for k in range(N)], list(rows(N, t, 0)), None, o)
dec = CsvDecoder(t, o)
prefix = b"1|none|1|"
extra = {"opencdc.readAt": "1700000000000000000"}


def old():
    cols = dec.decode_columns(data)
    out = []
    for s in range(0, N, BATCH):
        recs = cols.numbered_records(prefix, store, s, s + BATCH)
        for r in recs:
            r.metadata.update(extra)
        out.append(jsonform.dumps_lines(recs, store))
    return out


def new():
    tr = dec.transcode(data, store)
    return [tr.lines(s, s + BATCH, prefix, extra) for s in range(0, N, BATCH)]


assert old() == new()
best = {}
for _ in range(5):
    for name, fn in (("old", old), ("new", new), ("decode_columns", lambda: dec.decode_columns(data)),
                     ("transcode", lambda: dec.transcode(data, store))):
        c = time.process_time(); fn(); c = time.process_time() - c
        best[name] = min(best.get(name, 1e9), c)
print(f"{'path':<16} {'us/row':>8}")
for k, v in best.items():
    print(f"{k:<16} {v / N * 1e6:8.3f}")
print(f"speed-up old/new: {best['old'] / best['new']:.2f}x")
