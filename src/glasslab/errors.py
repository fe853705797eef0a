"""The one exception type for user mistakes, shared by every part.

A :class:`UserError` carries a one-line message naming the file, field or value and what was
expected; the CLI prints it and exits non-zero without a traceback. Bugs stay ordinary exceptions.
"""


class UserError(Exception):
    """A mistake in the user's input (config, file, flag, data); the message is one line."""
