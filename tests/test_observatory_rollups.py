"""Rollups kept by the writer: min/max/last per bucket, latest attempt per step, spikes survive."""

from __future__ import annotations

import random

from glasslab import track
from glasslab.observatory.series import read_series
from glasslab.track.store import ROLLUP_WIDTHS


def test_rollups_match_latest_attempt_after_resume(tmp_path):
    rng = random.Random(0)
    expected = {}
    run = track.init(tmp_path, {"a": 1})
    for step in range(5000):
        expected[step] = rng.random()
        run.log({"train/loss": expected[step]}, step)
    run.finish("preempted")
    run = track.init(tmp_path, {"a": 1}, reason="resume")  # resumes from a checkpoint at 3000
    for step in range(3000, 3300):
        expected[step] = 10 + rng.random()
        run.log({"train/loss": expected[step]}, step)
    run.new_attempt("rollback")  # and rolls back to 3100
    for step in range(3100, 3200):
        expected[step] = -5 - rng.random()
        run.log({"train/loss": expected[step]}, step)
    run.finish()
    with track.RunReader(tmp_path) as reader:
        assert reader.point_count("train/loss") == 5000
        for width in ROLLUP_WIDTHS:
            rows = reader.rollups("train/loss", width)
            assert len(rows) == -(-5000 // width)
            for n, last_step, lo, hi, last in rows:
                bucket = last_step // width
                values = [expected[s] for s in range(bucket * width, min((bucket + 1) * width, 5000))]
                assert n == len(values)
                assert lo == min(values) and hi == max(values) and last == values[-1]


def test_downsampled_series_keeps_spike_and_nan(tmp_path):
    run = track.init(tmp_path, {})
    for step in range(20_000):
        value = 100.0 if step == 12_345 else float("nan") if step == 7 else 1.0 + step * 1e-6
        run.log({"train/loss": value}, step)
    run.finish()
    with track.RunReader(tmp_path) as reader:
        series = read_series(reader, "train/loss", max_points=300)
        short = read_series(reader, "train/loss", max_points=50_000)
    assert 150 <= len(series["steps"]) <= 300
    assert max(series["max"]) == 100.0 and min(series["min"]) == 1.0
    assert series["steps"][-1] == 19_999 and series["steps"] == sorted(series["steps"])
    assert abs(series["values"][-1] - (1.0 + 19_999e-6)) < 1e-12
    assert len(short["steps"]) == 20_000 and short["values"][7] is None and short["values"][12_345] == 100.0
