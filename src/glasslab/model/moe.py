"""The mixture-of-experts feed-forward: router, token dispatch, grouped experts, combine.

Routing matches GLM-4-MoE / DeepSeek-V3 (``Glm4MoeTopkRouter`` in ``transformers``) so that a
sigmoid model exports exactly: router logits are computed in fp32, scores are ``sigmoid(logits)`` (or
``softmax``), the balancing bias is added to the scores **only to choose** the top-k experts, the gate
weights are the unbiased scores of the chosen experts, renormalised to sum to 1 when
``norm_topk_prob`` (plus 1e-20, as GLM does), then multiplied by ``routed_scaling_factor``. With a
softmax router and a zero bias this is exactly Qwen3-MoE's routing.

The layer is four pieces, as torchtitan splits it, so that expert parallelism can later replace the
middle two with all-to-alls without touching the rest:

- ``Router``: scores, top-k, gates (a ``routing.Routing``);
- :func:`plan_dispatch` + :func:`dispatch`: one stable sort of the (token, expert) assignments by
  expert gives a permutation; dispatch gathers the tokens' rows in that order (each expert's rows
  contiguous), dropping those over a capacity if one is set;
- ``GroupedExperts``: all experts as one grouped matmul over the sorted rows (``model.grouped_mm``);
- :func:`combine`: the inverse permutation gathers each token's k expert outputs back, scales them by
  the gates and sums them.

Both gathers have gathers as backward (the permutation and its inverse), never a scatter-add, and no
step syncs with the host unless a capacity is set. Nothing loops over tokens or experts in Python.

While training (and not while autograd recomputes a checkpointed forward) each layer adds its routing
statistics to a ``routing.PendingRouting``; ``model.balancing.Balancer`` reads and resets them once
per optimiser step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from glasslab.model.config import ModelConfig, MoEConfig
from glasslab.model.grouped_mm import grouped_mm
from glasslab.model.layers import SwiGLU
from glasslab.model.routing import PendingRouting, Routing, expert_counts


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
        # Under autocast a linear layer would run in bf16, whatever its inputs: a sigmoid score near
        # 0.5 then moves in steps of ~1e-3, coarser than the balancing bias's updates.
        with torch.autocast(x_TD.device.type, enabled=False):
            logits_TE = F.linear(x_TD.float(), self.weight.float())
        if self.moe.router == "sigmoid":
            scores_TE = torch.sigmoid(logits_TE)
            probs_TE = scores_TE / scores_TE.sum(dim=-1, keepdim=True)
        else:
            scores_TE = torch.softmax(logits_TE, dim=-1)
            probs_TE = scores_TE
        choice_TE = (scores_TE + self.bias).detach()
        expert_TK = torch.topk(choice_TE, self.moe.top_k, dim=-1).indices
        gate_TK = scores_TE.gather(1, expert_TK)
        if self.moe.norm_topk_prob:
            gate_TK = gate_TK / (gate_TK.sum(dim=-1, keepdim=True) + 1e-20)
        gate_TK = gate_TK * self.moe.routed_scaling_factor
        return Routing(expert_TK, gate_TK, logits_TE, probs_TE, choice_TE)


@dataclass
class DispatchPlan:
    """Where each of the T·K (token, expert) assignments goes: one permutation, used both ways.

    Rows are the assignments sorted by expert (stable, so by token within an expert), minus any a
    capacity dropped; N = T·K when dropless.
    """

    order_N: torch.Tensor  # for each row, its assignment's flat index t·K + k
    inverse_TK: torch.Tensor  # for each assignment, its row (N if dropped)
    ends_E: torch.Tensor  # int32 cumulative rows per expert (the grouped matmul's offsets)
    counts_E: torch.Tensor  # assignments per expert before any drop (the balancer's statistic)
    dropped: torch.Tensor | None  # assignments dropped by the capacity (None when dropless)

    @property
    def num_rows(self) -> int:
        return self.order_N.shape[0]


def plan_dispatch(expert_TK: torch.Tensor, num_experts: int, capacity: int | None) -> DispatchPlan:
    """Sort the assignments by expert; with a ``capacity``, keep each expert's first ``capacity``
    (in token order) and drop the rest."""
    T, K = expert_TK.shape
    expert_A = expert_TK.reshape(-1)
    order_A = torch.argsort(expert_A, stable=True)
    counts_E = expert_counts(expert_TK, num_experts)
    kept_counts_E, dropped = counts_E, None
    if capacity is not None:
        starts_E = torch.cumsum(counts_E, 0) - counts_E
        rank_A = torch.arange(T * K, device=expert_A.device) - starts_E[expert_A[order_A]]
        keep_A = rank_A < capacity
        order_A = order_A[keep_A]  # host sync: the number of kept rows decides the shapes
        kept_counts_E = counts_E.clamp(max=capacity)
        dropped = (~keep_A).sum()
    rows = order_A.shape[0]
    # The inverse permutation; a dropped assignment points one past the last row (a zero row).
    inverse_A = torch.full_like(expert_A, rows).scatter_(0, order_A, torch.arange(rows, device=expert_A.device))
    ends_E = torch.cumsum(kept_counts_E, 0).to(torch.int32)
    return DispatchPlan(order_A, inverse_A.view(T, K), ends_E, counts_E, dropped)


class _GatherRows(torch.autograd.Function):
    """``out[i] = source[index[i]]``, whose backward is a gather too: ``grad_source[j]`` sums
    ``grad[back_index[j, :]]``, where ``back_index`` lists the outputs each source row went to (the
    inverse permutation). Autograd's own backward of indexing would scatter-add instead. With
    ``zero_row``, an index equal to the row count stands for a zero row (a dropped assignment)."""

    @staticmethod
    def forward(ctx, source: torch.Tensor, index: torch.Tensor, back_index: torch.Tensor, zero_row: bool):
        ctx.save_for_backward(back_index)
        ctx.zero_row = zero_row
        if zero_row:
            source = F.pad(source, (0, 0, 0, 1))
        return source.index_select(0, index)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (back_index,) = ctx.saved_tensors
        if ctx.zero_row:
            grad = F.pad(grad, (0, 0, 0, 1))
        picked = grad.index_select(0, back_index.reshape(-1))
        return picked.view(*back_index.shape, grad.shape[-1]).sum(dim=-2), None, None, None


def dispatch(x_TD: torch.Tensor, plan: DispatchPlan, top_k: int) -> torch.Tensor:
    """The rows the experts compute on (N, D): each kept assignment's token input, expert-sorted."""
    return _GatherRows.apply(x_TD, plan.order_N // top_k, plan.inverse_TK, plan.dropped is not None)


def combine(y_ND: torch.Tensor, gate_TK: torch.Tensor, plan: DispatchPlan) -> torch.Tensor:
    """Each token's output (T, D): its experts' rows (zero where dropped) weighted by the gates."""
    T, K = gate_TK.shape
    y_AD = _GatherRows.apply(y_ND, plan.inverse_TK.reshape(-1), plan.order_N[:, None], plan.dropped is not None)
    return (y_AD.view(T, K, -1) * gate_TK.to(y_AD.dtype).unsqueeze(-1)).sum(dim=1)


class GroupedExperts(nn.Module):
    """``num_experts`` SwiGLU experts stored as stacked weights, run over expert-sorted rows."""

    def __init__(self, d_model: int, moe: MoEConfig) -> None:
        super().__init__()
        E, F_ = moe.num_experts, moe.d_expert
        self.d_expert = F_
        self.gate_up_EDF2 = nn.Parameter(torch.empty(E, d_model, 2 * F_))  # gate columns first
        self.down_EFD = nn.Parameter(torch.empty(E, F_, d_model))

    def forward(self, x_ND: torch.Tensor, ends_E: torch.Tensor) -> torch.Tensor:
        """Rows ``ends_E[e-1]:ends_E[e]`` of ``x_ND`` go to expert e; returns (N, D)."""
        gate_NF, up_NF = grouped_mm(x_ND, self.gate_up_EDF2, ends_E).chunk(2, dim=-1)
        return grouped_mm(F.silu(gate_NF) * up_NF, self.down_EFD, ends_E)


def in_backward_recompute() -> bool:
    """True while autograd runs a backward pass (activation checkpointing recomputes forwards there).

    A compiled forward is never re-run by Python in backward, and the compiler cannot trace this
    query, so under ``torch.compile`` it is False."""
    if torch.compiler.is_compiling():
        return False
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

    def _apply(self, fn, recurse=True):
        # The pending statistics follow the module to its device here, before any forward: moved
        # inside a compiled forward instead, they would change its inputs and compile it a second time.
        super()._apply(fn, recurse)
        self.pending.to_(self.router.weight.device)
        return self

    def capacity(self, num_tokens: int) -> int | None:
        """Rows each expert may take for ``num_tokens`` tokens (None: dropless)."""
        if self.moe.capacity_factor is None:
            return None
        return math.ceil(self.moe.capacity_factor * num_tokens * self.moe.top_k / self.moe.num_experts)

    def forward(self, x_BTD: torch.Tensor, real_BT: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, D) -> (B, T, D). ``real_BT`` (bool): only those tokens are routed and counted; the others
        (padding) get a zero output and take no capacity (one host sync, for the number of real tokens)."""
        B, T, D = x_BTD.shape
        if real_BT is None:
            return self._routed(x_BTD.reshape(B * T, D)).view(B, T, D)
        keep_N = real_BT.reshape(-1).nonzero()[:, 0]
        out_TD = x_BTD.new_zeros(B * T, D)
        out_TD = out_TD.index_copy(0, keep_N, self._routed(x_BTD.reshape(B * T, D).index_select(0, keep_N)))
        return out_TD.view(B, T, D)

    def _routed(self, x_TD: torch.Tensor) -> torch.Tensor:
        routing = self.router(x_TD)
        plan = plan_dispatch(routing.expert_TK, self.moe.num_experts, self.capacity(x_TD.shape[0]))
        y_ND = self.experts(dispatch(x_TD, plan, self.moe.top_k), plan.ends_E)
        out_TD = combine(y_ND, routing.gate_TK, plan)
        if self.shared is not None:
            out_TD = out_TD + self.shared(x_TD)
        self._after_routing(routing, plan)
        return out_TD

    def _after_routing(self, routing: Routing, plan: DispatchPlan) -> None:
        """Auxiliary losses for this forward and, in training, the balancer's pending statistics."""
        self.aux_loss = None
        if not self.training:
            return
        T = routing.expert_TK.shape[0]
        losses = []
        if self.moe.balance_loss_coef > 0:
            load_E = plan.counts_E.float() / (T * self.moe.top_k)
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
            self.pending.add(routing, plan.counts_E, plan.dropped)
