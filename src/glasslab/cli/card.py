"""``glasslab card NAME``: an experiment's card filled in from the lab, on the terminal or as Markdown."""

from __future__ import annotations

import argparse

from glasslab.cli.options import add_lab_option


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "card", help="show an experiment's card: question, expectations, actual values, incidents, verdict",
        description="Show the card of experiment NAME (a built-in's name or an experiment file's stem) as it "
        "stands in the lab: its question and design, each expectation's band and actual value, the runs, "
        "their incidents, total compute and time, and the verdict (all inside: confirmed; any outside: "
        "refuted; any missing: open).",
    )
    p.add_argument("name", metavar="NAME", help="experiment name (e.g. demo)")
    p.add_argument("--markdown", action="store_true",
                   help="print Markdown ready to paste into a GitHub issue or a post")
    p.add_argument("--site-url", default=None, metavar="URL",
                   help="where the published site (glasslab publish) is hosted: the Markdown links its pages")
    add_lab_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from rich.console import Console

    from glasslab.lab.card_results import card_results
    from glasslab.observatory.card_render import card_console, card_markdown

    results = card_results(args.lab, args.name)
    if args.markdown:
        sys.stdout.write(card_markdown(results, args.site_url))
        return 0
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    for renderable in card_console(results):
        console.print(renderable)
    return 0
