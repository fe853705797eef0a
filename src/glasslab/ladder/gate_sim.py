"""Does the registration gate refuse the grids that cannot predict, and only those? Grids from known laws.

Each synthetic grid draws a law ``E + A·N^−α + B·D^−β`` (exponents and floor across the published
range), a design (:data:`DESIGNS`: the span of N, its token multiples, two seeds) and a noise level
(0.3–1% a run, shared by a size's branches of one seed as a trunk's are), fits the end points as the
product does (``grid_ends.predict_endpoint``) and predicts a hero 5–14× the top size's N at 20 tokens a
parameter. The grid is labelled by the truth, not by the gate: *ill-posed* when the fit's point misses
the true law at the hero by more than :data:`ILL_POSED_PCT`, *well-posed* when within
:data:`WELL_POSED_PCT` (between the two: neither). ``bench/ladder_bench.py --synthetic`` prints the
rates; (b)'s grid drawn from its registered law is ``ladder_bench.py --protocol-b-points``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from glasslab.ladder.grid_ends import EndpointLaw, points_of
from glasslab.ladder.hero_floor import EarlierHero, predict_with_heroes

ILL_POSED_PCT = 3.0
WELL_POSED_PCT = 1.5
DESIGNS = {
    "narrow": ((1.0, 1.6, 2.5, 4.0), (0.5, 1, 2, 4, 8)),
    "medium": ((1.0, 2.0, 4.0, 8.0, 12.0), (0.5, 1, 2, 4)),
    "wide": ((1.0, 2.5, 6.0, 15.0, 40.0), (0.5, 1, 2, 4)),
}
"""Design → (sizes as multiples of the smallest N, token multiples of 20 tokens a parameter)."""
SMALLEST_PARAMS = 2e4
TOKENS_PER_PARAM = 20.0
SEEDS = 2
EARLIER_HERO_SHARE = 0.5
"""The earlier hero of the same recipe, when a grid has one: this share of the new hero's N, at 20 tokens a
parameter (the last hero before this one, half its size)."""


@dataclass(frozen=True)
class GridOutcome:
    """One synthetic grid: its design, noise, the fit's error against the true law at the hero (%), whether
    the gate registered it, and whether its interval held one hero run's loss."""

    design: str
    noise: float
    error_pct: float
    registered: bool
    covered: bool
    reasons: tuple[str, ...]
    halfwidth_pct: float
    """The 90% interval's half-width, % of the point."""
    floor_source: str

    @property
    def label(self) -> str:
        if abs(self.error_pct) > ILL_POSED_PCT:
            return "ill-posed"
        return "well-posed" if abs(self.error_pct) <= WELL_POSED_PCT else "neither"


def draw_law(rng: np.random.Generator) -> EndpointLaw:
    """A law in the published range whose size and data terms are each 0.6–2 nats at the smallest point."""
    alpha, beta = rng.uniform(0.2, 0.6), rng.uniform(0.2, 0.5)
    d0 = SMALLEST_PARAMS * TOKENS_PER_PARAM
    return EndpointLaw(E=rng.uniform(1.0, 2.5), A=rng.uniform(0.6, 2.0) * SMALLEST_PARAMS**alpha, alpha=alpha,
                       B=rng.uniform(0.6, 2.0) * d0**beta, beta=beta)


def draw_points(law: EndpointLaw, sizes: tuple[float, ...], multiples: tuple[float, ...], noise: float,
                rng: np.random.Generator) -> tuple[list[float], list[float], list[float], list[tuple[str, int]]]:
    """N, D, loss and family of every (size, multiple, seed): one offset per (size, seed) of ``noise``
    (relative) and a tenth of it per point."""
    rows = []
    for size in sizes:
        n = SMALLEST_PARAMS * size
        for seed in range(SEEDS):
            offset = noise * rng.standard_normal()
            for m in multiples:
                d = TOKENS_PER_PARAM * m * n
                loss = float(law(n, d)) * (1 + offset + 0.1 * noise * rng.standard_normal())
                rows.append((n, d, loss, (f"N{n:.4g}", seed)))
    return tuple(list(column) for column in zip(*rows, strict=True))


