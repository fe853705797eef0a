"""SFT packing and the conversation loader: tight rows, global stream split over ranks, exact resume; and
conversations longer than a row cut at a turn boundary or left out, every one counted."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from data_helpers import topic_texts
from glasslab.data.chat import ChatEncoder, EncodedConversation
from glasslab.data.tokenizer import train_tokenizer
from glasslab.errors import UserError
from glasslab.posttrain.fitting import fit_conversations
from glasslab.posttrain.packing import IGNORE_INDEX, ConversationLoader, collate, heldout_batches, pack_rows

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
    convs = _conversations(300)
    make = lambda **kw: ConversationLoader(convs, 127, 8, PAD, packing, seed=3, **kw)  # noqa: E731
    loader = make()
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


def test_heldout_batches_are_fixed_and_refuse_when_nothing_is_left():
    convs = _conversations(50)
    first = [b.targets_BT for b in heldout_batches(convs, 127, 4, PAD)]
    assert all(torch.equal(a, b.targets_BT) for a, b in zip(first, heldout_batches(convs, 127, 4, PAD), strict=True))
    with pytest.raises(UserError, match="train.seq_len"):
        list(heldout_batches([], 127, 4, PAD))
    with pytest.raises(UserError, match="train.seq_len"):
        ConversationLoader([], 127, 8, PAD)


def _turns(*pairs: tuple[str, str]) -> list[dict]:
    return [{"role": role, "content": text} for user, reply in pairs
            for role, text in (("user", user), ("assistant", reply))]


def test_a_long_conversation_is_cut_after_the_last_reply_that_fits_and_every_one_is_counted():
    encoder = ChatEncoder(train_tokenizer(topic_texts()[:30], vocab_size=600))
    short = _turns(("Hi?", "Hello."))
    long = _turns(("What is x?", "x is a name. " * 4), ("And y?", "y is another name. " * 30), ("z?", "z."))
    first_too_long = _turns(("Tell me all.", "word " * 400))
    encoded = encoder.encode_many([short, long, first_too_long])
    first_exchange = len(encoder.encode(long[:2]).ids)
    row = first_exchange + 5
    assert len(encoded[0].ids) <= row < len(encoded[1].ids)
    kept, counts = fit_conversations(encoded, encoder, row)
    assert counts.as_dict() == {"conversations": 3, "whole": 1, "cut": 1, "left_out_long": 0,
                                "left_out_first_reply": 1, "kept": 2, "left_out": 1}
    # The cut conversation is exactly its first exchange, its reply (and <|im_end|>) still trained.
    assert kept[1].ids.tolist() == encoder.encode(long[:2]).ids.tolist()
    assert kept[1].assistant_mask.tolist() == encoder.encode(long[:2]).assistant_mask.tolist()
    assert kept[1].num_assistant_tokens > 0
    dropped, counts = fit_conversations(encoded, encoder, row, drop_long=True)
    assert len(dropped) == 1 and (counts.whole, counts.cut, counts.left_out_long, counts.left_out_first_reply) == (
        1, 0, 1, 1)
    assert "1 cut at a turn boundary" in fit_conversations(encoded, encoder, row)[1].line("training conversations")
