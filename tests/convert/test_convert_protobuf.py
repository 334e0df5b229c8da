"""The protobuf form: schema references, Struct mode, malformed input."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from cdcflow.convert.avro import avro_type, codec_for
from cdcflow.convert.protobuf import PbRecord, from_proto, record_from_proto, record_to_proto, to_proto
from cdcflow.convert.schemaref import META_SCHEMA_DERIVED, META_SCHEMA_REPLACED
from cdcflow.errors import ConversionError, SchemaError
from cdcflow.record import (
    META_KEY_SCHEMA_SUBJECT,
    META_PAYLOAD_SCHEMA_SUBJECT,
    META_PAYLOAD_SCHEMA_VERSION,
    Operation,
    Record,
)
from cdcflow.schemas import SchemaStore

TABLE = {"type": "record", "name": "orders", "fields": [
    {"name": "id", "type": avro_type("bigint")},
    {"name": "price", "type": ["null", avro_type("decimal", precision=10, scale=2)]},
    {"name": "at", "type": ["null", avro_type("datetime")]},
]}


@pytest.fixture()
def store():
    s = SchemaStore()
    yield s
    s.close()


def _wire(pbs):
    return [PbRecord.FromString(p.SerializeToString()) for p in pbs]


def test_raw_data_passes_unchanged(store):
    r = Record(b"pos", Operation.DELETE, {"a": "b"}, b"key", b"before", None)
    pb = record_to_proto(r, store)
    assert pb.key.raw_data == b"key" and pb.payload.before.raw_data == b"before" and not pb.payload.HasField("after")
    assert dict(pb.metadata) == {"a": "b"} and pb.operation == 3
    assert record_from_proto(_wire([pb])[0], store) == r
    assert store.subjects() == []


def test_existing_conforming_schema_is_kept(store):
    stored = store.register("shop.orders.payload", json.dumps(TABLE))
    md = {"opencdc.collection": "shop.orders", META_PAYLOAD_SCHEMA_SUBJECT: stored.subject,
          META_PAYLOAD_SCHEMA_VERSION: str(stored.version)}
    before = {"id": 1, "price": Decimal("9.99"), "at": None}
    after = {"id": (1 << 64) - 1, "price": None, "at": dt.datetime(2020, 1, 1, 0, 0, 0, 1)}
    r = Record(b"1", Operation.UPDATE, md, None, before, after)
    pb = record_to_proto(r, store)
    assert dict(pb.metadata) == md  # no derived marker, same reference
    assert codec_for(TABLE).decode(pb.payload.after.raw_data) == after
    assert record_from_proto(_wire([pb])[0], store) == r
    assert store.subjects() == ["shop.orders.payload"]


def test_non_conforming_value_gets_a_derived_schema(store):
    stored = store.register("shop.orders.payload", json.dumps(TABLE))
    md = {"opencdc.collection": "shop.orders", META_PAYLOAD_SCHEMA_SUBJECT: stored.subject,
          META_PAYLOAD_SCHEMA_VERSION: "1"}
    r = Record(b"1", Operation.CREATE, md, None, None, {"id": 1, "price": Decimal("9.9"), "at": None})  # scale 1
    pb = record_to_proto(r, store)
    assert pb.metadata[META_PAYLOAD_SCHEMA_VERSION] == "2" and pb.metadata[META_SCHEMA_DERIVED] == "payload"
    assert json.loads(pb.metadata[META_SCHEMA_REPLACED]) == {"payload": ["shop.orders.payload", "1"]}
    back = record_from_proto(_wire([pb])[0], store)
    assert back.after == r.after
    assert back.metadata == md  # the derived reference was a wire detail; the replaced one comes back
    assert back == r


def test_derived_schemas_dedup_and_before_after_share_one(store):
    recs = [Record(str(i).encode(), Operation.UPDATE, {"opencdc.collection": "db.t"}, {"id": i},
                   {"id": i, "v": None}, {"id": i, "v": "x"}) for i in range(50)]
    pbs = to_proto(recs, store)
    assert store.subjects() == ["db.t.key", "db.t.payload"]
    assert store.versions("db.t.payload") == [1]
    assert {p.metadata[META_KEY_SCHEMA_SUBJECT] for p in pbs} == {"db.t.key"}
    assert from_proto(_wire(pbs), store) == recs


def test_struct_mode_sends_structured_data(store):
    r = Record(b"p", Operation.SNAPSHOT, {}, {"k": 1}, None, {"n": 1 << 60, "d": Decimal("1.50")})
    pb = record_to_proto(r, store, structured="struct")
    assert pb.key.WhichOneof("data") == "structured_data" and pb.payload.after.WhichOneof("data") == "structured_data"
    assert META_PAYLOAD_SCHEMA_SUBJECT not in pb.metadata
    back = record_from_proto(_wire([pb])[0], store)
    assert back.key == {"k": 1} and back.after == {"n": str(1 << 60), "d": "1.50"}  # lossy, as documented
    with pytest.raises(ValueError):
        to_proto([r], store, structured="json")


def test_raw_data_not_matching_its_schema(store):
    stored = store.register("s", json.dumps(TABLE))
    pb = PbRecord(position=b"p9", operation=1, metadata={META_PAYLOAD_SCHEMA_SUBJECT: "s", META_PAYLOAD_SCHEMA_VERSION: str(stored.version)})
    pb.payload.after.raw_data = b"\x01\x02\x03 not avro"
    with pytest.raises(ConversionError, match="p9"):
        from_proto([pb], store)


def test_unknown_subject(store):
    pb = PbRecord(position=b"p", operation=1, metadata={META_PAYLOAD_SCHEMA_SUBJECT: "nope", META_PAYLOAD_SCHEMA_VERSION: "3"})
    pb.payload.after.raw_data = b"\x00"
    with pytest.raises(SchemaError, match="nope"):
        from_proto([pb], store)


def test_unknown_operation_number(store):
    pb = PbRecord(position=b"p", operation=9)
    with pytest.raises(ConversionError, match="operation"):
        from_proto(_wire([pb]), store)


def test_unencodable_value_names_record_and_path(store):
    r = Record(b"pos7", Operation.CREATE, {}, None, None, {"l": [{"a": 1}, {"b": 2}]})
    with pytest.raises(ConversionError, match="pos7") as info:
        to_proto([r], store)
    assert info.value.path == "$.l[1]"
