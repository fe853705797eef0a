"""``glasslab run selfcal_ladder_128``: protocol (b), fixed in advance — the self-calibrated grid ladder
at a 128-token context.

Everything is ``selfcal_ladder``'s (the long ladder's data and recipe, widths 16–40 each trained to
0.25–8× its rule's tokens as constant-LR trunks with cooldown branches, grid points kept up to 1/100
of the hero's compute, a d88 hero) except the context: 128 tokens instead of 64, where no earlier
hero exists, so nothing about its floor was known before. Its configuration was written into
``docs/ladder.md`` and committed before any of its runs trained; the hero's curve is registered in the
lab's registry by the hero step, after the fit and before the hero's step 0.
"""

from __future__ import annotations

from glasslab.experiments import selfcal_ladder
from glasslab.lab import Step
from glasslab.ladder.plan import LadderSpec

LADDER = "selfcal128"
SEQ_LEN = 128
CARD = selfcal_ladder.card(LADDER, SEQ_LEN)


def spec() -> LadderSpec:
    """``selfcal_ladder``'s grid at a 128-token context."""
    return selfcal_ladder.spec(SEQ_LEN, LADDER)


def steps() -> list[Step]:
    return selfcal_ladder.steps_for(spec())


def smoke_steps() -> list[Step]:
    """The smoke grid at this context (``bench/ladder_bench.py --selfcal --smoke``)."""
    return selfcal_ladder.smoke_steps(SEQ_LEN, f"{LADDER}-smoke")
