"""Pre-registration: the hero's prediction is fixed in run.json before step 0; excursions are events."""

from __future__ import annotations

import numpy as np
import pytest

from glasslab import track
from glasslab.errors import UserError
from glasslab.ladder.fit import fit_ladder
from glasslab.ladder.predict import CURVE_FRACTIONS
from glasslab.ladder.preregister import band_at, check_live_loss, hero_record_extra
from glasslab.ladder.rungs import Rung


def true_loss(flops):
    return 1.8 + 300.0 * np.power(flops, -0.15)


@pytest.fixture(scope="module")
def fit():
    rng = np.random.default_rng(0)
    rungs = []
    for i, c in enumerate(np.geomspace(1e15, 1e17, 5)):
        noisy = lambda x: tuple(true_loss(x) * np.exp(0.004 * rng.standard_normal(2)))  # noqa: B023
        rungs.append(Rung(f"r{i}", float(c), noisy(c), run_ids=(f"run-r{i}-s0", f"run-r{i}-s1"),
                          partial={f: noisy(f * c) for f in CURVE_FRACTIONS[:-1]}))
    return fit_ladder(rungs, ladder="tiny", target_flops=1e18, L_inf=1.8, num_bootstrap=300)


def test_prediction_is_written_before_step_zero_and_never_changed(tmp_path, fit):
    extra = hero_record_extra(fit, {"steps": 1000, "flops": 1e18})
    run = track.init(tmp_path / "hero", {"model": {}}, record_extra=extra)
    run.finish()
    record = track.read_record(tmp_path / "hero")
    assert record["role"] == "hero" and record["ladder"] == "tiny" and record["steps"] == 1000
    prediction = record["prediction"]
    assert {k: prediction[k] for k in ("flops", "point", "lo", "hi", "level")} == fit["prediction"]
    assert len(prediction["curve"]) == 20 and prediction["registered_at"].endswith("Z")
    assert "commit" in prediction["code"] and "run-r4-s1" in prediction["rungs"]
    # A resumed hero (even with a different fit in hand) keeps the registered prediction.
    later = dict(extra, prediction=dict(extra["prediction"], point=0.0))
    track.init(tmp_path / "hero", {"model": {}}, record_extra=later, reason="resume").finish()
    assert track.read_record(tmp_path / "hero")["prediction"]["point"] == fit["prediction"]["point"]


def test_band_interpolates_the_curve(fit):
    prediction = hero_record_extra(fit)["prediction"]
    point, lo, hi = band_at(prediction, 0.5)
    assert lo < point < hi
    assert point == pytest.approx(true_loss(0.5e18), rel=0.01)
    mid = band_at(prediction, 0.525)
    assert band_at(prediction, 0.5)[0] > mid[0] > band_at(prediction, 0.55)[0]
    assert band_at(prediction, 0.01) is None


def test_loss_leaving_the_band_is_recorded_once_per_excursion(tmp_path, fit):
    run_dir = tmp_path / "hero"
    run = track.init(run_dir, {"model": {}}, record_extra=hero_record_extra(fit, {"steps": 1000}))
    for step in range(100, 1001, 100):
        loss = true_loss(1e18 * step / 1000)
        if step in (400, 500):  # a two-eval excursion above the band
            loss *= 1.05
        if step == 900:  # and one below it
            loss *= 0.95
        run.log({"eval/macro/loss": float(loss)}, step=step)
    run.finish()
    added = check_live_loss(run_dir)
    assert [e["step"] for e in added] == [400, 900]
    assert added[0]["loss"] > added[0]["hi"] and added[1]["loss"] < added[1]["lo"]
    assert check_live_loss(run_dir) == []  # already reported
    with track.RunReader(run_dir) as reader:
        events = [e for e in reader.events() if e["kind"] == "prediction_out_of_band"]
    assert [e["step"] for e in events] == [400, 900]
    assert events[0]["severity"] == "warning" and "above" in events[0]["title"]


def test_check_needs_a_registered_prediction(tmp_path):
    track.init(tmp_path / "plain", {"x": 1}).finish()
    with pytest.raises(UserError, match="no pre-registered prediction"):
        check_live_loss(tmp_path / "plain")
