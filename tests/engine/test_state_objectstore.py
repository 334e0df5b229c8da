"""The state directory on an object store (moto's S3 server, a real HTTP endpoint): positions,
the stop request, the run lease (``run.lock``) and the schema store, without a shared filesystem."""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from cdcflow.engine.state import LOCK_FILE, LeaseLock, PartitionState, StateDir, StateError, run_lock
from cdcflow.errors import InfrastructureError
from cdcflow.schemas import STORE_ENV, ObjectSchemaStore, SchemaStore, open_store
from helpers.storage import s3_lake

SCHEMA_A = '{"type":"record","name":"a","fields":[{"name":"x","type":"int"}]}'
SCHEMA_B = '{"type":"record","name":"b","fields":[{"name":"y","type":"string"}]}'


@pytest.fixture
def s3_state(request):
    """(state URI, engine.state-options) on a fresh bucket of the session's moto server."""
    uri, options = s3_lake(request)
    return uri.replace("/lake", "/state"), options


def _state(s3_state) -> StateDir:
    return StateDir(*s3_state).create()


def _lease_doc(state: StateDir) -> dict:
    return json.loads(state.store.read(LOCK_FILE))


# -- positions and the stop request -----------------------------------------------------
def test_positions_are_objects_and_survive_pickling(s3_state, tmp_path):
    state = _state(s3_state)
    assert state.remote and state.root == s3_state[0]
    assert state.load("p", "src", "0") == PartitionState()
    state.save("p", "src", "a/b", PartitionState(b"\x00pos", [1, 0], ended=True))
    # what a Spark task sees: the StateDir arrives pickled, options and all
    copy = pickle.loads(pickle.dumps(state))
    assert copy.load("p", "src", "a/b") == PartitionState(b"\x00pos", [1, 0], ended=True)
    assert state.store.exists("positions/p/src/a%2Fb.json")
    assert "testing" not in repr(state)  # options (credentials) are never shown
    assert not any(tmp_path.iterdir())  # nothing was written locally


def test_an_unreachable_store_is_an_outage_naming_the_uri(s3_state):
    uri, options = s3_state
    dead = dict(options, **{"s3.endpoint": "http://127.0.0.1:9", "retries": "1", "connect-timeout": "1s"})
    state = StateDir(uri, dead)
    with pytest.raises(InfrastructureError) as err:
        state.save("p", "src", "0", PartitionState(b"x"))
    assert uri in str(err.value) and "testing" not in str(err.value)


def test_stop_request_names_the_run_and_is_read_at_most_twice_a_second(s3_state):
    owner = _state(s3_state)
    owner.run_id = "run-1"
    task_side = pickle.loads(pickle.dumps(owner))
    assert not task_side.stop_requested()
    owner.request_stop()
    time.sleep(0.55)
    assert task_side.stop_requested()
    other = pickle.loads(pickle.dumps(owner))
    other.run_id = "run-2"  # a run that lost its lease asks its own tasks, not the new owner's
    assert not other.stop_requested()
    owner.clear_stop()
    assert not task_side.stop_requested()


def test_stop_checks_do_not_ask_the_store_every_cycle(s3_state):
    state = _state(s3_state)
    calls = []
    real = state.store.read
    state.store.read = lambda rel: calls.append(rel) or real(rel)  # counts calls; the store answers
    started = time.monotonic()
    while time.monotonic() - started < 1.2:
        state.stop_requested()
    assert 2 <= len(calls) <= 4


# -- the run lease -------------------------------------------------------------------------
def test_a_second_run_is_refused_naming_the_state_uri(s3_state):
    first = run_lock(_state(s3_state))
    assert isinstance(first, LeaseLock)
    with first:
        with pytest.raises(StateError) as err:
            LeaseLock(_state(s3_state)).__enter__()
        text = str(err.value)
        assert s3_state[0] in text and "in use by another `cdcflow run`" in text and first.token in text
        assert "testing" not in text
    with LeaseLock(_state(s3_state)) as second:  # released: taken at once
        assert second.took_over is None


