"""Export to a Hugging Face ``transformers`` folder (config.json + safetensors + tokenizer files).

We export only as an existing architecture that computes exactly what our model computes, so the
export loads anywhere with ``from_pretrained(folder)`` and no custom code:

- dense, QK-norm → ``Qwen3ForCausalLM``; dense without QK-norm → ``LlamaForCausalLM``;
- MoE with a sigmoid router (bias added for selection only, shared experts, scaling factor,
  first-k dense) → ``Glm4MoeForCausalLM`` with one expert group (its ``e_score_correction_bias`` is our
  router bias);
- MoE with a softmax router, no balancing bias, no shared experts, QK-norm → ``Qwen3MoeForCausalLM``.

Anything else (token dropping, a softmax router with a bias, …) is refused with one line saying why.
The weights are loaded into an instance of the target class (strict, so a wrong mapping fails here,
not in the user's hands), saved by ``transformers`` itself into a temp folder, then renamed into place.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import torch

from glasslab.errors import UserError
from glasslab.layout import atomic_path
from glasslab.model.config import ModelConfig
from glasslab.model.transformer import Transformer

CHAT_END_OF_TURN = "<|im_end|>"
"""ChatML's end of a turn: with a chat template, ``generate`` stops there as well as at end of text."""


class ExportError(UserError):
    """No ``transformers`` class represents this model exactly."""


def hf_architecture(cfg: ModelConfig) -> str:
    """The ``transformers`` class that represents ``cfg`` exactly; raises ExportError if none does."""
    moe = cfg.moe
    if moe is None:
        return "Qwen3ForCausalLM" if cfg.qk_norm else "LlamaForCausalLM"
    if moe.capacity_factor is not None:
        raise ExportError(
            f"model.moe.capacity_factor={moe.capacity_factor}: no transformers MoE class drops tokens; "
            "export needs a dropless model (capacity_factor: null)"
        )
    if moe.router == "sigmoid":
        return "Glm4MoeForCausalLM"
    reasons = []
    if moe.balancing != "none":
        reasons.append(f"model.moe.balancing={moe.balancing!r} (a bias in softmax routing)")
    if moe.num_shared_experts:
        reasons.append(f"model.moe.num_shared_experts={moe.num_shared_experts}")
    if moe.routed_scaling_factor != 1.0:
        reasons.append(f"model.moe.routed_scaling_factor={moe.routed_scaling_factor}")
    if not cfg.qk_norm:
        reasons.append("model.qk_norm=False (OLMoE's QK-norm spans all heads, Qwen3-MoE's each head)")
    if reasons:
        raise ExportError(
            "softmax-routed MoE exports only as Qwen3-MoE, which has no "
            + "; no ".join(reasons)
            + " — use model.moe.router=sigmoid (exports as GLM-4-MoE)"
        )
    return "Qwen3MoeForCausalLM"


def _hf_config(cfg: ModelConfig, architecture: str):
    import transformers

    common = dict(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.attn_head_dim,
        hidden_act="silu",
        rms_norm_eps=cfg.norm_eps,
        tie_word_embeddings=cfg.tie_embeddings,
        attention_bias=False,
        initializer_range=cfg.init_std,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        torch_dtype="float32",
    )
    moe = cfg.moe
    if architecture == "LlamaForCausalLM":
        return transformers.LlamaConfig(**common, mlp_bias=False)
    if architecture == "Qwen3ForCausalLM":
        return transformers.Qwen3Config(**common, use_sliding_window=False)
    assert moe is not None
    if architecture == "Glm4MoeForCausalLM":
        common["rope_parameters"]["partial_rotary_factor"] = 1.0  # GLM defaults to rotating half a head
        return transformers.Glm4MoeConfig(
            **common,
            use_qk_norm=cfg.qk_norm,
            moe_intermediate_size=moe.d_expert,
            n_routed_experts=moe.num_experts,
            num_experts_per_tok=moe.top_k,
            n_shared_experts=moe.num_shared_experts,
            routed_scaling_factor=moe.routed_scaling_factor,
            n_group=1,
            topk_group=1,
            first_k_dense_replace=moe.first_k_dense,
            norm_topk_prob=moe.norm_topk_prob,
        )
    return transformers.Qwen3MoeConfig(
        **common,
        moe_intermediate_size=moe.d_expert,
        num_experts=moe.num_experts,
        num_experts_per_tok=moe.top_k,
        norm_topk_prob=moe.norm_topk_prob,
        decoder_sparse_step=1,
        mlp_only_layers=list(range(moe.first_k_dense)),
        use_sliding_window=False,
    )


