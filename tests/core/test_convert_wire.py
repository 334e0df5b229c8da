"""``to_wire`` (the standalone host's record bytes) parses to exactly the messages ``to_proto`` builds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdcflow.convert.protobuf import PbRecord, to_proto, to_wire
from cdcflow.errors import ConversionError
from cdcflow.record import Operation, Record
from cdcflow.schemas import SchemaStore

sys.path.insert(0, str(Path(__file__).parent))
from test_convert_roundtrip import SETTINGS, records  # noqa: E402



@SETTINGS
@given(st.lists(records(mixed_payload=True), min_size=1, max_size=4), st.sampled_from(["avro", "struct"]))
def test_wire_bytes_parse_to_the_proto_messages(batch, structured):
    # Which schema version a derived payload gets depends on what the store already holds,
    # so each side starts from an empty store of its own: same history, same answer.
    try:
        pbs = to_proto(batch, SchemaStore(), structured)
    except ConversionError as e:  # Struct cannot hold every value: both refuse alike
        with pytest.raises(ConversionError) as info:
            to_wire(batch, SchemaStore(), structured)
        assert str(info.value) == str(e)
        return
    wire = to_wire(batch, SchemaStore(), structured)
    assert [PbRecord.FromString(w) for w in wire] == pbs


def test_empty_data_and_defaults_are_kept():
    r = Record(b"", Operation.UNSPECIFIED, {}, b"", b"", None)
    (w,) = to_wire([r])
    pb = PbRecord.FromString(w)
    assert pb.HasField("key") and pb.key.WhichOneof("data") == "raw_data" and pb.key.raw_data == b""
    assert pb.payload.HasField("before") and not pb.payload.HasField("after")
    assert pb == to_proto([r])[0]


def test_long_values_use_multi_byte_lengths():
    r = Record(b"p" * 300, Operation.DELETE, {"k" * 20000: "v" * 200}, None, None, b"x" * 70000)
    assert PbRecord.FromString(to_wire([r])[0]) == to_proto([r])[0]
