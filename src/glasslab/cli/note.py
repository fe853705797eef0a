"""``glasslab note RUN "text"``: add an entry to a run's lab notebook; ``--experiment NAME``: a
conclusion on an experiment's card."""

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
        "(its folder name under the lab) or a path to the run folder. The first line is the title. "
        "With --experiment NAME (and no RUN) the text is a conclusion on that experiment's card.",
    )
    p.add_argument("run_and_text", nargs="+", metavar="[RUN] TEXT",
                   help="run id or run folder, then the note (the first line is its title)")
    p.add_argument("--experiment", default=None, metavar="NAME",
                   help="add the text as a conclusion to experiment NAME's card instead of a run's timeline")
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

    if args.experiment is not None:
        if len(args.run_and_text) != 1:
            raise UserError(f"note --experiment {args.experiment}: expected only the text, got "
                            f"{len(args.run_and_text)} arguments")
        from glasslab.lab.card import add_conclusion

        add_conclusion(args.lab, args.experiment, args.run_and_text[0])
        print(f"conclusion added to experiment {args.experiment} (glasslab card {args.experiment})")
        return 0
    if len(args.run_and_text) != 2:
        raise UserError(f"note: expected RUN and TEXT, got {len(args.run_and_text)} argument(s)")
    run_id, text = args.run_and_text
    if not text.strip():
        raise UserError("note text is empty")
    run_dir = resolve_run_dir(args.lab, run_id)
    track.note(run_dir, text, step=args.step)
    print(f"noted on {run_dir}")
    return 0
