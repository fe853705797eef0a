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
    add_lab_option(p, urls=True)
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (what runs, what is cached) and stop")
    add_executor_options(p)
    p.add_argument("--jobs", type=int, default=1,
                   help="how many steps may run at once, on either backend (default 1)")
    p.add_argument("--force", nargs="+", action="extend", default=[], metavar="NAME",
                   help="rerun these steps (and what depends on them) even if they succeeded")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the experiment in the lab ``--lab`` names: a folder, or on an object-store lab this node's working
    copy of it (pulled first; each step's folder goes to the root when it ends, a run's at every checkpoint)."""
    from glasslab.store.mirror import lab_workspace

    with lab_workspace(args.lab) as lab:
        args.lab = str(lab)
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    import signal

    from glasslab.lab import Executor, load_experiment
    from glasslab.lab.experiment import experiment_card, experiment_name

    steps = load_experiment(args.experiment)
    name = experiment_name(args.experiment)
    executor = Executor(args.lab, backend=args.backend, jobs=args.jobs, address=args.address, retries=args.retries,
                        re_register=args.re_register, force_registration=args.force_registration, narrate=True)
    report = executor.run(steps, force=args.force, dry_run=args.dry_run, experiment=name,
                          card=experiment_card(args.experiment))
    if args.dry_run:
        return 0
    print_verdict(args.lab, name)
    if report.interrupted and report.interrupted in signal.Signals.__members__:
        return 128 + signal.Signals[report.interrupted].value
    return 0 if report.ok else 1


def print_verdict(lab: str, name: str) -> None:
    """The experiment card's verdict line, last on the terminal (``glasslab card NAME`` has the rest)."""
    import sys

    from rich.console import Console

    from glasslab.lab.card_results import card_results
    from glasslab.observatory.card_render import VERDICT_STYLE

    results = card_results(lab, name)
    if not results["has_card"]:
        return
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    console.print(f"[{VERDICT_STYLE[results['verdict']]}]experiment {name}: {results['verdict_text']}[/]  "
                  f"(glasslab card {name} --lab {lab})")
