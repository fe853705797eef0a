"""The ``train`` section of a run's config: batch, budget, optimiser, schedule, guard, intervals.

A run is ``RunConfig`` = {``model``, ``data``, ``train``} (see :mod:`glasslab.train.run_config`);
this module holds only the trainer's own part so it imports nothing but the config machinery.
Fields that do not change what the run computes (intervals, retention, the peak FLOP/s flag) are
``UNVERSIONED``: they may differ on ``--resume`` and stay out of the config hash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from glasslab.config import UNVERSIONED, require
from glasslab.evals.task import TaskConfig


@dataclass(frozen=True)
class OptimizerConfig:
    """AdamW for everything, or Muon for 2-D (and stacked expert) matrices with AdamW for the rest."""

    name: Literal["adamw", "muon"] = "adamw"
    """``adamw``, or ``muon`` (hidden matrices orthogonalised; embeddings, head, norms stay on AdamW)."""
    lr: float = 3e-3
    """Peak learning rate of the AdamW groups."""
    betas: tuple[float, ...] = (0.9, 0.95)
    """AdamW β1, β2."""
    eps: float = 1e-8
    """AdamW ε."""
    weight_decay: float = 0.1
    """Decoupled weight decay for matrices; norms, biases and embeddings never decay."""
    muon_lr: float = 0.02
    """Peak learning rate of the Muon groups (Muon updates have unit spectral scale)."""
    muon_momentum: float = 0.95
    """Muon's Nesterov momentum."""
    muon_ns_steps: int = 5
    """Newton–Schulz iterations used to orthogonalise each Muon update."""

    def __post_init__(self) -> None:
        require(self.lr > 0, "train.optimizer.lr", self.lr, "a positive number")
        require(self.muon_lr > 0, "train.optimizer.muon_lr", self.muon_lr, "a positive number")
        require(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "train.optimizer.betas",
                self.betas, "two numbers in [0, 1)")
        require(self.eps > 0, "train.optimizer.eps", self.eps, "a positive number")
        require(self.weight_decay >= 0, "train.optimizer.weight_decay", self.weight_decay, ">= 0")
        require(0 <= self.muon_momentum < 1, "train.optimizer.muon_momentum", self.muon_momentum, "in [0, 1)")
        require(self.muon_ns_steps >= 1, "train.optimizer.muon_ns_steps", self.muon_ns_steps, ">= 1")


@dataclass(frozen=True)
class ScheduleConfig:
    """Learning-rate multiplier over the run: warmup, then WSD, cosine or linear decay."""

    kind: Literal["wsd", "cosine", "linear", "constant"] = "wsd"
    """``wsd`` (warmup, stable, linear decay at the end), ``cosine``, ``linear`` or ``constant``."""
    warmup_fraction: float = 0.05
    """Fraction of the run's steps spent warming up linearly from 0."""
    decay_fraction: float = 0.2
    """WSD only: fraction of the run's steps at the end spent decaying."""
    min_lr_ratio: float = 0.1
    """The multiplier at the last step (cosine, linear, WSD)."""

    def __post_init__(self) -> None:
        require(0 <= self.warmup_fraction < 1, "train.schedule.warmup_fraction", self.warmup_fraction, "in [0, 1)")
        require(0 <= self.decay_fraction <= 1, "train.schedule.decay_fraction", self.decay_fraction, "in [0, 1]")
        require(self.warmup_fraction + (self.decay_fraction if self.kind == "wsd" else 0) <= 1,
                "train.schedule.decay_fraction", self.decay_fraction, "warmup + decay fractions <= 1")
        require(0 <= self.min_lr_ratio <= 1, "train.schedule.min_lr_ratio", self.min_lr_ratio, "in [0, 1]")


@dataclass(frozen=True)
class GuardConfig:
    """The spike guard: skip steps whose loss or grad norm leaves the recent band; roll back on repeats."""

    enabled: bool = True
    """Off: every finite step is applied (non-finite ones are still never applied)."""
    window: int = 50
    """Number of recent applied steps the rolling mean and deviation are taken over."""
    min_history: int = 10
    """Steps of history needed before the guard judges anything."""
    sigma: float = 6.0
    """A step whose loss is above the window's centre + sigma × deviation (nats/token) is not applied."""
    grad_norm_sigma: float = 10.0
    """A step whose log grad norm is above the centre + this × deviation of log grad norms is not applied
    (0 = judge the loss only). Grad norms are heavy-tailed, so they are judged multiplicatively."""
    max_consecutive: int = 3
    """This many rejected steps in a row roll back to the last good checkpoint."""
    max_rollbacks: int = 3
    """More rollbacks than this in one run stop it with an error (the problem is not transient)."""

    def __post_init__(self) -> None:
        require(self.window >= 2, "train.guard.window", self.window, ">= 2")
        require(2 <= self.min_history <= self.window, "train.guard.min_history", self.min_history,
                "between 2 and train.guard.window")
        require(self.sigma > 0, "train.guard.sigma", self.sigma, "a positive number")
        require(self.grad_norm_sigma >= 0, "train.guard.grad_norm_sigma", self.grad_norm_sigma, ">= 0")
        require(self.max_consecutive >= 1, "train.guard.max_consecutive", self.max_consecutive, ">= 1")
        require(self.max_rollbacks >= 0, "train.guard.max_rollbacks", self.max_rollbacks, ">= 0")


