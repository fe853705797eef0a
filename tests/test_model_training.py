"""A tiny dense and a tiny MoE model really learn a pattern, with the balancer stepping every update."""

import pytest
import torch
import torch.nn.functional as F

from glasslab.model import ModelConfig, MoEConfig, Transformer


@pytest.mark.parametrize("moe", [None, MoEConfig(num_experts=4, top_k=2, d_expert=32, balancing="quantile")])
def test_tiny_model_learns_a_repeating_sequence(moe):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, moe=moe)
    model = Transformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    pattern = torch.randint(0, 32, (7,))
    data = pattern.repeat(40)  # period 7: predictable after the first period
    losses = []
    for _ in range(25):
        starts = torch.randint(0, data.numel() - 33, (8,))
        batch = torch.stack([data[s : s + 33] for s in starts.tolist()])
        for micro in batch.split(4):  # two micro-batches per optimiser step
            logits = model(micro[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, 32), micro[:, 1:].reshape(-1))
            ((loss + model.aux_loss()) / 2).backward()
        opt.step()
        opt.zero_grad()
        stats = model.balancer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    if moe is not None:
        assert set(stats.scalars) >= {f"moe/layer_{i}/load_max_violation" for i in (0, 1)}
        assert all(v == v for v in stats.scalars.values())  # finite, not NaN
