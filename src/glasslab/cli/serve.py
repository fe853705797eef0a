"""``glasslab serve``: the live observatory for a lab (read-only, loopback by default; the chat panel of SFT and
DPO runs talks to their models when the server is on loopback, or with ``--chat``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from glasslab.cli.options import add_lab_option
from glasslab.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="serve the live observatory for a lab",
        description="Serve the lab's pages (runs, compare, ladders, data, provenance) with live updates. "
        "Read-only; binds to 127.0.0.1 unless --host says otherwise. The chat panel on an SFT or DPO run's page "
        "(its base and the tuned model side by side) is live on loopback, or anywhere with --chat.",
    )
    add_lab_option(p, urls=True)
    p.add_argument("--every", type=float, default=5.0,
                   help="on an object-store lab (s3://…): seconds between refreshes of this node's copy (default 5)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    p.add_argument("--chat", action="store_true",
                   help="let the chat panel generate replies on a non-loopback --host too (anyone who can reach "
                   "the server may then use this machine's CPU or GPU, one reply at a time)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve the lab ``--lab`` names: a folder, or for an object-store lab this node's view folder, pulled from
    the root every ``--every`` seconds while it serves (a run on another node shows up as it pushes)."""
    from glasslab.store.mirror import lab_snapshot

    if args.every <= 0:
        raise UserError(f"--every {args.every}: expected seconds > 0")
    with lab_snapshot(args.lab, refresh_s=args.every) as lab:
        return _serve(args, lab)


def _serve(args: argparse.Namespace, lab: Path) -> int:
    from glasslab.observatory.app import bind, chat_allowed, serve

    if lab.exists() and not lab.is_dir():
        raise UserError(f"--lab {lab}: is a file; expected a lab folder")
    sock = bind(args.host, args.port)  # a busy port fails here, before a URL is printed
    if not lab.exists():
        print(f"note: {lab} does not exist yet; the pages fill in as the lab is written", flush=True)
    chat = chat_allowed(args.host, args.chat)
    if not chat_allowed(args.host):
        print(f"note: serving on {args.host}: anyone who can reach it can read this lab"
              + (" and chat with its models" if chat else "; the chat panel is off (--chat turns it on)"),
              flush=True)
    print(f"observatory for {args.lab} at http://{args.host}:{sock.getsockname()[1]}/", flush=True)
    serve(lab, host=args.host, port=args.port, sock=sock, chat=chat)
    return 0
