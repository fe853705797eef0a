"""Router-bias balancing: rules fix a skewed router; bias untouched by gradients and eval; statistics are
exact under gradient accumulation, activation checkpointing and all-reduce over two ranks."""

import datetime
import os
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.checkpoint import checkpoint

from glasslab.model import Balancer, ModelConfig, MoEConfig, Transformer
from glasslab.model.moe import MoEFeedForward

E, K, D = 8, 2, 16


def _skewed_layer(balancing: str, rate: float, router: str = "sigmoid") -> MoEFeedForward:
    moe = MoEConfig(
        num_experts=E, top_k=K, d_expert=8, balancing=balancing, bias_update_rate=rate, router=router
    )
    cfg = ModelConfig(vocab_size=32, d_model=D, n_layers=1, n_heads=2, d_ff=8, moe=moe)
    torch.manual_seed(0)
    layer = MoEFeedForward(cfg, 0)
    torch.nn.init.normal_(layer.router.weight, std=0.3)
    with torch.no_grad():
        # Tokens share a common direction u; experts 0 and 1 are aligned with it, so they win most tokens.
        layer.router.weight[0] += 1.5
        layer.router.weight[1] += 1.0
    return layer


def _tokens(step: int) -> torch.Tensor:
    """1,024 tokens around a shared direction; fresh ones every step."""
    g = torch.Generator().manual_seed(step)
    return torch.randn(16, 64, D, generator=g) * 0.5 + 0.25


@pytest.mark.parametrize(
    ("rule", "rate", "router", "steps", "final"),
    [
        ("sign", 0.003, "sigmoid", 150, 0.35),  # fixed γ-steps keep oscillating around balance
        ("quantile", 0.5, "sigmoid", 15, 0.3),
        ("quantile", 0.5, "softmax", 20, 0.3),
    ],
)
def test_bias_rule_drives_max_violation_down_on_a_skewed_router(rule, rate, router, steps, final):
    layer = _skewed_layer(rule, rate, router)
    balancer = Balancer(layer)
    violations = []
    layer.train()
    with torch.no_grad():
        for step in range(steps):
            layer(_tokens(step))
            violations.append(balancer.step().scalars["moe/layer_0/load_max_violation"])
    assert violations[0] > 2.0, violations[0]  # deliberately skewed: top expert gets > 3x its share
    tail = violations[-10:]
    assert sum(tail) / len(tail) < final, violations


def test_no_balancing_leaves_the_skew():
    layer = _skewed_layer("none", 0.01)
    balancer = Balancer(layer)
    layer.train()
    with torch.no_grad():
        for step in range(3):
            layer(_tokens(step))
            stats = balancer.step()
    assert stats.scalars["moe/layer_0/load_max_violation"] > 2.0
    assert stats.scalars["moe/layer_0/router_bias_norm"] == 0.0


def _moe_model(**moe_kwargs) -> Transformer:
    torch.manual_seed(0)
    moe = MoEConfig(num_experts=4, top_k=2, d_expert=8, **moe_kwargs)
    return Transformer(ModelConfig(vocab_size=64, d_model=16, n_layers=2, n_heads=2, d_ff=16, moe=moe))


def test_bias_untouched_by_gradients_and_in_eval():
    model = _moe_model(bias_update_rate=0.1)
    router = model.blocks[0].ffn.router
    assert "bias" not in dict(router.named_parameters()) and not router.bias.requires_grad
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    tokens = torch.randint(0, 64, (2, 17))
    for _ in range(3):
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 64), tokens[:, 1:].reshape(-1))
        (loss + model.aux_loss()).backward()
        opt.step()
        opt.zero_grad()
    assert torch.equal(router.bias, torch.zeros(4))  # no balancer step yet: gradients never moved it
    stats = model.balancer.step()
    after_step = router.bias.clone()
    assert after_step.abs().sum() > 0 and stats.vectors["moe/layer_0/router_bias"] == after_step.tolist()
    model.eval()
    with torch.no_grad():
        model(tokens)
    assert int(model.blocks[0].ffn.pending.tokens) == 0
    assert model.balancer.step().scalars == {}
    assert torch.equal(router.bias, after_step)


