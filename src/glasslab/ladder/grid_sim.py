"""Synthetic grid ladders drawn from a known grid law: how honest the grid fit's intervals are.

A synthetic grid has the selfcal ladder's shape (four widths, token multiples 0.25–8 under the hero's
reach, three seeds, the recipe's warmup and 20% cooldowns, evals every 5% of a width's 1× run); each
family (width, seed) sits off the law by one relative offset and each eval by a little more.
:func:`interval_coverage` fits many of them as the product does and counts how often the 90% intervals
hold the truth: the hero's final loss (one run of it), the floor ``E`` (the end-point law's, as the
product reports it), and the hero's curve from 10% to 100% of its training — and how wide the curve's
band is (``bench/ladder_bench.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glasslab.ladder.curves import (
    RunCurve,
    TargetCurve,
    annealing_area,
    forward_area,
    schedule_multipliers,
    target_curve,
)
from glasslab.ladder.grid_fit import predict_grid
from glasslab.ladder.grid_law import GridLaw, predict_target
from glasslab.ladder.predict import CURVE_FRACTIONS
from glasslab.ladder.uncertainty import percentile_interval
from glasslab.train.config import ScheduleConfig

TRUE_LAW = GridLaw(E=1.4, A=40.0, alpha=0.45, B=60.0, beta=0.35, C=0.12, gamma=0.0, tau=40.0)
"""Shaped like the long ladder's data: losses 2.5–4.5 nats over the widths and tokens below."""
WIDTHS = {"d16": (8e3, 7 * 64), "d24": (2e4, 13 * 64), "d32": (4.5e4, 23 * 64), "d40": (7e4, 30 * 64)}
"""Width → (non-embedding active parameters N, tokens per step), near the selfcal ladder's rungs."""
MULTIPLES = {"d16": (0.25, 0.5, 1, 2, 4, 8), "d24": (0.25, 0.5, 1, 2, 4), "d32": (0.25, 0.5, 1), "d40": (0.25, 0.5, 1)}
HERO_SCHEDULE = ScheduleConfig(kind="wsd", warmup_fraction=0.2, decay_fraction=0.2, min_lr_ratio=0.0)


def synthetic_hero(params: float = 7e5, steps: int = 1600, batch_tokens: int = 166 * 64) -> TargetCurve:
    """A d88-like hero (N, steps, tokens per step) on the recipe's schedule, at every 5% of its training."""
    return target_curve(params, HERO_SCHEDULE, steps, batch_tokens, CURVE_FRACTIONS)


def synthetic_grid(rng: np.random.Generator, law: GridLaw = TRUE_LAW, *, seeds: int = 3, reference_steps: int = 400,
                   family_sigma: float = 0.004, eval_sigma: float = 0.001) -> list[RunCurve]:
    """Trunks and branches of every width of :data:`WIDTHS` (relative noise: ``family_sigma`` per family,
    ``eval_sigma`` per eval); ``reference_steps`` is every width's 1× run."""
    curves = []
    warmup = round(0.2 * reference_steps)
    base = reference_steps // 4
    for width, (params, batch_tokens) in WIDTHS.items():
        runs = [("trunk", 0, max(round(0.8 * base * m * 4) for m in MULTIPLES[width]))]
        runs += [(f"x{m:g}", round(0.8 * base * m * 4), round(base * m * 4)) for m in MULTIPLES[width]]
        for seed in range(seeds):
            offset = family_sigma * rng.standard_normal()
            for name, fork, total in runs:
                if name == "trunk":
                    schedule = ScheduleConfig(kind="constant", warmup_fraction=warmup / total, decay_fraction=0.0)
                    every = reference_steps // 20
                else:
                    schedule = ScheduleConfig(kind="wsd", warmup_fraction=warmup / total,
                                              decay_fraction=(total - fork) / total, min_lr_ratio=0.0)
                    every = total // 20
                at = np.arange(every, total + 1, every)
                at = at[at > fork]
                multipliers = schedule_multipliers(schedule, total)
                s1 = forward_area(multipliers, batch_tokens, at)
                s2 = annealing_area(multipliers, [law.tau], at)[0]
                loss = law(params, s1, s2) * (1 + offset + eval_sigma * rng.standard_normal(len(at)))
                role = "trunk" if name == "trunk" else "rung"
                tokens = total * batch_tokens
                flops = 6 * params * tokens
                curves.append(RunCurve(f"{width}-{name}-s{seed}", f"{width}-{name}", role, f"{width}-trunk", seed,
                                       reference_steps, params, params, tokens, flops, flops,
                                       width, schedule, total, int(batch_tokens), tuple(int(s) for s in at),
                                       tuple(float(x) for x in loss), None if role == "trunk" else float(loss[-1])))
    return curves


@dataclass(frozen=True)
class Coverage:
    """Shares of synthetic grids whose 90% intervals held the truth, and the band's median half-width."""

    final: float
    """The hero's final loss (one run: the truth plus its own family offset)."""
    floor: float
    """The floor E."""
    curve: float
    """The hero's curve from 10% to 100% of its training (share of its evals)."""
    curve_halfwidth_pct: float
    """Median half-width of the curve's band from 10% to 100%, in % of the predicted loss."""
    ladders: int


def interval_coverage(num_ladders: int, *, law: GridLaw = TRUE_LAW, family_sigma: float = 0.004,
                      eval_sigma: float = 0.001, num_bootstrap: int = 200, level: float = 0.9,
                      hero: TargetCurve | None = None, seed: int = 0) -> Coverage:
    """Predict a hero from ``num_ladders`` synthetic grids of ``law`` as the product does
    (:func:`~glasslab.ladder.grid_fit.predict_grid`, ``num_bootstrap`` replicates) and count how often the
    ``level`` intervals hold the truth. The floor the product reports is the end-point law's, the floor of
    runs that end annealed: the curve law's ``E`` less its full annealing gain ``C`` when that does not shrink
    with size (γ = 0), else ``E``."""
    hero = hero or synthetic_hero()
    truth = predict_target(law, hero)
    late = np.asarray(hero.fractions) >= 0.1 - 1e-9
    annealed_floor = law.E - (law.C if law.gamma == 0 else 0.0)
    final = floor = 0
    curve, halfwidth = [], []
    for k in range(num_ladders):
        rng = np.random.default_rng(seed + k)
        grid = predict_grid(synthetic_grid(rng, law, family_sigma=family_sigma, eval_sigma=eval_sigma), hero,
                            level=level, num_bootstrap=num_bootstrap, rng=rng)
        run = truth * (1 + family_sigma * rng.standard_normal())
        final += bool(grid.lo[-1] <= run[-1] <= grid.hi[-1])
        E_lo, E_hi = percentile_interval(grid.ends.replicates[:, [0]], level)
        floor += bool(E_lo[0] <= annealed_floor <= E_hi[0])
        curve.append(float(np.mean((grid.lo[late] <= run[late]) & (run[late] <= grid.hi[late]))))
        halfwidth.append(float(np.median((grid.hi[late] - grid.lo[late]) / 2 / grid.point[late])))
    return Coverage(final / num_ladders, floor / num_ladders, float(np.mean(curve)), 100 * float(np.median(halfwidth)),
                    num_ladders)
