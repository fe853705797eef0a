"""Direct preference optimisation (DPO): the objective handed to the trainer, its batches and its loader.

The loss of a pair (Rafailov et al., 2023) is

    −log σ(β · [(log π(c) − log π_ref(c)) − (log π(r) − log π_ref(r))])

with each log-probability summed over the response's tokens (the chosen reply ``c`` or the rejected ``r``,
and its closing ``<|im_end|>``) given the prompt, π the model being trained and π_ref the frozen reference
(the base). The bracket times β is the pair's reward margin (``dpo/reward_margin``); ``dpo/accuracy`` is
the share of pairs whose margin is positive. The step's loss is the mean over its pairs (the trainer's
``train/loss`` and ``dpo/loss``). On held-out pairs, ``eval/dpo/pref_accuracy`` is the share with
log π(c) > log π(r) under the model alone, so before training it is the base's own preference.

A batch holds each pair as two rows, prompt + chosen and prompt + rejected, padded to the batch's longest
(rounded up to a multiple of 8); the targets count only the response's tokens. A pair longer than a row
(``seq_len + 1`` tokens) is left out and counted before it gets here. The margins are this rank's pairs
(on one process: all of them); the loss is over every rank's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from glasslab.data.chat import ChatEncoder, EncodedConversation
from glasslab.errors import UserError
from glasslab.posttrain.packing import IGNORE_INDEX
from glasslab.posttrain.stream import EpochStream

PAD_MULTIPLE = 8
Autocast = Callable[[], contextlib.AbstractContextManager]


@dataclass(frozen=True)
class EncodedPair:
    """A pair as two encoded conversations whose ``assistant_mask`` marks the response only."""

    chosen: EncodedConversation
    rejected: EncodedConversation

    def __len__(self) -> int:
        return max(len(self.chosen.ids), len(self.rejected.ids))


def encode_pairs(encoder: ChatEncoder, records: Sequence[dict], row_len: int) -> tuple[list[EncodedPair], dict]:
    """The pairs that fit a row of ``row_len`` tokens, and the counts ``{"pairs", "kept", "left_out_long"}``
    (a pair longer than a row is left out: its prompt is the context the preference is about)."""
    conversations = encoder.encode_many([r["prompt"] + [r[key]] for r in records for key in ("chosen", "rejected")])
    pairs = [EncodedPair(_response_only(c, encoder), _response_only(r, encoder))
             for c, r in zip(conversations[0::2], conversations[1::2], strict=True)]
    kept = [p for p in pairs if len(p) <= row_len]
    return kept, {"pairs": len(pairs), "kept": len(kept), "left_out_long": len(pairs) - len(kept)}


def _response_only(conversation: EncodedConversation, encoder: ChatEncoder) -> EncodedConversation:
    """The conversation with only its last message (the response) marked as trained."""
    last_start = int(np.flatnonzero(conversation.ids == encoder.im_start_id)[-1])
    mask = conversation.assistant_mask.copy()
    mask[:last_start] = False
    return EncodedConversation(conversation.ids, mask)


@dataclass
class PairBatch:
    """Pairs as rows: ``tokens_P2T`` (pair, chosen/rejected, position), targets ``IGNORE_INDEX`` outside the
    responses; ``num_pairs`` counts the pairs of the whole optimiser step, over every rank."""

    tokens_P2T: torch.Tensor
    targets_P2T: torch.Tensor
    num_pairs: int

    def to(self, device: torch.device | str, non_blocking: bool = False) -> PairBatch:
        return PairBatch(self.tokens_P2T.to(device, non_blocking=non_blocking),
                         self.targets_P2T.to(device, non_blocking=non_blocking), self.num_pairs)

    def split(self, pairs: int) -> list[PairBatch]:
        """Micro-batches of ``pairs`` pairs (the step's count stays global)."""
        return [PairBatch(t, y, self.num_pairs)
                for t, y in zip(self.tokens_P2T.split(pairs), self.targets_P2T.split(pairs), strict=True)]

    def __len__(self) -> int:
        return self.tokens_P2T.shape[0]


def collate_pairs(pairs: Sequence[EncodedPair], pad_id: int) -> PairBatch:
    """``pairs`` as one :class:`PairBatch` (``num_pairs`` = these pairs)."""
    width = max(len(p) for p in pairs)
    width = -(-(width - 1) // PAD_MULTIPLE) * PAD_MULTIPLE + 1
    ids = np.full((len(pairs), 2, width), pad_id, dtype=np.int64)
    trained = np.zeros((len(pairs), 2, width), dtype=bool)
    for i, pair in enumerate(pairs):
        for j, side in enumerate((pair.chosen, pair.rejected)):
            ids[i, j, : len(side.ids)] = side.ids
            trained[i, j, : len(side.ids)] = side.assistant_mask
    targets = np.where(trained[..., 1:], ids[..., 1:], IGNORE_INDEX)
    return PairBatch(torch.from_numpy(ids[..., :-1].copy()), torch.from_numpy(targets), len(pairs))


def response_logps(logits_RTV: torch.Tensor, targets_RT: torch.Tensor) -> torch.Tensor:
    """(R,) log-probability of each row's trained targets, summed (nats; ignored targets add nothing)."""
    nats_RT = F.cross_entropy(logits_RTV.float().flatten(0, 1), targets_RT.flatten(), reduction="none")
    return -nats_RT.view(targets_RT.shape).sum(dim=1)


def pair_logps(model: nn.Module, batch: PairBatch) -> torch.Tensor:
    """(P, 2) log π of the chosen and rejected responses of each pair under ``model``."""
    tokens_RT = batch.tokens_P2T.flatten(0, 1)
    return response_logps(model(tokens_RT), batch.targets_P2T.flatten(0, 1)).view(-1, 2)


def dpo_losses(policy_P2: torch.Tensor, reference_P2: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss of each pair, reward margin of each pair) from (P, 2) log-probabilities [chosen, rejected]."""
    rewards_P2 = beta * (policy_P2 - reference_P2)
    margins_P = rewards_P2[:, 0] - rewards_P2[:, 1]
    return -F.logsigmoid(margins_P), margins_P


class Preference:
    """The DPO objective for the trainer (:mod:`glasslab.train.objectives` is its contract): the sum of the
    pairs' losses, averaged by the trainer over the step's pairs; the reference runs under no gradient."""

    def __init__(self, reference: nn.Module, beta: float) -> None:
        self.reference = reference.eval().requires_grad_(False)
        self.beta = beta
        self._margins: list[torch.Tensor] = []

    def loss_tokens(self, batch: PairBatch) -> int:
        # Called once as each step begins: the margins gathered are that step's (a skipped step's are dropped).
        self._margins = []
        return batch.num_pairs

    def nats(self, net: nn.Module, micro: PairBatch, autocast: Autocast) -> torch.Tensor:
        with autocast():
            policy_P2 = pair_logps(net, micro)
        with torch.no_grad(), autocast():
            reference_P2 = pair_logps(self.reference, micro)
        losses_P, margins_P = dpo_losses(policy_P2, reference_P2, self.beta)
        self._margins.append(margins_P.detach())
        return losses_P.sum()

    def metrics(self, loss: float, batch: PairBatch) -> dict[str, float]:
        margins = torch.cat(self._margins)
        return {"dpo/loss": loss, "dpo/reward_margin": margins.mean().item(),
                "dpo/accuracy": (margins > 0).float().mean().item()}


class PairLoader(EpochStream):
    """Batches of ``global_batch // world_size`` pairs for one data-parallel rank: the items of its stream
    (:mod:`glasslab.posttrain.stream`) are the pairs, each epoch in an order drawn from ``(seed, epoch)``."""

    name = "dpo"

    def __init__(self, pairs: Sequence[EncodedPair], global_batch: int, pad_id: int, seed: int = 0, rank: int = 0,
                 world_size: int = 1) -> None:
        super().__init__(global_batch, seed, rank, world_size)
        if not pairs:
            raise UserError("no preference pair fits a row of train.seq_len + 1 tokens; raise train.seq_len")
        self.pairs, self.pad_id = list(pairs), pad_id

    def items_of_epoch(self, epoch: int) -> list[int]:
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.pairs)).tolist()

    def next_batch(self) -> PairBatch:
        batch = collate_pairs([self.pairs[i] for i in self.mine(self.draw())], self.pad_id)
        batch.num_pairs = self.global_batch
        return batch

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "pairs": len(self.pairs)}


@torch.no_grad()
def heldout_logps(model: nn.Module, pairs: Sequence[EncodedPair], batch_size: int, pad_id: int,
                  device: torch.device) -> torch.Tensor:
    """(N, 2) log π of every held-out pair's chosen and rejected response (eval mode, then back)."""
    was_training = model.training
    model.eval()
    try:
        out = [pair_logps(model, collate_pairs(pairs[i : i + batch_size], pad_id).to(device)).cpu()
               for i in range(0, len(pairs), batch_size)]
    finally:
        model.train(was_training)
    return torch.cat(out)


def preference_metrics(policy_N2: torch.Tensor, reference_N2: torch.Tensor, beta: float) -> dict[str, float]:
    """``eval/dpo/...`` of held-out pairs: ``pref_accuracy`` (log π(c) > log π(r), the model alone), and with
    the reference the mean ``loss``, ``reward_margin`` and ``accuracy`` (share of positive margins)."""
    losses, margins = dpo_losses(policy_N2, reference_N2, beta)
    return {"eval/dpo/pref_accuracy": (policy_N2[:, 0] > policy_N2[:, 1]).float().mean().item(),
            "eval/dpo/loss": losses.mean().item(), "eval/dpo/reward_margin": margins.mean().item(),
            "eval/dpo/accuracy": (margins > 0).float().mean().item()}