def test_counts_equal_under_gradient_accumulation_and_checkpointing():
    tokens = torch.randint(0, 64, (8, 12))
    whole = _moe_model()
    whole(tokens)
    whole_counts = [m.ffn.pending.counts_E.clone() for m in whole.blocks]
    micro = _moe_model()
    for chunk in tokens.split(4):
        micro(chunk)
    assert all(
        torch.equal(m.ffn.pending.counts_E, c) for m, c in zip(micro.blocks, whole_counts, strict=True)
    )
    for reentrant in (False, True):
        layer = _moe_model().blocks[0].ffn
        x = torch.randn(8, 12, 16, requires_grad=True)
        checkpoint(layer, x, use_reentrant=reentrant).sum().backward()
        assert int(layer.pending.tokens) == 8 * 12  # the recomputation in backward did not count again
        assert int(layer.pending.counts_E.sum()) == 8 * 12 * 2


def test_state_dict_holds_pending_statistics():
    model = _moe_model(balancing="quantile", bias_update_rate=0.5)
    model(torch.randint(0, 64, (2, 9)))
    state = model.balancer.state_dict()
    fresh = _moe_model(balancing="quantile", bias_update_rate=0.5)
    fresh.balancer.load_state_dict(state)
    assert fresh.balancer.step() == model.balancer.step()


def _rank_main(rank: int, init_file: str, out_dir: str) -> None:
    if sys.platform == "linux":
        # Loopback: gloo otherwise connects to whatever the host name resolves to, which can stall.
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # A rendezvous file unique to this test (no port to collide on) and a timeout instead of 30 minutes.
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    model = _moe_model(bias_update_rate=0.05)
    # DDP broadcasts module buffers from rank 0 before each forward: our pending counts must survive it.
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    tokens = torch.randint(0, 64, (4, 10), generator=torch.Generator().manual_seed(1))
    for micro in range(2):  # one sequence per micro-batch: rank r sees sequences 2r and 2r + 1
        ddp(tokens[2 * rank + micro : 2 * rank + micro + 1]).sum().backward()
    stats = model.balancer.step()
    torch.save({"bias": model.blocks[1].ffn.router.bias, "stats": stats.scalars}, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


def _spawn(fn, args: tuple, nprocs: int, timeout_s: float) -> None:
    """Run ``fn(rank, *args)`` in ``nprocs`` fresh processes; fail (and kill them) after ``timeout_s``."""
    context = mp.start_processes(fn, args=args, nprocs=nprocs, start_method="spawn", join=False)
    deadline = time.monotonic() + timeout_s
    while not context.join(timeout=max(0.0, deadline - time.monotonic())):  # raises if a rank failed
        if time.monotonic() >= deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"{nprocs} ranks did not finish within {timeout_s:.0f} s")


def test_statistics_are_all_reduced_over_ranks(tmp_path: Path):
    _spawn(_rank_main, (str(tmp_path / "init"), str(tmp_path)), nprocs=2, timeout_s=180)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in range(2))
    single = _moe_model(bias_update_rate=0.05)
    single(torch.randint(0, 64, (4, 10), generator=torch.Generator().manual_seed(1)))
    stats = single.balancer.step()
    assert torch.equal(r0["bias"], r1["bias"]) and torch.equal(r0["bias"], single.blocks[1].ffn.router.bias)
    assert r0["stats"] == pytest.approx(stats.scalars) and r1["stats"] == pytest.approx(stats.scalars)


def test_statistics_of_a_uniform_router_by_hand():
    layer = _skewed_layer("sign", 0.01)
    with torch.no_grad():
        layer.router.weight.zero_()  # every score is sigmoid(0) = 0.5: uniform routing distribution
    layer.train()
    layer(torch.randn(3, 10, D))
    stats = Balancer(layer).step()
    assert stats.scalars["moe/layer_0/routing_entropy"] == pytest.approx(torch.log(torch.tensor(8.0)).item())
    load = stats.vectors["moe/layer_0/expert_load"]
    assert len(load) == E and sum(load) == pytest.approx(1.0)
    counts = torch.tensor(load) * 3 * 10 * K
    assert stats.scalars["moe/layer_0/load_max_violation"] == pytest.approx(
        float(counts.max() / counts.mean() - 1)
    )
    assert stats.scalars["moe/layer_0/dropped_tokens"] == 0.0
    bias = torch.tensor(stats.vectors["moe/layer_0/router_bias"])
    assert bias.sum().abs() < 1e-6  # centred
    assert stats.scalars["moe/layer_0/router_bias_norm"] == pytest.approx(float(bias.norm()))
