"""The dense building blocks: RMSNorm, rotary position embedding, grouped-query attention, SwiGLU.

The maths is that of the Llama/Qwen3/GLM family in Hugging Face ``transformers`` (QK-norm is an RMSNorm
over each head's width applied before RoPE; SwiGLU is ``down(silu(gate(x)) * up(x))``), with three
layout choices for CPU speed that the export undoes: Q/K/V and gate/up projections are fused into
single matmuls, and RoPE rotates adjacent pairs of a head's dimensions as complex numbers (one
elementwise op) where HF rotates the two halves (``rotate_half``: five ops); permuting each head's
Q/K rows (and QK-norm weights) maps one onto the other exactly.
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


def rope_rotations(positions_T: torch.Tensor, head_dim: int, theta: float) -> torch.Tensor:
    """Unit complex rotations (T, 1, head_dim / 2), pair i turning at theta^(-2i / head_dim) per position;
    positions (B, T) give (B, T, 1, head_dim / 2), one row's positions each."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions_T.device).float() / head_dim))
    angles_TH = positions_T.float()[..., None] * inv_freq
    return torch.polar(torch.ones_like(angles_TH), angles_TH).unsqueeze(-2)


def apply_rope(x_BTND: torch.Tensor, rotations_T1H: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent pairs (2i, 2i+1) of every head as complex numbers (one fused multiply, in fp32).

    Hugging Face rotates halves (i, i + D/2) instead; the export permutes the Q/K projection rows.
    """
    pairs = torch.view_as_complex(x_BTND.float().unflatten(-1, (-1, 2)))
    return torch.view_as_real(pairs * rotations_T1H).flatten(-2).to(x_BTND.dtype)


class LayerKVCache:
    """Preallocated keys and values of one attention layer for incremental decoding."""

    def __init__(self, batch: int, n_kv_heads: int, max_len: int, head_dim: int, like: torch.Tensor,
                 pad_B: torch.Tensor | None = None):
        self.pad_B = pad_B
        """Left padding of each row (positions), or None; the model hides those keys and shifts positions."""
        shape = (batch, n_kv_heads, max_len, head_dim)
        # Plain tensors even when ``like`` is an FSDP2-sharded parameter (a DTensor between forwards):
        # the keys written into the cache during a forward are plain tensors.
        self.k_BKSD = torch.zeros(shape, dtype=like.dtype, device=like.device)
        self.v_BKSD = torch.zeros(shape, dtype=like.dtype, device=like.device)
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
    """Causal grouped-query self-attention (optional QK-norm, RoPE) via ``F.scaled_dot_product_attention``.

    Queries and keys are normalised and rotated together, as one (B, T, n_heads + n_kv_heads, D)
    tensor, to halve the elementwise passes, which dominate over matmuls at small widths on a CPU.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.attn_head_dim
        self.eps = cfg.norm_eps
        qkv_width = (cfg.n_heads + 2 * cfg.kv_heads) * self.head_dim
        self.qkv_proj = nn.Linear(cfg.d_model, qkv_width, bias=False)
        self.o_proj = nn.Linear(cfg.d_attn, cfg.d_model, bias=False)
        self.q_norm = RMSNorm(self.head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, cfg.norm_eps) if cfg.qk_norm else None

    def forward(
        self,
        x_BTD: torch.Tensor,
        rotations_T1H: torch.Tensor,
        cache: LayerKVCache | None = None,
        mask_B1TT: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``mask_B1TT`` (bool, True = may attend; or additive, 0 or -inf, in the queries' dtype; keys over
        everything cached so far) replaces the causal mask, e.g. a block-diagonal causal mask that keeps
        packed documents apart, or one that hides a batch's left padding from decoding queries."""
        B, T, _ = x_BTD.shape
        H, K, hd = self.n_heads, self.n_kv_heads, self.head_dim
        qkv_BTND = self.qkv_proj(x_BTD).view(B, T, H + 2 * K, hd)
        qk_BTND, v_BTKD = qkv_BTND.split((H + K, K), dim=2)
        if self.q_norm is not None:
            weight_ND = torch.cat((self.q_norm.weight.expand(H, hd), self.k_norm.weight.expand(K, hd)))
            if qk_BTND.dtype == torch.float32:
                qk_BTND = F.rms_norm(qk_BTND, (hd,), None, self.eps) * weight_ND
            else:
                qk_BTND = F.rms_norm(qk_BTND.float(), (hd,), None, self.eps).to(qk_BTND.dtype) * weight_ND
        qk_BTND = apply_rope(qk_BTND, rotations_T1H)
        q_BHTD = qk_BTND[:, :, :H].transpose(1, 2)
        k_BKTD = qk_BTND[:, :, H:].transpose(1, 2)
        v_BKTD = v_BTKD.transpose(1, 2)
        past = 0
        if cache is not None:
            past = cache.length
            k_BKTD, v_BKTD = cache.append(k_BKTD, v_BKTD)
        mask = mask_B1TT
        if mask is None and past > 0 and T > 1:
            # A chunk after a cached prefix: each query sees the whole prefix and its causal part.
            q_pos = torch.arange(past, past + T, device=x_BTD.device)
            mask = q_pos[:, None] >= torch.arange(past + T, device=x_BTD.device)[None, :]
        out_BHTD = F.scaled_dot_product_attention(
            q_BHTD,
            k_BKTD,
            v_BKTD,
            attn_mask=mask,
            is_causal=mask is None and past == 0 and T > 1,
            enable_gqa=K != H,
        )
        return self.o_proj(out_BHTD.transpose(1, 2).reshape(B, T, H * hd))


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
