"""Plugin specifications on the wire: ``config.v1.Parameter`` <-> ``cdcflow.params.Parameter``.

Both directions live here so the host (reading a plugin's spec) and the server
(announcing one) agree on every rule. ``config.v1`` has no secret flag, so
``Parameter.secret`` does not travel; a standalone plugin's secrets are not
known to the host (documented in docs/standalone-plugins.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..params import Parameter, ParamType
from ..pb.config.v1 import parameter_pb2

CONNECTOR = "connector"
TRANSFORM = "transform"

_V = parameter_pb2.Validation


@dataclass(frozen=True)
class PluginSpec:
    """What a standalone plugin says about itself (``Specify``), plus what the host probed.

    ``kind`` is ``connector`` or ``transform``; ``has_source``/``has_destination``
    are probed (Conduit's Specification does not say which sides exist);
    ``params`` holds a transform's parameters.
    """

    name: str
    version: str
    summary: str = ""
    description: str = ""
    author: str = ""
    kind: str = CONNECTOR
    source_params: Mapping[str, Parameter] = field(default_factory=dict)
    destination_params: Mapping[str, Parameter] = field(default_factory=dict)
    params: Mapping[str, Parameter] = field(default_factory=dict)
    has_source: bool = False
    has_destination: bool = False


def _number_text(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def parameter_to_proto(p: Parameter) -> parameter_pb2.Parameter:
    validations = []
    if p.required:
        validations.append(_V(type=_V.TYPE_REQUIRED))
    if p.greater_than is not None:
        validations.append(_V(type=_V.TYPE_GREATER_THAN, value=_number_text(p.greater_than)))
    if p.less_than is not None:
        validations.append(_V(type=_V.TYPE_LESS_THAN, value=_number_text(p.less_than)))
    if p.inclusion:
        validations.append(_V(type=_V.TYPE_INCLUSION, value=",".join(p.inclusion)))
    if p.exclusion:
        validations.append(_V(type=_V.TYPE_EXCLUSION, value=",".join(p.exclusion)))
    if p.regex is not None:
        validations.append(_V(type=_V.TYPE_REGEX, value=p.regex))
    return parameter_pb2.Parameter(
        default=p.default or "", description=p.description, type=int(p.type), validations=validations
    )


def parameter_from_proto(pb: parameter_pb2.Parameter) -> Parameter:
    kw: dict[str, Any] = {}
    for v in pb.validations:
        if v.type == _V.TYPE_REQUIRED:
            kw["required"] = True
        elif v.type == _V.TYPE_GREATER_THAN:
            kw["greater_than"] = float(v.value)
        elif v.type == _V.TYPE_LESS_THAN:
            kw["less_than"] = float(v.value)
        elif v.type == _V.TYPE_INCLUSION:
            # Conduit's SDKs send one validation per allowed value; merge them
            kw["inclusion"] = kw.get("inclusion", ()) + tuple(s.strip() for s in v.value.split(","))
        elif v.type == _V.TYPE_EXCLUSION:
            kw["exclusion"] = kw.get("exclusion", ()) + tuple(s.strip() for s in v.value.split(","))
        elif v.type == _V.TYPE_REGEX:
            kw["regex"] = v.value
    ptype = ParamType(pb.type) if pb.type in ParamType._value2member_map_ else ParamType.STRING
    return Parameter(type=ptype, default=pb.default or None, description=pb.description, **kw)


def params_to_proto(spec: Mapping[str, Parameter]) -> dict[str, parameter_pb2.Parameter]:
    return {name: parameter_to_proto(p) for name, p in spec.items()}


def params_from_proto(pbs: Mapping[str, parameter_pb2.Parameter]) -> dict[str, Parameter]:
    return {name: parameter_from_proto(pb) for name, pb in sorted(pbs.items())}


def settings_to_wire(config: Mapping[str, Any], spec: Mapping[str, Parameter]) -> dict[str, str]:
    """Settings as the ``map<string,string>`` Conduit sends.

    The runtime hands plugins typed values (``params.validate``); a standalone
    plugin validates strings itself, so typed values are written back in the
    form ``params.validate`` parses (durations as Go durations). Unset values
    (None) are left out so the plugin applies its own defaults.
    """
    out: dict[str, str] = {}
    for key, value in config.items():
        if value is None:
            continue
        p = spec.get(key)
        if isinstance(value, str):
            out[key] = value
        elif isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif p is not None and p.type is ParamType.DURATION:
            out[key] = f"{round(float(value) * 1e9)}ns"  # exact, and Go parses it
        elif isinstance(value, float):
            out[key] = _number_text(value)
        else:
            out[key] = str(value)
    return out
