"""What the executor costs: per step, what --jobs buys, and planning a 1,000-step DAG.

    python bench/lab_bench.py [--smoke]

1. Runs 8 independent steps that each sleep 0.5 s, with --jobs 1 and --jobs 2 interleaved over 5 rounds (1
   in a smoke), each in a fresh lab, then one of those DAGs again (all cached). Overhead per step =
   (wall time - sleep time) / steps at --jobs 1, its median run.
2. Plans (hashes, orders, checks, reads every step record) two 1,000-step DAGs: a ladder-shaped one
   (one data step, 990 runs on it, 9 fits over 110 runs each) and a 1,000-deep chain, each in an empty
   lab and again once every step has a succeeded ``step.json``. The figure is the slowest of the four.

``--smoke`` shrinks both parts (2 steps of 0.05 s, 50-step DAGs) to check that the bench still runs.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from interleave import LoadWatch, headline, interleaved, paired_ratios  # noqa: E402

from glasslab.lab import Executor, Step  # noqa: E402
from glasslab.lab.plan import make_plan  # noqa: E402
from glasslab.layout import STEP_RECORD, write_json_atomic  # noqa: E402

HEADLINES = ("lab/overhead_per_step_s", "lab/jobs2_speedup", "lab/cached_rerun_s", "lab/plan_1000_steps_s")


def nap(ctx) -> None:
    time.sleep(ctx.config["sleep_s"])


def naps(num_steps: int, sleep_s: float) -> list[Step]:
    return [Step(f"nap{i}", "lab_bench:nap", config={"sleep_s": sleep_s, "i": i}) for i in range(num_steps)]


def timed_run(lab: Path, steps: list[Step], jobs: int) -> float:
    start = time.perf_counter()
    report = Executor(lab, jobs=jobs, echo=False).run(steps)
    assert report.ok
    return time.perf_counter() - start


def ladder_dag(num_steps: int) -> list[Step]:
    """One data step, runs that read it, and fits over groups of runs (``num_steps`` in all)."""
    fits = max(1, num_steps // 110)
    data = Step("data", "lab_bench:nap", config={"sleep_s": 0.0, "tokens": 10**9})
    runs = [Step(f"run-{i}", "lab_bench:nap", config={"sleep_s": 0.0, "width": 16 + i % 7, "seed": i},
                 deps=[data]) for i in range(num_steps - 1 - fits)]
    per_fit = -(-len(runs) // fits)
    return [data, *runs] + [Step(f"fit-{f}", "lab_bench:nap", config={"sleep_s": 0.0},
                                 deps=runs[f * per_fit:(f + 1) * per_fit]) for f in range(fits)]


def chain_dag(num_steps: int) -> list[Step]:
    """Each step depends on the one before: the deepest DAG of that size."""
    steps = [Step("link-0", "lab_bench:nap", config={"sleep_s": 0.0})]
    for i in range(1, num_steps):
        steps.append(Step(f"link-{i}", "lab_bench:nap", config={"sleep_s": 0.0}, deps=[steps[-1]]))
    return steps


def planning_seconds(lab: Path, steps: list[Step], repeats: int = 3) -> tuple[float, float]:
    """Best seconds to plan ``steps`` in an empty lab, and once every step has succeeded."""
    def best() -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            plan = make_plan(steps, lab)
            times.append(time.perf_counter() - start)
        return min(times), plan

    empty, plan = best()
    for node in plan.steps:
        node.folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(node.folder / STEP_RECORD, {"name": node.name, "status": "succeeded"})
    done, plan = best()
    assert all(node.action == "cached" for node in plan.steps)
    return empty, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that the bench runs")
    args = parser.parse_args()
    num_naps, sleep_s, dag_steps = (2, 0.05, 50) if args.smoke else (8, 0.5, 1000)
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # so step processes import lab_bench
    with LoadWatch(), tempfile.TemporaryDirectory() as tmp:
        report(Path(tmp), num_naps, sleep_s, dag_steps, repeats=1 if args.smoke else 5)  # a smoke as fast as before


def report(tmp: Path, num_naps: int, sleep_s: float, dag_steps: int, repeats: int) -> None:
    """Parts 1 and 2 of the module's docstring in ``tmp``, then the headlines; --jobs 1 and --jobs 2 are
    interleaved over ``repeats`` rounds, each in fresh labs (bench/interleave.py)."""
    steps = naps(num_naps, sleep_s)
    labs = itertools.count()

    def run_with(jobs: int) -> Callable[[], float]:
        return lambda: timed_run(tmp / f"lab-{next(labs)}", steps, jobs=jobs)

    rounds = interleaved({"jobs1": run_with(1), "jobs2": run_with(2)}, repeats)
    serial = statistics.median(rounds["jobs1"])
    cached = timed_run(tmp / "lab-1", steps, jobs=2)  # the first --jobs 2 lab, run again
    ladder_empty, ladder_done = planning_seconds(tmp / "ladder", ladder_dag(dag_steps))
    chain_empty, chain_done = planning_seconds(tmp / "chain", chain_dag(dag_steps))
    print(f"plan {dag_steps}-step ladder DAG: {ladder_empty:.3f} s empty lab, {ladder_done:.3f} s all succeeded; "
          f"{dag_steps}-deep chain: {chain_empty:.3f} s, {chain_done:.3f} s")
    print(f"lab/overhead_per_step_s: {(serial - num_naps * sleep_s) / num_naps:.3f}  (target < 1.0; the median "
          "--jobs 1 run)")
    speedups = paired_ratios(rounds["jobs1"], rounds["jobs2"])
    print(f"lab/jobs2_speedup: {headline(speedups, 'target > 1.5 on 2 cores')}")
    print(f"lab/cached_rerun_s: {cached:.3f}  (target < 1.0 for {num_naps} steps)")
    worst = max(ladder_empty, ladder_done, chain_empty, chain_done)
    print(f"lab/plan_1000_steps_s: {worst:.3f}  (target < 1.0; {dag_steps} steps, slowest of the four plans)")


if __name__ == "__main__":
    main()
