"""Flags several subcommands share, defined once."""

from __future__ import annotations

import argparse
import os

DEFAULT_LAB = "lab"


def add_lab_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup, what: str = "lab root") -> None:
    """``--lab DIR``: the lab root, from ``$GLASSLAB_ROOT`` or ``./lab`` when not given."""
    parser.add_argument("--lab", default=os.environ.get("GLASSLAB_ROOT", DEFAULT_LAB),
                        help=f"{what} (default: $GLASSLAB_ROOT or ./{DEFAULT_LAB})")
