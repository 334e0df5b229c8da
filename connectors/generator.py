"""The ``generator`` source: deterministic sample records.

Settings follow Conduit's generator (``recordCount``, ``rate``, ``readTime``, ``burst.*``,
``operations``, ``format.type`` incl. ``file``, ``format.options.*``, ``collections.*``) plus
cdcflow's ``seed``, ``partitions`` and ``format.type: tidb``.

Determinism: record ``seq`` of partition ``p`` is drawn from a random generator
seeded with (seed, p, seq) alone, so the same settings give the same records in
any process, and a restart at a position regenerates exactly what follows it
without replaying what came before.
"""

from __future__ import annotations

import datetime as dt
import functools
import random
import re
import struct
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Mapping, Sequence

import orjson

from cdcflow.errors import CdcflowError, ConfigError
from cdcflow.params import Parameter, ParamType
from cdcflow.record import META_COLLECTION, META_CREATED_AT, Operation, Record
from cdcflow.sdk import Source
from cdcflow.connectors.ticdc.tidb import Column, TableSchema

PLUGIN = "generator"
OPERATIONS = ("create", "update", "delete", "snapshot")
FORMATS = ("raw", "structured", "file", "tidb")
FIELD_TYPES = ("int", "string", "time", "bool", "duration")
DEFAULT_TIDB_COLLECTION = "cdcflow_gen.all_types"
#: opencdc.createdAt of record 0; later records are 1 ms apart (deterministic, unlike wall time)
EPOCH_NS = 1_704_067_200_000_000_000  # 2024-01-01T00:00:00Z

SOURCE_PARAMS: dict[str, Parameter] = {
    "recordCount": Parameter(
        ParamType.INT, "-1",
        "Number of records to generate over all partitions; 0 or -1 means no limit (Conduit's old and new meaning).",
        greater_than=-2,
    ),
    "rate": Parameter(
        ParamType.FLOAT, "0",
        "Maximum records per second over all partitions; 0 means no limit.", greater_than=-1,
    ),
    "readTime": Parameter(
        ParamType.DURATION, "0s", "Time to 'read' one record. Deprecated in Conduit: use rate.",
    ),
    "operations": Parameter(
        ParamType.STRING, "create",
        'Comma-separated operations to draw from: "create", "update", "delete", "snapshot".',
        regex=r"\s*(create|update|delete|snapshot)\s*(,\s*(create|update|delete|snapshot)\s*)*",
    ),
    "format.type": Parameter(
        ParamType.STRING, "structured",
        "Payload format: raw (JSON bytes), structured (a map), file (the bytes of format.options.path), "
        "or tidb (rows of every TiDB column type).",
        inclusion=FORMATS,
    ),
    "format.options.*": Parameter(
        ParamType.STRING, None,
        "For raw and structured: field name -> type, type one of int, string, time, bool, duration; "
        "for file: path, the file whose contents every record's payload is.",
    ),
    "burst.sleepTime": Parameter(
        ParamType.DURATION, "0s", "Time the generator sleeps between bursts (0: no bursts).",
    ),
    "burst.generateTime": Parameter(
        ParamType.DURATION, "1s", "Time a burst generates records (with burst.sleepTime).", greater_than=0,
    ),
    "collections.*": Parameter(
        ParamType.STRING, None,
        "Per collection C: collections.C.format.type, collections.C.format.options.FIELD, "
        "collections.C.operations. Records are spread over the collections; for tidb C names the "
        "table as schema.table.",
    ),
    "seed": Parameter(ParamType.INT, "1", "Seed of the pseudo-random values; the same seed gives the same records."),
    "partitions": Parameter(
        ParamType.INT, "1", "Independent partitions (each read in its own order and position); records are split among them.",
        greater_than=0, less_than=65536,
    ),
}

_COLLECTION_KEY = re.compile(r"^collections\.(?P<c>.+?)\.(?P<what>format\.type|operations|format\.options\.(?P<f>.+))$")


class GeneratorPositionError(CdcflowError):
    """A position handed to ``open`` was not produced by this generator (or partition)."""


# -- field generators (raw / structured) ----------------------------------------------
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
          "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango")


def _field_value(ftype: str, rng: random.Random) -> Any:
    if ftype == "int":
        return rng.randint(-(2**31), 2**31 - 1)
    if ftype == "string":
        return f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}-{rng.randrange(10_000)}"
    if ftype == "bool":
        return rng.random() < 0.5
    if ftype == "time":
        return dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=rng.randrange(366 * 86_400 * 10**6))
    if ftype == "duration":  # Go time.Duration: nanoseconds
        return rng.randrange(10**12)
    raise AssertionError(ftype)


