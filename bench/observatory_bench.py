"""Observatory benchmarks: a 1M-point series drawn from rollups, live latency with 20 open pages,
what keeping the rollups costs the trainer; the lab at scale: a synthetic lab of 1,000 runs x
1,000 steps x 50 metrics plus 10 runs x 100,000 steps, written in bulk in the real run format, with
the time of its overview, run and compare pages through ``glasslab serve`` and of the round of
``publish --watch`` that re-exports one changed run; and a run at a real run's width: 500 scalar
metrics and 48 layers x 64 experts of vectors every 100 steps over 100,000 steps, its run page in
headless Chromium on the live server and on the static site (first chart drawn after navigation, a
keypress in the search box to the filtered charts drawn, the JS heap with every chart drawn).

    python bench/observatory_bench.py [--points 1000000] [--pages 20] [--seconds 6]
        [--lab-runs 1000 --lab-steps 1000 --lab-metrics 50 --long-runs 10 --long-steps 100000]
        [--wide-steps 100000 --wide-metrics 500 --wide-layers 48 --wide-experts 64]
        [--lab-dir /tmp] [--skip-lab] [--skip-wide]

Prints headline figures one per line as ``name: value  (target …)``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import httpx

from glasslab import track
from glasslab.layout import STEP_RECORD, write_json_atomic
from glasslab.observatory.publish import Publisher, page_file, publish
from glasslab.observatory.series import read_series
from glasslab.track.run_record import build_record, write_record
from glasslab.track.store import RunStore

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC.parent / "tests"))
from interleave import LoadWatch, headline, interleaved  # noqa: E402

from observatory_lab import CHROMIUM_ARGS, chromium_path, free_port, write_wide_run  # noqa: E402


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
    url = f"http://127.0.0.1:{port}/api/series?id={run_dir.name}&key=train/loss"
    times = []
    for _ in range(5):
        start = time.perf_counter()
        response = httpx.get(url, timeout=30)
        times.append(time.perf_counter() - start)
        assert len(response.json()["train/loss"]["steps"]) <= 2000
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


def logging_cost(tmp: Path, steps: int = 3000, scalars: int = 50, repeats: int = 5) -> dict[str, list[float]]:
    """CPU microseconds per ``log`` of ``scalars`` values, with rollups (``with``) and with them switched off
    (``without``): ``steps`` logs on each store, in ``repeats`` chunks interleaved between the two
    (bench/interleave.py), each chunk ending in a flush. Returns each side's figure by chunk.

    CPU time of this process, not wall time: the machine is shared, and other people's jobs would
    otherwise count as logging cost.
    """

    class NoRollups(RunStore):
        def _roll_up(self) -> None:
            pass

    stores = {"with": RunStore(tmp / "cost-with"), "without": NoRollups(tmp / "cost-without")}
    chunk = steps // repeats
    metrics = {f"m/{i}": 0.0 for i in range(scalars)}
    done = dict.fromkeys(stores, 0)

    def side(name: str) -> Callable[[], float]:
        def us_per_log() -> float:
            start = time.process_time()
            for step in range(done[name], done[name] + chunk):
                for key in metrics:
                    metrics[key] = step * 1e-3
                stores[name].log(metrics, step)
            stores[name].flush()
            done[name] += chunk
            return 1e6 * (time.process_time() - start) / chunk
        return us_per_log

    samples = interleaved({name: side(name) for name in stores}, repeats)
    for store in stores.values():
        store.close()
    return samples


# --- the lab at scale ---------------------------------------------------------------------------

# What every synthetic run logs first (the names the pages look for); the rest are filler metrics.
LAB_KEYS = ("train/loss", "train/tokens", "optim/learning_rate", "grad/norm/total", "eval/macro/loss")
EVAL_EVERY = 50  # eval/macro/loss is logged every 50 steps, as a trainer's evals are
CHUNK_STEPS = 20_000  # steps per transaction: a long run is written in a few commits, not millions
TOKENS_PER_STEP = 4096


def lab_keys(metrics: int) -> list[str]:
    return [*LAB_KEYS[:metrics], *(f"bench/metric_{i:02d}" for i in range(metrics - len(LAB_KEYS)))]


def write_synthetic_run(spec: tuple[Path, int, int, int, dict]) -> int:
    """One run in the real format: ``run.json``, ``step.json`` and a ``metrics.db`` written through
    :class:`RunStore` with its buffer made large, so each transaction holds ``CHUNK_STEPS`` steps and
    the store keeps its rollups exactly as for a trainer. Returns the scalar rows written."""
    folder, steps, metrics, seed, record = spec
    write_record(folder, record | {"steps": steps, "seed": seed})
    write_json_atomic(folder / STEP_RECORD, {"name": folder.name, "status": "succeeded", "attempts": 1,
                                              "error": None, "timings": {"created": time.time()}})
    keys = lab_keys(metrics)
    train_keys = [k for k in keys if k != "eval/macro/loss"]
    scale = 1.0 + (seed % 7) / 10
    store = RunStore(folder, flush_rows=sys.maxsize, flush_seconds=math.inf)
    store.conn.execute("PRAGMA cache_size=-262144")  # 256 MiB: a long run's index stays in memory
    rows = 0
    for step in range(steps):
        loss = 2.0 + 3.0 * scale / math.sqrt(1.0 + step)
        values = [loss, float((step + 1) * TOKENS_PER_STEP), 3e-3 * min(1.0, (step + 1) / 100), 1.0 / (1 + step),
                  *(loss * (1.0 + 0.01 * i) for i in range(len(train_keys) - 4))]
        logged = dict(zip(train_keys, values, strict=True))
        if "eval/macro/loss" in keys and step % EVAL_EVERY == EVAL_EVERY - 1:
            logged["eval/macro/loss"] = loss + 0.1
        store.log(logged, step)
        rows += len(logged)
        if step % CHUNK_STEPS == CHUNK_STEPS - 1:
            store.flush()
    if seed % 10 == 0:
        store.annotate("spike_skipped", "loss spike skipped", step=steps // 2, severity="warning")
    store.close()
    return rows


def write_lab(lab: Path, runs: int, steps: int, metrics: int, long_runs: int, long_steps: int,
              writers: int) -> tuple[list[str], list[str], int]:
    """Write the synthetic lab with ``writers`` processes; returns (short run ids, long run ids, rows)."""
    template = build_record({"bench": "lab-scale", "train": {"lr": 3e-3}}, None)
    template |= {"size_name": "3.2M-A0.9M", "flops_per_token": 6.0e6}
    long_ids = [f"long-{i:02d}" for i in range(long_runs)]
    short_ids = [f"run-{i:04d}" for i in range(runs)]
    # Long runs first, so no writer is left alone with one at the end.
    specs = [(lab / run_id, long_steps, metrics, i, template | {"role": "hero"}) for i, run_id in enumerate(long_ids)]
    specs += [(lab / run_id, steps, metrics, i, template | {"role": "rung", "ladder": f"ladder-{i // 100}"})
              for i, run_id in enumerate(short_ids)]
    lab.mkdir(parents=True, exist_ok=True)
    with multiprocessing.get_context("fork").Pool(writers) as pool:
        rows = sum(pool.imap_unordered(write_synthetic_run, specs))
    return short_ids, long_ids, rows


def disk_bytes(folder: Path) -> int:
    """Bytes the folder takes on disk (allocated blocks, as ``du`` counts them)."""
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def page_ms(port: int, path: str, repeats: int = 5) -> tuple[float, float]:
    """(milliseconds of the first GET of ``path``, median of the next ``repeats``): the first one reads
    the stores; the server then keeps what it read while they are unchanged, as for a page reloaded."""
    url = f"http://127.0.0.1:{port}{path}"
    times = []
    for _ in range(1 + repeats):
        start = time.perf_counter()
        httpx.get(url, timeout=300).raise_for_status()
        times.append(time.perf_counter() - start)
    return 1e3 * times[0], 1e3 * statistics.median(times[1:])


def publish_one_changed_run(lab: Path, out: Path, run_id: str, new_steps: int = 10) -> dict[str, float]:
    """Seconds of the first export of the lab, and of the watcher's next round after ``run_id`` logged
    ``new_steps`` more steps (``publish --watch`` calls :meth:`Publisher.export` every few seconds;
    the round is what we time, the sleep between rounds is not)."""
    publisher = Publisher(lab, out)
    start = time.perf_counter()
    publisher.export()
    first_s = time.perf_counter() - start
    assert not publisher.export(), "an unchanged lab must export nothing"
    store = RunStore(lab / run_id, reason="resume")
    last = store.conn.execute("SELECT MAX(step) FROM scalars").fetchone()[0]
    for step in range(last + 1, last + 1 + new_steps):
        store.log({"train/loss": 2.0, "train/tokens": float((step + 1) * TOKENS_PER_STEP)}, step)
    store.close()
    start = time.perf_counter()
    written = publisher.export()
    round_s = time.perf_counter() - start
    assert page_file("run", run_id) in written, f"the changed run's page was not re-exported: {written}"
    return {"first_s": first_s, "round_s": round_s, "pages": len(written)}


def lab_at_scale(args: argparse.Namespace) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="observatory-lab-scale-", dir=args.lab_dir))
    lab = tmp / "lab"
    try:
        start = time.perf_counter()
        short_ids, long_ids, rows = write_lab(lab, args.lab_runs, args.lab_steps, args.lab_metrics, args.long_runs,
                                              args.long_steps, args.writers)
        write_s = time.perf_counter() - start
        size = disk_bytes(lab)
        print(f"# lab written: {len(short_ids)} runs x {args.lab_steps} steps + {len(long_ids)} x "
              f"{args.long_steps} steps, {args.lab_metrics} metrics, {rows:,} scalar rows in {write_s:.0f} s "
              f"({rows / write_s / 1e3:.0f}k rows/s, {args.writers} writers); {size / 1e9:.2f} GB on disk", flush=True)
        compared = short_ids[:6] + long_ids[:2]
        with served(lab) as port:
            result = {
                "overview": page_ms(port, "/api/page/overview"),
                "run": page_ms(port, f"/api/page/run?id={(long_ids or short_ids)[0]}"),
                "compare": page_ms(port, f"/api/page/compare?runs={','.join(compared)}"),
            }
        for name, (first, _) in result.items():
            print(f"# {name} page, first load after the server started: {first:.0f} ms", flush=True)
        publish = publish_one_changed_run(lab, tmp / "site", short_ids[len(short_ids) // 2])
        print(f"# first export of the lab: {publish['first_s']:.1f} s; after one run changed, "
              f"the next round wrote {publish['pages']} file(s)", flush=True)
        return {**result, "publish_s": publish["round_s"], "disk_gb": size / 1e9, "write_s": write_s,
                "compared": f"{len(compared)} runs, {len(compared) - 6} of them long"}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --- a run at a real run's width ----------------------------------------------------------------

WIDE_RUN = "wide-run-0000aaaa"
# Typed one key at a time, after the last layer's prefix (``layer_47/`` at 48 layers); each keypress is timed
# to its filtered charts drawn.
SEARCHES = ("eval/task", "debug/metric_1", "grad/norm/l")


def all_series_bytes(port: int, keys: list[str]) -> int:
    """Bytes of every series of the run at a chart's resolution: what a page that sent every chart up
    front would ship (the page before this one did)."""
    total = 0
    for start in range(0, len(keys), 200):
        params = [("id", WIDE_RUN), *(("key", k) for k in keys[start:start + 200])]
        total += len(httpx.get(f"http://127.0.0.1:{port}/api/series", params=params, timeout=600).content)
    return total


def in_view_drawn(page) -> None:
    """Wait until every chart slot in the viewport is drawn."""
    page.wait_for_function("""() => ![...document.querySelectorAll('#run-charts .slot:not(.drawn)')].some(n => {
        const r = n.getBoundingClientRect(); return r.height > 0 && r.bottom > 0 && r.top < innerHeight; })""",
                           timeout=120_000, polling=50)


def browse(browser, url: str, loads: int, searches: tuple[str, ...]) -> dict[str, float]:
    """The run page at ``url`` in fresh browser contexts: seconds from navigation to the first chart
    drawn (each of ``loads`` loads), milliseconds from each keypress of ``searches`` to its filtered
    charts drawn, and the JS heap (MB) once every chart of the page is drawn."""
    firsts = []
    for _ in range(loads):
        context = browser.new_context(viewport={"width": 1300, "height": 900})
        page = context.new_page()
        page.goto(url)
        page.wait_for_function("() => window.GLASSLAB_TIMING && window.GLASSLAB_TIMING.firstChart != null",
                               timeout=120_000, polling=20)
        firsts.append(page.evaluate("() => window.GLASSLAB_TIMING.firstChart") / 1e3)
        context.close()
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=120_000)
    box = page.locator("input[name=q]")
    keypresses = []
    for query in searches:
        box.fill("")
        page.wait_for_function("() => document.body.dataset.filtered === ''", timeout=120_000)
        in_view_drawn(page)
        for n in range(1, len(query) + 1):
            page.keyboard.press(query[n - 1])
            page.wait_for_function("q => document.body.dataset.filtered === q", arg=query[:n], timeout=120_000,
                                   polling=10)
            keypresses.append(page.evaluate("() => window.GLASSLAB_TIMING.filter.ms"))
            in_view_drawn(page)  # the charts just outside the view too, before the next key
    box.fill("")
    page.wait_for_function("() => document.body.dataset.filtered === ''", timeout=120_000)
    height = page.evaluate("() => document.documentElement.scrollHeight")
    for y in range(0, height, 800):  # every chart of the page drawn: the heap at its largest
        page.evaluate("y => window.scrollTo(0, y)", y)
        in_view_drawn(page)
    drawn = page.evaluate("() => document.querySelectorAll('#run-charts .slot.drawn').length")
    cdp = context.new_cdp_session(page)
    before_gc = cdp.send("Runtime.getHeapUsage")["usedSize"]
    cdp.send("HeapProfiler.collectGarbage")
    after_gc = cdp.send("Runtime.getHeapUsage")["usedSize"]
    context.close()
    keypresses.sort()
    return {"first_s": statistics.median(firsts), "first_max_s": max(firsts),
            "key_p50_ms": statistics.median(keypresses), "key_p95_ms": keypresses[int(0.95 * (len(keypresses) - 1))],
            "key_max_ms": keypresses[-1], "keys": len(keypresses), "heap_mb": after_gc / 1e6,
            "heap_before_gc_mb": before_gc / 1e6, "drawn": drawn}


def wide_run(args: argparse.Namespace) -> dict[str, object]:
    """Write the wide run, time its run page's data, then browse it live and published."""
    tmp = Path(tempfile.mkdtemp(prefix="observatory-wide-", dir=args.lab_dir))
    lab = tmp / "lab"
    try:
        start = time.perf_counter()
        rows = write_wide_run(lab / WIDE_RUN, args.wide_steps, args.wide_metrics, args.wide_layers, args.wide_experts)
        write_s = time.perf_counter() - start
        print(f"# wide run written: {args.wide_metrics} metrics x {args.wide_steps} steps ({rows:,} scalar rows), "
              f"{args.wide_layers} x {args.wide_experts} vectors every 100 steps, in {write_s:.0f} s; "
              f"{disk_bytes(lab) / 1e9:.2f} GB on disk", flush=True)
        result: dict[str, object] = {}
        browsing = (args.first_loads, (f"layer_{args.wide_layers - 1}/", *SEARCHES)[:args.searches])
        with served(lab) as port:
            first_ms, page_ms_warm = page_ms(port, f"/api/page/run?id={WIDE_RUN}")  # the server is warm after
            data = httpx.get(f"http://127.0.0.1:{port}/api/page/run?id={WIDE_RUN}", timeout=300)
            result |= {"page_first_ms": first_ms, "page_ms": page_ms_warm, "page_kb": len(data.content) / 1e3,
                       "all_mb": all_series_bytes(port, data.json()["keys"]) / 1e6}
            print(f"# wide run page data: first load {first_ms:.0f} ms, then {page_ms_warm:.0f} ms", flush=True)
            if chromium_path():
                from playwright.sync_api import sync_playwright

                with sync_playwright() as p:
                    browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
                    result["live"] = browse(browser, f"http://127.0.0.1:{port}/run/{WIDE_RUN}", *browsing)
                    start = time.perf_counter()
                    index = publish(lab, tmp / "site")
                    result["publish_s"] = time.perf_counter() - start
                    result["static"] = browse(browser, (index.parent / page_file("run", WIDE_RUN)).as_uri(), *browsing)
                    browser.close()
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def print_wide(args: argparse.Namespace, wide: dict) -> None:
    size = (f"{args.wide_metrics} metrics x {args.wide_steps} steps, {args.wide_layers} x {args.wide_experts} "
            "vectors every 100 steps")
    print(f"wide_run_page_ms: {wide['page_ms']:.0f}  ({size}; page data without series, median of 5 after the "
          f"first load of {wide['page_first_ms']:.0f} ms)")
    print(f"wide_page_data_kb: {wide['page_kb']:.0f}  (sent before any chart; every series at a chart's "
          f"resolution would be {wide['all_mb']:.1f} MB)")
    for site in ("live", "static"):
        if site not in wide:
            for name in ("first_chart_s", "search_keypress_ms", "js_heap_mb"):
                print(f"wide_{site}_{name}: n/a  (chromium not found)")
            continue
        b = wide[site]
        print(f"wide_{site}_first_chart_s: {b['first_s']:.2f}  (median of {args.first_loads} loads, slowest "
              f"{b['first_max_s']:.2f}; target <= 1.5)")
        print(f"wide_{site}_search_keypress_ms: {b['key_p50_ms']:.0f}  (median of {b['keys']} keypresses; p95 "
              f"{b['key_p95_ms']:.0f}, max {b['key_max_ms']:.0f}; target <= 100)")
        print(f"wide_{site}_js_heap_mb: {b['heap_mb']:.0f}  (all {b['drawn']} charts drawn, after a GC; "
              f"{b['heap_before_gc_mb']:.0f} before it; target <= 500)")
    if "publish_s" in wide:
        print(f"wide_publish_s: {wide['publish_s']:.1f}  (the static site of the wide run)")


