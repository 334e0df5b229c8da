"""Conduit's own JSON records, read by cdcflow and written again: byte for byte what Conduit wrote.

Each case names its source (public repositories, read for the facts; the JSON texts are the
expected values those tests state):
- github.com/ConduitIO/conduit-commons @ ffd8adad, opencdc/json_test.go (TestRecord_JSON),
  opencdc/serializer_test.go (default JSONSerializer) and opencdc/record_test.go (TestRecord_Bytes);
- github.com/ConduitIO/conduit @ bb6ce44b, pkg/orchestrator/orchestrator_test.go (the file ->
  file pipeline's destination file, one raw record per line of the source file).
"""

from __future__ import annotations

import pytest

from cdcflow.convert import jsonform
from cdcflow.record import Operation, Record

# conduit-commons opencdc/json_test.go TestRecord_JSON and serializer_test.go "default"
COMMONS_RECORD_JSON = (
    b'{"position":"c3RhbmRpbmc=","operation":"update","metadata":{"foo":"bar"},"key":"cGFkbG9jay1rZXk=",'
    b'"payload":{"before":"eWVsbG93","after":{"bool":true,"float32":1.2,"float64":1.2,"int":1,"int32":1,'
    b'"int64":1,"string":"orange"}}}')
# conduit-commons opencdc/record_test.go TestRecord_Bytes
COMMONS_RECORD_BYTES = (
    b'{"position":"Zm9v","operation":"create","metadata":{"conduit.source.plugin.name":"example"},"key":"YmFy",'
    b'"payload":{"before":null,"after":{"baz":"qux","foo":"bar"}}}')
# conduit pkg/orchestrator/orchestrator_test.go: what Conduit's file destination wrote (the test
# fills in the source connector's id; any id will do here)
ORCHESTRATOR_FILE = b"".join(
    b'{"position":"%s","operation":"create","metadata":{"conduit.source.connector.id":"pipeline:source",'
    b'"file.path":"./fixtures/file-source.txt"},"key":"%s","payload":{"before":null,"after":"%s"}}\n'
    % (position, key, key)
    for position, key in [(b"Mg==", b"MQ=="), (b"NA==", b"Mg=="), (b"Ng==", b"Mw=="), (b"OA==", b"NA=="),
                          (b"MTA=", b"NQ==")])


@pytest.fixture(params=["kernel", "python"])
def writer(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setattr(jsonform, "_kernel", None)
    elif jsonform._kernel is None:
        pytest.skip("JSON-form kernel not built or CDCFLOW_PURE_PYTHON=1")
    return request.param


@pytest.mark.parametrize("line", [COMMONS_RECORD_JSON, COMMONS_RECORD_BYTES])
def test_conduit_commons_records_read_and_written_again_are_byte_identical(line, writer):
    assert jsonform.dumps_record(jsonform.loads_record(line)) == line
    assert jsonform.dumps_lines(jsonform.loads_lines(line + b"\n")) == line + b"\n"


def test_the_record_of_conduit_commons_json_test_is_written_as_conduit_writes_it(writer):
    """The record TestRecord_JSON marshals, built here, gives its expected bytes (Go's float32(1.2)
    becomes the float64 1.2 before it is written, as the test's expected text shows)."""
    r = Record(b"standing", Operation.UPDATE, {"foo": "bar"}, b"padlock-key", b"yellow",
               {"bool": True, "int": 1, "int32": 1, "int64": 1, "float32": 1.2, "float64": 1.2, "string": "orange"})
    assert jsonform.dumps_record(r) == COMMONS_RECORD_JSON
    back = jsonform.loads_record(COMMONS_RECORD_JSON)
    assert back == r


def test_the_record_of_conduit_commons_record_test_is_written_as_conduit_writes_it(writer):
    r = Record(b"foo", Operation.CREATE, {"conduit.source.plugin.name": "example"}, b"bar", None,
               {"foo": "bar", "baz": "qux"})  # map order differs from the sorted output
    assert jsonform.dumps_record(r) == COMMONS_RECORD_BYTES


def test_conduit_file_destination_output_read_and_written_again_is_byte_identical(writer):
    records = jsonform.loads_lines(ORCHESTRATOR_FILE)
    assert [r.position for r in records] == [b"2", b"4", b"6", b"8", b"10"]
    assert [r.after for r in records] == [b"1", b"2", b"3", b"4", b"5"]
    assert jsonform.dumps_lines(records) == ORCHESTRATOR_FILE