# -- the all-types TiDB table ----------------------------------------------------------
def _c(name: str, type_: str, **kw: Any) -> Column:
    return Column(name, type_, **kw)


def all_types_columns() -> tuple[Column, ...]:
    """One column per TiDB type (signed and unsigned integers, both DECIMAL sizes...)."""
    cols = [_c("id", "BIGINT", nullable=False, primary_key=True, handle_key=True)]
    for t in ("TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT"):
        low = t.lower()
        cols.append(_c(f"c_{low}", t))
        cols.append(_c(f"c_{low}_unsigned", t, unsigned=True))
    cols += [
        _c("c_int_not_null", "INT", nullable=False, default=0, has_default=True),
        _c("c_float", "FLOAT"),
        _c("c_double", "DOUBLE"),
        _c("c_decimal", "DECIMAL", precision=65, scale=30),
        _c("c_decimal_10_2", "DECIMAL", precision=10, scale=2),
        _c("c_decimal_unsigned", "DECIMAL", precision=20, scale=0, unsigned=True),
        _c("c_char", "CHAR", length=16),
        _c("c_varchar", "VARCHAR", length=255),
        _c("c_tinytext", "TINYTEXT"),
        _c("c_text", "TEXT"),
        _c("c_mediumtext", "MEDIUMTEXT"),
        _c("c_longtext", "LONGTEXT"),
        _c("c_binary", "BINARY", length=16, binary=True),
        _c("c_varbinary", "VARBINARY", length=255, binary=True),
        _c("c_tinyblob", "TINYBLOB", binary=True),
        _c("c_blob", "BLOB", binary=True),
        _c("c_mediumblob", "MEDIUMBLOB", binary=True),
        _c("c_longblob", "LONGBLOB", binary=True),
        _c("c_date", "DATE"),
        _c("c_datetime", "DATETIME", fsp=6),
        _c("c_datetime_0", "DATETIME", fsp=0),
        _c("c_timestamp", "TIMESTAMP", fsp=6),
        _c("c_time", "TIME", fsp=0),
        _c("c_time_6", "TIME", fsp=6),
        _c("c_year", "YEAR"),
        _c("c_bit", "BIT", length=64),
        _c("c_bit_1", "BIT", length=1),
        _c("c_enum", "ENUM", elements=("red", "green", "blue")),
        _c("c_set", "SET", elements=("a", "b", "c", "d")),
        _c("c_json", "JSON"),
    ]
    return tuple(cols)


_INT_BITS = {"TINYINT": 8, "SMALLINT": 16, "MEDIUMINT": 24, "INT": 32, "BIGINT": 64}
_TEXT_LEN = {"TINYTEXT": 255, "TEXT": 1024, "MEDIUMTEXT": 4096, "LONGTEXT": 8192}
_BLOB_LEN = {"TINYBLOB": 255, "BLOB": 1024, "MEDIUMBLOB": 4096, "LONGBLOB": 8192}
_FLOAT32_MAX = struct.unpack("<f", struct.pack("<f", 3.4028234663852886e38))[0]
_TIME_MAX = dt.timedelta(hours=838, minutes=59, seconds=59)
_TS_MIN = dt.datetime(1970, 1, 1, 0, 0, 1)
_TS_MAX = dt.datetime(2038, 1, 19, 3, 14, 7, 999_999)
_DT_MIN = dt.datetime(1000, 1, 1)
_DT_MAX = dt.datetime(9999, 12, 31, 23, 59, 59, 999_999)
_TEXT_CHARS = "abcxyzÄäß字節😀 ,\"'\\\n\t"

#: how a column's value is picked for a row: the row's variant cycles through these
#: so the first rows of every partition already hold every extreme and NULL.
RANDOM, MAXIMUM, MINIMUM, NULL = 0, 1, 2, 3
VARIANTS = 5  # RANDOM twice as often as each other variant


def _variant(draw: int) -> int:
    return (RANDOM, MAXIMUM, MINIMUM, NULL, RANDOM)[draw % VARIANTS]


