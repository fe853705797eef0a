"""Chinchilla approach 3 on rungs that vary tokens per parameter: the end-point law over every run, gated.

Approach 3 (Hoffmann et al. 2022) fits ``L(N, D) = E + A·N^−α + B·D^−β`` to (parameters, tokens, loss)
points. That is the end-point law of a grid ladder (``grid_ends``), so it is fitted by the same fitter and
gate: variable projection over (α, β) with non-negative (E, A, B), Huber-refined on relative residuals,
the family bootstrap over the whole exponent range (a size's k-th seed is one family, as in a points file),
and the registration gate on the prediction. One N×D fitter serves grids, points files (``--law nd``) and
this record. On the Chinchilla points it reproduces Besiroglu et al.'s (Epoch AI) estimates within one of
their standard errors (``tests/test_ladder_approach3.py``).

What approach 3 adds is the compute-optimal split of a budget, in closed form, with an interval from the
bootstrap's replicates, and the prediction of the target run (N, D) when one is given; the gate judges the
prediction at the target, or at the optimum when there is none. On a ladder with a fixed tokens-per-parameter
rule D ∝ N, so N and D cannot be told apart: :func:`identifiable` says so and the ladder fits only ``L(C)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from glasslab.ladder.grid_ends import MIN_POINTS, fit_endpoint_law, points_of_rungs, predict_endpoint
from glasslab.ladder.rungs import Rung
from glasslab.ladder.uncertainty import percentile_interval


def identifiable(params_n: Sequence[float], tokens_n: Sequence[float]) -> bool:
    """False when tokens-per-parameter is the same at every point (D ∝ N): approach 3 cannot separate
    the N and D terms, so only ``L(C)`` can be fitted."""
    ratio_n = np.log(np.asarray(tokens_n, dtype=float)) - np.log(np.asarray(params_n, dtype=float))
    return len(ratio_n) > 0 and float(np.ptp(ratio_n)) > 0.05


def compute_optimal(A: Any, alpha: Any, B: Any, beta: Any, flops: float,
                    flops_per_param_token: float = 6.0) -> tuple[Any, Any]:
    """The (N, D) minimising ``A·N^−α + B·D^−β`` at ``flops`` FLOPs when C = k·N·D (k = 6 for dense
    training); floats or arrays (one optimum per replicate).

    Closed form: N = G·(C/k)^(β/(α+β)) with G = (αA / (βB))^(1/(α+β)), and D = C / (k·N)."""
    A, alpha, B, beta = (np.asarray(x, dtype=float) for x in (A, alpha, B, beta))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # a law without one term has no optimum
        scale = (alpha * A / (beta * B)) ** (1.0 / (alpha + beta))
        params = scale * (flops / flops_per_param_token) ** (beta / (alpha + beta))
        return params, flops / (flops_per_param_token * params)


def approach3_record(rungs: Sequence[Rung], target_flops: float, target_size: tuple[float, float] | None, *,
                     level: float = 0.9, num_bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
    """``fit.json``'s ``approach3`` of ``rungs`` (each with ``params_active`` N and ``tokens`` D, a final loss per
    seed): the law, its standard errors and gate, the compute-optimal (N, D) at ``target_flops`` with the
    ``level`` interval of its tokens per parameter, and the run of ``target_size`` (N, D) predicted when given."""
    runs, sizes = sum(len(r.losses) for r in rungs), len({r.params_active for r in rungs})
    if runs < MIN_POINTS or sizes < 2:
        return {"fitted": False, "reason": f"{runs} runs of {sizes} sizes; approach 3 (5 free parameters) needs "
                f"at least {MIN_POINTS} runs of two sizes"}
    ends_points = points_of_rungs(rungs)
    flops_per_param_token = float(np.median([r.flops / (r.params_active * r.tokens) for r in rungs]))
    first = fit_endpoint_law(ends_points)
    target = target_size or compute_optimal(first.A, first.alpha, first.B, first.beta, target_flops,
                                            flops_per_param_token)
    ends = predict_endpoint(ends_points, target, level=level, num_bootstrap=num_bootstrap,
                            rng=np.random.default_rng(seed))
    law, replicates = ends.law, ends.replicates
    n_opt, d_opt = compute_optimal(law.A, law.alpha, law.B, law.beta, target_flops, flops_per_param_token)
    n_B, d_B = compute_optimal(replicates[:, 1], replicates[:, 2], replicates[:, 3], replicates[:, 4], target_flops,
                               flops_per_param_token)
    ratio_B = (d_B / n_B)[np.isfinite(d_B / n_B)]
    fitted = {"form": law.form, "params": law.params,
              "param_se": {k: float(np.std(replicates[:, i], ddof=1)) for i, k in enumerate(law.params)},
              "noise": ends.noise.to_dict(), "gate": ends.gate}
    if not (np.isfinite(d_opt / n_opt) and len(ratio_B)):
        return {"fitted": False, "reason": "the fitted law lacks a size or a data term, so no split of a budget "
                "is optimal", **fitted}
    record = {"fitted": True, **fitted,
              "compute_optimal": {"flops": target_flops, "params_active": float(n_opt), "tokens": float(d_opt),
                                  "tokens_per_param": float(d_opt / n_opt),
                                  "tokens_per_param_interval": [float(x[0]) for x in
                                                                percentile_interval(ratio_B[:, None], level)],
                                  "loss": float(law(n_opt, d_opt)), "flops_per_param_token": flops_per_param_token}}
    if target_size is not None:
        record["target"] = {"params_active": target_size[0], "tokens": target_size[1], "point": ends.point,
                            "lo": ends.lo, "hi": ends.hi}
    return record
