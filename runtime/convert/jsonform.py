"""Conduit's JSON form of records: one JSON object per line, as Conduit writes it.

Self-contained: a line holds plain JSON values only and reads the same in any run, on any
machine, and in Conduit itself; nothing points into a schema store. The bytes are those
Conduit's Go writer (conduit-commons' ``opencdc.Record`` through goccy/go-json, which
behaves as ``encoding/json`` with its defaults) writes for the same record:

- fields in the Go struct's order: ``position``, ``operation``, ``metadata``, ``key``,
  ``payload`` (``before``, ``after``); object keys of metadata and structured data sorted
  by their UTF-8 bytes (Go sorts map keys);
- an empty position and empty metadata are ``null``; absent data is ``null``; raw data is a
  base64 string; structured data an object; operation 0 is ``"Operation(0)"``;
- strings escaped as Go escapes them: ``<``, ``>``, ``&`` as ``\\u003c``, ``\\u003e``,
  ``\\u0026``, U+2028/U+2029 as ``\\u2028``/``\\u2029``, control characters other than
  ``\\n``, ``\\r``, ``\\t`` as ``\\u00XX``;
- floats in Go's shortest form (``1`` for 1.0, ``1e-07``, ``1e+21``); datetimes in RFC 3339
  with the fraction trimmed (a naive datetime is UTC: ``2020-02-20T02:20:20.5Z``).

Values JSON and Go have no type for are text (``cdcflow.convert.textforms``): bytes as base64,
Decimal keeping its scale (``"1.50"``), dates ``2020-02-20``, durations ``-838:59:59``,
NaN/±Infinity as ``"NaN"``/``"Infinity"``/``"-Infinity"`` (Go refuses those); ints are exact
JSON integers of any size. The reader returns plain JSON values: such text stays text.

With the compiled kernel (``runtime/convert/_jsonform.c``) a whole batch is written in C; it
hands a record it is not sure of back to the Python writer below, the reference.
"""

from __future__ import annotations

import binascii
import datetime as _dt
import json
import re
from decimal import Decimal
from typing import Any, Callable, Iterable

import orjson

from .. import accel
from ..errors import ConversionError
from ..record import META_KEY_SCHEMA_SUBJECT as _KEY_SUBJECT
from ..record import META_PAYLOAD_SCHEMA_SUBJECT as _PAYLOAD_SUBJECT
from ..record import Operation, Record
from ..schemas import SchemaStore
from .jsontypes import NotRestored, Restorer
from .protobuf import _metadata_of
from .schemaref import in_context
from .textforms import TEXT_FORMS, GoTime, rfc3339_text, unb64

#: the compiled writer (runtime/convert/_jsonform.c), or None: the Python path below writes every line
_kernel = accel.load("cdcflow.convert._jsonform")

INT64_MIN, UINT64_MAX = -(1 << 63), (1 << 64) - 1

#: Go's text of each operation (its ``Operation.String``): 0 has no name, so ``Operation(0)``
OPERATION_TEXT = {op: ("Operation(0)" if op is Operation.UNSPECIFIED else op.text) for op in Operation}
_OPERATIONS = {text: op for op, text in OPERATION_TEXT.items()}
_OPERATIONS.update({f"Operation({int(op)})": op for op in Operation})  # Go reads any Operation(n)
_OPERATION_JSON = {op: orjson.dumps(text) for op, text in OPERATION_TEXT.items()}


# ---------------------------------------------------------------------------
# Values -> JSON
# ---------------------------------------------------------------------------
def go_float(value: float) -> str:
    """Go's JSON text of a finite float64: shortest round-trip digits, fixed notation for
    1e-6 <= |v| < 1e21 (``1`` for 1.0), else the exponent form (``1e-07``, ``1.5e+21``).

    Why repr: it has the same shortest digits, and in the exponent range it already writes
    them as Go does (at least two exponent digits, with a sign)."""
    text = repr(value)
    magnitude = abs(value)
    if magnitude != 0.0 and (magnitude < 1e-6 or magnitude >= 1e21):
        return text
    if "e" in text:  # repr's exponent range starts earlier (1e-4, 1e16)
        return format(Decimal(text), "f")
    return text[:-2] if text.endswith(".0") else text


_JSON_TEXT_FORMS = {**TEXT_FORMS, _dt.datetime: rfc3339_text, GoTime: rfc3339_text}


