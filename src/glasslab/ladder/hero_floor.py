"""A floor from what the lab knows: the end-point law's ``E`` calibrated on earlier heroes of the same recipe.

A grid narrow in N cannot place its own floor (protocol (b): E anywhere in [0, 0.6]); the long ladder's
L∞ of 1.1 came instead from its earlier heroes — the floor at which the law through the rungs predicts
those heroes (``docs/ladder.md``, "The long ladder"). This module does that calibration on the end-point
law: for each earlier hero of the same recipe (same data manifest, which fixes the tokenizer, and the same
context length), the floor ``E`` at which the law refitted to the grid with ``E`` pinned passes through the
hero's measured loss, and the floors at which it passes through that loss ± the run-to-run noise
(``HERO_NOISE_Z`` standard deviations). The floor is the mean of the heroes' floors; its interval spans every
hero's, so heroes that disagree widen it rather than average it away.

Its counterpart in the gate (``glasslab.ladder.gate``): the free fit's prediction at each earlier hero
must be consistent with that hero, and the grid's own floor interval must hold the heroes' floor.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import brentq, minimize, nnls

from glasslab.errors import UserError
from glasslab.ladder.gate import (
    HERO_NOISE_Z,
    ND_EXPONENT_RANGE,
    Check,
    difference_beta_check,
    earlier_hero_check,
    exponent_check,
    extended,
    hero_floor_check,
    interval_width_check,
    size_share_check,
    verdict,
)
from glasslab.ladder.grid_ends import (
    EXPONENT_BOUNDS,
    EXPONENTS,
    EndpointLaw,
    EndpointPrediction,
    EndPoints,
    difference_check,
    predict_endpoint,
    top_point,
)
from glasslab.ladder.uncertainty import percentile_interval
from glasslab.layout import write_text_atomic

FLOOR_MARGIN = 1e-3
"""Nats: the pinned floor stays this far below the grid's lowest loss (the reducible part must be > 0)."""


@dataclass(frozen=True)
class EarlierHero:
    """A finished hero of the grid's recipe: its name, N (non-embedding active parameters), D (forward area at
    the end), measured final loss (nats/token) and the run-to-run noise of that loss (a relative standard
    deviation, e.g. the seed noise of its own grid)."""

    name: str
    params: float
    tokens: float
    loss: float
    noise: float


HERO_COLUMNS = ("name", "params", "tokens", "loss", "noise")


def read_heroes(path: str | Path) -> tuple[EarlierHero, ...]:
    """The earlier heroes in the CSV file at ``path`` (columns :data:`HERO_COLUMNS`: N and D as the points
    file's, measured final loss in nats/token, relative run noise such as 0.005); a one-line UserError naming
    the row and field of a bad value."""
    path = Path(path)
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as error:
        raise UserError(f"{path}: cannot read the heroes file ({error.strerror})") from None
    missing = [c for c in HERO_COLUMNS if rows and c not in rows[0]]
    if not rows or missing:
        raise UserError(f"{path}: expected a CSV with columns {', '.join(HERO_COLUMNS)} and at least one row"
                        + (f"; missing {', '.join(missing)}" if missing else ""))
    heroes = []
    for line, row in enumerate(rows, start=2):
        values = {}
        for field in HERO_COLUMNS[1:]:
            try:
                values[field] = float(row[field])
            except (TypeError, ValueError):
                values[field] = math.nan
            if not (math.isfinite(values[field]) and values[field] > 0):
                raise UserError(f"{path}:{line}: {field}={row[field]!r}; expected a positive number")
        heroes.append(EarlierHero(row["name"] or f"row {line}", **values))
    return tuple(heroes)


def write_heroes(path: str | Path, heroes: Sequence[EarlierHero]) -> None:
    """``heroes`` as the CSV :func:`read_heroes` reads, each number written back exactly (``repr``)."""
    lines = [",".join(HERO_COLUMNS)]
    lines += [",".join([h.name, *(repr(float(getattr(h, c))) for c in HERO_COLUMNS[1:])]) for h in heroes]
    write_text_atomic(Path(path), "\n".join(lines) + "\n")


