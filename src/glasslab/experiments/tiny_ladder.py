"""``glasslab run tiny_ladder``: a tiny MoE ladder built to the rules that make small ladders predict.

The demo's ladder is cut short for time; this one follows the recipe that transfers across rungs:
at least 1,000 optimiser steps per rung, the same 20 tokens per active parameter at every rung, batch
and learning rate from the planner's rule (never tuned per rung), six seeds on the two smallest
rungs and four on the others (single tiny runs differ by 1–2% in final loss), a mixture under which
no rung sees any domain more than about 3 times, learning rate decayed to zero, a larger eval set
than the demo's, and the asymptote fixed (and swept) before any rung was trained. It trains the rungs
and fits them; the hero is left out (``bench/ladder_bench.py --lab LAB --ladder tiny --L-inf 1.0
--sweep 0.5 1.5`` reads the leave-last-rung-out back-test from the lab). About 20 minutes on 2 CPU
cores with ``--jobs 2``.
"""

from __future__ import annotations

import dataclasses

from glasslab.experiments.demo import FULL, L_INF, L_INF_SWEEP, MIXTURE, data_step, ladder_spec, train_recipe
from glasslab.lab import Step
from glasslab.lab.card import Expectation, ExperimentCard
from glasslab.ladder.plan import LadderSpec, plan_ladder
from glasslab.ladder.steps import ladder_steps

LADDER = "tiny"
EVAL_MAX_TOKENS = 16384
"""Eval tokens per domain (the demo's 4,096 are cut for time)."""
CARD = ExperimentCard(
    title="Does a tiny MoE ladder built to the rules predict its own top rung?",
    question="With >= 1,000 steps per rung, 20 tokens per active parameter, planner-rule batch and LR, "
             "4-6 seeds per rung and the asymptote fixed in advance, does a fit on the three smaller rungs "
             "predict the top rung's mean eval loss within 5%?",
    design="The demo's recipe and widths (16-48), trained to the rules in this module's docstring; the fit's "
           "leave-last-rung-out back-test answers the question. No hero.",
    expectations=(
        Expectation("leave-last-rung-out back-test error", step=f"{LADDER}-fit",
                    metric="backtest.last.rel_error_pct", low=-5.0, high=5.0, unit="%"),
    ),
)
"""The tiny ladder's experiment card (``glasslab card tiny_ladder``)."""


def spec() -> LadderSpec:
    """The demo's recipe and widths, trained to the rules above."""
    return dataclasses.replace(ladder_spec(FULL), name=LADDER, tokens_per_param=20.0, min_steps=1000,
                               seeds_per_rung=(6, 6, 4, 4))


def steps() -> list[Step]:
    """The data build, every rung and seed, and the fit (no hero)."""
    data = data_step(FULL)
    train = dataclasses.replace(train_recipe(FULL), eval_max_tokens=EVAL_MAX_TOKENS)
    *rungs_and_fit, _hero = ladder_steps(plan_ladder(spec()), data, MIXTURE, train, L_inf=L_INF,
                                         sweep=L_INF_SWEEP, threads=1)
    return [data, *rungs_and_fit]
