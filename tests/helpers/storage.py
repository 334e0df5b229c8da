"""Helpers that drive the storage connectors in-process (real files, real S3 server)."""

from __future__ import annotations

from cdcflow.connectors.storage.destination import StorageDestination
from cdcflow.connectors.storage.settings import DESTINATION_PARAMS, SOURCE_PARAMS
from cdcflow.connectors.storage.source import StorageSource
from cdcflow.params import validate


def make_destination(settings: dict) -> StorageDestination:
    d = StorageDestination()
    d.configure(validate("storage", DESTINATION_PARAMS, {k: str(v) for k, v in settings.items()}))
    d.open()
    return d


def make_source(settings: dict) -> StorageSource:
    s = StorageSource()
    s.configure(validate("storage", SOURCE_PARAMS, {k: str(v) for k, v in settings.items()}))
    return s


def read_all(settings: dict, positions: dict | None = None, limit: int | None = None) -> list:
    """Every record of every partition (order kept per partition); stops each partition when idle."""
    src = make_source(settings)
    out = []
    for part in src.partitions():
        s = make_source(settings)
        s.open((positions or {}).get(part), part)
        while True:
            batch = s.read(1000 if limit is None else limit)
            if not batch:
                break
            out.extend((part, r) for r in batch)
            if limit is not None:
                break
        s.teardown()
    return out
