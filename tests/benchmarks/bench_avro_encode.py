"""Codec.encode CPU per record: the C kernel vs the generated Python writer vs fastavro.

Columns: fastavro after the strict check (the reference path), the generated Python
writer (the kernel off), ``codec.encode`` with the kernel, and ``codec.encoder()`` (the
kernel plan called directly, no Python frame per record).

Rows: the 10-field structured row of bench_standalone.py and the TiCDC-typed row holding
every TiDB type cdcflow maps to Avro (the rows of bench_avro_decode.py). CPU time
(process_time), best of 5 rounds interleaved across the sides, GC off. Pin it to one core
for steady figures:

    taskset -c 0 .venv/bin/python tests/benchmarks/bench_avro_encode.py [N]
"""

from __future__ import annotations

import sys

from bench_avro_decode import TIDB_TABLE, structured_row, tidb_row
from timing import cpu_per_record

from cdcflow import avro_values
from cdcflow.avro_values import Codec
from cdcflow.connectors.ticdc.schema import table_schema_avro


def measure(label: str, schema: dict, rows: list[dict]) -> tuple[str, list[float]]:
    codec = Codec(schema)
    assert avro_values._encode_kernel is not None, "kernel not built (or CDCFLOW_PURE_PYTHON=1)"
    encoder = codec.encoder()
    assert type(encoder) is avro_values._encode_kernel.Plan, "no kernel plan for this schema"
    python = codec._encode_python
    assert all(encoder.encode(r) == python(r) == codec._reference_encode(r) for r in rows), "outputs differ"
    return label, cpu_per_record([codec._reference_encode, python, codec.encode, encoder], rows)


def main(n: int = 20_000) -> None:
    results = [
        measure("structured 10 fields", avro_values.derive_schema(structured_row(0), "Record"),
                [structured_row(i) for i in range(n)]),
        measure("TiCDC row, 20 types", table_schema_avro(TIDB_TABLE), [tidb_row(i) for i in range(n)]),
    ]
    print(f"{'row':24} {'fastavro µs':>12} {'generated µs':>13} {'kernel µs':>10} {'speed-up':>9}"
          f" {'encoder() µs':>13}")
    for label, (ref_us, py_us, k_us, direct_us) in results:
        print(f"{label:24} {ref_us:12.2f} {py_us:13.2f} {k_us:10.2f} {py_us / k_us:8.1f}x {direct_us:13.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)
