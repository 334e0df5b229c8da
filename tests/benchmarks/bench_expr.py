"""Conditions and templates: Conduit's Go-template syntax against cdcflow's older expression syntax.

Issue 15's benchmark: records/s of a Go-template condition and of a templated ``field.set`` against
the same logic in the older syntax, on the same records (target ≥ 0.8×). Each pair is built through
the processor chain as a pipeline builds it (``build_chain``: a condition on ``filter``, a template in
``field.set``'s value) and runs over the same batches in this process; the runs are interleaved and
the best of ``--rounds`` is kept, so a loaded machine slows both sides alike.

    .venv/bin/python tests/benchmarks/bench_expr.py [--records N] [--batch N] [--rounds N]
"""

from __future__ import annotations

import argparse
import gc
import time

from cdcflow.pipeline.chain import build_chain
from cdcflow.pipeline.model import ProcessorConfig
from cdcflow.record import Operation, Record
from cdcflow.registry import load_registry

#: (row, Go template processor, older-syntax processor): (plugin, condition, settings)
CASES = [
    ("condition: field equals text (filter)",
     ("filter", '{{ eq .Payload.After.status "deleted" }}', {}),
     ("filter", 'Payload.After.status == "deleted"', {})),
    ("condition: metadata key, negated (filter)",
     ("filter", '{{ eq (index .Metadata "opencdc.collection") "shop.users" | not }}', {}),
     ("filter", 'not Metadata["opencdc.collection"] == "shop.users"', {})),
    ("field.set: one field",
     ("field.set", None, {"field": ".Metadata.name", "value": "{{ .Payload.After.name }}"}),
     ("field.set", None, {"field": ".Metadata.name", "value": "{{ Payload.After.name }}"})),
    ("field.set: text, function, two fields",
     ("field.set", None, {"field": ".Payload.After.label", "value": "user {{ .Payload.After.name | upper }} #{{ .Payload.After.id }}"}),
     ("field.set", None, {"field": ".Payload.After.label", "value": "user {{ upper(Payload.After.name) }} #{{ Payload.After.id }}"})),
]


def make_records(n: int) -> list[Record]:
    return [
        Record(str(i).encode(), Operation.CREATE, {"opencdc.collection": "shop.users" if i % 3 else "shop.orders"},
               {"id": i}, None,
               {"id": i, "name": f"user{i}", "status": "deleted" if i % 10 == 0 else "ok", "score": i * 0.5})
        for i in range(n)
    ]


def chain_of(registry, plugin: str, condition: str | None, settings: dict):
    return build_chain([ProcessorConfig(id="p", plugin=plugin, condition=condition, settings=dict(settings))], registry)


def run(chain, batches: list[list[Record]]) -> float:
    gc.collect()
    start = time.perf_counter()
    for batch in batches:
        chain.process(batch)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    registry = load_registry()
    print(f"{args.records:,} records in batches of {args.batch}, best of {args.rounds} interleaved rounds")
    print(f"{'row':45} {'Go template':>14} {'older syntax':>14} {'ratio':>6}")
    for name, go, old in CASES:
        chains = {"go": chain_of(registry, *go), "old": chain_of(registry, *old)}
        best = {"go": float("inf"), "old": float("inf")}
        for _ in range(args.rounds):
            for side in ("go", "old"):  # fresh records each run: field.set changes them
                records = make_records(args.records)
                batches = [records[i:i + args.batch] for i in range(0, len(records), args.batch)]
                best[side] = min(best[side], run(chains[side], batches))
        go_rate, old_rate = args.records / best["go"], args.records / best["old"]
        print(f"{name:45} {go_rate:>12,.0f}/s {old_rate:>12,.0f}/s {go_rate / old_rate:>5.2f}×")
        for c in chains.values():
            c.teardown()


if __name__ == "__main__":
    main()
