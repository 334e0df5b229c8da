"""The one varint reader/writer behind the generated Avro readers and writers."""

import pytest
from hypothesis import given, strategies as st

from cdcflow.varint import VarintError, read_uvarint, uvarint


@given(st.integers(min_value=0, max_value=(1 << 64) - 1), st.binary(max_size=4))
def test_read_is_the_inverse_of_write_and_stops_at_its_end(n, tail):
    data = b"\x07" + uvarint(n) + tail
    assert read_uvarint(data, 1) == (n, 1 + len(uvarint(n)))


@given(st.integers(min_value=1 << 21, max_value=(1 << 64) - 1))
def test_continuing_after_bytes_read_inline(n):
    data = uvarint(n)
    inline = (data[0] & 127) | (data[1] & 127) << 7 | (data[2] & 127) << 14
    assert read_uvarint(data, 3, inline, 21) == (n, len(data))
    assert read_uvarint(data, 1, data[0] & 127, 7) == (n, len(data))


def test_malformed_varints_are_refused():
    with pytest.raises(VarintError, match="longer than 10 bytes"):
        read_uvarint(b"\xff" * 10 + b"\x01", 0)
    with pytest.raises(VarintError, match="beyond 64 bits"):
        read_uvarint(b"\xff" * 9 + b"\x7f", 0)  # ten bytes, but 70 bits
    with pytest.raises(IndexError):
        read_uvarint(b"\x80\x80", 0)  # the buffer ends inside it
    assert issubclass(VarintError, ValueError)  # the fast paths fall back on ValueError
