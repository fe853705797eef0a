"""The MoE feed-forward equals a naive per-token, per-expert reference; parameter groups; aux losses."""

import math

import pytest
import torch
import torch.nn.functional as F

from glasslab.model import ModelConfig, MoEConfig, Transformer
from glasslab.model import grouped_mm as grouped_mm_module
from glasslab.model.moe import MoEFeedForward, dispatch, plan_dispatch


def _layer(**moe_kwargs) -> MoEFeedForward:
    moe = MoEConfig(num_experts=6, top_k=2, d_expert=16, **moe_kwargs)
    cfg = ModelConfig(vocab_size=32, d_model=16, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=8, moe=moe)
    torch.manual_seed(0)
    layer = MoEFeedForward(cfg, 0)
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.3)
    layer.router.bias.copy_(torch.randn(6) * 0.2)
    return layer


def _naive(layer: MoEFeedForward, x_BTD: torch.Tensor) -> torch.Tensor:
    """Loop over tokens and their chosen experts; capacity in token order within each expert."""
    moe, ex = layer.moe, layer.experts
    x_TD = x_BTD.reshape(-1, x_BTD.shape[-1])
    T = x_TD.shape[0]
    capacity = math.inf if moe.capacity_factor is None else math.ceil(moe.capacity_factor * T * moe.top_k / 6)
    taken = [0] * moe.num_experts
    out = torch.zeros_like(x_TD)
    for t in range(T):
        logits = layer.router.weight @ x_TD[t]
        scores = torch.sigmoid(logits) if moe.router == "sigmoid" else torch.softmax(logits, dim=0)
        chosen = torch.topk(scores + layer.router.bias, moe.top_k).indices.tolist()
        gates = scores[chosen]
        if moe.norm_topk_prob:
            gates = gates / gates.sum()
        gates = gates * moe.routed_scaling_factor
        for e, g in zip(sorted(chosen), gates[[chosen.index(e) for e in sorted(chosen)]], strict=True):
            taken[e] += 1
            if taken[e] > capacity:
                continue
            gate_up = x_TD[t] @ ex.gate_up_EDF2[e]
            hidden = F.silu(gate_up[: ex.d_expert]) * gate_up[ex.d_expert :]
            out[t] += g * (hidden @ ex.down_EFD[e])
        if layer.shared is not None:
            out[t] += layer.shared(x_TD[t])
    return out.view_as(x_BTD)


