"""Optional compiled kernels for the hot paths, each with a pure-Python twin.

Why: the per-row work of the text and Avro codecs (Avro values, Conduit's JSON form, TiCDC
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
    "cdcflow.convert._jsonform",
    "cdcflow.convert._wire",
    "cdcflow.connectors.ticdc.avro._decode",
    "cdcflow.connectors.ticdc.avro._encode",
    "cdcflow.connectors.ticdc.canal_json._canal_json",
    "cdcflow.connectors.ticdc.csv._csv",
    "cdcflow.connectors.ticdc.open_protocol._open_protocol_decode",
    "cdcflow.connectors.ticdc.open_protocol._open_protocol_encode",
)

ENV_OFF = "CDCFLOW_PURE_PYTHON"
#: comma-separated kernel names (full or last part, e.g. ``_csv``) to run in Python only;
#: how a pipeline benchmark measures what one kernel buys end to end
ENV_OFF_SOME = "CDCFLOW_KERNELS_OFF"


def enabled(name: str = "") -> bool:
    if os.environ.get(ENV_OFF, "") not in ("", "0"):
        return False
    off = {part.strip() for part in os.environ.get(ENV_OFF_SOME, "").split(",") if part.strip()}
    return not (name and (name in off or name.rsplit(".", 1)[-1] in off))


def load(name: str) -> ModuleType | None:
    """The kernel module ``name`` (one of ``KERNELS``), or None to use the Python path."""
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r}; known: {', '.join(KERNELS)}")
    if not enabled(name):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def status() -> dict[str, str]:
    """{kernel: "compiled" | "off" | "not built: <reason>"} for ``cdcflow plugins list`` and tests."""
    out = {}
    for name in KERNELS:
        if not enabled(name):
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
