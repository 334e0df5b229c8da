"""What the ``storage`` destination does when a record, the disk or the object store is at fault.

A record whose own content cannot be stored (a schema name too long for a path) is nacked
with the reason and goes to the DLQ; the rest of its batch is written, and a re-run does not
trip over it again. A full or read-only disk, a missing bucket or a stalled endpoint is
never a record's fault: ``write`` raises ``InfrastructureError`` (service and endpoint named,
no secret) and returns no per-record errors. Faults are produced for real: tmpfs mounts
(full, read-only), a SIGSTOPped moto server, a SIGKILLed writer.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson
import pytest
from cdcflow.connectors.storage.writer import StorageUnavailableError
from cdcflow.connectors.ticdc.events import from_record, to_record
from cdcflow.convert.jsonform import dumps_lines
from cdcflow.durable import remove_stale_temps
from cdcflow.errors import InfrastructureError
from cdcflow.schemas import SchemaStore, default_store
from helpers.storage import (
    FORMATS,
    comparable,
    generator_rows,
    make_destination,
    read_all,
    run_until_idle,
    s3_lake,
)

LONG = "d" * 300  # a schema name no file system or object key segment takes (NAME_MAX is 255 bytes)


def _rows(n: int, schema: str | None = None) -> list:
    store = default_store()
    events = [from_record(r, store) for r in generator_rows(n)]
    if schema is not None:
        events = [dataclasses.replace(e, table=dataclasses.replace(e.table, schema=schema, index={}))
                  for e in events]
    return events


DLQ_PIPELINE = """\
version: "2.2"
engine:
  batch-size: 100
pipelines:
  - id: poison
    connectors:
      - id: src
        type: source
        plugin: builtin:file
        settings:
          path: "{src}"
          format: opencdc/json
      - id: lake
        type: destination
        plugin: builtin:storage
        settings:
{lake}
    dead-letter-queue:
      plugin: builtin:file
      settings:
        path: "{dlq}"
      window-size: 0