@contextmanager
def served(lab: Path):
    """``glasslab serve`` on ``lab`` in a subprocess, as a user starts it; yields its port."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    command = [sys.executable, "-m", "glasslab", "serve", "--lab", str(lab), "--port", str(port)]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/static/observatory.css", timeout=1)  # no page read yet
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--lab-runs", type=int, default=1000, help="runs of the synthetic lab")
    parser.add_argument("--lab-steps", type=int, default=1000, help="steps of each of those runs")
    parser.add_argument("--lab-metrics", type=int, default=50, help="scalars each run logs (>= 5)")
    parser.add_argument("--long-runs", type=int, default=10, help="long runs added to the lab")
    parser.add_argument("--long-steps", type=int, default=100_000, help="steps of each long run")
    parser.add_argument("--writers", type=int, default=os.cpu_count() or 1, help="processes writing the lab")
    parser.add_argument("--lab-dir", default=None, help="where the synthetic lab goes (deleted after)")
    parser.add_argument("--skip-lab", action="store_true", help="leave the lab-at-scale part out")
    parser.add_argument("--wide-steps", type=int, default=100_000, help="steps of the wide run")
    parser.add_argument("--wide-metrics", type=int, default=500, help="scalar metrics of the wide run")
    parser.add_argument("--wide-layers", type=int, default=48, help="MoE layers of the wide run")
    parser.add_argument("--wide-experts", type=int, default=64, help="experts per layer of the wide run")
    parser.add_argument("--skip-wide", action="store_true", help="leave the wide run out")
    parser.add_argument("--first-loads", type=int, default=3, help="wide run page loads timed to a chart")
    parser.add_argument("--searches", type=int, default=1 + len(SEARCHES), help="queries typed (the last layer's, then "
                        f"{', '.join(SEARCHES)})")
    parser.add_argument("--smoke", action="store_true", help="a quick check: 100k points, 3 pages, 2 s, "
                        "a lab of 20 runs x 200 steps plus one of 5,000 steps, a wide run of 200 metrics x 1,000 "
                        "steps and 8 layers x 16 experts browsed with 1 load and 1 query")
    args = parser.parse_args()
    if args.smoke:
        args.points, args.pages, args.seconds = 100_000, 3, 2.0
        args.lab_runs, args.lab_steps, args.long_runs, args.long_steps = 20, 200, 1, 5000
        args.wide_steps, args.wide_metrics, args.wide_layers, args.wide_experts = 1000, 200, 8, 16
        args.first_loads, args.searches = 1, 1
    if args.lab_metrics < len(LAB_KEYS):
        parser.error(f"--lab-metrics {args.lab_metrics}: expected at least {len(LAB_KEYS)}")
    tmp = Path(tempfile.mkdtemp(prefix="observatory-bench-"))
    lab = tmp / "lab"
    log_s = build_long_run(lab / "long-run", args.points)
    print(f"# logged {args.points} steps in {log_s:.1f} s", flush=True)
    with served(lab) as port:
        series = long_series(lab / "long-run", port)
        latencies = sorted(live_latency(lab, port, args.pages, args.seconds))
    cost_us = logging_cost(tmp, repeats=2 if args.smoke else 5)
    shutil.rmtree(tmp, ignore_errors=True)
    scale = None if args.skip_lab else lab_at_scale(args)
    wide = None if args.skip_wide else wide_run(args)
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
    print(f"log_50_scalars_cpu_us: {statistics.median(cost_us['with']):.0f}  "
          f"(without rollups {statistics.median(cost_us['without']):.0f}; medians)")
    print(f"log_cost_pct_of_50ms_step: {headline([100 * us / 50_000 for us in cost_us['with']], 'target < 1')}")
    if scale is not None:
        size = (f"{args.lab_runs} x {args.lab_steps} steps + {args.long_runs} x {args.long_steps}, "
                f"{args.lab_metrics} metrics")
        print(f"lab_disk_gb: {scale['disk_gb']:.2f}  ({size}; target <= 10)")
        print(f"lab_write_s: {scale['write_s']:.0f}  ({args.writers} writers)")
        print(f"lab_overview_ms: {scale['overview'][1]:.0f}  (median of 5 after the first load; target < 300)")
        print(f"lab_run_page_ms: {scale['run'][1]:.0f}  (a {args.long_steps}-step run; target < 300)")
        print(f"lab_compare_page_ms: {scale['compare'][1]:.0f}  ({scale['compared']}; target < 300)")
        print(f"publish_watch_one_run_s: {scale['publish_s']:.2f}  (one watch round after one run changed; "
              "target < 1)")
    if wide is not None:
        print_wide(args, wide)


if __name__ == "__main__":
    with LoadWatch():
        main()
