"""Scaling-ladder bench: what a fit costs, and how well a trained ladder predicts its largest rung.

Part 1 (always runs, seconds): the runtime of the whole ladder analysis (compute law, L∞ sweep,
curve at every 5%, back-test; 1,000 bootstrap replicates) on a 5-rung synthetic ladder; approach 3
on the 240 Chinchilla points (Epoch AI's filter); and, side by side, the vectorised bootstrap against
one scipy least-squares fit per replicate; and how often the nominal 90% interval covers the truth
over synthetic ladders, with L∞ pinned at the truth (1,000 ladders) and free (200; slower fits).

Part 2 (with ``--lab``): the leave-last-rung-out back-test of a ladder trained into that lab (rungs
written by the ladder runner, ``role: rung`` in run.json): the relative error of the predicted final
loss of the largest rung in percent (target ≤ 1.5%), whether the 90% interval held it, and each
rung's seed spread. Training the ladder is the executor's job; this bench reads what it left, so the
same numbers can be recomputed from a published lab folder:

    glasslab run tiny_ladder --lab LAB --jobs 2        # the built-in ladder trained to the rules
    python bench/ladder_bench.py [--lab LAB --ladder tiny --L-inf 1.0 --sweep 0.5 1.5] [--smoke]

``--smoke`` (20 coverage ladders instead of 1,000/200) only checks that the bench still runs.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from glasslab.ladder.approach3 import fit_approach3
from glasslab.ladder.compute_law import ComputeLaw
from glasslab.ladder.fit import fit_ladder
from glasslab.ladder.predict import CURVE_FRACTIONS, predict
from glasslab.ladder.rungs import Rung
from glasslab.ladder.runs import find_ladder_runs, read_rungs
from glasslab.ladder.uncertainty import bootstrap_laws, estimate_noise

CHINCHILLA = Path(__file__).resolve().parents[2] / "shared" / "data" / "chinchilla_points.csv"


def synthetic_ladder(rng: np.random.Generator) -> list[Rung]:
    """Five rungs over two decades, 3/3/2/2/2 seeds, 0.5% noise, evals at every 5% of training."""
    law = ComputeLaw(1.8, 300.0, 0.15)
    rungs = []
    for i, flops in enumerate(np.geomspace(1e15, 1e17, 5)):
        seeds = 3 if i < 2 else 2
        noisy = lambda c: tuple(float(law(c)) * np.exp(0.005 * rng.standard_normal(seeds)))  # noqa: B023
        partial = {f: noisy(f * flops) for f in CURVE_FRACTIONS[:-1]}
        rungs.append(Rung(f"r{i}", float(flops), noisy(flops), partial=partial))
    return rungs


def coverage(L_inf: float | None, replicates: int = 200) -> float:
    """Share of synthetic ladders (0.5% noise, 3 seeds) whose 90% interval at 10x holds the true loss."""
    law = ComputeLaw(1.8, 300.0, 0.15)
    rng = np.random.default_rng(11)
    covered = 0
    for rep in range(replicates):
        rungs = [Rung(f"r{i}", float(c), tuple(float(law(c)) * np.exp(0.005 * rng.standard_normal(3))))
                 for i, c in enumerate(np.geomspace(1e15, 1e17, 5))]
        p = predict(rungs, 1e18, L_inf=L_inf, num_bootstrap=400, seeds_at_target=None, seed=rep)
        covered += p.lo <= law(1e18) <= p.hi
    return covered / replicates


def time_full_fit(rungs: list[Rung]) -> float:
    start = time.perf_counter()
    fit_ladder(rungs, ladder="synthetic", target_flops=1e18, L_inf=1.8, sweep=(1.7, 1.9), num_bootstrap=1000)
    return time.perf_counter() - start


def time_chinchilla() -> float | None:
    path = CHINCHILLA if CHINCHILLA.is_file() else Path("/work/shared/data/chinchilla_points.csv")
    if not path.is_file():
        return None
    with open(path) as f:
        rows = list(csv.DictReader(f))
    params = np.array([float(r["params"]) for r in rows])
    flops = np.array([float(r["flops"]) for r in rows])
    loss = np.array([float(r["loss"]) for r in rows])
    keep = np.argsort(loss)[:-5]
    start = time.perf_counter()
    fit_approach3(params[keep], flops[keep] / (6 * params[keep]), loss[keep], num_bootstrap=100)
    return time.perf_counter() - start


def bootstrap_speedup(rungs: list[Rung], replicates: int = 300) -> tuple[float, float]:
    """Seconds per replicate: the vectorised refit vs a scipy least-squares fit per replicate."""
    from glasslab.ladder.compute_law import fit_compute_law

    law = fit_compute_law(rungs, 1.8)
    noise = estimate_noise(rungs, law)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    bootstrap_laws(rungs, law, noise, num_bootstrap=replicates, rng=rng)
    vectorised = (time.perf_counter() - start) / replicates
    log_c = np.log([r.flops for r in rungs])
    fitted = np.asarray(law(np.exp(log_c)))
    start = time.perf_counter()
    for _ in range(replicates):
        loss = fitted * np.exp(noise.sigma * rng.standard_normal(len(rungs)))
        residual = lambda p, loss=loss: np.log(1.8 + np.exp(p[0] - p[1] * log_c)) - np.log(loss)
        least_squares(residual, x0=[np.log(law.A), law.alpha])
    looped = (time.perf_counter() - start) / replicates
    return vectorised, looped


def _repetition(run_dir: Path) -> str:
    """The most-repeated domain of a run (from ``mixture/epochs/*`` in its result.json), as text."""
    result = run_dir / "result.json"
    epochs = {k.removeprefix("mixture/epochs/"): v for k, v in
              (json.loads(result.read_text()) if result.is_file() else {}).items() if k.startswith("mixture/epochs/")}
    if not epochs:
        return ""
    domain = max(epochs, key=epochs.get)
    return f"; most repeated: {domain} ×{epochs[domain]:.1f}"


def trained_ladder_report(lab: Path, ladder: str | None, L_inf: float | None,
                          sweep: list[float]) -> float | None:
    """Print the back-test of the ladder trained in ``lab``; returns the headline error in percent."""
    rungs = read_rungs(find_ladder_runs(lab, ladder))
    for rung in rungs:
        print(f"rung {rung.name} ({rung.size_name}): {rung.flops:.3g} FLOPs, loss {rung.loss_mean:.4f} "
              f"± {rung.loss_std:.4f} over {len(rung.losses)} seeds{_repetition(lab / rung.run_ids[0])}")
    fit = fit_ladder(rungs, ladder=ladder or "ladder", target_flops=10 * max(r.flops for r in rungs),
                     L_inf=L_inf, sweep=sweep)
    last = fit["backtest"]["last"]
    if last is None:
        print("back-test: too few rungs to hold the largest one out")
        return None
    for step in fit["backtest"]["steps"]:
        print(f"fit on {len(step['fit_rungs'])} rungs → {step['held_out']} ({step['extrapolation']:.1f}x): "
              f"predicted {step['point']:.4f} [{step['lo']:.4f}, {step['hi']:.4f}], measured "
              f"{step['measured']:.4f}, error {step['rel_error_pct']:+.2f}%, covered {step['covered']}")
    return abs(last["rel_error_pct"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", type=Path, default=None, help="lab root holding a trained ladder")
    parser.add_argument("--ladder", default=None, help="ladder name (default: every rung in the lab)")
    parser.add_argument("--L-inf", dest="L_inf", default="free", help="asymptote to pin, or 'free'")
    parser.add_argument("--sweep", nargs="*", type=float, default=[])
    parser.add_argument("--smoke", action="store_true", help="few coverage ladders: check that the bench runs")
    args = parser.parse_args()
    pinned_ladders, free_ladders = (20, 20) if args.smoke else (1000, 200)

    rungs = synthetic_ladder(np.random.default_rng(0))
    full_fit = time_full_fit(rungs)
    chinchilla = time_chinchilla()
    vectorised, looped = bootstrap_speedup(rungs)
    coverage_pinned, coverage_free = coverage(1.8, pinned_ladders), coverage(None, free_ladders)
    error = None
    if args.lab is not None:
        L_inf = None if args.L_inf == "free" else float(args.L_inf)
        error = trained_ladder_report(args.lab, args.ladder, L_inf, args.sweep)

    print(f"bootstrap refit: {vectorised * 1e6:.0f} us/replicate vectorised, {looped * 1e6:.0f} us/replicate "
          "with one scipy least_squares per replicate")
    print(f"ladder_full_fit_seconds: {full_fit:.2f}  (target < 10; 5 rungs, 20 curve points, 1000 bootstrap)")
    if chinchilla is not None:
        print(f"ladder_approach3_chinchilla_seconds: {chinchilla:.2f}  (target: seconds, not minutes)")
    print(f"ladder_bootstrap_vectorised_speedup: {looped / vectorised:.0f}  (vs one scipy fit per replicate)")
    print(f"ladder_interval_coverage_pinned: {coverage_pinned:.3f}  (target 0.85-0.95; {pinned_ladders} ladders)")
    print(f"ladder_interval_coverage_free: {coverage_free:.3f}  (target 0.85-0.95; {free_ladders} ladders)")
    if error is not None:
        print(f"ladder_backtest_rel_error_pct: {error:.2f}  (target <= 1.5)")
    else:
        print("ladder_backtest_rel_error_pct: n/a  "
              "(needs a trained ladder: --lab LAB after `glasslab run tiny_ladder --lab LAB`)")


if __name__ == "__main__":
    main()
