"""Conversations longer than a row: cut at a turn boundary, or left out — never dropped without a count.

A conversation of more tokens than a row (``seq_len + 1``) keeps its first turns up to the last assistant
reply that ends inside the row: the loss falls on the replies it keeps, and what followed is cut off. With
``drop_long`` it is left out instead. One whose first assistant reply does not end inside a row is left out
either way (nothing of it could be trained on). :class:`FitCounts` says what became of every conversation;
the SFT run records the counts of its training and held-out conversations in ``run.json``, says them on
the console, and the run page shows them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from glasslab.data.chat import ChatEncoder, EncodedConversation


@dataclass
class FitCounts:
    """What became of a set of conversations at a row length."""

    conversations: int = 0
    """Conversations given."""
    whole: int = 0
    """Fit a row as they are."""
    cut: int = 0
    """Longer than a row: cut after the last assistant reply that fits (the turns that fit are kept)."""
    left_out_long: int = 0
    """Longer than a row and left out (``drop_long``)."""
    left_out_first_reply: int = 0
    """Left out because not even the first assistant reply ends inside a row."""

    @property
    def kept(self) -> int:
        return self.whole + self.cut

    @property
    def left_out(self) -> int:
        return self.left_out_long + self.left_out_first_reply

    def as_dict(self) -> dict[str, int]:
        return {**dataclasses.asdict(self), "kept": self.kept, "left_out": self.left_out}

    def line(self, what: str) -> str:
        """``1,204 training conversations: 1,180 whole, 20 cut at a turn boundary, 4 left out (…)``."""
        parts = [f"{self.whole:,} whole", f"{self.cut:,} cut at a turn boundary"]
        if self.left_out_long:
            parts.append(f"{self.left_out_long:,} left out as longer than a row (--drop-long)")
        if self.left_out_first_reply:
            parts.append(f"{self.left_out_first_reply:,} left out (the first reply alone is longer than a row)")
        return f"{self.conversations:,} {what}: " + ", ".join(parts)


def reply_ends(conversation: EncodedConversation, encoder: ChatEncoder) -> list[int]:
    """Token counts of the conversation's prefixes that end with an assistant reply (its ``<|im_end|>`` and
    the newline after it), in order."""
    ids, mask = conversation.ids, conversation.assistant_mask
    closers = np.flatnonzero((ids == encoder.im_end_id) & mask)
    return [int(i) + 1 + encoder.newline_len for i in closers]


def fit_conversations(conversations: Sequence[EncodedConversation], encoder: ChatEncoder, row_len: int,
                      drop_long: bool = False) -> tuple[list[EncodedConversation], FitCounts]:
    """The conversations as trained at ``row_len`` tokens per row, and what became of each."""
    counts = FitCounts(conversations=len(conversations))
    kept = []
    for conversation in conversations:
        if len(conversation.ids) <= row_len:
            counts.whole += 1
            kept.append(conversation)
            continue
        ends = [end for end in reply_ends(conversation, encoder) if end <= row_len]
        if not ends:
            counts.left_out_first_reply += 1
        elif drop_long:
            counts.left_out_long += 1
        else:
            counts.cut += 1
            kept.append(EncodedConversation(conversation.ids[: ends[-1]], conversation.assistant_mask[: ends[-1]]))
    return kept, counts
