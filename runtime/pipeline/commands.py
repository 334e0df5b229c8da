"""``cdcflow validate FILE... [--json]``: check pipeline files offline.

Exit 0 when every file is valid, 2 when there is any problem (all are listed, as
``file:line: message`` on stderr, or as JSON on stdout with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import sys

from .validate import validate_files

EXIT_VALID = 0
EXIT_INVALID = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "validate",
        help="check pipeline files offline (syntax, plugins, settings, conditions)",
        description="Check pipeline files without running them: YAML syntax, the Conduit 2.x schema, "
        "that every plugin exists, settings against each plugin's spec, conditions and templates. "
        "Exit 0 when valid, 2 when not; every problem is listed as file:line: message.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="pipeline file(s), Conduit version 2.2 YAML")
    p.add_argument("--json", action="store_true", help='print {"valid": bool, "problems": [{"file", "line", "message"}]}')
    p.set_defaults(func=run_validate)


def run_validate(args: argparse.Namespace) -> int:
    result = validate_files(args.files, plugins_dir=getattr(args, "plugins_dir", None))
    if args.json:
        json.dump(result.as_dict(), sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        for warning in result.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        for problem in result.problems:
            print(problem, file=sys.stderr)
        if result.valid:
            count = len(result.pipelines)
            print(f"valid: {count} pipeline{'s' if count != 1 else ''} in {len(args.files)} file{'s' if len(args.files) != 1 else ''}")
        else:
            n = len(result.problems)
            print(f"invalid: {n} problem{'s' if n != 1 else ''}", file=sys.stderr)
    return EXIT_VALID if result.valid else EXIT_INVALID
