"""Unicode and whitespace normalisation, the first processing stage.

NFC so the same character always has the same bytes (and the same tokens); line endings become
``\\n``; trailing spaces go; more than two blank lines collapse to two; leading and trailing blank
lines go. Indentation is kept, because code is one of our domains and its meaning depends on it.
"""

from __future__ import annotations

import re
import unicodedata

_TRAILING_SPACE = re.compile(r"[ \t\f\v]+$", re.MULTILINE)
_MANY_BLANK_LINES = re.compile(r"\n{4,}")
# Control characters other than tab/newline carry no text and confuse filters and tokenizers alike.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def normalize(text: str) -> str:
    """``text`` in NFC with normalised line ends and blank runs; empty if nothing visible is left."""
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    text = _TRAILING_SPACE.sub("", text)
    text = _MANY_BLANK_LINES.sub("\n\n\n", text)
    return text.strip("\n")
