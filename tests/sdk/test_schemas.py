import json
import threading

import pytest

from cdcflow.errors import SchemaError
from cdcflow.schemas import SchemaStore

A = json.dumps({"type": "record", "name": "a", "fields": [{"name": "x", "type": "long"}]})
A_SPACED = json.dumps(json.loads(A), indent=4)
B = json.dumps({"type": "record", "name": "a", "fields": [{"name": "x", "type": "long"}, {"name": "y", "type": ["null", "string"], "default": None}]})


def test_confluent_semantics(tmp_path):
    s = SchemaStore(tmp_path / "schemas.db")
    a1 = s.register("t-value", A)
    assert (a1.version, a1.id) == (1, 1)
    assert s.register("t-value", A_SPACED) == a1  # same schema, same version
    b = s.register("t-value", B)
    assert (b.version, b.id) == (2, 2)
    other = s.register("u-value", A)  # same schema elsewhere: same id, own version
    assert (other.version, other.id) == (1, 1)
    assert s.latest("t-value") == b
    assert s.versions("t-value") == [1, 2]
    assert s.subjects() == ["t-value", "u-value"]
    assert s.by_id(2) == ("AVRO", B)
    assert s.lookup("t-value", A_SPACED) == a1
    assert s.lookup("u-value", B) is None
    s.close()
    again = SchemaStore(tmp_path / "schemas.db")  # persistent
    assert again.get("t-value", 2) == b
    assert again.register("v", B).id == 2


def test_errors():
    s = SchemaStore()
    with pytest.raises(SchemaError):
        s.get("nope", 1)
    with pytest.raises(SchemaError):
        s.by_id(42)
    with pytest.raises(SchemaError):
        s.register("x", "{not json")
    with pytest.raises(SchemaError):
        s.register("", A)


def test_ids_from_one_sequence_across_processes(tmp_path):
    """Two store objects on one file (as driver and executors have) never hand out an id twice."""
    path = tmp_path / "s.db"
    stores = [SchemaStore(path), SchemaStore(path)]
    ids: list[int] = []

    def work(i):
        for n in range(20):
            schema = json.dumps({"type": "record", "name": f"r{i}_{n}", "fields": []})
            ids.append(stores[i].register(f"s{i}", schema).id)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert sorted(ids) == list(range(1, 41))


def test_registering_an_existing_schema_from_a_second_process_returns(tmp_path):
    """A second store on the same file (another executor) registering a schema the first
    already stored must return the existing version, not block on its own lock."""
    path = tmp_path / "s.db"
    first = SchemaStore(path).register("t-value", A)
    result: list = []
    t = threading.Thread(target=lambda: result.append(SchemaStore(path).register("t-value", A_SPACED)))
    t.start()
    t.join(timeout=10)
    assert not t.is_alive(), "register deadlocked"
    assert result == [first]


def _open_and_register(args):
    path, i, start = args
    import time as _t

    while _t.time() < start:  # all processes hit the fresh file at the same moment
        pass
    store = SchemaStore(path)
    schema = json.dumps({"type": "record", "name": "r", "fields": [{"name": "x", "type": "long"}]})
    return store.register("shared-value", schema).id, store.register(f"own-{i}", schema).version


def test_executors_opening_a_new_store_at_once_do_not_fail(tmp_path):
    """Spark executors open the pipeline's store file together; none may fail with
    'database is locked' (switching to WAL answers SQLITE_BUSY without waiting)."""
    import multiprocessing
    import time as _t

    path = str(tmp_path / "fresh.db")
    start = _t.time() + 1.0
    with multiprocessing.get_context("spawn").Pool(6) as pool:
        results = pool.map(_open_and_register, [(path, i, start) for i in range(6)])
    assert results == [(1, 1)] * 6
