"""The compute law L(C) = L∞ + A·C^(−α) on synthetic ladders with known constants."""

from __future__ import annotations

import numpy as np
import pytest

from glasslab.errors import UserError
from glasslab.ladder.compute_law import fit_compute_law
from glasslab.ladder.predict import CURVE_FRACTIONS, predict, predict_curve
from glasslab.ladder.rungs import Rung

TRUE_L_INF, TRUE_A, TRUE_ALPHA = 1.8, 300.0, 0.15


def true_loss(flops):
    return TRUE_L_INF + TRUE_A * np.power(flops, -TRUE_ALPHA)


def synthetic_ladder(rng, noise, flops=None, seeds=3):
    """Rungs whose per-seed losses scatter around the true law by ``noise`` (relative)."""
    flops = np.geomspace(1e15, 1e17, 5) if flops is None else flops
    return [Rung(f"r{i}", float(c), tuple(true_loss(c) * np.exp(noise * rng.standard_normal(seeds))))
            for i, c in enumerate(flops)]


@pytest.mark.parametrize("noise", [0.0025, 0.01])
def test_fits_recover_known_constants(noise):
    rng = np.random.default_rng(7)
    rungs = synthetic_ladder(rng, noise, flops=np.geomspace(1e13, 1e19, 7))
    free = fit_compute_law(rungs)
    assert free.L_inf_mode == "free"
    assert free.L_inf == pytest.approx(TRUE_L_INF, abs=0.1 * noise / 0.01)
    assert free.alpha == pytest.approx(TRUE_ALPHA, rel=0.08 * noise / 0.01)
    pinned = fit_compute_law(rungs, L_inf=TRUE_L_INF)
    assert pinned.L_inf == TRUE_L_INF and pinned.L_inf_mode == "pinned"
    assert pinned.alpha == pytest.approx(TRUE_ALPHA, rel=0.03 * noise / 0.01)
    assert pinned.A == pytest.approx(TRUE_A, rel=0.15 * noise / 0.01)
    # 10x beyond the largest rung, the prediction is within ~2 noise levels of the truth.
    assert pinned(1e20) == pytest.approx(true_loss(1e20), rel=2 * noise)


def test_noiseless_ladder_is_fitted_exactly():
    flops = np.geomspace(1e14, 1e18, 5)
    rungs = [Rung(f"r{i}", float(c), (float(true_loss(c)),)) for i, c in enumerate(flops)]
    law = fit_compute_law(rungs)
    assert (law.L_inf, law.A, law.alpha) == pytest.approx((TRUE_L_INF, TRUE_A, TRUE_ALPHA), rel=1e-6)


@pytest.mark.parametrize("seeds_per_rung,seeds_at_target", [(3, None), (1, None), (3, 1)])
def test_nominal_90_percent_interval_covers_truth_85_to_95_percent(seeds_per_rung, seeds_at_target):
    """Over 300 replicate ladders (0.5% noise), the pinned-L∞ 90% interval at 10x the largest rung
    covers the true expected loss (or, with seeds_at_target=1, a fresh single-seed hero loss) when the
    asymptote is known exactly (a point prior): the noise part of the interval alone."""
    rng = np.random.default_rng(2024)
    target = 1e18
    covered = 0
    replicates = 300
    for rep in range(replicates):
        rungs = synthetic_ladder(rng, 0.005, seeds=seeds_per_rung)
        truth = true_loss(target)
        if seeds_at_target:
            truth *= np.exp(0.005 * rng.standard_normal())
        p = predict(rungs, target, L_inf=TRUE_L_INF, L_inf_prior=(TRUE_L_INF, TRUE_L_INF), num_bootstrap=400,
                    seeds_at_target=seeds_at_target, seed=rep)
        assert p.lo < p.point < p.hi
        covered += p.lo <= truth <= p.hi
    assert 0.85 <= covered / replicates <= 0.95


def test_default_interval_covers_a_misspecified_asymptote_85_to_95_percent():
    """The true L∞ lies anywhere within ± 0.3 nats of the pinned value: the default interval (pinned
    value ± 0.3 as a prior) still covers the truth at 10x about 90% of the time; an interval that
    trusts the pinned value covers it about a quarter of the time."""
    rng = np.random.default_rng(11)
    covered = {"default": 0, "certain": 0}
    replicates = 300
    for rep in range(replicates):
        true_L_inf = TRUE_L_INF + rng.uniform(-0.3, 0.3)
        flops = np.geomspace(1e15, 1e17, 5)
        rungs = [Rung(f"r{i}", float(c), tuple((true_L_inf + TRUE_A * c**-TRUE_ALPHA)
                                               * np.exp(0.005 * rng.standard_normal(3))))
                 for i, c in enumerate(flops)]
        truth = true_L_inf + TRUE_A * 1e18**-TRUE_ALPHA
        for name, prior in (("default", None), ("certain", (TRUE_L_INF, TRUE_L_INF))):
            p = predict(rungs, 1e18, L_inf=TRUE_L_INF, L_inf_prior=prior, num_bootstrap=300, seeds_at_target=None,
                        seed=rep)
            covered[name] += p.lo <= truth <= p.hi
    assert p.prior.to_dict() == {"kind": "uniform", "low": 1.8, "high": 1.8, "source": "given"}
    assert 0.85 <= covered["default"] / replicates <= 0.95
    assert covered["certain"] / replicates < 0.5


