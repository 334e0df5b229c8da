"""Project-wide test setup: the shared Kafka/registry/S3 fixtures (``helpers``), and a
private cache directory (the Spark class-data archive) so a test run leaves nothing in ``~/.cache``,
and private Spark scratch and JVM temp dirs so killed runs leave nothing in ``/tmp``."""

import os
import shutil
import tempfile

import pytest

pytest_plugins = ["helpers.kafka_fixtures", "helpers.s3_fixtures"]

_OWN_DIRS = []
if "CDCFLOW_CACHE_DIR" not in os.environ:  # set before any Spark start; subprocesses inherit it
    _OWN_DIRS.append(tempfile.mkdtemp(prefix="cdcflow-test-cache-"))
    os.environ["CDCFLOW_CACHE_DIR"] = _OWN_DIRS[-1]
if "SPARK_LOCAL_DIRS" not in os.environ:  # Spark's scratch dirs, also of runs the tests kill
    _OWN_DIRS.append(tempfile.mkdtemp(prefix="cdcflow-test-spark-"))
    os.environ["SPARK_LOCAL_DIRS"] = _OWN_DIRS[-1]
if "SPARK_SUBMIT_OPTS" not in os.environ:  # the JVMs' java.io.tmpdir: a JVM the tests kill leaves
    _OWN_DIRS.append(tempfile.mkdtemp(prefix="cdcflow-test-jvm-"))  # its spark-* dirs and native libs there
    os.environ["SPARK_SUBMIT_OPTS"] = f"-Djava.io.tmpdir={_OWN_DIRS[-1]}"


def pytest_unconfigure(config):
    for path in _OWN_DIRS:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _forget_registered_secrets():
    """Settings a test validates register their secret values with the process-wide log redactor;
    they are forgotten after the test, so a later test's messages are not masked by them (a test
    key "0" masked the 0s of a version number)."""
    from cdcflow.params import REDACTOR

    saved = (set(REDACTOR._secrets), REDACTOR._pattern)
    yield
    REDACTOR._secrets, REDACTOR._pattern = saved