def test_two_runs_starting_at_once_one_wins(s3_state):
    locks = [LeaseLock(_state(s3_state)) for _ in range(6)]
    barrier = threading.Barrier(len(locks))
    outcome: dict[int, object] = {}

    def take(i):
        barrier.wait()
        try:
            locks[i].__enter__()
            outcome[i] = "won"
        except StateError as e:
            outcome[i] = e

    threads = [threading.Thread(target=take, args=(i,)) for i in range(len(locks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, o in outcome.items() if o == "won"]
    try:
        assert len(winners) == 1, outcome
        assert _lease_doc(locks[winners[0]].state)["run"] == locks[winners[0]].token
    finally:
        for i in winners:
            locks[i].__exit__(None, None, None)


def test_an_expired_lease_is_taken_over(s3_state):
    state = _state(s3_state)
    stale = {"run": "dead-run", "host": "elsewhere", "pid": 1, "lease": 30, "expires": time.time() - 1,
             "released": False}
    state.store.put_replace(LOCK_FILE, json.dumps(stale).encode())
    with LeaseLock(state) as lock:
        assert "dead-run" in lock.took_over and "elsewhere" in lock.took_over
        assert _lease_doc(state)["run"] == lock.token
        assert state.run_id == lock.token


def test_a_live_lease_of_another_host_is_not_taken(s3_state):
    state = _state(s3_state)
    live = {"run": "busy-run", "host": "elsewhere", "pid": 1, "lease": 30, "expires": time.time() + 20,
            "released": False}
    state.store.put_replace(LOCK_FILE, json.dumps(live).encode())
    with pytest.raises(StateError, match="busy-run on host elsewhere"):
        LeaseLock(state).__enter__()


def test_the_lease_of_a_killed_driver_on_this_host_is_taken_at_once(s3_state):
    """A driver killed with SIGKILL leaves an unexpired lease; its pid is gone on this host."""
    uri, options = s3_state
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from cdcflow.engine.state import LeaseLock, StateDir
        lock = LeaseLock(StateDir({uri!r}, {options!r}), lease=300).__enter__()
        print("held", flush=True)
        time.sleep(600)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StateError):
            LeaseLock(_state(s3_state)).__enter__()
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        with LeaseLock(_state(s3_state)) as lock:
            assert f"pid {holder.pid}" in lock.took_over
    finally:
        holder.kill()
        holder.wait(10)


def test_a_run_whose_lease_was_taken_over_learns_it_naming_the_taker(s3_state):
    """The holder is stalled (SIGSTOP) past its lease; another run takes over; once resumed, the
    holder's renewal is refused and it reports the state URI and who took it."""
    uri, options = s3_state
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import threading
        from cdcflow.engine.state import LeaseLock, StateDir
        lost = threading.Event()
        lock = LeaseLock(StateDir({uri!r}, {options!r}), lease=3, on_lost=lambda why: lost.set())
        lock.__enter__()
        print("held", flush=True)
        lost.wait(60)
        print("LOST", lock.lost, flush=True)
        lock.__exit__(None, None, None)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        time.sleep(1.5)  # renewed at least once
        os.kill(holder.pid, signal.SIGSTOP)
        time.sleep(3.5)
        with LeaseLock(_state(s3_state), lease=30) as taker:
            assert "pid" in taker.took_over
            os.kill(holder.pid, signal.SIGCONT)
            out, _ = holder.communicate(timeout=30)
            assert out.startswith("LOST"), out
            assert uri in out and f"taken over by run {taker.token}" in out and "it stopped" in out
            assert _lease_doc(taker.state)["run"] == taker.token  # the loser did not release it
    finally:
        holder.kill()
        holder.wait(10)


def test_a_local_state_dir_keeps_its_flock(tmp_path):
    state = StateDir(tmp_path / "st").create()
    assert not state.remote and state.local_dir == state.root
    with run_lock(state):
        assert (state.root / "run.lock").exists()
        with pytest.raises(StateError, match="in use by another"):
            run_lock(state).__enter__()


# -- the schema store ----------------------------------------------------------------------
@pytest.fixture(params=["sqlite", "object"])
def store(request, tmp_path):
    """The two backends of one store: the behaviour below must not depend on which."""
    if request.param == "sqlite":
        return SchemaStore(tmp_path / "schemas.sqlite")
    uri, options = s3_lake(request)
    return ObjectSchemaStore(uri + "/schemas", options)


def test_schema_store_semantics_match_across_backends(store):
    a1 = store.register("t-value", SCHEMA_A)
    assert (a1.version, a1.id) == (1, 1)
    assert store.register("t-value", SCHEMA_A.replace(",", ", ")) == a1  # same schema, any spacing
    b = store.register("t-value", SCHEMA_B)
    assert (b.version, b.id) == (2, 2)
    other = store.register("u-value", SCHEMA_A)
    assert (other.version, other.id) == (1, 1)  # the same schema under another subject keeps its id
    assert store.latest("t-value") == b
    assert store.get("t-value", 1).text == SCHEMA_A
    assert store.by_id(2) == ("AVRO", SCHEMA_B)
    assert store.lookup("t-value", SCHEMA_B).version == 2
    assert store.lookup("u-value", SCHEMA_B) is None
    assert store.subjects() == ["t-value", "u-value"]
    assert store.versions("t-value") == [1, 2]
    store.set_compatibility(None, "BACKWARD")
    store.set_compatibility("t-value", "NONE")
    assert (store.compatibility(None), store.compatibility("t-value"), store.compatibility("u-value")) == \
        ("BACKWARD", "NONE", None)
    assert store.delete_subject("t-value") == [1, 2]
    assert store.versions("t-value") == [] and store.subjects() == ["u-value"]
    again = store.register("t-value", SCHEMA_A)
    assert (again.version, again.id) == (3, 1)  # numbering continues past deleted versions


def test_parallel_writers_never_share_a_version(request):
    """Writers in separate processes (each its own store and cache), one subject: distinct versions,
    distinct ids, every schema once; the same schema registered by all gets one version."""
    uri, options = s3_lake(request)
    location = uri + "/schemas"
    script = textwrap.dedent(f"""
        import json, sys
        from cdcflow.schemas import ObjectSchemaStore
        store = ObjectSchemaStore({location!r}, {options!r})
        n = int(sys.argv[1])
        mine = store.register("s", json.dumps({{"type": "record", "name": f"r{{n}}", "fields": []}}))
        shared = store.register("s", '{{"type":"string"}}')
        print(json.dumps([mine.version, mine.id, shared.version, shared.id]))
        """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(n)], stdout=subprocess.PIPE, text=True)
             for n in range(5)]
    results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    mine = [(v, i) for v, i, _, _ in results]
    assert len({v for v, _ in mine}) == 5 and len({i for _, i in mine}) == 5
    assert len({(v, i) for _, _, v, i in results}) == 1  # the shared schema: one version, one id
    check = ObjectSchemaStore(location, options)
    assert check.versions("s") == list(range(1, 7))
    assert sorted(check.get("s", v).id for v in check.versions("s")) == sorted({i for _, i in mine} | {results[0][3]})


