"""SFT batches: encoded conversations packed into rows that keep them apart, or padded one per row.

A row holds ``seq_len + 1`` token ids, like a pretraining row: inputs are the first ``seq_len``, targets
the last ``seq_len``. A target counts (is trained on) only where the assistant wrote that token; every
other target is ``IGNORE_INDEX``, which ``F.cross_entropy`` skips.

- ``packed``: whole conversations placed into rows by best fit (longest first, each into the fullest
  row it fits), the rest of a row padded. ``doc_ids`` give each input token its conversation, so the
  model's block-diagonal causal mask stops attention across conversations: a packed conversation's
  loss equals its loss alone. The first target of each conversation is ``<|im_start|>``, never an
  assistant token, so no loss crosses a boundary either.
- ``padded``: one conversation per row, then padding; plain causal attention suffices.

Every conversation given must fit a row: what does not is cut or left out, and counted, before it gets
here (:mod:`glasslab.posttrain.fitting`). The loader serves a global stream of rows
(:mod:`glasslab.posttrain.stream`): epoch ``e`` packs the conversations in an order drawn from
``(seed, e)`` and shuffles the rows. Its state is (epoch, row, step, assistant tokens served).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from glasslab.data.chat import EncodedConversation
from glasslab.errors import UserError
from glasslab.posttrain.stream import EpochStream

IGNORE_INDEX = -100
"""Target id of tokens without loss (``F.cross_entropy``'s default ``ignore_index``)."""
PADDING_DOC = -1
"""Document id of padding: padding attends only to padding."""
Packing = Literal["packed", "padded"]


@dataclass
class SFTBatch:
    """A batch of SFT rows: inputs, targets (``IGNORE_INDEX`` where untrained) and, packed, document ids."""

    tokens_BT: torch.Tensor
    targets_BT: torch.Tensor
    doc_ids_BT: torch.Tensor | None
    loss_tokens: int
    """Trained targets in the whole optimiser step, over every rank (the loss is their mean)."""
    assistant_tokens_seen: int = 0
    """Trained targets served so far in the run, this step included."""

    def to(self, device: torch.device | str, non_blocking: bool = False) -> SFTBatch:
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)  # noqa: E731
        return SFTBatch(move(self.tokens_BT), move(self.targets_BT), move(self.doc_ids_BT), self.loss_tokens,
                        self.assistant_tokens_seen)

    def split(self, rows: int) -> list[SFTBatch]:
        """Micro-batches of ``rows`` rows (the step's counts stay global)."""
        tokens, targets = self.tokens_BT.split(rows), self.targets_BT.split(rows)
        doc_ids = self.doc_ids_BT.split(rows) if self.doc_ids_BT is not None else [None] * len(tokens)
        return [SFTBatch(t, y, d, self.loss_tokens, self.assistant_tokens_seen)
                for t, y, d in zip(tokens, targets, doc_ids, strict=True)]

    def __len__(self) -> int:
        return self.tokens_BT.shape[0]


