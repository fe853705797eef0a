"""``glasslab run FILE.py|NAME``: run an experiment's DAG of steps (or show its plan)."""

from __future__ import annotations

import argparse

from glasslab.cli.options import add_executor_options, add_lab_option


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run", help="run an experiment (a DAG of steps) in the lab",
        description="Run the steps of an experiment: a Python file defining steps() -> list[Step], or "
        "the name of a built-in experiment. Succeeded steps are reused; failed ones rerun and resume. "
        "Each step writes only its own folder <lab>/<name>-<hash8>.",
    )
    p.add_argument("experiment", metavar="FILE.py|NAME", help="experiment file or built-in experiment name")
    add_lab_option(p)
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (what runs, what is cached) and stop")
    add_executor_options(p)
    p.add_argument("--jobs", type=int, default=1,
                   help="how many steps may run at once, on either backend (default 1)")
    p.add_argument("--force", nargs="+", action="extend", default=[], metavar="NAME",
                   help="rerun these steps (and what depends on them) even if they succeeded")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import signal

    from glasslab.lab import Executor, load_experiment

    steps = load_experiment(args.experiment)
    executor = Executor(args.lab, backend=args.backend, jobs=args.jobs, address=args.address, retries=args.retries,
                        re_register=args.re_register)
    report = executor.run(steps, force=args.force, dry_run=args.dry_run)
    if args.dry_run:
        return 0
    if report.interrupted and report.interrupted in signal.Signals.__members__:
        return 128 + signal.Signals[report.interrupted].value
    return 0 if report.ok else 1