"""


@pytest.mark.spark
@pytest.mark.parametrize("where", ["local", "s3"])
def test_schema_name_too_long_goes_to_the_dlq_and_the_batch_is_written(spark, tmp_path, request, where):
    state = tmp_path / "state"
    state.mkdir()
    store = SchemaStore(str(state / "schemas.sqlite"))  # the store the engine's executors use
    good = _rows(60)
    poison = _rows(1, schema=LONG)[0]
    events = good[:30] + [poison] + good[30:]
    records = [to_record(e, str(i).encode(), store) for i, e in enumerate(events)]
    (tmp_path / "in.jsonl").write_bytes(dumps_lines(records))
    uri, extra = s3_lake(request) if where == "s3" else (str(tmp_path / "lake"), {})
    lake = {"uri": uri, **FORMATS["csv"], **extra}
    path = tmp_path / "p.yaml"
    path.write_text(DLQ_PIPELINE.format(src=tmp_path / "in.jsonl", dlq=tmp_path / "dlq.jsonl",
                                        lake="\n".join(f'          {k}: "{v}"' for k, v in lake.items())))

    outcome = run_until_idle(str(path), state)
    assert outcome.totals.total_written() == len(good)
    dlq = (tmp_path / "dlq.jsonl").read_bytes().splitlines()
    assert len(dlq) == 1
    assert b"UnsafeNameError" in dlq[0] and b"too long" in dlq[0]
    assert orjson.loads(dlq[0])["position"] is not None
    got = sorted(repr(comparable(from_record(r, default_store()))) for _, r in read_all(lake))
    assert got == sorted(repr(comparable(e)) for e in good)
    again = run_until_idle(str(path), state)  # the nacked record was settled: a re-run passes it by
    assert again.totals.total_written() == 0


# ---------------------------------------------------------------- the disk
@pytest.fixture
def tmpfs(tmp_path):
    """Mount a small tmpfs; yields (mount point, remount(options))."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")

    def remount(options: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{options}", str(mnt)], check=True)

    try:
        yield mnt, remount
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _assert_outage(excinfo, service: str, where: str) -> None:
    e = excinfo.value
    assert isinstance(e, InfrastructureError) and e.service == service
    assert e.endpoint and where in e.endpoint and where in str(e)


def _fill(mnt: Path) -> None:
    with open(mnt / "filler", "wb") as f:  # until the disk is full, for real
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


@pytest.mark.parametrize("fault,message", [("full", "No space left"), ("read-only", "Read-only")])
def test_broken_disk_fails_the_batch_as_an_infrastructure_error(tmpfs, fault, message):
    mnt, remount = tmpfs
    lake = {"uri": str(mnt / "lake"), **FORMATS["csv"]}
    dst = make_destination(lake)
    store = default_store()
    events = _rows(200)
    assert dst.write([to_record(e, str(i).encode(), store) for i, e in enumerate(events[:10])]) is None
    if fault == "full":
        _fill(mnt)
    else:
        remount("ro")
    with pytest.raises(StorageUnavailableError) as excinfo:
        dst.write([to_record(e, str(i).encode(), store) for i, e in enumerate(events[10:], 10)])
    _assert_outage(excinfo, "disk", str(mnt / "lake"))
    assert message in str(excinfo.value)


# ---------------------------------------------------------------- the object store
def test_missing_bucket_fails_the_batch_naming_the_endpoint_without_secrets(moto_server):
    secret = "s3cr3t-" + uuid.uuid4().hex
    lake = {"uri": "s3://no-such-bucket-" + uuid.uuid4().hex[:8] + "/lake", **FORMATS["csv"],
            "s3.endpoint": moto_server, "s3.access-key": "AKIDTESTING", "s3.secret-access-key": secret,
            "s3.region": "us-east-1"}
    dst = make_destination(lake)
    store = default_store()
    with pytest.raises(StorageUnavailableError) as excinfo:
        dst.write([to_record(e, str(i).encode(), store) for i, e in enumerate(_rows(5))])
    _assert_outage(excinfo, "object-store", lake["uri"])
    assert moto_server in excinfo.value.endpoint
    assert secret not in str(excinfo.value) and "AKIDTESTING" not in str(excinfo.value)


@pytest.fixture
def own_moto():
    """A moto server of this test's own (it gets SIGSTOPped); yields (endpoint, process)."""
    from cdcflow.dev.process import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(10)


def test_stalled_endpoint_fails_within_the_deadline_and_logs_the_wait(own_moto, caplog):
    import s3fs

    endpoint, proc = own_moto
    bucket = "b" + uuid.uuid4().hex[:12]
    s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint},
                      skip_instance_cache=True).mkdir(bucket)
    lake = {"uri": f"s3://{bucket}/lake", **FORMATS["csv"], "s3.endpoint": endpoint, "s3.access-key": "testing",
            "s3.secret-access-key": "testing", "s3.region": "us-east-1", "connect-timeout": "1s",
            "read-timeout": "4s", "retries": "3", "request-timeout": "8s"}
    dst = make_destination(lake)
    store = default_store()
    events = _rows(20)
    assert dst.write([to_record(e, str(i).encode(), store) for i, e in enumerate(events[:10])]) is None
    proc.send_signal(signal.SIGSTOP)
    caplog.set_level(logging.WARNING, logger="cdcflow.connectors.storage")
    start = time.monotonic()
    with pytest.raises(StorageUnavailableError) as excinfo:
        dst.write([to_record(e, str(i).encode(), store) for i, e in enumerate(events[10:], 10)])
    took = time.monotonic() - start
    assert took < 30, f"the stalled endpoint held the write {took:.0f}s"
    _assert_outage(excinfo, "object-store", f"s3://{bucket}/lake")
    assert "timed out" in str(excinfo.value)
    waits = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    assert waits and f"s3://{bucket}/lake" in waits[0] and endpoint in waits[0]


