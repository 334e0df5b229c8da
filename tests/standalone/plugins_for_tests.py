"""Small cdcflow plugins the standalone tests serve in subprocesses.

Each writes what it saw to files named by its settings, so the test process
can check what reached the plugin without sharing memory with it.
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

from cdcflow.errors import InfrastructureError
from cdcflow.params import Parameter, ParamType
from cdcflow.record import Record
from cdcflow.sdk import FILTERED, ConnectorPlugin, Destination, Failed, Source, Transform


def _append(path: str, obj: Any) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")


class CountingSource(Source):
    """Produces ``count`` records with positions b"1".. and logs acks to ``acks``."""

    def open(self, position: bytes | None, partition: str = "") -> None:
        self.n = int(position) if position else 0
        self.last = b""

    def read(self, max_records: int) -> list[Record] | None:
        count = self.config["count"]
        if self.n >= count:
            return None
        out = []
        while self.n < count and len(out) < max_records:
            self.n += 1
            out.append(Record(position=str(self.n).encode(), metadata={"opencdc.collection": "t"},
                              key=f"k{self.n}".encode(), after={"n": self.n, "big": 2**64 - 1}))
        self.last = out[-1].position
        return out

    def ack(self, positions: Sequence[bytes]) -> None:
        for p in positions:
            _append(self.config["acks"], p.decode())

    def stop(self) -> bytes | None:
        return self.last or None

    def teardown(self) -> None:
        _append(self.config["acks"], "teardown")


class AppendingDestination(Destination):
    """Appends each record's position (and payload) to ``path``; ``die_after`` kills the process."""

    def open(self) -> None:
        self.written = 0

    def write(self, records: Sequence[Record]) -> Sequence[str | None] | None:
        die_after = self.config.get("die_after") or 0
        results: list[str | None] = []
        with open(self.config["path"], "a") as f:
            for r in records:
                if die_after and self.written >= die_after:
                    f.flush()
                    os._exit(3)
                if r.key == b"outage":  # stands in for the service behind the destination going down
                    raise InfrastructureError("connection refused", service="test-db", endpoint="db.test:5432")
                if r.key == b"reject":
                    results.append("rejected by test destination")
                    continue
                f.write(r.position.decode() + "\n")
                self.written += 1
                results.append(None)
        return results if any(results) else None

    def stop(self, last_position: bytes | None) -> None:
        _append(self.config["path"] + ".events", {"stop": (last_position or b"").decode()})

    def teardown(self) -> None:
        _append(self.config["path"] + ".events", {"teardown": True})


TEST_CONNECTOR = ConnectorPlugin(
    name="testconn",
    version="v1.2.3",
    summary="test connector",
    author="cdcflow tests",
    source=CountingSource,
    destination=AppendingDestination,
    source_params={
        "count": Parameter(type=ParamType.INT, default="5", greater_than=0, description="records to produce"),
        "acks": Parameter(required=True, description="file the acks are logged to"),
    },
    destination_params={
        "path": Parameter(required=True, description="file positions are appended to"),
        "die_after": Parameter(type=ParamType.INT, default="0", description="exit after this many records"),
        "mode": Parameter(default="a", inclusion=("a", "b"), regex="[ab]"),
        "flush": Parameter(type=ParamType.DURATION, default="1s", less_than=3600),
    },
)


class EchoTransform(Transform):
    """Returns records unchanged; key b"drop" is filtered, b"fail" fails, b"twice" doubles."""

    name = "echo"
    version = "v0.0.1"
    summary = "echo"
    parameters = {"suffix": Parameter(default="")}

    def process_record(self, record: Record):
        if record.key == b"drop":
            return FILTERED
        if record.key == b"fail":
            return Failed("asked to fail")
        if record.key == b"twice":
            return [record, record.copy()]
        return record


class SchemaRegisteringTransform(Transform):
    """Registers a schema in the process's default store (the host's, through the
    schema service) and reports its subject/version/id in the record's metadata."""

    name = "schema-registering"
    version = "v0.0.1"

    def process_record(self, record: Record):
        from cdcflow.schemas import default_store

        store = default_store()
        text = '{"type": "record", "name": "r", "fields": [{"name": "%s", "type": "long"}]}' % record.key.decode()
        s = store.register("from-plugin", text)
        again = store.get("from-plugin", s.version)
        out = record.copy()
        out.metadata.update({"store": type(store).__name__, "subject": s.subject, "version": str(s.version),
                             "id": str(s.id), "same": str(again == s)})
        return out


class GatedDestination(Destination):
    """Logs each write's positions to ``path`` (one JSON list per write) after the file ``gate``
    exists; records whose key is b"reject" get an error."""

    def write(self, records: Sequence[Record]) -> Sequence[str | None] | None:
        import time

        while not os.path.exists(self.config["gate"]):
            time.sleep(0.01)
        _append(self.config["path"], [r.position.decode() for r in records])
        results = ["rejected by test destination" if r.key == b"reject" else None for r in records]
        return results if any(results) else None


GATED_CONNECTOR = ConnectorPlugin(
    name="gated",
    version="v0.0.1",
    destination=GatedDestination,
    destination_params={
        "path": Parameter(required=True, description="file each write's positions are logged to"),
        "gate": Parameter(required=True, description="writes wait until this file exists"),
    },
)
