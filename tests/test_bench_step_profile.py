"""bench/step_profile.py: a training step's time by part, backward ops counted with their forward's part."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from glasslab.model import ModelConfig, MoEConfig, Transformer, moe

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from step_profile import PARTS, part_table, scoped, seconds_by_part  # noqa: E402


def test_backward_ops_count_with_their_forward_part_and_every_op_is_counted_once():
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2, d_ff=32,
                      moe=MoEConfig(num_experts=4, top_k=2, d_expert=32))
    torch.manual_seed(0)
    model = Transformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 64, (2, 17))
    model(tokens[:, :-1], targets_BT=tokens[:, 1:])  # the grouped-matmul probe runs once, here
    scopes = {"MoEFeedForward": "dispatch", "Router": "router", "GroupedExperts": "swiglu", "RMSNorm": "norm"}
    with scoped(scopes, [(moe, "grouped_mm", "experts")]), profile(activities=[ProfilerActivity.CPU]) as prof:
        model(tokens[:, :-1], targets_BT=tokens[:, 1:]).backward()
        opt.step()
    assert type(moe.grouped_mm).__name__ == "CustomOpDef"  # undone on exit: the module's op is back
    events = prof.events()
    seconds = seconds_by_part(events)
    assert set(seconds) <= set(PARTS)
    assert abs(sum(seconds.values()) - sum(e.self_cpu_time_total for e in events) / 1e6) < 1e-9
    # Forward and backward: 2 layers x (2 forward + 4 backward) grouped matmuls.
    assert sum(e.name == "aten::_grouped_mm" for e in events) == 12
    # silu's backward runs outside any scope: only its forward op's scope (the experts') can claim it.
    silu = [e for e in events if e.name in ("aten::silu", "aten::silu_backward")]
    assert {e.name for e in silu} == {"aten::silu", "aten::silu_backward"}
    assert seconds["expert SwiGLU (silu, mul)"] >= sum(e.self_cpu_time_total for e in silu) / 1e6
    for part in ("router + softmax + top-k + statistics", "dispatch + combine (sort, gather, scatter, index)",
                 "expert SwiGLU (silu, mul)", "norms", "optimizer", "loss (log-softmax, NLL)"):
        assert seconds.get(part, 0) > 0, part
    table = part_table({"ours": [seconds, seconds]})
    assert len(table) == 2 + len(PARTS) + 1 and table[-1].startswith("| total |")
