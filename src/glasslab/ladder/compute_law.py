"""The compute law ``L(C) = L∞ + A·C^(−α)``: loss (nats/token) against training compute (FLOPs).

With ``L∞`` fixed the law is a straight line in ``log(L − L∞)`` against ``log C``, so the fit is a
weighted linear regression in closed form. The weights turn that regression into least squares on
``log L`` (to first order, ``δ log(L − L∞) = δ log L · L/(L − L∞)``) and count each rung's seeds, so a
rung measured three times pulls three times as hard. With ``L∞`` free the same closed form is profiled
over ``L∞`` (a grid, then golden-section refinement), which keeps every fit vectorised: the bootstrap
fits hundreds of replicates in one numpy call instead of hundreds of optimiser runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from glasslab.errors import UserError
from glasslab.ladder.rungs import Rung, check_rungs

GRID_POINTS = 192
"""Points in the coarse profile grid over L∞ ∈ [0, min loss)."""
GOLDEN_STEPS = 40
"""Golden-section steps refining L∞ inside the best grid cell (shrinks it by ~1e-8)."""
MIN_GAP = 1e-9
"""Smallest L − L∞ (nats) the log transform accepts; a replicate below it counts as a failed fit."""


@dataclass(frozen=True)
class ComputeLaw:
    """``L(C) = L_inf + A · C^(−alpha)`` with C in FLOPs and L in nats per token."""

    L_inf: float
    A: float
    alpha: float
    L_inf_mode: Literal["free", "pinned"] = "pinned"

    def __call__(self, flops: float | np.ndarray) -> float | np.ndarray:
        return self.L_inf + self.A * np.power(flops, -self.alpha)

    @property
    def form(self) -> str:
        return "L(C) = L_inf + A * C^(-alpha)"

    @property
    def params(self) -> dict[str, float]:
        return {"L_inf": self.L_inf, "A": self.A, "alpha": self.alpha}

    @property
    def num_free_params(self) -> int:
        return 3 if self.L_inf_mode == "free" else 2


def fit_compute_law(rungs: Sequence[Rung], L_inf: float | None = None) -> ComputeLaw:
    """Fit the compute law to the rungs' mean losses; ``L_inf=None`` fits the asymptote too.

    Raises a one-line UserError for too few rungs, bad losses, equal compute, or a pinned ``L_inf``
    at or above a rung's loss (the law cannot reach that rung).
    """
    check_rungs(rungs, 3 if L_inf is None else 2)
    log_flops_n = np.log([r.flops for r in rungs])
    loss_n = np.array([r.loss_mean for r in rungs])
    seeds_n = np.array([len(r.losses) for r in rungs], dtype=float)
    if L_inf is not None:
        if not (math.isfinite(L_inf) and L_inf >= 0):
            raise UserError(f"L_inf={L_inf!r}: expected a finite asymptote ≥ 0 nats")
        for rung in rungs:
            if rung.loss_mean <= L_inf:
                raise UserError(f"rung {rung.name}: mean loss {rung.loss_mean:.4g} is not above the pinned "
                                f"L_inf={L_inf:.4g}; expected L_inf below every rung's loss")
    L_inf_B, log_A_B, alpha_B = fit_batch(log_flops_n, loss_n[None, :], seeds_n, L_inf)
    return ComputeLaw(float(L_inf_B[0]), float(np.exp(log_A_B[0])), float(alpha_B[0]),
                      "free" if L_inf is None else "pinned")


def fit_batch(log_flops_n: np.ndarray, loss_Bn: np.ndarray, weight_n: np.ndarray,
              L_inf: float | np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fit B loss vectors at once; returns ``(L_inf_B, log_A_B, alpha_B)`` (NaN where a fit failed).

    ``weight_n`` is each point's weight in the log-loss least squares (its number of seeds). ``L_inf``
    pins the asymptote of every row (a float) or of each row (an array of B values); None fits it.
    """
    if L_inf is not None:
        L_inf_B = np.broadcast_to(np.asarray(L_inf, dtype=float), loss_Bn.shape[:1]).copy()
        log_A_B, alpha_B, _ = _fit_pinned(log_flops_n, loss_Bn, weight_n, L_inf_B)
        return L_inf_B, log_A_B, alpha_B
    L_inf_B = _profile_asymptote(log_flops_n, loss_Bn, weight_n)
    log_A_B, alpha_B, _ = _fit_pinned(log_flops_n, loss_Bn, weight_n, L_inf_B)
    return L_inf_B, log_A_B, alpha_B


def fit_log_gap(rungs: Sequence[Rung], L_inf: float) -> ComputeLaw:
    """The law at asymptote ``L_inf`` by least squares on ``log(L − L∞)`` itself (each seed alike): the second
    objective the registration gate compares with (it weighs the rungs nearest the floor more)."""
    log_flops_n = np.log([r.flops for r in rungs])
    loss_n = np.array([[r.loss_mean for r in rungs]])
    seeds_n = np.array([len(r.losses) for r in rungs], dtype=float)
    log_A_B, alpha_B, _ = _fit_pinned(log_flops_n, loss_n, seeds_n, np.array([L_inf]), objective="log_gap")
    return ComputeLaw(L_inf, float(np.exp(log_A_B[0])), float(alpha_B[0]), "pinned")