def pinned_fit(points: EndPoints, floor: float) -> EndpointLaw:
    """The end-point law with ``E = floor``: (α, β) on :data:`EXPONENTS`, then Nelder–Mead, (A, B) ≥ 0 by
    least squares on the relative residuals."""
    reducible = (points.loss_n - floor) / points.loss_n

    def solve(alpha: float, beta: float) -> tuple[np.ndarray, float]:
        design = np.stack([points.params_n ** -alpha, points.tokens_n ** -beta], axis=1) / points.loss_n[:, None]
        scale = 1.0 / np.sqrt((design**2).sum(axis=0))
        coef, residual = nnls(design * scale, reducible)
        return coef * scale, residual

    start = min(((a, b) for a in EXPONENTS[::3] for b in EXPONENTS[::3]), key=lambda ab: solve(*ab)[1])
    result = minimize(lambda x: solve(*x)[1], np.array(start), method="Nelder-Mead",
                      bounds=[EXPONENT_BOUNDS, EXPONENT_BOUNDS], options={"xatol": 1e-4, "fatol": 1e-14})
    alpha, beta = result.x if result.fun <= solve(*start)[1] else start
    (A, B), _ = solve(alpha, beta)
    return EndpointLaw(float(floor), float(A), float(alpha), float(B), float(beta))


def floor_through(points: EndPoints, hero: EarlierHero, loss: float) -> float | None:
    """The floor at which the pinned law predicts ``loss`` at ``hero``'s (N, D); None when no floor in
    [0, lowest grid loss) does."""
    ceiling = float(points.loss_n.min()) - FLOOR_MARGIN

    def miss(floor: float) -> float:
        return float(pinned_fit(points, floor)(hero.params, hero.tokens)) - loss

    low, high = miss(0.0), miss(ceiling)
    if np.sign(low) == np.sign(high):
        return None
    return float(brentq(miss, 0.0, ceiling, xtol=1e-4))


@dataclass(frozen=True)
class HeroFloor:
    """The floor calibrated on ``heroes``: ``value`` in [``low``, ``high``] (nats/token), each hero's
    (floor, low, high), and the heroes no floor in [0, lowest loss) reconciles with the grid."""

    value: float
    low: float
    high: float
    per_hero: dict[str, tuple[float, float, float]]
    unreachable: tuple[str, ...]

    def record(self) -> dict:
        """How ``fit.json``'s gate records where the floor came from."""
        return {"source": "earlier heroes of the same recipe", "value": self.value, "low": self.low,
                "high": self.high, "heroes": {k: list(v) for k, v in self.per_hero.items()},
                "unreachable": list(self.unreachable)}


def floor_from_heroes(points: EndPoints, heroes: Sequence[EarlierHero]) -> HeroFloor | None:
    """Calibrate the floor on ``heroes`` (already of the grid's recipe); None when there are none or no hero
    can be reconciled. A hero's interval is the floors through its loss ± ``HERO_NOISE_Z`` × its noise; the edges
    that no floor reaches are clamped to [0, lowest loss)."""
    ceiling = float(points.loss_n.min()) - FLOOR_MARGIN
    per_hero, unreachable = {}, []
    for hero in heroes:
        centre = floor_through(points, hero, hero.loss)
        if centre is None:
            unreachable.append(hero.name)
            continue
        spread = HERO_NOISE_Z * hero.noise * hero.loss
        # A higher hero loss needs a higher floor (the law falls towards E); unreachable edges are clamped.
        low = floor_through(points, hero, hero.loss - spread)
        high = floor_through(points, hero, hero.loss + spread)
        edges = (centre, 0.0 if low is None else low, ceiling if high is None else high)
        per_hero[hero.name] = (centre, min(edges), max(edges))
    if not per_hero:
        return None
    values = np.array(list(per_hero.values()))
    return HeroFloor(float(values[:, 0].mean()), float(values[:, 1].min()), float(values[:, 2].max()), per_hero,
                     tuple(unreachable))


def hero_checks(ends: EndpointPrediction, heroes: Sequence[EarlierHero]) -> list[Check]:
    """The free fit against each earlier hero: its measured loss inside the fit's bootstrap band at that
    hero's (N, D), widened by its run noise."""
    checks = []
    for hero in heroes:
        at_hero = ends.replicates[:, 0] + ends.replicates[:, 1] * hero.params ** -ends.replicates[:, 2] \
            + ends.replicates[:, 3] * hero.tokens ** -ends.replicates[:, 4]
        low, high = (float(x[0]) for x in percentile_interval(at_hero[:, None], ends.level))
        point = float(ends.law(hero.params, hero.tokens))
        checks.append(earlier_hero_check(hero.name, hero.loss, hero.noise, min(low, point), max(high, point)))
    return checks


