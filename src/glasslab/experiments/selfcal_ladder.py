"""``glasslab run selfcal_ladder``: a ladder that finds its own floor and predicts its hero's whole curve.

The long ladder predicts its d88 hero within 1%, but with a floor (``L∞ = 1.1``) calibrated on earlier
heroes; a user with new data has none. Here nothing comes from a hero: the long ladder's recipe and
data (widths 16–40, learning rate and batch from the planner's rule, 64-token context) are trained as a
**grid** — each width to 0.25–8× its rule's 20 tokens per parameter, as one constant-LR trunk per
width and seed with a cooldown branched off at each token count (Hägele et al. 2024) — and only grid
points with at most 1/100 of the hero's compute are kept, so the hero is ≥ 100× every one of them.
The fit (floor mode ``grid``, ``glasslab.ladder.grid_law``) estimates the floor ``E`` with a bootstrap
interval, and a schedule-aware law fitted on every trunk's and branch's curve predicts the hero's
eval loss at every 5% of its own schedule (warmup, stable, decay); that curve and its band are what is
registered before the hero's step 0 and what the hero is watched against.

This is protocol (a) of ``docs/ladder.md``: a back-test against the long ladder's d88 hero, whose loss
is already known (not blind). Protocol (b), fixed in advance, is ``selfcal_ladder_128``.
``bench/ladder_bench.py --selfcal --lab LAB`` trains both and prints their numbers.
"""

from __future__ import annotations

import dataclasses

from glasslab.data.build import STEP_NAME, build_step
from glasslab.data.config import BuildConfig
from glasslab.experiments import long_ladder
from glasslab.lab import Step
from glasslab.lab.card import Expectation, ExperimentCard
from glasslab.ladder.plan import LadderSpec, plan_ladder
from glasslab.ladder.steps import ladder_steps

LADDER = "selfcal"
TOKEN_MULTIPLES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
"""Of each width's rule tokens (20 per active parameter): the smallest is the earliest cooldown the
recipe's warmup (20% of the 1× run) allows, and the small widths reach 8× (160 tokens per parameter),
where the tokens term has flattened enough to show the floor under it."""
HERO_REACH = 100.0
"""Grid points are kept only up to 1/100 of the hero's compute outside the LM head."""
SEEDS = (3,)
"""Seeds of every width's trunk (and so of each of its branches): the grid's points of one width share
their trunk's noise, so the noise that matters is between trunks."""
WIDE_WIDTHS = (16, 24, 32, 48)
"""The default self-calibrating grid's widths: non-embedding N spans ×17 (active ×7.3) against (a) and (b)'s ×7.8
(×4.1), past the gate's ×10 for a free floor, and the d88 hero stays ×6.2 the top width's N, so the size term
is checked (≥ 5×). d16–d64 spans ×38 but puts d88 at ×2.8: a hero ×5 past d64 is d128, ~22 CPU-hours
(``glasslab ladder plan`` prints both)."""
WIDE_MULTIPLES = (0.5, 1.0, 2.0)
"""Three token multiples per width, none under ×0.5: a ×0.25 branch spends most of its steps in warmup."""
WIDE_SEEDS = (2,)
WIDE_REACH = 0.0
"""The reach rule revised: every width keeps every branch. ``HERO_REACH`` (points ≤ 1/100 of the hero's compute)
dropped the widest widths' larger multiples — d40 kept ×0.25–0.5 — so the widths that say most about size had
the fewest points. The plan prints the extrapolation instead (×14 to the d88 hero)."""
SMOKE_MAX_SOURCE_BYTES = 200_000
"""The smoke ladder's data: each built-in corpus capped, so the build takes seconds."""


def spec(seq_len: int = 64, name: str = LADDER) -> LadderSpec:
    """The long ladder's widths, recipe and d88 hero as a grid at context ``seq_len``."""
    return dataclasses.replace(long_ladder.spec(), name=name, seq_len=seq_len, token_multiples=TOKEN_MULTIPLES,
                               hero_reach=HERO_REACH, seeds_per_rung=SEEDS)


