"""``glasslab run tiny_ladder``: a tiny MoE ladder built to the rules that make small ladders predict.

The demo's ladder is cut short for time; this one follows the recipe that transfers across rungs:
at least 1,000 optimiser steps per rung, the same 20 tokens per active parameter at every rung, batch
and learning rate from the planner's rule (never tuned per rung), three seeds on the two smallest
rungs and two on the others, and the asymptote fixed (and swept) before any rung was trained. It
trains the rungs and fits them; the hero is left out (``bench/ladder_bench.py --lab LAB --ladder
tiny --L-inf 1.0 --sweep 0.5 1.5`` reads the leave-last-rung-out back-test from the lab). About
10–30 minutes on 2 CPU cores with ``--jobs 2``.
"""

from __future__ import annotations

import dataclasses

from glasslab.experiments.demo import L_INF, L_INF_SWEEP, MIXTURE, build_config, ladder_spec, train_recipe
from glasslab.lab import Step
from glasslab.ladder.plan import LadderSpec, plan_ladder
from glasslab.ladder.steps import DATA_STEP, ladder_steps

LADDER = "tiny"


def spec() -> LadderSpec:
    """The demo's recipe and widths, trained to the rules above."""
    return dataclasses.replace(ladder_spec(quick=False), name=LADDER, tokens_per_param=20.0, min_steps=1000,
                               seeds_per_rung=(3, 3, 2, 2))


def steps() -> list[Step]:
    """The data build, every rung and seed, and the fit (no hero)."""
    data = Step(DATA_STEP, "glasslab.data.build:build_step", build_config(quick=False))
    *rungs_and_fit, _hero = ladder_steps(plan_ladder(spec()), data, MIXTURE, train_recipe(quick=False),
                                         L_inf=L_INF, sweep=L_INF_SWEEP, threads=1)
    return [data, *rungs_and_fit]
