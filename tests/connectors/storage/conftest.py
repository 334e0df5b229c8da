"""Fixtures of the storage tests: a local or moto-S3 URI per test, and an in-process Spark session
(the session's moto S3 server is ``moto_server`` from ``helpers.s3_fixtures``)."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture(params=["local", "s3"])
def storage_uri(request, tmp_path):
    """(uri, extra settings) for local disk and for a fresh bucket on the moto server."""
    if request.param == "local":
        return str(tmp_path / "lake"), {}
    endpoint = request.getfixturevalue("moto_server")
    import s3fs

    bucket = "b" + uuid.uuid4().hex[:12]
    fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint},
                           skip_instance_cache=True)
    fs.mkdir(bucket)
    return f"s3://{bucket}/prefix", {"s3.endpoint": endpoint, "s3.access-key": "testing",
                                     "s3.secret-access-key": "testing", "s3.region": "us-east-1"}


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local[2] Spark session for the in-process engine tests (``run_files`` joins it)."""
    from cdcflow.engine.spark.session import start_session
    from cdcflow.engine.state import StateDir

    state = StateDir(tmp_path_factory.mktemp("spark-session")).create()
    info = start_session("local[2]", {}, state)
    yield info.context
    info.stop()
