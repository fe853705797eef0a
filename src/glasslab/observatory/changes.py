"""What changed in a run: the metrics whose latest value moved most against their own recent past,
and the MoE layers and experts at the extremes of load and router bias now.

A metric's move is the z-score of its latest logged value against the ``WINDOW`` values logged
before it (latest attempt per step): z = (latest − mean) / sample std. A metric that sat on one value
and left it has no finite z; it ranks first, as does a latest value that is not finite (a NaN loss
is news). Read from the store's index backwards, so a 100,000-step run costs ~51 rows a metric.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from glasslab.track.reader import RunReader

WINDOW = 50
MIN_HISTORY = 5  # fewer earlier values than this say nothing about a move
TOP_METRICS = 8
TOP_EXPERTS = 3
VECTOR_KEY = re.compile(r"^moe/layer_(\d+)/(expert_load|router_bias)$")


def metric_move(points: list[tuple[int, float | None]]) -> dict[str, Any] | None:
    """The move of the last of ``points`` (oldest first) against the ones before it, or None when
    there are fewer than ``MIN_HISTORY`` finite earlier values."""
    if len(points) < MIN_HISTORY + 1:
        return None
    step, latest = points[-1]
    earlier = np.array([v for _, v in points[:-1] if v is not None and math.isfinite(v)], dtype=np.float64)
    if len(earlier) < MIN_HISTORY:
        return None
    mean, std = float(earlier.mean()), float(earlier.std(ddof=1))
    move: dict[str, Any] = {"step": step, "value": None, "mean": mean, "std": std, "n": len(earlier), "z": None,
                            "kind": "z"}
    if latest is None or not math.isfinite(latest):
        move["kind"] = "nonfinite"
    elif std > 0:
        move.update(value=latest, z=(latest - mean) / std)
    elif latest != mean:
        move.update(value=latest, kind="left_constant")
    else:
        move.update(value=latest, z=0.0)
    return move


def what_changed(reader: RunReader, keys: list[str], window: int = WINDOW, top: int = TOP_METRICS) -> dict[str, Any]:
    """The ``top`` metrics by |z| (non-finite and left-constant first), each ``{key, step, value, mean,
    std, n, z, kind}``, and how many metrics were scored."""
    moves = []
    for key in keys:
        move = metric_move(reader.recent(key, window + 1))
        if move is not None:
            moves.append({"key": key, **move})
    moves.sort(key=lambda m: (m["kind"] == "z", -abs(m["z"] or 0.0), m["key"]))
    return {"window": window, "scored": len(moves), "metrics": moves[:top]}


def experts_now(reader: RunReader, vector_keys: list[str], top: int = TOP_EXPERTS) -> dict[str, Any]:
    """Layers and experts at the extremes of the newest expert-load and router-bias vectors.

    ``load``: the most and least loaded (layer, expert) pairs with their share as a multiple of the
    layer's mean share, and the layers most out of balance (max share / mean share); ``bias``: the
    highest and lowest router biases. Empty lists when the run logged no such vectors.
    """
    loads, biases = [], []
    for key in vector_keys:
        match = VECTOR_KEY.match(key)
        latest = reader.latest_vector(key) if match else None
        if latest is None:
            continue
        layer, step, values = int(match.group(1)), latest[0], latest[1]
        cells = [(e, v) for e, v in enumerate(values) if v is not None and math.isfinite(v)]
        if not cells:
            continue
        if match.group(2) == "expert_load":
            mean = sum(v for _, v in cells) / len(cells)
            for expert, value in cells:
                loads.append({"layer": layer, "expert": expert, "step": step, "value": value,
                              "ratio": value / mean if mean > 0 else None})
        else:
            biases += [{"layer": layer, "expert": e, "step": step, "value": v} for e, v in cells]
    by_ratio = sorted(loads, key=lambda c: (c["ratio"] is None, -(c["ratio"] or 0.0)))
    imbalance: dict[int, dict[str, Any]] = {}
    for cell in by_ratio:  # each layer's most loaded expert comes first: it is the layer's imbalance
        imbalance.setdefault(cell["layer"], {"layer": cell["layer"], "step": cell["step"], "imbalance": cell["ratio"]})
    by_bias = sorted(biases, key=lambda c: -c["value"])
    return {
        "load": {"most": by_ratio[:top], "least": [c for c in reversed(by_ratio) if c["ratio"] is not None][:top],
                 "layers": list(imbalance.values())[:top]},
        "bias": {"highest": by_bias[:top], "lowest": by_bias[::-1][:top]},
    }
