"""``custom.javascript``: run a user's ``process(record)`` JavaScript function per record
(Conduit's processor), on V8 through ``mini-racer`` (the ``javascript`` extra).

Conduit runs the script on goja; cdcflow uses V8 because it is the engine on the package
index with wheels for every platform cdcflow supports that can also be stopped: each call
has a time limit and the context a hard heap limit. The record crosses into JavaScript as
JSON with Conduit's shape (``Position``, ``Operation``, ``Metadata``, ``Key``,
``Payload.Before/After``; raw data as an array of byte values) and comes back the same way.
A record whose call throws, runs out of time or out of memory fails alone; after a time or
memory stop the context is built afresh (the script may have left half-done global state),
and only if that rebuild fails does the whole batch fail.
"""

from __future__ import annotations

import atexit
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import orjson

from cdcflow.errors import ConfigError, InfrastructureError
from cdcflow.extras import require
from cdcflow.params import Parameter, ParamType
from cdcflow.record import Operation, Record
from cdcflow.sdk import FILTERED, Failed, Result, Transform

from .base import plugin_name

log = logging.getLogger(__name__)

#: marks raw data in the JSON that crosses the boundary: {RAW: "<bytes as latin-1 text>"}
RAW = "\u0000raw"

#: helpers Conduit's scripts use (Record, RawData, StructuredData, logger) and the call wrapper
_PRELUDE = r"""
var __cdcflow_logs = [];
function __cdcflow_bytes(s) {
  var a = new Array(s.length);
  for (var i = 0; i < s.length; i++) a[i] = s.charCodeAt(i) & 255;
  Object.defineProperty(a, "__raw", {value: true});
  return a;
}
function RawData(s) { return __cdcflow_bytes(s === undefined ? "" : unescape(encodeURIComponent(String(s)))); }
function StructuredData() { return {}; }
function Record() { return {Position: null, Operation: "", Metadata: {}, Key: null, Payload: {Before: null, After: null}}; }
var logger = (function () {
  function event(level) {
    var fields = {};
    var e = {
      Str: function (k, v) { fields[k] = String(v); return e; },
      Int: function (k, v) { fields[k] = v; return e; },
      Bool: function (k, v) { fields[k] = v; return e; },
      Float64: function (k, v) { fields[k] = v; return e; },
      Any: function (k, v) { fields[k] = v; return e; },
      Interface: function (k, v) { fields[k] = v; return e; },
      Err: function (err) { fields.error = String(err); return e; },
      Msg: function (m) { __cdcflow_logs.push([level, String(m), fields]); },
      Msgf: function (fmt) {
        var args = arguments, i = 1;
        var m = String(fmt).replace(/%[-+# 0-9.]*[vsdfqtxg%]/g, function (t) {
          return t === "%%" ? "%" : (i < args.length ? String(args[i++]) : t);
        });
        __cdcflow_logs.push([level, m, fields]);
      },
      Send: function () { __cdcflow_logs.push([level, "", fields]); }
    };
    return e;
  }
  return {
    Trace: function () { return event("trace"); }, Debug: function () { return event("debug"); },
    Info: function () { return event("info"); }, Warn: function () { return event("warn"); },
    Error: function () { return event("error"); }
  };
})();
function __cdcflow_in(v) {
  if (v !== null && typeof v === "object" && Object.prototype.hasOwnProperty.call(v, "\u0000raw"))
    return __cdcflow_bytes(v["\u0000raw"]);
  return v;
}
function __cdcflow_out(v, what) {
  if (v === null || v === undefined) return null;
  if (typeof v === "string") return {"\u0000raw": unescape(encodeURIComponent(v))};
  if (Array.isArray(v)) {
    if (!v.__raw) throw new Error(what + ": an array is neither RawData nor StructuredData");
    var s = "";
    for (var i = 0; i < v.length; i += 8192) s += String.fromCharCode.apply(null, v.slice(i, i + 8192));
    return {"\u0000raw": s};
  }
  if (typeof v !== "object") throw new Error(what + ": expected RawData or StructuredData, got " + typeof v);
  return v;
}
function __cdcflow_run(rec) {
  rec.Position = __cdcflow_in(rec.Position);
  rec.Key = __cdcflow_in(rec.Key);
  rec.Payload.Before = __cdcflow_in(rec.Payload.Before);
  rec.Payload.After = __cdcflow_in(rec.Payload.After);
  var logs, out = null, error = null;
  try {
    var r = process(rec);
    if (r !== null && r !== undefined) {
      if (typeof r !== "object") throw new Error("process() must return a record or null, got " + typeof r);
      var md = {}, m = r.Metadata || {};
      for (var k in m) if (Object.prototype.hasOwnProperty.call(m, k)) md[k] = String(m[k]);
      var p = r.Payload || {};
      out = {Position: __cdcflow_out(r.Position, "Position"), Operation: String(r.Operation || ""), Metadata: md,
             Key: __cdcflow_out(r.Key, "Key"), Before: __cdcflow_out(p.Before, "Payload.Before"),
             After: __cdcflow_out(p.After, "Payload.After")};
    }
  } catch (e) {
    error = (e && e.stack) ? String(e.stack) : String(e);
  }
  logs = __cdcflow_logs; __cdcflow_logs = [];
  return JSON.stringify({record: out, error: error, logs: logs});
}
"""

