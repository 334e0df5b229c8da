"""Large TiDB transactions through the real broker: thousands of rows share one commit ts.

The replay filter must stay exact (TiCDC replays after a restart are dropped, rows not yet
applied get through) while every record position stays small: a position carrying every
handle of the transaction would make a 100k-row transaction quadratic in time and memory.
"""

from __future__ import annotations

import orjson
import pytest

from helpers.kafka import ORDERS, ResolvedEvent, create_topic, make_destination, make_source, read_all, record, row, tso

ROWS = 3000
MAX_POSITION = 600  # bytes; the handles of 3000 rows would take ~20 KB


def _write(servers, uri, events):
    dst = make_destination({"uri": uri, "partition": "index-value", "max-batch-size": "16"})
    assert dst.write([record(e) for e in events]) is None
    dst.teardown()


def _read_first(src, partition, n):
    src.open(None, partition)
    got = []
    while len(got) < n:
        got += src.read(n - len(got))
    src.ack([r.position for r in got])
    src.teardown()
    return got


@pytest.mark.parametrize("protocol", ["canal-json", "open-protocol"])
def test_row_mode_restart_inside_a_large_transaction_after_a_ticdc_replay(kafka_broker, unique_name, protocol):
    topic = unique_name
    create_topic(kafka_broker, topic, 1)
    uri = f"kafka://{kafka_broker}/{topic}?protocol={protocol}&enable-tidb-extension=true"
    txn = [row(ORDERS, i, tso(500)) for i in range(ROWS)]
    _write(kafka_broker, uri, [row(ORDERS, -1, tso(400))] + txn)
    first = _read_first(make_source({"uri": uri}), f"{topic}:0", 1001)  # cut inside the transaction
    assert max(len(r.position) for r in first) < MAX_POSITION
    assert b'"at"' in first[-1].position  # the position names where the transaction began
    # TiCDC restarts: the whole transaction again, then a new one
    _write(kafka_broker, uri, txn + [row(ORDERS, ROWS, tso(600))])
    src = make_source({"uri": uri})
    rest = read_all(src, f"{topic}:0", position=first[-1].position, idle=1.0)
    src.teardown()
    assert [r.after["id"] for r in rest] == list(range(1000, ROWS)) + [ROWS]
    assert max(len(r.position) for r in rest) < MAX_POSITION


def test_transaction_mode_restart_inside_a_large_release(kafka_broker, unique_name):
    topic = unique_name
    create_topic(kafka_broker, topic, 3)
    uri = f"kafka://{kafka_broker}/{topic}?protocol=open-protocol"
    txn = [row(ORDERS, i, tso(500)) for i in range(ROWS)]
    _write(kafka_broker, uri, txn + [ResolvedEvent(tso(550))])
    settings = {"uri": uri, "consistency": "transaction"}
    first = _read_first(make_source(settings), "*", 1200)
    assert len({r.after["id"] for r in first}) == 1200
    assert max(len(r.position) for r in first) < MAX_POSITION
    # restart from the 1200th record, after TiCDC replayed the segment and went on
    _write(kafka_broker, uri, txn + [row(ORDERS, ROWS, tso(600)), ResolvedEvent(tso(650))])
    src = make_source(settings)
    rest = read_all(src, "*", position=first[-1].position, idle=1.0)
    src.teardown()
    got = [r.after["id"] for r in rest if r.control is None]
    assert sorted(got) == sorted(set(range(ROWS)) - {r.after["id"] for r in first}) + [ROWS]
    assert len(got) == len(set(got))
    assert max(len(r.position) for r in rest) < MAX_POSITION
    resolved = [orjson.loads(r.metadata["ticdc.resolved-ts"]) >> 18 for r in rest if r.control == "resolved"]
    assert resolved[-1] == 650
