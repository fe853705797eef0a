"""FSDP2 on two CPU ranks over gloo, in-process so the collectives can be watched: bf16 parameters in
the blocks' forward with fp32 routers and master weights, one gradient reduction per optimiser step
whatever the micro-batches, and sharded checkpoints that resume on another number of ranks (the
loss of the first step after a resume is the same bit for bit; later ones differ only by the order
in which gradients are summed)."""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from glasslab.layout import checkpoint_problem
from glasslab.model import Transformer
from glasslab.model.load import load_checkpoint_weights
from glasslab.train import checkpoint as ckpt
from glasslab.train import distributed
from glasslab.train.config import ScheduleConfig, TrainConfig
from glasslab.train.distributed import DistContext
from train_fakes import make_trainer, tiny_model_config

pytestmark = pytest.mark.slow  # two spawned ranks each: ~30 s per test on 2 shared cores


def _cfg(**kw) -> TrainConfig:
    base = dict(seq_len=16, global_batch_tokens=16 * 8, max_steps=10, checkpoint_interval=100,
                schedule=ScheduleConfig(kind="constant", warmup_fraction=0.0))
    return TrainConfig(**{**base, **kw})


def _join(rank: int, init_file: str) -> DistContext:
    if sys.platform == "linux":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo may otherwise stall on the host name
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=120))
    return DistContext(rank=rank, world_size=2, owns_group=True)


def _reduce_scatter_counter() -> list[int]:
    """Counts FSDP2's gradient reduce-scatters from now on (torch names the call differently by version)."""
    count = [0]
    name = "reduce_scatter_single" if hasattr(dist, "reduce_scatter_single") else "reduce_scatter_tensor"
    original = getattr(dist, name)

    def counting(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    setattr(dist, name, counting)
    return count


def _policy_rank(rank: int, init_file: str, out_dir: str) -> None:
    ctx = _join(rank, init_file)
    # Two micro-batches of two sequences on each rank.
    trainer = make_trainer(Path(out_dir) / "run", _cfg(precision="bf16", micro_batch_size=2, parallelism="fsdp"),
                           moe=True, log=False, ctx=ctx)
    seen: dict[str, str] = {}

    def block_weight(module, args):
        seen.setdefault("block_weight", str(module.qkv_proj.weight.dtype))

    def router_weight(module, args):
        seen.setdefault("router_weight", str(module.weight.dtype))

    def router_logits(module, args, routing):
        seen.setdefault("router_logits", str(routing.logits_TE.dtype))

    trainer.model.blocks[1].attn.register_forward_pre_hook(block_weight)
    trainer.model.blocks[1].ffn.router.register_forward_pre_hook(router_weight)
    trainer.model.blocks[1].ffn.router.register_forward_hook(router_logits)
    reduce_scatters = _reduce_scatter_counter()
    losses, per_step = [], []
    for _ in range(2):
        before = reduce_scatters[0]
        losses.append(trainer.train_step()["train/loss"])
        per_step.append(reduce_scatters[0] - before)
    from torch.distributed.fsdp import FSDPModule

    result = {**seen, "losses": losses, "reduce_scatters_per_step": per_step,
              "fsdp_groups": sum(isinstance(m, FSDPModule) for m in trainer.model.modules()),
              "master_dtypes": sorted({str(p.dtype) for p in trainer.model.parameters()})}
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(result))
    ctx.close()


def _resume_rank(rank: int, init_file: str, root: str) -> None:
    """Resume the single process's step-2 checkpoint on two ranks, train to step 4 and write a sharded
    checkpoint there, then train two steps more."""
    ctx = _join(rank, init_file)
    root_dir = Path(root)
    trainer = make_trainer(root_dir / "sharded", _cfg(micro_batch_size=4, parallelism="fsdp"), moe=True, log=False,
                           ctx=ctx)
    trainer.load(ckpt.checkpoint_path(root_dir / "single", 2))
    assert trainer.step == 2
    losses = {step: trainer.train_step()["train/loss"] for step in (3, 4)}
    trainer.save_checkpoint()
    state = distributed.full_model_state(trainer.model, sharded=True)  # buffers are the live ones: save now
    if ctx.is_main:
        torch.save(state, root_dir / "sharded_state_at_4.pt")
    losses.update({step: trainer.train_step()["train/loss"] for step in (5, 6)})
    if ctx.is_main:
        (root_dir / "sharded_losses.json").write_text(json.dumps(losses))
    ctx.close()


