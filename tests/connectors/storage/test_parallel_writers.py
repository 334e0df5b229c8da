"""Several writers in one layout on S3 (moto's server): nothing lost, no object written twice.

Spark runs one task per source partition, each with its own ``storage`` destination, so a
table spread over Kafka partitions has several writers in one data directory; two
``cdcflow run``s on one prefix do the same. A create-only write (``If-None-Match: *``) makes
the store refuse a taken name; the writer then moves past it. Bucket versioning shows any
overwrite: every key must have exactly one version.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from cdcflow.connectors.generator import SOURCE_PARAMS as GEN_PARAMS
from cdcflow.connectors.generator import GeneratorSource
from cdcflow.connectors.storage.settings import DESTINATION_PARAMS, resolve
from cdcflow.connectors.storage.writer import DataDirectory, FileStore
from cdcflow.connectors.ticdc.canal_json import (
    CanalJsonDecoder,
    CanalJsonEncoder,
    CanalJsonOptions,
)
from cdcflow.connectors.ticdc.events import from_record
from cdcflow.params import validate
from cdcflow.schemas import default_store
from confluent_kafka import Producer
from helpers.kafka import create_topic
from helpers.storage import FORMATS, comparable, pipeline_file, read_all
from helpers.storage_lake import (
    assert_no_overwrite,
    cdcflow_run,
    finish,
    versioned_lake,
)


def test_concurrent_writers_of_one_data_directory_never_share_a_file(moto_server):
    """Four writers, 25 files each, one directory: 100 files, each key written once."""
    uri, creds, client = versioned_lake(moto_server)
    settings = resolve(validate("storage", DESTINATION_PARAMS, {"uri": uri, **creds}))
    rel = "db/t/1/2024-01-01"
    start = threading.Barrier(4)
    failures = []

    def writer(w: int) -> None:
        try:
            d = DataDirectory(FileStore.of(settings), rel, 6, "csv")
            start.wait()
            for k in range(25):
                d.write(f"{w},{k}\r\n".encode())
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            failures.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, failures
    store = FileStore.of(settings)
    names = [n for n, _ in store.listdir(rel) if n.endswith(".csv")]
    contents = Counter(store.read(f"{rel}/{n}") for n in names)
    assert len(names) == 100 and len(contents) == 100 and set(contents.values()) == {1}
    assert_no_overwrite(client, uri)


# ---------------------------------------------------------------- journeys through ``cdcflow run``


def generated(seed: int, count: int) -> list:
    g = GeneratorSource()
    g.configure(validate("generator", GEN_PARAMS, {"format.type": "tidb", "operations": "create", "seed": str(seed),
                                                   "recordCount": str(count), "partitions": "1"}))
    g.open(None, "0")
    return g.read(count)


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.timeout(900)
def test_kafka_table_over_three_partitions_to_s3_every_row_once(moto_server, kafka_broker, unique_name, tmp_path):
    """One table's canal-json rows spread over 3 partitions: 3 Spark tasks write one data directory."""
    uri, creds, client = versioned_lake(moto_server)
    store = default_store()
    events = [from_record(r, store) for r in generated(21, 6000)]
    encoder = CanalJsonEncoder(CanalJsonOptions(enable_tidb_extension=True, content_compatible=True))
    create_topic(kafka_broker, unique_name, 3)
    producer = Producer({"bootstrap.servers": kafka_broker})
    for k, ev in enumerate(events):
        producer.produce(unique_name, encoder.encode(ev), partition=k % 3)
    assert producer.flush(30) == 0

    lake = {"uri": uri, **FORMATS["csv"], **creds}
    path = pipeline_file(tmp_path / "k.yaml", "kafka-to-s3",
                         ("builtin:kafka", {"servers": kafka_broker, "topics": unique_name, "protocol": "canal-json",
                                            "enable-tidb-extension": "true", "read-from": "earliest"}),
                         ("builtin:storage", lake), batch=50)
    state = tmp_path / "state"
    for _ in range(5):  # --until-idle may end before a consumer's first fetch; a re-run resumes
        finish(cdcflow_run(path, state, master="local[3]"))  # the 3 partitions' tasks at once
        if len(read_all(lake)) >= len(events):
            break
    decoder = CanalJsonDecoder()
    want = Counter(repr(comparable(decoder.decode(encoder.encode(ev)))) for ev in events)
    got = Counter(repr(comparable(from_record(r, store))) for _, r in read_all(lake))
    assert len(want) == len(events)  # rows are distinguishable
    assert got == want, f"{sum((want - got).values())} rows lost, {sum((got - want).values())} extra"
    assert_no_overwrite(client, uri)


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(900)
def test_two_concurrent_runs_on_one_prefix_keep_every_row(moto_server, tmp_path):
    """Two ``cdcflow run``s (own Spark each) write the same table of the same prefix at once."""
    uri, creds, client = versioned_lake(moto_server)
    lake = {"uri": uri, **FORMATS["csv"], **creds}
    count = 3000
    procs = []
    for seed in (31, 32):
        gen = {"format.type": "tidb", "operations": "create", "seed": str(seed), "recordCount": str(count),
               "partitions": "1", "rate": "1500"}
        path = pipeline_file(tmp_path / f"g{seed}.yaml", f"gen-{seed}", ("builtin:generator", gen),
                             ("builtin:storage", lake), batch=40)
        procs.append(cdcflow_run(path, tmp_path / f"state-{seed}"))
    for proc in procs:
        finish(proc)
    store = default_store()
    want = Counter(repr(comparable(from_record(r, store))) for seed in (31, 32) for r in generated(seed, count))
    got = Counter(repr(comparable(from_record(r, store))) for _, r in read_all(lake))
    assert sum(want.values()) == 2 * count
    assert got == want, f"{sum((want - got).values())} rows lost, {sum((got - want).values())} extra"
    assert_no_overwrite(client, uri)
