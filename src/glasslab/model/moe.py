"""The mixture-of-experts feed-forward: router, token dispatch, grouped experts, routing statistics.

Routing matches GLM-4-MoE / DeepSeek-V3 (``Glm4MoeTopkRouter`` in ``transformers``) so that a
sigmoid model exports exactly: router logits are computed in fp32, scores are ``sigmoid(logits)`` (or
``softmax``), the balancing bias is added to the scores **only to choose** the top-k experts, the gate
weights are the unbiased scores of the chosen experts, renormalised to sum to 1 when
``norm_topk_prob`` (plus 1e-20, as GLM does), then multiplied by ``routed_scaling_factor``. With a
softmax router and a zero bias this is exactly Qwen3-MoE's routing.

Dispatch sorts the (token, expert) assignments by expert so each expert's tokens are contiguous, runs
all experts as one grouped matmul (``torch._grouped_mm`` where it runs forward and backward on the
device/dtype, else one matmul per expert over its contiguous slice), and adds the gated outputs back
per token. Nothing loops over tokens in Python.

While training (and not while autograd recomputes a checkpointed forward) each layer accumulates the
statistics the balancing rule and the logs need; ``model.balancing.Balancer`` reads and resets them
once per optimiser step.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from glasslab.model.config import ModelConfig, MoEConfig
from glasslab.model.layers import SwiGLU

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
    """One forward's routing decision for T tokens."""

    expert_TK: torch.Tensor  # chosen experts (long)
    gate_TK: torch.Tensor  # gate weights of the chosen experts (fp32)
    logits_TE: torch.Tensor  # router logits (fp32)
    probs_TE: torch.Tensor  # per-token routing distribution (softmax, or sigmoid scores normalised)
    choice_TE: torch.Tensor  # scores + bias, what top-k was taken over (fp32)


class Router(nn.Module):
    """Scores every expert for every token and picks ``top_k`` by bias-corrected score."""

    def __init__(self, d_model: int, moe: MoEConfig) -> None:
        super().__init__()
        self.moe = moe
        self.weight = nn.Parameter(torch.empty(moe.num_experts, d_model))
        # Balancing state, not a parameter: set by the balancing rule, never by gradients.
        self.register_buffer("bias", torch.zeros(moe.num_experts, dtype=torch.float32))

    def _apply(self, fn, recurse=True):
        # model.to(bfloat16) must not round the bias: keep it fp32 like GLM's e_score_correction_bias.
        super()._apply(fn, recurse)
        if self.bias.dtype != torch.float32:
            self.bias = self.bias.float()
        return self

    def forward(self, x_TD: torch.Tensor) -> Routing:
        logits_TE = F.linear(x_TD.float(), self.weight.float())
        if self.moe.router == "sigmoid":
            scores_TE = torch.sigmoid(logits_TE)
            probs_TE = scores_TE / scores_TE.sum(dim=-1, keepdim=True)
        else:
            scores_TE = torch.softmax(logits_TE, dim=-1)
            probs_TE = scores_TE
        choice_TE = scores_TE + self.bias
        expert_TK = torch.topk(choice_TE.detach(), self.moe.top_k, dim=-1).indices
        gate_TK = scores_TE.gather(1, expert_TK)
        if self.moe.norm_topk_prob:
            gate_TK = gate_TK / (gate_TK.sum(dim=-1, keepdim=True) + 1e-20)
        gate_TK = gate_TK * self.moe.routed_scaling_factor
        return Routing(expert_TK, gate_TK, logits_TE, probs_TE, choice_TE.detach())


