"""The data page's Map section in headless Chromium: 1,000 content domains drawn fast, sortable, and a click
shows one domain's terms, documents with provenance and per-source bars, live and in the published site."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from glasslab.data.map import FORMAT, MAP_FILE
from glasslab.layout import file_sha256
from glasslab.observatory.publish import page_file, publish
from observatory_lab import XSS, chromium_path, serve_lab

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")
K = 1000


def synthetic_map(manifest_hash: str, k: int = K) -> dict:
    """A map of ``k`` domains on a spiral; domain ``c`` holds ``k - c`` documents of 100 tokens."""
    import math

    document = {"domain": "web", "split": "train", "document": 3, "distance": 0.1, "excerpt": XSS,
                "provenance": {"source": "tiny-web", "file": "pages.jsonl", "line": 7}}
    clusters = [{"id": c, "name": f"term{c} · word{c}", "terms": [[f"term{c}", 0.2], [f"word{c}", 0.1]],
                 "documents": k - c, "tokens": 100 * (k - c), "share": (k - c) / (k * (k + 1) / 2),
                 "heldout_documents": 1, "heldout_tokens": 50, "heldout_share": 1 / k, "mean_distance": 0.5,
                 "sources": {"tiny-web": {"tokens": 100 * (k - c), "share_of_cluster": 1.0, "share_of_source": 0.5}},
                 "representatives": [document], "samples": [document],
                 "xy": [c / k * math.cos(c / 20), c / k * math.sin(c / 20)]} for c in range(k)]
    return {"format": FORMAT, "manifest_hash": manifest_hash, "k": k, "fine_k": 4 * k, "documents": 500500,
            "heldout_documents": k, "tokens": 50050000, "heldout_tokens": 50 * k, "clusters": clusters,
            "settings": {"k": k, "fine_k": 4 * k, "embedder": "tfidf", "dims": 256, "sample": 20000,
                         "min_share": 0.0, "seed": 0}}


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("map-page") / "lab"
    data = root / "data-abc12345"
    data.mkdir(parents=True)
    (data / "step.json").write_text(json.dumps({"name": "data", "hash": "abc12345", "status": "succeeded"}))
    (data / "report.json").write_text(json.dumps({"manifest_hash": "abc123", "domains": {
        "web": {"documents": 500500, "tokens": 50050000, "bytes": 1, "bytes_per_token": 3.0}}}))
    (data / "manifest.json").write_text(json.dumps({"format": "glasslab-dataset/2", "domains": {}}))
    (root / "map-0123abcd").mkdir()
    (root / "map-0123abcd" / MAP_FILE).write_text(json.dumps(synthetic_map(file_sha256(data / "manifest.json"))))
    return root


def distinct_colours(png: bytes) -> int:
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        data = image.convert("RGB").tobytes()
    return len({data[i:i + 3] for i in range(0, len(data), 3)})


def check_map(page, folder: Path) -> None:
    """The Map section's checks; its picture and a domain's detail are kept in ``folder`` to look at."""
    assert page.locator(".map-disc").count() == K
    assert page.locator(".map-table tbody tr").count() == K
    labels = page.locator(".map-label").evaluate_all("ls => ls.map(l => { const b = l.getBBox(); "
                                                     "return [b.x, b.y, b.x + b.width, b.y + b.height]; })")
    assert 20 <= len(labels) <= 40  # the largest domains that have room for a label
    assert not [(a, b) for i, a in enumerate(labels) for b in labels[i + 1:]
                if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]]  # no label over another
    png = page.locator(".map-picture").screenshot(path=folder / "map-picture.png")
    assert distinct_colours(png) > 100  # coloured discs, not one blot
    page.locator(".map-disc[data-cluster='7']").dispatch_event("click")
    detail = page.locator("#map-detail")
    assert detail.get_attribute("data-cluster") == "7"
    assert "term7 · word7" in detail.inner_text() and "pages.jsonl:7" in detail.inner_text()
    assert detail.locator(".map-bars .bar").count() == 2
    assert detail.locator("pre", has_text=XSS).count() == 2 and page.evaluate("() => window.__xss") is None
    detail.screenshot(path=folder / "map-detail.png")
    page.locator(".map-table th", has_text="tokens").click()  # descending first: the largest domain on top
    assert page.locator(".map-table tbody tr").first.get_attribute("data-cluster") == "0"
    page.locator(".map-table th", has_text="tokens").click()
    assert page.locator(".map-table tbody tr").first.get_attribute("data-cluster") == str(K - 1)
    page.locator(".map-table tbody tr").first.click()
    assert detail.get_attribute("data-cluster") == str(K - 1)


def test_map_section_live_with_a_thousand_domains(lab, page, tmp_path):
    with serve_lab(lab) as server:
        started = time.monotonic()
        page.goto(f"{server.url}/data/data-abc12345")
        page.wait_for_selector("body[data-ready='1']")
        assert time.monotonic() - started < 10  # served, fetched and drawn on a busy 2-core machine
        drawn_ms = page.evaluate("() => window.GLASSLAB_TIMING.mapMs")
        assert 0 < drawn_ms < 1500, drawn_ms
        check_map(page, tmp_path)


def test_map_section_in_the_published_site(lab, page, tmp_path):
    publish(lab, tmp_path / "site")
    page.goto((tmp_path / "site" / page_file("data", "data-abc12345")).as_uri())
    page.wait_for_selector("body[data-ready='1']")
    check_map(page, tmp_path)
