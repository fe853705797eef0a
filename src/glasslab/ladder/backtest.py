"""Back-tests: would this ladder have predicted its own largest rungs?

Roll forward: fit on the smallest k rungs, predict rung k+1 (the next larger one), for every k that
leaves enough rungs for the law; the last of these is leave-last-rung-out, the headline number. The
error is relative, ``(predicted − measured) / measured`` in percent, so a ladder's extrapolation
skill is reported beside the fit that will be used for the hero.
"""

from __future__ import annotations

from collections.abc import Sequence

from glasslab.errors import UserError
from glasslab.ladder.predict import predict
from glasslab.ladder.rungs import Rung


def roll_forward(rungs: Sequence[Rung], *, L_inf: float | None = None, sweep: Sequence[float] = (),
                 L_inf_prior: tuple[float, float] | None = None, level: float = 0.9, num_bootstrap: int = 400,
                 seed: int = 0) -> dict:
    """Leave-last-rung-out roll-forward back-test of ``L(C)`` on ``rungs`` (any order).

    Returns ``{"method", "steps": [{"fit_rungs", "held_out", "flops", "extrapolation", "measured",
    "point", "lo", "hi", "rel_error_pct", "covered"}, ...], "last": <the step predicting the largest
    rung>, "mean_abs_rel_error_pct"}``;
    ``last`` is None when the ladder has too few rungs to hold one out.
    """
    ordered = sorted(rungs, key=lambda r: r.flops)
    min_fit = 3 if L_inf is None else 2
    steps = []
    for k in range(min_fit, len(ordered)):
        held_out = ordered[k]
        try:
            p = predict(ordered[:k], held_out.flops, L_inf=L_inf, sweep=sweep, L_inf_prior=L_inf_prior, level=level,
                        num_bootstrap=num_bootstrap, seeds_at_target=len(held_out.losses), seed=seed)
        except UserError:
            # Too few rungs to measure noise with at this k: the next k may have enough.
            continue
        measured = held_out.loss_mean
        steps.append({
            "fit_rungs": [r.name for r in ordered[:k]],
            "held_out": held_out.name,
            "flops": held_out.flops,
            "extrapolation": held_out.flops / ordered[k - 1].flops,
            "measured": measured,
            "point": p.point,
            "lo": p.lo,
            "hi": p.hi,
            "rel_error_pct": 100.0 * (p.point - measured) / measured,
            "covered": bool(p.lo <= measured <= p.hi),
        })
    last = steps[-1] if steps and steps[-1]["held_out"] == ordered[-1].name else None
    mean_abs = sum(abs(s["rel_error_pct"]) for s in steps) / len(steps) if steps else None
    return {"method": "roll-forward, leave-last-rung-out", "steps": steps, "last": last,
            "mean_abs_rel_error_pct": mean_abs}