def jsonable(value: Any, path: str = "$") -> Any:
    """The value with only JSON types, objects' keys sorted (as Go writes maps), floats and
    ints past 64 bits as orjson ``Fragment``s of their Go text."""
    t = type(value)
    if value is None or t is str or t is bool:
        return value
    if t is int:
        return value if INT64_MIN <= value <= UINT64_MAX else orjson.Fragment(str(value).encode())
    if t is float:
        if value - value == 0.0:
            return orjson.Fragment(go_float(value).encode())
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if t is dict:
        try:
            keys = sorted(value)
        except TypeError:
            keys = list(value)
        out = {}
        for k in keys:
            if type(k) is not str:
                raise ConversionError(f"dict key {k!r} is not a string", path=path)
            out[k] = jsonable(value[k], f"{path}.{k}")
        return out
    if t is list:
        return [jsonable(v, f"{path}[{i}]") for i, v in enumerate(value)]
    text_form = _JSON_TEXT_FORMS.get(t)
    if text_form is not None:
        return text_form(value)
    raise ConversionError(f"unsupported value type {t.__name__}", path=path, value=value)


# Go escapes what orjson writes as is (<, >, &, U+2028, U+2029) and writes \b and \f as \u00XX.
# Each escape pair is matched whole, so a backslash that is itself escaped is never misread.
_GO_ESCAPES = {b"<": b"\\u003c", b">": b"\\u003e", b"&": b"\\u0026", b"\xe2\x80\xa8": b"\\u2028",
               b"\xe2\x80\xa9": b"\\u2029", b"\\b": b"\\u0008", b"\\f": b"\\u000c"}
_GO_ESCAPE = re.compile(rb"\\.|[<>&]|\xe2\x80[\xa8\xa9]")


def _go_escaped(text: bytes) -> bytes:
    """orjson's JSON text with strings escaped as Go escapes them. (Substring tests first: each is
    a fast scan, and most lines hold none of these.)"""
    if (b"<" in text or b">" in text or b"&" in text or b"\xe2\x80" in text or b"\\b" in text
            or b"\\f" in text):
        return _GO_ESCAPE.sub(lambda m: _GO_ESCAPES.get(m.group(), m.group()), text)
    return text


def _data_json(value: Any, path: str) -> bytes:
    """One side's JSON text: raw data as a base64 string (its alphabet needs no escaping), an
    object with Go's escaping, or null."""
    if value is None:
        return b"null"
    if type(value) is dict:
        return _go_escaped(orjson.dumps(jsonable(value, path)))
    return b'"' + binascii.b2a_base64(value, newline=False) + b'"'


def _line(r: Record) -> bytes:
    """The record's line without the newline (the reference the kernel is held to)."""
    position, metadata = r.position, r.metadata
    try:
        key = _data_json(r.key, "key")
        before = _data_json(r.before, "payload.before")
        after = _data_json(r.after, "payload.after")
        meta = _go_escaped(orjson.dumps(metadata, option=orjson.OPT_SORT_KEYS)) if metadata else b"null"
    except ConversionError as e:
        raise in_context(e, f"record at position {position!r}") from None
    except TypeError as e:  # orjson: metadata that is not str -> str, bytes-like data of another type
        raise ConversionError(f"record at position {position!r}: {e}") from None
    return b"".join((
        b'{"position":', b'"' + binascii.b2a_base64(position, newline=False) + b'"' if position else b"null",
        b',"operation":', _OPERATION_JSON[r.operation], b',"metadata":', meta, b',"key":', key,
        b',"payload":{"before":', before, b',"after":', after, b"}}"))


def _handback(r: Record) -> bytes:
    return _line(r) + b"\n"


# ---------------------------------------------------------------------------
# Records -> lines
# ---------------------------------------------------------------------------
def dumps_record(record: Record) -> bytes:
    """One record as one JSON line (without the newline)."""
    if _kernel is not None:
        return _kernel.dumps([record], _KERNEL_CONFIG, _handback)[:-1]
    return _line(record)


def dumps_lines(records: Iterable[Record]) -> bytes:
    """Records as JSON lines, each ending in a newline."""
    if type(records) is not list and type(records) is not tuple:
        records = list(records)
    if _kernel is not None:
        return _kernel.dumps(records, _KERNEL_CONFIG, _handback)
    return b"".join([_line(r) + b"\n" for r in records])


