"""``error``: send every record it receives to the dead-letter queue (Conduit's processor)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from cdcflow.errors import ConfigError
from cdcflow.expr import ExpressionError, Template
from cdcflow.params import Parameter, ParamType
from cdcflow.record import Record
from cdcflow.sdk import Failed, Result, Transform

from .base import plugin_name


class Error(Transform):
    """Fails each record with ``message`` rendered for it. Use a ``condition`` to pick records."""

    name = "error"
    version = "v0.1.0"
    summary = "Returns an error for all records that get passed to the processor."
    description = (
        "Fails every record it receives with `message`, a template evaluated per record (e.g. "
        "`custom error message with data from record: {{.Metadata.foo}}`). The record is nacked and goes to "
        "the dead-letter queue. Give it a `condition` to fail only some records."
    )
    author = "cdcflow"
    parameters = {
        "message": Parameter(
            ParamType.STRING, default="error processor triggered",
            description="Error message template, e.g. bad record {{ .Key.id }}.",
        ),
    }

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        try:
            self._message = Template.compile(config["message"])
        except ExpressionError as e:
            raise ConfigError(plugin_name(self), "message", "template", str(e)) from None

    def process(self, records: Sequence[Record]) -> list[Result]:
        message = self._message
        if message.is_literal:
            return [Failed(message.constant)] * len(records)
        return [
            Failed(text if type(text) is str else f"error processor: message template failed: {text}")
            for text in message.render_many(list(records))
        ]