@functools.cache
def grouped_mm_works(device_type: str, dtype: torch.dtype) -> bool:
    """Whether ``torch._grouped_mm`` runs forward and backward here (it is a private, evolving op)."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    try:
        # The first MoE forward may run under no_grad or inference_mode; the probe needs autograd.
        with torch.inference_mode(False), torch.enable_grad():
            return _probe_grouped_mm(device_type, dtype)
    except (RuntimeError, NotImplementedError, TypeError):
        return False


def _probe_grouped_mm(device_type: str, dtype: torch.dtype) -> bool:
    x = torch.randn(32, 16, device=device_type, dtype=dtype, requires_grad=True)
    w = torch.randn(2, 16, 16, device=device_type, dtype=dtype, requires_grad=True)
    offsets = torch.tensor([16, 32], device=device_type, dtype=torch.int32)
    y = torch._grouped_mm(x, w, offs=offsets)
    y.backward(torch.ones_like(y))  # a dense gradient: CPU kernels reject expanded (stride-0) ones
    return True


class GroupedExperts(nn.Module):
    """``num_experts`` SwiGLU experts stored as stacked weights, run over expert-sorted tokens."""

    def __init__(self, d_model: int, moe: MoEConfig) -> None:
        super().__init__()
        E, F_ = moe.num_experts, moe.d_expert
        self.d_expert = F_
        self.gate_up_EDF2 = nn.Parameter(torch.empty(E, d_model, 2 * F_))  # gate columns first
        self.down_EFD = nn.Parameter(torch.empty(E, F_, d_model))

    def forward(self, x_ND: torch.Tensor, counts_E: torch.Tensor) -> torch.Tensor:
        """Rows of ``x_ND`` are sorted by expert, ``counts_E[e]`` of them for expert e."""
        if torch.compiler.is_compiling() and x_ND.dtype == torch.bfloat16 and hasattr(torch, "_grouped_mm"):
            return self._grouped(x_ND, counts_E)
        return self._eager(x_ND, counts_E)

    # torch.compile traces _grouped_mm with a shape rule that accepts only bf16 (torch 2.13) and cannot
    # trace the probe: other dtypes run the experts outside the compiled graph.
    @torch.compiler.disable
    def _eager(self, x_ND: torch.Tensor, counts_E: torch.Tensor) -> torch.Tensor:
        if grouped_mm_works(x_ND.device.type, x_ND.dtype):
            return self._grouped(x_ND, counts_E)
        return self._looped(x_ND, counts_E)

    def _grouped(self, x_ND: torch.Tensor, counts_E: torch.Tensor) -> torch.Tensor:
        offsets_E = torch.cumsum(counts_E, 0).to(torch.int32)
        h_NF2 = torch._grouped_mm(x_ND, self.gate_up_EDF2, offs=offsets_E)
        gate, up = h_NF2.chunk(2, dim=-1)
        return torch._grouped_mm(F.silu(gate) * up, self.down_EFD, offs=offsets_E)

    def _looped(self, x_ND: torch.Tensor, counts_E: torch.Tensor) -> torch.Tensor:
        outputs = []
        # unbind, not indexing: its backward stacks the per-expert gradients once, where indexing
        # would allocate and add a full (E, D, 2F) zero gradient per expert.
        experts = zip(self.gate_up_EDF2.unbind(0), self.down_EFD.unbind(0), strict=True)
        for x_nD, (gate_up_DF2, down_FD) in zip(x_ND.split(counts_E.tolist()), experts, strict=True):
            if x_nD.shape[0] == 0:
                continue
            gate, up = (x_nD @ gate_up_DF2).chunk(2, dim=-1)
            outputs.append((F.silu(gate) * up) @ down_FD)
        if not outputs:
            return x_ND.new_zeros(x_ND.shape)
        return torch.cat(outputs)


def in_backward_recompute() -> bool:
    """True while autograd runs a backward pass (activation checkpointing recomputes forwards there)."""
    return torch._C._current_graph_task_id() != -1


class MoEFeedForward(nn.Module):
    """Routed experts (+ shared experts) replacing a block's dense feed-forward."""

    def __init__(self, cfg: ModelConfig, layer_index: int) -> None:
        super().__init__()
        moe = cfg.moe
        assert moe is not None
        self.moe = moe
        self.layer_index = layer_index
        self.router = Router(cfg.d_model, moe)
        self.experts = GroupedExperts(cfg.d_model, moe)
        shared_width = moe.num_shared_experts * moe.d_expert
        # n shared experts of width d_expert sum to exactly one SwiGLU of width n · d_expert.
        self.shared = SwiGLU(cfg.d_model, shared_width) if shared_width else None
        self.aux_loss: torch.Tensor | None = None
        self.pending = PendingRouting(moe.num_experts, with_margins=moe.balancing == "quantile")

    def forward(self, x_BTD: torch.Tensor) -> torch.Tensor:
        B, T, D = x_BTD.shape
        x_TD = x_BTD.reshape(B * T, D)
        routing = self.router(x_TD)
        K, E = self.moe.top_k, self.moe.num_experts
        expert_N = routing.expert_TK.reshape(-1)
        order_N = torch.argsort(expert_N, stable=True)
        counts_E = torch.bincount(expert_N, minlength=E)
        token_N = order_N // K
        gate_N = routing.gate_TK.reshape(-1)[order_N]
        kept_counts_E, dropped = counts_E, None
        if self.moe.capacity_factor is not None:
            capacity = math.ceil(self.moe.capacity_factor * B * T * K / E)
            starts_E = torch.cumsum(counts_E, 0) - counts_E
            rank_N = torch.arange(expert_N.numel(), device=x_TD.device) - starts_E[expert_N[order_N]]
            keep_N = rank_N < capacity
            token_N, gate_N = token_N[keep_N], gate_N[keep_N]
            kept_counts_E = counts_E.clamp(max=capacity)
            dropped = expert_N.numel() - keep_N.sum()
        y_ND = self.experts(x_TD[token_N], kept_counts_E)
        y_ND = y_ND * gate_N.to(y_ND.dtype)[:, None]
        out_TD = torch.zeros_like(x_TD).index_add_(0, token_N, y_ND)
        if self.shared is not None:
            out_TD = out_TD + self.shared(x_TD)
        self._after_routing(routing, counts_E, dropped)
        return out_TD.view(B, T, D)

    def _after_routing(self, routing: Routing, counts_E: torch.Tensor, dropped: torch.Tensor | None) -> None:
        """Auxiliary losses for this forward and, in training, the balancer's pending statistics."""
        self.aux_loss = None
        if not self.training:
            return
        T = routing.expert_TK.shape[0]
        losses = []
        if self.moe.balance_loss_coef > 0:
            load_E = counts_E.float() / (T * self.moe.top_k)
            importance_E = routing.probs_TE.mean(dim=0)
            losses.append(self.moe.balance_loss_coef * self.moe.num_experts * (load_E * importance_E).sum())
        if self.moe.router_z_loss_coef > 0:
            z_T = torch.logsumexp(routing.logits_TE, dim=-1)
            losses.append(self.moe.router_z_loss_coef * (z_T**2).mean())
        if losses:
            self.aux_loss = torch.stack(losses).sum()
        if in_backward_recompute():
            return
        with torch.no_grad():
            self.pending.add(routing, counts_E, dropped)


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
        for name, t in self.tensors().items():
            setattr(self, name, t.to(device))

    def zero_(self) -> None:
        for t in self.tensors().values():
            t.zero_()

    def add(self, routing: Routing, counts_E: torch.Tensor, dropped: torch.Tensor | None) -> None:
        if self.counts_E.device != counts_E.device:
            self.to_(counts_E.device)
        self.counts_E += counts_E
        self.tokens += routing.expert_TK.shape[0]
        if dropped is not None:
            self.dropped += dropped
        probs_TE = routing.probs_TE
        entropy_T = -(probs_TE * probs_TE.clamp_min(1e-30).log()).sum(dim=-1)
        self.entropy_sum += entropy_T.double().sum()
        if self.margin_hist_EB.numel():
            self.margin_hist_EB += margin_histogram(routing.choice_TE, routing.expert_TK)


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
    return torch.bincount(flat.reshape(-1), minlength=E * MARGIN_BINS).view(E, MARGIN_BINS)
