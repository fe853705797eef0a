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
not in the user's hands) and saved by ``transformers`` itself into a staging folder; given held-out
tokens, the export is then loaded back from that folder the way a user would and its logits compared
with ours (the largest absolute difference goes into the manifest; a mapping error fails the export).

The folder: every file is moved in one by one, the manifest (``layout.EXPORT_MANIFEST``, listing every
file with its size and sha256) last, so a folder holding a manifest is a finished export. A folder is
only ever written if it is absent, empty, or an earlier export; an earlier export's files are replaced
by name and only the files its manifest lists are removed — a user's own files are never deleted.
"""

from __future__ import annotations

import shutil
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import glasslab
from glasslab import config as configs
from glasslab.errors import UserError
from glasslab.layout import (
    EXPORT_MANIFEST,
    MODEL_CARD,
    TOKENIZER_FILES,
    file_sha256,
    move_into_place,
    read_json,
    remove,
    temp_path,
    write_json_atomic,
    write_text_atomic,
)
from glasslab.model.config import ModelConfig
from glasslab.model.transformer import Transformer

CHAT_END_OF_TURN = "<|im_end|>"
"""ChatML's end of a turn: with a chat template, ``generate`` stops there as well as at end of text."""
EXPORT_FORMAT = "glasslab-export/1"
LOGIT_TOLERANCE = 1e-3
"""An export whose logits differ from ours by more than this × max(1, largest |logit|) is a mapping
error, not float rounding (fp32 round-off is orders of magnitude smaller; a wrong mapping is O(1))."""


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


def load_hf_state_dict(model: Transformer, weights: dict[str, torch.Tensor]) -> None:
    """Set ``model``'s parameters and buffers from weights under the names :func:`hf_state_dict` gives them:
    its exact inverse (the RoPE halves put back in pairs, fused matrices joined), strict both ways."""
    cfg = model.cfg
    hd = cfg.attn_head_dim
    pairs = torch.argsort(torch.cat((torch.arange(0, hd, 2), torch.arange(1, hd, 2))))
    taken: set[str] = set()

    def take(name: str) -> torch.Tensor:
        if name not in weights:
            raise UserError(f"export weights: no {name!r}; expected the weights glasslab exported for this config")
        taken.add(name)
        return weights[name]

    def heads(name: str, n: int) -> torch.Tensor:
        return take(name).unflatten(0, (n, hd))[:, pairs].flatten(0, 1)

    state = {"embed.weight": take("model.embed_tokens.weight")}
    for i in range(cfg.n_layers):
        p, o = f"model.layers.{i}", f"blocks.{i}"
        state[f"{o}.attn.qkv_proj.weight"] = torch.cat((heads(f"{p}.self_attn.q_proj.weight", cfg.n_heads),
                                                        heads(f"{p}.self_attn.k_proj.weight", cfg.kv_heads),
                                                        take(f"{p}.self_attn.v_proj.weight")))
        state[f"{o}.attn.o_proj.weight"] = take(f"{p}.self_attn.o_proj.weight")
        if cfg.qk_norm:
            state[f"{o}.attn.q_norm.weight"] = take(f"{p}.self_attn.q_norm.weight")[pairs]
            state[f"{o}.attn.k_norm.weight"] = take(f"{p}.self_attn.k_norm.weight")[pairs]
        state[f"{o}.attn_norm.weight"] = take(f"{p}.input_layernorm.weight")
        state[f"{o}.ffn_norm.weight"] = take(f"{p}.post_attention_layernorm.weight")
        if not cfg.is_moe_layer(i):
            state |= _joined_swiglu(take, f"{p}.mlp", f"{o}.ffn")
            continue
        state[f"{o}.ffn.router.weight"] = take(f"{p}.mlp.gate.weight")
        if cfg.moe.router == "sigmoid":
            state[f"{o}.ffn.router.bias"] = take(f"{p}.mlp.gate.e_score_correction_bias")
            if cfg.moe.num_shared_experts:
                state |= _joined_swiglu(take, f"{p}.mlp.shared_experts", f"{o}.ffn.shared")
            else:  # the zero-width stand-ins hf_state_dict wrote
                taken.update(f"{p}.mlp.shared_experts.{n}_proj.weight" for n in ("gate", "up", "down"))
        else:  # exported only without balancing, so the bias is the zeros it was made with
            state[f"{o}.ffn.router.bias"] = torch.zeros_like(model.blocks[i].ffn.router.bias)
        state[f"{o}.ffn.experts.gate_up_EDF2"] = take(f"{p}.mlp.experts.gate_up_proj").transpose(1, 2)
        state[f"{o}.ffn.experts.down_EFD"] = take(f"{p}.mlp.experts.down_proj").transpose(1, 2)
    state["final_norm.weight"] = take("model.norm.weight")
    if model.lm_head is not None:
        state["lm_head.weight"] = take("lm_head.weight")
    else:
        taken.add("lm_head.weight")  # tied: transformers saves the embedding again, or not at all
    unused = sorted(set(weights) - taken)
    if unused:
        raise UserError(f"export weights: {unused[0]!r} (and {len(unused) - 1} more) not in this config's model")
    model.load_state_dict({k: v.contiguous() for k, v in state.items()}, strict=True)


