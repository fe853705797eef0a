"""The decoder-only transformer: embedding, pre-norm blocks (attention + dense or MoE feed-forward),
final norm, LM head. Logits come out in fp32 whatever the compute dtype; given targets, the forward
returns their summed next-token loss instead, computed without materialising all logits at once."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from glasslab.model.balancing import Balancer
from glasslab.model.config import ModelConfig
from glasslab.model.head_loss import chunk_tokens, head_cross_entropy
from glasslab.model.layers import Attention, LayerKVCache, RMSNorm, SwiGLU, output_std, rope_rotations
from glasslab.model.moe import MoEFeedForward

PARAM_GROUPS = ("embed", "attn", "mlp", "experts", "router", "norm", "lm_head")


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_index: int) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.ffn: nn.Module = (
            MoEFeedForward(cfg, layer_index)
            if cfg.is_moe_layer(layer_index)
            else SwiGLU(cfg.d_model, cfg.d_ff)
        )

    def forward(
        self,
        x_BTD: torch.Tensor,
        rotations_T1H: torch.Tensor,
        cache: LayerKVCache | None = None,
        mask_B1TT: torch.Tensor | None = None,
        real_BT: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x_BTD = x_BTD + self.attn(self.attn_norm(x_BTD), rotations_T1H, cache, mask_B1TT)
        if real_BT is not None and isinstance(self.ffn, MoEFeedForward):
            return x_BTD + self.ffn(self.ffn_norm(x_BTD), real_BT)
        return x_BTD + self.ffn(self.ffn_norm(x_BTD))


class Transformer(nn.Module):
    """``forward(tokens_BT) -> logits_BTV`` (fp32) for a dense or MoE ``ModelConfig``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        cfg.require_vocab()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.final_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self._logit_z_loss: torch.Tensor | None = None
        self.reset_parameters()
        self.balancer = Balancer(self)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Normal(0, init_std) for embeddings and matmul weights; residual-writing ones scaled down."""
        std, out_std = self.cfg.init_std, output_std(self.cfg)
        for name, p in self.named_parameters():
            if "norm" in name:
                nn.init.ones_(p)
            elif name.endswith(("o_proj.weight", "down_proj.weight", "down_EFD")):
                nn.init.normal_(p, std=out_std)
            else:
                nn.init.normal_(p, std=std)
        for m in self.modules():
            if isinstance(m, MoEFeedForward):
                m.router.bias.zero_()

    @property
    def output_weight_VD(self) -> torch.Tensor:
        return self.embed.weight if self.lm_head is None else self.lm_head.weight

    def forward(self, tokens_BT: torch.Tensor, caches: list[LayerKVCache] | None = None,
                doc_ids_BT: torch.Tensor | None = None, targets_BT: torch.Tensor | None = None,
                real_BT: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, vocab) in fp32. With ``caches`` (generation), positions continue after them; caches
        made with left padding (``new_kv_caches(..., pad_B)``) start each row's positions at its first real
        token and hide the padding keys from every query.

        ``real_BT`` (bool, False = padding): an MoE layer routes only the real tokens (padding takes no
        expert capacity and counts in no routing statistic; its feed-forward output is zero). Attention is
        not changed by it: left padding is hidden by the caches, right padding by causality.

        ``doc_ids_BT`` (packed sequences): a token attends only to earlier tokens with the same id, so
        documents packed into one row do not see each other. Positions are not reset per document: RoPE
        scores depend only on the distance between tokens, so a document computes the same wherever it sits.
        Without it, attention is plain causal (the pretraining path, unchanged).

        ``targets_BT`` (training): return instead the sum over tokens of the cross-entropy (nats, fp32) of
        the logits against them, targets of -100 ignored, computed in chunks of tokens
        (``model.head_loss``); the logit z-loss then comes from the same chunks.
        """
        B, T = tokens_BT.shape
        x_BTD = self.embed(tokens_BT)
        start = caches[0].length if caches else 0
        positions_T = torch.arange(start, start + T, device=tokens_BT.device)
        mask_B1TT = None
        if caches and caches[0].pad_B is not None:
            pad_B = caches[0].pad_B
            positions_T = positions_T[None, :] - pad_B[:, None]  # (B, T): each row counts from its first real token
            keys_S = torch.arange(start + T, device=tokens_BT.device)
            mask_B1TT = ((keys_S[None, None, :] <= (start + torch.arange(T, device=tokens_BT.device))[None, :, None])
                         & (keys_S[None, None, :] >= pad_B[:, None, None]))[:, None]
        rotations_T1H = rope_rotations(positions_T, self.cfg.attn_head_dim, self.cfg.rope_theta)
        if doc_ids_BT is not None:
            if caches:
                raise ValueError("doc_ids_BT and caches do not combine: decode one document at a time")
            mask_B1TT = document_causal_mask(doc_ids_BT, attention_dtype(x_BTD))
        for i, block in enumerate(self.blocks):
            x_BTD = block(x_BTD, rotations_T1H, caches[i] if caches else None, mask_B1TT, real_BT)
        h_BTD = self.final_norm(x_BTD)
        with_z = self.training and self.cfg.logit_z_loss_coef > 0
        self._logit_z_loss = None
        if targets_BT is not None:
            nats, z_sum = head_cross_entropy(h_BTD.flatten(0, 1), self.output_weight_VD, targets_BT.flatten(),
                                             chunk=chunk_tokens(self.cfg.vocab_size), with_z=with_z)
            if with_z:
                self._logit_z_loss = self.cfg.logit_z_loss_coef * z_sum / targets_BT.numel()
            return nats
        logits_BTV = F.linear(h_BTD, self.output_weight_VD).float()
        if with_z:
            self._logit_z_loss = (
                self.cfg.logit_z_loss_coef * (torch.logsumexp(logits_BTV, dim=-1) ** 2).mean()
            )
        return logits_BTV

    def aux_loss(self) -> torch.Tensor:
        """Sum of the enabled auxiliary losses of the last training forward (balance, router z, logit z)."""
        losses = [
            m.aux_loss for m in self.modules() if isinstance(m, MoEFeedForward) and m.aux_loss is not None
        ]
        if self._logit_z_loss is not None:
            losses.append(self._logit_z_loss)
        if not losses:
            return torch.zeros((), device=self.embed.weight.device)
        return torch.stack(losses).sum()

    def new_kv_caches(self, batch: int, max_len: int, pad_B: torch.Tensor | None = None) -> list[LayerKVCache]:
        """Empty per-layer KV caches for decoding up to ``max_len`` positions; ``pad_B``: how many positions
        of each row's prompt are left padding (None: none)."""
        cfg, like = self.cfg, self.embed.weight
        return [LayerKVCache(batch, cfg.kv_heads, max_len, cfg.attn_head_dim, like, pad_B) for _ in self.blocks]

    def param_groups(self) -> dict[str, list[tuple[str, nn.Parameter]]]:
        """Parameters by group (``embed, attn, mlp, experts, router, norm, lm_head``); a tied LM head is
        in ``embed`` only. Shared experts are dense, so they are ``mlp``."""
        groups: dict[str, list[tuple[str, nn.Parameter]]] = {g: [] for g in PARAM_GROUPS}
        for name, p in self.named_parameters():
            groups[_group_of(name)].append((name, p))
        return groups


