"""The ``log`` destination: writes each record to the cdcflow log.

Conduit's settings: ``level`` (trace, debug, info, warn, error) and ``message``
(text put before each record). It is the default dead-letter queue, so it must
never fail a batch, and it never shows a secret: every line goes through the
process-wide redactor even when the log handlers do not have it installed.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

from cdcflow.params import REDACTOR, Parameter, ParamType
from cdcflow.record import Record
from cdcflow.sdk import Destination

TRACE = 5  # below DEBUG, like Conduit's trace level
logging.addLevelName(TRACE, "TRACE")
LEVELS = {"trace": TRACE, "debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
          "error": logging.ERROR}
LOGGER = "cdcflow.connectors.log"

DESTINATION_PARAMS: dict[str, Parameter] = {
    "level": Parameter(ParamType.STRING, "info", "Log level of the record lines: trace, debug, info, warn, error.",
                       inclusion=tuple(LEVELS)),
    "message": Parameter(ParamType.STRING, "", "Text logged before each record."),
}


class LogDestination(Destination):
    """Logs one line per record in Conduit's JSON form."""

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.level = LEVELS[config.get("level") or "info"]
        self.message = config.get("message") or ""
        self.logger = logging.getLogger(f"{LOGGER}.{self.id}" if self.id else LOGGER)

    def write(self, records: Sequence[Record]) -> None:
        if not self.logger.isEnabledFor(self.level):
            return None
        from cdcflow.convert.jsonform import dumps_lines

        prefix = f"{self.message} " if self.message else ""
        text = dumps_lines(records).decode("utf-8", "replace")
        for line in text.splitlines():
            self.logger.log(self.level, "%s", REDACTOR.redact(prefix + line))
        return None