_LEVELS = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
           "error": logging.ERROR}


def _value_to_json(v: Any) -> Any:
    """orjson's fallback for structured values JSON has no type for (Decimal, bytes, sets)."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return list(bytes(v))  # as Go hands []byte to goja: an array of byte values
    if isinstance(v, (set, frozenset, tuple)):
        return list(v)
    return str(v)  # Decimal and other exact types: their text, never a rounded float


def _data_in(d: Any) -> Any:
    return {RAW: bytes(d).decode("latin-1")} if isinstance(d, (bytes, bytearray)) else d


def _data_out(d: Any) -> Any:
    if isinstance(d, dict) and RAW in d and len(d) == 1:
        return d[RAW].encode("latin-1")
    return d


def _close(ctx: Any) -> None:
    atexit.unregister(ctx.close)
    ctx.close()


class CustomJavascript(Transform):
    name = "custom.javascript"
    version = "v0.1.0"
    summary = "Run custom JavaScript code."
    description = (
        "Runs the function `process(record)` of a JavaScript script (`script`, or the file `script.path`) for "
        "every record. The record has Conduit's fields: Position, Operation, Metadata, Key and Payload.Before/"
        "After; raw data is an array of byte values, structured data an object. Return the record (changed or a "
        "new one from `new Record()`), or null to filter it out. Helpers: Record(), RawData(text), "
        "StructuredData() and logger (logger.Info().Msg(\"...\")). Each call is limited by `timeout`, the "
        "engine's heap by `memory.max`; a record that throws or passes a limit fails alone."
    )
    author = "cdcflow"
    parameters = {
        "script": Parameter(
            description="JavaScript code with a function process(record) returning a record or null.",
        ),
        "script.path": Parameter(description="Path of a .js file with the code (instead of script)."),
        "timeout": Parameter(
            ParamType.DURATION, default="5s", greater_than=0,
            description="cdcflow: time limit of one process() call; a record that passes it fails.",
        ),
        "memory.max": Parameter(
            ParamType.INT, default="268435456", greater_than=0,
            description="cdcflow: hard limit of the JavaScript heap in bytes; a record that passes it fails.",
        ),
    }

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        plugin = plugin_name(self)
        script, path = config.get("script") or "", config.get("script.path") or ""
        if script and path:
            raise ConfigError(plugin, "script", "conflict", "only one of: [script, script.path] should be provided")
        if path:
            try:
                script = Path(path).read_text(encoding="utf-8")
            except OSError as e:
                raise ConfigError(plugin, "script.path", "file", f"error reading script from path {path}: {e}") from None
        if not script:
            raise ConfigError(plugin, "script", "required", "one of: [script, script.path] needs to be provided")
        self._script = script
        self._timeout = float(config["timeout"])
        self._memory = int(config["memory.max"])
        self._racer = require("py_mini_racer", plugin)

    def open(self) -> None:
        self._ctx = self._new_context()

    def _new_context(self) -> Any:
        """A fresh V8 context with the helpers and the user's script loaded."""
        mr = self._racer.MiniRacer()
        # closed before interpreter shutdown at the latest: a context left to the finalizers
        # at exit can hang the process (seen with mini-racer 0.14)
        atexit.register(mr.close)
        mr.set_hard_memory_limit(self._memory)
        mr.eval(_PRELUDE)
        try:
            mr.eval(self._script, timeout_sec=self._timeout)
        except self._racer.JSEvalException as e:
            _close(mr)
            raise ConfigError(plugin_name(self), "script", "javascript", f"failed to run script: {e}") from None
        if mr.eval("typeof process") != "function":
            _close(mr)
            raise ConfigError(plugin_name(self), "script", "javascript",
                              'failed to get entrypoint function "process"')
        return mr

    def teardown(self) -> None:
        ctx = getattr(self, "_ctx", None)
        if ctx is not None:
            _close(ctx)
            self._ctx = None

    def _call(self, r: Record) -> Result:
        doc = {
            "Position": _data_in(r.position), "Operation": r.operation.text, "Metadata": r.metadata,
            "Key": _data_in(r.key), "Payload": {"Before": _data_in(r.before), "After": _data_in(r.after)},
        }
        arg = orjson.dumps(doc, default=_value_to_json, option=orjson.OPT_NON_STR_KEYS).decode("utf-8")
        racer = self._racer
        try:
            text = self._ctx.eval(f"__cdcflow_run({arg})", timeout_sec=self._timeout)
        except (racer.JSTimeoutException, racer.JSOOMException) as e:
            self._rebuild()
            limit = f"time limit {self._timeout:g}s" if isinstance(e, racer.JSTimeoutException) \
                else f"memory limit {self._memory} bytes"
            return Failed(f"javascript process() stopped: {limit} reached")
        result = orjson.loads(text)
        for level, message, fields in result["logs"]:
            log.log(_LEVELS.get(level, logging.INFO), "%s: %s%s", plugin_name(self), message,
                    f" {fields}" if fields else "")
        if result["error"] is not None:
            return Failed(f"javascript error: {result['error']}")
        out = result["record"]
        if out is None:
            return FILTERED
        op = out["Operation"]
        r.operation = Operation.UNSPECIFIED if op in ("", "Operation(0)") else Operation.from_text(op)
        position = _data_out(out["Position"])
        r.position = position if isinstance(position, bytes) else b""
        r.metadata = out["Metadata"]
        r.key, r.before, r.after = _data_out(out["Key"]), _data_out(out["Before"]), _data_out(out["After"])
        return r

    def _rebuild(self) -> None:
        """A stopped call may leave the context half-way; start a clean one or fail the batch."""
        try:
            self._ctx.eval("0")  # lets mini-racer settle the stopped call before close (else it logs an error)
            _close(self._ctx)
        except Exception:  # noqa: BLE001 - the old context is being thrown away
            pass
        try:
            self._ctx = self._new_context()
        except Exception as e:  # noqa: BLE001
            raise InfrastructureError(f"{plugin_name(self)}: cannot rebuild the JavaScript engine: {e}",
                                      service="javascript") from e

    def process(self, records: Sequence[Record]) -> list[Result]:
        out: list[Result] = []
        for r in records:
            try:
                out.append(self._call(r))
            except InfrastructureError:
                raise
            except Exception as e:  # noqa: BLE001 - one bad record must not fail the batch
                out.append(Failed(f"{type(e).__name__}: {e}"))
        return out
