"""Chinchilla approach 3: ``L(N, D) = E + A/N^α + B/D^β`` fitted to (parameters, tokens, loss) points.

The fit follows Hoffmann et al. 2022 as corrected by Besiroglu et al. 2024 (Epoch AI): minimise the
*sum* (not the mean, which lets L-BFGS stop early) of Huber losses (δ = 1e-3) between the predicted
and observed log loss, with the prediction written as a log-sum-exp so the optimiser works on
``a = log A, b = log B, e = log E``; L-BFGS runs from the best points of a grid of starts. Standard
errors come from a bootstrap over points (approach 3 has many points, unlike the four rungs of a
compute ladder, so resampling them is sound); the refits are kept, so anything derived from the law
(the compute-optimal tokens per parameter, a predicted loss) gets an interval from them too.

On a ladder with a fixed tokens-per-parameter rule D ∝ N, so N and D cannot be told apart and
approach 3 is not identifiable; :func:`identifiable` says so and the ladder fits only ``L(C)``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize

from glasslab.errors import UserError
from glasslab.ladder.blas_threads import single_blas_thread

HUBER_DELTA = 1e-3
NUM_FREE_PARAMS = 5
# The start grid of Hoffmann et al. (Appendix D.2) as Epoch AI used it: a, b = log A, log B; e = log E.
START_GRID = {
    "a": np.arange(0.0, 30.0, 5.0),
    "b": np.arange(0.0, 30.0, 5.0),
    "e": np.arange(-1.0, 1.5, 0.5),
    "alpha": np.arange(0.0, 2.5, 0.5),
    "beta": np.arange(0.0, 2.5, 0.5),
}
NUM_OPTIMISED_STARTS = 64
"""L-BFGS runs from this many of the grid's starts with the lowest objective (all 4,500 cost minutes)."""
BOUNDS = ((-10.0, 100.0), (-10.0, 100.0), (-10.0, 10.0), (0.0, 10.0), (0.0, 10.0))
"""Box for (a, b, e, alpha, beta), far outside any fitted ladder's values: on points that barely
constrain a term (a handful of tiny isoFLOP runs) L-BFGS otherwise walks log A past what exp can hold."""


