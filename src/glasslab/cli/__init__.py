"""The ``glasslab`` command: parses flags and calls the parts; it holds no logic of its own.

Each subcommand lives in its own module here with ``add_parser(subparsers)``, which registers the
subcommand and sets ``func(args) -> int``. Heavy imports happen inside ``func`` so ``--help`` is fast.

Every failure a user can cause ends the same way: one line ``glasslab CMD: error: ...`` on stderr and
exit status 2, never a traceback (a :class:`~glasslab.errors.SystemFailure` — the cluster under a
command failed — is the same line with exit status 1). A :class:`~glasslab.errors.UserError` carries
its own line; an OS error about the user's paths (a read-only lab, a file where a folder belongs, a full disk) is
described here, once for every command, by :func:`describe_os_error`.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from pathlib import Path

from glasslab import __version__
from glasslab.errors import SystemFailure, UserError

# Subcommand modules, in the order `glasslab --help` lists them.
COMMANDS = ("demo", "data", "train", "sft", "dpo", "rl", "run", "ladder", "export", "eval", "chat", "serve", "publish",
            "reproduce", "batch", "trace", "note", "card")


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line too (the usage block is one ``--help`` away)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="glasslab",
        description="An open lab for training language models in public: build data, train dense and "
        "MoE models, run scaling ladders, and watch everything live.",
    )
    parser.add_argument("--version", action="version", version=f"glasslab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"glasslab.cli.{name}").add_parser(sub)
    _name_commands(parser)
    return parser


def _name_commands(parser: argparse.ArgumentParser) -> None:
    """Give every (sub)command's namespace its full name, e.g. ``glasslab data build``, for errors."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                subparser.set_defaults(command_prog=subparser.prog)
                _name_commands(subparser)


def describe_os_error(exc: OSError) -> str | None:
    """One line naming the path and what was expected, for an OS error the user's paths caused.

    None for any other OS error: that one is a bug and keeps its traceback.
    """
    if exc.filename is None:
        return None
    path = Path(os.fsdecode(exc.filename))
    if exc.errno in (errno.EACCES, errno.EPERM):
        if path.exists() and not os.access(path, os.R_OK):
            return f"{path}: permission denied; expected a file or folder this user can read"
        writable = next((p for p in (path, *path.parents) if p.exists()), path)
        return f"{path}: permission denied; expected {writable} to be writable by this user"
    if exc.errno == errno.EROFS:
        return f"{path}: read-only file system; expected writable storage"
    if exc.errno == errno.ENOTDIR:
        blocking = next((p for p in reversed((path, *path.parents)) if p.exists() and not p.is_dir()), path)
        return f"{blocking}: is a file; expected a folder" + (f" (to hold {path})" if blocking != path else "")
    if exc.errno == errno.EEXIST and path.exists() and not path.is_dir():
        return f"{path}: is a file; expected a folder"
    if exc.errno == errno.EISDIR:
        return f"{path}: is a folder; expected a file"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{path}: no space left on the device (or over quota); expected room to write"
    if exc.errno == errno.ENAMETOOLONG:
        return f"{path}: file name too long"
    return None


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The arguments; a command that sets ``trailing_items`` (the name of its positional list) also takes
    positional items after its flags (``glasslab sft BASE FILE --steps 9 train.seed=1``), which argparse
    alone refuses."""
    args, extra = parser.parse_known_args(argv)
    dest = getattr(args, "trailing_items", None)
    if extra and (dest is None or any(item.startswith("-") for item in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        getattr(args, dest).extend(extra)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command as typed, for what records it
    return args


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse(parser, argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    command = getattr(args, "command_prog", f"glasslab {args.command}")
    try:
        return int(args.func(args) or 0)
    except SystemFailure as exc:
        print(f"{command}: error: {exc}", file=sys.stderr)
        return 1
    except UserError as exc:
        message = str(exc)
    except OSError as exc:
        message = describe_os_error(exc)
        if message is None:
            raise
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return 130
    print(f"{command}: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
