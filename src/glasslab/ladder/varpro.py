"""Variable projection for laws that are linear in their coefficients once their exponents are fixed.

``L = c_0 + Σ_k c_k · X_k(θ_k)``: every column but the constant depends on its own group of nonlinear
parameters (an exponent, or an exponent and a time scale), so for fixed θ the coefficients are a
(non-negative) weighted least-squares problem in closed form. The fit profiles the coefficients out
and searches θ only — over a grid first. Each column group's values on its grid are computed once, and
the normal equations of every grid combination are assembled from the groups' pairwise products, so
a grid of tens of thousands of combinations, for a thousand replicate data sets at once, costs
seconds: the parametric bootstrap refits every replicate on the same grid.

Coefficients are kept non-negative (every term of a loss law adds or removes loss with a known sign):
a combination whose least-squares solution has a negative slope coefficient is infeasible, and one
whose only negative coefficient is the constant is refitted with the constant at 0 (a floor at 0).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RIDGE = 1e-12
"""Relative ridge on the scaled normal equations (columns that coincide on a grid corner)."""


@dataclass(frozen=True)
class ColumnGroup:
    """One column of the design on its grid: ``values[g]`` is the column (over the points) at grid value
    ``grid[g]`` (a tuple of that group's nonlinear parameters)."""

    grid: tuple[tuple[float, ...], ...]
    values: np.ndarray
    """(G, n): the column at each grid value."""


@dataclass(frozen=True)
class GridFit:
    """Per replicate: the best grid index of each group, the coefficients (constant first) and the
    weighted sum of squares (inf where no combination was feasible)."""

    index: np.ndarray
    """(B, num_groups) grid indices."""
    coef: np.ndarray
    """(B, 1 + num_groups)."""
    sse: np.ndarray
    """(B,)."""


CHUNK_VALUES = 4_000_000
"""Combinations × coefficients × replicates held at once (memory: a few hundred MB at most)."""


def grid_fit(groups: Sequence[ColumnGroup], y_Bn: np.ndarray, w_n: np.ndarray) -> GridFit:
    """The least-squares coefficients of ``y ≈ c_0 + Σ c_k · group_k`` (weights ``w_n``) at every
    combination of the groups' grids, for every row of ``y_Bn``; returns each row's best feasible one."""
    y_Bn = np.atleast_2d(np.asarray(y_Bn, dtype=float))
    num_rows = y_Bn.shape[0]
    cols = [np.ones((1, len(w_n)))] + [g.values for g in groups]
    sizes = [c.shape[0] for c in cols]
    # Pairwise weighted products of every group's grid values, and each group's products with y.
    gram = {(i, j): (cols[i] * w_n) @ cols[j].T for i in range(len(cols)) for j in range(i, len(cols))}
    rhs = [(cols[i] * w_n) @ y_Bn.T for i in range(len(cols))]  # (G_i, B)
    yy_B = (y_Bn**2 * w_n).sum(axis=1)
    combos = np.array(list(itertools.product(*(range(s) for s in sizes[1:]))), dtype=int)
    k = len(cols)

    def assemble(part: np.ndarray, rows: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray]:
        index = np.concatenate([np.zeros((len(part), 1), dtype=int), part], axis=1)  # the constant's index is 0
        G = np.empty((len(part), k, k))
        for i in range(k):
            for j in range(i, k):
                G[:, i, j] = G[:, j, i] = gram[i, j][index[:, i], index[:, j]]
        R = np.stack([rhs[i][index[:, i]][:, rows] for i in range(k)], axis=1)  # (P, k, B')
        return G, R

    best_sse = np.full(num_rows, np.inf)
    best_combo = np.zeros(num_rows, dtype=int)
    chunk = max(16, CHUNK_VALUES // (k * num_rows))
    for start in range(0, len(combos), chunk):
        G, R = assemble(combos[start:start + chunk], slice(None))
        sse = _nonneg_sse(G, R, yy_B)
        row_best = np.argmin(sse, axis=0)
        chosen = sse[row_best, np.arange(num_rows)]
        better = chosen < best_sse
        best_sse = np.where(better, chosen, best_sse)
        best_combo = np.where(better, start + row_best, best_combo)
    # The coefficients of each row's best combination only (storing them for every combination costs more).
    coef = np.full((num_rows, k), np.nan)
    for row in np.flatnonzero(np.isfinite(best_sse)):
        G, R = assemble(combos[[best_combo[row]]], np.array([row]))
        coef[row] = _nonneg_coef(G[0], R[0, :, 0], float(yy_B[row]))
    return GridFit(combos[best_combo], coef, best_sse)


def _scaled(G: np.ndarray, R: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normal equations ``G`` (…, k, k) and right-hand sides ``R`` (…, k, B) with every column scaled to
    unit norm (the columns differ by decades); returns them and the scale."""
    scale = 1.0 / np.sqrt(np.maximum(np.einsum("...ii->...i", G), 1e-300))
    return G * scale[..., :, None] * scale[..., None, :], R * scale[..., :, None], scale


def _nonneg_sse(G: np.ndarray, R: np.ndarray, yy_B: np.ndarray) -> np.ndarray:
    """(P, B) weighted sums of squares: of the full solution where every coefficient is ≥ 0, else of the
    one with the constant at 0 where its slopes are ≥ 0, else inf."""
    Gs, Rs, _ = _scaled(G, R)
    out = np.full((G.shape[0], R.shape[2]), np.inf)
    for first in (0, 1):
        g = Gs[:, first:, first:] + RIDGE * np.eye(G.shape[1] - first)
        r = Rs[:, first:, :]
        c = np.matmul(np.linalg.inv(g), r)  # (P, k', B)
        sse = yy_B[None, :] - np.einsum("pkb,pkb->pb", c, r)  # at the solution c·G·c = c·r
        out = np.where(np.all(c >= 0, axis=1) & (sse < out), sse, out)
    return out


def _nonneg_coef(G: np.ndarray, r: np.ndarray, yy: float) -> np.ndarray:
    """The coefficients :func:`_nonneg_sse` scored, for one combination and one row."""
    Gs, rs, scale = _scaled(G, r[:, None])
    rs = rs[:, 0]
    best, best_sse = np.full(len(r), np.nan), np.inf
    for first in (0, 1):
        c = np.linalg.solve(Gs[first:, first:] + RIDGE * np.eye(len(r) - first), rs[first:])
        sse = yy - float(c @ rs[first:])
        if np.all(c >= 0) and sse < best_sse:
            best = np.concatenate([np.zeros(first), c]) * scale
            best_sse = sse
    return best


def huber_nonneg_fit(X_nk: np.ndarray, y_n: np.ndarray, *, delta: float, point_weight_n: np.ndarray | None = None,
                     iterations: int = 30) -> tuple[np.ndarray, float]:
    """Non-negative coefficients minimising the weighted sum (``point_weight_n``, default 1) of Huber losses
    (``delta``) of the relative residuals ``(y − X c) / y``, by iteratively reweighted non-negative least
    squares; returns (coef, objective)."""
    from scipy.optimize import nnls

    scale = 1.0 / np.maximum(np.sqrt((X_nk**2).sum(axis=0)), 1e-300)
    Xs = X_nk * scale / y_n[:, None]
    target = np.ones_like(y_n)
    base = np.ones_like(y_n) if point_weight_n is None else point_weight_n
    weight = base.copy()
    coef = np.zeros(X_nk.shape[1])
    for _ in range(iterations):
        root = np.sqrt(weight)
        coef, _ = nnls(Xs * root[:, None], target * root, maxiter=50 * X_nk.shape[1])
        resid = target - Xs @ coef
        new_weight = base * np.minimum(1.0, delta / np.maximum(np.abs(resid), 1e-300))
        if np.allclose(new_weight, weight, rtol=1e-6, atol=1e-9):
            break
        weight = new_weight
    resid = np.abs(target - Xs @ coef)
    objective = float((base * np.where(resid <= delta, 0.5 * resid**2, delta * (resid - 0.5 * delta))).sum())
    return coef * scale, objective
