"""The whole ladder fit: run folders → rungs → fit.json + figures, through the API and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cli_runner import run_cli
from glasslab import track
from glasslab.errors import UserError
from glasslab.ladder.approach3 import compute_optimal
from glasslab.ladder.figures import draw_fit
from glasslab.ladder.fit import compute_frontier, fit_ladder, read_fit, rungs_from_fit, write_fit
from glasslab.ladder.predict import CURVE_FRACTIONS
from glasslab.ladder.rungs import Rung
from glasslab.ladder.runs import find_ladder_runs, read_rungs


def true_loss(flops):
    return 1.8 + 300.0 * np.power(flops, -0.15)


def write_rung_runs(lab: Path, rng, noise=0.004, widths=(64, 96, 128, 192, 256)) -> None:
    """Run folders as a finished ladder leaves them: run.json with the planner's fields, evals in
    metrics.db every 100 steps, result.json with the final eval loss."""
    for i, width in enumerate(widths):
        flops = 1e15 * 3.0**i
        steps = 1000
        for seed in range(3 if i < 2 else 2):
            run_dir = lab / f"rung-d{width}-s{seed}"
            extra = {"role": "rung", "ladder": "tiny", "rung": f"d{width}", "seed": seed,
                     "size_name": f"{width}K-A{width}K", "params_active": 1000.0 * width,
                     "flops": flops, "steps": steps, "batch_size": 10 * width, "seq_len": 2,
                     "tokens": steps * 10 * width * 2}
            run = track.init(run_dir, {"model": {"d_model": width, "vocab_size": 32}}, record_extra=extra)
            offset = noise * rng.standard_normal()  # a seed's offset persists along its run
            for step in range(100, steps + 1, 100):
                loss = float(true_loss(flops * step / steps) * np.exp(offset))
                run.log({"eval/macro/loss": loss}, step=step)
            run.finish()
            final = float(true_loss(flops) * np.exp(offset))
            (run_dir / "result.json").write_text(json.dumps({"eval/macro/loss": final}))


def test_rungs_read_from_run_folders_fit_and_round_trip(tmp_path):
    write_rung_runs(tmp_path, np.random.default_rng(0))
    run_dirs = find_ladder_runs(tmp_path, "tiny")
    assert len(run_dirs) == 12
    rungs = read_rungs(run_dirs)
    assert [r.name for r in rungs] == ["d64", "d96", "d128", "d192", "d256"]
    assert [len(r.losses) for r in rungs] == [3, 3, 2, 2, 2]
    assert sorted(rungs[0].partial) == [f for f in CURVE_FRACTIONS[:-1] if f >= 0.1]  # first eval at 10%

    fit = fit_ladder(rungs, ladder="tiny", target_flops=1e18, L_inf=1.8, sweep=(1.7, 1.9), num_bootstrap=300)
    assert fit["prediction"]["lo"] < true_loss(1e18) < fit["prediction"]["hi"]
    assert fit["prediction"]["point"] == pytest.approx(true_loss(1e18), rel=0.01)
    assert [c["fraction"] for c in fit["curve"]] == [f for f in CURVE_FRACTIONS if f >= 0.1]
    assert abs(fit["backtest"]["last"]["rel_error_pct"]) < 1.0
    assert fit["backtest"]["last"]["held_out"] == "d256"
    assert not fit["approach3"]["fitted"] and "isoFLOP" in fit["approach3"]["reason"]
    assert [row["L_inf"] for row in fit["sweep_table"]] == [1.7, 1.9]

    path = write_fit(tmp_path / "fit" / "fit.json", fit)
    again = read_fit(path)
    assert again["prediction"] == fit["prediction"]
    assert again["rungs"][0]["run_ids"] == ["rung-d64-s0", "rung-d64-s1", "rung-d64-s2"]
    assert [r.losses for r in rungs_from_fit(again)] == [r.losses for r in rungs]
    assert not list((tmp_path / "fit").glob(".fit-*"))  # no temp file left behind

    png, svg = draw_fit(again, tmp_path / "fit", hero_losses=[(1e17, 2.7), (1e18, 2.4)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert "<svg" in svg.read_text()[:500]


def test_an_isoflop_budget_is_its_total_compute_not_the_laws():
    """Sizes of one budget spend the same FLOPs but different shares in the LM head: one budget each."""
    rungs = [Rung(f"C{budget:.0e}-d{width}", budget * (1 - head), (loss,), total_flops=budget)
             for budget, losses in ((1e12, (3.3, 3.2, 3.25)), (4e12, (3.0, 2.9, 2.95)))
             for (width, head), loss in zip(((24, 0.35), (32, 0.28), (48, 0.2)), losses, strict=True)]
    assert [r.name for r in compute_frontier(rungs)] == ["C1e+12-d32", "C4e+12-d32"]


def test_isoflop_ladder_fits_approach3_and_frontier():
    rng = np.random.default_rng(1)
    rungs = []
    for budget in np.geomspace(1e17, 1e19, 4):
        for n in np.geomspace(3e6, 3e7, 4) * (budget / 1e17) ** 0.5:
            d = budget / (6 * n)
            loss = 1.7 + 400 / n**0.34 + 1200 / d**0.3
            rungs.append(Rung(f"C{budget:.0e}-N{n:.2g}", budget * (1 + 0.001 * len(rungs) % 3), tuple(
                loss * np.exp(0.003 * rng.standard_normal(2))), params_active=n, tokens=d))
    fit = fit_ladder(rungs, ladder="iso", target_flops=1e20, L_inf=None, num_bootstrap=100,
                     target_size=(1e9, 2e10))
    a3 = fit["approach3"]
    assert a3["fitted"]
    assert a3["params"]["E"] == pytest.approx(1.7, rel=0.1)
    assert a3["compute_optimal"]["flops_per_param_token"] == pytest.approx(6.0, rel=0.01)
    assert len(fit["law"]["fitted_on"]) == 4  # L(C) sees the best size of each budget
    # Intervals from the bootstrap's refits: the optimum's tokens per parameter and a run's loss; the gate's verdict.
    n_true, d_true = compute_optimal(400, 0.34, 1200, 0.3, 1e20)
    low, high = a3["compute_optimal"]["tokens_per_param_interval"]
    assert low < a3["compute_optimal"]["tokens_per_param"] < high
    assert a3["compute_optimal"]["tokens_per_param"] == pytest.approx(d_true / n_true, rel=0.5)  # 10x beyond
    target = a3["target"]
    assert target["lo"] < target["point"] < target["hi"]
    assert target["lo"] < 1.7 + 400 / 1e9**0.34 + 1200 / 2e10**0.3 < target["hi"]
    assert a3["gate"]["registered"], a3["gate"]["reasons"]
    assert a3["noise"]["sigma"] < 0.01


def test_read_rungs_rejects_a_run_the_planner_did_not_make(tmp_path):
    run = track.init(tmp_path / "stray", {"x": 1})
    run.finish()
    with pytest.raises(UserError, match="missing rung, params_active, flops, steps"):
        read_rungs([tmp_path / "stray"])


def test_cli_fit_writes_fit_json_and_figures(tmp_path):
    write_rung_runs(tmp_path / "lab", np.random.default_rng(2))
    out = tmp_path / "out"
    done = run_cli("ladder", "fit", "--lab", str(tmp_path / "lab"), "--ladder", "tiny", "--L-inf", "1.8",
                   "--sweep", "1.7", "1.9", "--target-flops", "1e18", "--bootstrap", "200", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "prediction at 1e+18 FLOPs" in done.stdout and "back-test" in done.stdout
    fit = json.loads((out / "fit.json").read_text())
    assert fit["L_inf"] == {"mode": "pinned", "value": 1.8, "sweep": [1.7, 1.9],
                            "prior": {"kind": "uniform", "low": 1.7, "high": 1.9, "source": "sweep span"},
                            "text": "pinned by the user: L∞ = 1.8 (its interval spread over 1.70–1.90)"}
    assert (out / "ladder.png").is_file() and (out / "ladder.svg").is_file()


def test_cli_fit_bad_input_is_one_line(tmp_path, capsys):
    from glasslab.cli import main

    write_rung_runs(tmp_path / "lab", np.random.default_rng(3), widths=(64, 96))
    assert main(["ladder", "fit", "--lab", str(tmp_path / "lab"), "--L-inf", "free"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "2 rungs (d64, d96)" in err
    assert main(["ladder", "fit", "--lab", str(tmp_path / "lab"), "--L-inf", "lots"]) == 2
    assert "--L-inf='lots'" in capsys.readouterr().err


def test_cli_fit_predicts_the_spec_hero(tmp_path):
    write_rung_runs(tmp_path / "lab", np.random.default_rng(4))
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: tiny\nhero_width: 256\n")
    out = tmp_path / "out"
    from glasslab.cli import main
    from glasslab.ladder.plan import LadderSpec, plan_ladder

    argv = ["ladder", "fit", "--lab", str(tmp_path / "lab"), "--spec", str(spec), "--L-inf", "free",
            "--bootstrap", "100", "--out", str(out)]
    assert main(argv) == 0

    fit = json.loads((out / "fit.json").read_text())
    assert fit["ladder"] == "tiny" and fit["L_inf"]["mode"] == "free"
    assert fit["prediction"]["flops"] == pytest.approx(plan_ladder(LadderSpec(hero_width=256)).hero.law_flops)


def test_unfinished_rung_run_is_refused(tmp_path):
    extra = {"role": "rung", "ladder": "tiny", "rung": "d64", "seed": 0, "params_active": 1e5, "flops": 1e15,
             "steps": 1000, "batch_size": 4, "seq_len": 64, "tokens": 1000 * 4 * 64}
    run = track.init(tmp_path / "r", {"x": 1}, record_extra=extra)
    run.log({"eval/macro/loss": 3.5}, step=500)
    run.finish()
    with pytest.raises(UserError, match="has not finished \\(last eval at step 500 of 1000\\)"):
        read_rungs([tmp_path / "r"])


def test_seeds_of_two_recipes_are_not_pooled_into_one_rung(tmp_path):
    """Two recipes trained under one ladder name in one lab: pooling them would fit a blend of both."""
    extra = {"role": "rung", "ladder": "tiny", "rung": "d64", "params_active": 1e5, "flops": 1e15, "steps": 100,
             "batch_size": 4, "seq_len": 64, "tokens": 100 * 4 * 64}
    for seed, weights in ((0, {"code": 0.5}), (1, {"code": 0.5}), (2, {"code": 0.75})):
        cfg = {"data": {"seed": seed, "mixture": {"weights": weights}}, "train": {"seed": seed},
               "model": {"vocab_size": 32}}
        run = track.init(tmp_path / f"s{seed}", cfg, record_extra={**extra, "seed": seed})
        run.finish()
        (tmp_path / f"s{seed}" / "result.json").write_text(json.dumps({"eval/macro/loss": 3.0}))
    (rung,) = read_rungs([tmp_path / "s0", tmp_path / "s1"])
    assert len(rung.losses) == 2
    with pytest.raises(UserError, match=r"rung d64: s0 and s2 differ in more than the seed "
                                        r"\(data.mixture.weights.code\)"):
        read_rungs([tmp_path / "s0", tmp_path / "s1", tmp_path / "s2"])


def test_cli_fits_a_published_points_file_with_approach_3(tmp_path, shared_data):
    """Chinchilla's 245 runs (flops, params, loss; tokens from C = 6ND) refit from the command line."""
    lab = tmp_path / "lab"
    done = run_cli("ladder", "fit", str(shared_data / "chinchilla_points.csv"), "--L-inf", "1.8",
                   "--target-flops", "5.76e23", "--bootstrap", "100", "--lab", str(lab))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no tokens column; tokens taken as flops / (6 · params)" in done.stderr
    out = done.stdout
    assert "L(C) = L_inf + A * C^(-alpha)" in out and "prediction at 5.76e+23 FLOPs" in out and "interval [" in out
    (folder,) = lab.glob("chinchilla_points-fit-*")
    fit = json.loads((folder / "fit.json").read_text())
    assert len(fit["rungs"]) == 245 and fit["prediction"]["flops"] == 5.76e23
    assert fit["prediction"]["lo"] < fit["prediction"]["point"] < fit["prediction"]["hi"]
    a3 = fit["approach3"]
    assert a3["fitted"] and "approach 3" in out and "compute-optimal" in out
    # Epoch AI's refit of these points: E = 1.82, alpha = 0.35 (they drop the 5 worst points; we keep them).
    assert a3["params"]["E"] == pytest.approx(1.82, abs=0.15) and a3["params"]["alpha"] == pytest.approx(0.35, abs=0.05)
    assert (folder / "step.json").is_file() and (folder / "ladder.png").is_file()


