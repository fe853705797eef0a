"""The chat format in token ids: a conversation becomes ids plus the mask of the tokens the assistant writes.

The format is the ChatML template saved with the tokenizer (:data:`~glasslab.data.tokenizer.CHAT_TEMPLATE`).
We encode it piece by piece instead of rendering a string: a tokenizer splits its input at special
tokens and encodes the text between them independently, so ``<|im_start|>`` + encode(``role\\ncontent``)
+ ``<|im_end|>`` + encode(``\\n``) per message is exactly what ``apply_chat_template`` returns.

The loss mask marks an assistant message's content and its closing ``<|im_end|>`` (so the model learns
when to stop), never the role header, the newline after a turn, or anything a system or user wrote.
Where byte-level BPE merges the header's newline with a reply that starts with whitespace, the merged
token counts as the assistant's (it overlaps the reply), as in ``transformers``' assistant mask.

Text inside messages is always ordinary text: a user typing ``<|im_end|>`` gets the characters, not
the control token (``transformers`` does the same with ``sanitize_control_tokens=True``; training
records that contain reserved tokens are rejected before they get here).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from glasslab.data.tokenizer import IM_END, IM_START, SPECIAL_TOKENS

_SPECIAL_TEXT = re.compile("(" + "|".join(re.escape(t) for t in sorted(SPECIAL_TOKENS, key=len, reverse=True)) + ")")
Message = dict[str, str]
"""``{"role": "system" | "user" | "assistant", "content": str}``."""


@dataclass(frozen=True)
class EncodedConversation:
    """One conversation's token ids and, per token, whether the assistant wrote it (trained on)."""

    ids: np.ndarray
    """int32 token ids, the whole conversation in the chat format."""
    assistant_mask: np.ndarray
    """bool, same length: True for reply content and each reply's closing ``<|im_end|>``."""

    @property
    def num_assistant_tokens(self) -> int:
        return int(self.assistant_mask.sum())


class ChatEncoder:
    """Encodes conversations (and reply prompts) with a dataset's tokenizer in the ChatML format."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        # A private copy: special-token text inside messages must stay text, without changing the caller's.
        self.tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self.tokenizer.encode_special_tokens = True
        self.im_start_id = _special_id(tokenizer, IM_START)
        self.im_end_id = _special_id(tokenizer, IM_END)
        self._newline_ids = self.tokenizer.encode("\n", add_special_tokens=False).ids

    @property
    def newline_len(self) -> int:
        """Tokens of the newline after each message's ``<|im_end|>``."""
        return len(self._newline_ids)

    def encode(self, messages: Sequence[Message]) -> EncodedConversation:
        """``messages`` (already validated) in the chat format, with the assistant mask."""
        return self.encode_many([messages])[0]

    def encode_many(self, conversations: Sequence[Sequence[Message]]) -> list[EncodedConversation]:
        """Every conversation in the chat format (the tokenizer encodes all message bodies in one batch)."""
        pieces = [_body_pieces(m) for messages in conversations for m in messages]
        encodings = iter(self.tokenizer.encode_batch([text for body in pieces for text, _ in body],
                                                     add_special_tokens=False))
        bodies = iter(pieces)
        out = []
        for messages in conversations:
            ids: list[int] = []
            mask: list[bool] = []
            for message in messages:
                header_chars = len(message["role"]) + 1
                is_reply = message["role"] == "assistant"
                ids.append(self.im_start_id)
                mask.append(False)
                for _, start in next(bodies):
                    piece = next(encodings)
                    ids.extend(piece.ids)
                    mask.extend(is_reply and start + end > header_chars for _, end in piece.offsets)
                ids.append(self.im_end_id)
                mask.append(is_reply)
                ids.extend(self._newline_ids)
                mask.extend([False] * len(self._newline_ids))
            out.append(EncodedConversation(np.array(ids, dtype=np.int32), np.array(mask, dtype=bool)))
        return out

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """``messages`` followed by the assistant header: the ids a model continues with its reply."""
        ids = self.encode(messages).ids.tolist() if messages else []
        return ids + [self.im_start_id] + self.tokenizer.encode("assistant\n", add_special_tokens=False).ids

    def decode_reply(self, ids: Sequence[int]) -> str:
        """Text of generated reply ids, without the closing ``<|im_end|>``."""
        ids = list(ids)
        if self.im_end_id in ids:
            ids = ids[: ids.index(self.im_end_id)]
        return self.tokenizer.decode(ids, skip_special_tokens=False)


def _body_pieces(message: Message) -> list[tuple[str, int]]:
    """``role\\ncontent`` cut around reserved-token text, as (piece, start character): each piece is
    encoded on its own, as ``transformers`` does with ``sanitize_control_tokens``."""
    body = f"{message['role']}\n{message['content']}"
    pieces, start = [], 0
    for text in _SPECIAL_TEXT.split(body):
        if text:
            pieces.append((text, start))
            start += len(text)
    return pieces


def _special_id(tokenizer: Tokenizer, token: str) -> int:
    token_id = tokenizer.token_to_id(token)
    if token_id is None:
        raise ValueError(f"tokenizer has no {token} token; build the dataset again with this glasslab")
    return token_id
