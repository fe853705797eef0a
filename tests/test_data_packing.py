"""SFT packing and the conversation loader: tight rows, global stream split over ranks, exact resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from glasslab.data.chat import EncodedConversation
from glasslab.data.packing import IGNORE_INDEX, ConversationLoader, collate, heldout_batches, pack_rows
from glasslab.errors import UserError

PAD = 1


def _conversations(n: int, seed: int = 0) -> list[EncodedConversation]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int(rng.integers(6, 60))
        ids = rng.integers(10, 90, length).astype(np.int32)
        ids[0] = 5  # <|im_start|>: never trained
        mask = np.zeros(length, dtype=bool)
        mask[length // 2 :] = True
        out.append(EncodedConversation(ids, mask))
    return out


def test_best_fit_packing_places_everything_once_and_fills_rows():
    lengths = [int(n) for n in np.random.default_rng(1).integers(5, 120, 500)]
    rows = pack_rows(lengths, 257)
    assert sorted(i for row in rows for i in row) == list(range(500))
    assert all(sum(lengths[i] for i in row) <= 257 for row in rows)
    assert sum(lengths) / (257 * len(rows)) > 0.95  # a lower bound would be sum/257 rows


def test_collate_marks_only_assistant_targets_and_separates_documents():
    convs = _conversations(3)
    batch = collate(convs, [[0, 1], [2]], seq_len=127, pad_id=PAD, packed=True)
    assert batch.tokens_BT.shape == batch.targets_BT.shape == batch.doc_ids_BT.shape == (2, 127)
    assert batch.loss_tokens == sum(c.num_assistant_tokens for c in convs)
    n0 = len(convs[0].ids)
    row = torch.cat([batch.tokens_BT[0], batch.targets_BT[0, -1:]])
    assert row[:n0].tolist() == convs[0].ids.tolist()
    assert batch.targets_BT[0, n0 - 1] == IGNORE_INDEX  # the step from one conversation into the next
    assert batch.doc_ids_BT[0, :n0].unique().tolist() == [0] and batch.doc_ids_BT[0, n0] == 1
    trained = batch.targets_BT[0, : n0 - 1] != IGNORE_INDEX
    assert trained.tolist() == convs[0].assistant_mask[1:].tolist()


@pytest.mark.parametrize("packing", ["packed", "padded"])
def test_loader_resumes_exactly_splits_over_ranks_and_counts(packing):
    convs = _conversations(300) + [EncodedConversation(np.full(200, 7, np.int32), np.ones(200, bool))]
    make = lambda **kw: ConversationLoader(convs, 127, 8, PAD, packing, seed=3, **kw)  # noqa: E731
    loader = make()
    assert loader.too_long == 1
    batches = [loader.next_batch() for _ in range(40)]  # several epochs
    assert loader.epoch >= 1 and batches[-1].assistant_tokens_seen == sum(b.loss_tokens for b in batches)
    resumed = make()
    ahead = make()
    for _ in range(13):
        ahead.next_batch()
    resumed.load_state_dict(ahead.state_dict())
    for expected in batches[13:]:
        got = resumed.next_batch()
        assert torch.equal(got.tokens_BT, expected.tokens_BT) and torch.equal(got.targets_BT, expected.targets_BT)
        assert got.loss_tokens == expected.loss_tokens
    ranks = [make(rank=r, world_size=2) for r in range(2)]
    for expected in batches[:5]:
        halves = [r.next_batch() for r in ranks]
        assert torch.equal(torch.cat([h.tokens_BT for h in halves]), expected.tokens_BT)
        trained = sum(int((h.targets_BT != IGNORE_INDEX).sum()) for h in halves)
        assert halves[0].loss_tokens == halves[1].loss_tokens == expected.loss_tokens == trained
    if packing == "padded":
        assert all((b.targets_BT != IGNORE_INDEX).any(dim=1).all() for b in batches) and batches[0].doc_ids_BT is None
    with pytest.raises(UserError, match="does not match"):
        ConversationLoader(convs, 127, 16, PAD, packing, seed=3).load_state_dict(loader.state_dict())


def test_packing_serves_more_assistant_tokens_per_row_than_padding():
    convs = _conversations(300)
    packed = ConversationLoader(convs, 255, 8, PAD, "packed").next_batch()
    padded = ConversationLoader(convs, 255, 8, PAD, "padded").next_batch()
    assert packed.loss_tokens > 3 * padded.loss_tokens


def test_heldout_batches_are_fixed_and_refuse_when_nothing_fits():
    convs = _conversations(50)
    first = [b.targets_BT for b in heldout_batches(convs, 127, 4, PAD)]
    assert all(torch.equal(a, b.targets_BT) for a, b in zip(first, heldout_batches(convs, 127, 4, PAD), strict=True))
    with pytest.raises(UserError, match="train.seq_len"):
        list(heldout_batches(convs, 3, 4, PAD))
