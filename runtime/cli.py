"""The ``cdcflow`` command.

Subcommands live in their own modules; each exposes ``register(subparsers)``
which adds its parsers and sets ``func`` (``func(args) -> int``, the exit code)
with ``set_defaults``. A module listed in ``COMMAND_MODULES`` that is not
installed yet is skipped; any other import error is a real error.

Exit codes: 0 success, 2 invalid configuration or usage (a ``ConfigError``, an
unknown or ambiguous plugin), 1 any other failure, 130 interrupted. Expected
errors (``CdcflowError``) print one message on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import logging
import sys
from typing import Sequence

from .errors import CdcflowError, ConfigError, DuplicatePluginError, PluginNotFoundError
from .params import REDACTOR, install_redactor

COMMAND_MODULES = (
    "cdcflow.plugins_cli",
    "cdcflow.pipeline.commands",
    "cdcflow.engine.commands",
    "cdcflow.schemaregistry.commands",
    "cdcflow.dev.commands",
    "cdcflow.dev.quickstart",
)

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130
#: errors that mean "fix your configuration or command line"
CONFIG_ERRORS: tuple[type[BaseException], ...] = (ConfigError, PluginNotFoundError, DuplicatePluginError)

LOG_LEVELS = ("trace", "debug", "info", "warn", "error")
_LEVEL_NUMBERS = {"trace": 5, "debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
                  "error": logging.ERROR}


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: time (RFC 3339, UTC), level, logger, message (+ error)."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info or record.exc_text:  # the redactor leaves a masked exc_text
            out["error"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def setup_logging(level: str = "info", fmt: str = "text", stream=None) -> None:
    """Configure the root logger on stderr and install the secret redactor on its handlers."""
    logging.addLevelName(5, "TRACE")
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonLogFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(_LEVEL_NUMBERS[level])
    install_redactor(root)


def _load_command_modules() -> list:
    modules = []
    for name in COMMAND_MODULES:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as e:
            if e.name != name:  # the module exists but something it imports does not
                raise
    return modules


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdcflow",
        description="Move TiCDC change data to other systems through Conduit-compatible plugins.",
    )
    parser.add_argument("--plugins-dir", default=None, metavar="DIR",
                        help="directory of standalone plugin executables (default: $CDCFLOW_PLUGINS_DIR)")
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="default: info")
    parser.add_argument("--log-format", default="text", choices=("text", "json"),
                        help="json: one JSON object per line with time, level, logger, message")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _load_command_modules():
        module.register(sub)
    return parser


def error_exit_code(e: BaseException) -> int:
    code = getattr(e, "exit_code", None)
    if isinstance(code, int):
        return code
    return EXIT_CONFIG if isinstance(e, CONFIG_ERRORS) else EXIT_FAILURE


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level, args.log_format)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_CONFIG
    try:
        return int(func(args) or 0)
    except CdcflowError as e:
        print(f"cdcflow: error: {REDACTOR.redact(str(e))}", file=sys.stderr)
        return error_exit_code(e)
    except KeyboardInterrupt:
        print("cdcflow: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `cdcflow plugins list | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
