"""What the loop minimises: pretraining and SFT are two objectives of one trainer.

An objective turns a micro-batch into the sum of its token losses (nats) and says how many tokens
the whole optimiser step's loss is averaged over, so the loop's gradient is always
(sum of counted token losses / counted tokens in the global batch), whatever the objective. The
model computes that sum itself from the targets (``forward(..., targets_BT=...)``): inside its
forward the LM head's weight is whole even under FSDP2, and the logits are made a chunk at a time.

- :class:`NextToken` (pretraining): a LongTensor ``(B, seq_len + 1)``; every next token counts.
- :class:`AssistantOnly` (SFT): an :class:`~glasslab.data.packing.SFTBatch`; only the tokens the
  assistant wrote count, and packed conversations attend only within themselves. It also names
  ``sft/loss`` and ``sft/assistant_tokens`` for the step's metrics.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

Autocast = Callable[[], contextlib.AbstractContextManager]


class NextToken:
    """Pretraining: mean next-token loss over every token of the global batch."""

    def __init__(self, global_batch_tokens: int) -> None:
        self.global_batch_tokens = global_batch_tokens

    def loss_tokens(self, batch: torch.Tensor) -> int:
        return self.global_batch_tokens

    def nats(self, net: nn.Module, micro: torch.Tensor, autocast: Autocast) -> torch.Tensor:
        with autocast():
            return net(micro[:, :-1], targets_BT=micro[:, 1:])

    def metrics(self, loss: float, batch: torch.Tensor) -> dict[str, float]:
        return {}


class AssistantOnly:
    """SFT: mean loss over the assistant's tokens of the global batch (targets elsewhere are ignored)."""

    def loss_tokens(self, batch: Any) -> int:
        return batch.loss_tokens

    def nats(self, net: nn.Module, micro: Any, autocast: Autocast) -> torch.Tensor:
        # Ignored targets (IGNORE_INDEX, cross_entropy's default) add nothing to the sum.
        with autocast():
            return net(micro.tokens_BT, doc_ids_BT=micro.doc_ids_BT, targets_BT=micro.targets_BT)

    def metrics(self, loss: float, batch: Any) -> dict[str, float]:
        return {"sft/loss": loss, "sft/assistant_tokens": float(batch.assistant_tokens_seen)}
