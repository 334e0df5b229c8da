"""Parameter specifications and validation of plugin settings.

Settings arrive as strings (Conduit passes ``map<string,string>``). A plugin declares
a ``Parameter`` per setting; ``validate`` checks every rule before the plugin starts
and returns typed values. A parameter name ending in ``.*`` accepts any setting with
that prefix (pass-through client properties such as ``kafka.*``).
"""

from __future__ import annotations

import difflib
import enum
import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import ConfigError
from .masking import MASK, mask_setting, mask_settings, mask_text, secrets_in



class ParamType(enum.IntEnum):
    """Same numbers as ``config.v1.Parameter.Type``."""

    STRING = 1
    INT = 2
    FLOAT = 3
    BOOL = 4
    FILE = 5
    DURATION = 6


@dataclass(frozen=True)
class Parameter:
    """One setting: its type, default and rules (Conduit's validations plus ``secret``)."""

    type: ParamType = ParamType.STRING
    default: str | None = None
    description: str = ""
    required: bool = False
    greater_than: float | None = None
    less_than: float | None = None
    inclusion: tuple[str, ...] = ()
    exclusion: tuple[str, ...] = ()
    regex: str | None = None
    secret: bool = False


_BOOL_TRUE = {"true", "1", "t", "yes", "y", "on"}
_BOOL_FALSE = {"false", "0", "f", "no", "n", "off"}
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Parse a Go-style duration (``1m30s``, ``250ms``, ``-2h``) into seconds."""
    s = text.strip()
    sign = -1.0 if s.startswith("-") else 1.0
    s = s.lstrip("+-")
    if s == "0":
        return 0.0
    pos, total = 0, 0.0
    for m in _DURATION_PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(f"invalid duration {text!r} (expected e.g. 500ms, 5s, 1m30s)")
    return sign * total


def parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in _BOOL_TRUE:
        return True
    if low in _BOOL_FALSE:
        return False
    raise ValueError(f"invalid bool {text!r} (expected true or false)")


def option_bool(plugin: str, name: str, value: Any) -> bool:
    """A TiCDC boolean option (sink URI query or setting): true/1 or false/0/empty.

    Options reach codecs both as typed values and as URI text, so bools pass through.
    """
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1"):
        return True
    if text in ("false", "0", ""):
        return False
    raise ConfigError(plugin, name, "type", f"value {value!r} is not a valid bool (expected true or false)")


def did_you_mean(name: str, known) -> str:
    """`` (did you mean 'x'?)`` for a near miss among ``known`` names (difflib), else ``''``:
    the one hint every unknown-name message (settings, URI query parameters) gives."""
    close = difflib.get_close_matches(name, [k for k in known if not k.endswith(".*")], n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _convert(ptype: ParamType, raw: str) -> Any:
    if ptype is ParamType.INT:
        return int(raw.strip())
    if ptype is ParamType.FLOAT:
        return float(raw.strip())
    if ptype is ParamType.BOOL:
        return parse_bool(raw)
    if ptype is ParamType.DURATION:
        return parse_duration(raw)
    return raw


def _numeric(ptype: ParamType, value: Any) -> float | None:
    """The number greater-than/less-than compare (durations in seconds)."""
    if ptype in (ParamType.INT, ParamType.FLOAT, ParamType.DURATION):
        return float(value)
    return None


def _match_spec(spec: Mapping[str, Parameter], key: str) -> tuple[str, Parameter] | None:
    p = spec.get(key)
    if p is not None:
        return key, p
    for name, p in spec.items():
        if name.endswith(".*") and key.startswith(name[:-1]):
            return name, p
    return None


def validate(plugin: str, spec: Mapping[str, Parameter], settings: Mapping[str, str]) -> dict[str, Any]:
    """Check ``settings`` against ``spec``; return typed values with defaults filled in.

    Raises ConfigError naming the plugin, the parameter and the rule of the first
    problem; ``problems`` lists all of them.
    """
    errors = problems(plugin, spec, settings)
    if errors:
        raise errors[0]
    out: dict[str, Any] = {}
    for name, p in spec.items():
        if name.endswith(".*"):
            continue
        raw = settings.get(name)
        if raw is None or raw == "":
            raw = p.default
        if raw is None:
            out[name] = None
            continue
        out[name] = _convert(p.type, str(raw))
    for key, raw in settings.items():
        m = _match_spec(spec, key)
        if m and m[0].endswith(".*"):
            out[key] = raw
    return out


def problems(plugin: str, spec: Mapping[str, Parameter], settings: Mapping[str, str]) -> list[ConfigError]:
    """Every rule ``settings`` break, in a stable order (for ``cdcflow validate``)."""
    errs: list[ConfigError] = []
    for key in sorted(settings):
        if _match_spec(spec, key) is None:
            # Conduit's sdk.* middleware settings every connector takes are listed only for an sdk.* key
            names = [n for n in sorted(spec) if key.startswith("sdk.") or not n.startswith("sdk.")]
            known = ", ".join(names) or "none"
            if len(names) < len(spec):
                known += " and Conduit's sdk.*"
            errs.append(ConfigError(plugin, key, "unknown",
                                    f"unrecognized parameter{did_you_mean(key, spec)} (known: {known})"))
    for name in sorted(spec):
        p = spec[name]
        if name.endswith(".*"):
            continue
        raw = settings.get(name)
        if raw is None or raw == "":
            raw = p.default
        if raw is None or raw == "":
            if p.required:
                errs.append(ConfigError(plugin, name, "required", "value is required"))
            continue
        raw = str(raw)
        shown = MASK if p.secret else repr(mask_setting(name, raw))
        try:
            value = _convert(p.type, raw)
        except ValueError as e:
            detail = f": {e}" if not p.secret else ""
            errs.append(ConfigError(plugin, name, "type", f"value {shown} is not a valid {p.type.name.lower()}{detail}"))
            continue
        num = _numeric(p.type, value)
        if p.greater_than is not None and num is not None and not num > p.greater_than:
            errs.append(ConfigError(plugin, name, "greater-than", f"value {shown} must be greater than {p.greater_than:g}"))
        if p.less_than is not None and num is not None and not num < p.less_than:
            errs.append(ConfigError(plugin, name, "less-than", f"value {shown} must be less than {p.less_than:g}"))
        if p.inclusion and raw not in p.inclusion:
            errs.append(ConfigError(plugin, name, "inclusion", f"value {shown} must be one of {', '.join(p.inclusion)}"))
        if p.exclusion and raw in p.exclusion:
            errs.append(ConfigError(plugin, name, "exclusion", f"value {shown} must not be one of {', '.join(p.exclusion)}"))
        if p.regex is not None and re.fullmatch(p.regex, raw) is None:
            errs.append(ConfigError(plugin, name, "regex", f"value {shown} must match {p.regex!r}"))
        if p.type is ParamType.FILE and raw and not Path(raw).exists():
            errs.append(ConfigError(plugin, name, "file", f"file {raw!r} does not exist"))
    return errs


def masked(spec: Mapping[str, Parameter], settings: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``settings`` fit for output: the spec's secrets and every secret-named
    setting or URI part replaced by ``***`` (cdcflow.masking)."""
    return mask_settings(settings, (k for k in settings if _is_secret(spec, k)))


