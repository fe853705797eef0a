"""Chinchilla approach 3: the published Chinchilla points, synthetic recovery, compute-optimal sizes."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from glasslab.errors import UserError
from glasslab.ladder.approach3 import Approach3Law, fit_approach3, identifiable

# Epoch AI's fit (Besiroglu et al. 2024, Table 1) with its standard errors, from the data's README.
EPOCH = {"E": (1.817, 0.026), "A": (482.0, 124.5), "B": (2085.4, 1293.3), "alpha": (0.348, 0.015),
         "beta": (0.366, 0.021)}


def chinchilla_points() -> Path:
    for folder in (Path(__file__).resolve().parents[2] / "shared" / "data", Path("/work/shared/data")):
        if (folder / "chinchilla_points.csv").is_file():
            return folder / "chinchilla_points.csv"
    pytest.skip("chinchilla_points.csv not found in ../shared/data or /work/shared/data")


def test_chinchilla_points_reproduce_epoch_estimates_within_one_standard_error():
    with open(chinchilla_points()) as f:
        rows = list(csv.DictReader(f))
    params = np.array([float(r["params"]) for r in rows])
    flops = np.array([float(r["flops"]) for r in rows])
    loss = np.array([float(r["loss"]) for r in rows])
    assert len(rows) == 245
    keep = np.argsort(loss)[:-5]  # as Epoch did: the five highest-loss points are dropped
    tokens = flops / (6 * params)
    start = time.perf_counter()
    law = fit_approach3(params[keep], tokens[keep], loss[keep], num_bootstrap=100)
    seconds = time.perf_counter() - start
    for name, (published, se) in EPOCH.items():
        assert abs(law.params[name] - published) <= se, (name, law.params[name], published, se)
        # Our bootstrap standard errors are of the same size as Epoch's (within a factor of 2).
        assert se / 2 < law.param_se[name] < 2 * se, (name, law.param_se[name], se)
    assert seconds < 30


def test_synthetic_isoflop_points_are_fitted_back():
    truth = Approach3Law(E=1.7, A=400.0, B=1200.0, alpha=0.34, beta=0.30)
    rng = np.random.default_rng(0)
    params, tokens = [], []
    for budget in np.geomspace(1e18, 1e21, 5):
        n_center, _ = truth.compute_optimal(budget)
        for n in n_center * np.geomspace(0.25, 4, 7):
            params.append(n)
            tokens.append(budget / (6 * n))
    loss = truth(np.array(params), np.array(tokens)) * np.exp(0.005 * rng.standard_normal(len(params)))
    law = fit_approach3(params, tokens, loss, num_bootstrap=0)
    assert law.E == pytest.approx(truth.E, rel=0.05)
    assert law.alpha == pytest.approx(truth.alpha, rel=0.15)
    assert law.beta == pytest.approx(truth.beta, rel=0.15)
    for c in (1e19, 1e22):
        n_fit, _ = law.compute_optimal(c)
        n_true, _ = truth.compute_optimal(c)
        assert n_fit == pytest.approx(n_true, rel=0.5)  # the optimum is flat: within a factor of 1.5


def test_compute_optimal_matches_a_numerical_minimum():
    law = Approach3Law(E=1.8, A=480.0, B=2000.0, alpha=0.35, beta=0.37)
    budget = 1e23
    n_opt, d_opt = law.compute_optimal(budget, flops_per_param_token=6.0)
    assert 6 * n_opt * d_opt == pytest.approx(budget)
    numeric = minimize_scalar(lambda log_n: law(np.exp(log_n), budget / (6 * np.exp(log_n))),
                              bounds=(np.log(1e6), np.log(1e13)), method="bounded", options={"xatol": 1e-9})
    assert n_opt == pytest.approx(np.exp(numeric.x), rel=1e-3)


def test_fixed_tokens_per_param_is_not_identifiable():
    params = np.geomspace(1e6, 1e8, 6)
    assert not identifiable(params, 20 * params)
    with pytest.raises(UserError, match="same tokens per parameter"):
        fit_approach3(params, 20 * params, 2 + 1 / np.log(params))


def test_bad_points_name_the_rung():
    with pytest.raises(UserError, match="rung d96: loss -1.0"):
        fit_approach3([1e6, 2e6, 3e6, 4e6, 5e6], [1e8, 1e8, 2e8, 3e8, 1e9], [3, -1.0, 2, 2, 2],
                      names=["d64", "d96", "d128", "d192", "d256"])
    with pytest.raises(UserError, match="4 points for approach 3"):
        fit_approach3([1e6, 2e6, 3e6, 4e6], [1e8, 1e8, 2e8, 3e8], [3, 2.5, 2, 2])