def wide_spec(seq_len: int = 64, name: str = f"{LADDER}-wide") -> LadderSpec:
    """The default self-calibrating grid: :data:`WIDE_WIDTHS` at :data:`WIDE_MULTIPLES`, two seeds, every branch
    kept, the long ladder's recipe and d88 hero at context ``seq_len``."""
    return dataclasses.replace(spec(seq_len, name), widths=WIDE_WIDTHS, token_multiples=WIDE_MULTIPLES,
                               hero_reach=WIDE_REACH, seeds_per_rung=WIDE_SEEDS)


def card(name: str, seq_len: int) -> ExperimentCard:
    """The card of a self-calibrated ladder named ``name`` at context ``seq_len``."""
    return ExperimentCard(
        title=f"Does a grid ladder at context {seq_len} predict a hero ≥ 100× away with a floor of its own?",
        question="With nothing taken from an earlier hero, does the hero's final eval loss land inside the 90% "
                 "band that the grid's fit (floor E estimated from the rungs) registered before its step 0?",
        design="The long ladder's recipe and data; widths 16-40 each trained to 0.25-8x its rule's tokens (a "
               "constant-LR trunk, a cooldown branch at each token count), grid points kept up to 1/100 of the "
               "hero's compute; L(N, S1, S2) = E + A*N^-alpha + B*S1^-beta - C*N^-gamma*S2 fitted on every curve "
               "(variable projection, Huber); the hero's curve every 5% registered before its step 0.",
        expectations=(Expectation("hero final eval loss", prediction=f"{name}/hero/eval/macro/loss"),),
    )


CARD = card(LADDER, 64)


def steps_for(ladder_spec: LadderSpec) -> list[Step]:
    """The data build (the long ladder's), the grid's trunks and branches, the fit and the hero."""
    data = Step(STEP_NAME, build_step, long_ladder.build_config())
    return [data, *ladder_steps(plan_ladder(ladder_spec), data, long_ladder.MIXTURE, long_ladder.recipe(),
                                L_inf=None, threads=1, hero_threads=2)]


def steps() -> list[Step]:
    return steps_for(spec())


def smoke_spec(seq_len: int = 64, name: str = f"{LADDER}-smoke") -> LadderSpec:
    """Widths 16–32 at 0.5 tokens per parameter and ≥ 20 steps at 1×, multiples 1 and 2, one seed, a d40
    hero: every path in minutes, no claim on the numbers."""
    return dataclasses.replace(spec(seq_len, name), widths=(16, 24, 32), tokens_per_param=0.5, min_steps=20,
                               token_multiples=(1.0, 2.0), hero_width=40, hero_reach=0.0, seeds_per_rung=(1,))


def smoke_build_config() -> BuildConfig:
    """The long ladder's build with every corpus capped at :data:`SMOKE_MAX_SOURCE_BYTES`."""
    build = long_ladder.build_config()
    sources = tuple(dataclasses.replace(s, max_bytes=SMOKE_MAX_SOURCE_BYTES) for s in build.sources)
    return dataclasses.replace(build, sources=sources)


def smoke_steps(seq_len: int = 64, name: str = f"{LADDER}-smoke") -> list[Step]:
    """:func:`smoke_spec` on the capped data with the long ladder's smoke recipe without samples or task evals,
    every run on one thread (``bench/ladder_bench.py --selfcal --smoke``): the hero's four samples and its
    second thread were most of the smoke's time on a busy machine (a sample 18–23 s, a step 1.1 s against a
    grid run's 0.05 s), then the tasks scored at each of a run's 20 evals (48 of 101 s of training); the
    protocol's headlines read neither."""
    data = Step(STEP_NAME, build_step, smoke_build_config())
    recipe = dataclasses.replace(long_ladder.smoke_recipe(), sample_prompts=(), eval_tasks=())
    return [data, *ladder_steps(plan_ladder(smoke_spec(seq_len, name)), data, long_ladder.MIXTURE, recipe,
                                L_inf=None, threads=1, hero_threads=1, num_bootstrap=100)]
