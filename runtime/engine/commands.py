"""``cdcflow run FILE...``: the CLI face of the engine.

Exit codes: 0 success (also after SIGINT/SIGTERM, which drain the in-flight
micro-batch and checkpoint), 1 a pipeline failed or stopped, 2 the files or
options are invalid (every problem is printed).
"""

from __future__ import annotations

import argparse
import signal
import sys

from .runner import EXIT_INVALID, run_files


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "run",
        help="run pipelines on Spark",
        description="Run the pipelines of the given files on Spark (embedded local[*] by default).",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="pipeline files (Conduit version 2.2 YAML)")
    p.add_argument("--pipeline", action="append", dest="pipelines", metavar="ID",
                   help="run only this pipeline (repeatable)")
    p.add_argument("--master", help="Spark master URL (local[N], spark://host:port); overrides engine.master")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark configuration (repeatable)")
    p.add_argument("--until-idle", action="store_true",
                   help="stop once the sources have nothing more to give now (bounded: when they end)")
    p.add_argument("--metrics-port", type=int, metavar="N", help="serve Prometheus metrics on this port")
    p.add_argument("--state-dir", metavar="DIR", help="positions and schemas: a directory, or an object-store URI "
                   "(s3://, gs://, azure://) for a cluster (default: .cdcflow/ beside the first file)")
    p.set_defaults(func=_run_command)


def _run_command(args: argparse.Namespace) -> int:
    drivers = []
    stopping: list[int] = []  # a signal that came before the driver existed still counts
    previous: dict[int, object] = {}

    def on_driver(driver) -> None:
        drivers.append(driver)
        if stopping:
            driver.request_stop()

    def on_signal(signum, _frame):
        # first signal: drain and checkpoint; a second one interrupts for real
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        print(f"\ncdcflow: {signal.Signals(signum).name}: finishing the current micro-batch, then stopping "
              "(again to abort)", file=sys.stderr)
        stopping.append(signum)
        for d in drivers:
            d.request_stop()

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, on_signal)
    try:
        outcome = run_files(
            args.files,
            pipeline_ids=args.pipelines,
            master=args.master,
            conf=args.conf,
            until_idle=args.until_idle,
            metrics_port=args.metrics_port,
            state_dir=args.state_dir,
            plugins_dir=getattr(args, "plugins_dir", None),
            progress=True,
            on_driver=on_driver,
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if outcome.exit_code == EXIT_INVALID:
        for problem in outcome.problems:
            print(problem, file=sys.stderr)
    elif outcome.failures:
        print(f"cdcflow: run failed: {outcome.failures[0]}", file=sys.stderr)
    return outcome.exit_code
