"""Unicode and whitespace normalisation, the first processing stage.

NFC so the same character always has the same bytes (and the same tokens); line endings become
``\\n``; control characters go; trailing spaces go; more than two blank lines collapse to two; leading
and trailing blank lines go. Indentation is kept, because code is one of our domains and its meaning
depends on it. Each step is a C-speed string operation (a regex only where a quick test says it is
needed): normalising is the one stage every byte of input goes through.
"""

from __future__ import annotations

import re
import unicodedata

_MANY_BLANK_LINES = re.compile(r"\n{4,}")
# Control characters other than tab/newline carry no text and confuse filters and tokenizers alike. They
# are ASCII, so deleting their bytes from the UTF-8 never cuts a multi-byte character.
_CONTROL_BYTES = bytes([*range(0, 9), 11, 12, *range(14, 32), 127])
_LINE_END_SPACE = " \t\f\v"


def normalize(text: str) -> str:
    """``text`` in NFC with normalised line ends and blank runs; empty if nothing visible is left."""
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    data = text.encode("utf-8", "surrogatepass")
    kept = data.translate(None, _CONTROL_BYTES)
    if len(kept) != len(data):
        text = kept.decode("utf-8", "surrogatepass")
    text = "\n".join([line.rstrip(_LINE_END_SPACE) for line in text.split("\n")])
    if "\n\n\n\n" in text:
        text = _MANY_BLANK_LINES.sub("\n\n\n", text)
    return text.strip("\n")
