"""The exception types every part shares: the user's mistakes, and failures of what a command runs on.

A :class:`UserError` carries a one-line message naming the file, field or value and what was
expected; the CLI prints it and exits 2 without a traceback. A :class:`SystemFailure` is the same one
line for a failure outside the user's input (a Ray cluster that lost a node's raylet); the CLI exits 1,
and the command keeps what it had done, so running it again resumes. Bugs stay ordinary exceptions.
"""


class UserError(Exception):
    """A mistake in the user's input (config, file, flag, data); the message is one line."""


class SystemFailure(Exception):
    """What a command runs on failed (not the user's input); the message is one line and says how to go on."""