def test_pinned_asymptote_is_stable_where_free_is_not():
    """Four rungs over one decade at 1% noise: the free asymptote wanders and its 10x extrapolation
    scatters; pinning L∞ keeps the extrapolation tight."""
    rng = np.random.default_rng(3)
    free_pred, pinned_pred, free_L_inf = [], [], []
    for _ in range(100):
        rungs = synthetic_ladder(rng, 0.01, flops=np.geomspace(1e15, 1e16, 4), seeds=2)
        free = fit_compute_law(rungs)
        free_L_inf.append(free.L_inf)
        free_pred.append(free(1e17))
        pinned_pred.append(fit_compute_law(rungs, L_inf=TRUE_L_INF)(1e17))
    assert np.std(free_L_inf) > 0.3  # the free asymptote is barely constrained
    assert np.std(free_pred) > 3 * np.std(pinned_pred)
    assert abs(np.mean(pinned_pred) / true_loss(1e17) - 1) < 0.005


def test_sweep_tabulates_and_its_span_is_the_prior():
    rungs = synthetic_ladder(np.random.default_rng(0), 0.005)
    certain = predict(rungs, 1e18, L_inf=1.8, L_inf_prior=(1.8, 1.8), seed=1)
    swept = predict(rungs, 1e18, L_inf=1.8, sweep=(1.6, 2.0), seed=1)
    default = predict(rungs, 1e18, L_inf=1.8, seed=1)
    assert [row.L_inf for row in swept.sweep] == [1.6, 2.0]
    assert swept.sweep[0].point < certain.point < swept.sweep[1].point  # higher floor, higher loss
    assert (swept.prior.low, swept.prior.high, swept.prior.source) == (1.6, 2.0, "sweep span")
    assert (default.prior.low, default.prior.high) == pytest.approx((1.5, 2.1))
    assert swept.point == certain.point == default.point
    # The band holds the swept points' range, and widens with the prior: certain < ±0.2 < ±0.3.
    assert swept.lo < swept.sweep[0].point and swept.hi > swept.sweep[1].point
    assert certain.hi - certain.lo < 0.6 * (swept.hi - swept.lo) < 0.6 * (default.hi - default.lo)
    # The prior stops short of the lowest rung's loss: a law cannot put its floor at a rung.
    lowest = min(r.loss_mean for r in rungs)
    near = predict(rungs, 1e18, L_inf=lowest - 0.1, seed=1)
    assert near.prior.high == pytest.approx(lowest - 0.01)


def test_curve_predicts_every_five_percent():
    rng = np.random.default_rng(5)
    rungs = []
    for i, c in enumerate(np.geomspace(1e15, 1e17, 5)):
        partial = {f: tuple(true_loss(f * c) * np.exp(0.003 * rng.standard_normal(2)))
                   for f in CURVE_FRACTIONS[:-1]}
        rungs.append(Rung(f"r{i}", float(c), tuple(true_loss(c) * np.exp(0.003 * rng.standard_normal(2))),
                          partial=partial))
    curve = predict_curve(rungs, 1e18, L_inf=TRUE_L_INF, num_bootstrap=200)
    assert [c["fraction"] for c in curve] == list(CURVE_FRACTIONS)
    assert [c["flops"] for c in curve] == pytest.approx([f * 1e18 for f in CURVE_FRACTIONS])
    for point in curve:
        assert point["lo"] < point["point"] < point["hi"]
        assert point["point"] == pytest.approx(true_loss(point["flops"]), rel=0.01)
    assert curve[0]["point"] > curve[-1]["point"]


@pytest.mark.parametrize("rungs,L_inf,message", [
    ([Rung("d64", 1e15, (3.0,)), Rung("d96", 1e16, (2.8,))], None, "2 rungs (d64, d96)"),
    ([Rung("d64", 1e15, (3.0,)), Rung("d96", 1e16, (float("nan"),)), Rung("d128", 1e17, (2.5,))], None,
     "rung d96: loss nan"),
    ([Rung("d64", 1e15, (3.0,)), Rung("d96", 1e16, (-1.0,))], 1.0, "rung d96: loss -1.0"),
    ([Rung("d64", 1e15, (3.0,)), Rung("d96", 1e16, (0.0,))], 0.0, "rung d96: loss 0.0"),
    ([Rung("d64", 1e15, (3.0,)), Rung("d96", 1e15, (2.9,))], 1.0, "rung d96: same compute"),
    ([Rung("d64", 1e15, (3.0,)), Rung("d96", float("inf"), (2.9,))], 1.0, "rung d96: compute inf"),
    ([Rung("d64", 1e15, (3.0,)), Rung("d96", 1e16, (2.5,))], 2.6, "rung d96: mean loss 2.5 is not above"),
])
def test_bad_input_fails_with_one_line_naming_the_rung(rungs, L_inf, message):
    with pytest.raises(UserError) as info:
        fit_compute_law(rungs, L_inf=L_inf)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_too_few_seeds_and_rungs_to_measure_noise_is_a_user_error():
    rungs = [Rung(f"r{i}", c, (float(true_loss(c)) * 1.001,)) for i, c in enumerate((1e15, 1e16, 1e17))]
    with pytest.raises(UserError, match="nothing to measure noise with"):
        predict(rungs, 1e18)
