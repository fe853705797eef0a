"""Auxiliary-loss-free load balancing: router-bias rules applied once per optimiser step.

Each MoE layer's router adds an fp32 bias to its expert scores to choose experts (never to the gate
weights). The bias is balancing state, not a parameter: gradients never touch it. During training
forwards every layer accumulates its expert counts (and, for the quantile rule, histograms of score
margins); ``Balancer.step()`` — called by the trainer once per optimiser step, after all micro-batches
— sums those over data-parallel ranks, updates every bias by the configured rule, resets the
accumulators and returns the step's routing statistics under DESIGN.md's metric names.

Rules:

- ``sign`` (DeepSeek-V3): ``bias_e += γ · sign(mean load − load_e)``.
- ``quantile`` (as Marin's hero run): from the margin histogram of expert e, the shift δ_e that would
  give e exactly its share ``top_k / num_experts`` of the step's tokens (other biases held fixed);
  ``bias_e += rate · δ_e``. Large imbalances are fixed in a few steps instead of ~imbalance/γ.

Both rules then subtract the mean bias; top-k choice is unchanged by a common shift and the bias norm
stays meaningful as a log.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from glasslab.model.moe import MoEFeedForward
from glasslab.model.routing import MARGIN_BINS, unit_to_margin


@dataclass
class MoEStepStats:
    """Routing statistics of one optimiser step, named as DESIGN.md's metrics, per MoE layer i:

    - ``moe/layer_<i>/load_max_violation``: max expert load / mean expert load − 1 (0 = balanced);
    - ``moe/layer_<i>/routing_entropy``: mean over tokens of the entropy of the token's routing
      distribution (softmax probabilities, or sigmoid scores normalised to sum 1), in nats;
    - ``moe/layer_<i>/router_bias_norm``: L2 norm of the bias after this step's update;
    - ``moe/layer_<i>/dropped_tokens``: fraction of (token, expert) assignments dropped by the capacity
      limit (always 0 when dropless);
    - vectors ``moe/layer_<i>/expert_load`` (fractions of assignments, summing to 1) and
      ``moe/layer_<i>/router_bias`` (after the update).

    Layers that routed no training tokens since the last step are absent.
    """

    scalars: dict[str, float] = field(default_factory=dict)
    vectors: dict[str, list[float]] = field(default_factory=dict)


def sign_rule_delta(counts_E: torch.Tensor, rate: float) -> torch.Tensor:
    """DeepSeek-V3: raise the bias of under-loaded experts by γ, lower over-loaded ones by γ."""
    counts = counts_E.double()
    return rate * torch.sign(counts.mean() - counts)


def quantile_rule_delta(hist_EB: torch.Tensor, top_k: int, rate: float) -> torch.Tensor:
    """Shift per expert that gives each its share top_k/E of tokens, from (E, bins) margin histograms."""
    E = hist_EB.shape[0]
    hist = hist_EB.double()
    tokens_E1 = hist.sum(dim=1, keepdim=True)
    cdf_EB = hist.cumsum(dim=1)
    # Tokens choose e when margin + δ > 0: δ = -(1 - share) quantile of e's margins.
    target_E1 = (1.0 - top_k / E) * tokens_E1
    bin_E1 = torch.searchsorted(cdf_EB, target_E1).clamp_(max=MARGIN_BINS - 1)
    below_E1 = torch.where(
        bin_E1 > 0, cdf_EB.gather(1, (bin_E1 - 1).clamp(min=0)), torch.zeros_like(target_E1)
    )
    in_bin_E1 = hist.gather(1, bin_E1).clamp(min=1.0)
    fraction_E1 = ((target_E1 - below_E1) / in_bin_E1).clamp(0, 1)
    quantile_E1 = unit_to_margin(-1 + (bin_E1.double() + fraction_E1) * (2 / MARGIN_BINS))
    return rate * -quantile_E1.squeeze(1)


class Balancer:
    """Reads every MoE layer's pending routing statistics once per optimiser step and updates biases."""

    def __init__(self, model: nn.Module) -> None:
        self.layers: list[MoEFeedForward] = [m for m in model.modules() if isinstance(m, MoEFeedForward)]

    @torch.no_grad()
    def step(self, group: dist.ProcessGroup | None = None) -> MoEStepStats:
        """All-reduce pending statistics over ranks, update router biases, reset; return the stats."""
        stats = MoEStepStats()
        if not self.layers:
            return stats
        self._all_reduce(group)
        for layer in self.layers:
            self._update_layer(layer, stats)
            layer.pending.zero_()
        return stats

    def _all_reduce(self, group: dist.ProcessGroup | None) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            return
        # Two flat tensors (integer counts, fp64 entropy sums): one collective each for all layers,
        # on the model's device (a rank that routed nothing yet may still hold CPU accumulators).
        device = self.layers[0].router.bias.device
        pendings = [m.pending for m in self.layers]
        counts = [t for p in pendings for n, t in p.tensors().items() if n != "entropy_sum"]
        flat = torch.cat([t.reshape(-1).to(device) for t in counts])
        entropy = torch.stack([p.entropy_sum.to(device) for p in pendings])
        dist.all_reduce(flat, group=group)
        dist.all_reduce(entropy, group=group)
        offset = 0
        for t in counts:
            t.copy_(flat[offset : offset + t.numel()].view_as(t))
            offset += t.numel()
        for p, value in zip(pendings, entropy, strict=True):
            p.entropy_sum.copy_(value)

    def _update_layer(self, layer: MoEFeedForward, stats: MoEStepStats) -> None:
        moe, bias_E = layer.moe, layer.router.bias
        pending = layer.pending
        counts_E = pending.counts_E.double()
        tokens = int(pending.tokens)
        if tokens == 0:
            return
        if moe.balancing == "sign":
            delta_E = sign_rule_delta(counts_E, moe.bias_update_rate)
        elif moe.balancing == "quantile" and moe.top_k < moe.num_experts:
            delta_E = quantile_rule_delta(pending.margin_hist_EB, moe.top_k, moe.bias_update_rate)
        else:
            delta_E = torch.zeros_like(counts_E)
        new_bias = bias_E.double() + delta_E.to(bias_E.device)
        bias_E.copy_((new_bias - new_bias.mean()).float())
        prefix = f"moe/layer_{layer.layer_index}"
        load_E = counts_E / counts_E.sum()
        stats.scalars[f"{prefix}/load_max_violation"] = float(counts_E.max() / counts_E.mean() - 1)
        stats.scalars[f"{prefix}/routing_entropy"] = float(pending.entropy_sum) / tokens
        stats.scalars[f"{prefix}/router_bias_norm"] = float(bias_E.norm())
        stats.scalars[f"{prefix}/dropped_tokens"] = float(pending.dropped) / (tokens * moe.top_k)
        stats.vectors[f"{prefix}/expert_load"] = load_E.tolist()
        stats.vectors[f"{prefix}/router_bias"] = bias_E.tolist()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Statistics accumulated since the last step (the biases themselves are in the model's state)."""
        return {
            f"{m.layer_index}.{n}": t.clone() for m in self.layers for n, t in m.pending.tensors().items()
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for m in self.layers:
            for n, t in m.pending.tensors().items():
                t.copy_(state[f"{m.layer_index}.{n}"])
