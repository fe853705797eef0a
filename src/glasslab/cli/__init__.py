"""The ``glasslab`` command: parses flags and calls the parts; it holds no logic of its own.

Each subcommand lives in its own module here with ``add_parser(subparsers)``, which registers the
subcommand and sets ``func(args) -> int``. Heavy imports happen inside ``func`` so ``--help`` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from glasslab import __version__
from glasslab.errors import UserError

# Subcommand modules, in the order `glasslab --help` lists them.
COMMANDS = ("demo", "data", "train", "run", "ladder", "chat", "serve", "publish", "note")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="glasslab",
        description="An open lab for training language models in public: build data, train dense and "
        "MoE models, run scaling ladders, and watch everything live.",
    )
    parser.add_argument("--version", action="version", version=f"glasslab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"glasslab.cli.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"glasslab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"glasslab {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
