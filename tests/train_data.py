"""A tiny real dataset (two built-in domains, 512-token BPE) and run configs sized for tests."""

from __future__ import annotations

from pathlib import Path

from glasslab.config import from_dict
from glasslab.data.build import build_dataset
from glasslab.data.config import BuildConfig

VOCAB = 512
WORD_SHAPE_FILTERS = ["mean_word_length", "symbol_ratio", "alpha_ratio", "top_ngram", "duplicate_ngrams"]


def build_tiny_dataset(root: Path) -> Path:
    """Build ~300 KB of standard-library code and prose into ``root/data`` (about a second)."""
    return build_dataset(tiny_build_config(), root / "data", progress=False)


def tiny_build_config() -> BuildConfig:
    """The build of :func:`build_tiny_dataset` (two built-in domains, a 512-token BPE)."""
    return from_dict(BuildConfig, {
        "sources": [
            {"domain": "code", "kind": "builtin", "path": "stdlib_code", "max_bytes": 150_000,
             "skip_filters": WORD_SHAPE_FILTERS},
            {"domain": "prose", "kind": "builtin", "path": "stdlib_prose", "max_bytes": 150_000},
        ],
        "tokenizer": {"vocab_size": VOCAB, "sample_bytes": 200_000},
        "num_workers": 1, "samples_per_domain": 0,
    })


def tiny_run_config(dataset: Path, moe: bool = False, **train: object) -> dict:
    """A run config as plain data: a 2-layer d_model-32 model, 8 x 32-token batches, fixed peak FLOP/s."""
    model = {"vocab_size": VOCAB, "d_model": 32, "n_layers": 2, "n_heads": 2, "n_kv_heads": 2, "d_ff": 64}
    if moe:
        model["moe"] = {"num_experts": 4, "top_k": 2, "d_expert": 32, "num_shared_experts": 0,
                        "bias_update_rate": 0.01}
    train_cfg = {"seq_len": 32, "global_batch_tokens": 32 * 8, "max_steps": 20, "checkpoint_interval": 10,
                 "eval_max_tokens": 256, "sample_prompts": ["def "], "sample_max_new_tokens": 8,
                 "peak_flops": 1e12, "optimizer": {"lr": 3e-3}}
    train_cfg.update(train)
    return {"model": model, "data": {"path": str(dataset), "mixture": {"weights": {"code": 0.5, "prose": 0.5}}},
            "train": train_cfg}
