"""How much the executor costs per step, and what --jobs buys, on the local backend.

    python bench/lab_bench.py

Runs 8 independent steps that each sleep 0.5 s, with --jobs 1 and --jobs 2, in fresh labs, then the
same DAG again (all cached). Overhead per step = (wall time - sleep time) / steps at --jobs 1.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from glasslab.lab import Executor, Step  # noqa: E402

NUM_STEPS = 8
SLEEP_S = 0.5


def nap(ctx) -> None:
    time.sleep(ctx.config["sleep_s"])


def dag() -> list[Step]:
    return [Step(f"nap{i}", "lab_bench:nap", config={"sleep_s": SLEEP_S, "i": i}) for i in range(NUM_STEPS)]


def timed_run(lab: Path, jobs: int) -> float:
    start = time.perf_counter()
    report = Executor(lab, jobs=jobs, echo=False).run(dag())
    assert report.ok
    return time.perf_counter() - start


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # so step processes import lab_bench
    with tempfile.TemporaryDirectory() as tmp:
        serial = timed_run(Path(tmp) / "j1", jobs=1)
        parallel = timed_run(Path(tmp) / "j2", jobs=2)
        cached = timed_run(Path(tmp) / "j2", jobs=2)
    print(f"lab/overhead_per_step_s: {(serial - NUM_STEPS * SLEEP_S) / NUM_STEPS:.3f}  (target < 1.0)")
    print(f"lab/jobs2_speedup: {serial / parallel:.2f}  (target > 1.5 on 2 cores)")
    print(f"lab/cached_rerun_s: {cached:.3f}  (target < 1.0 for {NUM_STEPS} steps)")


if __name__ == "__main__":
    main()
