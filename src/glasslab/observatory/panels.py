"""The run page's charts: metric names grouped into panels with titles that say what they show, and
per-layer families split out of them so a 48-layer model reads as one layer × step heatmap.

A chart is ``{id, title, keys, logy, family}``; ``family`` is ``{pattern, rows, row}`` when every key
differs from the others only in its ``layer_<i>`` segment (``moe/layer_*/load_max_violation``, rows
= the layer numbers, row ``layer``) or its content cluster (``eval/cluster/*/loss``, row ``cluster``), else
None. The page decides how a chart draws from how many of its keys are shown: up to ``GROUP_LINES_MAX``
as lines, more as small multiples, or a family as a heatmap; a cluster family always as a heatmap.
"""

from __future__ import annotations

import re
from typing import Any

from glasslab.observatory.posttrain_page import POSTTRAIN_PANELS
from glasslab.observatory.runs import LOSS_KEY

TASK_KEY = re.compile(r"^eval/task/([^/]+)/(acc|acc_norm)$")
LAYER_SEGMENT = re.compile(r"(^|/)(layer_(?=\d)|cluster/)(\d+|other)(?=/|$)")
"""The segment a family of metrics differs in: a layer (``moe/layer_3/...``) or a content cluster of the run's
data map (``eval/cluster/3/loss``, or ``eval/cluster/other/loss``: the clusters too small to measure alone)."""

# Run-page panels: (title, test on the metric name, log-scale y). First match wins; what no panel
# claims lands in a panel named after its prefix (or after the metric, when it is alone there).
PANELS = POSTTRAIN_PANELS + (
    ("Loss", lambda k: k in ("train/loss", LOSS_KEY), True),
    ("SFT loss (assistant tokens only)", lambda k: k == "sft/loss", True),
    ("Learning rate", lambda k: k.startswith("optim/"), False),
    ("Gradient norm", lambda k: k.startswith("grad/norm/"), True),
    ("Parameter norms per group", lambda k: k.startswith("params/norm/"), False),
    ("Router bias norm per layer (balancing state, not trained)", lambda k: k.endswith("/router_bias_norm"), False),
    ("MoE load: max violation per layer", lambda k: k.startswith("moe/") and k.endswith("/load_max_violation"),
     False),
    ("MoE routing entropy per layer", lambda k: k.startswith("moe/") and k.endswith("/routing_entropy"), False),
    ("MoE dropped tokens per layer", lambda k: k.startswith("moe/") and k.endswith("/dropped_tokens"), False),
    ("Throughput", lambda k: k == "throughput/tokens_per_second", False),
    ("Model FLOPs utilisation", lambda k: k == "throughput/mfu", False),
    ("Peak memory", lambda k: k.startswith("memory/"), False),
    ("Tokens seen", lambda k: k == "train/tokens", False),
    ("SFT assistant tokens", lambda k: k == "sft/assistant_tokens", False),
    ("Task accuracy", lambda k: TASK_KEY.match(k) is not None or k == "eval/task/macro/acc", False),
    ("Task bits per byte (correct choice)", lambda k: k.startswith("eval/task/") and k.endswith("/bpb"), False),
    ("Held-out loss per content cluster (the data map)",
     lambda k: k.startswith("eval/cluster/") and k.endswith("/loss"), False),
    ("Held-out bits per byte per content cluster", lambda k: k.startswith("eval/cluster/") and k.endswith("/bpb"),
     False),
    ("Eval loss per domain", lambda k: k.startswith("eval/") and k.endswith("/loss"), False),
    ("Eval bits per byte per domain", lambda k: k.startswith("eval/") and k.endswith("/bpb"), False),
    ("Mixture weights in force", lambda k: k.startswith("mixture/weight/"), False),
    ("Passes over each domain's training data", lambda k: k.startswith("mixture/epochs/"), False),
)


def group_panels(keys: list[str]) -> list[dict[str, Any]]:
    """Chart panels ``{title, keys, logy}`` for a run's scalar keys, in the order of ``PANELS`` then
    by prefix."""
    panels: dict[str, dict[str, Any]] = {}
    for title, _, logy in PANELS:
        panels[title] = {"title": title, "keys": [], "logy": logy}
    for key in keys:
        title = next((t for t, match, _ in PANELS if match(key)), None)
        if title is None:
            title = f"{key.split('/')[0]}/…" if "/" in key else "other"
            panels.setdefault(title, {"title": title, "keys": [], "logy": False})
        panels[title]["keys"].append(key)
    out = [p for p in panels.values() if p["keys"]]
    for panel in out:
        if panel["title"].endswith("/…") and len(panel["keys"]) == 1:
            panel["title"] = panel["keys"][0]
    return out


def layer_of(key: str) -> tuple[str, int | str] | None:
    """(the key with its layer or cluster number replaced by ``*``, the number) for a per-layer or per-cluster
    metric, else None. The last such segment counts (``grad/norm/layer_3/attn`` → ``grad/norm/layer_*/attn``, 3;
    ``eval/cluster/7/loss`` → ``eval/cluster/*/loss``, 7; ``eval/cluster/other/loss`` → ..., ``"other"``)."""
    matches = list(LAYER_SEGMENT.finditer(key))
    if not matches:
        return None
    m = matches[-1]
    row = m.group(3)
    return key[:m.start(3)] + "*" + key[m.end(3):], int(row) if row.isdigit() else row


def _row_order(member: tuple[int | str, str]) -> tuple[bool, int]:
    """Numbered rows in order, ``other`` last."""
    row = member[0]
    return (isinstance(row, str), row if isinstance(row, int) else 0)


def chart_specs(keys: list[str]) -> list[dict[str, Any]]:
    """The run page's charts, in page order: each panel, with every per-layer family of two or more
    layers inside it as a chart of its own (the panel's title when the family is all of it)."""
    charts: list[dict[str, Any]] = []
    for panel in group_panels(keys):
        families: dict[str, list[tuple[int, str]]] = {}
        for key in panel["keys"]:
            found = layer_of(key)
            if found:
                families.setdefault(found[0], []).append((found[1], key))
        # A family of layers from two on; the clusters' always (a cluster × step heatmap, however few).
        families = {p: sorted(members, key=_row_order) for p, members in families.items()
                    if len(members) >= 2 or "/cluster/*" in p}
        in_family = {key for members in families.values() for _, key in members}
        rest = [k for k in panel["keys"] if k not in in_family]
        if rest:
            charts.append({"id": panel["title"], "title": panel["title"], "keys": rest, "logy": panel["logy"],
                           "family": None})
        for pattern, members in families.items():
            whole = not rest and len(families) == 1
            title = panel["title"] if whole else f"{panel['title']}: {pattern}"
            charts.append({"id": title, "title": title, "keys": [k for _, k in members], "logy": panel["logy"],
                           "family": {"pattern": pattern, "rows": [layer for layer, _ in members],
                                      "row": "cluster" if "/cluster/*" in pattern else "layer"}})
    return charts
