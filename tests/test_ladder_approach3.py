"""Chinchilla approach 3 through the end-point fitter: the published Chinchilla points, synthetic recovery,
compute-optimal sizes, the gate's verdict on the record."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from glasslab.ladder.approach3 import approach3_record, compute_optimal, identifiable
from glasslab.ladder.rungs import Rung

# Epoch AI's fit (Besiroglu et al. 2024, Table 1) with its standard errors, from the data's README.
EPOCH = {"E": (1.817, 0.026), "A": (482.0, 124.5), "B": (2085.4, 1293.3), "alpha": (0.348, 0.015),
         "beta": (0.366, 0.021)}
TRUTH = {"E": 1.7, "A": 400.0, "alpha": 0.34, "B": 1200.0, "beta": 0.30}


def chinchilla_points() -> Path:
    for folder in (Path(__file__).resolve().parents[2] / "shared" / "data", Path("/work/shared/data")):
        if (folder / "chinchilla_points.csv").is_file():
            return folder / "chinchilla_points.csv"
    pytest.skip("chinchilla_points.csv not found in ../shared/data or /work/shared/data")


def chinchilla_rungs(drop_outliers: bool) -> list[Rung]:
    """The published points as rungs (tokens from C = 6ND); ``drop_outliers``: as Epoch did, the five highest
    losses left out."""
    with open(chinchilla_points()) as f:
        rows = sorted(csv.DictReader(f), key=lambda r: float(r["loss"]))
    assert len(rows) == 245
    return [Rung(f"p{i}", float(r["flops"]), (float(r["loss"]),), params_active=float(r["params"]),
                 tokens=float(r["flops"]) / (6 * float(r["params"])))
            for i, r in enumerate(rows[:-5] if drop_outliers else rows)]


def truth_loss(n, d):
    return TRUTH["E"] + TRUTH["A"] / n ** TRUTH["alpha"] + TRUTH["B"] / d ** TRUTH["beta"]


def test_chinchilla_points_reproduce_epoch_estimates_within_one_standard_error():
    rungs = chinchilla_rungs(drop_outliers=True)
    start = time.perf_counter()
    a3 = approach3_record(rungs, 5.76e23, (70e9, 1.4e12), num_bootstrap=100)
    seconds = time.perf_counter() - start
    for name, (published, se) in EPOCH.items():
        assert abs(a3["params"][name] - published) <= se, (name, a3["params"][name], published, se)
        # The family bootstrap's standard errors are of the same size as Epoch's (within a factor of 2).
        assert se / 2 < a3["param_se"][name] < 2 * se, (name, a3["param_se"][name], se)
    # Chinchilla itself (70B parameters, 1.4T tokens) is predicted inside the gate's bounds, and registers.
    assert a3["gate"]["registered"], a3["gate"]["reasons"]
    assert a3["target"]["lo"] < a3["target"]["point"] < a3["target"]["hi"]
    assert seconds < 30


def test_chinchilla_points_with_their_outliers_are_refused_by_the_objectives_check():
    """Kept, the five points Epoch dropped pull least squares away from the Huber fit: the gate says so."""
    gate = approach3_record(chinchilla_rungs(drop_outliers=False), 5.76e23, None, num_bootstrap=100)["gate"]
    assert not gate["registered"] and [r.split(":")[0] for r in gate["reasons"]] == ["objectives agree"]


def synthetic_isoflop_rungs(noise: float, seeds: int = 1) -> list[Rung]:
    """Five budgets, seven sizes each around the true optimum (a factor 16 either way), one loss per seed."""
    rng = np.random.default_rng(0)
    rungs = []
    for budget in np.geomspace(1e18, 1e21, 5):
        n_center, _ = compute_optimal(TRUTH["A"], TRUTH["alpha"], TRUTH["B"], TRUTH["beta"], budget)
        for n in n_center * np.geomspace(0.25, 4, 7):
            d = budget / (6 * n)
            rungs.append(Rung(f"C{budget:.0e}-N{n:.3g}", budget, tuple(truth_loss(n, d) * np.exp(
                noise * rng.standard_normal(seeds))), params_active=float(n), tokens=float(d)))
    return rungs


def test_synthetic_isoflop_points_are_fitted_back():
    # 1% run noise, two seeds: at 0.2-0.5% the bootstrap's exponents, on a grid 13% apart, put the floor's
    # interval beside the fit's floor and the gate refuses (docs/LOG.md, 2026-12-05, issue 40).
    a3 = approach3_record(synthetic_isoflop_rungs(0.01, seeds=2), 1e22, None, num_bootstrap=50)
    assert a3["fitted"] and a3["gate"]["registered"], a3["gate"]["reasons"]
    p = a3["params"]
    assert p["E"] == pytest.approx(TRUTH["E"], rel=0.05)
    assert p["alpha"] == pytest.approx(TRUTH["alpha"], rel=0.15)
    assert p["beta"] == pytest.approx(TRUTH["beta"], rel=0.15)
    n_true, _ = compute_optimal(TRUTH["A"], TRUTH["alpha"], TRUTH["B"], TRUTH["beta"], 1e22)
    assert a3["compute_optimal"]["params_active"] == pytest.approx(n_true, rel=0.5)  # the optimum is flat
    low, high = a3["compute_optimal"]["tokens_per_param_interval"]
    assert low < a3["compute_optimal"]["tokens_per_param"] < high


def test_compute_optimal_matches_a_numerical_minimum_for_one_law_and_for_replicates():
    budget = 1e23
    n_opt, d_opt = compute_optimal(480.0, 0.35, 2000.0, 0.37, budget, flops_per_param_token=6.0)
    assert 6 * n_opt * d_opt == pytest.approx(budget)
    numeric = minimize_scalar(lambda log_n: 480.0 / np.exp(log_n) ** 0.35 + 2000.0 / (budget / (6 * np.exp(log_n)))
                              ** 0.37, bounds=(np.log(1e6), np.log(1e13)), method="bounded", options={"xatol": 1e-9})
    assert n_opt == pytest.approx(np.exp(numeric.x), rel=1e-3)
    n_B, _ = compute_optimal(np.array([480.0, 480.0, 0.0]), np.array([0.35, 0.35, 0.35]), np.array([2000.0] * 3),
                             np.array([0.37] * 3), budget)
    assert n_B[0] == pytest.approx(n_opt) and n_B[2] == 0  # a replicate without a size term has no optimum


def test_fixed_tokens_per_param_is_not_identifiable_and_too_few_runs_are_said():
    params = np.geomspace(1e6, 1e8, 6)
    assert not identifiable(params, 20 * params) and identifiable(params, 20 * params[::-1])
    few = [Rung(f"r{i}", 6 * n * d, (truth_loss(n, d),), params_active=n, tokens=d)
           for i, (n, d) in enumerate(((1e6, 1e8), (2e6, 1e8), (3e6, 2e8), (4e6, 3e8)))]
    record = approach3_record(few, 1e20, None)
    assert not record["fitted"] and record["reason"].startswith("4 runs of 4 sizes")
