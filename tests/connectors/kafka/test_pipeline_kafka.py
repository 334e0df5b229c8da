"""Kafka through the engine: `cdcflow run` subprocesses against the real broker and registry.

Rows are produced as TiCDC would (Avro, extension on, schemas in the built-in registry, commit ts
rising per partition); pipelines read them with the `kafka` source. Covered: SIGKILL of the whole
run at several points (resume from the checkpoint, and from the group's committed offsets when the
checkpoint is gone), a replayed segment end to end, and schema evolution into a `kafka` destination
with the 409 going to the DLQ.
"""

from __future__ import annotations

import shutil
from collections import Counter

import pytest

from cdcflow.connectors.ticdc.avro import AvroDecoder
from cdcflow.connectors.ticdc.events import RowChange
from cdcflow.schemaregistry.client import RegistryClient
from cdcflow.connectors.ticdc.tidb import Column, TableSchema
from helpers.kafka import ORDERS, create_topic, raw_messages, row, tso
from helpers.kafka_pipeline import OPTIONS, committed, end_offsets, ids, kafka_to_file, kill_when, lines, orders, pipeline_file, produce, run_to_end, source_yaml, start_run


# -- helpers -------------------------------------------------------------------------------


# -- SIGKILL -------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigkill_at_several_points_loses_nothing(kafka_broker, schema_registry, unique_name, tmp_path):
    topic, parts, n, batch = unique_name, 3, 30_000, 500
    create_topic(kafka_broker, topic, parts)
    produce(kafka_broker, schema_registry, topic, [(i % parts, ev) for i, ev in enumerate(orders(range(n)))])
    out, state = tmp_path / "out.jsonl", tmp_path / "state"
    cfg = kafka_to_file(tmp_path, kafka_broker, schema_registry, topic, unique_name, out, "resume", batch)
    crashes = 0
    for at in (2_000, 9_000):  # killed with the checkpoint kept
        kill_when(start_run(cfg, state), out, at)
        crashes += 1
    # killed, then the engine's positions are lost: the group's committed offsets take over
    kill_when(start_run(cfg, state), out, 18_000)
    crashes += 1
    shutil.rmtree(state / "positions")
    run_to_end(cfg, state)

    got = Counter(ids(out))
    assert set(got) == set(range(n)), f"lost {sorted(set(range(n)) - set(got))[:10]}"
    dups = sum(c - 1 for c in got.values())
    # at-least-once: at most the batch in flight per partition per crash is written twice
    assert dups <= crashes * parts * batch, dups
    assert committed(kafka_broker, unique_name, topic, parts) == end_offsets(kafka_broker, topic, parts)
    # a further run finds nothing new: no output, no change
    before = out.stat().st_size
    run_to_end(cfg, state)
    assert out.stat().st_size == before


# -- replay --------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_replayed_segment_adds_no_duplicates_end_to_end(kafka_broker, schema_registry, unique_name, tmp_path):
    """TiCDC restarts and sends a segment again — within one run and across a cdcflow restart."""
    topic, parts = unique_name, 2
    create_topic(kafka_broker, topic, parts)
    segment = [(i % parts, ev) for i, ev in enumerate(orders(range(200)))]
    produce(kafka_broker, schema_registry, topic, segment)
    produce(kafka_broker, schema_registry, topic, segment[120:])  # replay while nothing was read yet
    out, state = tmp_path / "out.jsonl", tmp_path / "state"
    cfg = kafka_to_file(tmp_path, kafka_broker, schema_registry, topic, unique_name, out, "replay", 64)
    run_to_end(cfg, state)
    assert sorted(ids(out)) == list(range(200))
    assert len(raw_messages(kafka_broker, topic, idle=0.5)) == 280  # the replay really is in the topic

    # cdcflow restarted; TiCDC replays an older segment again, then continues with new rows
    produce(kafka_broker, schema_registry, topic, segment[40:200])
    produce(kafka_broker, schema_registry, topic,
            [(i % parts, ev) for i, ev in zip(range(200, 260), orders(range(200, 260)))])
    run_to_end(cfg, state)
    assert sorted(ids(out)) == list(range(260))
    assert committed(kafka_broker, unique_name, topic, parts) == end_offsets(kafka_broker, topic, parts)