def _decimal(rng: random.Random, precision: int, scale: int, signed: bool) -> Decimal:
    digits = rng.randrange(10**precision)
    sign = "-" if signed and rng.random() < 0.5 else ""
    text = str(digits).rjust(precision, "0")
    whole, frac = text[: precision - scale].lstrip("0") or "0", text[precision - scale:]
    return Decimal(f"{sign}{whole}.{frac}" if scale else f"{sign}{whole}")


def _column_value(col: Column, variant: int, rng: random.Random) -> Any:
    """The native value (see cdcflow.connectors.ticdc.tidb) of ``col`` for one row."""
    if variant == NULL and col.nullable:
        return None
    t = col.type
    if variant == NULL:  # NOT NULL column in a NULL row: its default
        variant = MINIMUM
    if t in _INT_BITS:
        bits = _INT_BITS[t]
        lo, hi = (0, 2**bits - 1) if col.unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        return hi if variant == MAXIMUM else lo if variant == MINIMUM else rng.randint(lo, hi)
    if t == "FLOAT":
        if variant != RANDOM:
            return _FLOAT32_MAX if variant == MAXIMUM else -_FLOAT32_MAX
        return struct.unpack("<f", struct.pack("<f", rng.uniform(-1e6, 1e6)))[0]
    if t == "DOUBLE":
        if variant != RANDOM:
            return 1.7976931348623157e308 if variant == MAXIMUM else -1.7976931348623157e308
        return rng.uniform(-1e12, 1e12)
    if t == "DECIMAL":
        p, s = col.precision or 10, col.scale or 0
        if variant == MAXIMUM:
            return Decimal("9" * (p - s) + ("." + "9" * s if s else ""))
        if variant == MINIMUM:
            return Decimal("0." + "0" * s) if col.unsigned or s else Decimal("-" + "9" * p)
        return _decimal(rng, p, s, not col.unsigned)
    if t in ("CHAR", "VARCHAR") or t in _TEXT_LEN:
        cap = col.length or _TEXT_LEN.get(t, 255)
        if variant == MINIMUM:
            return ""  # zero-length string
        if variant == MAXIMUM:
            return _longest_text(cap)
        text = "".join(rng.choices(_TEXT_CHARS, k=rng.randrange(min(cap, 64) + 1)))
        return text.rstrip(" ") if t == "CHAR" else text  # TiDB strips CHAR's trailing spaces
    if t == "BINARY":
        n = col.length or 1
        if variant == MAXIMUM:
            return b"\xff" * n
        if variant == MINIMUM:
            return b"\x00" * n  # BINARY(n) is zero-padded to n bytes
        return rng.randbytes(n)
    if t == "VARBINARY" or t in _BLOB_LEN:
        cap = col.length or _BLOB_LEN.get(t, 255)
        if variant == MINIMUM:
            return b""
        if variant == MAXIMUM:
            return _longest_bytes(cap)
        return rng.randbytes(rng.randrange(min(cap, 64) + 1))
    if t == "DATE":
        if variant != RANDOM:
            return dt.date(9999, 12, 31) if variant == MAXIMUM else dt.date(1000, 1, 1)
        return dt.date(1000, 1, 1) + dt.timedelta(days=rng.randrange(3_287_181))
    if t in ("DATETIME", "TIMESTAMP"):
        lo, hi = (_TS_MIN, _TS_MAX) if t == "TIMESTAMP" else (_DT_MIN, _DT_MAX)
        fsp = col.fsp or 0
        if variant == MAXIMUM:
            value = hi
        elif variant == MINIMUM:
            value = lo
        else:
            span = int((hi - lo).total_seconds()) * 10**6
            value = lo + dt.timedelta(microseconds=rng.randrange(span))
        return _truncate_micro(value, fsp)
    if t == "TIME":
        fsp = col.fsp or 0
        if variant == MAXIMUM:
            return _TIME_MAX
        if variant == MINIMUM:
            return -_TIME_MAX
        micros = rng.randint(-_TIME_MAX // dt.timedelta(microseconds=1), _TIME_MAX // dt.timedelta(microseconds=1))
        unit = 10 ** (6 - fsp)
        return dt.timedelta(microseconds=int(micros / unit) * unit)
    if t == "YEAR":
        return 2155 if variant == MAXIMUM else 1901 if variant == MINIMUM else rng.randint(1901, 2155)
    if t == "BIT":
        width = col.length or 1
        return 2**width - 1 if variant == MAXIMUM else 0 if variant == MINIMUM else rng.randrange(2**width)
    if t == "ENUM":
        els = col.elements
        return els[-1] if variant == MAXIMUM else els[0] if variant == MINIMUM else rng.choice(els)
    if t == "SET":
        els = col.elements
        if variant == MAXIMUM:
            return ",".join(els)
        if variant == MINIMUM:
            return ""  # the empty set
        return ",".join(e for e in els if rng.random() < 0.5)
    if t == "JSON":
        if variant == MAXIMUM:
            return '{"a": [1, 2.5, "x\\"y", true, false, null], "b": {"c": 18446744073709551615}, "d": "字"}'
        if variant == MINIMUM:
            return "{}"
        return f'{{"k": {rng.randint(-1000, 1000)}, "s": "{rng.choice(_WORDS)}", "l": [{rng.randrange(9)}, null]}}'
    raise AssertionError(f"no value generator for column type {t}")


@functools.lru_cache(maxsize=None)
def _longest_text(n: int) -> str:
    """``n`` characters cycling through multi-byte, quote, escape and control characters."""
    text = (_TEXT_CHARS.replace(" ", "_") * (n // len(_TEXT_CHARS) + 1))[:n]
    return text


@functools.lru_cache(maxsize=None)
def _longest_bytes(n: int) -> bytes:
    """``n`` bytes cycling through every byte value, NUL included."""
    return bytes(range(256)) * (n // 256) + bytes(range(n % 256))


def _truncate_micro(value: dt.datetime, fsp: int) -> dt.datetime:
    unit = 10 ** (6 - fsp)
    return value.replace(microsecond=value.microsecond // unit * unit)


# -- configuration -------------------------------------------------------------------
@dataclass(frozen=True)
class CollectionSpec:
    """How one collection's records look."""

    name: str | None  # opencdc.collection, None when no collections were configured (non-tidb)
    format: str
    fields: tuple[tuple[str, str], ...]  # raw/structured: (field, type)
    operations: tuple[Operation, ...]
    table: TableSchema | None  # tidb
    data: bytes | None = None  # file: every record's payload, read once (as Conduit caches it)


def _parse_operations(text: str, setting: str) -> tuple[Operation, ...]:
    ops = tuple(o.strip() for o in text.split(",") if o.strip())
    bad = [o for o in ops if o not in OPERATIONS]
    if bad or not ops:
        raise ConfigError(PLUGIN, setting, "inclusion", f"operations must be a non-empty list of {', '.join(OPERATIONS)}")
    return tuple(Operation.from_text(o) for o in ops)


def _parse_fields(options: Mapping[str, str], prefix: str) -> tuple[tuple[str, str], ...]:
    fields = []
    for name in sorted(options):
        ftype = options[name].strip()
        if ftype not in FIELD_TYPES:
            raise ConfigError(PLUGIN, f"{prefix}{name}", "inclusion", f"field type {ftype!r} must be one of {', '.join(FIELD_TYPES)}")
        fields.append((name, ftype))
    return tuple(fields)


def _table_for(collection: str) -> TableSchema:
    schema, _, table = collection.partition(".")
    if not table:
        schema, table = "cdcflow_gen", collection
    return TableSchema(schema, table, all_types_columns())


def parse_collections(config: Mapping[str, Any]) -> list[CollectionSpec]:
    """Build the collection specs from validated settings (top level is the default)."""
    top_format = config["format.type"]
    top_ops_text = config["operations"]
    top_fields = {k[len("format.options."):]: v for k, v in config.items() if k.startswith("format.options.")}
    per: dict[str, dict[str, Any]] = {}
    for key, value in config.items():
        if not key.startswith("collections."):
            continue
        m = _COLLECTION_KEY.match(key)
        if m is None:
            raise ConfigError(PLUGIN, key, "format", "expected collections.NAME.format.type, "
                              "collections.NAME.format.options.FIELD or collections.NAME.operations")
        entry = per.setdefault(m.group("c"), {"options": {}})
        if m.group("f"):
            entry["options"][m.group("f")] = value
        else:
            entry[m.group("what")] = value
    if not per:
        per = {None: {"options": {}}}  # type: ignore[dict-item]
    specs = []
    for name in sorted(per, key=lambda n: n or ""):
        entry = per[name]
        fmt = entry.get("format.type", top_format).strip()
        where = f"collections.{name}.format.type" if name is not None else "format.type"
        if fmt not in FORMATS:
            raise ConfigError(PLUGIN, where, "inclusion", f"format {fmt!r} must be one of {', '.join(FORMATS)}")
        ops_setting = f"collections.{name}.operations" if "operations" in entry else "operations"
        ops = _parse_operations(entry.get("operations", top_ops_text), ops_setting)
        options, prefix = (entry["options"], f"collections.{name}.format.options.") if entry["options"] else (
            top_fields, "format.options.")
        fields: tuple[tuple[str, str], ...] = ()
        table = None
        data = None
        if fmt == "file":
            path = options.get("path", "").strip()
            if not path:
                raise ConfigError(PLUGIN, prefix + "path", "required", "format file needs the file: "
                                  f"{prefix}path")
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
            except OSError as e:
                raise ConfigError(PLUGIN, prefix + "path", "file", f"cannot read {path}: {e.strerror or e}") from None
        elif fmt == "tidb":
            coll = name or DEFAULT_TIDB_COLLECTION
            table = _table_for(coll)
            name = coll
        else:
            fields = _parse_fields(options, prefix)
            if not fields:
                raise ConfigError(PLUGIN, prefix + "*", "required",
                                  f"format {fmt} needs at least one field, e.g. {prefix}id: int")
        specs.append(CollectionSpec(name, fmt, fields, ops, table, data))
    return specs


# -- the source ------------------------------------------------------------------------
class GeneratorSource(Source):
    """See the module docstring. Positions are ``b"<partition>/<seq>"``."""

    #: the engine's ``ReadWaitSource`` capability: how long a read may sleep for ``rate`` or a
    #: burst pause (None: up to 1 s); 0 when a task serves several partitions in turn
    read_wait: float | None = None

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.seed: int = int(config["seed"])
        self.npartitions: int = int(config["partitions"])
        count = int(config["recordCount"])
        self.record_count: int | None = count if count > 0 else None
        rate = float(config["rate"])
        read_time = float(config.get("readTime") or 0.0)
        if rate < 0:
            raise ConfigError(PLUGIN, "rate", "greater-than", "rate must not be negative")
        if read_time < 0:
            raise ConfigError(PLUGIN, "readTime", "greater-than", "readTime must not be negative")
        if rate == 0 and read_time > 0:
            rate = 1.0 / read_time
        self.rate: float = rate
        self.burst_sleep = float(config.get("burst.sleepTime") or 0.0)
        self.burst_generate = float(config.get("burst.generateTime") or 1.0)
        if self.burst_sleep < 0:
            raise ConfigError(PLUGIN, "burst.sleepTime", "greater-than", "burst.sleepTime must not be negative")
        self.collections = parse_collections(config)
        self._store = None
        self._attach: Callable[..., None] | None = None
        self._fixed_rows: dict[tuple[int, int], dict[str, Any]] = {}
        if any(c.table is not None for c in self.collections):
            from cdcflow.connectors.ticdc.schema import attach_table
            from cdcflow.schemas import default_store

            self._attach = attach_table
            self._store = default_store()

    def partitions(self) -> Sequence[str]:
        return [str(p) for p in range(self.npartitions)]

    def open(self, position: bytes | None, partition: str = "") -> None:
        self.partition = partition or "0"
        try:
            self._pindex = int(self.partition)
        except ValueError:
            raise GeneratorPositionError(f"generator: unknown partition {partition!r}") from None
        if not 0 <= self._pindex < self.npartitions:
            raise GeneratorPositionError(
                f"generator: partition {partition!r} out of range (partitions={self.npartitions})")
        self._next = 0
        if position:
            part, seq = self.parse_position(position)
            if part != self.partition:
                raise GeneratorPositionError(
                    f"generator: position {position!r} belongs to partition {part!r}, not {self.partition!r}")
            self._next = seq + 1
        self._limit = self._partition_count()
        self._rate = self.rate / self.npartitions if self.rate > 0 else 0.0
        self._started = time.monotonic()
        self._emitted_since_open = 0
        self._last: bytes | None = position
        self._rng = random.Random()

    @staticmethod
    def parse_position(position: bytes) -> tuple[str, int]:
        try:
            part, _, seq = position.decode("ascii").partition("/")
            return part, int(seq)
        except (UnicodeDecodeError, ValueError):
            raise GeneratorPositionError(f"generator: position {position!r} is not <partition>/<sequence>") from None

    def _partition_count(self) -> int | None:
        if self.record_count is None:
            return None
        base, extra = divmod(self.record_count, self.npartitions)
        return base + (1 if self._pindex < extra else 0)

    def read(self, max_records: int) -> list[Record] | None:
        n = max_records
        if self._limit is not None:
            left = self._limit - self._next
            if left <= 0:
                return None
            n = min(n, left)
        if self.burst_sleep > 0 and not self._in_burst():
            return []
        if self._rate > 0:
            n = min(n, self._due())
            if n <= 0:
                return []
        out = [self.make_record(seq) for seq in range(self._next, self._next + n)]
        self._next += n
        self._emitted_since_open += n
        if out:
            self._last = out[-1].position
        return out

    def lag(self) -> int | None:
        """Records of this partition still to generate (None when unbounded)."""
        return None if self._limit is None else self._limit - self._next

    def _in_burst(self) -> bool:
        """Whether this moment is in a burst (``burst.generateTime`` long, every generate + sleep time from
        open); in a pause, sleeps until the next burst (at most 1 s, so a read stays short) and says no."""
        cycle = self.burst_generate + self.burst_sleep
        into = (time.monotonic() - self._started) % cycle
        if into < self.burst_generate:
            return True
        time.sleep(min(cycle - into, self._longest_wait()))
        return False

    def _longest_wait(self) -> float:
        return 1.0 if self.read_wait is None else self.read_wait

    def _due(self) -> int:
        """Records the rate allows now; sleeps (at most 1 s) until one is due."""
        elapsed = time.monotonic() - self._started
        due = int(elapsed * self._rate) - self._emitted_since_open
        if due <= 0:
            wait = (self._emitted_since_open + 1) / self._rate - elapsed
            time.sleep(min(max(wait, 0.0), self._longest_wait()))
            due = int((time.monotonic() - self._started) * self._rate) - self._emitted_since_open
        return due

    def stop(self) -> bytes | None:
        return self._last

    # -- record construction ------------------------------------------------------
    def make_record(self, seq: int) -> Record:
        """Record ``seq`` of this partition; a pure function of (settings, partition, seq)."""
        rng = self._rng
        rng.seed((self.seed << 80) ^ (self._pindex << 64) ^ seq)
        row_id = seq * self.npartitions + self._pindex  # unique over partitions
        coll = self.collections[rng.randrange(len(self.collections))] if len(self.collections) > 1 else self.collections[0]
        op = coll.operations[rng.randrange(len(coll.operations))] if len(coll.operations) > 1 else coll.operations[0]
        meta = {META_CREATED_AT: str(EPOCH_NS + row_id * 1_000_000)}
        if coll.name is not None:
            meta[META_COLLECTION] = coll.name
        position = f"{self.partition}/{seq}".encode()
        draw = seq * 2
        if coll.table is not None:
            row = lambda k: self._tidb_row(coll.table, row_id, draw + k, rng)  # noqa: E731
            key: Any = {c.name: row_id for c in coll.table.handle_key}
        else:
            row = lambda k: self._fields_row(coll, row_id, rng)  # noqa: E731
            key = {"id": row_id} if coll.format == "structured" else str(row_id).encode()
        before = after = None
        if op is Operation.UPDATE:
            before, after = row(0), row(1)
        elif op is Operation.DELETE:
            before = row(0)
        else:
            after = row(0)
        rec = Record(position, op, meta, key, before, after)
        if coll.table is not None and self._attach is not None:
            self._attach(rec, coll.table, self._store)
        return rec

    def _tidb_row(self, table: TableSchema, row_id: int, draw: int, rng: random.Random) -> dict[str, Any]:
        variant = _variant(draw)
        if variant != RANDOM:  # extreme and NULL rows do not depend on the draw: build them once
            fixed = self._fixed_rows.get((id(table), variant))
            if fixed is None:
                fixed = {c.name: _column_value(c, variant, rng) for c in table.columns}
                self._fixed_rows[(id(table), variant)] = fixed
            row = dict(fixed)
        else:
            row = {c.name: _column_value(c, variant, rng) for c in table.columns}
        for col in table.handle_key:
            row[col.name] = row_id
        return row

    @staticmethod
    def _fields_row(coll: CollectionSpec, row_id: int, rng: random.Random) -> Any:
        if coll.format == "file":
            return coll.data
        row = {name: _field_value(ftype, rng) for name, ftype in coll.fields}
        if coll.format == "raw":
            return orjson.dumps(row, option=orjson.OPT_SORT_KEYS)
        return row