def hf_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """Our weights under the Llama/Qwen3/GLM-4-MoE names and layouts (fused matrices split)."""
    cfg = model.cfg
    hd = cfg.attn_head_dim
    out: dict[str, torch.Tensor] = {"model.embed_tokens.weight": model.embed.weight}
    # Our RoPE pairs dims (2i, 2i+1) of a head, HF's pairs (i, i + hd/2): put evens first, then odds.
    halves = torch.cat((torch.arange(0, hd, 2), torch.arange(1, hd, 2)))
    for i, block in enumerate(model.blocks):
        p = f"model.layers.{i}"
        q, k, v = block.attn.qkv_proj.weight.split((cfg.n_heads * hd, cfg.kv_heads * hd, cfg.kv_heads * hd))
        out[f"{p}.self_attn.q_proj.weight"] = q.unflatten(0, (cfg.n_heads, hd))[:, halves].flatten(0, 1)
        out[f"{p}.self_attn.k_proj.weight"] = k.unflatten(0, (cfg.kv_heads, hd))[:, halves].flatten(0, 1)
        out[f"{p}.self_attn.v_proj.weight"] = v
        out[f"{p}.self_attn.o_proj.weight"] = block.attn.o_proj.weight
        if cfg.qk_norm:
            out[f"{p}.self_attn.q_norm.weight"] = block.attn.q_norm.weight[halves]
            out[f"{p}.self_attn.k_norm.weight"] = block.attn.k_norm.weight[halves]
        out[f"{p}.input_layernorm.weight"] = block.attn_norm.weight
        out[f"{p}.post_attention_layernorm.weight"] = block.ffn_norm.weight
        ffn = block.ffn
        if not cfg.is_moe_layer(i):
            out |= _swiglu(f"{p}.mlp", ffn)
            continue
        out[f"{p}.mlp.gate.weight"] = ffn.router.weight
        if cfg.moe.router == "sigmoid":
            out[f"{p}.mlp.gate.e_score_correction_bias"] = ffn.router.bias
            out |= _swiglu(f"{p}.mlp.shared_experts", ffn.shared, cfg.d_model)
        out[f"{p}.mlp.experts.gate_up_proj"] = ffn.experts.gate_up_EDF2.transpose(1, 2)
        out[f"{p}.mlp.experts.down_proj"] = ffn.experts.down_EFD.transpose(1, 2)
    out["model.norm.weight"] = model.final_norm.weight
    if model.lm_head is not None:
        out["lm_head.weight"] = model.lm_head.weight
    return {name: t.detach().float().contiguous() for name, t in out.items()}


def _swiglu(prefix: str, mlp, d_model: int = 0) -> dict[str, torch.Tensor]:
    if mlp is None:  # no shared experts: GLM-4-MoE then holds zero-width shared-expert matrices
        empty = torch.zeros(0, d_model)
        return {
            f"{prefix}.gate_proj.weight": empty,
            f"{prefix}.up_proj.weight": empty,
            f"{prefix}.down_proj.weight": empty.T,
        }
    gate, up = mlp.gate_up_proj.weight.chunk(2, dim=0)
    return {
        f"{prefix}.gate_proj.weight": gate,
        f"{prefix}.up_proj.weight": up,
        f"{prefix}.down_proj.weight": mlp.down_proj.weight,
    }


def export_hf(model: Transformer, cfg: ModelConfig, tokenizer_dir: Path | None, out_dir: Path) -> Path:
    """Write ``out_dir`` loadable by ``AutoModelForCausalLM.from_pretrained(out_dir)`` offline.

    Copies every file of ``tokenizer_dir`` (when given) next to the weights, chat template included,
    and makes ``generate`` stop where the tokenizer says a text or a chat turn ends. Raises ExportError
    (one line) before writing anything when no ``transformers`` class represents ``cfg`` exactly.
    """
    architecture = hf_architecture(cfg)
    try:
        import transformers
    except ImportError:
        raise UserError("export needs the 'transformers' package: pip install 'glasslab[hf]'") from None
    out_dir = Path(out_dir)
    if tokenizer_dir is not None and not Path(tokenizer_dir).is_dir():
        raise UserError(f"{tokenizer_dir}: tokenizer folder not found")
    hf_cfg = _hf_config(cfg, architecture)
    hf_cfg.architectures = [architecture]
    with warnings.catch_warnings():  # zero-width shared experts warn that their init is a no-op
        warnings.simplefilter("ignore")
        hf_model = getattr(transformers, architecture)(hf_cfg).float()
    weights = hf_state_dict(model)
    if cfg.tie_embeddings:
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    hf_model.load_state_dict(weights, strict=True)
    if tokenizer_dir is not None:
        for key, value in _generation_ids(Path(tokenizer_dir)).items():
            setattr(hf_model.generation_config, key, value)
    with atomic_path(out_dir) as tmp:
        hf_model.save_pretrained(tmp)
        if tokenizer_dir is not None:
            for item in Path(tokenizer_dir).iterdir():
                if item.is_file():
                    shutil.copy2(item, tmp / item.name)
    return out_dir


def _generation_ids(tokenizer_dir: Path) -> dict[str, int | list[int]]:
    """``eos_token_id`` (end of text, and of a chat turn when there is a chat template) and ``pad_token_id``
    for the exported ``generation_config.json``, from the tokenizer's ``tokenizer_config.json``."""
    path = tokenizer_dir / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    ids = {token["content"]: int(i) for i, token in config.get("added_tokens_decoder", {}).items()}
    ends = [CHAT_END_OF_TURN] if config.get("chat_template") else []
    stops = [ids[t] for t in (*ends, config.get("eos_token")) if t in ids]
    out: dict[str, int | list[int]] = {}
    if stops:
        out["eos_token_id"] = stops if len(stops) > 1 else stops[0]
    if config.get("pad_token") in ids:
        out["pad_token_id"] = ids[config["pad_token"]]
    return out