# ---------------------------------------------------------------- a writer killed mid-write
def test_temp_file_of_a_sigkilled_writer_is_removed_by_the_next_writer(tmp_path):
    lake = {"uri": str(tmp_path / "lake"), **FORMATS["csv"]}
    store = default_store()
    events = _rows(20)
    dst = make_destination(lake)
    assert dst.write([to_record(e, str(i).encode(), store) for i, e in enumerate(events[:10])]) is None
    meta = next(p for p in (tmp_path / "lake").rglob("meta") if (p / "CDC.index").exists())
    # a writer stopped between writing CDC.index's temporary file and renaming it
    child = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom cdcflow.durable import _write_temp\n"
        "_write_temp(sys.argv[1], b'CDC000099.csv\\n')\nprint('ready', flush=True)\ntime.sleep(600)\n"),
        str(meta / "CDC.index")], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        temps = [p.name for p in meta.iterdir() if p.name.endswith(".tmp")]
        assert len(temps) == 1 and temps[0].startswith(".CDC.index.")
        assert remove_stale_temps(meta) == []  # its writer is alive: left alone
        assert (meta / temps[0]).exists()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert (meta / temps[0]).exists()  # what kill -9 leaves behind

    again = make_destination(lake)  # the next run's writer
    assert again.write([to_record(e, str(i).encode(), store) for i, e in enumerate(events[10:], 10)]) is None
    assert not [p for p in (tmp_path / "lake").rglob("*.tmp")]
    got = sorted(repr(comparable(from_record(r, store))) for _, r in read_all(lake))
    assert got == sorted(repr(comparable(e)) for e in events)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_path_too_long_for_the_store_is_the_error_of_those_rows_only(tmp_path, request, where):
    """Names within the 255-byte limit under a long root: the disk (PATH_MAX) or S3 (1024-byte keys)
    refuses the path; those rows are nacked, the other table's rows of the batch are written."""
    if where == "s3":
        uri, extra = s3_lake(request)
        uri += "/" + "p" * 700
    else:
        root = tmp_path
        for _ in range(15):
            root = root / ("r" * 250)
        uri, extra = str(root), {}
    lake = {"uri": uri, **FORMATS["csv"], **extra}
    store = default_store()
    short = _rows(10)
    long_names = [dataclasses.replace(e, table=dataclasses.replace(e.table, schema="s" * 200, table="t" * 200,
                                                                   index={})) for e in _rows(10)]
    events = [e for pair in zip(short, long_names) for e in pair]
    dst = make_destination(lake)
    errors = dst.write([to_record(e, str(i).encode(), store) for i, e in enumerate(events)])
    assert errors is not None
    assert [e is None for e in errors] == [True, False] * 10
    assert all("UnsafeNameError" in e and "cannot be stored" in e for e in errors[1::2])
    got = sorted(repr(comparable(from_record(r, store))) for _, r in read_all(lake))
    assert got == sorted(repr(comparable(e)) for e in short)


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(600)
def test_cdcflow_run_against_a_stalled_endpoint_stops_naming_it(own_moto, tmp_path):
    """``cdcflow run`` writing to S3 when the endpoint stops answering (SIGSTOP) ends with a failure
    naming the endpoint, instead of hanging; nothing goes to the DLQ. Once the endpoint answers
    again (SIGCONT), a re-run completes and every row is in the lake: 0 lost."""
    import boto3
    from helpers.storage import pipeline_file

    endpoint, moto = own_moto
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
    bucket = "b" + uuid.uuid4().hex[:12]
    client.create_bucket(Bucket=bucket)
    lake = {"uri": f"s3://{bucket}/lake", **FORMATS["csv"], "s3.endpoint": endpoint, "s3.access-key": "testing",
            "s3.secret-access-key": "testing", "s3.region": "us-east-1", "connect-timeout": "1s",
            "read-timeout": "2s", "retries": "2", "request-timeout": "6s"}
    gen = {"format.type": "tidb", "operations": "create", "seed": "3", "recordCount": "3000", "rate": "300",
           "partitions": "1"}
    path = pipeline_file(tmp_path / "p.yaml", "stall", ("builtin:generator", gen), ("builtin:storage", lake), batch=50)
    text = Path(path).read_text()  # one retry: the default outage budget would wait up to 5 minutes
    Path(path).write_text(text.replace("engine:\n", "engine:\n  error-recovery.max-retries: \"1\"\n"
                                       "  error-recovery.min-delay: 100ms\n", 1))
    proc = subprocess.Popen([sys.executable, "-m", "cdcflow.cli", "run", path, "--until-idle", "--master", "local[1]",
                             "--state-dir", str(tmp_path / "state")], cwd=Path(__file__).resolve().parents[3],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            keys = client.list_objects_v2(Bucket=bucket).get("KeyCount", 0)
            if keys >= 6:  # a few data files written: the pipeline is running
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        moto.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        out, _ = proc.communicate(timeout=400)
        took = time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out[-3000:]
    assert f"s3://{bucket}/lake" in out and endpoint in out, out[-3000:]
    assert "destination dst: object-store unavailable" in out, out[-3000:]
    assert re.search(r"records nacked\s+0\b", out), out[-3000:]  # an outage sends nothing to the DLQ
    assert took < 300, f"the run took {took:.0f}s to give up"

    moto.send_signal(signal.SIGCONT)  # the fault is removed: the same run again finishes the job
    cli = [sys.executable, "-m", "cdcflow.cli", "run"]
    rerun = subprocess.run([*cli, path, "--until-idle", "--master", "local[1]", "--state-dir", str(tmp_path / "state")],
                           cwd=Path(__file__).resolve().parents[3], capture_output=True, text=True, timeout=400)
    assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-3000:]
    back, out_file = tmp_path / "back.yaml", tmp_path / "back.jsonl"
    source = {"uri": f"s3://{bucket}/lake", **FORMATS["csv"], "s3.endpoint": endpoint, "s3.access-key": "testing",
              "s3.secret-access-key": "testing", "s3.region": "us-east-1"}
    pipeline_file(back, "back", ("builtin:storage", source), ("builtin:file", {"path": str(out_file)}))
    read = subprocess.run([*cli, str(back), "--until-idle", "--master", "local[1]", "--state-dir",
                           str(tmp_path / "back-state")], cwd=Path(__file__).resolve().parents[3],
                          capture_output=True, text=True, timeout=400)
    assert read.returncode == 0, (read.stdout + read.stderr)[-3000:]
    ids = [orjson.loads(line)["key"]["id"] for line in out_file.read_bytes().splitlines() if b'"cdcflow.control"' not in line]
    assert set(ids) == set(range(3000)), f"{3000 - len(set(ids))} rows lost"