@dataclass(frozen=True)
class TrainConfig:
    """How a model is trained: tokens per step, budget, optimiser, schedule, guard, intervals."""

    seq_len: int = 64
    """Tokens per training sequence (each sample holds seq_len + 1 ids: inputs and shifted targets)."""
    global_batch_tokens: int = 2048
    """Tokens per optimiser step over all ranks (a multiple of seq_len); the same whatever the rank count."""
    micro_batch_size: int = 0
    """Sequences per forward/backward on one rank; gradients accumulate up to the step (0 = all at once)."""
    max_steps: int = 100
    """Optimiser steps to train for (0: derive from max_tokens)."""
    max_tokens: int = 0
    """Token budget, used when max_steps is 0 (rounded down to whole steps)."""
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    """Optimiser and its hyper-parameters."""
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    """Learning-rate schedule."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this (0 = no clipping)."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """``auto``: fp32 on CPU, bf16 autocast on GPU. Logits and losses are always float32."""
    compile: bool | None = None
    """Train the model under ``torch.compile``; null (auto): when the run is long enough for it to pay
    (``train.compile_rule``: planned FLOPs above a measured threshold per device type)."""
    activation_checkpointing: bool = False
    """Recompute each block's activations in backward to save memory."""
    parallelism: Literal["ddp", "fsdp"] = "ddp"
    """Under torchrun: replicate (DDP) or shard parameters and optimiser state (FSDP2)."""
    guard: GuardConfig = field(default_factory=GuardConfig)
    """The spike guard."""
    seed: int = 0
    """Seed of the model's initialisation (and every other torch RNG use in the trainer)."""
    eval_interval: int = field(default=0, metadata=UNVERSIONED)
    """Evaluate every this many steps (0 = only at the end)."""
    eval_max_tokens: int = field(default=4096, metadata=UNVERSIONED)
    """Held-out tokens evaluated per domain."""
    eval_batch_size: int = field(default=8, metadata=UNVERSIONED)
    """Sequences per eval forward."""
    eval_map: str = field(default="", metadata=UNVERSIONED)
    """A data map of the run's dataset (a map step's folder name beside it, or a path) whose content clusters
    the held-out loss is measured per too (``eval/cluster/<c>/loss``, ``/bpb``; up to ``eval_max_tokens`` each);
    empty: ``data.map``'s, when the run mixes by cluster, else none."""
    cluster_eval_every: int = field(default=1, metadata=UNVERSIONED)
    """Measure the held-out loss per cluster of ``eval_map`` at every this-many-th evaluation (and always at the
    last one): it costs an evaluation per cluster."""
    eval_tasks: tuple[TaskConfig, ...] = field(default=(), metadata=UNVERSIONED)
    """Downstream tasks scored at evaluations (built-in ones are made from ``data.path``)."""
    task_eval_every: int = field(default=1, metadata=UNVERSIONED)
    """Score the tasks at every this-many-th evaluation (and always at the last one)."""
    sample_interval: int = field(default=0, metadata=UNVERSIONED)
    """Generate samples every this many steps (0 = only at the end)."""
    sample_prompts: tuple[str, ...] = field(default=("The ", "def "), metadata=UNVERSIONED)
    """Fixed prompts for samples (empty = no samples)."""
    sample_max_new_tokens: int = field(default=32, metadata=UNVERSIONED)
    """Tokens generated per sample."""
    checkpoint_interval: int = field(default=50, metadata=UNVERSIONED)
    """Write a checkpoint every this many steps (and always at the end)."""
    keep_last: int = field(default=2, metadata=UNVERSIONED)
    """Keep this many most recent checkpoints."""
    keep_every: int = field(default=0, metadata=UNVERSIONED)
    """Also keep, permanently, every checkpoint whose step is a multiple of this (0 = none)."""
    keep_log: bool = field(default=False, metadata=UNVERSIONED)
    """Also write and keep, permanently, the published schedule's checkpoints: step 0, log-spaced steps
    (1, 2, 4, …) below ``checkpoint_interval``, the last step before a WSD decay starts, and the final
    step. Rollbacks pass the extra ones by, so keeping them never changes training."""
    peak_flops: float = field(default=0.0, metadata=UNVERSIONED)
    """Peak FLOP/s of one device for MFU (0 = from the table of known devices, else measured)."""
    sinks: tuple[Literal["jsonl", "tensorboard", "wandb"], ...] = field(default=(), metadata=UNVERSIONED)
    """Copies of the run store's scalars, vectors, events and samples, in the run folder: ``jsonl``
    (metrics.jsonl), ``tensorboard`` (tensorboard/), ``wandb`` (wandb/, offline unless WANDB_MODE says)."""

    def __post_init__(self) -> None:
        require(self.seq_len >= 1, "train.seq_len", self.seq_len, ">= 1")
        require(self.global_batch_tokens >= self.seq_len and self.global_batch_tokens % self.seq_len == 0,
                "train.global_batch_tokens", self.global_batch_tokens,
                f"a positive multiple of train.seq_len={self.seq_len}")
        require(self.micro_batch_size >= 0, "train.micro_batch_size", self.micro_batch_size, ">= 0")
        require(self.max_steps >= 0, "train.max_steps", self.max_steps, ">= 0")
        require(self.max_tokens >= 0, "train.max_tokens", self.max_tokens, ">= 0")
        require(self.total_steps >= 1, "train.max_steps", self.max_steps,
                "a positive step budget (or train.max_tokens of at least one global batch)")
        require(self.grad_clip >= 0, "train.grad_clip", self.grad_clip, ">= 0")
        require(not (self.parallelism == "fsdp" and self.optimizer.name == "muon"), "train.optimizer.name",
                self.optimizer.name, "adamw with train.parallelism='fsdp' (Muon needs whole matrices)")
        for name in ("eval_interval", "sample_interval", "sample_max_new_tokens"):
            require(getattr(self, name) >= 0, f"train.{name}", getattr(self, name), ">= 0")
        require(self.eval_max_tokens >= self.seq_len, "train.eval_max_tokens", self.eval_max_tokens,
                f">= train.seq_len={self.seq_len}")
        require(self.task_eval_every >= 1, "train.task_eval_every", self.task_eval_every, ">= 1")
        require(self.cluster_eval_every >= 1, "train.cluster_eval_every", self.cluster_eval_every, ">= 1")
        require(self.eval_batch_size >= 1, "train.eval_batch_size", self.eval_batch_size, ">= 1")
        require(self.checkpoint_interval >= 1, "train.checkpoint_interval", self.checkpoint_interval, ">= 1")
        require(self.keep_last >= 1, "train.keep_last", self.keep_last, ">= 1")
        require(self.keep_every >= 0, "train.keep_every", self.keep_every, ">= 0")
        require(self.peak_flops >= 0, "train.peak_flops", self.peak_flops, ">= 0")
        require(len(set(self.sinks)) == len(self.sinks), "train.sinks", list(self.sinks), "each sink at most once")

    def bf16_on(self, device_type: str) -> bool:
        """Whether the loop autocasts to bf16 on ``device_type`` (``cpu``, ``cuda``): the one place
        ``precision`` is decided (MFU's peak FLOP/s follows the same answer)."""
        return self.precision == "bf16" or (self.precision == "auto" and device_type == "cuda")

    @property
    def global_batch_size(self) -> int:
        """Sequences per optimiser step over all ranks."""
        return self.global_batch_tokens // self.seq_len

    @property
    def total_steps(self) -> int:
        """Optimiser steps in the run (from max_steps, else the token budget)."""
        return self.max_steps if self.max_steps else self.max_tokens // self.global_batch_tokens

    def micro_batches(self, world_size: int) -> tuple[int, int]:
        """(sequences per micro-batch, micro-batches per step) on one of ``world_size`` ranks."""
        per_rank = self.global_batch_size // world_size
        require(self.global_batch_size % world_size == 0, "train.global_batch_tokens", self.global_batch_tokens,
                f"a global batch of sequences divisible by the {world_size} ranks")
        micro = self.micro_batch_size or per_rank
        require(per_rank % micro == 0, "train.micro_batch_size", self.micro_batch_size,
                f"a divisor of the {per_rank} sequences each rank gets per step")
        return micro, per_rank // micro