def _spawn(fn, args: tuple, timeout_s: float = 240) -> None:
    """Run ``fn(rank, *args)`` on two fresh processes; fail (and kill them) after ``timeout_s``."""
    context = mp.start_processes(fn, args=args, nprocs=2, start_method="spawn", join=False)
    deadline = time.monotonic() + timeout_s
    while not context.join(timeout=max(0.0, deadline - time.monotonic())):  # raises if a rank failed
        if time.monotonic() >= deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"2 ranks did not finish within {timeout_s:.0f} s")


def test_bf16_policy_and_one_gradient_reduction_per_step(tmp_path):
    _spawn(_policy_rank, (str(tmp_path / "init"), str(tmp_path)))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for result in ranks:
        assert result["block_weight"] == "torch.bfloat16"  # all-gathered in bf16
        assert result["router_weight"] == result["router_logits"] == "torch.float32"
        assert result["master_dtypes"] == ["torch.float32"]  # the sharded weights the optimiser steps
        # 2 routers, 2 blocks and the root: one reduce-scatter each per step, not one per micro-batch
        assert result["fsdp_groups"] == 5 and result["reduce_scatters_per_step"] == [5, 5]
    assert ranks[0]["losses"] == ranks[1]["losses"]
    single = make_trainer(tmp_path / "single", _cfg(precision="bf16", micro_batch_size=2), moe=True, log=False)
    expected = [single.train_step()["train/loss"] for _ in range(2)]  # autocast over fp32 weights
    assert ranks[0]["losses"] == pytest.approx(expected, rel=2e-2)


def test_sharded_checkpoints_resume_on_another_number_of_ranks(tmp_path):
    cfg = _cfg(micro_batch_size=4)  # one micro-batch per rank on two, two on one: the same sums
    single = make_trainer(tmp_path / "single", cfg, moe=True, log=False)
    losses = {step: single.train_step()["train/loss"] for step in (1, 2)}
    single.save_checkpoint()
    losses.update({step: single.train_step()["train/loss"] for step in (3, 4)})

    _spawn(_resume_rank, (str(tmp_path / "init"), str(tmp_path)))  # one process → two ranks
    sharded = {int(k): v for k, v in json.loads((tmp_path / "sharded_losses.json").read_text()).items()}
    assert sharded[3] == losses[3]  # the resumed weights, bit for bit
    assert sharded[4] == pytest.approx(losses[4], rel=1e-5)
    path = ckpt.checkpoint_path(tmp_path / "sharded", 4)
    assert ckpt.is_sharded(path) and not (path / "model.pt").exists() and checkpoint_problem(path) is None
    assert sorted(p.name for p in (path / ckpt.SHARDED_MODEL).glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]

    whole = make_trainer(tmp_path / "whole", cfg, moe=True, log=False)  # two ranks → one process
    whole.load(path)
    reference = torch.load(tmp_path / "sharded_state_at_4.pt")
    state = whole.model.state_dict()
    assert set(state) == set(reference)
    assert [k for k, v in reference.items() if not torch.equal(state[k], v)] == []
    evaluated = Transformer(tiny_model_config(moe=True))  # evals, export and chat read the shards too
    load_checkpoint_weights(evaluated, path)
    assert [k for k, v in evaluated.state_dict().items() if not torch.equal(reference[k], v)] == []
    assert whole.train_step()["train/loss"] == sharded[5]
    assert whole.train_step()["train/loss"] == pytest.approx(sharded[6], rel=1e-5)
