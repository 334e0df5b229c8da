"""Project-wide test setup: ``tests/`` on sys.path and the shared Kafka/registry fixtures."""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.append(_TESTS)

pytest_plugins = ["kafka_fixtures"]
