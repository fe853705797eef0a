"""The dense building blocks: RMSNorm, rotary position embedding, grouped-query attention, SwiGLU.

Layouts follow the Llama/Qwen3/GLM family in Hugging Face ``transformers`` so the export is a pure
renaming: RoPE rotates the two halves of each head (``rotate_half``), QK-norm is an RMSNorm over each
head's width applied before RoPE, and SwiGLU is ``down(silu(gate(x)) * up(x))``. We fuse the Q/K/V
projections and the gate/up projections into single matmuls because one big matmul is faster than
three small ones on a CPU; the export splits them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from glasslab.model.config import ModelConfig


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x²) + eps) · weight, normalised in fp32."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        normed = F.rms_norm(x.float(), (x.shape[-1],), None, self.eps).to(x.dtype)
        return self.weight * normed


def rope_cos_sin(
    positions_T: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables (T, head_dim) for the given token positions, halves repeated (HF layout)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions_T.device).float() / head_dim))
    freqs_TH = positions_T.float()[:, None] * inv_freq[None, :]
    angles_TD = torch.cat((freqs_TH, freqs_TH), dim=-1)
    return angles_TD.cos().to(dtype), angles_TD.sin().to(dtype)


def apply_rope(x_BHTD: torch.Tensor, cos_TD: torch.Tensor, sin_TD: torch.Tensor) -> torch.Tensor:
    half = x_BHTD.shape[-1] // 2
    x1, x2 = x_BHTD[..., :half], x_BHTD[..., half:]
    rotated = torch.cat((-x2, x1), dim=-1)
    return x_BHTD * cos_TD + rotated * sin_TD


class LayerKVCache:
    """Preallocated keys and values of one attention layer for incremental decoding."""

    def __init__(self, batch: int, n_kv_heads: int, max_len: int, head_dim: int, like: torch.Tensor):
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k_BKSD = like.new_zeros(shape)
        self.v_BKSD = like.new_zeros(shape)
        self.length = 0

    def append(self, k_BKTD: torch.Tensor, v_BKTD: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store new keys/values; return all keys/values so far (views, no copy)."""
        end = self.length + k_BKTD.shape[2]
        if end > self.k_BKSD.shape[2]:
            raise ValueError(f"KV cache holds {self.k_BKSD.shape[2]} positions; asked for {end}")
        self.k_BKSD[:, :, self.length : end] = k_BKTD
        self.v_BKSD[:, :, self.length : end] = v_BKTD
        self.length = end
        return self.k_BKSD[:, :, :end], self.v_BKSD[:, :, :end]


class Attention(nn.Module):
    """Causal grouped-query self-attention (optional QK-norm, RoPE) via ``F.scaled_dot_product_attention``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.attn_head_dim
        qkv_width = (cfg.n_heads + 2 * cfg.n_kv_heads) * self.head_dim
        self.qkv_proj = nn.Linear(cfg.d_model, qkv_width, bias=False)
        self.o_proj = nn.Linear(cfg.d_attn, cfg.d_model, bias=False)
        self.q_norm = RMSNorm(self.head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, cfg.norm_eps) if cfg.qk_norm else None

    def forward(
        self,
        x_BTD: torch.Tensor,
        cos_TD: torch.Tensor,
        sin_TD: torch.Tensor,
        cache: LayerKVCache | None = None,
    ) -> torch.Tensor:
        B, T, _ = x_BTD.shape
        hd = self.head_dim
        qkv = self.qkv_proj(x_BTD).view(B, T, self.n_heads + 2 * self.n_kv_heads, hd)
        q_BTHD, k_BTKD, v_BTKD = qkv.split((self.n_heads, self.n_kv_heads, self.n_kv_heads), dim=2)
        if self.q_norm is not None:
            q_BTHD, k_BTKD = self.q_norm(q_BTHD), self.k_norm(k_BTKD)
        q_BHTD = apply_rope(q_BTHD.transpose(1, 2), cos_TD, sin_TD)
        k_BKTD = apply_rope(k_BTKD.transpose(1, 2), cos_TD, sin_TD)
        v_BKTD = v_BTKD.transpose(1, 2)
        past = 0
        if cache is not None:
            past = cache.length
            k_BKTD, v_BKTD = cache.append(k_BKTD, v_BKTD)
        mask = None
        if past > 0 and T > 1:
            # A chunk after a cached prefix: each query sees the whole prefix and its causal part.
            q_pos = torch.arange(past, past + T, device=x_BTD.device)
            mask = q_pos[:, None] >= torch.arange(past + T, device=x_BTD.device)[None, :]
        out_BHTD = F.scaled_dot_product_attention(
            q_BHTD,
            k_BKTD,
            v_BKTD,
            attn_mask=mask,
            is_causal=past == 0 and T > 1,
            enable_gqa=self.n_kv_heads != self.n_heads,
        )
        return self.o_proj(out_BHTD.transpose(1, 2).reshape(B, T, self.n_heads * hd))


class SwiGLU(nn.Module):
    """Dense feed-forward ``down(silu(gate(x)) * up(x))`` with fused gate/up weights (gate rows first)."""

    def __init__(self, d_model: int, d_hidden: int) -> None:
        super().__init__()
        self.d_hidden = d_hidden
        self.gate_up_proj = nn.Linear(d_model, 2 * d_hidden, bias=False)
        self.down_proj = nn.Linear(d_hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


def output_std(cfg: ModelConfig) -> float:
    """Init std of the projections that write into the residual stream (GPT-2 style depth scaling)."""
    return cfg.init_std / math.sqrt(2 * cfg.n_layers)