def test_timeout_settings_reach_the_s3_client_and_bound_each_call():
    """The URI query or the discrete settings (which win) become botocore's timeouts and retries;
    s3fs's own retry loop is one pass (it multiplied botocore's attempts); ``request-timeout`` is
    the per-call deadline. Defaults apply when nothing is set; nonsense is a ConfigError."""
    from cdcflow.connectors.storage.settings import DESTINATION_PARAMS, resolve
    from cdcflow.connectors.storage.writer import FileStore
    from cdcflow.errors import ConfigError
    from cdcflow.params import validate

    def store(config: dict) -> FileStore:
        return FileStore.of(resolve(validate("storage", DESTINATION_PARAMS, config)))

    s = store({"uri": "s3://bkt/p?read-timeout=3s&retries=2&connect-timeout=9s", "connect-timeout": "2s",
               "request-timeout": "40s", "s3.endpoint": "http://127.0.0.1:1"})
    assert s.fs.config_kwargs == {"connect_timeout": 2.0, "read_timeout": 3.0,
                                  "retries": {"max_attempts": 2, "mode": "standard"}}
    assert s.fs.retries == 1 and s.deadline == 40.0
    d = store({"uri": "s3://bkt/p"})
    assert d.fs.config_kwargs["connect_timeout"] == 5.0 and d.fs.config_kwargs["read_timeout"] == 15.0
    assert d.fs.config_kwargs["retries"]["max_attempts"] == 3 and d.deadline == 120.0
    for bad in ({"retries": "0"}, {"request-timeout": "0s"}, {"uri": "s3://bkt/p?read-timeout=soon"}):
        with pytest.raises(ConfigError):
            store({"uri": "s3://bkt/p", **bad})