@pytest.mark.parametrize(
    "moe_kwargs",
    [
        {},
        {"router": "softmax", "num_shared_experts": 0, "norm_topk_prob": False},
        {"routed_scaling_factor": 2.5, "num_shared_experts": 2},
        {"capacity_factor": 0.75},
    ],
)
@pytest.mark.parametrize("grouped_mm", [True, False], ids=["grouped_mm", "per-expert-loop"])
def test_moe_equals_naive_reference_values_and_gradients(moe_kwargs, grouped_mm, monkeypatch):
    if grouped_mm and not grouped_mm_module.kernel_runs("cpu", torch.float32):
        pytest.skip("torch._grouped_mm does not run on this CPU build")
    monkeypatch.setattr(grouped_mm_module, "kernel_runs", lambda device, dtype: grouped_mm)
    layer = _layer(**moe_kwargs)
    x = torch.randn(3, 7, 16, requires_grad=True)
    ours = layer(x)
    ref = _naive(layer, x)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)
    grad_out = torch.randn_like(ours)
    g_ours = torch.autograd.grad(ours, [x, *layer.parameters()], grad_out)
    g_ref = torch.autograd.grad(ref, [x, *layer.parameters()], grad_out)
    for a, b in zip(g_ours, g_ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_capacity_factor_drops_and_counts_tokens():
    layer = _layer(capacity_factor=0.5)
    layer.train()
    layer(torch.randn(2, 16, 16))
    counts_E = layer.pending.counts_E
    assert int(counts_E.sum()) == 2 * 16 * 2
    capacity = math.ceil(0.5 * 2 * 16 * 2 / 6)
    assert int(layer.pending.dropped) == int((counts_E - capacity).clamp(min=0).sum()) > 0


def test_router_bias_stays_fp32_when_the_model_is_cast():
    cfg = ModelConfig(vocab_size=32, d_model=16, n_layers=1, n_heads=2, d_ff=8, moe=MoEConfig(d_expert=8))
    model = Transformer(cfg).to(torch.bfloat16)
    layer = model.blocks[0].ffn
    assert layer.router.bias.dtype == torch.float32 and layer.router.weight.dtype == torch.bfloat16
    assert "blocks.0.ffn.router.bias" in model.state_dict()
    assert model(torch.randint(0, 32, (1, 5))).dtype == torch.float32


def test_param_groups_cover_every_parameter_once():
    cfg = ModelConfig(
        vocab_size=32, d_model=16, n_layers=2, n_heads=2, d_ff=8, moe=MoEConfig(d_expert=8, first_k_dense=1)
    )
    model = Transformer(cfg)
    groups = model.param_groups()
    assert set(groups) == {"embed", "attn", "mlp", "experts", "router", "norm", "lm_head"}
    names = [n for members in groups.values() for n, _ in members]
    assert sorted(names) == sorted(n for n, _ in model.named_parameters())
    assert [n for n, _ in groups["router"]] == ["blocks.1.ffn.router.weight"]
    assert {n for n, _ in groups["experts"]} == {
        "blocks.1.ffn.experts.gate_up_EDF2",
        "blocks.1.ffn.experts.down_EFD",
    }
    assert "blocks.1.ffn.shared.gate_up_proj.weight" in {n for n, _ in groups["mlp"]}
    assert [n for n, _ in groups["lm_head"]] == ["lm_head.weight"]


def test_aux_loss_is_zero_when_off_and_differentiable_when_on():
    base = dict(vocab_size=32, d_model=16, n_layers=2, n_heads=2, d_ff=8)
    tokens = torch.randint(0, 32, (2, 8))
    off = Transformer(ModelConfig(**base, moe=MoEConfig(d_expert=8)))
    off(tokens)
    assert off.aux_loss().item() == 0.0
    moe = MoEConfig(d_expert=8, balance_loss_coef=0.01, router_z_loss_coef=0.001)
    on = Transformer(ModelConfig(**base, logit_z_loss_coef=1e-4, moe=moe))
    on(tokens)
    loss = on.aux_loss()
    # switch loss >= coef (equality at a perfectly uniform router), plus positive z-losses
    assert loss.item() > 2 * 0.01
    loss.backward()
    assert on.blocks[0].ffn.router.weight.grad.abs().sum() > 0
    on.eval()
    on(tokens)
    assert on.aux_loss().item() == 0.0


def test_grouped_mm_probe_draws_no_random_numbers():
    """The probe runs at a process's first MoE forward, after a resume restored the RNG."""
    grouped_mm_module.kernel_runs.cache_clear()
    before = torch.get_rng_state()
    with torch.inference_mode():
        under_inference = grouped_mm_module.kernel_runs("cpu", torch.float32)
    assert torch.equal(torch.get_rng_state(), before)
    grouped_mm_module.kernel_runs.cache_clear()
    assert under_inference == grouped_mm_module.kernel_runs("cpu", torch.float32)


@pytest.mark.parametrize("grouped_mm", [True, False], ids=["grouped_mm", "per-expert-loop"])
def test_an_expert_without_tokens_gets_zero_gradient(grouped_mm, monkeypatch):
    monkeypatch.setattr(grouped_mm_module, "kernel_runs", lambda device, dtype: grouped_mm)
    layer = _layer()
    with torch.no_grad():
        layer.router.bias.copy_(torch.tensor([0.0, 0.0, 0.0, 0.0, -50.0, -50.0]))  # 4 and 5 never chosen
    x = torch.randn(2, 5, 16, requires_grad=True)
    ours = layer(x)
    torch.testing.assert_close(ours, _naive(layer, x), atol=1e-5, rtol=1e-5)
    ours.square().sum().backward()
    grad = layer.experts.gate_up_EDF2.grad
    assert torch.all(grad[4:] == 0) and grad[:4].abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_moe_is_one_graph_and_matches_eager(dtype):
    """The experts are custom ops with a fixed output shape, so a dropless MoE compiles without a graph
    break in any dtype (torch's own _grouped_mm shape rule accepts only bf16) and AOT autograd runs
    our backward: values, gradients and routing statistics match eager."""
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2, d_ff=32,
                      moe=MoEConfig(num_experts=4, top_k=2, d_expert=32))
    torch.manual_seed(0)
    eager_model = Transformer(cfg).to(dtype)
    compiled_model = Transformer(cfg).to(dtype)
    compiled_model.load_state_dict(eager_model.state_dict())
    tokens = torch.randint(0, 64, (2, 17))
    eager = eager_model(tokens)
    # aot_eager: dynamo and AOT autograd trace, no C++ build needed; fullgraph fails on any graph break.
    compiled = torch.compile(compiled_model, backend="aot_eager", fullgraph=True)(tokens)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(compiled, eager, atol=tol, rtol=tol)
    eager.logsumexp(-1).mean().backward()
    compiled.logsumexp(-1).mean().backward()
    for (name, a), b in zip(eager_model.named_parameters(), compiled_model.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, atol=tol, rtol=tol, msg=name)
    assert compiled_model.blocks[0].ffn.experts.gate_up_EDF2.grad.abs().sum() > 0
    for a, b in zip(eager_model.blocks, compiled_model.blocks, strict=True):
        assert torch.equal(a.ffn.pending.counts_E, b.ffn.pending.counts_E)
        assert int(b.ffn.pending.tokens) == 2 * 17


