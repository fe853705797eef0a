"""The LM head and its next-token cross-entropy together, a chunk of tokens at a time, so that the
logits of a whole micro-batch never exist at once.

Training through full logits holds about 10 bytes per token per vocabulary entry: the head's output
(bf16 under autocast), its fp32 copy, the softmax cross-entropy keeps for backward, and the
gradient — 2.7 GB for 8,192 tokens at a 32,768 vocabulary, more than the rest of a small model's
activations. Here each chunk's logits are made, reduced to the chunk's loss (and, for the z-loss,
its sum of squared log-sum-exps) and dropped; backward recomputes them one chunk at a time
(activation checkpointing), so the peak is one chunk's, for one more forward matmul of the head.

A batch that fits in one chunk (every CPU default: the chunk is 2^25 logits, 128 MB in fp32) is
computed exactly as through full logits, with nothing recomputed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

LOGITS_PER_CHUNK = 2**25
"""Logits (tokens × vocabulary) computed at once; a chunk is this many divided by the vocabulary."""


def chunk_tokens(vocab_size: int) -> int:
    """Tokens per chunk at ``vocab_size`` (at least one)."""
    return max(1, LOGITS_PER_CHUNK // vocab_size)


def _chunk_loss(h_ND: torch.Tensor, weight_VD: torch.Tensor, targets_N: torch.Tensor,
                with_z: bool) -> tuple[torch.Tensor, torch.Tensor]:
    logits_NV = F.linear(h_ND, weight_VD).float()
    nats = F.cross_entropy(logits_NV, targets_N, reduction="sum")
    if not with_z:
        return nats, nats.new_zeros(())
    return nats, torch.logsumexp(logits_NV, dim=-1).square().sum()


def head_cross_entropy(h_ND: torch.Tensor, weight_VD: torch.Tensor, targets_N: torch.Tensor, *,
                       chunk: int, with_z: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum over tokens of the cross-entropy of ``h_ND @ weight_VD.T`` against ``targets_N``, in nats;
    sum over tokens of the squared log-sum-exp of those logits, or 0 without ``with_z``), computed
    ``chunk`` tokens at a time. Targets equal to cross_entropy's ignore index (-100) add nothing."""
    if h_ND.shape[0] <= chunk:
        return _chunk_loss(h_ND, weight_VD, targets_N, with_z)
    nats, z = h_ND.new_zeros((), dtype=torch.float32), h_ND.new_zeros((), dtype=torch.float32)
    for h_CD, targets_C in zip(h_ND.split(chunk), targets_N.split(chunk), strict=True):
        chunk_nats, chunk_z = torch.utils.checkpoint.checkpoint(
            _chunk_loss, h_CD, weight_VD, targets_C, with_z, use_reentrant=False)
        nats, z = nats + chunk_nats, z + chunk_z
    return nats, z