def _joined_swiglu(take, prefix: str, ours: str) -> dict[str, torch.Tensor]:
    return {f"{ours}.gate_up_proj.weight": torch.cat((take(f"{prefix}.gate_proj.weight"),
                                                      take(f"{prefix}.up_proj.weight"))),
            f"{ours}.down_proj.weight": take(f"{prefix}.down_proj.weight")}


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


def write_hf_files(model: Transformer, cfg: ModelConfig, tokenizer_dir: Path | None, folder: Path) -> str:
    """Save ``model`` under its ``transformers`` class into the new folder ``folder`` (plus the tokenizer's
    files from ``tokenizer_dir``); return the class name. Raises ExportError (one line) when no class fits."""
    architecture = hf_architecture(cfg)
    import transformers

    if tokenizer_dir is not None and not Path(tokenizer_dir).is_dir():
        raise UserError(f"{tokenizer_dir}: tokenizer folder not found")
    hf_cfg = _hf_config(cfg, architecture)
    hf_cfg.architectures = [architecture]
    if tokenizer_dir is not None:
        hf_cfg.update(_special_token_ids(Path(tokenizer_dir)))
    with warnings.catch_warnings():  # zero-width shared experts warn that their init is a no-op
        warnings.simplefilter("ignore")
        hf_model = getattr(transformers, architecture)(hf_cfg).float()
    weights = hf_state_dict(model)
    if cfg.tie_embeddings:
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    hf_model.load_state_dict(weights, strict=True)
    if tokenizer_dir is not None:
        hf_model.generation_config.update(**_special_token_ids(Path(tokenizer_dir)))
    hf_model.save_pretrained(folder)
    if tokenizer_dir is not None:  # a dataset's tokenizer folder, or an export holding the same files
        for name in TOKENIZER_FILES:
            if (Path(tokenizer_dir) / name).is_file():
                shutil.copy2(Path(tokenizer_dir) / name, folder / name)
    return architecture


def _special_token_ids(tokenizer_dir: Path) -> dict[str, int | list[int]]:
    """bos/eos/pad ids from the tokenizer folder's config, so ``generate`` stops at end of text — and at
    the end of a chat turn (``<|im_end|>`` first in ``eos_token_id``) when the tokenizer has a chat template."""
    config = read_json(tokenizer_dir / "tokenizer_config.json") or {}
    by_token = {entry["content"]: int(i) for i, entry in config.get("added_tokens_decoder", {}).items()}
    ids: dict[str, int | list[int]] = {}
    for role in ("bos", "eos", "pad"):
        token = config.get(f"{role}_token")
        if isinstance(token, str) and token in by_token:
            ids[f"{role}_token_id"] = by_token[token]
    if config.get("chat_template") and CHAT_END_OF_TURN in by_token:
        stops = [by_token[CHAT_END_OF_TURN]] + ([ids["eos_token_id"]] if "eos_token_id" in ids else [])
        ids["eos_token_id"] = stops if len(stops) > 1 else stops[0]
    return ids


@torch.no_grad()
def logit_check(model: Transformer, folder: Path, tokens_BT: torch.Tensor) -> tuple[float, dict[str, Any]]:
    """Load the export in ``folder`` with ``AutoModelForCausalLM`` (offline, fp32) and compare its logits
    on ``tokens_BT`` with ``model``'s. Returns ``(max_logit_diff, {"max_abs_logit", "sequences", "tokens"})``
    (logits in nats); raises ExportError when the difference is a mapping error."""
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                               local_files_only=True).eval()
    was_training = model.training
    model.eval()
    try:
        ours_BTV = model(tokens_BT).float()
    finally:
        model.train(was_training)
    theirs_BTV = hf(tokens_BT).logits.float()
    difference = (ours_BTV - theirs_BTV).abs().max().item()
    largest = ours_BTV.abs().max().item()
    if not difference <= LOGIT_TOLERANCE * max(1.0, largest):  # also catches NaN
        raise ExportError(f"the exported {type(hf).__name__} gives logits up to {difference:.3g} away from ours "
                          f"(largest |logit| {largest:.3g}): the weight mapping is wrong for this config")
    return difference, {"max_abs_logit": largest, "sequences": int(tokens_BT.shape[0]),
                        "tokens": int(tokens_BT.numel())}