def pack_rows(lengths: Sequence[int], row_len: int) -> list[list[int]]:
    """Best-fit-decreasing bins: lists of indices into ``lengths`` whose lengths sum to at most ``row_len``.

    Every length must be <= ``row_len``. Ties keep the given order, so a shuffled input gives a
    different (equally tight) packing.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    rows: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (room left, row index), sorted, so bisect finds the fullest row that fits
    for i in order:
        n = lengths[i]
        at = bisect.bisect_left(free, (n, -1))
        if at == len(free):
            rows.append([i])
            room, row = row_len - n, len(rows) - 1
        else:
            room, row = free.pop(at)
            rows[row].append(i)
            room -= n
        if room > 0:
            bisect.insort(free, (room, row))
    return rows


def collate(conversations: Sequence[EncodedConversation], rows: Sequence[Sequence[int]], seq_len: int,
            pad_id: int, packed: bool) -> SFTBatch:
    """Rows of ``seq_len + 1`` ids made of the given conversation indices, as an :class:`SFTBatch`
    (``loss_tokens`` counts these rows only)."""
    width = seq_len + 1
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    trained = np.zeros((len(rows), width), dtype=bool)
    docs = np.full((len(rows), width), PADDING_DOC, dtype=np.int64)
    for r, members in enumerate(rows):
        at = 0
        for k, c in enumerate(members):
            conversation = conversations[c]
            n = len(conversation.ids)
            ids[r, at : at + n] = conversation.ids
            trained[r, at : at + n] = conversation.assistant_mask
            docs[r, at : at + n] = k
            at += n
    targets = np.where(trained[:, 1:], ids[:, 1:], IGNORE_INDEX)
    return SFTBatch(torch.from_numpy(ids[:, :-1].copy()), torch.from_numpy(targets),
                    torch.from_numpy(docs[:, :-1].copy()) if packed else None, int(trained[:, 1:].sum()))


class ConversationLoader(EpochStream):
    """SFT batches of ``(global_batch // world_size, seq_len)`` rows for one data-parallel rank: the items of
    its stream (:mod:`glasslab.posttrain.stream`) are rows, each epoch's packed afresh."""

    name = "sft"

    def __init__(self, conversations: Sequence[EncodedConversation], seq_len: int, global_batch: int, pad_id: int,
                 packing: Packing = "packed", seed: int = 0, rank: int = 0, world_size: int = 1) -> None:
        super().__init__(global_batch, seed, rank, world_size)
        if not conversations:
            raise UserError(f"no conversation fits a row of train.seq_len + 1 = {seq_len + 1} tokens; "
                            "raise train.seq_len")
        assert all(len(c.ids) <= seq_len + 1 for c in conversations), "fit conversations to rows first"
        self.conversations = list(conversations)
        self.seq_len, self.pad_id, self.packing = seq_len, pad_id, packing
        self._lengths = [len(c.ids) for c in self.conversations]
        self._epoch_rows: dict[int, list[list[int]]] = {}
        self.assistant_tokens = 0

    def items_of_epoch(self, epoch: int) -> list[list[int]]:
        """Conversation indices of every row of ``epoch``, in the order they are served."""
        if epoch not in self._epoch_rows:
            if len(self._epoch_rows) >= 2:
                self._epoch_rows.pop(min(self._epoch_rows))
            rng = np.random.default_rng([self.seed, epoch])
            order = rng.permutation(len(self.conversations)).tolist()
            if self.packing == "packed":
                rows = [[order[i] for i in row] for row in pack_rows([self._lengths[i] for i in order],
                                                                     self.seq_len + 1)]
                rows = [rows[i] for i in rng.permutation(len(rows))]
            else:
                rows = [[i] for i in order]
            self._epoch_rows[epoch] = rows
        return self._epoch_rows[epoch]

    def next_batch(self) -> SFTBatch:
        rows = self.draw()
        # A conversation's first token is never trained, so its trained targets are its assistant tokens.
        step_tokens = sum(self.conversations[c].num_assistant_tokens for row in rows for c in row)
        self.assistant_tokens += step_tokens
        batch = collate(self.conversations, self.mine(rows), self.seq_len, self.pad_id, self.packing == "packed")
        batch.loss_tokens, batch.assistant_tokens_seen = step_tokens, self.assistant_tokens
        return batch

    def identity(self) -> dict[str, Any]:
        # In the order checkpoints have always stored it, so a checkpoint's bytes do not move.
        return {"seed": self.seed, "seq_len": self.seq_len, "global_batch": self.global_batch,
                "packing": self.packing, "conversations": len(self.conversations)}

    def counters(self) -> dict[str, int]:
        return {**super().counters(), "assistant_tokens": self.assistant_tokens}


def heldout_batches(conversations: Sequence[EncodedConversation], seq_len: int, batch_size: int, pad_id: int,
                    max_conversations: int = 0) -> Iterator[SFTBatch]:
    """Held-out conversations packed (in their given order) into batches of at most ``batch_size`` rows;
    the same every call. Each must fit a row (cut or left out before, as in training)."""
    assert all(len(c.ids) <= seq_len + 1 for c in conversations), "fit conversations to rows first"
    chosen = list(conversations)
    if max_conversations:
        chosen = chosen[:max_conversations]
    if not chosen:
        raise UserError(f"no held-out conversation fits a row of train.seq_len + 1 = {seq_len + 1} tokens")
    rows = pack_rows([len(c.ids) for c in chosen], seq_len + 1)
    for first in range(0, len(rows), batch_size):
        yield collate(chosen, rows[first : first + batch_size], seq_len, pad_id, packed=True)
