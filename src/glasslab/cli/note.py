"""``glasslab note RUN "text"``: add an entry to a run's lab notebook."""

from __future__ import annotations

import argparse
from pathlib import Path

from glasslab.cli.options import add_lab_option
from glasslab.errors import UserError
from glasslab.layout import METRICS_DB


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "note", help="add a lab-notebook entry to a run",
        description="Add a note to a run's event timeline (the observatory shows it). RUN is a run id "
        "(its folder name under the lab) or a path to the run folder. The first line is the title.",
    )
    p.add_argument("run", metavar="RUN", help="run id or run folder")
    p.add_argument("text", help="the note; the first line is its title")
    p.add_argument("--step", type=int, default=None, help="the training step the note is about")
    add_lab_option(p)
    p.set_defaults(func=run)


def resolve_run_dir(lab: str, run: str) -> Path:
    """A run folder from a run id under ``lab`` or a path; a one-line error when there is none."""
    for candidate in (Path(lab) / run, Path(run)):
        if (candidate / METRICS_DB).is_file():
            return candidate
    raise UserError(f"run {run!r}: no run store at {Path(lab) / run} or {run}")


def run(args: argparse.Namespace) -> int:
    from glasslab import track

    if not args.text.strip():
        raise UserError("note text is empty")
    run_dir = resolve_run_dir(args.lab, args.run)
    track.note(run_dir, args.text, step=args.step)
    print(f"noted on {run_dir}")
    return 0
