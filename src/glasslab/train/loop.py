"""The training loop. It stays short: every concern is a piece called at a fixed point of a step.

One optimiser step:
  1. take this rank's share of the global batch (rank 0 logs a hash of its tokens, which ``glasslab
     batch`` checks a rebuilt batch against) and split it into micro-batches;
  2. forward/backward each, scaling so the gradient is that of (sum of token losses / global tokens);
     gradients are reduced over ranks once, in the last micro-batch's backward;
  3. one reduction: the global loss, the preemption flag, and (already all-reduced) gradient norms,
     read on the host in one transfer;
  4. the spike guard judges; an applied step clips, sets the scheduled LR, steps the optimiser and
     the MoE balancer; a rejected one is dropped (or, repeated, rolls back to the last checkpoint);
  5. log the step (the parameter norms and the balancer's statistics reach the host together: a
     step waits for the device twice, ``train/host_syncs.py`` counts it);
  6. call the callbacks (``callbacks.py``): the throughput meter, evals, samples and checkpoints at
     their intervals, and whatever the caller added. A callback's request to stop joins the next
     step's reduction, as a SIGTERM's does.

What a checkpoint holds (model, optimiser, balancer, loader, guard window, RNG, counters, the
callbacks' states) is all of the loop's state, so resuming from one continues the exact same computation.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from glasslab.data.batches import batch_hash
from glasslab.layout import EXTRA_CHECKPOINT, latest_checkpoint
from glasslab.model.load import weights_sha256
from glasslab.store.mirror import active_mirror
from glasslab.track import Run
from glasslab.train import checkpoint as ckpt
from glasslab.train import distributed
from glasslab.train.callbacks import Callback, Callbacks
from glasslab.train.compile_rule import run_compile_choice
from glasslab.train.config import TrainConfig
from glasslab.train.distributed import DistContext, wrap_model
from glasslab.train.evals import Evaluator
from glasslab.train.guard import SpikeGuard
from glasslab.train.norms import grads_by_group, group_norms, named_norms, unique_groups
from glasslab.train.objectives import NextToken
from glasslab.train.optim import build_optimizer
from glasslab.train.rng import capture_rng, restore_rng
from glasslab.train.root_sync import RootSync
from glasslab.train.samples import Sampler
from glasslab.train.schedule import lr_multiplier
from glasslab.train.throughput import ThroughputMeter


class TrainingDiverged(RuntimeError):
    """Rollbacks did not help: the run keeps spiking after ``guard.max_rollbacks`` rollbacks."""


@dataclass
class RunParts:
    """What the loop trains and with what: built from a RunConfig by :mod:`glasslab.train.run`.

    ``model`` has ``forward(tokens_BT, targets_BT=...) -> summed nats``, ``aux_loss()`` and
    ``param_groups()``; ``balancer`` (or None for dense models) has ``update() -> statistics`` (on the
    device, ``.values`` and ``.read(host_values)``), ``state_dict()`` and ``load_state_dict()``;
    ``loader`` has ``next_batch()``, ``skip(n)``, ``weights_at(step)``, ``epochs()`` and
    ``state_dict()``; ``evaluate(model, step)`` returns ``eval/...`` metrics; ``sample(model, step)``
    returns (prompt, text) pairs; ``objective`` (:mod:`glasslab.train.objectives`) turns the loader's
    batches into losses (None: pretraining's next-token loss).
    """

    model: nn.Module
    balancer: Any
    loader: Any
    flops_per_token: float
    evaluate: Callable[[nn.Module, int], dict[str, float]] | None = None
    sample: Callable[[nn.Module, int], list[tuple[str, str]]] | None = None
    objective: Any = None


class Trainer:
    """Runs optimiser steps on ``parts`` under ``cfg``, logging to ``run`` (None on ranks other than 0);
    ``callbacks`` join the built-in ones (:func:`built_in_callbacks`)."""

    def __init__(self, cfg: TrainConfig, parts: RunParts, run: Run | None, run_dir: Path, ctx: DistContext,
                 config_data: dict, peak_flops: float, callbacks: Sequence[Callback] = ()) -> None:
        self.cfg = cfg
        self.callbacks = Callbacks([*built_in_callbacks(cfg, parts, peak_flops, ctx.world_size), *callbacks])
        self.parts = parts
        self.run = run
        self.run_dir = Path(run_dir)
        self.ctx = ctx
        self.config_data = config_data
        self.model = parts.model.to(ctx.device)
        self.sharded = ctx.active and cfg.parallelism == "fsdp"
        self.net = wrap_model(self.model, ctx, cfg.parallelism, bf16=cfg.bf16_on(ctx.device.type))
        self.compile_choice = run_compile_choice(cfg, parts.flops_per_token, ctx.device)
        if self.compile_choice.compile:
            # Activation checkpointing reruns a block's forward in backward. The MoE counts its routing
            # once (eager: it asks autograd whether it is recomputing); compiled, the checkpointed
            # region may keep those side effects only if dynamo is told not to replay them, else it
            # runs the whole model eagerly.
            if hasattr(torch._dynamo.config, "skip_fwd_side_effects_in_bwd_under_checkpoint"):  # not in every 2.x
                torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True
            self.net = torch.compile(self.net)
        groups = self.model.param_groups()
        self.params_by_group = unique_groups(groups)
        self.group_names = list(self.params_by_group)
        self.all_params = [p for params in self.params_by_group.values() for p in params]
        self.optimizer = build_optimizer(cfg.optimizer, groups, fused=ctx.device.type == "cuda")
        self.guard = SpikeGuard(cfg.guard)
        self.objective = parts.objective or NextToken(cfg.global_batch_tokens)
        self.micro_batch, self.num_micro = cfg.micro_batches(ctx.world_size)
        self.step = 0
        self.tokens = 0
        """Tokens trained on so far (a fork may change the batch, so this is a sum, not step × batch)."""
        self.rollbacks = 0
        self.published_steps = ckpt.published_steps(cfg) if cfg.keep_log else frozenset()
        """Checkpoints kept for the published schedule (``train.keep_log``), besides the interval's."""
        self.preempt_requested = False
        self.last_metrics: dict[str, float] = {}
        self._mixture: dict[str, float] | None = None
        self._balancer_clean = self._balancer_state()
        self.autocast_dtype = torch.bfloat16 if cfg.bf16_on(ctx.device.type) else None

    # --- state ------------------------------------------------------------------------------------

    def checkpoint_parts(self) -> dict[str, Any]:
        """Everything a resume needs, by checkpoint file name (an unsharded run's checkpoint)."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), **self._host_parts()}

    def _host_parts(self) -> dict[str, Any]:
        """The loop's own state, and the callbacks' when any has state."""
        callbacks = self.callbacks.state_dict()
        return {"trainer": self._trainer_state(), **({ckpt.CALLBACKS_PART: callbacks} if callbacks else {})}

    def _trainer_state(self) -> dict[str, Any]:
        """The loop's own state: counters, loader, balancer, guard and every RNG (host-side, small)."""
        return {
            "step": self.step,
            "tokens": self.tokens,
            "loader": self.parts.loader.state_dict(),
            "balancer": self._balancer_state(),
            "guard": self.guard.state_dict(),
            "rng": capture_rng(),
            "world_size": self.ctx.world_size,
        }

    def load(self, path: Path, *, fork: bool = False) -> None:
        """Restore everything from the checkpoint folder ``path``, whatever number of ranks wrote it.

        ``fork``: the run continues another run's checkpoint under a changed config; the data stream
        carries on from the same global position even when the global batch changed.
        """
        if ckpt.is_sharded(path):
            state = ckpt.load_checkpoint(path, only=ckpt.HOST_PARTS)
            optimizer_dir = path / ckpt.SHARDED_OPTIMIZER
            with self.optimizer.kept_hyperparameters():
                distributed.load_sharded_state(self.model, self.optimizer.optimizers, path / ckpt.SHARDED_MODEL,
                                               optimizer_dir if optimizer_dir.is_dir() else None, self.sharded)
        else:
            state = ckpt.load_checkpoint(path, map_location=self.ctx.device)
            distributed.load_model_state(self.model, state["model"], self.sharded)
            self.optimizer.load_state_dict(
                state["optimizer"], functools.partial(distributed.load_optimizer_state, self.model, self.sharded))
        trainer = state["trainer"]
        loader_state = trainer["loader"]
        if fork and "global_batch" in loader_state:
            # The loader's position is in tokens per domain; only its batch-shape check must follow the fork.
            loader_state = {**loader_state, "global_batch": self.cfg.global_batch_size}
        self.parts.loader.load_state_dict(loader_state)
        if self.parts.balancer is not None and trainer["balancer"] is not None:
            self.parts.balancer.load_state_dict(trainer["balancer"])
        self._balancer_clean = self._balancer_state()
        self.step = trainer["step"]
        self.tokens = trainer["tokens"]
        self.guard.load_state_dict(trainer["guard"])
        restore_rng(trainer["rng"])
        self.callbacks.load_state_dict(state.get(ckpt.CALLBACKS_PART, {}))

    def save_checkpoint(self, extra: bool = False) -> None:
        """Write the checkpoint for the current step (rank 0 its host parts), with the run's config as JSON
        beside it, apply retention, list the kept ones and tell the callbacks. ``extra``: written only for
        the published schedule (``train.keep_log``), so a rollback passes it by."""
        if self.run is not None:
            self.run.flush()
        about = {"tokens": self.tokens, "weights_sha256": self.replica_fingerprint()}
        if extra:
            about[EXTRA_CHECKPOINT] = True
        if self.sharded:  # every rank writes its shards; rank 0 the loop's state and the manifest
            host = self._host_parts() if self.ctx.is_main else None
            ckpt.save_sharded_checkpoint(self.run_dir, self.step, self.ctx,
                                         distributed.sharded_state(self.model, self.optimizer.optimizers),
                                         host, config=self.config_data, about=about)
        elif self.ctx.is_main:
            ckpt.save_checkpoint(self.run_dir, self.step, self.checkpoint_parts(), config=self.config_data,
                                 about=about)
        if self.ctx.is_main:
            ckpt.apply_retention(self.run_dir, self.cfg.keep_last, self.cfg.keep_every, self.published_steps)
            ckpt.write_checkpoint_list(self.run_dir)
        self.ctx.barrier()
        self.callbacks.call("on_checkpoint", self, ckpt.checkpoint_path(self.run_dir, self.step))

    def _balancer_state(self) -> Any:
        balancer = self.parts.balancer
        return None if balancer is None else _detached_copy(balancer.state_dict())

    # --- the loop -----------------------------------------------------------------------------------

    def fit(self) -> str:
        """Train to ``cfg.total_steps``; returns ``finished`` or ``preempted`` (a SIGTERM or a callback
        asked to stop). The callbacks are told ``on_end`` however it ends (``failed`` on an exception)."""
        status = "failed"
        try:
            self.callbacks.call("on_start", self)
            self._record_loader_start()
            status = self._steps()
        finally:
            self.callbacks.call("on_end", self, status)
        if status == "preempted":
            self._event("preempted", f"preempted at step {self.step}; checkpoint written", step=self.step)
        return status

    def _steps(self) -> str:
        while self.step < self.cfg.total_steps:
            self.step_with_callbacks()
            if self.preempt_requested:
                return "preempted"
        return "finished"

    def step_with_callbacks(self) -> dict[str, float]:
        """The callbacks' ``before_step``, one optimiser step, their ``after_step``; returns what the step logged."""
        self.callbacks.call("before_step", self)
        metrics = self.train_step()
        self.callbacks.call("after_step", self, metrics)
        return metrics

    def train_step(self) -> dict[str, float]:
        """One optimiser step (applied, skipped, or ending in a rollback); returns what it logged."""
        host_batch = self.parts.loader.next_batch()
        batch = host_batch.to(self.ctx.device, non_blocking=True)
        if self.run is not None and isinstance(host_batch, torch.Tensor):  # read while the copy runs
            self.run.log_batch(self.step + 1, batch_hash(host_batch))
        loss_tokens = self.objective.loss_tokens(batch)
        loss_sum = self.forward_backward(batch, loss_tokens)
        grad_norms = group_norms(grads_by_group(self.params_by_group))
        # The flag is filled in on the device (torch.tensor(...) would be a blocking host-to-device copy).
        stop = self.preempt_requested or self.callbacks.stop_requested
        preempt = torch.full((), float(stop), device=loss_sum.device)
        packed = torch.stack([loss_sum, preempt])
        values = torch.cat([self.ctx.all_reduce_sum(packed), grad_norms]).tolist()  # the step's first host sync
        loss = values[0] / loss_tokens
        self.preempt_requested = values[1] > 0
        grad_norm_values = values[2:]
        verdict = self.guard.judge(loss, grad_norm_values[-1])
        step_index = self.step
        self.step += 1
        self.tokens += self.cfg.global_batch_tokens
        metrics = {"train/tokens": float(self.tokens)}
        if verdict.apply:
            metrics.update(self.apply_update(step_index, grad_norms[-1]))
            metrics["train/loss"] = loss
            metrics.update(self.objective.metrics(loss, batch))
            metrics.update(named_norms("grad/norm", self.group_names, grad_norm_values))
        else:
            self.optimizer.zero_grad()
            self._discard_balancer_statistics()
            self._event(verdict.kind, f"step {self.step} not applied: {verdict.reason}", step=self.step,
                        severity="warning")
            if verdict.rollback:
                self.roll_back(verdict.reason)
                return {}
        metrics.update(self._mixture_metrics())
        self.log_metrics(metrics)
        return metrics

    def forward_backward(self, batch: Any, loss_tokens: int) -> torch.Tensor:
        """Accumulate gradients of (sum of token losses / ``loss_tokens`` counted over the global batch)
        over micro-batches; return the local sum."""
        # DDP averages gradients over ranks, so each rank scales by world/global to get sum/global overall.
        scale = self.ctx.world_size / loss_tokens
        loss_sum = torch.zeros((), device=self.ctx.device)
        for i, micro in enumerate(batch.split(self.micro_batch)):
            with distributed.gradient_sync(self.net, self.model, sync=i == self.num_micro - 1):
                nats = self.objective.nats(self.net, micro, self.autocast)
                aux = self.model.aux_loss()
                (nats * scale + aux / self.num_micro).backward()
            loss_sum += nats.detach()
        return loss_sum

    def apply_update(self, step_index: int, grad_norm_total: torch.Tensor) -> dict[str, float]:
        """Clip, step the optimiser and balancer at the scheduled LR; return the step's metrics."""
        multiplier = lr_multiplier(self.cfg.schedule, step_index, self.cfg.total_steps)
        self.optimizer.set_lr_multiplier(multiplier)
        if self.cfg.grad_clip:
            torch.nn.utils.clip_grads_with_norm_(self.all_params, self.cfg.grad_clip, grad_norm_total)
        self.optimizer.step()
        self.optimizer.zero_grad()
        metrics = {"optim/learning_rate": self.cfg.optimizer.lr * multiplier}
        with torch.no_grad():
            param_norms = group_norms(self.params_by_group).double()
        if self.parts.balancer is None:
            metrics.update(named_norms("params/norm", self.group_names, param_norms.tolist()))
            return metrics
        routing = self.parts.balancer.update()
        self._balancer_clean = self._balancer_state()
        # One transfer for both: the step's second and last host sync.
        values = torch.cat([param_norms, routing.values.to(param_norms.device)]).tolist()
        metrics.update(named_norms("params/norm", self.group_names, values[: len(param_norms)]))
        stats = routing.read(values[len(param_norms):])
        metrics.update(stats.scalars)
        if self.run is not None:
            for key, vector in stats.vectors.items():
                self.run.log_vector(key, vector, step_index + 1)
        return metrics

    def roll_back(self, reason: str) -> None:
        """Return to the last good checkpoint and skip the data window that kept spiking."""
        self.rollbacks += 1
        if self.rollbacks > self.cfg.guard.max_rollbacks:
            raise TrainingDiverged(f"still spiking after {self.cfg.guard.max_rollbacks} rollbacks: {reason}")
        spiked_at = self.step
        found = latest_checkpoint(self.run_dir, self.record_fallback, at_most=spiked_at, skip_extra=True)
        if found is None:
            raise TrainingDiverged(f"no intact checkpoint to roll back to at step {spiked_at}: {reason}")
        good_step, path = found
        rollbacks = self.rollbacks
        self.load(path)
        self.rollbacks = rollbacks
        window = spiked_at - good_step
        self.parts.loader.skip(window)
        self._event("rollback", f"rolled back from step {spiked_at} to {good_step}, skipping {window} batches",
                    body=reason, step=spiked_at, severity="incident")
        if self.run is not None:
            self.run.new_attempt("rollback")
        self._record_loader_start()

    # --- what callbacks call ------------------------------------------------------------------------

    def log_metrics(self, metrics: dict[str, float]) -> None:
        """Log scalars at the current step (rank 0) and keep them for the run's result."""
        self.last_metrics.update(metrics)
        if self.run is not None:
            self.run.log(metrics, self.step)

    def record_eval(self, metrics: dict[str, float]) -> None:
        """Log a held-out evaluation's ``eval/...`` metrics and tell the callbacks."""
        self.log_metrics(metrics)
        self.callbacks.call("on_eval", self, metrics)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The precision the model trains in (bf16 autocast where the config turns it on)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.ctx.device.type, dtype=self.autocast_dtype)

    # --- small helpers ------------------------------------------------------------------------------

    def _discard_balancer_statistics(self) -> None:
        if self.parts.balancer is not None:
            self.parts.balancer.load_state_dict(_detached_copy(self._balancer_clean))

    def _mixture_metrics(self) -> dict[str, float]:
        weights = dict(self.parts.loader.weights_at(self.step))
        if self._mixture is not None and weights != self._mixture:
            self._event("mixture_phase", f"mixture changed at step {self.step}",
                        body=", ".join(f"{d}={w:g}" for d, w in sorted(weights.items())), step=self.step)
        self._mixture = weights
        metrics = {f"mixture/weight/{domain}": float(w) for domain, w in weights.items()}
        # How often each domain's training tokens have been seen: repetition beyond a few epochs
        # bends a ladder's losses off its scaling law.
        metrics.update({f"mixture/epochs/{domain}": e for domain, e in self.parts.loader.epochs().items()})
        return metrics

    def _event(self, kind: str, title: str, body: str = "", step: int | None = None, severity: str = "info") -> None:
        if self.run is not None:
            self.run.annotate(kind, title, body, step=step, severity=severity)

    def _record_loader_start(self) -> None:
        """Where the loader stands as an attempt begins: what ``glasslab batch`` replays its draws from."""
        if self.run is not None:
            self.run.set_loader_start(self.step, {"loader": self.parts.loader.state_dict(),
                                                  "world_size": self.ctx.world_size})

    def record_fallback(self, step: int, problem: str) -> None:
        self._event("checkpoint_fallback", f"checkpoint step {step} is damaged; using an earlier one",
                    body=problem, step=step, severity="warning")

    def replica_fingerprint(self) -> str:
        """sha256 of this rank's model state (parameters and buffers, router biases included), over its
        canonical bytes (``model.load.weights_sha256``); every rank calls it under FSDP2 (a collective)."""
        return weights_sha256(distributed.full_model_state(self.model, self.sharded))


def built_in_callbacks(cfg: TrainConfig, parts: RunParts, peak_flops: float, world_size: int) -> list[Callback]:
    """What every run does at fixed points: measure throughput, evaluate and sample (when the parts
    can), and write checkpoints (on an object-store lab, and send them to the root)."""
    callbacks: list[Callback] = [ThroughputMeter(parts.flops_per_token, peak_flops, world_size)]
    if parts.evaluate is not None:
        callbacks.append(Evaluator(parts.evaluate, cfg.eval_interval))
    if parts.sample is not None:
        callbacks.append(Sampler(parts.sample, cfg.sample_interval))
    mirror = active_mirror()  # an object-store lab: the run folder goes to the root at every checkpoint
    return [*callbacks, ckpt.Checkpointer(), *([RootSync(mirror)] if mirror is not None else [])]


def _detached_copy(state: Any) -> Any:
    """A deep copy of a (nested) state dict whose tensors no longer alias live buffers."""
    if isinstance(state, torch.Tensor):
        return state.detach().clone()
    if isinstance(state, dict):
        return {k: _detached_copy(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_detached_copy(v) for v in state)
    return state
