"""Holding a compiled kernel to its Python reference: the one mechanism every kernel test uses.

A ``Kernel`` names a compiled twin (its ``accel`` name) and the module attributes that hold it;
setting those to None makes the same code take its Python reference path (not a mock). ``both``
runs one function each way and ``outcome`` makes the two results comparable, errors included.
The harness ``tests/connectors/ticdc/test_kernels_match_reference.py`` lists the kernels and runs
each on generated inputs; each kernel's own test module holds its hand-written edge cases with
these same helpers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from cdcflow import accel
from cdcflow.connectors.ticdc.canal_json import encode as _cj_encode
from cdcflow.connectors.ticdc.csv import decode as _csv_decode
from cdcflow.connectors.ticdc.csv import encode as _csv_encode
from cdcflow.connectors.ticdc.events import RowChange
from cdcflow.connectors.ticdc.open_protocol import decode as _op_decode
from cdcflow.connectors.ticdc.open_protocol import encode as _op_encode


@dataclass(frozen=True)
class Kernel:
    """One compiled twin: its accel name and the module attributes that hold it (all are set to
    None for the reference run)."""

    name: str
    holders: tuple[tuple[Any, str], ...]

    def loaded(self) -> bool:
        """Whether the install runs it (built, and not turned off by the environment)."""
        return all(getattr(mod, attr) is not None for mod, attr in self.holders)

    def required(self) -> pytest.MarkDecorator:
        """Skip a test that needs the compiled path when it is not built or turned off."""
        state = accel.status().get(self.name, "off")
        return pytest.mark.skipif(not self.loaded(), reason=f"{self.name} is not running ({state})")

    @contextlib.contextmanager
    def off(self):
        """The Python reference path, for the duration of the block."""
        saved = [getattr(mod, attr) for mod, attr in self.holders]
        for mod, attr in self.holders:
            setattr(mod, attr, None)
        try:
            yield
        finally:
            for (mod, attr), value in zip(self.holders, saved):
                setattr(mod, attr, value)


CSV = Kernel("cdcflow.connectors.ticdc.csv._csv", ((_csv_decode, "_kernel"), (_csv_encode, "_kernel")))
CANAL_JSON = Kernel("cdcflow.connectors.ticdc.canal_json._canal_json", ((_cj_encode, "_kernel"),))
OPEN_DECODE = Kernel("cdcflow.connectors.ticdc.open_protocol._open_protocol_decode",
                     ((_op_decode, "_decode_kernel"),))
OPEN_ENCODE = Kernel("cdcflow.connectors.ticdc.open_protocol._open_protocol_encode",
                     ((_op_encode, "_encode_kernel"),))


def strict(value: Any) -> str:
    """A type-strict rendering of a codec's result: repr tells int from float from bool, Decimal
    exponents, -0.0, str from bytes, date from datetime; events by their fields."""
    if isinstance(value, _csv_decode.CsvColumns):
        # its rows as events: the kernel may read column-wise a file the Python reader reads
        # row-wise (it sees which field was quoted; Python only that a quoted NULL text occurs)
        value = value.events()
    if isinstance(value, list) and value and isinstance(value[0], RowChange):
        value = [(e.table.collection, e.kind, e.commit_ts, e.row, e.old, e.extra) for e in value]
    return repr(value)


def outcome(fn: Callable[[], Any], form: Callable[[Any], Any] = lambda value: value) -> tuple:
    """``("ok", form(result))`` or ``("error", error type, message)``: both paths must give the
    same result, or the same typed error with the same text."""
    try:
        return "ok", form(fn())
    except Exception as e:  # noqa: BLE001 - the typed error and its text are what is compared
        return "error", type(e), str(e)


def both(kernel: Kernel, fn: Callable[[], Any], form: Callable[[Any], Any] = lambda value: value) -> tuple:
    """(``outcome`` as the install runs it, ``outcome`` with ``kernel``'s holders set to None)."""
    compiled = outcome(fn, form)
    with kernel.off():
        reference = outcome(fn, form)
    return compiled, reference
