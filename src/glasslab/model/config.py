"""Model configs and their exact accounting: parameter counts, size names, training FLOPs per token.

A model is a pre-norm decoder-only transformer (RMSNorm, RoPE, grouped-query attention with optional
QK-norm, SwiGLU feed-forward). With ``moe`` set, every layer from ``moe.first_k_dense`` on replaces the
dense feed-forward by a routed mixture of SwiGLU experts plus optional always-on shared experts.

Accounting conventions (what the ladder fits against):

- ``embedding`` parameters are the token embedding plus the LM head when it is not tied;
  ``non_embedding`` is everything else (attention, feed-forward, experts, router, norms).
- ``active`` parameters are those one token touches: all dense parameters, the router, the shared
  experts and ``top_k`` of the routed experts. The router bias is balancing state, not a parameter.
- Training FLOPs per token = 6 × (active non-embedding matmul parameters + LM head) + 12 · layers ·
  d_attn · seq_len, where d_attn = n_heads · head_dim: 2 FLOPs per multiply-add forward, twice that
  backward, and the attention scores and weighted sum (QK^T and AV) counted over the full context
  without halving for the causal mask. Norms, RoPE, softmax and activations are not counted. The LM
  head is counted even when tied (it is a matmul either way); the embedding lookup is not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from glasslab.config import require

MOE_WIDTH_MULTIPLE = 8
"""``d_model`` and ``d_expert`` of an MoE model are multiples of this: the experts' grouped matmul on
CUDA (``torch._grouped_mm``) needs every row of its operands to start on a 16-byte boundary, which
is 8 bf16 values (4 fp32 ones). Refused here, a config that a GPU would reject fails on any machine."""


@dataclass(frozen=True)
class MoEConfig:
    """The mixture-of-experts part of a model (present = MoE model)."""

    num_experts: int = 8
    """Routed experts per MoE layer."""
    top_k: int = 2
    """Routed experts each token is sent to."""
    d_expert: int = 256
    """Hidden size of one expert's SwiGLU (and of each shared expert)."""
    num_shared_experts: int = 1
    """Always-on experts per MoE layer (each of hidden size ``d_expert``); 0 for none."""
    first_k_dense: int = 0
    """The first this-many layers keep a dense feed-forward of hidden size ``d_ff``."""
    router: Literal["softmax", "sigmoid"] = "sigmoid"
    """Expert scores: softmax over experts, or an independent sigmoid per expert (DeepSeek-V3, GLM-4.5)."""
    routed_scaling_factor: float = 1.0
    """Gate weights of the routed experts are multiplied by this (after the optional renormalisation)."""
    norm_topk_prob: bool = True
    """Renormalise the chosen experts' gate weights to sum to 1."""
    capacity_factor: float | None = None
    """None = dropless; else each expert takes at most ceil(factor · tokens · top_k / experts) tokens."""
    balancing: Literal["sign", "quantile", "none"] = "sign"
    """Auxiliary-loss-free router-bias rule, updated once per optimiser step (see ``model.balancing``)."""
    bias_update_rate: float = 1e-3
    """Sign rule: bias step γ per optimiser step. Quantile rule: fraction of the correction applied."""
    balance_loss_coef: float = 0.0
    """Weight of the switch-style load-balancing loss in ``aux_loss()`` (0 = off)."""
    router_z_loss_coef: float = 0.0
    """Weight of the router z-loss (mean squared logsumexp of router logits) in ``aux_loss()``."""

    def __post_init__(self) -> None:
        require(self.num_experts >= 2, "model.moe.num_experts", self.num_experts, "at least 2")
        require(
            1 <= self.top_k <= self.num_experts,
            "model.moe.top_k",
            self.top_k,
            f"between 1 and model.moe.num_experts={self.num_experts}",
        )
        require(self.d_expert >= 1 and self.d_expert % MOE_WIDTH_MULTIPLE == 0, "model.moe.d_expert", self.d_expert,
                f"a positive multiple of {MOE_WIDTH_MULTIPLE} (the grouped matmul's 16-byte rows on CUDA)")
        require(self.num_shared_experts >= 0, "model.moe.num_shared_experts", self.num_shared_experts, ">= 0")
        require(self.first_k_dense >= 0, "model.moe.first_k_dense", self.first_k_dense, ">= 0")
        require(
            self.routed_scaling_factor > 0,
            "model.moe.routed_scaling_factor",
            self.routed_scaling_factor,
            "a positive number",
        )
        require(
            self.capacity_factor is None or self.capacity_factor > 0,
            "model.moe.capacity_factor",
            self.capacity_factor,
            "null (dropless) or a positive number",
        )
        require(self.bias_update_rate >= 0, "model.moe.bias_update_rate", self.bias_update_rate, ">= 0")
        require(
            self.balancing != "quantile" or self.bias_update_rate <= 1,
            "model.moe.bias_update_rate",
            self.bias_update_rate,
            "a fraction in [0, 1] with model.moe.balancing='quantile'",
        )
        require(self.balance_loss_coef >= 0, "model.moe.balance_loss_coef", self.balance_loss_coef, ">= 0")
        require(self.router_z_loss_coef >= 0, "model.moe.router_z_loss_coef", self.router_z_loss_coef, ">= 0")


