"""Series for charts: raw when short, min/max/last buckets when long, so spikes survive downsampling.

The writer keeps rollups of every scalar at a few bucket widths (``track.store.ROLLUP_WIDTHS``); a
long series is read from the coarsest level that still has at least ``max_points`` rows and merged
down to ``max_points`` here, so a million-point series costs a few thousand rows.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from glasslab.track.reader import RunReader
from glasslab.track.store import ROLLUP_WIDTHS

DEFAULT_POINTS = 2000


def finite(value: Any) -> float | None:
    """JSON has no NaN or infinity: such values travel as null (a gap in the chart)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def clean(data: Any) -> Any:
    """Plain data with every non-finite float replaced by None, ready for strict JSON."""
    if isinstance(data, float):
        return finite(data)
    if isinstance(data, dict):
        return {str(k): clean(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [clean(v) for v in data]
    return data


class EncodedSeries(dict):
    """A page's series (finite already) with their JSON text, encoded once: a 100k-step run's page
    spends most of its time encoding them, and keeps them while the store is unchanged. Not to be
    changed after it is made (the text would no longer say what it holds)."""

    def __init__(self, series: dict[str, Any]) -> None:
        super().__init__(series)
        self.json = json.dumps(self, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def read_series(reader: RunReader, key: str, max_points: int = DEFAULT_POINTS) -> dict[str, list]:
    """``{"steps", "values"}`` for ``key``, plus ``"min"``/``"max"`` per point when downsampled.

    A downsampled point sits at the last step of its bucket and carries the bucket's last value,
    so live points appended after it continue the same line.
    """
    count = reader.point_count(key)
    if count <= max_points:  # also a store without rollups yet: read it raw
        steps, values = reader.scalars(key)
        return {"steps": steps, "values": [finite(v) for v in values]}
    # The coarsest level that still has a row per point: fewest rows read, no resolution lost.
    width = next((w for w in reversed(ROLLUP_WIDTHS) if count / w >= max_points), ROLLUP_WIDTHS[0])
    return merge_buckets(reader.rollups(key, width), max_points)


def merge_buckets(rows: list[tuple], max_points: int) -> dict[str, list]:
    """Merge consecutive ``(n, last_step, min, max, last)`` rows into at most ``max_points`` points.

    In numpy: a 100k-step run's page merges ~6k rows for each of its metrics, which per-row Python
    made the slowest part of the page (docs/LOG.md, the lab at scale).
    """
    if not rows:
        return {"steps": [], "values": [], "min": [], "max": []}
    group = max(1, math.ceil(len(rows) / max_points))
    table = np.array(rows, dtype=np.float64)  # None (NaN is stored as NULL) becomes nan
    starts = np.arange(0, len(rows), group)
    ends = np.minimum(starts + group, len(rows)) - 1
    lows, highs = table[:, 2], table[:, 3]
    lows[~np.isfinite(lows)] = np.nan  # an infinite value never wins a min or max, as NaN never does
    highs[~np.isfinite(highs)] = np.nan
    with np.errstate(invalid="ignore"):  # a chunk with no finite value gives nan, then None
        merged_lows, merged_highs = np.fmin.reduceat(lows, starts), np.fmax.reduceat(highs, starts)
    return {"steps": table[ends, 1].astype(np.int64).tolist(), "values": _finite_list(table[ends, 4]),
            "min": _finite_list(merged_lows), "max": _finite_list(merged_highs)}


def _finite_list(values: np.ndarray) -> list[float | None]:
    return [v if math.isfinite(v) else None for v in values.tolist()]


def thin_vectors(steps: list[int], vectors: list[list[float]], max_columns: int = 240) -> dict[str, list]:
    """Every k-th vector (plus the newest) so a heatmap stays a few hundred columns wide."""
    if len(steps) > max_columns:
        stride = math.ceil(len(steps) / max_columns)
        keep = list(range(0, len(steps), stride))
        if keep[-1] != len(steps) - 1:
            keep.append(len(steps) - 1)
        steps = [steps[i] for i in keep]
        vectors = [vectors[i] for i in keep]
    return {"steps": steps, "values": [[finite(v) for v in vec] for vec in vectors]}


def interpolate(
    x_steps: list[int], ref_steps: list[int], ref_values: list[float | None]
) -> list[float | None]:
    """Values of a monotone reference series (tokens by step) at ``x_steps``, linearly interpolated.

    Steps before the first or after the last reference point extrapolate from the nearest pair, so
    a loss logged a step ahead of the token count still gets an x position.
    """
    pairs = [(s, v) for s, v in zip(ref_steps, ref_values, strict=True) if v is not None]
    if not pairs:
        return [None] * len(x_steps)
    if len(pairs) == 1:
        s0, v0 = pairs[0]
        return [v0 * x / s0 if s0 else v0 for x in x_steps]
    out, j = [], 0
    for x in x_steps:
        while j < len(pairs) - 2 and pairs[j + 1][0] < x:
            j += 1
        (s0, v0), (s1, v1) = pairs[j], pairs[j + 1]
        out.append(v0 + (v1 - v0) * (x - s0) / (s1 - s0) if s1 != s0 else v1)
    return out
