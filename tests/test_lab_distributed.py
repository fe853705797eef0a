"""Multi-worker steps: torchrun inside the step process, DDP over gloo on CPU.

A tiny pure-torch data-parallel training function stands in for the trainer: with the global batch
fixed, 2 workers (each on half of every batch, gradients averaged by DDP) must follow the same loss
curve as 1 worker on the whole batch.
"""

from __future__ import annotations

import json
import os

from glasslab.lab import Executor, Resources, Step, read_step_record

DDP_CONFIG = {"steps": 8, "global_batch": 8, "lr": 0.2, "seed": 0}


def train_tiny_dp(ctx) -> None:
    """SGD on a 2-layer MLP; writes ``losses.json`` (global mean loss per step) from rank 0."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world_size > 1:
        dist.init_process_group("gloo")
    cfg = ctx.config
    torch.manual_seed(cfg["seed"])
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    if world_size > 1:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
    data = torch.Generator().manual_seed(cfg["seed"] + 1)
    x_ND = torch.randn(2 * cfg["global_batch"], 8, generator=data)
    y_N1 = torch.sin(x_ND.sum(dim=1, keepdim=True))
    losses = []
    for step in range(cfg["steps"]):
        batch = step % 2  # two global batches, alternating, so the loss falls within a few steps
        rows = slice(batch * cfg["global_batch"], (batch + 1) * cfg["global_batch"])
        x_BD, y_B1 = x_ND[rows][rank::world_size], y_N1[rows][rank::world_size]  # this rank's share
        loss = torch.nn.functional.mse_loss(model(x_BD), y_B1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        global_loss = loss.detach().clone()
        if world_size > 1:
            dist.all_reduce(global_loss)
            global_loss /= world_size
        losses.append(global_loss.item())
    if rank == 0:
        (ctx.output_dir / "losses.json").write_text(json.dumps({"world_size": world_size, "losses": losses}))
    if world_size > 1:
        dist.destroy_process_group()
    return {"final_loss": losses[-1], "rank": rank}


def failing_rank(ctx) -> None:
    if os.environ["RANK"] == "1":
        raise RuntimeError("rank one fell over")


def read_losses(folder) -> dict:
    return json.loads((folder / "losses.json").read_text())


def test_two_worker_step_matches_one_worker_and_rank_failures_are_named(tmp_path):
    one = Step("dp1", train_tiny_dp, config=DDP_CONFIG)
    two = Step("dp2", train_tiny_dp, config=DDP_CONFIG, resources=Resources(cpus=1, workers=2))
    broken = Step("broken", failing_rank, config={}, resources=Resources(workers=2))
    report = Executor(tmp_path / "lab", jobs=3, echo=False).run([one, two, broken])
    by_name = {n.name: n for n in report.plan.steps}
    single, double = read_losses(by_name["dp1"].folder), read_losses(by_name["dp2"].folder)
    assert (single["world_size"], double["world_size"]) == (1, 2)
    assert single["losses"][-1] < 0.8 * single["losses"][0], "it trains"
    for a, b in zip(single["losses"], double["losses"], strict=True):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (single, double)
    assert report.outcomes[by_name["dp2"].key].status == "succeeded"
    returned = read_step_record(by_name["dp2"].folder)["result"]
    assert returned == {"final_loss": double["losses"][-1], "rank": 0}, "rank 0's return value is recorded"
    record = read_step_record(by_name["broken"].folder)
    assert record["status"] == "failed" and "rank 1: RuntimeError: rank one fell over" in record["error"]