def simulate_grid(rng: np.random.Generator, design: str, *, num_bootstrap: int = 400,
                  hero_rng: np.random.Generator | None = None) -> GridOutcome:
    """Draw a law, a noise level and a grid of ``design``; fit, gate and score it against the truth. With
    ``hero_rng``, the registry also holds an earlier hero of the same recipe (:data:`EARLIER_HERO_SHARE`),
    its one run's loss drawn from ``hero_rng``, so that the same ``rng`` seed gives the same grid either way."""
    sizes, multiples = DESIGNS[design]
    law, noise = draw_law(rng), rng.uniform(0.003, 0.01)
    hero_n = SMALLEST_PARAMS * sizes[-1] * rng.uniform(5.0, 14.0)
    hero = (hero_n, TOKENS_PER_PARAM * hero_n)
    points = points_of(*draw_points(law, sizes, multiples, noise, rng))
    heroes = () if hero_rng is None else (earlier_hero(law, EARLIER_HERO_SHARE * hero_n, noise, hero_rng),)
    fit = predict_with_heroes(points, hero, heroes, num_bootstrap=num_bootstrap, rng=rng)
    truth = float(law(*hero))
    measured = truth * (1 + noise * rng.standard_normal())
    return GridOutcome(design, noise, 100.0 * (fit.point - truth) / truth, fit.gate["registered"],
                       fit.lo <= measured <= fit.hi, tuple(fit.gate["reasons"]), 50.0 * (fit.hi - fit.lo) / fit.point,
                       fit.gate["floor"]["source"])


def earlier_hero(law: EndpointLaw, params: float, noise: float, rng: np.random.Generator) -> EarlierHero:
    """One finished run of ``law`` at ``params`` and 20 tokens a parameter, with relative run noise ``noise``."""
    tokens = TOKENS_PER_PARAM * params
    return EarlierHero("earlier", params, tokens, float(law(params, tokens)) * (1 + noise * rng.standard_normal()),
                       noise)


def gate_figures(outcomes: list[GridOutcome]) -> dict[str, float]:
    """The bench's headlines from simulated grids (NaN where a group is empty)."""
    def rate(values: list[bool]) -> float:
        return float(np.mean(values)) if values else math.nan

    ill = [not o.registered for o in outcomes if o.label == "ill-posed"]
    well = [o.registered for o in outcomes if o.label == "well-posed"]
    registered = [o for o in outcomes if o.registered]
    return {"gate_refuses_ill_posed": rate(ill), "gate_registers_well_posed": rate(well),
            "interval_coverage_90": rate([o.covered for o in registered]),
            "median_abs_error_registered_pct": float(np.median([abs(o.error_pct) for o in registered]))
            if registered else math.nan,
            "ill_posed_grids": float(len(ill)), "well_posed_grids": float(len(well)),
            "registered_grids": float(len(registered))}


WIDTH_CUTS_PCT = (2.5, 3.0, 4.0, 5.0, 6.0)
"""Interval half-widths (% of the point) at which :func:`width_frontier` shows what the width rule trades."""


def width_frontier(outcomes: list[GridOutcome]) -> dict[float, tuple[float, float]]:
    """For each cut in :data:`WIDTH_CUTS_PCT`, (refuses ill-posed, registers well-posed) had the interval-width
    rule refused at that half-width and every other check stayed as it is: the trade the noise leaves."""
    def kept(o: GridOutcome, cut: float) -> bool:
        return o.halfwidth_pct <= cut and all(r.startswith("interval width") for r in o.reasons)

    frontier = {}
    for cut in WIDTH_CUTS_PCT:
        ill = [not kept(o, cut) for o in outcomes if o.label == "ill-posed"]
        well = [kept(o, cut) for o in outcomes if o.label == "well-posed"]
        frontier[cut] = (float(np.mean(ill)) if ill else math.nan, float(np.mean(well)) if well else math.nan)
    return frontier
