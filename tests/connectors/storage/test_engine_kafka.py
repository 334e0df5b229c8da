"""TiCDC -> Kafka (canal-json with the TiDB extension) -> ``kafka`` source -> ``storage`` destination
through the engine: the path users run to land TiCDC changes in a lake. The messages are what TiCDC's
canal-json encoder writes (cdcflow's encoder, byte-compatible), watermarks included, so the root
``metadata`` checkpoint-ts must advance to the last watermark."""

from __future__ import annotations

import json

from cdcflow.connectors.generator import SOURCE_PARAMS as GEN_PARAMS
from cdcflow.connectors.generator import GeneratorSource
from cdcflow.connectors.ticdc.canal_json import (
    CanalJsonDecoder,
    CanalJsonEncoder,
    CanalJsonOptions,
)
from cdcflow.connectors.ticdc.events import ResolvedEvent, from_record
from cdcflow.params import validate
from cdcflow.schemas import default_store
from confluent_kafka import Producer
from helpers.kafka import create_topic
from helpers.storage import FORMATS, comparable, pipeline_file, read_all, run_until_idle


def _generator_events(n: int):
    g = GeneratorSource()
    g.configure(validate("generator", GEN_PARAMS, {"format.type": "tidb", "operations": "create,update,delete",
                                                   "recordCount": str(n), "seed": "5"}))
    g.open(None, "0")
    store = default_store()
    return [from_record(r, store) for r in g.read(n)]


def test_kafka_canal_json_to_storage_advances_checkpoint(spark, kafka_broker, unique_name, tmp_path):
    topic = unique_name
    create_topic(kafka_broker, topic, 2)
    events = _generator_events(400)
    encoder = CanalJsonEncoder(CanalJsonOptions(enable_tidb_extension=True, content_compatible=True))
    watermarks = [events[199].commit_ts, events[-1].commit_ts + 1]
    producer = Producer({"bootstrap.servers": kafka_broker})
    messages = []
    for k, ev in enumerate(events):
        messages.append((0, encoder.encode(ev)))  # one table -> one partition, as TiCDC's default dispatcher
        if k in (199, len(events) - 1):
            wm = encoder.encode(ResolvedEvent(watermarks[0] if k == 199 else watermarks[1]))
            messages += [(0, wm), (1, wm)]  # watermarks go to every partition
    for partition, value in messages:
        producer.produce(topic, value, partition=partition)
    assert producer.flush(15) == 0

    lake = {"uri": str(tmp_path / "lake"), **FORMATS["csv"]}
    path = pipeline_file(tmp_path / "k.yaml", "kafka-to-lake",
                         ("builtin:kafka", {"servers": kafka_broker, "topics": topic, "protocol": "canal-json",
                                            "enable-tidb-extension": "true", "read-from": "earliest"}),
                         ("builtin:storage", lake), batch=150)
    state = tmp_path / "state"
    written = 0
    for _ in range(5):  # --until-idle may end before the consumer's first fetch; a re-run resumes
        written += run_until_idle(path, state).totals.total_written()
        if written >= len(events):
            break
    # decoded exactly as the kafka source decodes (canal-json keeps what it can carry)
    decoder = CanalJsonDecoder()
    want = [repr(comparable(decoder.decode(encoder.encode(ev)))) for ev in events]
    store = default_store()
    got = [repr(comparable(from_record(r, store))) for _, r in read_all(lake)]
    assert got == want
    meta = json.loads((tmp_path / "lake" / "metadata").read_text())
    assert meta == {"checkpoint-ts": watermarks[1]}
    assert all(p.name.startswith("CDC") for p in (tmp_path / "lake").rglob("*.csv"))