def document_causal_mask(doc_ids_BT: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Additive (B, 1, T, T) mask in ``dtype``: 0 where query t may attend key s (s <= t, both of the same
    document), -inf elsewhere. Built once per batch for every layer, in the dtype attention computes in:
    SDPA would turn a boolean mask into this at every call (attention alone at the demo hero's shapes: 41 ms
    with this mask, 67 with the boolean one; the whole SFT step costs 1.04x an unmasked one either way:
    docs/LOG.md, 2026-12-05); ``flex_attention`` has no CPU backward.
    """
    T = doc_ids_BT.shape[1]
    causal_TT = torch.ones(T, T, dtype=torch.bool, device=doc_ids_BT.device).tril()
    allowed_B1TT = (doc_ids_BT[:, None, :, None] == doc_ids_BT[:, None, None, :]) & causal_TT
    return torch.zeros(allowed_B1TT.shape, dtype=dtype, device=doc_ids_BT.device).masked_fill_(~allowed_B1TT,
                                                                                                float("-inf"))


def attention_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype attention's queries have: autocast's on ``x``'s device when it is on, else ``x``'s."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


def _group_of(name: str) -> str:
    if "norm" in name:
        return "norm"
    if name.startswith("embed."):
        return "embed"
    if name.startswith("lm_head."):
        return "lm_head"
    if ".attn." in name:
        return "attn"
    if ".router." in name:
        return "router"
    if ".experts." in name:
        return "experts"
    return "mlp"
