"""cdcflow.engine.spark.heap: the allocator policy of long-running workers."""

import subprocess
import sys

import pytest

CHECK = """
import ctypes, sys
from cdcflow.engine.spark.heap import keep_freed_memory
ok = keep_freed_memory()
again = keep_freed_memory()
print(ok, again)
"""


def _run(env_value: str | None) -> str:
    import os
    env = {k: v for k, v in os.environ.items() if k != "CDCFLOW_KEEP_FREED_MEMORY"}
    if env_value is not None:
        env["CDCFLOW_KEEP_FREED_MEMORY"] = env_value
    return subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env,
                          check=True).stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_policy_applies_once_and_can_be_turned_off():
    assert _run(None) == ["True", "True"]  # applied, then remembered
    assert _run("0") == ["False", "False"]
