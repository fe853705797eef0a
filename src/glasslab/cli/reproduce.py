"""``glasslab reproduce SOURCE [--until STEP] [--lab DIR]``: replay a published pretraining run and check it.

    glasslab reproduce site/run-demo-d16-s0-1a2b3c4d-5e6f7a8b.html --until 40
    glasslab reproduce https://example.org/lab/run-my-run-1a2b3c4d-5e6f7a8b.html
    glasslab reproduce lab/my-run-1a2b3c4d                  # a run folder

Prints, per published checkpoint, "bit-identical" or where the replay first differs; exit 0 when every
compared checkpoint is bit-identical, 1 when one differs. A checkout with uncommitted changes the run was not
trained with is refused unless ``--allow-dirty``, which marks every line of the report.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from glasslab.cli.options import add_lab_option


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reproduce", help="replay a published run and check each published checkpoint",
        description="Read a pretraining run's public record (a published site's run page, its http(s) address, "
        "or a run folder), find or rebuild its dataset, train the recorded config again as a step in the lab "
        "and compare each published checkpoint's weights (sha256 of their canonical bytes) with the replay's.",
    )
    p.add_argument("source", metavar="SOURCE",
                   help="a site's run page (run-….html), its http(s):// address, or a run folder")
    p.add_argument("--until", type=int, default=None, metavar="STEP",
                   help="train only this many steps (the schedule stays the whole run's); default: to the end")
    p.add_argument("--allow-other-commit", action="store_true",
                   help="replay on this checkout even when the run was trained at another commit")
    p.add_argument("--allow-dirty", action="store_true",
                   help="replay on a checkout with uncommitted changes the run was not trained with "
                   "(every line of the report is marked)")
    add_lab_option(p, "lab root the replay (and a rebuilt dataset) goes into", urls=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Replay into the lab ``--lab`` names: a folder, or on an object-store lab this node's working copy of it
    (pulled first, the replay's folder pushed when its step ends)."""
    from glasslab.store.mirror import lab_workspace

    with lab_workspace(args.lab) as lab:
        return _reproduce(args, lab)


def _reproduce(args: argparse.Namespace, lab: Path) -> int:
    from glasslab.errors import UserError
    from glasslab.reproduce import replay as reproduce
    from glasslab.reproduce.published import read_published

    if args.until is not None and args.until < 1:
        raise UserError(f"--until {args.until}: expected a step >= 1")
    published = read_published(args.source)
    reproduce.check_replayable(published, args.allow_other_commit, args.allow_dirty)
    dataset = reproduce.find_or_build_dataset(published, lab)
    folder = reproduce.replay(published, lab, dataset, args.until)
    verdicts = reproduce.compare(published, folder, args.until)
    for line in reproduce.report_lines(published, verdicts):
        print(line)
    print(f"replay: {folder}")
    return 0 if verdicts and all(v.identical for v in verdicts) else 1
