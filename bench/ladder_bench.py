"""Scaling-ladder bench: what a fit costs, how honest its intervals are, and how well trained ladders predict.

Part 1 (always runs, seconds): the runtime of the whole ladder analysis (compute law, L∞ sweep,
curve at every 5%, back-test; 1,000 bootstrap replicates) on a 5-rung synthetic ladder; approach 3
on the 240 Chinchilla points (Epoch AI's filter); the vectorised bootstrap against one scipy
least-squares fit per replicate; and how often the nominal 90% interval covers the truth over
synthetic ladders: with the asymptote known exactly, with it free, and — the default interval — with
the true L∞ drawn uniformly within ± 0.3 nats of the pinned value.

Part 2 (``--lab LAB --ladder NAME``): the leave-last-rung-out back-test of a ladder trained in LAB.

Part 3 (``--long --lab LAB``): trains the built-in ``long_ladder`` into LAB with two jobs (steps
already there are reused), then reports the hero against its pre-registered prediction: the
extrapolation (hero compute over the top rung's), the relative error of the final loss and whether
the 90% interval held it, the error at every 5% of the hero's training, and every rollback.

Part 4 (``--isoflop --lab LAB``): trains ``isoflop_ladder`` into LAB (sharing the long ladder's data
step), and reports approach 3's compute-optimal tokens per parameter with its interval and its
prediction of the long ladder's hero (when LAB holds it) beside L(C)'s.

Part 5 (``--selfcal --lab LAB``): trains the two self-calibrated grid ladders into LAB — protocol (a)
``selfcal_ladder`` (the long ladder's data at context 64, its d88 hero: a back-test, the hero's loss is
known) and protocol (b) ``selfcal_ladder_128`` (context 128, configuration fixed in advance in
``docs/ladder.md``) — and reports, for each, the floor the grid found with its interval, the hero's
registered prediction against its final loss, and its whole curve against the band. ``--protocol a`` or
``b`` trains one. The synthetic part adds the grid fit's coverage over synthetic grids drawn from a known
law (with the fitted law and noise of protocol (a) when LAB holds it).

Part 6 (``--synthetic``, minutes; alone): the registration gate over synthetic grids drawn from known
laws (``glasslab.ladder.gate_sim``: narrow, medium and wide designs in N, noise 0.3–1%), each labelled
by the truth — ill-posed when the ungated fit misses the true law at the hero by > 3%, well-posed when
within 1.5% — with how often the gate refuses the first and registers the second, and the coverage
and error of what it registers. ``--smoke`` runs it on six grids.

With ``--estimate`` (instead of ``--lab``), parts 3 and 4 train nothing: each planned run's step is
timed in CPU seconds per thread (a quiet machine's wall time, even when the machine is shared) and
the ladder's training minutes are projected from the plan's step counts.

    python bench/ladder_bench.py --smoke                      # seconds: synthetic only
    python bench/ladder_bench.py --synthetic                  # minutes: the registration gate, 240 grids
    python bench/ladder_bench.py --long --lab LAB             # <= 60 min on 2 cores
    python bench/ladder_bench.py --isoflop --lab LAB          # <= 30 min on 2 cores
    python bench/ladder_bench.py --long --isoflop --estimate  # minutes: projected training time
    python bench/ladder_bench.py --lab LAB --ladder tiny --L-inf 1.0 --sweep 0.5 1.5
    python bench/ladder_bench.py --selfcal --lab LAB          # <= 90 min per protocol on 2 cores
    python bench/ladder_bench.py --selfcal --smoke            # minutes: both protocols' DAGs, tiny
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from interleave import LoadWatch, headline, interleaved, paired_ratios
from scipy.optimize import least_squares

from glasslab import track
from glasslab.ladder.approach3 import approach3_record
from glasslab.ladder.compute_law import ComputeLaw
from glasslab.ladder.fit import fit_ladder, read_fit
from glasslab.ladder.gate_sim import DESIGNS, gate_figures, simulate_grid, width_frontier
from glasslab.ladder.grid_ends import GRID_FLOOR, EndpointLaw
from glasslab.ladder.grid_law import GridLaw
from glasslab.ladder.grid_sim import TRUE_LAW, interval_coverage
from glasslab.ladder.predict import CURVE_FRACTIONS, predict
from glasslab.ladder.rungs import Rung
from glasslab.ladder.runs import find_ladder_runs, read_rungs
from glasslab.ladder.uncertainty import bootstrap_laws, estimate_noise
from glasslab.layout import FIT_FILE, METRICS_DB, RESULT_FILE

CHINCHILLA = Path(__file__).resolve().parents[2] / "shared" / "data" / "chinchilla_points.csv"
SYNTHETIC_LAW = ComputeLaw(1.8, 300.0, 0.15)


def synthetic_ladder(rng: np.random.Generator, law: ComputeLaw = SYNTHETIC_LAW, seeds: int = 3) -> list[Rung]:
    """Five rungs over two decades, ``seeds`` seeds, 0.5% noise, evals at every 5% of training."""
    rungs = []
    for i, flops in enumerate(np.geomspace(1e15, 1e17, 5)):
        noisy = lambda c: tuple(float(law(c)) * np.exp(0.005 * rng.standard_normal(seeds)))  # noqa: B023
        partial = {f: noisy(f * flops) for f in CURVE_FRACTIONS[:-1]}
        rungs.append(Rung(f"r{i}", float(flops), noisy(flops), partial=partial))
    return rungs


def coverage(mode: str, replicates: int) -> float:
    """Share of synthetic ladders (0.5% noise, 3 seeds) whose 90% interval at 10x holds the true loss.

    ``mode``: ``exact`` (L∞ pinned at the truth, no doubt about it), ``free`` (L∞ fitted), or
    ``misspecified`` (the truth's L∞ uniform within ± 0.3 of the pinned 1.8; the default interval)."""
    rng = np.random.default_rng(11)
    covered = 0
    for rep in range(replicates):
        law = SYNTHETIC_LAW
        if mode == "misspecified":
            law = ComputeLaw(1.8 + rng.uniform(-0.3, 0.3), SYNTHETIC_LAW.A, SYNTHETIC_LAW.alpha)
        rungs = [Rung(f"r{i}", float(c), tuple(float(law(c)) * np.exp(0.005 * rng.standard_normal(3))))
                 for i, c in enumerate(np.geomspace(1e15, 1e17, 5))]
        L_inf, prior = {"exact": (1.8, (1.8, 1.8)), "free": (None, None), "misspecified": (1.8, None)}[mode]
        p = predict(rungs, 1e18, L_inf=L_inf, L_inf_prior=prior, num_bootstrap=400, seeds_at_target=None,
                    seed=rep)
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
        rows = sorted(csv.DictReader(f), key=lambda r: float(r["loss"]))[:-5]  # Epoch's five outliers dropped
    rungs = [Rung(f"p{i}", float(r["flops"]), (float(r["loss"]),), params_active=float(r["params"]),
                  tokens=float(r["flops"]) / (6 * float(r["params"]))) for i, r in enumerate(rows)]
    start = time.perf_counter()
    approach3_record(rungs, 5.76e23, None, num_bootstrap=100)
    return time.perf_counter() - start


def bootstrap_speedup(rungs: list[Rung], replicates: int = 300, repeats: int = 5) -> dict[str, list[float]]:
    """Seconds per replicate: the vectorised refit (``vectorised``) vs a scipy least-squares fit per replicate
    (``looped``), ``replicates`` of each in ``repeats`` interleaved rounds (bench/interleave.py); by round."""
    from glasslab.ladder.compute_law import fit_compute_law

    law = fit_compute_law(rungs, 1.8)
    noise = estimate_noise(rungs, law)
    rng = np.random.default_rng(0)
    log_c = np.log([r.flops for r in rungs])
    fitted = np.asarray(law(np.exp(log_c)))
    chunk = replicates // repeats

    def vectorised() -> float:
        start = time.perf_counter()
        bootstrap_laws(rungs, law, noise, num_bootstrap=chunk, rng=rng)
        return (time.perf_counter() - start) / chunk

    def looped() -> float:
        start = time.perf_counter()
        for _ in range(chunk):
            loss = fitted * np.exp(noise.sigma * rng.standard_normal(len(rungs)))
            residual = lambda p, loss=loss: np.log(1.8 + np.exp(p[0] - p[1] * log_c)) - np.log(loss)
            least_squares(residual, x0=[np.log(law.A), law.alpha])
        return (time.perf_counter() - start) / chunk

    return interleaved({"vectorised": vectorised, "looped": looped}, repeats)


# --- trained ladders ------------------------------------------------------------------------------


def _result(run_dir: Path) -> dict:
    path = run_dir / RESULT_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _repetition(run_dir: Path) -> str:
    """The most-repeated domain of a run (from ``mixture/epochs/*`` in its result.json), as text."""
    epochs = {k.removeprefix("mixture/epochs/"): v for k, v in _result(run_dir).items()
              if k.startswith("mixture/epochs/")}
    if not epochs:
        return ""
    domain = max(epochs, key=epochs.get)
    return f"; most repeated: {domain} ×{epochs[domain]:.1f}"


def _shape(run_dir: Path) -> str:
    """Embedding share of a run's active parameters and the LM head's share of its FLOPs, as text."""
    record = track.read_record(run_dir) or {}
    model = record.get("config", {}).get("model", {})
    if not model:
        return ""
    from glasslab.config import from_dict
    from glasslab.model import ModelConfig

    cfg = from_dict(ModelConfig, model)
    counts = cfg.param_counts()
    head = cfg.head_flops_per_token() / cfg.flops_per_token(int(record.get("seq_len", 64)))
    return f"; embeddings {counts['embedding'] / counts['active']:.0%} of params, LM head {head:.0%} of FLOPs"


def trained_ladder_report(lab: Path, ladder: str | None, L_inf: float | None,
                          sweep: list[float]) -> float | None:
    """Print the back-test of the ladder trained in ``lab``; returns the headline error in percent."""
    rungs = read_rungs(find_ladder_runs(lab, ladder))
    for rung in rungs:
        print(f"rung {rung.name} ({rung.size_name}): {rung.flops:.3g} FLOPs outside the LM head, loss "
              f"{rung.loss_mean:.4f} ± {rung.loss_std:.4f} over {len(rung.losses)} seeds"
              f"{_repetition(lab / rung.run_ids[0])}")
    fit = fit_ladder(rungs, ladder=ladder or "ladder", target_flops=10 * max(r.flops for r in rungs),
                     L_inf=L_inf, sweep=sweep)
    return _print_backtest(fit)


def _print_backtest(fit: dict) -> float | None:
    last = fit["backtest"]["last"]
    if last is None:
        print("back-test: too few rungs to hold the largest one out")
        return None
    for step in fit["backtest"]["steps"]:
        print(f"fit on {len(step['fit_rungs'])} rungs → {step['held_out']} ({step['extrapolation']:.1f}x): "
              f"predicted {step['point']:.4f} [{step['lo']:.4f}, {step['hi']:.4f}], measured "
              f"{step['measured']:.4f}, error {step['rel_error_pct']:+.2f}%, covered {step['covered']}")
    return abs(last["rel_error_pct"])


def run_experiment(name: str, lab: Path, jobs: int, smoke: bool = False) -> tuple[dict[str, Path], float]:
    """Run built-in experiment ``name`` (its ``smoke_steps()`` with ``smoke``) into ``lab`` (finished steps
    are reused); returns each step's folder by step name and the wall seconds this call spent."""
    import importlib

    from glasslab.lab import Executor, load_experiment
    from glasslab.lab.pool import InlinePool

    steps = importlib.import_module(f"glasslab.experiments.{name}").smoke_steps() if smoke else load_experiment(name)
    # A smoke's tiny grid cannot identify its law (the gate refuses it): its hero runs forced, marked so.
    # A smoke's runs are seconds each: in this process, torch is imported once instead of once a step.
    backend = InlinePool() if smoke else "local"
    executor = Executor(lab, backend=backend, jobs=1 if smoke else jobs, force_registration=smoke)
    start = time.perf_counter()
    report = executor.run(steps)
    wall = time.perf_counter() - start
    if not report.ok:
        raise SystemExit(f"{name}: some steps failed (see `glasslab status --lab {lab}`)")
    return {p.name: p.folder for p in executor.plan(steps).steps}, wall


def _span_minutes(folders: dict[str, Path]) -> float:
    """Minutes from the first step's start to the last step's finish, from their step.json records."""
    from glasslab.lab import read_step_record

    timings = [r["timings"] for r in map(read_step_record, folders.values()) if r and r.get("timings")]
    starts = [t["started"] for t in timings if t.get("started")]
    ends = [t["finished"] for t in timings if t.get("finished")]
    return (max(ends) - min(starts)) / 60 if starts and ends else float("nan")


def count_rollbacks(run_dirs: list[Path]) -> dict[str, int]:
    """Rollback incidents per run folder (only runs that had any)."""
    found = {}
    for run_dir in run_dirs:
        if not (run_dir / METRICS_DB).is_file():
            continue
        with track.RunReader(run_dir) as reader:
            count = sum(e["kind"] == "rollback" for e in reader.events())
        if count:
            found[run_dir.name] = count
    return found


def hero_curve_errors(fit: dict, hero_dir: Path) -> list[tuple[float, float, float, bool]]:
    """(fraction, predicted, measured, covered) at every 5% of the hero's training where both exist."""
    hero = read_rungs([hero_dir])[0]
    measured = {**hero.partial, 1.0: (hero.loss_mean,)}
    rows = []
    for point in fit["curve"]:
        fraction = point["fraction"]
        if fraction in measured:
            actual = float(np.mean(measured[fraction]))
            rows.append((fraction, point["point"], actual, point["lo"] <= actual <= point["hi"]))
    return rows


def measured_step_seconds(rung, threads: int, steps: int) -> float:
    """CPU seconds per thread of one optimiser step (forward, backward, AdamW on random tokens) of
    ``rung``'s model and batch: what a quiet machine's wall time would be, even on a shared one."""
    import torch

    from glasslab.model.transformer import Transformer

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Transformer(rung.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=rung.learning_rate)
    tokens = torch.randint(0, rung.model.vocab_size, (rung.batch_size, rung.seq_len + 1))

    def step() -> None:
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    step()  # first-call allocations
    start = time.process_time()
    for _ in range(steps):
        step()
    return (time.process_time() - start) / steps / threads


def estimate_minutes(name: str, jobs: int, smoke: bool) -> float:
    """Print each planned run's measured step time and minutes; return the ladder's projected wall
    minutes on a quiet machine: rungs ``jobs`` at a time (one thread each), then the hero (``jobs``
    threads). Training steps only: the data build, evals and the fit come on top."""
    import importlib

    from glasslab.ladder.plan import plan_ladder

    plan = plan_ladder(importlib.import_module(f"glasslab.experiments.{name}").spec())
    rung_minutes = 0.0
    timed: dict[str, float] = {}  # a grid's branches share their trunk's model and batch: one timing a width
    for rung in (*plan.trunks, *plan.rungs):
        key = rung.trunk or rung.name
        seconds = timed[key] = timed.get(key) or measured_step_seconds(rung, 1, 2 if smoke else 10)
        steps = rung.steps - rung.fork_step  # a branch trains only its cooldown
        minutes = seconds * steps / 60
        rung_minutes += minutes * len(rung.seeds)
        print(f"{name} {rung.name}: {1e3 * seconds:.0f} ms/step × {steps} steps = {minutes:.1f} min "
              f"× {len(rung.seeds)} seeds")
    hero_minutes = 0.0
    if name != "isoflop_ladder":
        # Timed on one thread: on a shared machine a second thread's spin-waits count as CPU time. The
        # projection divides by the threads, so it is the ideal-scaling (lower) end.
        seconds = measured_step_seconds(plan.hero, 1, 1 if smoke else 3)
        one_thread = seconds * plan.hero.steps / 60
        hero_minutes = one_thread / jobs
        print(f"{name} {plan.hero.name}: {1e3 * seconds:.0f} ms/step × {plan.hero.steps} steps = {one_thread:.1f} "
              f"min on one thread ({plan.hero.flops / (60 * one_thread) / 1e9:.1f} GFLOP/s), {hero_minutes:.1f} min "
              f"on {jobs} at ideal scaling")
    total = rung_minutes / jobs + hero_minutes
    print(f"{name}: rungs {rung_minutes:.1f} min of one core ({rung_minutes / jobs:.1f} min with {jobs} at once), "
          f"hero {hero_minutes:.1f} min: {total:.0f} min of training on a quiet machine "
          f"(CPU time per thread; load average now {os.getloadavg()[0]:.1f})")
    return total


def long_report(lab: Path, jobs: int, smoke: bool = False) -> dict[str, float]:
    """Train (or reuse) long_ladder (its smoke size with ``smoke``) in ``lab``; print the hero against its
    prediction; return headlines."""
    folders, wall = run_experiment("long_ladder", lab, jobs, smoke)
    ladder = "long-smoke" if smoke else "long"
    fit = read_fit(folders[f"{ladder}-fit"] / FIT_FILE)
    hero_dir = folders[f"{ladder}-hero"]
    rung_dirs = [folder for name, folder in folders.items()
                 if name not in ("data", f"{ladder}-fit", f"{ladder}-hero")]
    for rung in read_rungs(rung_dirs):
        print(f"rung {rung.name} ({rung.size_name}): {rung.flops:.3g} FLOPs outside the LM head, loss "
              f"{rung.loss_mean:.4f} ± {rung.loss_std:.4f} over {len(rung.losses)} seeds{_shape(lab / rung.run_ids[0])}"
              f"{_repetition(lab / rung.run_ids[0])}")
    law = fit["law"]["params"]
    prior = fit["L_inf"]["prior"]
    print(f"law: L(C) = {law['L_inf']:.3g} + {law['A']:.4g}·C^-{law['alpha']:.4f} (L∞ {fit['L_inf']['mode']}, "
          f"prior {prior['low']:.2f}–{prior['high']:.2f} from {prior['source']})")
    _print_backtest(fit)
    predicted = fit["prediction"]
    hero = read_rungs([hero_dir])[0]
    measured = hero.loss_mean
    top = max(r["flops"] for r in fit["rungs"])
    top_total = max(r["total_flops"] for r in fit["rungs"])
    error = 100 * (predicted["point"] - measured) / measured
    covered = predicted["lo"] <= measured <= predicted["hi"]
    print(f"hero {hero.size_name}{_shape(hero_dir)}{_repetition(hero_dir)}")
    print(f"hero: predicted {predicted['point']:.4f} [{predicted['lo']:.4f}, {predicted['hi']:.4f}] at "
          f"{predicted['flops']:.3g} FLOPs outside the LM head ({predicted['flops'] / top:.0f}x the top rung; "
          f"{hero.total_flops / top_total:.0f}x in all FLOPs), measured "
          f"{measured:.4f}: error {error:+.2f}%, inside the 90% interval: {covered}")
    print("hero curve (fraction of training: predicted, measured, error, inside the band):")
    curve = hero_curve_errors(fit, hero_dir)
    for fraction, point, actual, inside in curve:
        print(f"  {fraction:4.0%}: {point:.4f} vs {actual:.4f}  {100 * (point - actual) / actual:+6.2f}%  {inside}")
    rollbacks = count_rollbacks([*rung_dirs, hero_dir])
    print(f"rollbacks: {rollbacks or 'none'}")
    print(f"long ladder: {wall / 60:.1f} min in this call; steps span {_span_minutes(folders):.1f} min "
          f"(load average now {os.getloadavg()[0]:.1f})")
    late = [abs(100 * (p - a) / a) for f, p, a, _ in curve if f >= 0.5]
    return {"extrapolation": predicted["flops"] / top, "rel_error_pct": error, "covered": covered,
            "rollbacks": sum(rollbacks.values()), "minutes": _span_minutes(folders),
            "curve_max_abs_error_pct_after_half": max(late) if late else float("nan")}


def isoflop_report(lab: Path, jobs: int, smoke: bool = False) -> dict[str, float]:
    """Train (or reuse) isoflop_ladder (its smoke size with ``smoke``) in ``lab``; print approach 3 and its
    prediction of the long hero (the long smoke hero with ``smoke``)."""
    folders, wall = run_experiment("isoflop_ladder", lab, jobs, smoke)
    suffix = "-smoke" if smoke else ""
    fit = read_fit(folders[f"isoflop{suffix}-fit"] / FIT_FILE)
    a3 = fit["approach3"]
    if not a3["fitted"]:
        raise SystemExit(f"isoflop ladder: approach 3 not fitted ({a3['reason']})")
    for rung in fit["rungs"]:
        print(f"rung {rung['name']} ({rung['size_name']}): {rung['tokens'] / rung['params_active']:.1f} tokens/param, "
              f"loss {rung['loss_mean']:.4f} over {len(rung['losses'])} seeds")
    p, se = a3["params"], a3["param_se"]
    print("approach 3: L(N,D) = " + ", ".join(f"{k} {p[k]:.4g} ± {se.get(k, float('nan')):.2g}" for k in p))
    optimal = a3["compute_optimal"]
    low, high = optimal["tokens_per_param_interval"]
    print(f"compute-optimal at {optimal['flops']:.3g} FLOPs: N {optimal['params_active']:.3g}, "
          f"D {optimal['tokens']:.3g}, {optimal['tokens_per_param']:.1f} tokens/param [90%: {low:.1f}, {high:.1f}]")
    headlines = {"tokens_per_param": optimal["tokens_per_param"], "tokens_per_param_lo": low,
                 "tokens_per_param_hi": high, "hero_error_pct": float("nan")}
    long_hero = next(iter(sorted(lab.glob(f"long{suffix}-hero-*"))), None)
    if long_hero is None or not (long_hero / RESULT_FILE).is_file():
        print("long ladder hero: not in this lab (run --long first to compare)")
    else:
        record = track.read_record(long_hero)
        tokens = float(record["steps"]) * float(record["batch_size"]) * float(record["seq_len"])
        target = a3["target"]  # the isoFLOP plan's hero: the long ladder's
        if (target["params_active"], target["tokens"]) != (float(record["params_active"]), tokens):
            print(f"long hero: N {record['params_active']}, D {tokens:.4g}; approach 3 predicted N "
                  f"{target['params_active']:.4g}, D {target['tokens']:.4g}, another run: no comparison")
            return headlines
        point, low, high = target["point"], target["lo"], target["hi"]
        measured = read_rungs([long_hero])[0].loss_mean
        headlines["hero_error_pct"] = 100 * (point - measured) / measured
        print(f"long hero ({record['size_name']}, {tokens / float(record['params_active']):.1f} tokens/param): "
              f"approach 3 predicts {point:.4f} [{low:.4f}, {high:.4f}], measured {measured:.4f}: "
              f"error {headlines['hero_error_pct']:+.2f}%")
        long_fit = next(iter(sorted(lab.glob(f"long{suffix}-fit-*"))), None)
        if long_fit is not None:
            lc = read_fit(long_fit / FIT_FILE)["prediction"]
            print(f"  beside L(C) from the long ladder: {lc['point']:.4f} [{lc['lo']:.4f}, {lc['hi']:.4f}], "
                  f"error {100 * (lc['point'] - measured) / measured:+.2f}%")
    frontier = fit["prediction"]
    print(f"  and L(C) from the isoFLOP frontier ({len(fit['law']['fitted_on'])} best sizes): {frontier['point']:.4f} "
          f"[{frontier['lo']:.4f}, {frontier['hi']:.4f}] at {frontier['flops']:.3g} FLOPs")
    print(f"isoflop ladder: {wall / 60:.1f} min in this call; steps span {_span_minutes(folders):.1f} min "
          f"(load average now {os.getloadavg()[0]:.1f})")
    return headlines


SELFCAL = {"a": "selfcal_ladder", "b": "selfcal_ladder_128"}
"""The two protocols of docs/ladder.md: (a) the back-test at context 64, (b) context 128, fixed in advance."""


def selfcal_report(protocol: str, lab: Path, jobs: int, smoke: bool = False) -> dict:
    """Train (or reuse) protocol ``protocol``'s grid ladder (its smoke size with ``smoke``) in ``lab``; print
    the floor, the grid's checks, the hero against its registered prediction and its curve against the band;
    return headlines."""
    import importlib

    name = SELFCAL[protocol]
    folders, wall = run_experiment(name, lab, jobs, smoke)
    ladder = importlib.import_module(f"glasslab.experiments.{name}").LADDER + ("-smoke" if smoke else "")
    fit = read_fit(folders[f"{ladder}-fit"] / FIT_FILE)
    hero_dir = folders[f"{ladder}-hero"]
    print(f"--- protocol ({protocol}): {name}, ladder {ladder}")
    for rung in fit["rungs"]:
        spread = f" ± {rung['loss_std']:.4f}" if len(rung["losses"]) > 1 else ""
        ratio = rung["tokens"] / rung["params_active"]
        print(f"grid point {rung['name']} ({rung['size_name']}): {ratio:.1f} tokens/param, "
              f"{rung['flops']:.3g} FLOPs outside the LM head, loss {rung['loss_mean']:.4f}{spread} "
              f"over {len(rung['losses'])} seeds")
    law, noise = fit["law"], fit["law"]["noise"]
    print(f"end-point law {law['form']} on {law['points']} branch ends: "
          + ", ".join(f"{k} {v:.4g}" for k, v in law["params"].items())
          + f" (a run's offset {noise['sigma']:.4f} with {noise['dof']} dof)")
    print(f"floor: {fit['L_inf']['text']}")
    shape = fit["curve_law"]
    print(f"curve law {shape['form']} on {shape['points']} evals: " + ", ".join(
        f"{k} {v:.4g}" for k, v in shape["params"].items()) + f" (along a curve {shape['noise']['sigma_within']:.4f})")
    grid = fit["grid"]
    check = grid["difference_check"]
    if check.get("beta") is not None:
        print(f"difference check: beta {check['beta']:.3f} from {check['pairs']} pairs of branches (E cancels) "
              f"against the end-point law's {check['beta_law']:.3f}")
    _print_backtest(fit)
    gate = fit["gate"]
    print(f"registration gate: {'registers' if gate['registered'] else 'REFUSES'}"
          + "".join(f"; {reason}" for reason in gate["reasons"]))
    predicted = fit["prediction"]
    measured = read_rungs([hero_dir])[0].loss_mean if (hero_dir / RESULT_FILE).is_file() else None
    top = max(r["flops"] for r in fit["rungs"])
    reach = predicted["flops"] / top
    print(f"hero: registered {predicted['point']:.4f} [{predicted['lo']:.4f}, {predicted['hi']:.4f}] at "
          f"{predicted['flops']:.3g} FLOPs outside the LM head ({reach:.0f}x the top grid point)")
    headlines = {"extrapolation": reach, "floor": fit["L_inf"]["value"], "floor_lo": fit["L_inf"]["lo"],
                 "floor_hi": fit["L_inf"]["hi"], "rel_error_pct": float("nan"), "covered": None,
                 "curve_coverage": float("nan"), "curve_halfwidth_pct": float("nan"),
                 # The data step is shared by both protocols in one lab: its time belongs to the first.
                 "minutes": _span_minutes({k: v for k, v in folders.items() if k != "data"} if protocol == "b"
                                          else folders), "law": shape["params"], "noise": noise["sigma"]}
    late = [c for c in fit["curve"] if c["fraction"] >= 0.1 - 1e-9]
    headlines["curve_halfwidth_pct"] = float(np.median([100 * (c["hi"] - c["lo"]) / 2 / c["point"] for c in late]))
    if measured is not None:
        error = 100 * (predicted["point"] - measured) / measured
        covered = predicted["lo"] <= measured <= predicted["hi"]
        print(f"hero measured {measured:.4f}: error {error:+.2f}%, inside the 90% interval: {covered}")
        hero = read_rungs([hero_dir])[0]
        at = {**hero.partial, 1.0: (hero.loss_mean,)}
        print("hero curve (fraction of training: predicted [90%], measured, error, inside the band):")
        inside = []
        for c in fit["curve"]:
            if c["fraction"] in at:
                actual = float(np.mean(at[c["fraction"]]))
                ok = c["lo"] <= actual <= c["hi"]
                if c["fraction"] >= 0.1 - 1e-9:
                    inside.append(ok)
                print(f"  {c['fraction']:4.0%}: {c['point']:.4f} [{c['lo']:.4f}, {c['hi']:.4f}] vs {actual:.4f}  "
                      f"{100 * (c['point'] - actual) / actual:+6.2f}%  {ok}")
        headlines.update(rel_error_pct=error, covered=covered, curve_coverage=float(np.mean(inside)) if inside else
                         float("nan"))
    else:
        print("hero: not finished in this lab")
    print(f"protocol ({protocol}): {wall / 60:.1f} min in this call; steps span {headlines['minutes']:.1f} min "
          f"(load average now {os.getloadavg()[0]:.1f})")
    return headlines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", type=Path, default=None, help="lab root holding (or to hold) trained ladders")
    parser.add_argument("--ladder", default=None, help="back-test this ladder of --lab")
    parser.add_argument("--L-inf", dest="L_inf", default="free", help="asymptote to pin for --ladder, or 'free'")
    parser.add_argument("--sweep", nargs="*", type=float, default=[])
    parser.add_argument("--long", action="store_true", help="train (or reuse) long_ladder in --lab and report")
    parser.add_argument("--isoflop", action="store_true", help="train (or reuse) isoflop_ladder in --lab and report")
    parser.add_argument("--selfcal", action="store_true",
                        help="train (or reuse) the self-calibrated grid ladders, protocols (a) and (b), and report")
    parser.add_argument("--protocol", choices=("a", "b", "both"), default="both", help="with --selfcal: which")
    parser.add_argument("--ladders", type=int, default=None,
                        help="synthetic grids for the grid fit's coverage (default 100; 2 with --smoke)")
    parser.add_argument("--synthetic", action="store_true",
                        help="only the registration gate over synthetic grids of known laws (minutes)")
    parser.add_argument("--protocol-b-points", type=Path, default=None, metavar="CSV",
                        help="only write protocol (b)'s grid drawn from its registered law (a points file)")
    parser.add_argument("--grids", type=int, default=240, help="synthetic grids for --synthetic (default 240)")
    parser.add_argument("--jobs", type=int, default=2, help="steps at once for --long/--isoflop (default 2)")
    parser.add_argument("--estimate", action="store_true",
                        help="with --long/--isoflop: measure each planned run's step time and project the "
                        "ladder's minutes instead of training it")
    parser.add_argument("--smoke", action="store_true",
                        help="seconds: small synthetic checks; with --long/--isoflop, the ladders at 0.5 tokens "
                        "per parameter or budgets / 20 (minutes)")
    args = parser.parse_args()
    if args.protocol_b_points:
        write_protocol_b_points(args.protocol_b_points)
        return
    if args.synthetic:
        gate_report(3 if args.smoke else args.grids)
        return
    if (args.long or args.isoflop or args.ladder) and args.lab is None and not args.estimate:
        parser.error("--long, --isoflop and --ladder need --lab (or --estimate)")
    if args.selfcal and args.lab is None and not (args.smoke or args.estimate):
        parser.error("--selfcal needs --lab (or --smoke, which trains into a temporary lab)")

    estimates = {}
    if args.estimate:
        protocols = (("a", "b") if args.protocol == "both" else (args.protocol,)) if args.selfcal else ()
        for flag, name in ((args.long, "long_ladder"), (args.isoflop, "isoflop_ladder"),
                           *((True, SELFCAL[p]) for p in protocols)):
            if flag:
                estimates[name] = estimate_minutes(name, args.jobs, args.smoke)
        args.long = args.isoflop = args.selfcal = False
    long = long_report(args.lab, args.jobs, args.smoke) if args.long else None  # training first: it takes the hour
    iso = isoflop_report(args.lab, args.jobs, args.smoke) if args.isoflop else None
    selfcal = {}
    if args.selfcal:
        lab = args.lab or Path(tempfile.mkdtemp(prefix="selfcal-smoke-"))
        try:
            for protocol in ("a", "b") if args.protocol == "both" else (args.protocol,):
                selfcal[protocol] = selfcal_report(protocol, lab, args.jobs, args.smoke)
        finally:
            if args.lab is None:
                shutil.rmtree(lab, ignore_errors=True)
        if args.smoke:  # the synthetic arms below have their own smoke (plain --smoke)
            _print_selfcal_headlines(selfcal)
            return
    error = None
    if args.ladder is not None:
        error = trained_ladder_report(args.lab, args.ladder, None if args.L_inf == "free" else float(args.L_inf),
                                      args.sweep)
    replicates = 40 if args.smoke else 1000
    rungs = synthetic_ladder(np.random.default_rng(0))
    full_fit = time_full_fit(rungs)
    chinchilla = None if args.smoke else time_chinchilla()
    refit = bootstrap_speedup(rungs, replicates=30 if args.smoke else 300, repeats=2 if args.smoke else 5)
    vectorised, looped = statistics.median(refit["vectorised"]), statistics.median(refit["looped"])
    coverage_exact = coverage("exact", replicates)
    coverage_free = coverage("free", replicates // 5)
    coverage_misspecified = coverage("misspecified", replicates)
    # The grid fit's intervals over synthetic grids of a known law: protocol (a)'s fitted law and run noise when
    # it was fitted here (the rungs' noise), else a law of the same shape.
    source = selfcal.get("a") if selfcal and not args.smoke else None
    grid_law = GridLaw(**source["law"]) if source else TRUE_LAW
    ladders = args.ladders or (1 if args.smoke else 100)
    start = time.perf_counter()
    grid = interval_coverage(ladders, law=grid_law, family_sigma=source["noise"] if source else 0.004,
                             num_bootstrap=50 if args.smoke else 200)
    grid_seconds = time.perf_counter() - start

    print(f"bootstrap refit: {vectorised * 1e6:.0f} us/replicate vectorised, {looped * 1e6:.0f} us/replicate "
          "with one scipy least_squares per replicate (medians)")
    print(f"ladder_full_fit_seconds: {full_fit:.2f}  (target < 10; 5 rungs, 20 curve points, 1000 bootstrap)")
    if chinchilla is not None:
        print(f"ladder_approach3_chinchilla_seconds: {chinchilla:.2f}  (target: seconds, not minutes)")
    speedups = paired_ratios(refit["looped"], refit["vectorised"])
    print(f"ladder_bootstrap_vectorised_speedup: {headline(speedups, 'vs one scipy fit per replicate', digits=0)}")
    print(f"ladder_interval_coverage_pinned: {coverage_exact:.3f}  (target 0.85-0.95; L∞ known exactly; "
          f"{replicates} ladders)")
    print(f"ladder_interval_coverage_free: {coverage_free:.3f}  (target 0.85-0.95; {replicates // 5} ladders)")
    print(f"ladder_interval_coverage_misspecified_L_inf: {coverage_misspecified:.3f}  (target 0.85-0.95; true L∞ "
          f"within ±0.3 of the pinned value, default interval; {replicates} ladders)")
    print(f"ladder_selfcal_interval_coverage: {grid.final:.3f}  (target 0.85-0.95; the hero's final loss over "
          f"{grid.ladders} synthetic grids of {'protocol (a)' if source else 'a'} known law; floor E {grid.floor:.3f}, "
          f"curve 10-100% {grid.curve:.3f}, band half-width {grid.curve_halfwidth_pct:.2f}%; "
          f"{grid_seconds / grid.ladders:.1f} s a grid)")
    if args.ladder is not None:
        print(f"ladder_backtest_rel_error_pct: {'n/a' if error is None else f'{error:.2f}'}  (target <= 1.5)")
    for name, minutes in estimates.items():
        target = {"long_ladder": 60, "isoflop_ladder": 30}.get(name, 90)
        print(f"ladder_{name.removesuffix('_ladder')}_estimated_training_minutes: {minutes:.0f}  (target <= "
              f"{target} in all; measured step times, quiet machine)")
    if long is not None:
        print(f"ladder_long_extrapolation: {long['extrapolation']:.0f}  (target >= 30)")
        print(f"ladder_long_rel_error_pct: {long['rel_error_pct']:+.2f}  (target |E| <= 2.0, stretch <= 1.0; "
              f"inside the 90% interval: {long['covered']})")
        print(f"ladder_long_curve_max_abs_error_pct_second_half: {long['curve_max_abs_error_pct_after_half']:.2f}  "
              "(context: the predicted curve from 50% of training on)")
        print(f"ladder_long_rollbacks: {long['rollbacks']}  (target 0)")
        print(f"ladder_long_minutes: {long['minutes']:.1f}  (target <= 60 on 2 cores with 2 jobs)")
    if selfcal:
        _print_selfcal_headlines(selfcal)
    if iso is not None:
        print(f"ladder_approach3_tokens_per_param: {iso['tokens_per_param']:.1f}  (90% interval "
              f"{iso['tokens_per_param_lo']:.1f}-{iso['tokens_per_param_hi']:.1f}; at the long hero's compute)")
        print(f"ladder_approach3_long_hero_rel_error_pct: {iso['hero_error_pct']:+.2f}  (context: L(C)'s above)")
    if args.smoke:
        # One grid of each design, fewer replicates: seconds. Still able to fail: the narrow design must be
        # refused (its span of N) and the wide one registered, or the gate has stopped telling them apart.
        outcomes = gate_report(3, num_bootstrap=100)
        verdicts = {o.design: o.registered for o in outcomes}
        if verdicts.get("narrow") or not verdicts.get("wide"):
            raise SystemExit(f"gate smoke: expected the narrow grid refused and the wide one registered; got "
                             f"{verdicts}")


def gate_report(grids: int, seed: int = 0, num_bootstrap: int = 400) -> list:
    """Simulate ``grids`` synthetic grids (the designs in turn, ``num_bootstrap`` replicates each), print each
    design's counts and the gate's headlines (``gate_sim``); returns the outcomes."""
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    outcomes = [simulate_grid(rng, design, num_bootstrap=num_bootstrap)
                for _, design in zip(range(grids), itertools.cycle(DESIGNS))]
    seconds = time.perf_counter() - start
    for design in DESIGNS:
        mine = [o for o in outcomes if o.design == design]
        labels = {label: sum(o.label == label for o in mine) for label in ("ill-posed", "neither", "well-posed")}
        print(f"gate {design}: {len(mine)} grids, {labels}, registered {sum(o.registered for o in mine)}")
    figures = gate_figures(outcomes)
    counts = (f"{figures['ill_posed_grids']:.0f} ill-posed, {figures['well_posed_grids']:.0f} well-posed, "
              f"{figures['registered_grids']:.0f} registered of {len(outcomes)} grids; "
              f"{seconds / len(outcomes):.2f} s a grid")
    print(f"gate_refuses_ill_posed: {figures['gate_refuses_ill_posed']:.3f}  (target >= 0.9; {counts})")
    print(f"gate_registers_well_posed: {figures['gate_registers_well_posed']:.3f}  (target >= 0.9)")
    print(f"interval_coverage_90: {figures['interval_coverage_90']:.3f}  (target 0.85-0.95; one hero run's loss, "
          "registered grids)")
    print(f"median_abs_error_registered_pct: {figures['median_abs_error_registered_pct']:.2f}  (registered grids)")
    print("gate frontier (the interval-width rule at other half-widths, every other check as it is; refuses "
          "ill-posed / registers well-posed): " + "; ".join(f"{cut:g}%: {ill:.2f} / {well:.2f}" for cut, (ill, well)
                                                             in width_frontier(outcomes).items()))
    hero_floor_report(outcomes, grids, seed, num_bootstrap)
    return outcomes


def hero_floor_report(plain: list, grids: int, seed: int, num_bootstrap: int = 400) -> None:
    """The same grids (same seed) with an earlier hero of the same recipe in the registry (``gate_sim``,
    ``hero_floor``): how many register, how well, and what the heroes' floor does for the grids the gate
    refused on their own."""
    rng, hero_rng = np.random.default_rng(seed), np.random.default_rng(seed + 1)
    start = time.perf_counter()
    outcomes = [simulate_grid(rng, design, hero_rng=hero_rng, num_bootstrap=num_bootstrap)
                for _, design in zip(range(grids), itertools.cycle(DESIGNS))]
    seconds = time.perf_counter() - start
    registered = [o for o in outcomes if o.registered]
    rescued = [o for o, alone in zip(outcomes, plain, strict=True) if o.registered and not alone.registered]
    refused_alone = sum(not o.registered for o in plain)
    pinned = sum(o.floor_source != GRID_FLOOR for o in registered)
    figures = gate_figures(outcomes)
    rescued_error = gate_figures(rescued)["median_abs_error_registered_pct"]
    print(f"with an earlier hero: {len(registered)} of {len(outcomes)} registered ({pinned} on the heroes' floor); "
          f"{seconds / len(outcomes):.2f} s a grid")
    print(f"hero_floor_registered_share: {len(registered) / len(outcomes):.3f}  (context: without the hero "
          f"{sum(o.registered for o in plain) / len(plain):.3f})")
    print(f"hero_floor_rescued_share: {len(rescued) / max(refused_alone, 1):.3f}  (of the {refused_alone} grids "
          f"refused alone; their median |error| {rescued_error:.2f}%)")
    print(f"hero_floor_interval_coverage_90: {figures['interval_coverage_90']:.3f}  (target 0.85-0.95; registered "
          "grids)")
    print(f"hero_floor_median_abs_error_registered_pct: {figures['median_abs_error_registered_pct']:.2f}  "
          "(registered grids)")
    print(f"hero_floor_gate_refuses_ill_posed: {figures['gate_refuses_ill_posed']:.3f}  (target >= 0.9; "
          f"{figures['ill_posed_grids']:.0f} ill-posed by the error of the fit the gate judged)")
    print(f"hero_floor_gate_registers_well_posed: {figures['gate_registers_well_posed']:.3f}  (target >= 0.9; "
          f"{figures['well_posed_grids']:.0f} well-posed)")


PROTOCOL_B_LAW = EndpointLaw(E=0.0, A=4.72e6, alpha=1.87, B=10.09, beta=0.076)
"""Protocol (b)'s registered end-point law (``docs/LOG.md``, 2026-12-02); its run offset was 0.0083."""


def write_protocol_b_points(path: Path, seed: int = 0) -> None:
    """(b)'s grid drawn from its registered law: every branch of ``selfcal_ladder_128``'s plan and seed at
    its N and forward area, each (width, seed) off the law by one offset of 0.83%; the hero's (N, D) in the
    last row's ``note``. (b)'s lab is gone: this is the back-test the gate must refuse."""
    from glasslab.experiments import long_ladder, selfcal_ladder_128
    from glasslab.ladder.curves import target_curve
    from glasslab.ladder.plan import plan_ladder
    from glasslab.ladder.steps import grid_schedule

    rng, plan, recipe = np.random.default_rng(seed), plan_ladder(selfcal_ladder_128.spec()), long_ladder.recipe()
    offsets, rows = {}, []
    for rung in plan.rungs:
        n = float(rung.model.param_counts()["active_non_embedding"])
        area = target_curve(n, grid_schedule(rung, recipe.schedule), rung.steps, rung.batch_size * rung.seq_len,
                            (1.0,)).forward_area[-1]
        for s in rung.seeds:
            offset = offsets.setdefault((rung.trunk, s), 0.0083 * rng.standard_normal())
            rows.append({"params": n, "tokens": round(float(area)), "seed": s,
                         "loss": round(float(PROTOCOL_B_LAW(n, area)) * (1 + offset), 5)})
    hero = plan.hero
    area = target_curve(0.0, recipe.schedule, hero.steps, hero.batch_size * hero.seq_len, (1.0,)).forward_area[-1]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"{path}: {len(rows)} points; hero N {hero.model.param_counts()['active_non_embedding']}, "
          f"D {area:.0f}")


def _print_selfcal_headlines(selfcal: dict[str, dict]) -> None:
    a, b = selfcal.get("a"), selfcal.get("b")

    def error(h: dict | None) -> str:
        if h is None or h["covered"] is None:
            return "n/a  (not trained in this call)" if h is None else "n/a  (the hero has not finished)"
        return f"{h['rel_error_pct']:+.2f}  (target |E| <= 2.0, goal <= 1.0; inside the 90% interval: {h['covered']})"

    first = a or b
    print(f"ladder_selfcal_extrapolation: {first['extrapolation']:.0f}  (target >= 100; the hero's compute over the "
          f"top grid point's, protocol ({'a' if a else 'b'}))")
    print(f"ladder_selfcal_rel_error_pct: {error(a)}")
    print(f"ladder_selfcal_second_config_rel_error_pct: {error(b)}")
    for tag, h in (("", first), ("_second_config", b if a else None)):
        if h is not None:
            print(f"ladder_floor_estimate{tag}: {h['floor']:.3f}  (90% interval "
                  f"{h['floor_lo']:.3f}-{h['floor_hi']:.3f}; estimated from the rungs)")
            print(f"ladder_curve_band_coverage{tag}: {h['curve_coverage']:.3f}  (target >= 0.85; the hero's evals "
                  "from 10% to 100% of its training inside the band)")
            print(f"ladder_curve_band_median_halfwidth_pct{tag}: {h['curve_halfwidth_pct']:.2f}  (target <= 4)")
            print(f"ladder_selfcal_minutes{tag}: {h['minutes']:.1f}  (target <= 90 on 2 cores)")


if __name__ == "__main__":
    with LoadWatch():
        main()
