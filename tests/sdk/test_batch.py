"""RecordBatch: a source's batch that makes its Records on first use and may render itself."""

from __future__ import annotations

import pytest

from cdcflow.engine.fastpath import RecordBatch, positions_of
from cdcflow.convert.jsonform import dumps_lines
from cdcflow.record import Operation, Record


class CountingBatch(RecordBatch):
    """Records i = 0..n-1; counts how often they are made; renders itself with dumps_lines of
    freshly made records (what a real source's renderer must equal)."""

    __slots__ = ("n", "made")

    def __init__(self, n: int):
        super().__init__()
        self.n, self.made = n, 0

    def __len__(self) -> int:
        return self.n

    def _make(self) -> list[Record]:
        return [Record(position=str(i).encode(), operation=Operation.CREATE, metadata={"k": str(i)},
                       after={"i": i}) for i in range(self.n)]

    def _materialize(self) -> list[Record]:
        self.made += 1
        return self._make()

    def _render_jsonform(self, store, extra):
        records = self._make()
        for r in records:
            r.metadata.update(extra or {})
        return dumps_lines(records)


def test_records_are_made_once_and_the_batch_reads_as_a_sequence():
    b = CountingBatch(3)
    assert len(b) == 3 and b.made == 0
    assert [r.after["i"] for r in b] == [0, 1, 2]
    assert b[1].position == b"1" and [r.position for r in b[1:]] == [b"1", b"2"]
    assert b.records() is b.records()
    assert b.made == 1


def test_metadata_added_before_or_after_the_records_are_made_reaches_every_record():
    early = CountingBatch(2)
    early.add_metadata({"a": "1"})
    early.add_metadata({"b": "2"})
    late = CountingBatch(2)
    late.records()
    late.add_metadata({"a": "1", "b": "2"})
    for b in (early, late):
        assert [list(r.metadata.items()) for r in b] == [[("k", str(i)), ("a", "1"), ("b", "2")] for i in range(2)]


def test_jsonform_lines_carry_the_added_metadata_until_the_records_are_made():
    b = CountingBatch(2)
    b.add_metadata({"conduit.source.connector.id": "src"})
    lines = b.jsonform_lines(None)
    assert lines is not None and b.made == 0
    assert lines == dumps_lines(b.records())
    # once made, the records are what counts (someone may have changed them): the caller writes them
    assert b.jsonform_lines(None) is None


def test_a_batch_that_cannot_render_itself_says_so():
    class Plain(CountingBatch):
        _render_jsonform = RecordBatch._render_jsonform

    assert Plain(1).jsonform_lines(None) is None


@pytest.mark.parametrize("batch", [CountingBatch(3), [Record(position=b"0"), Record(position=b"1"), Record(position=b"2")]])
def test_positions_of_a_list_or_a_batch(batch):
    assert positions_of(batch) == [b"0", b"1", b"2"]
