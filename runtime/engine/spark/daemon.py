"""PySpark's worker daemon, started with what every cdcflow task needs already imported.

Spark starts one daemon per executor (``python -m <spark.python.daemon.module>``) at the
first Python task and forks every Python worker from it. With PySpark's own daemon each
worker then imports PySpark's worker module, cdcflow's engine and every plugin module of
the registry itself, and the daemon imports PySpark from Spark's ``pyspark.zip``, which
holds no bytecode: the daemon compiled PySpark and each worker imported everything again,
all before the first record, on every run. This module (``spark.python.daemon.module = cdcflow.engine.spark.daemon``, set by
``session.base_conf``):

1. drops Spark's bundled zips from ``sys.path`` when the very same PySpark is installed as
   a package (the zip lies inside it), so PySpark imports from its compiled files;
2. imports PySpark's worker module, the engine's task module and the modules of cdcflow's
   built-in plugins once (none starts a thread: forking stays safe), then freezes that
   heap so forked workers share its pages and their collector skips it;
3. runs PySpark's daemon unchanged.

A failure in step 2 is reported on stderr and the daemon runs anyway: workers then
import what they need themselves, as with PySpark's daemon.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.metadata
import importlib.util
import os
import sys
import threading
import traceback

#: Spark's bundled archives on the workers' PYTHONPATH (``$SPARK_HOME/python/lib``)
_BUNDLED_ZIPS = ("pyspark.zip", "py4j-")


def bundled_zips_to_drop(path: list[str], installed_pyspark_dir: str | None) -> list[str]:
    """Entries of ``path`` that are Spark's bundled zips lying inside the installed PySpark
    package (a pip-installed PySpark ships them under ``pyspark/python/lib``): the same
    distribution, which an import finds, compiled, in site-packages once the zips are gone.
    Zips of a separate ``$SPARK_HOME`` are kept: that PySpark may differ from the installed one."""
    if not installed_pyspark_dir:
        return []
    root = os.path.join(os.path.realpath(installed_pyspark_dir), "")
    drop = []
    for entry in path:
        name = os.path.basename(entry)
        if name.endswith(".zip") and name.startswith(_BUNDLED_ZIPS) and os.path.realpath(entry).startswith(root):
            drop.append(entry)
    return drop


def _installed_pyspark_dir(path: list[str]) -> str | None:
    """Where ``import pyspark`` finds a package directory when the zips are not searched."""
    plain = [p for p in path if not p.endswith(".zip")]
    saved = sys.path
    try:
        sys.path = plain
        spec = importlib.util.find_spec("pyspark")
    except (ImportError, ValueError):
        return None
    finally:
        sys.path = saved
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def use_installed_pyspark() -> list[str]:
    """Step 1: drop the bundled zips (before anything imports PySpark); returns what was dropped."""
    if "pyspark" in sys.modules:
        return []
    drop = bundled_zips_to_drop(sys.path, _installed_pyspark_dir(sys.path))
    for entry in drop:
        sys.path.remove(entry)
    return drop


def builtin_plugin_modules() -> list[str]:
    """Modules of cdcflow's own entry points (its built-in connectors and transforms).

    Third-party plugins are left to the workers: their imports might start a thread, and a
    daemon that forks must not have any."""
    from ...registry import ENTRY_POINT_GROUP

    return sorted({ep.module for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
                   if ep.module.split(".")[0] == "cdcflow"})


def thread_count() -> int:
    """Threads of this process, native ones included (a C library may start its own)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def preload() -> list[str]:
    """Step 2: import what every worker imports, then freeze the heap for the forks.

    Returns the plugin modules imported."""
    # the daemon's stdout carries its port number to Spark: a stray print must not reach it
    with contextlib.redirect_stdout(sys.stderr):
        import pyspark.worker  # noqa: F401 - imported for the forked workers

        from .. import task  # noqa: F401 - what unpickling a micro-batch's function imports

        modules = builtin_plugin_modules()
        for name in modules:
            importlib.import_module(name)
    if thread_count() > 1:  # a fork copies only the forking thread: say so, a worker may hang
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.main_thread())
        print(f"cdcflow daemon: {thread_count() - 1} threads running before workers are forked "
              f"(Python's: {names or 'none'})", file=sys.stderr)
    gc.collect()
    gc.freeze()
    return modules


def main() -> None:
    use_installed_pyspark()
    try:
        preload()
    except Exception:  # noqa: BLE001 - workers import what they need themselves then
        print("cdcflow daemon: preloading failed; workers will import on their own:", file=sys.stderr)
        traceback.print_exc(file=sys.stderr)
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