# -- schema evolution into a kafka destination ---------------------------------------------
@pytest.mark.timeout(300)
def test_schema_evolution_end_to_end_409_to_dlq(kafka_broker, schema_registry, unique_name, tmp_path):
    """in-topic (compatibility NONE upstream) → kafka source → kafka destination (BACKWARD):
    a nullable column registers version 2; a NOT NULL column without default is refused with
    409 and those rows go to the DLQ with the reason; rows before and after are written."""
    src_topic, parts = f"{unique_name}-in", 1
    out_rule = f"{unique_name}-out-{{schema}}-{{table}}"
    out_topic = f"{unique_name}-out-shop-orders"
    client = RegistryClient(schema_registry)
    client.set_compatibility("NONE", f"{src_topic}-value")  # upstream accepts anything; downstream must judge
    create_topic(kafka_broker, src_topic, parts)
    widened = TableSchema("shop", "orders", ORDERS.columns + (Column("note", "VARCHAR", length=10),))
    strict = TableSchema("shop", "orders", widened.columns + (Column("must", "INT", nullable=False),))
    v1 = [row(ORDERS, i, tso(100 + i)) for i in range(0, 5)]
    v2 = [RowChange(widened, "insert", tso(100 + i), {**row(ORDERS, i, 0).row, "note": f"n{i}"}) for i in range(5, 10)]
    v3 = [RowChange(strict, "insert", tso(100 + i), {**row(ORDERS, i, 0).row, "note": None, "must": i})
          for i in range(10, 13)]
    v2_again = [RowChange(widened, "insert", tso(100 + i), {**row(ORDERS, i, 0).row, "note": None})
                for i in range(13, 16)]
    produce(kafka_broker, schema_registry, src_topic, [(0, ev) for ev in v1 + v2 + v3 + v2_again])

    dlq, state = tmp_path / "dlq.jsonl", tmp_path / "state"
    cfg = pipeline_file(tmp_path, f"""version: "2.2"
pipelines:
  - id: evolve
    status: running
    connectors:
{source_yaml(kafka_broker, schema_registry, src_topic, unique_name)}      - id: out
        type: destination
        plugin: builtin:kafka
        settings:
          uri: kafka://{kafka_broker}/{out_rule}?protocol=avro&enable-tidb-extension=true&partition-num=1
          schema-registry: {schema_registry}
    dead-letter-queue:
      plugin: builtin:file
      settings:
        path: {dlq}
      window-size: 0
""")
    out = run_to_end(cfg, state)
    assert "records nacked               3" in out, out[-3000:]

    subject = f"{out_topic}-value"
    assert client.versions(subject) == [1, 2]
    assert client.compatibility(subject) == "BACKWARD"
    dead = lines(dlq)
    assert [d["key"]["id"] for d in dead] == [10, 11, 12]
    for d in dead:
        reason = d["metadata"]["conduit.dlq.nack.error"]
        assert "409" in reason and "registry refused the schema" in reason, reason
        assert d["metadata"]["conduit.dlq.nack.node.id"].endswith("out")
        assert d["payload"]["after"]["must"] == d["key"]["id"]

    # consistent: every other row is in the output topic, in order, with its own schema version
    dec = AvroDecoder(OPTIONS, RegistryClient(schema_registry))
    written = [dec.decode(m.key(), m.value()) for m in raw_messages(kafka_broker, out_topic, idle=0.5)]
    assert [ev.row["id"] for ev in written] == list(range(0, 10)) + list(range(13, 16))
    assert [ev.row.get("note") for ev in written[5:10]] == [f"n{i}" for i in range(5, 10)]
    assert all("must" not in ev.row for ev in written)
    assert committed(kafka_broker, unique_name, src_topic, parts) == end_offsets(kafka_broker, src_topic, parts)

    # a re-run neither re-sends nor re-dead-letters anything
    run_to_end(cfg, state)
    assert len(raw_messages(kafka_broker, out_topic, idle=0.5)) == 13
    assert len(lines(dlq)) == 3
