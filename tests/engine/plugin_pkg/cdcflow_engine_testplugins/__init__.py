"""Test-only connectors, registered through a real ``cdcflow`` entry point.

The engine tests put this directory on the driver's ``sys.path`` only; the
engine must ship it to the Spark workers itself (zip with its .dist-info).

- ``test-recorder``: appends pickled records to ``path`` (fsync'ed), so tests compare
  exact Record objects; rejects records whose key ``id`` is in ``reject`` (comma list)
  with the message ``rejected id N``. Its ``stop(last_position)`` and ``teardown`` calls
  are appended to ``<path>.lifecycle`` (``stop <position or ->`` / ``teardown``).
- ``test-broken``: every write raises (a DLQ that cannot be written).
- ``test.lookup`` (transform): enriches records from a "service" whose first ``fail-batches``
  calls raise ``InfrastructureError`` (counted across processes in ``counter``), like a
  lookup processor whose backend is briefly down.
- ``test-outage``: a ``test-recorder`` whose first ``fail-writes`` writes raise
  ``InfrastructureError`` before writing anything (-1: every write), counted across
  processes in ``<path>.attempts``. It stands in for a service outage in the engine
  tests; the connectors' own tests produce real ones (a stopped broker, a full disk).
"""

from __future__ import annotations

import os
import pickle
import struct

import pluggy

from cdcflow.errors import InfrastructureError
from cdcflow.params import Parameter, ParamType
from cdcflow.sdk import ConnectorPlugin, Destination, Transform

hookimpl = pluggy.HookimplMarker("cdcflow")


class Recorder(Destination):
    def configure(self, config):
        super().configure(config)
        self.path = config["path"]
        self.reject = {int(x) for x in str(config.get("reject") or "").split(",") if x.strip()}

    def open(self):
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, records):
        results, keep = [], []
        for r in records:
            rid = r.key.get("id") if isinstance(r.key, dict) else None
            if rid in self.reject:
                results.append(f"rejected id {rid}")
            else:
                results.append(None)
                keep.append(r)
        blob = b"".join(struct.pack(">I", len(p)) + p for p in (pickle.dumps(r) for r in keep))
        os.write(self.fd, blob)
        os.fsync(self.fd)
        return results if any(results) else None

    def _lifecycle(self, line: bytes) -> None:
        with open(self.path + ".lifecycle", "ab") as f:
            f.write(line + b"\n")

    def stop(self, last_position):
        self._lifecycle(b"stop " + (last_position or b"-"))

    def teardown(self):
        if getattr(self, "fd", None) is not None:
            os.close(self.fd)
            self.fd = None
            self._lifecycle(b"teardown")


class Outage(Recorder):
    def configure(self, config):
        super().configure(config)
        self.fail_writes = int(config.get("fail-writes") or 0)

    def write(self, records):
        attempt = _count(self.path + ".attempts")
        if self.fail_writes < 0 or attempt <= self.fail_writes:
            raise InfrastructureError(f"write {attempt}: connection refused", service="test-service",
                                      endpoint="test://outage:9")
        return super().write(records)


def _count(path):
    """Append one byte to ``path`` and return how many there are (a counter shared by processes)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, b".")
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


class Lookup(Transform):
    name = "test.lookup"
    summary = "sets Metadata[looked-up]; its first calls find the service down"
    description = ("Stands in for a processor that calls an outside service: the first `fail-batches` calls "
                   "raise InfrastructureError, as an unreachable service would.")
    parameters = {
        "counter": Parameter(ParamType.STRING, None, "file counting the calls", required=True),
        "fail-batches": Parameter(ParamType.INT, "0", "calls that fail first"),
    }

    def process(self, records):
        if _count(self.config["counter"]) <= int(self.config["fail-batches"]):
            raise InfrastructureError("lookup service refused the connection", service="lookup",
                                      endpoint="http://lookup.test:8080")
        for r in records:
            r.metadata["looked-up"] = "yes"
        return list(records)


class Broken(Destination):
    def write(self, records):
        raise OSError("disk on fire")


def read_records(path):
    """Every record a Recorder wrote to ``path``, in order (a torn tail is ignored)."""
    out = []
    try:
        data = open(path, "rb").read()
    except FileNotFoundError:
        return out
    i = 0
    while i + 4 <= len(data):
        (n,) = struct.unpack(">I", data[i:i + 4])
        if i + 4 + n > len(data):
            break
        out.append(pickle.loads(data[i + 4:i + 4 + n]))
        i += 4 + n
    return out


RECORDER_PARAMS = {
    "path": Parameter(ParamType.STRING, None, "file to append to", required=True),
    "reject": Parameter(ParamType.STRING, "", "comma-separated key ids to reject"),
}


@hookimpl
def cdcflow_connectors():
    return [
        ConnectorPlugin(
            name="test-recorder",
            version="v0.1.0",
            summary="records pickled records; rejects chosen ids",
            destination=Recorder,
            destination_params=RECORDER_PARAMS,
        ),
        ConnectorPlugin(
            name="test-outage",
            version="v0.1.0",
            summary="a test-recorder whose first writes fail with InfrastructureError",
            destination=Outage,
            destination_params={
                **RECORDER_PARAMS,
                "fail-writes": Parameter(ParamType.INT, "0", "writes that fail first (-1: all)"),
            },
        ),
        ConnectorPlugin(name="test-broken", version="v0.1.0", summary="every write fails", destination=Broken),
    ]


@hookimpl
def cdcflow_transforms():
    return [Lookup]
