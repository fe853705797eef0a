"""A planned ladder as executor steps: a training step per rung and seed, a fit step, and the hero.

The ladder never trains anything itself: it turns a :class:`~glasslab.ladder.plan.LadderPlan` into
steps for the executor. A grid plan adds a constant-LR trunk step per width and seed, and makes each
rung a fork of its trunk at the step its cooldown starts (the trunk keeps a checkpoint there). Every
rung step and the hero step depend on one data step (whose output
folder is the built dataset, whatever the step is called); the fit step depends on every rung; the
hero depends on the fit, so its prediction exists — registered in the lab's registry and written
into its ``run.json`` — before its first step. Each training step's output folder is its run folder,
so the run id is the folder name. ``glasslab ladder fit`` runs the same fit step on rungs it read
itself (run folders or a points file).

A step that failed part-way (a crash, a preemption) resumes from its own checkpoints when rerun.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from glasslab.data.config import DataConfig, MixtureConfig
from glasslab.data.reference import DatasetRef
from glasslab.errors import UserError
from glasslab.lab import NO_OUTPUT, Resources, Step, StepContext, StepOutput, output_of, run_output_of
from glasslab.ladder.curves import read_grid_runs
from glasslab.ladder.figures import draw_fit
from glasslab.ladder.fit import fit_ladder, read_fit, write_fit
from glasslab.ladder.fit_inputs import compute_inputs_record, rung_points, write_inputs
from glasslab.ladder.grid_ends import end_point_rows
from glasslab.ladder.grid_fit import fit_grid_ladder
from glasslab.ladder.hero_floor import EarlierHero
from glasslab.ladder.hero_results import recipe_of_run, record_hero_result, registry_heroes
from glasslab.ladder.nd_fit import fit_points_law
from glasslab.ladder.plan import LadderPlan, PlannedRung, rung_record_extra
from glasslab.ladder.preregister import (
    BandWatcher,
    hero_record_extra,
    register_hero_prediction,
    register_task_predictions,
)
from glasslab.ladder.rungs import Rung
from glasslab.ladder.runs import read_rungs
from glasslab.ladder.task_law import read_task_points
from glasslab.layout import FIT_FILE
from glasslab.train.config import ScheduleConfig, TrainConfig
from glasslab.train.fork import ForkPoint
from glasslab.train.run_config import RunConfig
from glasslab.train.steps import TrainStepConfig, run_training, train_step

EVALS_PER_RUN = 20
"""Evaluations over a run (every 5% of training): the fit predicts a whole curve from them."""
SAMPLES_PER_RUN = 4


@dataclass(frozen=True)
class FitStepConfig:
    """How the ladder is fitted: the asymptote and its sweep, the compute to predict (the hero's), and
    the rungs — dependencies' run folders, or rungs measured elsewhere (``glasslab ladder fit``)."""

    ladder: str
    target_flops: float
    L_inf: float | None
    sweep: tuple[float, ...]
    rung_steps: tuple[StepOutput, ...] = ()
    """The rung runs' folders (read when the step runs)."""
    rungs: tuple[Rung, ...] = ()
    """Rungs given as data (read from run folders or a points file by the command): the hash covers
    the measurements themselves."""
    num_bootstrap: int = 1000
    target_size: tuple[float, float] | None = None
    """(active parameters, training tokens) of the target run, for approach 3's prediction of it."""
    grid: GridTarget | None = None
    """Floor mode ``grid``: the hero's run as the grid fit needs it (``grid_fit``: the end-point law on the
    branches' final losses, the curve law on every trunk's and branch's curve); ``L_inf`` must be None.
    None: the compute law ``L(C)``."""
    trunk_steps: tuple[StepOutput, ...] = ()
    """Grid mode: the constant-LR trunks' folders."""


@dataclass(frozen=True)
class GridTarget:
    """The run a grid fit predicts, as its laws read a run: size, schedule, batch and steps."""

    params: float
    """Non-embedding active parameters (the law's N)."""
    steps: int
    batch_tokens: int
    """Tokens per optimiser step."""
    schedule: ScheduleConfig


@dataclass(frozen=True)
class HeroStepConfig:
    """The hero: a training run with the fit's prediction registered before its step 0."""

    train: TrainStepConfig
    fit_from: StepOutput
    """The ladder's fit step, whose folder holds ``fit.json``."""


def run_config_for(rung: PlannedRung, seed: int, mixture: MixtureConfig, train: TrainConfig) -> RunConfig:
    """The run config of one rung (or the hero, or a grid trunk) and seed: the plan's model, batch, steps
    and LR on the shared training recipe ``train``, evaluated every 5% of training; ``data.path`` is left
    for the step to fill. A grid trunk or branch keeps the warmup of its width's 1× run (see
    :func:`grid_schedule`) and is evaluated every 5% of that run."""
    optimizer = dataclasses.replace(train.optimizer, lr=rung.learning_rate)
    # A trunk is evaluated as often as its width's 1× run (its curve is the grid's densest data).
    evaluated_over = rung.reference_steps if rung.role == "trunk" else rung.steps
    train_cfg = dataclasses.replace(train, seq_len=rung.seq_len, global_batch_tokens=rung.batch_size * rung.seq_len,
                                    max_steps=rung.steps, max_tokens=0, optimizer=optimizer, seed=seed,
                                    eval_interval=max(1, evaluated_over // EVALS_PER_RUN),
                                    sample_interval=max(1, rung.steps // SAMPLES_PER_RUN))
    if rung.reference_steps:
        train_cfg = dataclasses.replace(train_cfg, schedule=grid_schedule(rung, train.schedule))
    return RunConfig(model=rung.model, data=DataConfig(path="", mixture=mixture, seed=seed), train=train_cfg)


def grid_schedule(rung: PlannedRung, recipe: ScheduleConfig) -> ScheduleConfig:
    """A grid run's schedule: the recipe's warmup over the width's 1× run's steps, then a constant LR (a
    trunk), or a constant LR and the recipe's WSD decay from the fork step on (a branch). Written over the
    whole run, so a branch's multiplier equals its trunk's at every step before the fork."""
    warmup_steps = round(recipe.warmup_fraction * rung.reference_steps)
    if rung.role == "trunk":
        return ScheduleConfig(kind="constant", warmup_fraction=warmup_steps / rung.steps, decay_fraction=0.0,
                              min_lr_ratio=recipe.min_lr_ratio)
    if warmup_steps > rung.fork_step:
        raise UserError(f"grid rung {rung.name}: its cooldown starts at step {rung.fork_step}, inside the recipe's "
                        f"warmup ({warmup_steps} steps); expected a larger smallest token multiple")
    return ScheduleConfig(kind="wsd", warmup_fraction=warmup_steps / rung.steps,
                          decay_fraction=(rung.steps - rung.fork_step) / rung.steps, min_lr_ratio=recipe.min_lr_ratio)


def ladder_steps(plan: LadderPlan, data_step: Step, mixture: MixtureConfig, train: TrainConfig, *,
                 L_inf: float | None, sweep: tuple[float, ...] = (), device: str = "cpu",
                 threads: int = 0, hero_threads: int = 0, num_bootstrap: int = 1000,
                 hero_map: Step | None = None) -> list[Step]:
    """Rung steps (one per rung and seed), the fit step and the hero step, in dependency order; every
    training step reads its dataset from ``data_step``'s folder. ``hero_map``: a data map step of that dataset
    the hero measures its held-out loss per cluster of (its ``eval_map``: a reference, so also a dependency).

    ``threads`` are torch CPU threads per rung (rungs run side by side), ``hero_threads`` the hero's
    (it runs alone, after the fit); 0 leaves torch's default."""
    ladder = plan.spec.name
    resources = Resources(cpus=max(1, threads), gpus=1 if device.startswith("cuda") else 0)
    if plan.mode == "grid":
        _check_grid_recipe(plan, train, L_inf)
    dataset = DatasetRef.of_build(data_step)
    trunk_steps = {}
    for trunk in plan.trunks:
        # Checkpoints at every branch's fork step, kept: each is a whole multiple of the smallest one.
        forks = [r.fork_step for r in plan.rungs if r.trunk == trunk.name]
        every = math.gcd(*forks)
        recipe = dataclasses.replace(train, checkpoint_interval=every, keep_every=every)
        for seed in trunk.seeds:
            config = TrainStepConfig(run_config_for(trunk, seed, mixture, recipe),
                                     rung_record_extra(trunk, seed, ladder), dataset, device=device,
                                     threads=threads)
            trunk_steps[trunk.name, seed] = Step(f"{ladder}-{trunk.name}-s{seed}", train_step, config,
                                                 resources=resources)
    rung_steps = []
    for rung in plan.rungs:
        for seed in rung.seeds:
            parent = trunk_steps.get((rung.trunk, seed))
            fork = ForkPoint(**run_output_of(parent), step=rung.fork_step) if parent else None
            config = TrainStepConfig(run_config_for(rung, seed, mixture, train),
                                     rung_record_extra(rung, seed, ladder), dataset, fork=fork,
                                     device=device, threads=threads)
            rung_steps.append(Step(f"{ladder}-{rung.name}-s{seed}", train_step, config, resources=resources))
    hero_cfg = run_config_for(plan.hero, 0, mixture, train)
    grid = GridTarget(float(plan.hero.model.param_counts()["active_non_embedding"]), plan.hero.steps,
                      hero_cfg.train.global_batch_tokens, hero_cfg.train.schedule) if plan.mode == "grid" else None
    fit_config = FitStepConfig(ladder, plan.hero.law_flops, L_inf, tuple(sweep), tuple(map(output_of, rung_steps)),
                               num_bootstrap=num_bootstrap,
                               target_size=(float(plan.hero.params_active), float(plan.hero.tokens)), grid=grid,
                               trunk_steps=tuple(map(output_of, trunk_steps.values())))
    fit = Step(f"{ladder}-fit", fit_step, fit_config)
    hero_train = TrainStepConfig(hero_cfg, rung_record_extra(plan.hero, 0, ladder), dataset, device=device,
                                 threads=hero_threads, eval_map=output_of(hero_map) if hero_map else NO_OUTPUT)
    hero_resources = dataclasses.replace(resources, cpus=max(1, hero_threads))
    hero = Step(f"{ladder}-hero", hero_step, HeroStepConfig(hero_train, output_of(fit)), resources=hero_resources)
    # Largest rung first: the executor starts ready steps in list order, so the longest run does not start
    # last and leave the other lanes idle while it finishes (the fit lists them smallest first, as before).
    # Trunks (the longest runs of a grid) go first of all.
    return [*reversed(trunk_steps.values()), *reversed(rung_steps), fit, hero]


def _check_grid_recipe(plan: LadderPlan, train: TrainConfig, L_inf: float | None) -> None:
    """A grid point ends as the hero does only when the recipe decays like the branches: WSD over the
    plan's cooldown fraction. The floor is the grid's to estimate, so none may be pinned."""
    schedule = train.schedule
    if schedule.kind != "wsd" or abs(schedule.decay_fraction - plan.spec.cooldown_fraction) > 1e-9:
        raise UserError(f"ladder {plan.spec.name}: a grid ladder needs the recipe's schedule to be wsd with "
                        f"decay_fraction = ladder.cooldown_fraction = {plan.spec.cooldown_fraction:g} (the hero ends "
                        f"as every branch does); got {schedule.kind} with decay_fraction {schedule.decay_fraction:g}")
    if L_inf is not None:
        raise UserError(f"ladder {plan.spec.name}: a grid ladder estimates its floor from the rungs; expected no "
                        f"pinned L_inf (got {L_inf:g})")


def fit_step(ctx: StepContext) -> dict[str, Any]:
    """Fit the rungs' final (and partial) losses, predict the target, back-test; write fit.json + figures.
    Returns the prediction (``flops``, ``point``, ``lo``, ``hi``, ``level``)."""
    cfg: FitStepConfig = ctx.config
    if cfg.grid is not None:
        runs = [run.folder for run in (*cfg.rung_steps, *cfg.trunk_steps)]
        curves, heroes = read_grid_runs(runs), registry_heroes(ctx.lab_root, recipe_of_run(runs[0]),
                                                                     exclude_ladder=cfg.ladder)
        fit = fit_grid_ladder(curves, ladder=cfg.ladder, target=cfg.grid, target_flops=cfg.target_flops,
                              num_bootstrap=cfg.num_bootstrap, heroes=heroes)
        write_inputs(ctx.output_dir, end_point_rows(curves), heroes)
        write_fit(ctx.output_dir / FIT_FILE, fit)
        draw_fit(fit, ctx.output_dir)
        return fit["prediction"]
    rungs = [*cfg.rungs, *read_rungs(run.folder for run in cfg.rung_steps)]
    fit = fit_ladder(rungs, ladder=cfg.ladder, target_flops=cfg.target_flops, L_inf=cfg.L_inf, sweep=cfg.sweep,
                     target_size=cfg.target_size, num_bootstrap=cfg.num_bootstrap,
                     tasks=read_task_points(run.folder for run in cfg.rung_steps))
    fit["inputs"] = compute_inputs_record(cfg.ladder, cfg.L_inf, cfg.sweep, cfg.target_flops, cfg.num_bootstrap)
    write_inputs(ctx.output_dir, rung_points(rungs), ())
    write_fit(ctx.output_dir / FIT_FILE, fit)
    draw_fit(fit, ctx.output_dir)
    return fit["prediction"]


@dataclass(frozen=True)
class PointsLawConfig:
    """``glasslab ladder fit POINTS --law nd``: the end-point law ``E + A·N^−α + B·D^−β`` on a points file's
    rungs (each with N and D), predicting one run of ``target_size`` (N, D); ``heroes``: earlier heroes of the
    same recipe, whose losses the prediction must agree with and which set the floor when the grid's own is
    refused (``hero_floor``)."""

    ladder: str
    rungs: tuple[Rung, ...]
    target_size: tuple[float, float]
    num_bootstrap: int = 1000
    heroes: tuple[EarlierHero, ...] = ()


def points_law_step(ctx: StepContext) -> dict[str, Any]:
    """Fit and gate the end-point law on the config's points (``nd_fit``); write fit.json; return the
    prediction."""
    cfg: PointsLawConfig = ctx.config
    fit = fit_points_law(cfg.rungs, ladder=cfg.ladder, target_size=cfg.target_size, num_bootstrap=cfg.num_bootstrap,
                         heroes=cfg.heroes)
    write_inputs(ctx.output_dir, rung_points(cfg.rungs), cfg.heroes)
    write_fit(ctx.output_dir / FIT_FILE, fit)
    return fit["prediction"]


def hero_step(ctx: StepContext) -> dict[str, Any]:
    """Register the fit's predictions for the hero (loss, task accuracies; a fit the gate refused stops here
    unless forced, see :func:`register_hero_prediction`), then train the hero with a copy of
    the loss prediction in its run.json (written before step 0) and its eval loss watched against the band;
    once finished, record its measured loss and recipe in the registry (``hero_results``)."""
    cfg: HeroStepConfig = ctx.config
    fit_dir = cfg.fit_from.folder
    fit = read_fit(fit_dir / FIT_FILE)
    entry = register_hero_prediction(ctx.lab_root, fit, target=ctx.name, source=fit_dir.name,
                                     replace=ctx.re_register, forced=ctx.force_registration)
    register_task_predictions(ctx.lab_root, fit, target=ctx.name, source=fit_dir.name, replace=ctx.re_register,
                              forced=entry["forced"])
    extra = hero_record_extra(fit, cfg.train.record_extra, entry)
    metrics = run_training(dataclasses.replace(ctx, config=cfg.train), extra,
                           callbacks=[BandWatcher(extra["prediction"])])
    record_hero_result(ctx.lab_root, fit, ctx.output_dir, metrics, target=ctx.name)
    return metrics
