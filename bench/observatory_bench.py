"""Observatory benchmarks: a 1M-point series drawn from rollups, live latency with 20 open pages,
and what keeping the rollups costs the trainer.

    python bench/observatory_bench.py [--points 1000000] [--pages 20] [--seconds 6]

Prints headline figures one per line as ``name: value  (target …)``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from glasslab import track
from glasslab.observatory.series import read_series
from glasslab.track.store import RunStore

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC.parent / "tests"))
from observatory_lab import free_port  # noqa: E402


def build_long_run(run_dir: Path, points: int) -> float:
    """A run with ``points`` steps of train/loss (a spike in the middle); returns seconds to log it."""
    start = time.perf_counter()
    run = track.init(run_dir, {"bench": "long"})
    for step in range(points):
        run.log({"train/loss": 100.0 if step == points // 2 else 2.0 + 1.0 / (1 + step) ** 0.5}, step)
    run.finish()
    return time.perf_counter() - start


def long_series(run_dir: Path, port: int) -> dict[str, float]:
    with track.RunReader(run_dir) as reader:
        start = time.perf_counter()
        series = read_series(reader, "train/loss", 2000)
        rollup_s = time.perf_counter() - start
        assert max(series["max"]) == 100.0, "the spike must survive downsampling"
        start = time.perf_counter()
        reader.conn.execute(
            "SELECT step / 500, MIN(value), MAX(value) FROM scalars WHERE key='train/loss' "
            "GROUP BY step / 500"
        ).fetchall()
        group_by_s = time.perf_counter() - start
    url = f"http://127.0.0.1:{port}/api/page/run?id={run_dir.name}"
    times = []
    for _ in range(5):
        start = time.perf_counter()
        response = httpx.get(url, timeout=30)
        times.append(time.perf_counter() - start)
        assert len(response.json()["series"]["train/loss"]["steps"]) <= 2000
    return {"points": len(series["steps"]), "rollup_ms": 1e3 * rollup_s, "group_by_ms": 1e3 * group_by_s,
            "http_ms": 1e3 * statistics.median(times)}


def live_latency(lab: Path, port: int, pages: int, seconds: float) -> list[float]:
    """Seconds from ``run.log`` to each open page receiving the step, while a run logs 10 steps/s."""
    run_dir = lab / "live-run"
    run = track.init(run_dir, {"bench": "live"})
    run.log({"train/loss": 3.0}, 0)
    run.flush()
    logged_at: dict[int, float] = {}
    latencies: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()
    ready = threading.Barrier(pages + 1, timeout=30)
    with track.RunReader(run_dir) as reader:
        cursor = json.dumps({"live-run": reader.cursor()})  # pages start from now, as a loaded page does

    def page() -> None:
        try:
            follow()
        except httpx.HTTPError:
            pass  # the server went away at the end of the run

    def follow() -> None:
        url = f"http://127.0.0.1:{port}/api/stream"
        params = {"page": "run", "id": "live-run", "cursor": cursor}
        with httpx.stream("GET", url, params=params, timeout=None) as response:
            response.raise_for_status()
            lines = response.iter_lines()
            for line in lines:
                if line.startswith("event: hello"):
                    ready.wait()
                    break
            for line in lines:
                if stop.is_set():
                    return
                if not line.startswith("data: "):
                    continue
                now = time.monotonic()
                for delta in json.loads(line[6:]).get("runs", {}).values():
                    for key, step, _ in delta["scalars"]:
                        if key == "train/loss" and step in logged_at:
                            with lock:
                                latencies.append(now - logged_at[step])

    threads = [threading.Thread(target=page, daemon=True) for _ in range(pages)]
    for t in threads:
        t.start()
    ready.wait()
    step = 1
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        logged_at[step] = time.monotonic()
        run.log({"train/loss": 3.0 - 1e-3 * step, **{f"bench/m{i}": float(i) for i in range(49)}}, step)
        step += 1
        time.sleep(0.1)
    run.flush()
    time.sleep(1.5)
    stop.set()
    run.finish()
    return latencies


def logging_cost(tmp: Path, steps: int = 3000, scalars: int = 50) -> tuple[float, float]:
    """CPU microseconds per ``log`` of ``scalars`` values, with rollups and with them switched off.

    CPU time of this process, not wall time: the machine is shared, and other people's jobs would
    otherwise count as logging cost.
    """

    class NoRollups(RunStore):
        def _roll_up(self) -> None:
            pass

    results = []
    for cls, name in ((RunStore, "with"), (NoRollups, "without")):
        store = cls(tmp / f"cost-{name}")
        metrics = {f"m/{i}": 0.0 for i in range(scalars)}
        start = time.process_time()
        for step in range(steps):
            for key in metrics:
                metrics[key] = step * 1e-3
            store.log(metrics, step)
        store.close()
        results.append(1e6 * (time.process_time() - start) / steps)
    return results[0], results[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--smoke", action="store_true", help="a quick check: 100k points, 3 pages, 2 s")
    args = parser.parse_args()
    if args.smoke:
        args.points, args.pages, args.seconds = 100_000, 3, 2.0
    tmp = Path(tempfile.mkdtemp(prefix="observatory-bench-"))
    lab = tmp / "lab"
    log_s = build_long_run(lab / "long-run", args.points)
    print(f"# logged {args.points} steps in {log_s:.1f} s", flush=True)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    command = [sys.executable, "-m", "glasslab", "serve", "--lab", str(lab), "--port", str(port)]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        series = long_series(lab / "long-run", port)
        latencies = sorted(live_latency(lab, port, args.pages, args.seconds))
    finally:
        server.terminate()
        server.wait(timeout=10)
    with_us, without_us = logging_cost(tmp)
    expected = args.pages * int(args.seconds * 10)
    p95 = latencies[int(0.95 * (len(latencies) - 1))]
    print(f"series_points_drawn: {series['points']}  (from {args.points} logged)")
    print(f"series_1M_to_2000_rollup_ms: {series['rollup_ms']:.1f}  (target < 200)")
    print(f"series_1M_to_2000_http_ms: {series['http_ms']:.1f}  (target < 200)")
    print(f"series_1M_plain_group_by_ms: {series['group_by_ms']:.1f}  (reference: what rollups avoid)")
    print(f"live_latency_p50_s: {statistics.median(latencies):.3f}  ({args.pages} pages, 10 steps/s)")
    print(f"live_latency_p95_s: {p95:.3f}  (target < 1)")
    print(f"live_latency_max_s: {latencies[-1]:.3f}  (target < 1)")
    print(f"live_steps_received: {len(latencies)}  (of ~{expected})")
    print(f"log_50_scalars_cpu_us: {with_us:.0f}  (without rollups {without_us:.0f})")
    print(f"log_cost_pct_of_50ms_step: {100 * with_us / 50_000:.2f}  (target < 1)")


if __name__ == "__main__":
    main()
