"""What a router decided for a batch of tokens, and the statistics of those decisions that the balancer
and the logs need.

The MoE layer (``model.moe``) produces a :class:`Routing` per forward and adds it to its
:class:`PendingRouting`; the balancer (``model.balancing``) all-reduces, reads and resets those once per
optimiser step. Neither side needs the other's internals: this module is the contract between them
(and a later expert-parallel dispatcher only has to keep producing a ``Routing``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MARGIN_BINS = 1024
"""Bins of the per-expert score-margin histogram (the quantile balancing rule)."""
MARGIN_RANGE = 2.0
"""Margins are histogrammed over [-MARGIN_RANGE, MARGIN_RANGE] (scores lie in [0, 1], plus the bias).

Bins are uniform in u = sign(m)·sqrt(|m| / MARGIN_RANGE), so they are finest near a zero margin, where
the balancing decision is made: softmax scores of many experts differ by only ~1e-3."""


def margin_to_unit(margin: torch.Tensor) -> torch.Tensor:
    """Margin → u in [-1, 1] (the histogram's uniform coordinate)."""
    return torch.sign(margin) * (margin.abs() / MARGIN_RANGE).clamp(max=1.0).sqrt()


def unit_to_margin(u: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`margin_to_unit`."""
    return torch.sign(u) * u.square() * MARGIN_RANGE


@dataclass
class Routing:
    """One forward's routing decision for T tokens over E experts, top-k of them per token."""

    expert_TK: torch.Tensor  # chosen experts (long)
    gate_TK: torch.Tensor  # gate weights of the chosen experts (fp32)
    logits_TE: torch.Tensor  # router logits (fp32)
    probs_TE: torch.Tensor  # per-token routing distribution (softmax, or sigmoid scores normalised)
    choice_TE: torch.Tensor  # scores + bias, what top-k was taken over (fp32, detached)


def expert_counts(expert_TK: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Assignments per expert (E,) as long, with a fixed output shape (no host sync, compiles)."""
    flat = expert_TK.reshape(-1)
    return torch.zeros(num_experts, dtype=torch.long, device=flat.device).scatter_add_(
        0, flat, torch.ones_like(flat)
    )


class PendingRouting:
    """Routing statistics summed since the last balancer step (one MoE layer).

    Plain tensors, not module buffers, on purpose: DDP broadcasts buffers from rank 0 before every
    forward, which would overwrite each rank's own counts before the balancer all-reduces them.
    """

    FIELDS = ("counts_E", "dropped", "tokens", "entropy_sum", "margin_hist_EB")

    def __init__(self, num_experts: int, with_margins: bool, device: torch.device | str = "cpu") -> None:
        self.counts_E = torch.zeros(num_experts, dtype=torch.long, device=device)
        self.dropped = torch.zeros((), dtype=torch.long, device=device)
        self.tokens = torch.zeros((), dtype=torch.long, device=device)
        self.entropy_sum = torch.zeros((), dtype=torch.float64, device=device)
        hist_rows = num_experts if with_margins else 0
        self.margin_hist_EB = torch.zeros(hist_rows, MARGIN_BINS, dtype=torch.long, device=device)

    def tensors(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in self.FIELDS}

    def to_(self, device: torch.device) -> None:
        """Move the accumulators to ``device`` (their dtypes stay: counts are integers, sums fp64)."""
        for name, t in self.tensors().items():
            setattr(self, name, t.to(device))

    def zero_(self) -> None:
        for t in self.tensors().values():
            t.zero_()

    def add(self, routing: Routing, counts_E: torch.Tensor, dropped: torch.Tensor | None) -> None:
        """Add one forward: its routing, its assignments per expert and how many a capacity dropped
        (on the accumulators' device: the MoE layer moves them along with itself)."""
        self.counts_E += counts_E
        self.tokens += routing.expert_TK.shape[0]
        if dropped is not None:
            self.dropped += dropped
        self.entropy_sum += routing_entropy_sum(routing.probs_TE)
        if self.margin_hist_EB.numel():
            self.margin_hist_EB += margin_histogram(routing.choice_TE, routing.expert_TK)


def routing_entropy_sum(probs_TE: torch.Tensor) -> torch.Tensor:
    """Sum over tokens of the entropy (nats) of each token's routing distribution, as fp64."""
    return -(probs_TE * probs_TE.clamp_min(1e-30).log()).sum().double()


def margin_histogram(choice_TE: torch.Tensor, expert_TK: torch.Tensor) -> torch.Tensor:
    """Per-expert histogram (E, MARGIN_BINS) of each token's score margin for that expert.

    The margin of expert e for token t is how far e's biased score is above the score it must beat to
    be chosen: the k-th best other score if e is not chosen, the (k+1)-th best if it is. A bias shift
    of δ on e alone makes t choose e exactly when margin + δ > 0, so the histogram tells the quantile
    rule which shift gives e any share of the tokens.
    """
    T, E = choice_TE.shape
    K = expert_TK.shape[1]
    top_TK1 = torch.topk(choice_TE, min(K + 1, E), dim=-1).values
    kth_T1, next_T1 = top_TK1[:, K - 1 : K], top_TK1[:, -1:]
    chosen_TE = torch.zeros_like(choice_TE, dtype=torch.bool).scatter_(1, expert_TK, True)
    margin_TE = choice_TE - torch.where(chosen_TE, next_T1, kth_T1)
    bin_TE = ((margin_to_unit(margin_TE) + 1) * (MARGIN_BINS / 2)).long().clamp_(0, MARGIN_BINS - 1)
    flat = (torch.arange(E, device=choice_TE.device) * MARGIN_BINS)[None, :] + bin_TE
    hist = torch.zeros(E * MARGIN_BINS, dtype=torch.long, device=choice_TE.device)
    return hist.scatter_add_(0, flat.reshape(-1), torch.ones_like(flat).reshape(-1)).view(E, MARGIN_BINS)