@dataclass(frozen=True)
class Approach3Law:
    """``L(N, D) = E + A / N^alpha + B / D^beta``; N parameters, D tokens, L nats per token."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    param_se: dict[str, float] = field(default_factory=dict)
    objective: float = math.nan
    bootstrap: tuple[tuple[float, float, float, float, float], ...] = ()
    """(E, A, B, alpha, beta) refitted on resampled points: intervals of anything derived from the law."""
    residual_sigma: float = 0.0
    """Standard deviation of the fitted points' log-loss residuals (one run's scatter about the law)."""

    form = "L(N,D) = E + A / N^alpha + B / D^beta"

    def __call__(self, params: float | np.ndarray, tokens: float | np.ndarray) -> float | np.ndarray:
        return self.E + self.A / np.power(params, self.alpha) + self.B / np.power(tokens, self.beta)

    @property
    def params(self) -> dict[str, float]:
        return {"E": self.E, "A": self.A, "B": self.B, "alpha": self.alpha, "beta": self.beta}

    def replicates(self) -> list[Approach3Law]:
        """The bootstrap refits as laws (empty when the fit skipped the bootstrap)."""
        return [Approach3Law(*values) for values in self.bootstrap]

    def predict_run(self, params: float, tokens: float, *, level: float = 0.9,
                    seed: int = 0) -> tuple[float, float, float]:
        """Loss (nats/token) of one run of ``params`` parameters on ``tokens`` tokens: the point and a
        ``level`` interval from the bootstrap refits plus the residual scatter of one run."""
        point = float(self(params, tokens))
        if not self.bootstrap:
            return point, math.nan, math.nan
        replicate_B = np.array([law(params, tokens) for law in self.replicates()], dtype=float)
        rng = np.random.default_rng(seed)
        replicate_B *= np.exp(self.residual_sigma * rng.standard_normal(len(replicate_B)))
        return (point, *interval(replicate_B, level))

    def compute_optimal(self, flops: float, flops_per_param_token: float = 6.0) -> tuple[float, float]:
        """The (N, D) minimising loss at ``flops`` FLOPs when C = k·N·D (k = 6 for dense training).

        Closed form: N = G·(C/k)^(β/(α+β)) with G = (αA / (βB))^(1/(α+β)), and D = C / (k·N).
        """
        a, b = self.alpha, self.beta
        scale = (a * self.A / (b * self.B)) ** (1.0 / (a + b))
        params = scale * (flops / flops_per_param_token) ** (b / (a + b))
        return params, flops / (flops_per_param_token * params)


def identifiable(params_n: Sequence[float], tokens_n: Sequence[float]) -> bool:
    """False when tokens-per-parameter is the same at every point (D ∝ N): approach 3 cannot separate
    the N and D terms, so only ``L(C)`` can be fitted."""
    ratio_n = np.log(np.asarray(tokens_n, dtype=float)) - np.log(np.asarray(params_n, dtype=float))
    return len(ratio_n) > 0 and float(np.ptp(ratio_n)) > 0.05


def _logsumexp(terms: np.ndarray) -> np.ndarray:
    """log Σ exp over the first axis, shifted by the maximum (scipy's version costs 10x more per call)."""
    top = terms.max(axis=0)
    return top + np.log(np.exp(terms - top).sum(axis=0))


def huber_objective(theta: np.ndarray, log_n: np.ndarray, log_d: np.ndarray,
                    log_loss: np.ndarray) -> tuple[float, np.ndarray]:
    """Summed Huber loss of the log-loss residuals and its gradient; theta = (a, b, e, alpha, beta)."""
    a, b, e, alpha, beta = theta
    terms_3n = np.stack([a - alpha * log_n, b - beta * log_d, np.full_like(log_n, e)])
    pred_n = _logsumexp(terms_3n)
    resid_n = pred_n - log_loss
    abs_n = np.abs(resid_n)
    value = np.where(abs_n <= HUBER_DELTA, 0.5 * resid_n**2, HUBER_DELTA * (abs_n - 0.5 * HUBER_DELTA)).sum()
    psi_n = np.clip(resid_n, -HUBER_DELTA, HUBER_DELTA)
    share_3n = np.exp(terms_3n - pred_n)
    grad = np.array([
        (psi_n * share_3n[0]).sum(),
        (psi_n * share_3n[1]).sum(),
        (psi_n * share_3n[2]).sum(),
        -(psi_n * share_3n[0] * log_n).sum(),
        -(psi_n * share_3n[1] * log_d).sum(),
    ])
    return float(value), grad


def _grid_objectives(starts_S5: np.ndarray, log_n: np.ndarray, log_d: np.ndarray,
                     log_loss: np.ndarray) -> np.ndarray:
    a, b, e, alpha, beta = (starts_S5[:, i : i + 1] for i in range(5))
    terms = np.stack([a - alpha * log_n, b - beta * log_d, np.broadcast_to(e, (len(a), len(log_n)))])
    resid_Sn = _logsumexp(terms) - log_loss
    abs_Sn = np.abs(resid_Sn)
    huber = np.where(abs_Sn <= HUBER_DELTA, 0.5 * resid_Sn**2, HUBER_DELTA * (abs_Sn - 0.5 * HUBER_DELTA))
    return huber.sum(axis=1)


def _optimise(starts: Sequence[np.ndarray], log_n: np.ndarray, log_d: np.ndarray,
              log_loss: np.ndarray) -> tuple[np.ndarray, float]:
    best_theta, best_value = starts[0], math.inf
    with single_blas_thread():
        for start in starts:
            result = minimize(huber_objective, start, args=(log_n, log_d, log_loss), jac=True,
                              method="L-BFGS-B", bounds=BOUNDS,
                              options={"maxiter": 5000, "ftol": 1e-15, "gtol": 1e-12})
            if result.fun < best_value:
                best_theta, best_value = result.x, float(result.fun)
    return best_theta, best_value


def _to_law(theta: np.ndarray, value: float, param_se: dict[str, float]) -> Approach3Law:
    a, b, e, alpha, beta = (float(x) for x in theta)
    return Approach3Law(math.exp(e), math.exp(a), math.exp(b), alpha, beta, param_se, value)


def fit_approach3(params_n: Sequence[float], tokens_n: Sequence[float], loss_n: Sequence[float],
                  *, names: Sequence[str] | None = None, num_bootstrap: int = 100,
                  seed: int = 0) -> Approach3Law:
    """Fit ``L(N, D)`` to points (N parameters, D tokens, loss in nats); standard errors by bootstrap.

    ``names`` label the points in error messages (rung names). ``num_bootstrap=0`` skips the errors.
    """
    names = list(names) if names is not None else [f"point {i}" for i in range(len(loss_n))]
    for name, n, d, loss in zip(names, params_n, tokens_n, loss_n, strict=True):
        for label, value in (("loss", loss), ("parameters", n), ("tokens", d)):
            if not (math.isfinite(value) and value > 0):
                raise UserError(f"rung {name}: {label} {value!r} is not a finite positive number")
    if len(loss_n) < NUM_FREE_PARAMS:
        raise UserError(f"{len(loss_n)} points for approach 3 (5 free parameters): expected at least 5")
    if not identifiable(params_n, tokens_n):
        raise UserError("approach 3: every point has the same tokens per parameter, so N and D cannot be "
                        "told apart; expected an isoFLOP ladder (several sizes per compute budget)")
    log_n, log_d = np.log(np.asarray(params_n, float)), np.log(np.asarray(tokens_n, float))
    log_loss = np.log(np.asarray(loss_n, float))
    starts_S5 = np.array(list(itertools.product(*START_GRID.values())))
    order = np.argsort(_grid_objectives(starts_S5, log_n, log_d, log_loss))
    theta, value = _optimise(list(starts_S5[order[:NUM_OPTIMISED_STARTS]]), log_n, log_d, log_loss)
    law = _to_law(theta, value, {})
    residual_sigma = float(np.std(np.log(law(np.exp(log_n), np.exp(log_d))) - log_loss, ddof=0))
    draws_B5 = _bootstrap(theta, log_n, log_d, log_loss, num_bootstrap, seed) if num_bootstrap else np.zeros((0, 5))
    names = ("E", "A", "B", "alpha", "beta")
    param_se = {name: float(np.std(draws_B5[:, i], ddof=1)) for i, name in enumerate(names)} if num_bootstrap else {}
    return dataclasses.replace(law, param_se=param_se, bootstrap=tuple(tuple(map(float, row)) for row in draws_B5),
                               residual_sigma=residual_sigma)


def _bootstrap(theta: np.ndarray, log_n: np.ndarray, log_d: np.ndarray, log_loss: np.ndarray,
               num_bootstrap: int, seed: int) -> np.ndarray:
    """(E, A, B, alpha, beta) of refits on points resampled with replacement, one row per replicate."""
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(num_bootstrap):
        idx = rng.integers(0, len(log_loss), len(log_loss))
        refit, value = _optimise([theta], log_n[idx], log_d[idx], log_loss[idx])
        draws.append(list(_to_law(refit, value, {}).params.values()))
    return np.array(draws)


def interval(values: Sequence[float], level: float = 0.9) -> tuple[float, float]:
    """The central ``level`` interval of bootstrap values (of anything derived from the law)."""
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(np.asarray(values, dtype=float), [tail, 100 - tail])
    return float(low), float(high)
