"""A pre-registered prediction against what the run reached: the band verdict every page shows.

The rule is the ladder's (``ladder/summary.py``, ``ladder/preregister.py``): the relative error is
(predicted − actual) / actual, and a value is inside when ``lo <= actual <= hi``. While the run is
still going its latest eval is compared with the band at its fraction of planned steps (the
prediction's ``curve``, one point every 5% of training), and the verdict says "so far".
"""

from __future__ import annotations

from typing import Any

FINISHED = frozenset({"finished", "succeeded"})
FINAL_FRACTION = 0.98


def band_at(prediction: dict[str, Any], fraction: float) -> tuple[float, float, float] | None:
    """(point, lo, hi) of the prediction's curve at ``fraction`` of training, linear between its
    points; the final band at or after the curve's end; None before the curve starts."""
    curve = [c for c in prediction.get("curve") or [] if _numbers(c, "fraction", "point", "lo", "hi")]
    if curve and fraction < curve[0]["fraction"]:
        return None
    for a, b in zip(curve, curve[1:], strict=False):
        if a["fraction"] <= fraction <= b["fraction"]:
            t = (fraction - a["fraction"]) / (b["fraction"] - a["fraction"]) if b["fraction"] > a["fraction"] else 1.0
            return tuple(a[k] + t * (b[k] - a[k]) for k in ("point", "lo", "hi"))  # type: ignore[return-value]
    if _numbers(prediction, "point", "lo", "hi"):
        return prediction["point"], prediction["lo"], prediction["hi"]
    return None


def verdict(prediction: Any, step: int | None, actual: float | None, planned_steps: Any,
            status: str | None) -> dict[str, Any] | None:
    """The verdict of ``actual`` (the metric at ``step``) against ``prediction``, or None without a
    usable prediction. Keys: ``state`` (pending, final, so_far, stopped), ``actual``, ``point``, ``lo``, ``hi``,
    ``rel_error_pct``, ``inside``, ``fraction``, ``text`` (one line, e.g. "hero 3.611 vs predicted
    3.678 [3.542, 3.829]: +1.9%, inside")."""
    if not isinstance(prediction, dict) or not _numbers(prediction, "point", "lo", "hi"):
        return None
    out: dict[str, Any] = {"state": "pending", "actual": actual, "step": step, "fraction": None,
                           "point": prediction["point"], "lo": prediction["lo"], "hi": prediction["hi"],
                           "rel_error_pct": None, "inside": None}
    if actual is None or step is None:
        out["text"] = (f"predicted {prediction['point']:.3f} [{prediction['lo']:.3f}, {prediction['hi']:.3f}]: "
                       "waiting for the run's first eval")
        return out
    planned = planned_steps if isinstance(planned_steps, (int, float)) and planned_steps > 0 else None
    fraction = min(1.0, step / planned) if planned else None
    # Final at the end of the planned steps (the last eval may come a step early); a run that
    # finished short of them is judged against the band where it stopped.
    final = fraction >= FINAL_FRACTION if fraction is not None else status in FINISHED
    band = (prediction["point"], prediction["lo"], prediction["hi"]) if final else band_at(prediction, fraction)
    if band is None:
        out.update(fraction=fraction,
                   text=f"actual {actual:.3f} at {fraction:.0%} of training: before the first point of the band")
        return out
    point, lo, hi = band
    inside = lo <= actual <= hi
    error = 100.0 * (point - actual) / actual if actual else None
    out.update(state="final" if final else "so_far", fraction=fraction, point=point, lo=lo, hi=hi,
               inside=inside, rel_error_pct=error)
    where = "inside" if inside else ("above the band" if actual > hi else "below the band")
    error_text = f"{error:+.1f}%" if error is not None else "n/a"
    text = f"{actual:.3f} vs predicted {point:.3f} [{lo:.3f}, {hi:.3f}]: {error_text}, {where}"
    if final:
        out["text"] = text
    elif status in FINISHED:
        out.update(state="stopped", text=f"{text} (stopped at {fraction:.0%} of training)")
    else:
        out["text"] = f"{text} so far ({fraction:.0%} of training)"
    return out


def _numbers(data: Any, *keys: str) -> bool:
    return isinstance(data, dict) and all(isinstance(data.get(k), (int, float)) for k in keys)
