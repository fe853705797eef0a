"""``glasslab publish``: export the lab as a static site (works from any static host and file://)."""

from __future__ import annotations

import argparse
from pathlib import Path

from glasslab.cli.options import add_lab_option
from glasslab.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "publish", help="export the lab as a static site",
        description="Write the observatory's pages as a self-contained static site into --out. With "
        "--watch, re-export the pages whose runs changed every few seconds (a near-live public lab).",
    )
    p.add_argument("--out", required=True, help="folder to write the site into")
    add_lab_option(p, urls=True)
    p.add_argument("--watch", action="store_true", help="keep re-exporting what changed")
    p.add_argument("--every", type=float, default=3.0, help="seconds between re-exports with --watch")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Publish the lab ``--lab`` names: a folder, or an object-store lab's snapshot (pulled into this node's
    view folder, nothing pushed back)."""
    from glasslab.store.mirror import lab_snapshot
    from glasslab.store.url import OBJECT_STORES

    if args.watch and args.lab.partition("://")[0] in OBJECT_STORES:
        raise UserError(f"--lab {args.lab}: --watch needs a lab folder; an object-store lab is published "
                        "from a snapshot (run it again to refresh)")
    with lab_snapshot(args.lab) as lab:
        args.lab = str(lab)
        return _publish(args)


def _publish(args: argparse.Namespace) -> int:
    from glasslab.observatory.publish import publish, watch

    if not Path(args.lab).is_dir():
        raise UserError(f"--lab {args.lab}: no such folder")
    if Path(args.out).resolve() == Path(args.lab).resolve():
        raise UserError(f"--out {args.out}: must not be the lab root")
    if args.watch:
        watch(args.lab, args.out, every=args.every)
        return 0
    index = publish(args.lab, args.out)
    print(f"published {index}")
    return 0
