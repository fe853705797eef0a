"""Logging cost of the tracker per training step, as a fraction of a 50 ms step (target < 1%).

A 50 ms step with the store's 1 s flush interval commits every 20 steps; this bench logs 50 scalars
per step and flushes every 20 steps, so the measured cost per step includes the amortised commit.
Side by side it measures the naive alternative (one SQLite transaction per step) for comparison.

    python bench/track_bench.py [--steps 4000] [--smoke]

Both ways of logging run interleaved over ``--repeats`` rounds (bench/interleave.py), each round in a fresh
run; the headlines are medians with their spread. ``--smoke`` (200 steps, 2 rounds) only checks that the bench
still runs.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from interleave import LoadWatch, headline, interleaved, paired_ratios

from glasslab import track

STEP_SECONDS = 0.050
SCALARS = 50
STEPS_PER_FLUSH = round(1.0 / STEP_SECONDS)


def cost_per_step(run_dir: Path, steps: int, steps_per_flush: int) -> float:
    """Seconds of logging per step (50 scalars, a commit every ``steps_per_flush`` steps)."""
    run = track.init(run_dir, {"bench": True})
    run.store.flush_seconds = float("inf")  # flush on our schedule, as a 50 ms step would
    names = [f"bench/metric_{i}" for i in range(SCALARS)]
    start = time.perf_counter()
    for step in range(steps):
        run.log({name: step * 1e-3 + i for i, name in enumerate(names)}, step)
        if step % steps_per_flush == steps_per_flush - 1:
            run.flush()
    run.flush()
    elapsed = time.perf_counter() - start
    run.finish()
    return elapsed / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000, help="steps logged in all, over the rounds")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds of the two ways of logging")
    parser.add_argument("--smoke", action="store_true", help="200 steps in 2 rounds: check that the bench runs")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.repeats = 200, 2
    chunk = args.steps // args.repeats
    with LoadWatch(), tempfile.TemporaryDirectory() as tmp:
        runs = itertools.count()

        def logging(steps: int, steps_per_flush: int) -> Callable[[], float]:
            return lambda: cost_per_step(Path(tmp) / f"run-{next(runs)}", steps, steps_per_flush)

        rounds = interleaved({"batched": logging(chunk, STEPS_PER_FLUSH),
                              "per_step": logging(max(chunk // 10, 50), 1)}, args.repeats)
        batched, per_step = statistics.median(rounds["batched"]), statistics.median(rounds["per_step"])
        print(f"steps: {args.steps} in {args.repeats} rounds, scalars per step: {SCALARS}, commit every "
              f"{STEPS_PER_FLUSH} steps")
        print(f"batched logging: {batched * 1e6:.0f} us/step; one transaction per step: {per_step * 1e6:.0f} us/step "
              "(medians)")
        fractions = [seconds / STEP_SECONDS for seconds in rounds["batched"]]
        print(f"track_log_cost_fraction_of_50ms_step: {headline(fractions, 'target < 0.01', digits=4)}")
        ratios = paired_ratios(rounds["per_step"], rounds["batched"])
        print(f"track_per_step_commit_vs_batched_ratio: {headline(ratios, 'higher = batching matters', digits=1)}")


if __name__ == "__main__":
    main()
