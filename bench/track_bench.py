"""Logging cost of the tracker per training step, as a fraction of a 50 ms step (target < 1%).

A 50 ms step with the store's 1 s flush interval commits every 20 steps; this bench logs 50 scalars
per step and flushes every 20 steps, so the measured cost per step includes the amortised commit.
Side by side it measures the naive alternative (one SQLite transaction per step) for comparison.

    python bench/track_bench.py [--steps 4000] [--smoke]

``--smoke`` (200 steps) only checks that the bench still runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

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
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--smoke", action="store_true", help="200 steps: check that the bench runs")
    args = parser.parse_args()
    if args.smoke:
        args.steps = 200
    with tempfile.TemporaryDirectory() as tmp:
        batched = cost_per_step(Path(tmp) / "batched", args.steps, STEPS_PER_FLUSH)
        per_step = cost_per_step(Path(tmp) / "per_step", max(args.steps // 10, 100), 1)
    print(f"steps: {args.steps}, scalars per step: {SCALARS}, commit every {STEPS_PER_FLUSH} steps")
    print(f"batched logging: {batched * 1e6:.0f} us/step; one transaction per step: {per_step * 1e6:.0f} us/step")
    print(f"track_log_cost_fraction_of_50ms_step: {batched / STEP_SECONDS:.4f}  (target < 0.01)")
    print(f"track_per_step_commit_vs_batched_ratio: {per_step / batched:.1f}  (higher = batching matters)")


if __name__ == "__main__":
    main()
