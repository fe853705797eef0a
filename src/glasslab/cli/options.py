"""Flags several subcommands share, defined once."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from glasslab.errors import UserError

DEFAULT_LAB = "lab"


def local_lab_root(value: str) -> str:
    """A ``--lab`` value that is a local folder (``file:///x`` is ``/x``); an object-store URL is refused
    in one line by a command that cannot take one yet, rather than made into a local folder ``s3:``."""
    from glasslab.store.url import local_folder

    try:
        return local_folder(value)
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def lab_root_or_url(value: str) -> str:
    """A ``--lab`` value for a command that takes an object-store lab (``s3://bucket/prefix``, ``gs://``,
    ``file://`` or a folder); a URL of another scheme is refused in one line. Whether the store is usable
    is checked when the command opens it (``store.mirror.lab_workspace``)."""
    from glasslab.store.url import OBJECT_STORES

    scheme, sep, _ = value.partition("://")
    if sep and scheme not in (*OBJECT_STORES, "file"):
        raise argparse.ArgumentTypeError(f"{value}: unknown lab root scheme {scheme!r}; expected a folder, "
                                         "file://, s3:// or gs://")
    return value


def add_lab_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup, what: str = "lab root",
                   urls: bool = False) -> None:
    """``--lab DIR``: the lab root, from ``$GLASSLAB_ROOT`` or ``./lab`` when not given; ``urls``: the
    command also takes an object-store URL (``s3://bucket/prefix``)."""
    parser.add_argument("--lab", type=lab_root_or_url if urls else local_lab_root,
                        default=os.environ.get("GLASSLAB_ROOT", DEFAULT_LAB),
                        help=f"{what} (default: $GLASSLAB_ROOT or ./{DEFAULT_LAB})"
                        + ("; s3://bucket/prefix for a lab on object storage" if urls else ""))


def split_config_items(items: list[str], what: str = "config") -> tuple[Path | None, list[str]]:
    """(file or None, overrides) from ``[FILE] [KEY=VALUE ...]``: the file is a first item without '='."""
    if items and "=" not in items[0]:
        return Path(items[0]), items[1:]
    stray = [i for i in items if "=" not in i]
    if stray:
        raise UserError(f"{stray[0]!r}: expected KEY=VALUE after the {what} file")
    return None, items


def add_executor_options(parser: argparse.ArgumentParser) -> None:
    """Where and how an experiment's steps run: ``--backend``, ``--address``, ``--jobs`` is the
    caller's (defaults differ), ``--retries``, ``--re-register``, ``--force-registration``."""
    parser.add_argument("--backend", choices=("local", "ray"), default="local",
                        help="local: steps as subprocesses here (default); ray: steps as Ray tasks")
    parser.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray)")
    parser.add_argument("--retries", type=int, default=None, metavar="N",
                        help="retry a failed step up to N times (a crashed or preempted training step "
                        "resumes from its checkpoint); default: each step's own retry policy")
    parser.add_argument("--re-register", action="store_true",
                        help="let steps replace a prediction already in the lab's registry with other "
                        "numbers (recorded as an incident); without it they refuse")
    parser.add_argument("--force-registration", action="store_true",
                        help="run a ladder's hero even though the registration gate refused its fit; the "
                        "registry, the hero's run, the page and the card mark the prediction FORCED")


def step_lab(lab: str | Path, pinned: str | Path | None) -> Path:
    """The lab root of a command's step: a pinned folder's parent (``--run-dir``, ``--out``), else ``--lab``,
    so the step's lab events land beside its folder, not in the current folder's ``./lab``."""
    return Path(pinned).resolve().parent if pinned else Path(lab)
