"""The static export: `glasslab publish` writes a self-contained site; --watch re-exports what changed."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from glasslab import track
from glasslab.observatory.publish import Publisher, page_file, series_index_file, series_prefix
from observatory_lab import SECRET, build_lab, log_step

SRC = str(Path(__file__).resolve().parents[1] / "src")
publish_module = importlib.import_module("glasslab.observatory.publish")  # the package's `publish` is the function


def glasslab(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "glasslab", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_publish_cli_writes_a_self_contained_site(tmp_path):
    lab = build_lab(tmp_path / "lab")
    done = glasslab("publish", "--lab", str(lab), "--out", str(tmp_path / "site"))
    assert done.returncode == 0, done.stderr
    site = tmp_path / "site"
    names = {p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()}
    for expected in ("index.html", "compare.html", page_file("run", "hero-dddd4444"),
                     page_file("ladder", "ladder-cccc3333"), page_file("data", "data-abc12345"),
                     page_file("provenance", "hero-dddd4444"), "static/uPlot.iife.min.js", "data/site.js"):
        assert expected in names
    text = "".join(p.read_text() for p in site.rglob("*") if p.suffix in (".html", ".js"))
    assert SECRET not in text
    html = "".join(p.read_text() for p in site.glob("*.html"))
    assert 'src="http' not in html and 'href="http' not in html and "//cdn" not in html  # nothing remote
    assert "MIT License" in (site / "static" / "uPlot.iife.min.js").read_text()[:400]
    bad = glasslab("publish", "--lab", str(tmp_path / "missing"), "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "--lab" in bad.stderr and "Traceback" not in bad.stderr


def test_watch_reexports_only_changed_pages(tmp_path):
    lab = build_lab(tmp_path / "lab")
    publisher = Publisher(lab, tmp_path / "site")
    first = publisher.export()
    assert page_file("run", "hero-dddd4444") in first and len(first) >= 8
    assert publisher.export() == []
    run = track.init(lab / "rung-s-aaaa1111", {}, reason="resume")
    log_step(run, 30)
    run.finish()
    again = set(publisher.export())
    assert page_file("run", "rung-s-aaaa1111") in again
    assert page_file("run", "hero-dddd4444") not in again and page_file("provenance", "hero-dddd4444") not in again
    assert page_file("data", "data-abc12345") in again  # the rung trained on it: its per-domain evals show there
    # A run's series (what its page and the compare page load): chunk files and their index, written
    # again for the changed run only.
    assert series_index_file("rung-s-aaaa1111") in again and series_index_file("hero-dddd4444") not in again
    chunk = f"{series_prefix('rung-s-aaaa1111')}-0.js"
    assert chunk in again
    chunk_js = (tmp_path / "site" / chunk).read_text()
    assert chunk_js.startswith("(window.GLASSLAB_CHUNKS = window.GLASSLAB_CHUNKS || {})")
    assert '"train/loss":{"steps":[0,1,2' in chunk_js and ",30]" in chunk_js
    index_js = (tmp_path / "site" / series_index_file("rung-s-aaaa1111")).read_text()
    assert '"train/loss":0' in index_js and '"moe/layer_0/expert_load":' in index_js


def test_a_runs_series_are_chunks_its_index_names_and_stale_chunks_go(tmp_path, monkeypatch):
    lab = build_lab(tmp_path / "lab")
    site, run_id = tmp_path / "site", "rung-s-aaaa1111"
    monkeypatch.setattr(publish_module, "CHUNK_BYTES", 1000)  # a metric or two a chunk
    publisher = Publisher(lab, site)
    publisher.export()

    def chunks() -> dict[str, dict]:
        return {p.name: json.loads(p.read_text().split("] = ", 1)[1].rstrip(";\n"))
                for p in site.glob(f"{series_prefix(run_id)}-[0-9]*.js")}

    def index() -> dict:
        return json.loads((site / series_index_file(run_id)).read_text().split("] = ", 1)[1].rstrip(";\n"))

    before = chunks()
    assert len(before) >= 8
    with track.RunReader(lab / run_id) as reader:
        keys, vector_keys = reader.scalar_keys(), reader.vector_keys()
    # Every metric and vector in exactly the chunk its index names.
    for kind, names in (("scalars", keys), ("vectors", vector_keys)):
        assert set(index()[kind]) == set(names)
        for key, n in index()[kind].items():
            held = before[f"{series_prefix(run_id).split('/')[-1]}-{n}.js"]
            assert key in held[kind] and held[kind][key]["steps"][-1] == 29
    monkeypatch.setattr(publish_module, "CHUNK_BYTES", 10**7)  # now one chunk of series, one of vectors
    run = track.init(lab / run_id, {}, reason="resume")
    log_step(run, 30)
    run.finish()
    publisher.export()
    assert sorted(chunks()) == sorted(f"{series_prefix(run_id).split('/')[-1]}-{n}.js" for n in (0, 1))
    assert set(index()["scalars"].values()) == {0} and chunks()[f"{series_prefix(run_id).split('/')[-1]}-0.js"][
        "scalars"]["train/loss"]["steps"][-1] == 30


def test_publish_watch_cli_follows_a_run(tmp_path):
    lab = build_lab(tmp_path / "lab")
    site = tmp_path / "site"
    command = [sys.executable, "-m", "glasslab", "publish", "--lab", str(lab), "--out", str(site), "--watch",
               "--every", "0.3"]
    watcher = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": SRC}, stdout=subprocess.DEVNULL)
    data_js = site / f"{series_prefix('rung-s-aaaa1111')}-0.js"  # its series: the first (only) chunk
    try:
        deadline = time.monotonic() + 20
        while not data_js.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ",29]" in data_js.read_text()
        run = track.init(lab / "rung-s-aaaa1111", {}, reason="resume")
        log_step(run, 30)
        run.finish()
        while ",30]" not in data_js.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ",30]" in data_js.read_text()
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)


def test_serve_cli_answers_and_stops(tmp_path):
    from observatory_lab import free_port

    lab = build_lab(tmp_path / "lab")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": SRC}
    command = [sys.executable, "-m", "glasslab", "serve", "--lab", str(lab), "--port", str(port)]
    server = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        import httpx

        for _ in range(100):
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/api/page/overview", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        runs = {r["id"] for r in response.json()["runs"]}
        assert runs == {"hero-dddd4444", "rung-m-bbbb2222", "rung-s-aaaa1111", "fork-eeee5555"}
    finally:
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=10)
    assert f"http://127.0.0.1:{port}/" in out