def test_cli_fits_points_given_as_json_records_like_run_folders(tmp_path, capsys):
    from glasslab.cli import main

    write_rung_runs(tmp_path / "lab", np.random.default_rng(5))
    rungs = read_rungs(find_ladder_runs(tmp_path / "lab", "tiny"))
    records = [{"flops": r.flops, "loss": loss, "seed": seed, "note": "x"}
               for r in rungs for seed, loss in enumerate(r.losses)]
    (tmp_path / "points.json").write_text(json.dumps(records))
    argv = ["ladder", "fit", str(tmp_path / "points.json"), "--L-inf", "1.8", "--target-flops", "1e18",
            "--bootstrap", "100", "--lab", str(tmp_path / "lab")]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "columns left out: note" in captured.err and "prediction at 1e+18 FLOPs" in captured.out
    (folder,) = (tmp_path / "lab").glob("points-fit-*")
    from_points = json.loads((folder / "fit.json").read_text())
    assert [len(r["losses"]) for r in from_points["rungs"]] == [3, 3, 2, 2, 2]  # seeds of a rung pooled
    assert from_points["prediction"]["point"] == pytest.approx(true_loss(1e18), rel=0.01)
    assert main(argv) == 0 and "cached: " in capsys.readouterr().out  # the same points again: the same step

    bad = [("flops,loss\n1e15,3.1\n2e15,-1\n", "points.csv: line 3: loss='-1': expected a finite positive number"),
           ("flops,seed\n1e15,0\n", "points.csv: no loss column"),
           ("flops,loss,params\n1e15,3.1,1e6\n2e15,3.0,\n", "points.csv: line 3: params is empty"),
           ("flops,loss,seed\n1e15,3.1,0\n1e15,3.0,0\n", "seed repeated")]
    for text, expected in bad:
        (tmp_path / "points.csv").write_text(text)
        assert main(["ladder", "fit", str(tmp_path / "points.csv"), "--L-inf", "1.8",
                     "--lab", str(tmp_path / "lab")]) == 2
        err = capsys.readouterr().err
        assert expected in err and err.count("\n") == 1, err