def test_the_state_dir_points_every_process_at_its_store(s3_state, monkeypatch):
    state = StateDir(*s3_state)
    assert state.schema_store_path == s3_state[0] + "/schemas"
    monkeypatch.setenv(STORE_ENV, state.schema_store_path)
    store = open_store(os.environ[STORE_ENV])  # what default_store() opens in a task
    assert isinstance(store, ObjectSchemaStore)
    store.register("x", SCHEMA_A)
    assert state.store.exists("schemas/subjects/x/1.json")


# -- a pipeline run with its state on the object store ---------------------------------------------
RUN_PIPELINE = """\
version: "2.2"
pipelines:
  - id: objstate
    engine:
      state-dir: {uri}
      state-options:
{options}
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          format.type: tidb
          operations: create
          recordCount: "1200"
          partitions: "2"
          seed: "7"
      - id: lake
        type: destination
        plugin: storage
        settings:
          uri: {lake}
          protocol: canal-json
          enable-tidb-extension: "true"
          date-separator: none
"""


@pytest.mark.spark
@pytest.mark.slow
def test_a_run_keeps_positions_and_schemas_on_the_object_store(spark, s3_state, tmp_path, caplog):
    """generator (TiDB rows, whose table schemas go to the schema store) → storage lake, state on
    S3: nothing is written beside the pipeline file, positions and schemas are objects, a second run
    resumes from them, and the credentials appear nowhere."""
    from cdcflow.engine.runner import run_files
    from helpers.storage import read_all

    uri, options = s3_state
    options = dict(options, **{"s3.secret-access-key": "state-s3cr3t-value"})  # moto takes any secret
    path = tmp_path / "p.yaml"
    path.write_text(RUN_PIPELINE.format(uri=uri, lake=tmp_path / "lake", options="\n".join(
        f'        {k}: "{v}"' for k, v in options.items())))
    out = tmp_path / "summary.txt"
    with open(out, "w") as f:
        first = run_files([str(path)], until_idle=True, progress=False, out=f)
    assert first.exit_code == 0, first.problems or first.failures
    assert first.state_dir == uri and first.totals.total_read() == 1200
    assert not (tmp_path / ".cdcflow").exists()
    state = StateDir(uri, options)
    for part in ("0", "1"):
        assert state.load("objstate", "gen", part).position is not None
    store = ObjectSchemaStore(uri + "/schemas", options)
    assert store.subjects()  # the generator's table schemas, registered by the tasks
    rows = [r for _, r in read_all({"uri": str(tmp_path / "lake"), "protocol": "canal-json",
                                    "enable-tidb-extension": "true", "date-separator": "none"})]
    assert len(rows) == 1200
    assert _lease_doc(state)["released"] is True
    with open(out, "a") as f:
        second = run_files([str(path)], until_idle=True, progress=False, out=f)
    assert second.exit_code == 0 and second.totals.total_read() == 0
    text = out.read_text()
    assert f"saved positions in {uri}" in text
    assert "state-s3cr3t-value" not in text + caplog.text


