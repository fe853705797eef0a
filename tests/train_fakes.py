"""Small stand-ins for the trainer's tests: a learnable synthetic token stream and a tiny model config."""

from __future__ import annotations

from pathlib import Path

import torch

from glasslab.model import ModelConfig, MoEConfig, Transformer
from glasslab.track import init as track_init
from glasslab.train.callbacks import Callback
from glasslab.train.config import TrainConfig
from glasslab.train.distributed import DistContext
from glasslab.train.evals import evaluate
from glasslab.train.loop import RunParts, Trainer

VOCAB = 64


def tiny_model_config(moe: bool = False) -> ModelConfig:
    moe_cfg = MoEConfig(num_experts=4, top_k=2, d_expert=32, num_shared_experts=0, bias_update_rate=1e-2)
    moe_cfg = moe_cfg if moe else None
    return ModelConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=64, moe=moe_cfg)


def arithmetic_batch(seed: int, index: int, batch: int, seq_len: int) -> torch.Tensor:
    """Sequences ``a, a+d, a+2d, ... (mod VOCAB)`` with random start and stride: learnable, not trivial."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + index)
    start = torch.randint(0, VOCAB, (batch, 1), generator=g)
    stride = torch.randint(1, 4, (batch, 1), generator=g)
    return (start + stride * torch.arange(seq_len + 1)) % VOCAB


class SyntheticLoader:
    """The data part's Loader contract over :func:`arithmetic_batch`, with state in global steps."""

    domains = ("synthetic",)

    def __init__(self, seq_len: int, global_batch: int, rank: int = 0, world_size: int = 1, seed: int = 0) -> None:
        self.seq_len, self.global_batch, self.seed = seq_len, global_batch, seed
        self.rank, self.world_size = rank, world_size
        self.position = 0

    def next_batch(self) -> torch.Tensor:
        full = arithmetic_batch(self.seed, self.position, self.global_batch, self.seq_len)
        self.position += 1
        share = self.global_batch // self.world_size
        return full[self.rank * share:(self.rank + 1) * share]

    def skip(self, n_steps: int) -> None:
        self.position += n_steps

    def weights_at(self, step: int) -> dict[str, float]:
        return {"synthetic": 1.0}

    def epochs(self) -> dict[str, float]:
        return {"synthetic": 0.0}  # an endless stream never repeats

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = state["position"]


def make_trainer(run_dir: Path, cfg: TrainConfig, moe: bool = False, loader=None, log: bool = True,
                 callbacks=(), ctx: DistContext | None = None) -> Trainer:
    """A Trainer on the real tiny Transformer and the synthetic stream, logging into ``run_dir``
    (``ctx``: this process's place in a job whose process group is already up; default one process)."""
    ctx = ctx or DistContext()
    torch.manual_seed(cfg.seed)
    model_cfg = tiny_model_config(moe)
    model = Transformer(model_cfg)
    loader = loader or SyntheticLoader(cfg.seq_len, cfg.global_batch_size, ctx.rank, ctx.world_size)
    # held-out batches are (tokens, scored): every target of the synthetic stream counts
    heldout = {"synthetic": lambda: [(batch, torch.ones_like(batch, dtype=torch.bool))
                                     for batch in (arithmetic_batch(10_000, i, 8, cfg.seq_len) for i in range(2))]}

    def evaluate_model(m, step):
        return evaluate(m, heldout, {"synthetic": 1.0}, torch.device("cpu"))

    parts = RunParts(model=model, balancer=model.balancer, loader=loader,
                     flops_per_token=model_cfg.flops_per_token(cfg.seq_len), evaluate=evaluate_model)
    run = track_init(run_dir, {"train": {}}) if log and ctx.is_main else None
    return Trainer(cfg, parts, run, run_dir, ctx, {"train": {}}, peak_flops=1e11, callbacks=callbacks)


class LossAverage(Callback):
    """A user's metric with state: the mean training loss so far, logged each step as ``custom/loss_average``
    (nats/token); ``restored`` is the state a checkpoint gave back, if any."""

    def __init__(self) -> None:
        self.total, self.count = 0.0, 0
        self.restored: dict | None = None

    def after_step(self, trainer, metrics: dict[str, float]) -> None:
        if "train/loss" in metrics:
            self.total += metrics["train/loss"]
            self.count += 1
            trainer.log_metrics({"custom/loss_average": self.total / self.count})

    def state_dict(self) -> dict:
        return {"total": self.total, "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.total, self.count = state["total"], state["count"]
        self.restored = dict(state)