def dumps_each(records: Iterable[Record]) -> list[bytes]:
    """One JSON line per record (no newline), written as one batch: ``dumps_record`` for each,
    without its per-call cost (for destinations that send records one by one, e.g. Kafka)."""
    return dumps_lines(records).split(b"\n")[:-1]  # JSON text escapes every newline


# What the kernel reads records with: the Record type (its slots), the operations and their JSON.
_KERNEL_CONFIG: Any = None
if _kernel is not None:
    try:
        _KERNEL_CONFIG = _kernel.Config((Record, tuple(Operation), tuple(_OPERATION_JSON[op] for op in Operation)))
    except TypeError:  # a Record without the slot layout the kernel reads: the Python path writes
        _kernel = None


# ---------------------------------------------------------------------------
# Lines -> records
# ---------------------------------------------------------------------------
def _data_of(value: Any, path: str) -> Any:
    """Key or payload side from its JSON: None, raw bytes from base64, or the object as it is."""
    t = type(value)
    if value is None or t is dict:
        return value
    if t is str:
        return unb64(value, path) if value else b""
    raise ConversionError(f"data must be an object, a base64 string or null, not {t.__name__}", path=path)


def record_of(obj: Any, restore: Callable[[dict, dict, str], Any] | None = None) -> Record:
    """The record of a parsed JSON line (Conduit's rules: a missing or null position, metadata
    or data is empty; a missing or empty operation is ``Operation(0)``). ``restore``: a
    ``jsontypes.Restorer``, which may give structured data its native values back (it raises
    ``NotRestored`` when they do not fit the schema the metadata names)."""
    if type(obj) is not dict:
        raise ConversionError(f"a record must be a JSON object, not {type(obj).__name__}")
    get = obj.get
    position = get("position")
    if position is None or position == "":
        position = b""
    elif type(position) is str:
        position = unb64(position, "position")
    else:
        raise ConversionError(f"expected a base64 string, got {type(position).__name__}", path="position")
    op_text = get("operation")
    operation = Operation.UNSPECIFIED if op_text is None or op_text == "" else (
        _OPERATIONS.get(op_text) if type(op_text) is str else None)
    if operation is None:
        raise ConversionError(f"unknown operation {op_text!r}", path="operation", value=op_text)
    metadata = get("metadata")
    if metadata is None:
        metadata = {}
    elif type(metadata) is not dict:
        raise ConversionError("metadata must be an object of strings", path="metadata")
    else:
        try:
            "".join(metadata.values())  # TypeError unless every value is a string (JSON: exactly str)
        except TypeError:
            raise ConversionError("metadata must be an object of strings", path="metadata") from None
    payload = get("payload")
    if payload is None:
        payload = {}
    elif type(payload) is not dict:
        raise ConversionError("payload must be an object with before/after", path="payload")
    key = _data_of(get("key"), "key")
    before = _data_of(payload.get("before"), "payload.before")
    after = _data_of(payload.get("after"), "payload.after")
    if restore is not None and metadata:
        if type(key) is dict:
            key = restore(key, metadata, "key")
        if type(before) is dict:
            before = restore(before, metadata, "payload")
        if type(after) is dict:
            after = restore(after, metadata, "payload")
    return Record(position, operation, metadata, key, before, after)


class _Reader:
    """Reads the lines of one batch; ``store``: a schema store whose schemas the metadata of a
    record may name (``jsontypes``), or None for plain JSON values only."""

    __slots__ = ("restore",)

    def __init__(self, store: SchemaStore | None):
        self.restore = None if store is None else Restorer(store)

    def _parse(self, line: bytes, line_no: int, big_ints: bool) -> Any:
        try:
            return json.loads(line) if big_ints and _may_hold_big_ints(line) else orjson.loads(line)
        except ValueError as e:
            raise ConversionError(f"line {line_no}: invalid JSON: {e}") from None

    def line(self, line: bytes, line_no: int, big_ints: bool = True) -> Record:
        """``big_ints``: the line may hold an integer orjson cannot read exactly (see :func:`_may_hold_big_ints`)."""
        try:
            try:
                return record_of(self._parse(line, line_no, big_ints), self.restore)
            except NotRestored:  # values that do not fit their named schema: the plain JSON values
                return record_of(self._parse(line, line_no, big_ints))
        except ConversionError as e:
            raise in_context(e, f"line {line_no}") from None