LEASE_PIPELINE = """\
version: "2.2"
engine:
  state-dir: {uri}
  state-lease: 3s
  micro-batch-duration: 1s
  state-options:
{options}
pipelines:
  - id: leased
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          format.type: structured
          format.options.id: int
          rate: "200"
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {out}
"""


@pytest.mark.slow
def test_a_run_whose_lease_is_taken_over_stops_naming_it(s3_state, tmp_path):
    """`cdcflow run` (unbounded) stalls (SIGSTOP of its driver) past its 3 s lease; another run takes
    the state over; resumed (SIGCONT), the first run stops on its own with exit 1, naming the state
    URI and the run that took it, and leaves the new owner's lease alone."""
    uri, options = s3_state
    options = dict(options, **{"s3.secret-access-key": "lease-s3cr3t"})  # moto takes any secret
    path = tmp_path / "p.yaml"
    out = tmp_path / "out.jsonl"
    path.write_text(LEASE_PIPELINE.format(uri=uri, out=out, options="\n".join(
        f'    {k}: "{v}"' for k, v in options.items())))
    proc = subprocess.Popen([sys.executable, "-m", "cdcflow.cli", "run", str(path), "--master", "local[1]"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    state = _state(s3_state)
    try:
        deadline = time.monotonic() + 120
        while not (out.exists() and out.stat().st_size > 0):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()[-3000:]
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGSTOP)  # the driver's Python process only: its lease renewal stalls
        time.sleep(4)
        with LeaseLock(state) as taker:
            os.kill(proc.pid, signal.SIGCONT)
            text, _ = proc.communicate(timeout=120)
            assert proc.returncode == 1, text[-3000:]
            assert f"state {uri}: this run no longer owns the state" in text
            assert f"taken over by run {taker.token}" in text
            assert _lease_doc(state)["run"] == taker.token
            assert "lease-s3cr3t" not in text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGCONT)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def test_the_store_environment_configures_a_state_dir_without_options(s3_state, monkeypatch):
    """No engine.state-options: the endpoint and credentials come from AWS_* as for any AWS client."""
    uri, options = s3_state
    monkeypatch.setenv("AWS_ENDPOINT_URL", options["s3.endpoint"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    bare = StateDir(uri)
    bare.save("p", "s", "0", PartitionState(b"env"))
    assert StateDir(uri, options).load("p", "s", "0").position == b"env"


def test_an_unreachable_state_store_fails_the_run_before_spark_starts(s3_state, tmp_path):
    """Port 9 answers nothing: the run stops at once, naming the state URI, showing no credential."""
    from cdcflow.engine.runner import EXIT_FAILED, run_files

    uri, options = s3_state
    dead = dict(options, **{"s3.endpoint": "http://127.0.0.1:9", "retries": "1", "connect-timeout": "1s",
                            "s3.secret-access-key": "dead-s3cr3t"})
    path = tmp_path / "p.yaml"
    path.write_text(LEASE_PIPELINE.format(uri=uri, out=tmp_path / "out.jsonl", options="\n".join(
        f'    {k}: "{v}"' for k, v in dead.items())))
    started = time.monotonic()
    outcome = run_files([str(path)], progress=False, out=open(os.devnull, "w"))
    assert outcome.exit_code == EXIT_FAILED and outcome.startup_seconds == 0
    assert time.monotonic() - started < 30
    (failure,) = outcome.failures
    assert failure.startswith("cannot start: state store:") and uri in failure and "127.0.0.1:9" in failure
    assert "dead-s3cr3t" not in failure


def test_a_state_uri_carrying_credentials_is_refused_without_showing_them(tmp_path):
    from cdcflow.engine.runner import EXIT_INVALID, run_files

    path = tmp_path / "p.yaml"
    path.write_text(LEASE_PIPELINE.format(uri="s3://b/p", out=tmp_path / "o.jsonl", options="    {}"))
    outcome = run_files([str(path)], state_dir="s3://AKIA:uri-s3cr3t@bucket/prefix", progress=False,
                        out=open(os.devnull, "w"))
    assert outcome.exit_code == EXIT_INVALID
    (problem,) = outcome.problems
    assert "takes no user, password, query" in problem and "uri-s3cr3t" not in problem


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="needs gcsfs absent")
def test_a_store_whose_file_system_is_not_installed_is_a_usage_problem(tmp_path):
    from cdcflow.engine.runner import EXIT_INVALID, run_files

    path = tmp_path / "p.yaml"
    path.write_text(LEASE_PIPELINE.format(uri="gs://b/p", out=tmp_path / "o.jsonl", options="    {}"))
    outcome = run_files([str(path)], progress=False, out=open(os.devnull, "w"))
    assert outcome.exit_code == EXIT_INVALID
    (problem,) = outcome.problems
    assert problem.startswith("state gs://b/p:") and "gcsfs" in problem