@dataclass(frozen=True)
class ModelConfig:
    """A dense or MoE decoder-only transformer."""

    vocab_size: int = 0
    """Tokens in the vocabulary (rows of the embedding and of the LM head); 0 = as many as the dataset's
    tokenizer has (a run resolves it before step 0; fewer than the tokenizer's is an error)."""
    d_model: int = 256
    """Width of the residual stream."""
    n_layers: int = 4
    """Transformer blocks."""
    n_heads: int = 4
    """Query heads."""
    n_kv_heads: int = 0
    """Key/value heads (grouped-query attention; must divide ``n_heads``); 0 = n_heads."""
    head_dim: int = 0
    """Width of one head; 0 = d_model // n_heads."""
    d_ff: int = 768
    """Hidden size of the dense SwiGLU feed-forward (dense models and MoE ``first_k_dense`` layers)."""
    rope_theta: float = 10000.0
    """RoPE base."""
    qk_norm: bool = True
    """RMSNorm over each query and key head before RoPE (Qwen3/OLMo-2 style)."""
    tie_embeddings: bool = False
    """Share the token embedding with the LM head."""
    norm_eps: float = 1e-6
    """RMSNorm epsilon."""
    init_std: float = 0.02
    """Std of the normal init of every matmul weight and embedding (output projections scaled down by
    sqrt(2 · n_layers))."""
    logit_z_loss_coef: float = 0.0
    """Weight of the output-logit z-loss (mean squared logsumexp of LM logits) in ``aux_loss()``."""
    moe: MoEConfig | None = field(default=None)
    """Mixture-of-experts settings; None = dense model."""

    def __post_init__(self) -> None:
        require(self.vocab_size == 0 or self.vocab_size >= 2, "model.vocab_size", self.vocab_size,
                "at least 2 (or 0: the dataset tokenizer's)")
        require(self.d_model >= 1, "model.d_model", self.d_model, "a positive integer")
        require(self.n_layers >= 1, "model.n_layers", self.n_layers, "a positive integer")
        require(self.n_heads >= 1, "model.n_heads", self.n_heads, "a positive integer")
        require(
            self.head_dim > 0 or self.d_model % self.n_heads == 0,
            "model.n_heads",
            self.n_heads,
            f"a divisor of model.d_model={self.d_model} (or set model.head_dim)",
        )
        require(self.head_dim >= 0, "model.head_dim", self.head_dim, ">= 0 (0 = d_model // n_heads)")
        require(
            self.n_kv_heads == 0 or (self.n_kv_heads >= 1 and self.n_heads % self.n_kv_heads == 0),
            "model.n_kv_heads",
            self.n_kv_heads,
            f"a divisor of model.n_heads={self.n_heads}",
        )
        require(
            self.attn_head_dim % 2 == 0,
            "model.head_dim",
            self.attn_head_dim,
            "an even head width (RoPE rotates pairs)",
        )
        require(self.d_ff >= 1, "model.d_ff", self.d_ff, "a positive integer")
        require(self.rope_theta > 0, "model.rope_theta", self.rope_theta, "a positive number")
        require(self.norm_eps > 0, "model.norm_eps", self.norm_eps, "a positive number")
        require(self.init_std > 0, "model.init_std", self.init_std, "a positive number")
        require(self.logit_z_loss_coef >= 0, "model.logit_z_loss_coef", self.logit_z_loss_coef, ">= 0")
        if self.moe is not None:
            require(self.d_model % MOE_WIDTH_MULTIPLE == 0, "model.d_model", self.d_model,
                    f"a multiple of {MOE_WIDTH_MULTIPLE} in an MoE model (the grouped matmul's 16-byte rows on CUDA)")
            require(
                self.moe.first_k_dense < self.n_layers,
                "model.moe.first_k_dense",
                self.moe.first_k_dense,
                f"fewer than model.n_layers={self.n_layers} (else no layer is MoE)",
            )

    # --- derived sizes ----------------------------------------------------------------------------

    @property
    def attn_head_dim(self) -> int:
        """Width of one attention head."""
        return self.head_dim or self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        """Key/value heads in use."""
        return self.n_kv_heads or self.n_heads

    @property
    def d_attn(self) -> int:
        """Total query width n_heads · head_dim (the attention FLOPs term uses it)."""
        return self.n_heads * self.attn_head_dim

    def is_moe_layer(self, layer: int) -> bool:
        """Whether block ``layer`` (0-based) has a routed MoE feed-forward."""
        return self.moe is not None and layer >= self.moe.first_k_dense

    # --- accounting -------------------------------------------------------------------------------

    def _attention_matmul_params(self) -> int:
        hd = self.attn_head_dim
        return self.d_model * hd * (self.n_heads + 2 * self.kv_heads) + self.n_heads * hd * self.d_model

    def _ffn_matmul_params(self, layer: int, active: bool) -> int:
        """SwiGLU weights (3 matrices) of one layer's feed-forward, plus its router."""
        if not self.is_moe_layer(layer):
            return 3 * self.d_model * self.d_ff
        moe = self.moe
        assert moe is not None
        routed = moe.top_k if active else moe.num_experts
        experts = 3 * self.d_model * moe.d_expert * (routed + moe.num_shared_experts)
        return experts + moe.num_experts * self.d_model

    def _norm_params(self) -> int:
        per_layer = 2 * self.d_model + (2 * self.attn_head_dim if self.qk_norm else 0)
        return self.n_layers * per_layer + self.d_model

    def _matmul_params(self, active: bool) -> int:
        """Non-embedding matmul weights (attention, feed-forward, experts, router)."""
        attn = self.n_layers * self._attention_matmul_params()
        return attn + sum(self._ffn_matmul_params(i, active) for i in range(self.n_layers))

    def require_vocab(self) -> None:
        """A one-line ConfigError unless ``vocab_size`` is resolved (the accounting and the model need it)."""
        require(self.vocab_size > 0, "model.vocab_size", self.vocab_size,
                "a vocabulary size (0 is resolved from the dataset's tokenizer when a run starts)")

    def param_counts(self) -> dict[str, int]:
        """Exact parameter counts: ``total, active, embedding, non_embedding, active_non_embedding``."""
        self.require_vocab()
        embedding = self.vocab_size * self.d_model * (1 if self.tie_embeddings else 2)
        non_embedding = self._matmul_params(active=False) + self._norm_params()
        active_non_embedding = self._matmul_params(active=True) + self._norm_params()
        return {
            "total": embedding + non_embedding,
            "active": embedding + active_non_embedding,
            "embedding": embedding,
            "non_embedding": non_embedding,
            "active_non_embedding": active_non_embedding,
        }

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token at context ``seq_len`` (forward + backward; see module docstring)."""
        self.require_vocab()
        matmul = 6 * self._matmul_params(active=True) + self.head_flops_per_token()
        return float(matmul + 12 * self.n_layers * self.d_attn * seq_len)

    def head_flops_per_token(self) -> float:
        """Of :meth:`flops_per_token`, the LM head's: the vocabulary projection, forward and backward."""
        self.require_vocab()
        return float(6 * self.vocab_size * self.d_model)

    def size_name(self) -> str:
        """``<total>-A<active>`` with 2–3 significant figures, e.g. ``1.6B-A61M`` or ``3.2M-A0.9M``."""
        counts = self.param_counts()
        return size_name(counts["total"], counts["active"])


_UNITS = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"))


def _unit_for(count: float) -> tuple[float, str]:
    for scale, suffix in _UNITS:
        if count >= 0.9995 * scale:  # 999.7M is written 1.0B, not 1000M
            return scale, suffix
    return 1.0, ""


def _format_in(count: float, scale: float, suffix: str) -> str:
    """One decimal below 100 units (``3.2M``, ``0.9M``, ``27.7B``, ``61M``), none from 100 on."""
    x = count / scale
    text = f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 0.1 else f"{x:.2f}"
    if text.endswith(".0") and x >= 10:
        text = text[:-2]
    return text + suffix


def size_name(total: float, active: float) -> str:
    """Size name from parameter counts; the active part keeps the total's unit while it is >= 0.1 of it
    (``3.2M-A0.9M``), else takes its own (``1.6B-A61M``)."""
    scale, suffix = _unit_for(total)
    total_text = _format_in(total, scale, suffix)
    if active < 0.1 * scale:
        scale, suffix = _unit_for(active)
    return f"{total_text}-A{_format_in(active, scale, suffix)}"