def predict_with_heroes(points: EndPoints, target: tuple[float, float], heroes: Sequence[EarlierHero], *,
                        level: float = 0.9, num_bootstrap: int = 1000,
                        rng: np.random.Generator) -> EndpointPrediction:
    """The end-point prediction of ``target`` (N, D), gated, with the floor from ``heroes`` when there are any.

    No heroes: :func:`predict_endpoint` as it is (the grid's own floor, refused when unidentified). Heroes:
    the free fit must agree with each of them (refuses) and registers as it is when its gate passes;
    otherwise the floor calibrated on them (:func:`floor_from_heroes`) is pinned, the grid's floor interval
    must hold it, and the pinned law registers under the checks that do not concern a free floor. Its
    interval: the pinned law's predictions at the heroes' floor interval's ends, widened by the grid's run
    noise (one run of the target). The gate record's ``floor`` says where the floor came from."""
    ends = predict_endpoint(points, target, level=level, num_bootstrap=num_bootstrap, rng=rng)
    grid_floor = ends.gate["floor"]
    if not heroes:
        return replace(ends, gate={**ends.gate, "floor": {**grid_floor, "note": "no earlier hero of this recipe"}})
    free = {**extended(ends.gate, hero_checks(ends, heroes)), "floor": grid_floor}
    if free["registered"]:
        return replace(ends, gate=free)
    floor = floor_from_heroes(points, heroes)
    if floor is None:
        return replace(ends, gate={**free, "floor": {**grid_floor, "note": "no floor in [0, lowest loss) "
                                                     "reconciles the earlier heroes with the grid"}})
    return pinned_prediction(points, target, ends, floor, (grid_floor["low"], grid_floor["high"]), heroes, free)


def pinned_band(points: EndPoints, at: tuple[float, float], floor: HeroFloor) -> tuple[float, float, float]:
    """(point, low, high): the law pinned at ``floor``'s value and at its interval's ends, predicting ``at``."""
    point = float(pinned_fit(points, floor.value)(*at))
    edges = [float(pinned_fit(points, f)(*at)) for f in (floor.low, floor.high)]
    return point, min(point, *edges), max(point, *edges)


def leave_one_out_checks(points: EndPoints, heroes: Sequence[EarlierHero]) -> list[Check]:
    """With two heroes or more, each against the floor calibrated on the others: heroes that need different
    floors are not one law (one hero alone cannot disagree with its own calibration)."""
    checks = []
    for hero in heroes if len(heroes) > 1 else ():
        others = floor_from_heroes(points, [h for h in heroes if h is not hero])
        if others is None:
            continue
        _, low, high = pinned_band(points, (hero.params, hero.tokens), others)
        checks.append(earlier_hero_check(hero.name, hero.loss, hero.noise, low, high))
    return checks


def pinned_prediction(points: EndPoints, target: tuple[float, float], ends: EndpointPrediction, floor: HeroFloor,
                      grid_floor: tuple[float, float], heroes: Sequence[EarlierHero],
                      free_gate: dict) -> EndpointPrediction:
    """The prediction with the heroes' floor pinned, and its gate: exponents, the grid holding the floor,
    the heroes against each other, the interval's width, the size share and the difference check; the free
    fit's refused gate (``free_gate``) is kept beside it under ``free_fit``."""
    law = pinned_fit(points, floor.value)
    point, low, high = pinned_band(points, target, floor)
    spread = HERO_NOISE_Z * ends.noise.sigma * point
    low, high = low - spread, high + spread
    optional = (size_share_check(law, top_point(points), target),
                difference_beta_check(difference_check(points, law)["beta"], law.beta))
    gate = verdict([exponent_check("alpha", law.alpha, ND_EXPONENT_RANGE),
                    exponent_check("beta", law.beta, ND_EXPONENT_RANGE),
                    hero_floor_check((floor.value, floor.low, floor.high), grid_floor),
                    *leave_one_out_checks(points, heroes), interval_width_check(point, low, high),
                    *(c for c in optional if c is not None)])
    return replace(ends, law=law, point=point, lo=low, hi=high, gate={**gate, "floor": floor.record(),
                                                                        "free_fit": free_gate})
