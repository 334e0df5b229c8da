"""Destinations that write ENUM/SET names refuse an index text (found by the journey matrix, issue 14).

Open protocol and default canal-json carry no ENUM/SET members: their decoders give the 1-based
index / bitmask as text. The kafka (Avro) and storage (CSV) destinations wrote that text as if it
were a member name ("3" for 'blue'); ``convert.names_row`` applies the cross-format rule they skip.
The pipelines are covered by tests/journeys (kafka-open-protocol → kafka-avro / storage-csv).
"""

from __future__ import annotations

import pytest

from cdcflow.connectors.ticdc.convert import names_event, names_row
from cdcflow.connectors.ticdc.errors import UnrepresentableValue
from cdcflow.connectors.ticdc.events import RowChange
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

BARE = TableSchema("shop", "t", (Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
                                 Column("e", "ENUM"), Column("s", "SET")))
KNOWN = TableSchema("shop", "t", (Column("id", "BIGINT", nullable=False, primary_key=True, handle_key=True),
                                  Column("e", "ENUM", elements=("red", "green", "blue")),
                                  Column("s", "SET", elements=("a", "b"))))


@pytest.mark.parametrize("target", ["avro", "csv"])
@pytest.mark.parametrize(("column", "value"), [("e", "3"), ("s", "2")])
def test_an_index_text_is_refused_where_names_are_written(target, column, value):
    with pytest.raises(UnrepresentableValue, match=f"column {column}, value '{value}'"):
        names_row(BARE, {"id": 1, "e": None, "s": None, column: value}, target)


@pytest.mark.parametrize("target", ["avro", "csv"])
def test_index_zero_is_the_empty_value_and_names_pass(target):
    assert names_row(BARE, {"id": 1, "e": "0", "s": "0"}, target) == {"id": 1, "e": "", "s": ""}
    row = {"id": 1, "e": "blue", "s": "a,b"}
    assert names_row(KNOWN, row, target) is row
    assert names_row(BARE, None, target) is None


def test_formats_that_write_indexes_keep_the_text():
    row = {"id": 1, "e": "3", "s": "2"}
    assert names_row(BARE, row, "canal-json") is row
    assert names_row(BARE, row, "open-protocol") is row


def test_an_event_is_rebuilt_only_when_a_value_changes():
    ev = RowChange(KNOWN, "update", 5, {"id": 1, "e": "red", "s": ""}, {"id": 1, "e": "blue", "s": "a"})
    assert names_event(ev, "avro") is ev
    bare = RowChange(BARE, "update", 5, {"id": 1, "e": "0", "s": None}, {"id": 1, "e": None, "s": "0"})
    out = names_event(bare, "avro")
    assert (out.row, out.old, out.commit_ts, out.kind) == ({"id": 1, "e": "", "s": None}, {"id": 1, "e": None, "s": ""},
                                                           5, "update")
