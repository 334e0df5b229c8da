"""``cdcflow quickstart``: the TiCDC path through Kafka on the embedded defaults, checked.

Starts the embedded broker and the built-in registry (``cdcflow dev``), runs the two
pipelines of ``examples/quickstart-kafka.yaml`` with ``--until-idle`` in one Spark
session (generator → ``kafka`` destination, Avro + registry; ``kafka`` source →
``field.set`` → ``file``), stops the services, then proves the values arrived intact:
it regenerates the generator's records (the generator is a pure function of its
settings) and compares them with the destination file's records, type by type.

Why a command and not a README recipe: the services must be started before and stopped
after the runs whatever happens, and the check is the point of the exercise.
Each run starts from scratch (fresh state, fresh output): the broker keeps its data in
memory, so positions saved by an earlier run would point into topics that no longer exist.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, TextIO

from cdcflow.errors import CdcflowError, ConfigError

from . import services

EXAMPLE = Path("examples") / "quickstart-kafka.yaml"
PRODUCER_PIPELINE = "to-kafka"
CONSUMER_PIPELINE = "from-kafka"
STATE_SUBDIR = Path(".cdcflow") / "quickstart-kafka"
DEFAULT_OUTPUT = Path("out") / "quickstart-kafka.jsonl"
MAX_REPORTED_DIFFERENCES = 10


class QuickstartError(CdcflowError):
    """A quickstart step failed (a pipeline run, the services, reading the output)."""


# -- comparing -------------------------------------------------------------------------
@dataclass
class Comparison:
    """Outcome of comparing generated records with the records that arrived."""

    expected: int = 0
    arrived: int = 0
    row_images: int = 0  # insert/update after-images compared column by column
    delete_keys: int = 0  # deletes: TiCDC Avro carries the key only
    columns: int = 0
    by_operation: dict[str, int] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)

    @property
    def intact(self) -> bool:
        return not self.differences and self.expected == self.arrived and self.expected > 0


def _same(a: Any, b: Any) -> bool:
    """Equal value AND the same Python type (True != 1 here; NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _record_id(r) -> Any:
    key = r.key
    if isinstance(key, dict):
        return tuple(sorted(key.items()))
    return key


def compare_records(expected: Iterable, arrived: Iterable) -> Comparison:
    """Compare by key: operation, collection and the values TiCDC Avro carries, type-strict.

    Inserts and updates carry the full after-image; deletes only the handle key;
    updates no before-image (TiCDC's Avro has no old value) — those are not compared.
    """
    cmp = Comparison()
    want = {}
    for r in expected:
        cmp.expected += 1
        want[_record_id(r)] = r
    seen = set()
    diffs = cmp.differences

    def diff(text: str) -> None:
        if len(diffs) < MAX_REPORTED_DIFFERENCES:
            diffs.append(text)
        elif len(diffs) == MAX_REPORTED_DIFFERENCES:
            diffs.append("... more differences not shown")

    for got in arrived:
        cmp.arrived += 1
        rid = _record_id(got)
        exp = want.get(rid)
        if exp is None:
            diff(f"key {rid}: arrived but never generated")
            continue
        if rid in seen:
            diff(f"key {rid}: arrived twice")
            continue
        seen.add(rid)
        op = exp.operation.text
        cmp.by_operation[op] = cmp.by_operation.get(op, 0) + 1
        if got.operation is not exp.operation:
            diff(f"key {rid}: operation {got.operation.text}, generated {op}")
            continue
        coll = "opencdc.collection"
        if got.metadata.get(coll) != exp.metadata.get(coll):
            diff(f"key {rid}: collection {got.metadata.get(coll)!r}, generated {exp.metadata.get(coll)!r}")
        if exp.after is None:  # delete: the key is the image
            cmp.delete_keys += 1
            continue
        a, b = exp.after, got.after or {}
        if set(a) != set(b):
            diff(f"key {rid}: columns differ: missing {sorted(set(a) - set(b))}, extra {sorted(set(b) - set(a))}")
            continue
        cmp.row_images += 1
        cmp.columns = max(cmp.columns, len(a))
        for col, value in a.items():
            if not _same(value, b[col]):
                diff(f"key {rid} column {col}: arrived {type(b[col]).__name__} {_short(b[col])}, "
                     f"generated {type(value).__name__} {_short(value)}")
    missing = len(want) - len(seen)
    if missing:
        some = [k for k in want if k not in seen][:3]
        diff(f"{missing} generated records did not arrive (e.g. keys {some})")
    return cmp


# -- the generator side ---------------------------------------------------------------
def _pipeline(doc: dict, pipeline_id: str, path: Path) -> dict:
    for p in doc.get("pipelines") or []:
        if p.get("id") == pipeline_id:
            return p
    raise ConfigError("quickstart", "pipelines", "required", f"{path}: no pipeline {pipeline_id!r}")


def generated_records(example: Path) -> list:
    """The records the producer pipeline's generator emits, rebuilt in this process."""
    import yaml

    from cdcflow.connectors.generator import SOURCE_PARAMS, GeneratorSource
    from cdcflow.params import validate

    doc = yaml.safe_load(example.read_text())
    pipe = _pipeline(doc, PRODUCER_PIPELINE, example)
    src = next((c for c in pipe.get("connectors", []) if c.get("type") == "source"), None)
    if src is None or src.get("plugin") not in ("builtin:generator", "generator"):
        raise ConfigError("quickstart", "connectors", "plugin",
                          f"{example}: pipeline {PRODUCER_PIPELINE} must read from builtin:generator")
    gen = GeneratorSource()
    gen.id = src.get("id", "rows")
    gen.configure(validate("generator", SOURCE_PARAMS, {k: str(v) for k, v in (src.get("settings") or {}).items()}))
    out = []
    for part in gen.partitions():
        gen.open(None, part)
        while (batch := gen.read(10_000)) is not None:
            out.extend(batch)
    return out


def arrived_records(path: Path, store_path: Path) -> list:
    from cdcflow.convert import jsonform
    from cdcflow.schemas import SchemaStore

    if not path.exists():
        raise QuickstartError(f"quickstart: the destination file {path} was not written")
    store = SchemaStore(store_path)
    return jsonform.loads_lines(path.read_bytes(), store)


def registry_subjects(url: str) -> list[str]:
    with urllib.request.urlopen(f"{url}/subjects", timeout=10) as resp:  # noqa: S310 - local registry
        return sorted(json.loads(resp.read()))


# -- the run ---------------------------------------------------------------------------
def find_example(explicit: str | None) -> Path:
    if explicit:
        path = Path(explicit)
    elif EXAMPLE.exists():
        path = EXAMPLE
    else:  # run from elsewhere: the checkout this cdcflow is installed from
        path = Path(__file__).resolve().parents[2] / EXAMPLE
    if not path.is_file():
        raise ConfigError("quickstart", "file", "required", f"pipeline file {path} not found")
    return path.resolve()


def _run(example: Path, pipeline_id: str, state_dir: Path, env: dict[str, str], master: str,
         out: TextIO) -> None:
    from cdcflow.engine.runner import run_files

    print(f"\n== cdcflow run {example.name} --pipeline {pipeline_id} --until-idle", file=out, flush=True)
    outcome = run_files([str(example)], pipeline_ids=[pipeline_id], until_idle=True, state_dir=str(state_dir),
                        env=env, master=master, out=out, progress=False)
    if outcome.exit_code != 0:
        why = "; ".join(outcome.problems or outcome.failures) or f"exit code {outcome.exit_code}"
        raise QuickstartError(f"quickstart: pipeline {pipeline_id} failed: {why}")


def run_quickstart(file: str | None = None, *, master: str = "local[2]", out: TextIO | None = None) -> int:
    """Everything ``cdcflow quickstart`` does; returns the exit code (0 only when values are intact)."""
    out = out or sys.stdout
    example = find_example(file)
    base = example.parent
    state_dir = base / STATE_SUBDIR
    output = base / DEFAULT_OUTPUT
    shutil.rmtree(state_dir, ignore_errors=True)  # ours alone; see the module docstring
    output.unlink(missing_ok=True)
    state_dir.mkdir(parents=True)
    dev_dir = state_dir / "dev"
    started = time.monotonic()
    dev, _ = services.up(dev_dir)
    print("started the embedded services:", file=out)
    for name, label in ((services.BROKER, "bootstrap servers"), (services.REGISTRY, "schema registry")):
        svc = dev.services[name]
        print(f"  {label:18} {svc.address:28} pid {svc.pid}", file=out)
    env = {k: v for k, v in os.environ.items() if k != "QUICKSTART_OUTPUT"}
    env.update(CDCFLOW_KAFKA=dev.bootstrap_servers, CDCFLOW_REGISTRY=dev.registry_url)
    session = None
    try:
        from cdcflow.engine.spark.session import start_session
        from cdcflow.engine.state import StateDir

        state = StateDir(state_dir).create()
        session = start_session(master, {}, state)  # one session for both runs: one JVM start-up
        _run(example, PRODUCER_PIPELINE, state_dir, env, master, out)
        _run(example, CONSUMER_PIPELINE, state_dir, env, master, out)
        subjects = registry_subjects(dev.registry_url)
    finally:
        if session is not None and session.owned:
            session.stop()
        stopped = services.down(dev_dir)
    expected = generated_records(example)
    arrived = arrived_records(output, state.schema_store_path)
    cmp = compare_records(expected, arrived)
    ops = ", ".join(f"{op} {n:,}" for op, n in sorted(cmp.by_operation.items()))
    print("\n== quickstart summary", file=out)
    print(f"  generated          {cmp.expected:,} TiDB-typed rows (pipeline {PRODUCER_PIPELINE})", file=out)
    print(f"  registry subjects  {', '.join(subjects) or 'none'}", file=out)
    print(f"  arrived            {cmp.arrived:,} records in {output}", file=out)
    print(f"  by operation       {ops or '-'}", file=out)
    print(f"  compared           {cmp.row_images:,} row images x {cmp.columns} columns (value and type), "
          f"{cmp.delete_keys:,} delete keys", file=out)
    print("  not compared       update before-images (TiCDC Avro carries none)", file=out)
    for d in cmp.differences:
        print(f"  DIFFERENCE         {d}", file=out)
    states = ", ".join(f"{n} {'stopped' if was else 'had already exited'}" for n, was in stopped.items())
    print(f"  services           {states or 'none recorded'}", file=out)
    print(f"  time               {time.monotonic() - started:.1f}s", file=out)
    print(f"  values intact: {'yes' if cmp.intact else 'NO'}", file=out, flush=True)
    return 0 if cmp.intact else 1


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "quickstart",
        help="run the Kafka quickstart: embedded broker + registry, generator → kafka → file, values checked")
    p.add_argument("file", nargs="?", default=None,
                   help=f"pipeline file (default: {EXAMPLE}); its state and output are recreated beside it")
    p.add_argument("--master", default="local[2]", help="Spark master (default: local[2])")
    p.set_defaults(func=lambda args: run_quickstart(args.file, master=args.master))
