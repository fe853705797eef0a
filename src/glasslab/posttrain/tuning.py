"""The one tuning step every post-training method runs: SFT and DPO are recipes of it, not steps of their own.

A method is two things: a step config, a :class:`TuningStepConfig` that adds the method's section (``sft``,
``dpo``) and its data dependency, and whose :meth:`~TuningStepConfig.recipe` makes the run's recipe; and
that recipe, a :class:`TuningRecipe` that reads its data once (bad data fails before any model is loaded)
and supplies what only the method knows (:meth:`~TuningRecipe.method_parts`: loader, objective, held-out
metrics, FLOPs per token over the model's own). Everything else is written once, here: the base found and
checked, the counts said on the console, the base measured before step 0, the run trained in the step's
folder (resuming a failed attempt), the forgetting evals and chat samples beside the method's metrics.

A new method (say RL) adds its step config and recipe and runs as ``Step(name, tune_step, RLStepConfig(...))``.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from torch import nn

from glasslab.data.tokenizer import PAD
from glasslab.lab import NO_OUTPUT, StepOutput
from glasslab.lab.runtime import StepRuntime
from glasslab.model.load import ModelSource
from glasslab.posttrain.base import (
    base_data,
    baseline,
    chat_encoder,
    describe_run,
    forgetting_evaluator,
    start_model,
    step_base,
)
from glasslab.posttrain.samples import CHAT_PROMPTS, chat_sampler
from glasslab.track import check_sinks
from glasslab.train.config import OptimizerConfig, ScheduleConfig, TrainConfig
from glasslab.train.distributed import DistContext
from glasslab.train.loop import RunParts
from glasslab.train.steps import has_started, train_in_folder


def tuning_train(max_steps: int, lr: float, warmup_fraction: float) -> TrainConfig:
    """A short tuning schedule: rows of 256 tokens, 16 rows (or pairs) per step, no weight decay, linear
    warmup then linear decay to zero, chat samples; a checkpoint every 100 steps."""
    return TrainConfig(seq_len=256, global_batch_tokens=256 * 16, max_steps=max_steps,
                       optimizer=OptimizerConfig(lr=lr, weight_decay=0.0),
                       schedule=ScheduleConfig(kind="linear", warmup_fraction=warmup_fraction, min_lr_ratio=0.0),
                       sample_prompts=CHAT_PROMPTS, sample_max_new_tokens=48, checkpoint_interval=100)


@dataclass(frozen=True)
class MethodParts:
    """What a method adds to the parts every tuning run shares."""

    loader: Any
    """The training batches (the trainer's loader interface)."""
    objective: Any
    """The loss (:mod:`glasslab.train.objectives`'s contract)."""
    heldout: Callable[[nn.Module], dict[str, float]]
    """``heldout(model) -> {"eval/<role>/...": value}``: the method's held-out metrics."""
    flops_factor: float = 1.0
    """FLOPs per counted token over the model's own forward and backward."""


class TuningRecipe:
    """A tuning run's recipe (:class:`~glasslab.train.recipe.Recipe`): ``config`` has ``model``, ``data`` and
    ``train`` sections; a subclass reads its data in ``__init__`` and fills the methods below."""

    role: ClassVar[str]
    """``run.json`` ``role``: ``sft``, ``dpo``."""

    def __init__(self, config: Any, base: ModelSource) -> None:
        check_sinks(config.train.sinks)  # a missing sink package: one line before the data is read
        self.config = config
        self.base = base
        self.encoder = chat_encoder(config.data.path, config.data.path)
        self.pad_id = self.encoder.tokenizer.token_to_id(PAD)

    def method_parts(self, ctx: DistContext) -> MethodParts:
        """The method's loader, objective and held-out metrics, for this rank of ``ctx``."""
        raise NotImplementedError

    def count_lines(self) -> list[str]:
        """What became of every record, one line per split, for the console."""
        raise NotImplementedError

    def record(self) -> dict[str, Any]:
        """The method's own ``run.json`` fields (its counts, its hyper-parameters worth a glance)."""
        raise NotImplementedError

    def say_counts(self) -> None:
        """The counts on the console (stderr; a step's stderr is also its log)."""
        for line in self.count_lines():
            print(f"[{self.role}] {line}", file=sys.stderr, flush=True)

    def build(self, ctx: DistContext) -> RunParts:
        cfg = self.config.train
        model = start_model(self.base, cfg)  # seeds the RNGs as the trainer does, so it comes first
        method = self.method_parts(ctx)
        forgetting = forgetting_evaluator(cfg, self.config.data, ctx.device)

        def evaluate(model_to_eval: nn.Module, step: int) -> dict[str, float]:
            return {**forgetting(model_to_eval, step), **method.heldout(model_to_eval)}

        return RunParts(model=model, balancer=model.balancer, loader=method.loader,
                        flops_per_token=self.config.model.flops_per_token(cfg.seq_len) * method.flops_factor,
                        evaluate=evaluate, sample=chat_sampler(cfg, self.encoder), objective=method.objective)

    def describe(self) -> dict[str, Any]:
        return {**describe_run(self.config, self.base, self.role), **self.record()}


@dataclass(frozen=True)
class TuningStepConfig(StepRuntime):
    """A tuning step's fields every method shares: its schedule, the base (named or a dependency), and how
    it runs. A method's subclass adds its section and its data (a reference to the step that makes it, ``…_from``).
    A ``…_from`` field keeps the name it had when it held a step's name: the name is what its hash covers."""

    train: TrainConfig = field(default_factory=TrainConfig)
    """The run's batch, budget, optimiser and schedule (``seq_len`` is the row length); a method's
    subclass gives its own default."""
    base: str = ""
    """The base as the command names it: a run id under the lab or a folder, ``@STEP``; or an export."""
    base_sha256: str = ""
    """sha256 of the base checkpoint's (or export's) manifest, so a retrained base makes a new folder."""
    base_from: StepOutput = NO_OUTPUT
    """Or: the step whose output folder is the base run (its newest intact checkpoint)."""
    record_extra: dict[str, Any] = field(default_factory=dict)
    """More ``run.json`` fields."""

    def recipe(self, base: ModelSource) -> TuningRecipe:
        """The run's recipe: ``base``'s model and tokenizer, this step's schedule and data."""
        raise NotImplementedError

    def run_sections(self, base: ModelSource) -> dict[str, Any]:
        """The ``model``, ``data`` and ``train`` sections of a run tuned from ``base`` by this step."""
        return {"model": base.model_config, "data": base_data(base), "train": self.train}

    def method_config(self, method: Any, base: ModelSource, made_by: StepOutput, data_field: str) -> Any:
        """The method's section (``sft``, ``dpo``, ``rl``) with the base and its data folder filled in: the
        output folder of the step ``made_by`` refers to, else the folder ``method.<data_field>`` names."""
        data = made_by.path if made_by else getattr(method, data_field)
        return dataclasses.replace(method, base=base.ref, **{data_field: data})


def tune_step(ctx: Any) -> dict[str, Any]:
    """Lab step: tune the base into ``ctx.output_dir`` by ``ctx.config``'s method (resuming a failed
    attempt); return the final metrics."""
    cfg: TuningStepConfig = ctx.config
    cfg.use_threads()
    source = step_base(cfg.base, cfg.base_sha256, cfg.base_from, getattr(ctx, "lab_root", None))
    recipe = cfg.recipe(source)
    recipe.say_counts()
    record_extra = cfg.recorded(cfg.record_extra)
    if not has_started(ctx.output_dir):  # the base model's numbers and replies, beside the run's own
        record_extra["base"] = baseline(recipe, cfg.device)
    return train_in_folder(recipe, ctx.output_dir, device=cfg.device, record_extra=record_extra)
