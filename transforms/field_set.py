"""``field.set``: set one field of each record to a template's text (Conduit's processor)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from cdcflow.errors import ConfigError
from cdcflow.expr import ExpressionError, Template
from cdcflow.params import Parameter, ParamType
from cdcflow.record import Record
from cdcflow.sdk import Result, Transform

from .base import compile_ref, failed, plugin_name


class FieldSet(Transform):
    """Sets ``field`` to ``value`` rendered for each record; missing fields are created."""

    name = "field.set"
    version = "v0.1.0"
    summary = "Set the value of a certain field."
    description = (
        "Sets `field` (a field reference such as .Payload.After.name or .Metadata[\"k\"]) to `value`, "
        "a Go template evaluated per record, as in Conduit (e.g. {{ .Payload.After.name | upper }}; "
        "cdcflow's older {{ expression }} syntax also works, see docs/expressions.md). "
        "The result is text, as in Conduit. Setting .Position is not allowed."
    )
    author = "cdcflow"
    parameters = {
        "field": Parameter(
            ParamType.STRING, required=True, exclusion=(".Position",),
            description="Field to set, e.g. .Payload.After.name, .Metadata[\"opencdc.collection\"], .Operation.",
        ),
        "value": Parameter(
            ParamType.STRING, required=True,
            description="Template evaluated per record, e.g. {{ .Payload.After.name | upper }}.",
        ),
    }

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        plugin = plugin_name(self)
        self._field = compile_ref(self, "field", config["field"])
        if self._field.root == "Position":
            raise ConfigError(plugin, "field", "exclusion", "it is not allowed to set .Position")
        try:
            self._value = Template.compile(config["value"])
        except ExpressionError as e:
            raise ConfigError(plugin, "value", "template", str(e)) from None

    def process(self, records: Sequence[Record]) -> list[Result]:
        out: list[Result] = []
        append = out.append
        setter = self._field.set
        template = self._value
        if template.is_literal:
            constant = template.constant
            for r in records:
                try:
                    setter(r, constant)
                    append(r)
                except Exception as e:  # noqa: BLE001 - one bad record must not fail the batch
                    append(failed(e))
            return out
        records = list(records)
        for r, text in zip(records, template.render_many(records)):  # one call for the batch
            if type(text) is not str:
                append(failed(text))
                continue
            try:
                setter(r, text)
                append(r)
            except Exception as e:  # noqa: BLE001
                append(failed(e))
        return out
