"""Model configs: hand-computed parameter counts and FLOPs, size names, one-line config errors."""

import pytest

from glasslab.config import ConfigError, apply_overrides, from_dict, load, to_dict
from glasslab.model import ModelConfig, MoEConfig, Transformer, size_name

DENSE = ModelConfig(vocab_size=100, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24)
MOE = ModelConfig(
    vocab_size=100,
    d_model=16,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    d_ff=24,
    tie_embeddings=True,
    moe=MoEConfig(num_experts=4, top_k=2, d_expert=8, num_shared_experts=1, first_k_dense=1),
)


def test_dense_param_counts_by_hand():
    # per layer: q 16·16 + k 16·8 + v 16·8 + o 16·16 = 768; qk-norm 4+4; 2 norms of 16; SwiGLU 3·16·24
    per_layer = 768 + 8 + 32 + 1152
    non_embedding = 2 * per_layer + 16
    embedding = 2 * 100 * 16  # untied: embedding + LM head
    assert DENSE.param_counts() == {
        "total": embedding + non_embedding,
        "active": embedding + non_embedding,
        "embedding": embedding,
        "non_embedding": non_embedding,
        "active_non_embedding": non_embedding,
    }
    assert non_embedding == 3936


def test_moe_param_counts_by_hand_and_against_the_module():
    dense_layer = 768 + 8 + 32 + 1152
    shared = 3 * 16 * 8
    moe_layer = 768 + 8 + 32 + 4 * 16 + 4 * 3 * 16 * 8 + shared  # router 4·16, 4 experts, 1 shared
    moe_layer_active = 768 + 8 + 32 + 4 * 16 + 2 * 3 * 16 * 8 + shared
    counts = MOE.param_counts()
    assert counts["embedding"] == 1600  # tied
    assert counts["non_embedding"] == dense_layer + moe_layer + 16 == 4768
    assert counts["active_non_embedding"] == dense_layer + moe_layer_active + 16 == 4000
    assert counts["total"] == 6368 and counts["active"] == 5600
    for cfg in (DENSE, MOE):
        model = Transformer(cfg)
        assert sum(p.numel() for p in model.parameters()) == cfg.param_counts()["total"]


def test_flops_per_token_by_hand():
    # active matmul: layer 0 = attn 768 + SwiGLU 1152; layer 1 = attn 768 + router 64 + 2 experts 768
    # + shared 384; plus LM head 100·16 (tied, still a matmul); attention 12 · 2 layers · 16 · 32
    assert MOE.flops_per_token(32) == 6 * (1920 + 1984 + 1600) + 12 * 2 * 16 * 32 == 45312
    dense_matmul = 2 * (768 + 1152) + 1600
    assert DENSE.flops_per_token(128) == 6 * dense_matmul + 12 * 2 * 16 * 128


@pytest.mark.parametrize(
    ("total", "active", "name"),
    [
        (1.6e9, 61e6, "1.6B-A61M"),
        (3.2e6, 0.9e6, "3.2M-A0.9M"),
        (27.7e9, 1.2e9, "27.7B-A1.2B"),
        (535e9, 23e9, "535B-A23B"),
        (124e6, 124e6, "124M-A124M"),
        (999.8e6, 61.3e6, "1.0B-A61.3M"),
    ],
)
def test_size_names(total, active, name):
    assert size_name(total, active) == name


def test_size_name_of_a_config():
    assert DENSE.size_name() == "7.1K-A7.1K"
    assert MOE.size_name() == "6.4K-A5.6K"


def _build(kwargs):
    moe = kwargs.pop("moe", None)
    return ModelConfig(**kwargs, moe=None if moe is None else MoEConfig(**moe))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"d_model": 30, "n_heads": 4}, "model.n_heads"),
        ({"n_heads": 4, "n_kv_heads": 3}, "model.n_kv_heads"),
        ({"d_model": 12, "n_heads": 4}, "model.head_dim"),  # head width 3 is odd: RoPE needs pairs
        ({"moe": {"num_experts": 4, "top_k": 5}}, "model.moe.top_k"),
        ({"n_layers": 2, "moe": {"first_k_dense": 2}}, "model.moe.first_k_dense"),
        ({"moe": {"capacity_factor": 0}}, "model.moe.capacity_factor"),
        # torch._grouped_mm on CUDA wants 16-byte rows: 8 bf16 values (refused on any machine)
        ({"moe": {"d_expert": 20}}, "model.moe.d_expert"),
        ({"d_model": 36, "n_heads": 2, "moe": {"d_expert": 16}}, "model.d_model"),
    ],
)
def test_impossible_configs_fail_with_one_line_naming_the_field(kwargs, field):
    with pytest.raises(ConfigError) as err:
        _build(dict(kwargs))
    message = str(err.value)
    assert field in message and "\n" not in message
    with pytest.raises(ConfigError):  # the same through the config loader
        from_dict(ModelConfig, kwargs)


def test_overrides_turn_moe_on_and_round_trip():
    cfg = load(ModelConfig, None, ["moe.num_experts=16", "d_model=64"])
    assert cfg.moe is not None and cfg.moe.num_experts == 16 and cfg.d_model == 64
    data = apply_overrides(to_dict(cfg), ["moe.top_k=4"])
    assert from_dict(ModelConfig, data).moe.top_k == 4