def export_hf(model: Transformer, cfg: ModelConfig, tokenizer_dir: Path | None, out_dir: Path, *,
              check_tokens: torch.Tensor | None = None, record: dict[str, Any] | None = None,
              card: Callable[[dict[str, Any]], str] | None = None, step_folder: bool = False) -> dict[str, Any]:
    """Write ``out_dir`` loadable by ``AutoModelForCausalLM.from_pretrained(out_dir)`` offline; return its
    manifest.

    ``tokenizer_dir``'s files (when given) go next to the weights. ``check_tokens`` (B, T) held-out ids:
    the export is loaded back and its logits compared with ours (``manifest["max_logit_diff"]``, nats).
    ``record`` adds fields to the manifest (run id, step, …); ``card(manifest)`` renders the model card
    ``README.md``. ``out_dir`` must be absent, empty or an earlier export unless ``step_folder`` (the
    caller's own lab step folder, whose ``step.json`` stays). Raises ExportError (one line) before
    writing anything when no ``transformers`` class represents ``cfg`` exactly.
    """
    out_dir = Path(out_dir)
    hf_architecture(cfg)  # refuse before touching anything
    previous = read_json(out_dir / EXPORT_MANIFEST) if step_folder else check_export_target(out_dir)
    staging = temp_path(out_dir)
    staging.mkdir(parents=True)
    try:
        architecture = write_hf_files(model, cfg, tokenizer_dir, staging)
        manifest: dict[str, Any] = {
            "format": EXPORT_FORMAT,
            "architecture": architecture,
            "size_name": cfg.size_name(),
            "model_config": configs.to_dict(cfg),
            "glasslab_version": glasslab.__version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **(record or {}),
        }
        if check_tokens is not None:
            manifest["max_logit_diff"], manifest["logit_check"] = logit_check(model, staging, check_tokens)
        if card is not None:
            write_text_atomic(staging / MODEL_CARD, card(manifest))
        manifest["files"] = _file_list(staging)
        _place(staging, out_dir, manifest, previous)
    finally:
        remove(staging)
    return manifest


def copy_export(source: Path, out_dir: Path) -> dict[str, Any]:
    """Copy the finished export in ``source`` to ``out_dir`` (absent, empty or an earlier export), checking
    every file against the manifest; returns the manifest."""
    source, out_dir = Path(source), Path(out_dir)
    manifest = read_json(source / EXPORT_MANIFEST)
    if manifest is None or manifest.get("format") != EXPORT_FORMAT:
        raise UserError(f"{source}: not a finished glasslab export (no {EXPORT_MANIFEST})")
    if out_dir.resolve() == source.resolve():
        return manifest
    previous = check_export_target(out_dir)
    staging = temp_path(out_dir)
    staging.mkdir(parents=True)
    try:
        for name, expected in manifest["files"].items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, staging / name)
            if file_sha256(staging / name) != expected["sha256"]:
                raise UserError(f"{source / name}: does not match its sha256 in {EXPORT_MANIFEST} (changed?)")
        _place(staging, out_dir, manifest, previous)
    finally:
        remove(staging)
    return manifest


def check_export_target(out_dir: Path) -> dict[str, Any] | None:
    """The earlier export's manifest in ``out_dir`` (None when absent or empty); a one-line UserError when
    it holds anything else, so an export never mixes into (or deletes) a folder of unrelated files."""
    out_dir = Path(out_dir)
    if not out_dir.exists():
        return None
    if not out_dir.is_dir():
        raise UserError(f"{out_dir}: exists and is not a folder")
    manifest = read_json(out_dir / EXPORT_MANIFEST)
    if manifest is not None and manifest.get("format") == EXPORT_FORMAT:
        return manifest
    present = sorted(p.name for p in out_dir.iterdir())
    if not present:
        return None
    shown = ", ".join(present[:3]) + (f" and {len(present) - 3} more" if len(present) > 3 else "")
    raise UserError(f"{out_dir}: not empty and not an earlier export (holds {shown}); choose a new or empty folder")


def _file_list(folder: Path) -> dict[str, dict[str, Any]]:
    return {
        path.relative_to(folder).as_posix(): {"bytes": path.stat().st_size, "sha256": file_sha256(path)}
        for path in sorted(folder.rglob("*")) if path.is_file()
    }


def _place(staging: Path, out_dir: Path, manifest: dict[str, Any], previous: dict[str, Any] | None) -> None:
    """Move the staged files into ``out_dir`` by name, drop the files only the earlier export listed, and
    write the manifest last (removed first, so a half-replaced folder never looks finished)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    remove(out_dir / EXPORT_MANIFEST)
    for name in manifest["files"]:
        (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
        move_into_place(staging / name, out_dir / name)
    for name in set((previous or {}).get("files", {})) - set(manifest["files"]):
        (out_dir / name).unlink(missing_ok=True)
    write_json_atomic(out_dir / EXPORT_MANIFEST, manifest)
