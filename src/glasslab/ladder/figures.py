"""The ladder's figure: loss against compute on log-log axes, as PNG and SVG (matplotlib, Agg).

It shows what the fit saw and what it claims: every seed of every rung, the rung means with their
seed spread, the fitted law extended to the target (a grid fit: the floor it estimated, with its
interval), the predicted curve of the hero with its 90% band (every 5% of training), the end-point
prediction, and — once it exists — the hero's measured loss. It is drawn from a ``fit.json`` dict
alone, so anyone can redraw it from the published file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on lab machines or in CI

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FormatStrFormatter  # noqa: E402


def draw_fit(fit: dict[str, Any], out_dir: str | Path, *, stem: str = "ladder",
             hero_losses: list[tuple[float, float]] | None = None) -> list[Path]:
    """Draw ``fit`` into ``out_dir/<stem>.png`` and ``.svg``; returns the two paths.

    ``hero_losses`` are measured (FLOPs, loss) points of the hero run, drawn over its band.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.0, 4.8), dpi=120)
    for i, rung in enumerate(fit["rungs"]):
        ax.scatter([rung["flops"]] * len(rung["losses"]), rung["losses"], s=10, color="0.6", zorder=2,
                   label="seeds" if i == 0 else None)
    ax.errorbar([r["flops"] for r in fit["rungs"]], [r["loss_mean"] for r in fit["rungs"]],
                yerr=[r["loss_std"] for r in fit["rungs"]], fmt="o", color="C0", capsize=3, zorder=3,
                label="rungs (mean ± seed s.d.)")
    grid = fit["L_inf"].get("mode") == "grid"  # several grid points share a size: name them by width and tokens
    for rung in fit["rungs"]:
        ax.annotate(rung["name"] if grid else rung["size_name"] or rung["name"], (rung["flops"], rung["loss_mean"]),
                    textcoords="offset points", xytext=(4, 6), fontsize=7, color="C0")
    if grid:
        floor = fit["L_inf"]
        ax.axhspan(floor["lo"], floor["hi"], color="C4", alpha=0.12, lw=0)
        ax.axhline(floor["value"], color="C4", lw=1, ls=":", label=f"floor E, estimated: {floor['value']:.3g} "
                   f"[{floor['lo']:.3g}, {floor['hi']:.3g}]")
    line = fit.get("law_line") or []
    if line:
        law = fit["law"]["params"]
        ax.plot([p["flops"] for p in line], [p["loss"] for p in line], color="C1", lw=1.4,
                label=f"fit: L∞={law['L_inf']:.3g} ({fit['L_inf']['mode']}), α={law['alpha']:.3g}")
    curve = fit.get("curve") or []
    if curve:
        flops = [c["flops"] for c in curve]
        ax.fill_between(flops, [c["lo"] for c in curve], [c["hi"] for c in curve], color="C2", alpha=0.25,
                        label=f"predicted hero curve, {fit['prediction']['level']:.0%} band")
        ax.plot(flops, [c["point"] for c in curve], color="C2", lw=1, ls="--")
    pred = fit["prediction"]
    yerr = [[pred["point"] - pred["lo"]], [pred["hi"] - pred["point"]]]
    ax.errorbar([pred["flops"]], [pred["point"]], yerr=yerr, fmt="*", ms=11, color="C3", capsize=4, zorder=4,
                label=f"prediction {pred['point']:.4g} [{pred['lo']:.4g}, {pred['hi']:.4g}]")
    if hero_losses:
        ax.plot([c for c, _ in hero_losses], [loss for _, loss in hero_losses], color="k", lw=1, label="hero")
    ax.set_xscale("log")
    ax.set_yscale("log")
    # Losses span less than a decade, so the labelled ticks are log-scale minor ticks (2, 3, 4, …).
    ax.yaxis.set_major_formatter(FormatStrFormatter("%.1f"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%.1f"))
    ax.set_xlabel("training compute C outside the LM head (FLOPs)")
    ax.set_ylabel(f"{fit['target']} (nats/token)")
    ax.set_title(f"ladder {fit['ladder']}")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    paths = [out_dir / f"{stem}.png", out_dir / f"{stem}.svg"]
    for path in paths:
        tmp = path.with_name(f".{path.name}.tmp")
        fig.savefig(tmp, format=path.suffix[1:])
        tmp.replace(path)
    plt.close(fig)
    return paths
