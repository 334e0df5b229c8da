"""Pytest plugin: a real Kafka broker (Tansu) and a real schema registry for the whole session.

Loaded for every test directory by ``tests/conftest.py``; both fixtures are
lazy, so sessions that do not use them start nothing. Each is one process per
session: tests that need isolation use their own topic and subject names
(``unique_name``). Tests that must restart a registry start their own
``cdcflow.dev.registry.RegistryService``.
"""

from __future__ import annotations

import itertools
import os
import uuid

import pytest


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """Bootstrap servers ("127.0.0.1:PORT") of a Tansu broker with memory storage."""
    from cdcflow.dev.broker import Broker

    log = tmp_path_factory.mktemp("kafka-broker") / "broker.log"
    broker = Broker(log_path=log).start()
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory):
    """URL ("http://127.0.0.1:PORT") of the built-in registry over a fresh data directory."""
    from cdcflow.dev.registry import RegistryService

    base = tmp_path_factory.mktemp("schema-registry")
    service = RegistryService(base / "data", log_path=base / "registry.log").start()
    try:
        yield service.url
    finally:
        service.stop()


_counter = itertools.count()


@pytest.fixture
def unique_name(request):
    """A topic/subject-safe name unique in this session: ``<test>-<n>-<random>``."""
    test = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40].strip("-")
    return f"{test}-{next(_counter)}-{uuid.uuid4().hex[:6]}-{os.getpid()}"
