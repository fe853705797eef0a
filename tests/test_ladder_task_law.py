"""Task laws on a synthetic ladder with known truth: compute → task bpb → accuracy, the hero's interval,
the back-test, fit.json's ``tasks``, and the registry entries for the hero's task predictions."""

from __future__ import annotations

import numpy as np
import pytest

from glasslab import track
from glasslab.errors import UserError
from glasslab.lab.registry import predictions, register
from glasslab.ladder.fit import fit_ladder
from glasslab.ladder.rungs import Rung
from glasslab.ladder.task_law import fit_sigmoid, fit_task_laws, read_task_points, registry_entries, sigmoid

CHANCE, K, B0 = 0.25, 2.0, 3.5
RUNGS = [("d16", 1e10, 2), ("d24", 3e10, 2), ("d32", 1e11, 1), ("d48", 3e11, 1), ("d64", 1e12, 1)]
HERO_FLOPS = 5e12


def true_bpb(flops):
    return 1.0 + 60.0 * np.power(flops, -0.12)


def _write_ladder(root, rng, noise=0.01):
    """Rung runs as real run stores: run.json says the task and the plan; metrics at 25/50/75/100%."""
    dirs = []
    for rung, flops, seeds in RUNGS:
        for seed in range(seeds):
            run_dir = root / f"{rung}-s{seed}"
            extra = {"role": "rung", "rung": rung, "flops": flops, "steps": 100, "tokens": flops / 1e6,
                     "tasks": {"next_word_code": {"chance": CHANCE, "items": 600, "metric": "acc", "sha256": "ab"}}}
            run = track.init(run_dir, {"model": {"vocab_size": 32, "d_model": 16}}, record_extra=extra)
            for step in (25, 50, 75, 100):
                bpb = true_bpb(flops * step / 100) * np.exp(noise * rng.standard_normal())
                acc = sigmoid(bpb, K, B0, CHANCE) + 0.01 * rng.standard_normal()
                run.log({"eval/task/next_word_code/bpb": bpb, "eval/task/next_word_code/acc": acc,
                         "eval/macro/loss": 3.0}, step)
            run.finish()
            dirs.append(run_dir)
    return dirs


def test_the_laws_recover_a_known_ladder_and_predict_the_hero_inside_the_interval(tmp_path):
    rng = np.random.default_rng(0)
    series = read_task_points(_write_ladder(tmp_path, rng))
    (task,) = series.values()
    assert task.name == "next_word_code" and task.chance == CHANCE and task.items == 600
    assert len(task.points) == 7 * 4 and sum(p.final for p in task.points) == 7
    # Compute outside the LM head: 6 · vocabulary 32 · width 16 FLOPs for each of the 1e-6 · flops tokens.
    law_flops = 1e10 * (1 - 6 * 32 * 16 / 1e6)
    assert sorted({p.flops for p in task.points if p.rung == "d16"}) == pytest.approx(
        [law_flops * f for f in (0.25, 0.5, 0.75, 1.0)])

    out = fit_task_laws(series, HERO_FLOPS, num_bootstrap=400)
    law = out["by_task"]["next_word_code"]
    truth_bpb = true_bpb(HERO_FLOPS)
    truth_acc = sigmoid(truth_bpb, K, B0, CHANCE)
    assert law["bpb"]["lo"] <= truth_bpb <= law["bpb"]["hi"]
    assert law["bpb"]["point"] == pytest.approx(truth_bpb, rel=0.03)
    assert law["sigmoid"]["k"] == pytest.approx(K, rel=0.25) and law["sigmoid"]["b0"] == pytest.approx(B0, abs=0.05)
    acc = law["acc"]
    assert acc["lo"] < acc["point"] < acc["hi"] and acc["lo"] <= truth_acc <= acc["hi"]
    assert acc["hi"] - acc["lo"] < 0.15
    backtest = law["backtest"]
    assert backtest["held_out"] == "d64" and abs(backtest["error_points"]) < 8 and backtest["covered"], backtest
    assert out["backtest_mean_abs_error_points"] == pytest.approx(abs(backtest["error_points"]))
    assert out["macro"]["point"] == acc["point"] and out["macro"]["chance"] == CHANCE

    # In fit.json, and as the hero's pre-registrations (the registry refuses other numbers for a name).
    rungs = [Rung(r, f, tuple((2.0 + 30 * f**-0.1) * (1 + 0.01 * i) for i in range(s))) for r, f, s in RUNGS]
    fit = fit_ladder(rungs, ladder="demo", target_flops=HERO_FLOPS, L_inf=1.0, num_bootstrap=200, tasks=series)
    assert fit["tasks"]["by_task"]["next_word_code"]["acc"]["point"] == pytest.approx(acc["point"], abs=0.02)
    entries = registry_entries(fit, target="demo-hero")
    assert [e["name"] for e in entries] == ["demo/hero/task/next_word_code", "demo/hero/task/macro"]
    for entry in entries:
        register(tmp_path / "lab", **entry, source="demo-fit-12345678")
    registered = predictions(tmp_path / "lab")
    assert registered["demo/hero/task/next_word_code"]["metric"] == "eval/task/next_word_code/acc"
    assert registered["demo/hero/task/macro"]["metric"] == "eval/task/macro/acc"
    assert registry_entries({"ladder": "demo", "tasks": None}, target="x") == []
    assert fit_ladder(rungs, ladder="demo", target_flops=HERO_FLOPS, L_inf=1.0, num_bootstrap=50)["tasks"] is None


def test_sigmoid_fit_and_too_few_points():
    bpb = np.linspace(1.5, 3.0, 12)
    k, b0 = fit_sigmoid(bpb, sigmoid(bpb, 2.0, 2.4, 0.5), 0.5)
    assert (k, b0) == (pytest.approx(2.0, rel=1e-3), pytest.approx(2.4, abs=1e-3))
    with pytest.raises(UserError, match="expected at least 3"):
        fit_sigmoid([2.0, 2.1], [0.3, 0.3], 0.25)


def test_a_ladder_too_small_for_a_law_is_skipped_with_the_reason(tmp_path):
    rng = np.random.default_rng(1)
    dirs = _write_ladder(tmp_path, rng)
    small = read_task_points([d for d in dirs if d.name.startswith("d16")])
    out = fit_task_laws(small, HERO_FLOPS, num_bootstrap=50)
    assert out["by_task"] == {} and "next_word_code" in out["skipped"]
