"""``glasslab run isoflop_ladder``: Chinchilla approach 3 on trained rungs, for the long ladder's recipe.

A fixed tokens-per-parameter ladder cannot tell parameters from tokens (D ∝ N), so it fits only
``L(C)``. Here each of three compute budgets is spent by four model sizes (widths a factor √2 apart
around the size the 20-tokens-per-parameter rule would pick, so each budget's curve has sizes on
both sides of its best one), trained to the long ladder's recipe on the long ladder's data (one data
step serves both in one lab). The fit step fits ``L(N, D) = E + A/N^α + B/D^β`` to every run, and
reports the compute-optimal tokens per parameter at the long ladder's hero budget with a bootstrap
interval, and approach 3's prediction of that hero beside ``L(C)``'s from the budgets' best sizes.
No hero is trained here: ``bench/ladder_bench.py --isoflop --lab LAB`` compares the prediction with
the long ladder's hero when the same lab holds it.
"""

from __future__ import annotations

import dataclasses

from glasslab.data.build import data_step as build_data_step
from glasslab.experiments import long_ladder
from glasslab.lab import Step
from glasslab.ladder.plan import LadderSpec, plan_ladder
from glasslab.ladder.steps import ladder_steps

LADDER = "isoflop"
BUDGETS = (2e11, 6e11, 1.8e12)
"""FLOPs: the long ladder's rung range (its d24–d40 rungs spend 2e11–1e12 each); about 20 minutes of
training with two steps at once (``bench/ladder_bench.py --isoflop --estimate``)."""
SIZES_PER_BUDGET = 4
SEEDS = (2,)


def spec() -> LadderSpec:
    """The long ladder's recipe over compute budgets, four sizes each; its hero is the long ladder's."""
    return dataclasses.replace(long_ladder.spec(), name=LADDER, budgets=BUDGETS, isoflop_sizes=SIZES_PER_BUDGET,
                               seeds_per_rung=SEEDS)


def steps() -> list[Step]:
    """The data build (shared with the long ladder), every size and seed of every budget, the fit."""
    data = build_data_step(long_ladder.build_config())
    *rungs_and_fit, _hero = ladder_steps(plan_ladder(spec()), data, long_ladder.MIXTURE, long_ladder.recipe(),
                                         L_inf=long_ladder.L_INF, threads=1)
    return [data, *rungs_and_fit]


def smoke_steps() -> list[Step]:
    """The budgets ÷ 20, sizes around 20 tokens per parameter, on the long ladder's smoke recipe (one
    seed, ≥ 20 steps): approach 3 fitted on trained runs in minutes, no claim on the numbers
    (``bench/ladder_bench.py --isoflop --smoke`` compares it with the long smoke hero)."""
    data = build_data_step(long_ladder.build_config())
    small = dataclasses.replace(long_ladder.smoke_spec(), name=f"{LADDER}-smoke", tokens_per_param=20.0,
                                budgets=tuple(b / 20 for b in BUDGETS), isoflop_sizes=SIZES_PER_BUDGET)
    *rungs_and_fit, _hero = ladder_steps(plan_ladder(small), data, long_ladder.MIXTURE, long_ladder.smoke_recipe(),
                                         L_inf=long_ladder.L_INF, threads=1, num_bootstrap=200)
    return [data, *rungs_and_fit]
