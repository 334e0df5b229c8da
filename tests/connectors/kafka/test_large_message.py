"""large-message-handle-option=handle-key-only in the kafka destination (real broker)."""

from __future__ import annotations

import json

import pytest

from cdcflow.connectors.kafka.settings import resolve
from cdcflow.connectors.ticdc.open_protocol import OpenProtocolDecoder
from cdcflow.errors import ConfigError
from helpers.kafka import ORDERS, make_destination, make_source, raw_messages, read_all, record, row, tso


def _big(i: int, ts: int, kind: str = "insert"):
    ev = row(ORDERS, i, tso(ts), kind)
    ev.row["name"] = "x" * 3000
    return ev


def test_canal_json_too_large_row_goes_out_with_handle_key_only(kafka_broker, unique_name):
    uri = f"kafka://{kafka_broker}/{unique_name}?protocol=canal-json&enable-tidb-extension=true"
    dst = make_destination({"uri": uri, "max-message-bytes": "1000", "partition-num": "1",
                            "large-message-handle-option": "handle-key-only"})
    errors = dst.write([record(row(ORDERS, 1, tso(10))), record(_big(2, 11, "update")), record(row(ORDERS, 3, tso(12)))])
    dst.teardown()
    assert errors is None
    values = [json.loads(m.value()) for m in raw_messages(kafka_broker, unique_name, idle=0.8)]
    assert [v["data"][0]["id"] for v in values] == ["1", "2", "3"]
    cut = values[1]
    assert cut["_tidb"]["onlyHandleKey"] is True and set(cut["data"][0]) == {"id"}
    assert set(cut["old"][0]) == {"id"}
    assert "onlyHandleKey" not in values[0]["_tidb"]
    # the source sees the flag (a consumer would fetch the full row from TiDB by the key)
    src = make_source({"uri": uri})
    recs = read_all(src, f"{unique_name}:0", idle=0.8)
    src.teardown()
    assert [r.metadata.get("ticdc.only-handle-key") for r in recs] == [None, "true", None]


def test_open_protocol_batch_splits_and_cuts_only_the_large_row(kafka_broker, unique_name):
    dst = make_destination({"uri": f"kafka://{kafka_broker}/{unique_name}?protocol=open-protocol",
                            "max-message-bytes": "1500", "partition-num": "1",
                            "large-message-handle-option": "handle-key-only"})
    errors = dst.write([record(row(ORDERS, 1, tso(10))), record(_big(2, 11)), record(row(ORDERS, 3, tso(12)))])
    dst.teardown()
    assert errors is None
    dec = OpenProtocolDecoder()
    events = [ev for m in raw_messages(kafka_broker, unique_name, idle=0.8) for ev in dec.decode(m.key(), m.value())]
    assert [ev.row["id"] for ev in events] == [1, 2, 3]
    assert events[0].row["name"] == "n1" and events[2].row["name"] == "n3"
    assert set(events[1].row) == {"id"}
    assert events[1].extra.get("ticdc.only-handle-key") == "true"


def test_without_the_option_the_large_row_is_that_records_error(kafka_broker, unique_name):
    dst = make_destination({"uri": f"kafka://{kafka_broker}/{unique_name}?protocol=open-protocol",
                            "max-message-bytes": "1500"})
    errors = dst.write([record(row(ORDERS, 1, tso(10))), record(_big(2, 11))])
    dst.teardown()
    assert errors[0] is None and "max-message-bytes" in errors[1] and "1500" in errors[1], errors[1]


@pytest.mark.parametrize("settings, reason", [
    ({"protocol": "avro", "topic": "t_{schema}_{table}"}, "protocol"),
    ({"protocol": "canal-json"}, "needs-extension"),
    ({"protocol": "opencdc-json"}, "protocol"),
])
def test_handle_key_only_refused_like_ticdc(settings, reason):
    cfg = {"servers": "h:9092", "topic": "t", **settings, "large-message-handle-option": "handle-key-only"}
    with pytest.raises(ConfigError) as err:
        resolve(cfg, "destination")
    assert err.value.parameter == "large-message-handle-option" and err.value.rule == reason


def test_claim_check_is_refused_as_not_implemented():
    with pytest.raises(ConfigError, match="claim-check is not implemented"):
        resolve({"servers": "h:9092", "topic": "t", "protocol": "open-protocol",
                 "large-message-handle-option": "claim-check"}, "destination")
    s = resolve({"uri": "kafka://h:9092/t?protocol=open-protocol&large-message-handle-option=handle-key-only"},
                "destination")
    assert s.large_message_handle_option == "handle-key-only"
