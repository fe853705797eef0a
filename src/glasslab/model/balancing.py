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


class StepStatistics:
    """A balancer step's routing statistics while still on the device: one flat float64 tensor
    (``values``) that reaches the host in a single transfer, however many layers there are (the
    trainer sends it together with its own per-step numbers). :meth:`read` names them."""

    def __init__(self, layers: list[MoEFeedForward], values: torch.Tensor) -> None:
        self.layers = layers
        self.values = values

    def read(self, host_values: list[float] | None = None) -> MoEStepStats:
        """The statistics as :class:`MoEStepStats`, from ``host_values`` (``values`` already on the
        host) or by fetching ``values`` now."""
        values = self.values.tolist() if host_values is None else host_values
        stats = MoEStepStats()
        offset = 0
        for layer in self.layers:
            E = layer.moe.num_experts
            tokens, violation, entropy, bias_norm, dropped = values[offset : offset + 5]
            load_E, bias_E = values[offset + 5 : offset + 5 + E], values[offset + 5 + E : offset + 5 + 2 * E]
            offset += 5 + 2 * E
            if tokens == 0:
                continue
            prefix = f"moe/layer_{layer.layer_index}"
            stats.scalars[f"{prefix}/load_max_violation"] = violation
            stats.scalars[f"{prefix}/routing_entropy"] = entropy
            stats.scalars[f"{prefix}/router_bias_norm"] = bias_norm
            stats.scalars[f"{prefix}/dropped_tokens"] = dropped
            stats.vectors[f"{prefix}/expert_load"] = load_E
            stats.vectors[f"{prefix}/router_bias"] = bias_E
        return stats


class Balancer:
    """Reads every MoE layer's pending routing statistics once per optimiser step and updates biases."""

    def __init__(self, model: nn.Module) -> None:
        self.layers: list[MoEFeedForward] = [m for m in model.modules() if isinstance(m, MoEFeedForward)]

    def step(self, group: dist.ProcessGroup | None = None) -> MoEStepStats:
        """All-reduce pending statistics over ranks, update router biases, reset; return the stats."""
        return self.update(group).read()

    @torch.no_grad()
    def update(self, group: dist.ProcessGroup | None = None) -> StepStatistics:
        """:meth:`step` without reading the statistics back: nothing here waits for the device."""
        if not self.layers:
            return StepStatistics([], torch.zeros(0, dtype=torch.float64))
        self._all_reduce(group)
        rows = [self._update_layer(layer) for layer in self.layers]
        for layer in self.layers:
            layer.pending.zero_()
        return StepStatistics(self.layers, torch.cat(rows))

    def _all_reduce(self, group: dist.ProcessGroup | None) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            return
        # Two flat tensors (integer counts, fp64 entropy sums): one collective each for all layers.
        pendings = [m.pending for m in self.layers]
        counts = [t for p in pendings for n, t in p.tensors().items() if n != "entropy_sum"]
        flat = torch.cat([t.reshape(-1) for t in counts])
        entropy = torch.stack([p.entropy_sum for p in pendings])
        dist.all_reduce(flat, group=group)
        dist.all_reduce(entropy, group=group)
        offset = 0
        for t in counts:
            t.copy_(flat[offset : offset + t.numel()].view_as(t))
            offset += t.numel()
        for p, value in zip(pendings, entropy, strict=True):
            p.entropy_sum.copy_(value)

    def _update_layer(self, layer: MoEFeedForward) -> torch.Tensor:
        """Update one layer's bias (unless it routed no tokens since the last step); return its
        statistics as float64: tokens, load_max_violation, routing_entropy, router_bias_norm,
        dropped_tokens, then expert_load (E) and router_bias (E)."""
        moe, bias_E = layer.moe, layer.router.bias
        pending = layer.pending
        counts_E = pending.counts_E.double()
        tokens = pending.tokens.double()
        if moe.balancing == "sign":
            delta_E = sign_rule_delta(counts_E, moe.bias_update_rate)
        elif moe.balancing == "quantile" and moe.top_k < moe.num_experts:
            delta_E = quantile_rule_delta(pending.margin_hist_EB, moe.top_k, moe.bias_update_rate)
        else:
            delta_E = torch.zeros_like(counts_E)
        new_bias = bias_E.double() + delta_E
        # A layer that routed nothing keeps its bias bit for bit (decided on the device: no sync).
        bias_E.copy_(torch.where(tokens > 0, (new_bias - new_bias.mean()).float(), bias_E))
        scalars = torch.stack([
            tokens,
            counts_E.max() / counts_E.mean() - 1,
            pending.entropy_sum / tokens,
            bias_E.norm().double(),
            pending.dropped.double() / (tokens * moe.top_k),
        ])
        return torch.cat([scalars, counts_E / counts_E.sum(), bias_E.double()])

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Statistics accumulated since the last step (the biases themselves are in the model's state)."""
        return {
            f"{m.layer_index}.{n}": t.clone() for m in self.layers for n, t in m.pending.tensors().items()
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for m in self.layers:
            for n, t in m.pending.tensors().items():
                t.copy_(state[f"{m.layer_index}.{n}"])
