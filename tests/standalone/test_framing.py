"""Batch and ack messages of the standalone path: within the size limit, acks as protobuf writes them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cdcflow.pb.connector.v2 import destination_pb2
from cdcflow.record import Record
from cdcflow.standalone.framing import encode_acks, frame_records

Response = destination_pb2.Destination.Run.Response


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=300), st.one_of(st.none(), st.text(max_size=200))), max_size=20))
def test_ack_bytes_are_protobufs(acks):
    expected = Response()
    for position, error in acks:
        expected.acks.add(position=position, error=error or "")
    errors = {i: e for i, (_, e) in enumerate(acks) if e is not None}
    assert encode_acks([p for p, _ in acks], errors) == expected.SerializeToString()
    if not any(errors.values()):
        assert encode_acks([p for p, _ in acks]) == expected.SerializeToString()


def test_batches_split_at_the_limit_and_refuse_oversized_records():
    records = [Record(position=str(i).encode(), after=b"x" * size) for i, size in enumerate([10, 700, 600, 5000, 10])]
    messages, oversized = frame_records(records, None, "avro", 1200, first_index=7)
    assert set(oversized) == {10} and "exceeds the maximum record size of 1200" in oversized[10]
    assert [indexes for _, indexes in messages] == [[7, 8], [9, 11]]
    for data, indexes in messages:
        parsed = destination_pb2.Destination.Run.Request.FromString(data).records
        assert [pb.position for pb in parsed] == [str(i - 7).encode() for i in indexes]
        assert len(data) <= 1200


def test_a_split_runs_across_the_pieces_a_message_is_built_in():
    from cdcflow.convert.protobuf import PIECE_RECORDS

    n = 2 * PIECE_RECORDS + 50
    big = PIECE_RECORDS + 3  # an oversized record in the second piece
    records = [Record(position=b"%d" % i, after=b"x" * (3000 if i == big else 100)) for i in range(n)]
    messages, oversized = frame_records(records, None, "avro", 2000, first_index=5)
    assert list(oversized) == [big + 5]
    assert [i for _, indexes in messages for i in indexes] == [i + 5 for i in range(n) if i != big]
    positions = [pb.position for data, _ in messages
                 for pb in destination_pb2.Destination.Run.Request.FromString(data).records]
    assert positions == [r.position for i, r in enumerate(records) if i != big]
    assert all(len(data) <= 2000 for data, _ in messages)


def test_a_batch_within_the_limit_is_one_message():
    records = [Record(position=str(i).encode(), metadata={"a": "b"}, key=b"k", after=b"x" * 100) for i in range(50)]
    messages, oversized = frame_records(records, None, "avro", 1 << 20, first_index=3)
    assert not oversized and [indexes for _, indexes in messages] == [list(range(3, 53))]
    parsed = destination_pb2.Destination.Run.Request.FromString(messages[0][0]).records
    assert [pb.position for pb in parsed] == [r.position for r in records]
    assert frame_records([], None, "avro", 1 << 20) == ([], {})


def test_a_long_batch_is_several_messages_in_order():
    from cdcflow.standalone.framing import MESSAGE_RECORDS

    n = 2 * MESSAGE_RECORDS + 5
    records = [Record(position=b"%d" % i, after=b"v") for i in range(n)]
    messages, oversized = frame_records(records, None, "avro", 1 << 26, first_index=1)
    assert not oversized and [len(indexes) for _, indexes in messages] == [MESSAGE_RECORDS, MESSAGE_RECORDS, 5]
    assert [i for _, indexes in messages for i in indexes] == list(range(1, n + 1))
    positions = [pb.position for data, _ in messages
                 for pb in destination_pb2.Destination.Run.Request.FromString(data).records]
    assert positions == [r.position for r in records]
