"""Project-wide test setup: ``tests/`` on sys.path, the shared Kafka/registry fixtures, and a
private cache directory (the Spark class-data archive) so a test run leaves nothing in ``~/.cache``."""

import os
import shutil
import sys
import tempfile
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.append(_TESTS)

pytest_plugins = ["kafka_fixtures"]

_OWN_CACHE = None
if "CDCFLOW_CACHE_DIR" not in os.environ:  # set before any Spark start; subprocesses inherit it
    _OWN_CACHE = tempfile.mkdtemp(prefix="cdcflow-test-cache-")
    os.environ["CDCFLOW_CACHE_DIR"] = _OWN_CACHE


def pytest_unconfigure(config):
    if _OWN_CACHE is not None:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)
