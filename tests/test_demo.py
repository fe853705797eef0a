"""The main job end to end: `glasslab demo --quick --no-serve` builds the whole lab and its site."""

from __future__ import annotations

import calendar
import json
import sqlite3
import time
from pathlib import Path

import pytest
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def demo_lab(tmp_path_factory) -> tuple[Path, str, float]:
    lab = tmp_path_factory.mktemp("demo") / "lab"
    started = time.monotonic()
    result = run_cli("demo", "--quick", "--no-serve", "--lab", str(lab), timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return lab, result.stdout, time.monotonic() - started


def only(lab: Path, pattern: str) -> Path:
    (match,) = sorted(lab.glob(pattern))
    return match


def test_demo_builds_data_and_report(demo_lab):
    lab, _, _ = demo_lab
    report = json.loads((only(lab, "data-*") / "report.json").read_text())
    assert set(report["domains"]) == {"code", "prose", "reference"}
    assert all(d["tokens"] > 0 and d["eval_tokens"] > 0 for d in report["domains"].values())
    assert report["funnel"][0]["stage"] == "raw" and report["manifest_hash"]


def test_demo_fits_the_ladder_and_preregisters_the_hero(demo_lab):
    lab, stdout, _ = demo_lab
    fit = json.loads((only(lab, "demo-fit-*") / "fit.json").read_text())
    assert len(fit["rungs"]) == 4 and fit["target"] == "eval/macro/loss"
    assert fit["prediction"]["lo"] <= fit["prediction"]["point"] <= fit["prediction"]["hi"]
    assert len(fit["curve"]) == 20
    hero = only(lab, "demo-hero-*")
    record = json.loads((hero / "run.json").read_text())
    assert record["role"] == "hero" and record["prediction"]["point"] == fit["prediction"]["point"]
    assert record["prediction"]["flops"] >= 4 * max(r["flops"] for r in fit["rungs"])
    registered = calendar.timegm(time.strptime(record["prediction"]["registered_at"], "%Y-%m-%dT%H:%M:%SZ"))
    with sqlite3.connect(hero / "metrics.db") as conn:
        first_logged = conn.execute("SELECT MIN(time) FROM scalars").fetchone()[0]
    assert registered <= first_logged
    assert "predicted" in stdout and "relative error" in stdout


def test_demo_hero_has_metrics_samples_and_result(demo_lab):
    lab, _, _ = demo_lab
    hero = only(lab, "demo-hero-*")
    result = json.loads((hero / "result.json").read_text())
    assert 0 < result["eval/macro/loss"] < 10
    with sqlite3.connect(hero / "metrics.db") as conn:
        keys = {k for (k,) in conn.execute("SELECT DISTINCT key FROM scalars")}
        samples = conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    assert {"train/loss", "optim/learning_rate", "eval/macro/loss", "throughput/tokens_per_second"} <= keys
    assert any(k.startswith("moe/layer_") for k in keys)
    assert samples > 0


def test_demo_publishes_the_static_site(demo_lab):
    lab, _, _ = demo_lab
    assert (lab / "site" / "index.html").is_file()
    assert any((lab / "site").rglob("*.js"))


def test_second_run_reuses_every_step(demo_lab):
    lab, _, _ = demo_lab
    started = time.monotonic()
    result = run_cli("demo", "--quick", "--no-serve", "--lab", str(lab), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert time.monotonic() - started < 60
    assert "predicted" in result.stdout