def _fit_pinned(log_flops_n: np.ndarray, loss_Bn: np.ndarray, weight_n: np.ndarray, L_inf_B: np.ndarray,
                objective: Literal["log_loss", "log_gap"] = "log_loss") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted regression of log(L − L∞) on log C for each row, weighted to least squares on log L (or on
    log(L − L∞) itself); returns (log_A, alpha, sse_logL)."""
    gap_Bn = loss_Bn - L_inf_B[:, None]
    ok_B = np.all(gap_Bn > MIN_GAP, axis=1)
    gap_Bn = np.where(gap_Bn > MIN_GAP, gap_Bn, MIN_GAP)
    y_Bn = np.log(gap_Bn)
    w_Bn = weight_n[None, :] * ((gap_Bn / loss_Bn) ** 2 if objective == "log_loss" else np.ones_like(gap_Bn))
    sw_B = w_Bn.sum(axis=1)
    x_mean_B = (w_Bn * log_flops_n).sum(axis=1) / sw_B
    y_mean_B = (w_Bn * y_Bn).sum(axis=1) / sw_B
    dx_Bn = log_flops_n[None, :] - x_mean_B[:, None]
    slope_B = (w_Bn * dx_Bn * (y_Bn - y_mean_B[:, None])).sum(axis=1) / (w_Bn * dx_Bn**2).sum(axis=1)
    log_A_B = y_mean_B - slope_B * x_mean_B
    fitted_Bn = L_inf_B[:, None] + np.exp(log_A_B[:, None] + slope_B[:, None] * log_flops_n[None, :])
    sse_B = (weight_n[None, :] * (np.log(loss_Bn) - np.log(fitted_Bn)) ** 2).sum(axis=1)
    nan = np.full_like(sse_B, np.nan)
    return np.where(ok_B, log_A_B, nan), np.where(ok_B, -slope_B, nan), np.where(ok_B, sse_B, np.inf)


def _profile_asymptote(log_flops_n: np.ndarray, loss_Bn: np.ndarray, weight_n: np.ndarray) -> np.ndarray:
    """The L∞ in [0, min loss) minimising each row's log-loss squared error."""
    num_rows = loss_Bn.shape[0]
    upper_B = loss_Bn.min(axis=1) * (1 - 1e-6)
    grid_G = np.linspace(0.0, 1.0, GRID_POINTS)
    sse_BG = np.empty((num_rows, GRID_POINTS))
    for g, t in enumerate(grid_G):
        sse_BG[:, g] = _fit_pinned(log_flops_n, loss_Bn, weight_n, t * upper_B)[2]
    best_B = np.argmin(sse_BG, axis=1)
    lo_B = grid_G[np.maximum(best_B - 1, 0)] * upper_B
    hi_B = grid_G[np.minimum(best_B + 1, GRID_POINTS - 1)] * upper_B
    ratio = (math.sqrt(5) - 1) / 2
    a_B, b_B = hi_B - ratio * (hi_B - lo_B), lo_B + ratio * (hi_B - lo_B)
    fa_B = _fit_pinned(log_flops_n, loss_Bn, weight_n, a_B)[2]
    fb_B = _fit_pinned(log_flops_n, loss_Bn, weight_n, b_B)[2]
    for _ in range(GOLDEN_STEPS):
        left_B = fa_B < fb_B  # minimum lies in [lo, b]
        hi_B = np.where(left_B, b_B, hi_B)
        lo_B = np.where(left_B, lo_B, a_B)
        new_a_B, new_b_B = hi_B - ratio * (hi_B - lo_B), lo_B + ratio * (hi_B - lo_B)
        a_B, b_B = np.where(left_B, new_a_B, b_B), np.where(left_B, a_B, new_b_B)
        fa_new_B = _fit_pinned(log_flops_n, loss_Bn, weight_n, a_B)[2]
        fb_new_B = _fit_pinned(log_flops_n, loss_Bn, weight_n, b_B)[2]
        fa_B, fb_B = np.where(left_B, fa_new_B, fb_B), np.where(left_B, fa_B, fb_new_B)
    return (lo_B + hi_B) / 2


def predict_batch(L_inf_B: np.ndarray, log_A_B: np.ndarray, alpha_B: np.ndarray,
                  flops_T: np.ndarray) -> np.ndarray:
    """Losses (B, T) of B fitted laws at T compute budgets (FLOPs)."""
    log_c_T = np.log(np.asarray(flops_T, dtype=float))
    return L_inf_B[:, None] + np.exp(log_A_B[:, None] - alpha_B[:, None] * log_c_T[None, :])
