"""Optional compiled kernels for the hot paths, each with a pure-Python twin.

Why: the per-row work of the wire and text codecs (protobuf records, TiCDC
canal-json / CSV / open protocol) is a few microseconds of interpreter time per
row; the same work in C is a fraction of that. The Python code stays the
reference and the fallback: a kernel handles the usual shapes and values and
hands anything else back to Python, which then decides (and names the error).

``load`` returns None when kernels are turned off (``CDCFLOW_PURE_PYTHON=1``) or
were not built (the extensions are optional in ``pyproject.toml``: an install
without a C compiler still works, only slower). ``status`` says which is which.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

#: every kernel module, by import name (pyproject.toml builds one extension per entry)
KERNELS: tuple[str, ...] = (
    "cdcflow.convert._wire",
    "cdcflow._avro_decode",
    "cdcflow._avro_encode",
    "cdcflow.convert._jsonform",
    "cdcflow.connectors.ticdc._canal_json",
    "cdcflow.connectors.ticdc._csv",
    "cdcflow.connectors.ticdc._open_protocol_decode",
    "cdcflow.connectors.ticdc._open_protocol_encode",
)

ENV_OFF = "CDCFLOW_PURE_PYTHON"


def enabled() -> bool:
    return os.environ.get(ENV_OFF, "") in ("", "0")


def load(name: str) -> ModuleType | None:
    """The kernel module ``name`` (one of ``KERNELS``), or None to use the Python path."""
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r}; known: {', '.join(KERNELS)}")
    if not enabled():
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def status() -> dict[str, str]:
    """{kernel: "compiled" | "off" | "not built: <reason>"} for ``cdcflow plugins list`` and tests."""
    out = {}
    for name in KERNELS:
        if not enabled():
            out[name] = "off"
            continue
        try:
            importlib.import_module(name)
            out[name] = "compiled"
        except ImportError as e:
            out[name] = f"not built: {e}"
    return out


if __name__ == "__main__":  # python -m cdcflow.accel: which kernels this install runs
    for kernel, state in status().items():
        print(f"{kernel:48} {state}")
