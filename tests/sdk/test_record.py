from decimal import Decimal

import pytest

from cdcflow.record import Operation, Record


def test_equality_is_type_strict():
    assert Record(after={"a": 1}) == Record(after={"a": 1})
    assert Record(after={"a": 1}) != Record(after={"a": 1.0})
    assert Record(after={"a": 1}) != Record(after={"a": True})
    assert Record(after={"a": Decimal("1.0")}) != Record(after={"a": Decimal("1.00")})
    assert Record(after={"a": b"x"}) != Record(after={"a": "x"})
    assert Record(after={"a": [1, {"b": None}]}) == Record(after={"a": [1, {"b": None}]})
    assert Record(after={"a": float("nan")}) == Record(after={"a": float("nan")})


def test_copy_is_independent():
    r = Record(b"p", Operation.UPDATE, {"k": "v"}, {"id": 1}, {"x": 1}, {"x": 2})
    c = r.copy()
    c.metadata["k"] = "w"
    c.after["x"] = 3
    assert r.metadata["k"] == "v" and r.after["x"] == 2


def test_operation_text():
    assert [o.text for o in Operation][1:] == ["create", "update", "delete", "snapshot"]
    assert Operation.from_text("snapshot") is Operation.SNAPSHOT
    with pytest.raises(ValueError, match="unknown operation"):
        Operation.from_text("insert")