# orjson reads integers past 64 bits as floats, so text that may hold one is read with json
# instead. A JSON number starts the text or follows ``:``, ``,``, ``[`` or whitespace, maybe with
# a minus sign. The test maps every byte to its class (digit "0", separator "S") and searches
# the result for runs of 19+ digits (no regular expression over every digit); only such a run
# that starts a number is read, and counts if it is past uint64 (or below int64). Digits inside
# strings follow a quote or a letter, so nanosecond timestamps in metadata cost nothing.
_NUMBER_CLASSES = bytes(
    ord("0") if c in b"0123456789" else ord("S") if c in b":,[ \t\r\n" else c if c == ord("-") else ord("x")
    for c in range(256)
)
_LONG_RUN = b"0" * 19
_SEPARATOR = ord("S")
_DIGIT_RUN = re.compile(rb"[0-9]+")


def _may_hold_big_ints(data: bytes) -> bool:
    classes = data.translate(_NUMBER_CLASSES)
    i = classes.find(_LONG_RUN)
    while i >= 0:
        negative = i > 0 and classes[i - 1] == 45  # "-"
        start = i - negative
        run = _DIGIT_RUN.match(data, i)
        if start == 0 or classes[start - 1] == _SEPARATOR:  # a number, not digits inside a string
            if int(run.group()) > (-INT64_MIN if negative else UINT64_MAX):
                return True
        i = classes.find(_LONG_RUN, run.end())
    return False


def loads_record(line: bytes | str, store: SchemaStore | None = None, line_no: int = 1) -> Record:
    """One record from one JSON line; errors name ``line_no``. ``store``: see ``_Reader``."""
    if isinstance(line, str):
        line = line.encode()
    return _Reader(store).line(line, line_no)


def loads_lines(data: bytes | str, store: SchemaStore | None = None) -> list[Record]:
    """Records from JSON lines (blank lines skipped); errors name the 1-based line number.
    ``store``: see ``_Reader``."""
    if isinstance(data, str):
        data = data.encode()
    read = _Reader(store).line
    big_ints = _may_hold_big_ints(data)  # once for the batch; then line by line only if it may
    return [read(line, i, big_ints) for i, line in enumerate(data.split(b"\n"), 1) if line and not line.isspace()]


# ---------------------------------------------------------------------------
# Batch messages' bytes straight to lines (a standalone destination plugin)
# ---------------------------------------------------------------------------
#: the JSON of each operation, by its protobuf number
_WIRE_OPERATION_TEXTS = tuple(_OPERATION_JSON[op] for op in Operation)


def _wire_metadata_json(block: bytes) -> bytes | None:
    """The kernel's ``metadata_json``: the JSON object of the metadata in ``block`` (map entries),
    parsed as ``from_wire`` parses it; None when ``from_wire`` would not keep it as it is (a key or
    payload schema subject: it decodes the data with that schema) or refuses it."""
    try:
        metadata = _metadata_of(block) if block else {}
    except ValueError:  # upb refuses it (bad UTF-8, a torn entry): from_wire decides
        return None
    if _KEY_SUBJECT in metadata or _PAYLOAD_SUBJECT in metadata:
        return None
    return _go_escaped(orjson.dumps(metadata, option=orjson.OPT_SORT_KEYS)) if metadata else b"null"


def dumps_wire(message: bytes) -> tuple[bytes, bytes] | None:
    """A batch message's records as JSON lines without building them, or None.

    ``message``: the bytes of a batch message (``Destination.Run.Request``: records in field 1).
    Returns ``(dumps_lines(from_wire(message)), encode_acks(positions))`` byte for byte, the second
    being the ``Destination.Run.Response`` acknowledging every record in order
    (``cdcflow.standalone.framing.encode_acks``). Returns None, for the caller to convert the
    message with ``from_wire`` and ``dumps_lines``, when the kernel is not built or the message
    is not the plain shape: structured data, a schema reference in the metadata, unknown or
    repeated fields, malformed bytes, metadata upb refuses.
    """
    if _kernel is None:
        return None
    return _kernel.dumps_wire(message, _WIRE_OPERATION_TEXTS, _wire_metadata_json)