def _is_secret(spec: Mapping[str, Parameter], key: str) -> bool:
    m = _match_spec(spec, key)
    return m is not None and m[1].secret


def secret_values(spec: Mapping[str, Parameter], settings: Mapping[str, Any]) -> list[str]:
    """Every secret text in ``settings``: spec secrets, secret-named settings, secrets inside URIs."""
    vals = []
    for k, v in settings.items():
        if v in (None, ""):
            continue
        vals.extend([str(v)] if _is_secret(spec, k) else secrets_in(k, v))
    return vals


#: a secret at least this long is masked wherever it appears; a shorter one only where it is not
#: part of a longer word (a one-letter password must not mask that letter in every log line)
SUBSTRING_SECRET_LENGTH = 8


def _secret_pattern(value: str) -> str:
    text = re.escape(value)
    if len(value) >= SUBSTRING_SECRET_LENGTH:
        return text
    return rf"(?<![0-9A-Za-z]){text}(?![0-9A-Za-z])"


class SecretRedactor(logging.Filter):
    """Replaces every registered secret value, and the secret parts of every URI, in log
    messages (and the text of a logged exception) with ``***``.

    Installed on the root handlers by ``install_redactor``; plugins register the
    secrets of their settings when configured, so no log line shows them.
    """

    def __init__(self) -> None:
        super().__init__()
        self._secrets: set[str] = set()
        self._lock = threading.Lock()
        self._pattern: re.Pattern[str] | None = None

    def add(self, *values: str) -> None:
        with self._lock:
            self._secrets.update(v for v in values if v)
            if self._secrets:
                alts = sorted(self._secrets, key=len, reverse=True)
                self._pattern = re.compile("|".join(_secret_pattern(v) for v in alts))

    def redact(self, text: str) -> str:
        pat = self._pattern
        return mask_text(pat.sub(MASK, text) if pat is not None else text)

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        red = self.redact(msg)
        if red != msg:
            record.msg, record.args = red, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True


REDACTOR = SecretRedactor()


def install_redactor(logger: logging.Logger | None = None) -> None:
    """Attach the global redactor to every handler of ``logger`` (root by default), and to the
    handler Python falls back to when none is configured (Spark's Python workers)."""
    lg = logger or logging.getLogger()
    for h in [*lg.handlers, *([logging.lastResort] if logging.lastResort is not None else [])]:
        if REDACTOR not in h.filters:
            h.addFilter(REDACTOR)