def test_experts_compute_in_bf16_under_autocast_with_fp32_weights(monkeypatch):
    """Under bf16 autocast the grouped matmul receives bf16 activations and weights although the
    parameters stay fp32 (the op has an autocast rule), matches an fp32 reference to bf16 precision,
    and hands fp32 gradients back to the fp32 weights."""
    seen = []
    kernel_runs = grouped_mm_module.kernel_runs
    monkeypatch.setattr(grouped_mm_module, "kernel_runs", lambda device, dtype: seen.append(dtype) or kernel_runs(
        device, dtype))
    layer = _layer(num_shared_experts=0)
    x = torch.randn(2, 24, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        routing = layer.router(x.reshape(-1, 16))
        plan = plan_dispatch(routing.expert_TK, 6, None)
        y = layer.experts(dispatch(x.reshape(-1, 16), plan, 2), plan.ends_E)
    assert seen and set(seen) == {torch.bfloat16} and y.dtype == torch.bfloat16
    assert layer.experts.gate_up_EDF2.dtype == torch.float32
    reference = torch.cat([
        expert(x_e, layer.experts, e) for e, x_e in enumerate(dispatch(x.reshape(-1, 16), plan, 2).split(
            torch.diff(plan.ends_E, prepend=plan.ends_E.new_zeros(1)).tolist()))
    ])
    torch.testing.assert_close(y.float(), reference, atol=3e-2, rtol=3e-2)
    y.float().square().sum().backward()
    assert layer.experts.gate_up_EDF2.grad.dtype == torch.float32


def expert(x_ND: torch.Tensor, experts, e: int) -> torch.Tensor:
    """Expert ``e``'s SwiGLU in fp32, one matmul at a time."""
    gate_up = x_ND @ experts.gate_up_EDF2[e]
    return (F.silu(gate_up[:, : experts.d_expert]) * gate_up[:, experts.d_expert :]) @ experts.down_EFD[e]


def test_router_logits_stay_fp32_under_autocast():
    """A bf16 logit would move a sigmoid score near 0.5 in steps of ~1e-3, coarser than the bias updates."""
    layer = _layer()
    x_TD = torch.randn(40, 16)
    exact = layer.router(x_TD)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        routed = layer.router(x_TD)
    assert routed.logits_TE.dtype == torch.float32
    assert torch.equal(routed.logits_TE, exact.logits_TE) and torch.equal(routed.expert_TK, exact.expert_TK)


def test_routing_accumulators_follow_the_model_to_its_device_and_keep_their_dtypes():
    """Created on the model's device up front, never moved inside a (compiled) forward."""
    cfg = ModelConfig(vocab_size=32, d_model=16, n_layers=2, n_heads=2, d_ff=8, moe=MoEConfig(d_expert=8))
    model = Transformer(cfg).to(torch.bfloat16).to("meta")  # meta stands in for a GPU
    for block in model.blocks:
        tensors = block.ffn.pending.tensors()
        assert {t.device.type for t in tensors.values()} == {"meta"}
        assert tensors["entropy_sum"].dtype == torch.float64 and tensors["counts_E"].dtype == torch.long
